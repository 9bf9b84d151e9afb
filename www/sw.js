// The service worker: after one visit the playground loads and generates with the network off.
//
// The app's files (the page, its modules, the wasm modules: the engine's two builds, one threaded, and the sampler's) are answered network-first:
// online, every request fetches the current build and refreshes the stored copy, so a new build
// replaces the old files as soon as it is served; offline, the stored copy answers. Installing
// stores them all at once, so the first visit already leaves a whole copy. A new APP_CACHE name
// (a change in what is stored, not in a build) drops the old cache when it activates.
//
// The model is not this worker's: the engine's worker keeps it in its own cache
// (nucleus-models-v1, see nucleus-worker.js), downloaded once and checked before use, so model
// requests (*.gguf) and every Range request pass through untouched.

const APP_CACHE = 'nucleus-app-v5';
/** Every file the playground and the embed page load, relative to this worker (tests/browser checks the list). */
const APP_FILES = [
  './',
  'index.html',
  'embed.html',
  'playground.css',
  'chart.css',
  'chart.js',
  'playground.js',
  'nucleus.js',
  'nucleus-worker.js',
  'protocol.js',
  'download.js',
  'what-if.js',
  'trace.js',
  'branches.js',
  'ledger.js',
  'models.js',
  'timeline.js',
  'lens.js',
  'beams.js',
  'run-column.js',
  'nucleus-element.js',
  'sampling-knobs.json',
  'pkg/nucleus_web.js',
  'pkg/nucleus_web_bg.wasm',
  'pkg/nucleus_web_threads.js',
  'pkg/nucleus_web_threads_bg.wasm',
  'pkg/nucleus_web_threads_workers.js',
  'pkg/nucleus_sampler_web.js',
  'pkg/nucleus_sampler_web_bg.wasm',
];

/** The stored copy's key: the URL without its query (the page's settings live in the query). */
const keyOf = (url) => {
  const { origin, pathname } = new URL(url);
  return `${origin}${pathname}`;
};

self.addEventListener('install', (event) => {
  event.waitUntil((async () => {
    const cache = await caches.open(APP_CACHE);
    await cache.addAll(APP_FILES.map((file) => keyOf(new URL(file, self.registration.scope))));
    await self.skipWaiting();
  })());
});

self.addEventListener('activate', (event) => {
  event.waitUntil((async () => {
    for (const name of await caches.keys()) {
      if (name.startsWith('nucleus-app-') && name !== APP_CACHE) await caches.delete(name);
    }
    await self.clients.claim();
  })());
});

self.addEventListener('fetch', (event) => {
  const { request } = event;
  const url = new URL(request.url);
  const passThrough = request.method !== 'GET' || url.origin !== self.location.origin
    || request.headers.has('range') || url.pathname.endsWith('.gguf');
  if (!passThrough) event.respondWith(networkFirst(event));
});

async function networkFirst(event) {
  const { request } = event;
  const cache = await caches.open(APP_CACHE);
  const key = keyOf(request.url);
  try {
    const response = await fetch(request);
    // Stored while the page reads it; a failure to store (a full quota) only costs the offline copy.
    if (response.ok) event.waitUntil(cache.put(key, response.clone()).catch(() => {}));
    return response;
  } catch (error) {
    const stored = await cache.match(key);
    if (stored) return stored;
    throw error;
  }
}
