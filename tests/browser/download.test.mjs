// The download into a model file (www/download.js), in plain Node against a local server: every
// byte goes into the file as it arrives (resumed after a dropped connection), the load is planned
// from the first bytes the file holds, and the file's whole room is taken only once the plan has
// accepted it; a refusal ends the download with its typed error, the room never taken. (The
// worker's file is wasm memory, `ModelFile`; the browser suites load through it.)
import test from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';

import { APPEND_BYTES, HEADER_FIRST_BYTES, STORE_SLICE_BYTES, downloadModel, readFile, storeModel } from '../../www/download.js';
import { codedError } from '../../www/protocol.js';

const FILE = Uint8Array.from({ length: 3 * HEADER_FIRST_BYTES }, (_, i) => (i < 4 ? 'GGUF'.charCodeAt(i) : (i * 13) % 256));

/**
 * A server of FILE whose first response breaks after `dropAt` bytes (or, `quiet`, sends nothing
 * more and keeps the connection open); later ones honour Range.
 */
async function startServer(dropAt, { quiet = false } = {}) {
  const requests = [];
  const server = createServer((request, response) => {
    const range = /^bytes=(\d+)-$/.exec(request.headers.range ?? '');
    requests.push(request.headers.range ?? null);
    if (requests.length === 1) {
      response.writeHead(200, { 'content-length': FILE.length, etag: '"v1"' });
      response.write(FILE.subarray(0, dropAt), () => quiet || response.destroy());
      return;
    }
    const from = range ? Number(range[1]) : 0;
    response.writeHead(range ? 206 : 200, { 'content-length': FILE.length - from, etag: '"v1"',
      ...(range && { 'content-range': `bytes ${from}-${FILE.length - 1}/${FILE.length}` }) });
    response.end(FILE.subarray(from));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${server.address().port}/m.gguf`, requests,
    close: () => { server.closeAllConnections(); server.close(); } };
}

/** A model file as the worker's ModelFile behaves, recording when its room was reserved. */
function recordingFile() {
  const chunks = [];
  return {
    length: 0,
    reserved: [],
    append(chunk) { chunks.push(chunk.slice()); this.length += chunk.length; },
    clear() { chunks.length = 0; this.length = 0; },
    reserve(length) { this.reserved.push({ length, at: this.length }); },
    read(offset, n) { return this.bytes().slice(offset, offset + n); },
    bytes() { return Buffer.concat(chunks); },
  };
}

test('a download resumed after a dropped connection fills the file whole; its room is reserved once, after the plan', async (t) => {
  const server = await startServer(1.5 * HEADER_FIRST_BYTES);
  t.after(() => server.close());
  const file = recordingFile();
  const plans = [];
  await downloadModel(server.url, file, () => {}, (given, total) => {
    assert.equal(given, file);
    plans.push({ at: given.length, total, reserved: given.reserved.length });
    return { contextLength: 512 };
  });
  assert.deepEqual(file.bytes(), Buffer.from(FILE));
  assert.equal(server.requests.length, 2);
  assert.match(server.requests[1], /^bytes=\d+-$/, 'the second request resumes');
  assert.equal(plans.length, 1, 'planned once: the answer was a plan');
  assert.ok(plans[0].at >= HEADER_FIRST_BYTES && plans[0].total === FILE.length && plans[0].reserved === 0, JSON.stringify(plans));
  assert.deepEqual(file.reserved.map((r) => r.length), [FILE.length], 'the whole file, once');
  assert.equal(file.reserved[0].at, plans[0].at, 'right after the plan accepted it');
});

test('a connection that goes quiet mid-body is taken for a dropped one after the bound: the download resumes whole', { timeout: 10_000 }, async (t) => {
  const dropAt = HEADER_FIRST_BYTES + 12_345;
  const server = await startServer(dropAt, { quiet: true });
  t.after(() => server.close());
  const file = recordingFile();
  const started = performance.now();
  await downloadModel(server.url, file, () => {}, undefined, { stallMs: 400 });
  assert.ok(performance.now() - started >= 400, 'not before the bound');
  assert.deepEqual(file.bytes(), Buffer.from(FILE));
  assert.deepEqual(server.requests, [null, `bytes=${dropAt}-`], 'resumed from the byte it reached');
});

test('a server that never answers fails the download after the bound, fetch-failed', { timeout: 10_000 }, async (t) => {
  const server = createServer(() => {});
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => { server.closeAllConnections(); server.close(); });
  const url = `http://127.0.0.1:${server.address().port}/m.gguf`;
  await assert.rejects(downloadModel(url, recordingFile(), () => {}, undefined, { stallMs: 400 }),
    (error) => error.code === 'fetch-failed' && /no answer for 0\.4 s/.test(error.message));
});

test('a plan that refuses ends the download with its error: the rest never read, the room never taken', async (t) => {
  const server = await startServer(FILE.length);
  t.after(() => server.close());
  const file = recordingFile();
  const refusal = codedError('out-of-memory', 'contextLength 1024 or less would fit');
  await assert.rejects(downloadModel(server.url, file, () => {}, () => { throw refusal; }), refusal);
  assert.ok(file.length < FILE.length, `${file.length} bytes read`);
  assert.deepEqual(file.reserved, []);
});

test('the file failing while it fills ends the download with that failure, never taken for a broken connection', async (t) => {
  const server = await startServer(FILE.length);
  t.after(() => server.close());
  const file = recordingFile();
  // A WebAssembly trap inside `append` leaves the wasm file borrowed: resuming would fail in
  // `clear()` with wasm-bindgen's "recursive use of an object", hiding the trap (WebKit, CI).
  const trap = new WebAssembly.RuntimeError('Out of bounds memory access');
  const append = file.append.bind(file);
  file.append = (chunk) => {
    if (file.length > 0) throw trap;
    append(chunk);
  };
  await assert.rejects(downloadModel(server.url, file, () => {}), trap);
  assert.equal(server.requests.length, 1, 'not resumed');
});

test('a body handed over in chunks larger than APPEND_BYTES (as WebKit hands them) goes into the file a slice at a time, planned and reserved after the first', async () => {
  const bytes = Uint8Array.from({ length: 2 * APPEND_BYTES + 3 * HEADER_FIRST_BYTES + 7 }, (_, i) => (i < 4 ? 'GGUF'.charCodeAt(i) : (i * 7) % 256));
  // A given file whose stream has two chunks, the first larger than two slices.
  const given = {
    size: bytes.length,
    stream: () => new ReadableStream({
      start(controller) {
        controller.enqueue(bytes.slice(0, 2 * APPEND_BYTES + 5));
        controller.enqueue(bytes.slice(2 * APPEND_BYTES + 5));
        controller.close();
      },
    }),
  };
  const file = recordingFile();
  const sizes = [];
  const append = file.append.bind(file);
  file.append = (chunk) => {
    sizes.push(chunk.length);
    append(chunk);
  };
  const planned = [];
  await readFile(given, 'm.gguf', file, () => {}, (f) => planned.push(f.length));
  assert.ok(sizes.every((n) => n <= APPEND_BYTES), `appended ${sizes.join(', ')} bytes at a time`);
  assert.deepEqual(new Uint8Array(file.bytes()), bytes);
  // Planned, and the whole room taken, once the header's first bytes are in: not after the chunk.
  assert.deepEqual(planned, [HEADER_FIRST_BYTES]);
  assert.deepEqual(file.reserved, [{ length: bytes.length, at: HEADER_FIRST_BYTES }]);
});

test("the stored copy's read failing is that failure, never taken for a full storage quota", async () => {
  /** A Cache that keeps a response's whole body, as the Cache API does, or rejects with its own error. */
  const cache = {
    kept: new Map(),
    async put(url, response) {
      try {
        this.kept.set(url, new Uint8Array(await response.arrayBuffer()));
      } catch {
        throw new TypeError('the response body failed');
      }
    },
  };
  const file = { length: 2 * STORE_SLICE_BYTES + 5, read: (offset, n) => new Uint8Array(Math.min(n, file.length - offset)) };
  assert.equal(await storeModel(cache, 'whole', file), null);
  assert.equal(cache.kept.get('whole').length, file.length);
  // A WebAssembly trap in `read` (the file is in the engine's memory) ends the store with the trap.
  const trap = new WebAssembly.RuntimeError('Out of bounds memory access');
  const failing = { ...file, read: (offset, n) => (offset > 0 ? (() => { throw trap; })() : file.read(offset, n)) };
  await assert.rejects(storeModel(cache, 'broken', failing), trap);
  assert.equal(cache.kept.has('broken'), false);
});
