// The service worker: after one visit, the pages that use Nucleus load and generate with the
// network off.
//
// A service worker must be served from the site's own origin, so a site that uses the package
// from a CDN copies this file to its own folder and registers it with `registerOffline(url)`
// (nucleus.js) or the element's `service-worker` attribute. Either adds two parameters to its URL:
// `version`, the package's version (pkg/version.js), and `assets`, where the package's files are
// (any origin: a CDN answers with CORS). A new version is a new script URL, so the browser
// installs it as an update.
//
// What it keeps, in one cache per version and scope (`nucleus-app <version> <scope>`):
// - installing stores PACKAGE_FILES from `assets` all at once, so the first visit already leaves
//   a whole copy of the engine;
// - the page that registered it sends its own URL and what it has loaded (a `keep` message), stored
//   then;
// - after that, every GET under `assets` or inside its scope is answered network-first: online,
//   the current file, its stored copy refreshed; offline, the stored copy.
// Activating drops this scope's caches of other versions, never another scope's: two versions
// side by side (two folders, each with its worker) keep their own files, so no version is ever
// served another's wasm.
//
// The model is not this worker's: the engine's worker keeps it in its own cache
// (nucleus-models-v1, see nucleus-worker.js), downloaded once and checked before use, so model
// requests (*.gguf) and every Range request pass through untouched.

/**
 * The package's runtime files, relative to its folder: the element and the API, their modules,
 * the engine's worker and the three wasm modules. `./build.sh dist` copies exactly these (with
 * this file, the type declarations, README and licences); tests/browser/offline.test.mjs checks
 * that every module they import is here.
 */
const PACKAGE_FILES = [
  'nucleus.js',
  'nucleus-element.js',
  'nucleus-worker.js',
  'nucleus-thread.js',
  'protocol.js',
  'download.js',
  'what-if.js',
  'trace.js',
  'chart.js',
  'run-column.js',
  'score-view.js',
  'attention-view.js',
  'chart.css',
  'sampling-knobs.json',
  'pkg/version.js',
  'pkg/nucleus_web.js',
  'pkg/nucleus_web_bg.wasm',
  'pkg/nucleus_web_threads.js',
  'pkg/nucleus_web_threads_bg.wasm',
  'pkg/nucleus_web_threads_relaxed.js',
  'pkg/nucleus_web_threads_relaxed_bg.wasm',
  'pkg/nucleus_sampler_web.js',
  'pkg/nucleus_sampler_web_bg.wasm',
];

const CACHE_PREFIX = 'nucleus-app ';
const LEGACY_CACHE = /^nucleus-app-v\d+$/;

/** `version` and `assets` from this worker's URL (registerOffline puts them there). */
function registrationParameters() {
  const params = new URL(self.location.href).searchParams;
  const version = params.get('version');
  const assets = params.get('assets');
  if (!version || !assets) return null;
  const base = new URL(assets, self.location.href);
  if (!base.pathname.endsWith('/')) base.pathname += '/';
  return { version, assets: base.href };
}

const PARAMETERS = registrationParameters();
const SCOPE = self.registration?.scope ?? '';
/** This version's cache in this scope. */
const APP_CACHE = PARAMETERS && `${CACHE_PREFIX}${PARAMETERS.version} ${SCOPE}`;

/** The stored copy's key: the URL without its query (the page's settings live in the query). */
const keyOf = (url) => {
  const { origin, pathname } = new URL(url);
  return `${origin}${pathname}`;
};

/** Whether this worker answers `url`: the package's files, or the site's own in its scope. */
const ours = (url) => (url.href.startsWith(PARAMETERS.assets)
  || (url.origin === self.location.origin && url.href.startsWith(SCOPE)))
  && !url.pathname.endsWith('.gguf');

self.addEventListener('install', (event) => {
  event.waitUntil((async () => {
    if (!PARAMETERS) {
      throw new Error(`${self.location.pathname} needs ?version=&assets= in its URL: register it with registerOffline() from nucleus.js`);
    }
    const cache = await caches.open(APP_CACHE);
    await cache.addAll(PACKAGE_FILES.map((file) => keyOf(new URL(file, PARAMETERS.assets))));
    await self.skipWaiting();
  })());
});

self.addEventListener('activate', (event) => {
  event.waitUntil((async () => {
    for (const name of await caches.keys()) {
      const sameScope = name.startsWith(CACHE_PREFIX) && name.endsWith(` ${SCOPE}`);
      if ((sameScope && name !== APP_CACHE) || LEGACY_CACHE.test(name)) await caches.delete(name);
    }
    await self.clients.claim();
  })());
});

// { type: 'keep', urls }: the page that registered this worker, and what it loaded before this
// worker could see it. Those of ours are stored (fetched again: the page's copies are not ours).
self.addEventListener('message', (event) => {
  if (event.data?.type !== 'keep' || !PARAMETERS) return;
  event.waitUntil((async () => {
    const cache = await caches.open(APP_CACHE);
    const keys = new Set(event.data.urls.map((url) => new URL(url)).filter(ours).map((url) => keyOf(url)));
    // One failure (a page gone since) only costs that file's offline copy.
    await Promise.all([...keys].map((key) => cache.add(key).catch(() => {})));
  })());
});

self.addEventListener('fetch', (event) => {
  const { request } = event;
  if (!PARAMETERS || request.method !== 'GET' || request.headers.has('range') || !ours(new URL(request.url))) return;
  event.respondWith(networkFirst(event));
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
