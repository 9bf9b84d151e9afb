// The pieces of working offline that need no browser, in plain Node: the service worker's list
// of files is the whole package (every module the element, the API and the worker load); a model
// that cannot be stored is the `storage-quota` error saying how much was needed and how much is
// free; the stored copy is written out of the model file a slice at a time. (The offline reloads
// run in Chromium: playground.test.mjs, and package.test.mjs across origins.)
import test from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';

import { STORE_SLICE_BYTES, storeModel } from '../../www/download.js';
// The service worker's PACKAGE_FILES (what it stores at install, and what the package holds).
import { packageFiles } from '../../npm/dist.mjs';

const www = new URL('../../www/', import.meta.url);

/** The files a module imports (static and dynamic), relative to www/. */
function importsOf(file) {
  const text = readFileSync(new URL(file, www), 'utf8');
  const specifiers = [...text.matchAll(/(?:from\s+|import\s*\(\s*|^import\s+)'(\.{1,2}\/[^']+)'/gm)].map((m) => m[1]);
  return specifiers.map((specifier) => new URL(specifier, new URL(file, www)).href.slice(www.href.length));
}

test('the service worker stores the whole package: every module the element, the API and the worker import, and every wasm module', () => {
  const files = packageFiles();
  const seen = new Set();
  const walk = (file) => {
    if (seen.has(file)) return;
    seen.add(file);
    if (file.endsWith('.js')) importsOf(file).forEach(walk);
  };
  // The roots: the modules a page imports, and the workers' scripts it starts.
  ['nucleus-element.js', 'nucleus.js', 'nucleus-worker.js', 'nucleus-thread.js', 'trace.js'].forEach(walk);
  const missing = [...seen].filter((file) => !files.includes(file));
  assert.deepEqual(missing, [], 'imported but not in PACKAGE_FILES');
  // What the modules fetch by URL rather than import: the styles, the knobs, the wasm binaries.
  const served = readdirSync(new URL('pkg/', www)).filter((name) => /\.(js|wasm)$/.test(name)).map((name) => `pkg/${name}`);
  for (const file of ['chart.css', 'sampling-knobs.json', ...served]) assert.ok(files.includes(file), file);
  // Nothing else: each file is imported or one of those, and exists.
  const extra = files.filter((file) => !seen.has(file) && !['chart.css', 'sampling-knobs.json', ...served].includes(file));
  assert.deepEqual(extra, []);
});

/** A model file in memory as the worker's `ModelFile` reads out: copies, a slice at a time. */
const fileOf = (bytes) => ({ length: bytes.length, reads: 0, read(offset, n) { this.reads += 1; return bytes.slice(offset, offset + n); } });

test('a model the browser cannot keep is storage-quota, with what it needed and what is free', async (t) => {
  const navigator = Object.getOwnPropertyDescriptor(globalThis, 'navigator');
  Object.defineProperty(globalThis, 'navigator', { configurable: true,
    value: { storage: { estimate: async () => ({ quota: 50e6, usage: 48e6 }) } } });
  t.after(() => (navigator ? Object.defineProperty(globalThis, 'navigator', navigator) : delete globalThis.navigator));
  const full = { put: async () => { throw new DOMException('quota exceeded', 'QuotaExceededError'); } };
  const error = await storeModel(full, 'https://example.com/m.gguf', fileOf(new Uint8Array(3_000_000)));
  assert.equal(error.code, 'storage-quota');
  assert.equal(error.message, 'the model was not kept for next time: the storage quota is full (keeping it needs 3.0 MB; '
    + 'the browser lets this site keep 50.0 MB and 48.0 MB is in use, 2.0 MB free); it runs from this download, and the '
    + 'next load downloads it again');
  const stored = [];
  const roomy = { put: async (url, response) => stored.push([url, (await response.arrayBuffer()).byteLength]) };
  assert.equal(await storeModel(roomy, 'https://example.com/m.gguf', fileOf(new Uint8Array(10))), null);
  assert.deepEqual(stored, [['https://example.com/m.gguf', 10]]);
});

test('the stored copy is read out of the file a slice at a time, byte for byte, with its length', async () => {
  const bytes = Uint8Array.from({ length: 2.5 * STORE_SLICE_BYTES }, (_, i) => (i * 7) % 251);
  const file = fileOf(bytes);
  let stored;
  const cache = { put: async (url, response) => { stored = { length: response.headers.get('content-length'), body: new Uint8Array(await response.arrayBuffer()) }; } };
  assert.equal(await storeModel(cache, 'https://example.com/m.gguf', file), null);
  assert.equal(stored.length, String(bytes.length));
  assert.deepEqual(stored.body, bytes);
  assert.equal(file.reads, 3, 'three slices, never the whole file at once');
});
