// The pieces of working offline that need no browser, in plain Node: the service worker's list
// of files is every file the page loads; a model that cannot be stored is the `storage-quota`
// error saying how much was needed and how much is free; the digest is SHA-256.
// (The offline reload itself runs in Chromium: playground.test.mjs.)
import test from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import vm from 'node:vm';

import { sha256Hex, storeModel } from '../../www/download.js';

const www = new URL('../../www/', import.meta.url);

test("the service worker stores every file the page loads, and nothing else", () => {
  const sandbox = { self: { addEventListener() {} } };
  vm.runInNewContext(`${readFileSync(new URL('sw.js', www), 'utf8')}; this.files = APP_FILES;`, sandbox);
  const served = (dir, keep) => readdirSync(new URL(dir, www)).filter(keep).map((name) => `${dir}${name}`);
  const expected = [
    './',
    ...served('', (name) => /\.(html|css|js)$/.test(name) && name !== 'sw.js'),
    'sampling-knobs.json',
    ...served('pkg/', (name) => /\.(js|wasm)$/.test(name)),
  ];
  assert.deepEqual([...sandbox.files].sort(), expected.sort());
});

test('a model the browser cannot keep is storage-quota, with what it needed and what is free', async (t) => {
  const navigator = Object.getOwnPropertyDescriptor(globalThis, 'navigator');
  Object.defineProperty(globalThis, 'navigator', { configurable: true,
    value: { storage: { estimate: async () => ({ quota: 50e6, usage: 48e6 }) } } });
  t.after(() => (navigator ? Object.defineProperty(globalThis, 'navigator', navigator) : delete globalThis.navigator));
  const full = { put: async () => { throw new DOMException('quota exceeded', 'QuotaExceededError'); } };
  const error = await storeModel(full, 'https://example.com/m.gguf', new Uint8Array(3_000_000));
  assert.equal(error.code, 'storage-quota');
  assert.equal(error.message, 'the model was not kept for next time: the storage quota is full (keeping it needs 3.0 MB; '
    + 'the browser lets this site keep 50.0 MB and 48.0 MB is in use, 2.0 MB free); it runs from this download, and the '
    + 'next load downloads it again');
  const stored = [];
  const roomy = { put: async (url, response) => stored.push([url, (await response.arrayBuffer()).byteLength]) };
  assert.equal(await storeModel(roomy, 'https://example.com/m.gguf', new Uint8Array(10)), null);
  assert.deepEqual(stored, [['https://example.com/m.gguf', 10]]);
});

test('the digest is SHA-256 in lowercase hex', async () => {
  assert.equal(await sha256Hex(new TextEncoder().encode('abc')), 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
});
