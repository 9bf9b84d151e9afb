// Downloading a model file: resumed where a dropped connection left it, checked before a byte of
// it is parsed. Used by the worker (nucleus-worker.js).
//
// A model is a hundred megabytes fetched over whatever network the visitor has. When the
// connection drops part-way, the download asks again from the byte it reached with an HTTP Range
// request (`bytes=N-`, guarded by `If-Range` when the server gave an ETag or Last-Modified), up to
// RESUMES times, and the progress goes on from there; a connection that goes quiet for STALL_MS
// counts as dropped. A server that ignores Range (status 200) sends the whole file again, and the
// download restarts from zero. The result is the whole file or an error: never a part of one.
//
// A load is planned from the file's first bytes as they arrive (its header: the model's shape,
// what it will need): a model that cannot run here is refused then, and the rest of the file is
// never downloaded (or read, for a file given to the page).
//
// Every chunk goes straight into the file's place in WebAssembly memory (a `ModelFile`, where
// the CPU engine then reads its weights), and the Cache API's copy is written from there a slice
// at a time: the page never holds a whole copy of the file in JS. On WebGPU the ModelFile keeps
// the header alone and sends each tensor on to the GPU as it arrives; the Cache API's copy is
// then written as the chunks arrive (storeAsRead), or from the given file itself (storeBlob).

import { codedError } from './protocol.js';

/** Resumes after a dropped connection before the download fails. */
export const RESUMES = 3;
/**
 * A connection that stays open and sends nothing for this long (no answer to the request, or no
 * byte of the body) is taken for a dropped one: the download resumes (or, before its first byte,
 * fails), so a load ends within a bounded time even when the network goes quiet.
 */
export const STALL_MS = 30_000;
/** The first bytes of a file a load is planned from; more (what the plan asks, or twice as many) while its header goes on. */
export const HEADER_FIRST_BYTES = 1 << 20;
/** The most bytes a plan waits for: a header longer than that is planned with the whole file. */
export const HEADER_MAX_BYTES = 64 << 20;
/** The first bytes of every GGUF file. */
const GGUF_MAGIC = 'GGUF';
/**
 * The most bytes handed to the file at once, the load planned (and the file's room reserved) after
 * each such slice. WebKit hands a body over in chunks of up to 17 MB (Chromium's are at most
 * 2 MiB, Firefox's 768 KiB): each chunk copied into wasm memory whole for its call, and the plan
 * consulted only after one, left WebKit's wasm memory after loading SmolLM2 (a 94 MiB file) at
 * 208 MiB; slices with the plan after the whole chunk, at 123-161 MiB from load to load; now
 * at 114 MiB, as in Chromium and Firefox.
 */
export const APPEND_BYTES = 1 << 20;

/**
 * @typedef {object} ModelFile  where a file's bytes go as they arrive: the worker's
 *   `wasm.ModelFile`, the file's place in WebAssembly memory (hashed there as it fills), so that
 *   the page never holds a whole copy in JS
 * @property {(chunk: Uint8Array) => void} append  the next bytes
 * @property {() => void} clear  forget what came (a server that sends the file again from zero)
 * @property {(length: number) => void} reserve  take room for the whole file at once
 * @property {(offset: number, length: number) => Uint8Array} read  a copy of some bytes
 * @property {number} length  the bytes received
 */

/**
 * @callback Plan  what loading a file takes, from the first bytes `file` holds (the worker's
 *   wasm.planLoad): `{ needBytes }` while they end inside its header; throws a typed error when
 *   the model cannot run here
 * @param {ModelFile} file
 * @param {number} fileLength
 * @returns {object}
 */

/**
 * Calls `plan` as `file` fills with a file of `total` bytes (after each chunk), until it answers
 * with more than `{ needBytes }`: at HEADER_FIRST_BYTES, then at what it asks or twice as many, up
 * to HEADER_MAX_BYTES. Once planned (at once without a plan), the whole file's room is taken; with
 * no total known, the file grows as it comes.
 * @param {Plan | undefined} plan
 * @param {number} total
 * @param {ModelFile} file
 */
function headerPlanner(plan, total, file) {
  let wanted = HEADER_FIRST_BYTES;
  let done = false;
  const finish = () => {
    done = true;
    if (total) file.reserve(total);
  };
  if (!plan || !total) finish();
  return (loaded) => {
    if (done || (loaded < wanted && loaded < total)) return;
    const answer = plan(file, total);
    const last = !answer?.needBytes || loaded >= total || wanted >= HEADER_MAX_BYTES;
    wanted = Math.max(answer?.needBytes ?? 0, 2 * wanted);
    if (last) finish();
  };
}

/**
 * Downloads `url` whole into `file`. `report(loaded, total)` is called as bytes arrive (`total` 0
 * when the server did not say). Rejects with `fetch-failed` (HTTP `status` when there is one) or,
 * when the file does not begin like a GGUF file (an HTML error page served with status 200),
 * `bad-model` naming what it begins with; or with `plan`'s refusal, from the file's first bytes,
 * the rest not downloaded.
 * @param {string} url
 * @param {ModelFile} file  empty
 * @param {(loaded: number, total: number) => void} report
 * @param {Plan} [plan]
 * @param {{ stallMs?: number }} [bounds]  STALL_MS, unless a test asks for less
 * @returns {Promise<void>}
 */
export async function downloadModel(url, file, report, plan, { stallMs = STALL_MS } = {}) {
  let total = 0;
  let validator = null;
  let lastError = null;
  let planned = null;
  for (let attempt = 0; attempt <= RESUMES; attempt += 1) {
    const resuming = file.length > 0;
    let response;
    try {
      const headers = resuming ? { Range: `bytes=${file.length}-`, ...(validator && { 'If-Range': validator }) } : {};
      const unanswered = new AbortController();
      const timer = setTimeout(() => unanswered.abort(new Error(`no answer for ${stallMs / 1000} s`)), stallMs);
      response = await fetch(url, { headers, signal: unanswered.signal }).finally(() => clearTimeout(timer));
    } catch (error) {
      // Nothing reached yet: the URL itself fails (offline, refused, CORS).
      if (!resuming) throw codedError('fetch-failed', `could not fetch ${url}: ${error.message}`);
      lastError = error;
      continue;
    }
    if (!response.ok) {
      throw codedError('fetch-failed', `could not fetch ${url}: HTTP ${response.status} ${response.statusText}`.trim(),
        { status: response.status });
    }
    // The server ignored the Range request (or the file changed): start again from zero.
    if (resuming && response.status !== 206) file.clear();
    total = totalOf(response, file.length) || total;
    planned ??= headerPlanner(plan, total, file);
    validator = response.headers.get('etag') ?? response.headers.get('last-modified') ?? validator;
    try {
      await readInto(response, file, (n) => {
        if (file.length - n < GGUF_MAGIC.length) checkMagic(url, file);
        report(file.length, total);
        planned(file.length);
      }, stallMs);
    } catch (error) {
      // A broken connection resumes the download; anything else ends it (a typed refusal: not
      // GGUF, a model that cannot run here; or the engine's own failure, which a resume would
      // hide behind the file it left borrowed).
      if (!(error instanceof BrokenBody)) throw error;
      lastError = error;
      continue;
    }
    if (total && file.length < total) {
      lastError = new Error(`the connection closed after ${file.length} of ${total} bytes`);
      continue;
    }
    if (total && file.length > total) {
      throw codedError('fetch-failed', `${url} sent ${file.length} bytes where it announced ${total}`);
    }
    checkMagic(url, file, true);
    return;
  }
  const reached = total ? `${file.length} of ${total} bytes` : `${file.length} bytes`;
  throw codedError('fetch-failed', `could not fetch ${url}: the download broke at ${reached}, ${RESUMES} resumes `
    + `tried (${lastError?.message ?? 'no reason given'}); try again on a steadier connection`);
}

/**
 * Reads a stored copy of a model (a Cache API response) whole into `file`, reporting bytes as
 * they arrive. Resolves to false when it is not a whole GGUF file (fewer or more bytes than its
 * recorded Content-Length, or not beginning like GGUF): the caller drops it and downloads again.
 * @param {Response} response
 * @param {ModelFile} file  empty
 * @param {(loaded: number, total: number) => void} report
 * @returns {Promise<boolean>}
 */
export async function readStored(response, file, report) {
  const total = Number(response.headers.get('content-length')) || 0;
  if (total) file.reserve(total);
  report(0, total);
  await readInto(response, file, () => report(file.length, total));
  if (total && file.length !== total) return false;
  try {
    checkMagic('the stored model', file, true);
  } catch (error) {
    if (error.code !== 'bad-model') throw error;
    return false;
  }
  return true;
}

/**
 * Plans a file already whole in `file` (a stored copy) as its download would be: the same
 * answers, so it loads with the same context.
 * @param {ModelFile} file
 * @param {Plan} plan
 */
export function planWhole(file, plan) {
  headerPlanner(plan, file.length, file)(file.length);
}

/**
 * Keeps a copy of a download in `cache` under `url` as it arrives, for a file whose bytes are not
 * kept in wasm memory (a WebGPU load sends each tensor on to the GPU as it arrives):
 * `wrap(file)` gives the ModelFile the download fills, which passes each chunk on to the stored
 * copy's body too, without a copy; `commit()` ends the body once the load has succeeded and
 * resolves as storeModel does (a file whose length was never known was kept whole: it is stored
 * from there); `abandon()` drops it, and nothing is stored. The body starts once the file's
 * length is known (`reserve`), with the bytes received before it; a download that starts again
 * from zero starts the body again.
 * @param {Cache} cache
 * @param {string} url
 */
export function storeAsRead(cache, url) {
  let body = null;
  let inner = null;
  const begin = (length) => {
    let controller;
    const stream = new ReadableStream({ start(c) { controller = c; } });
    const put = cache.put(url, new Response(stream, { headers: { 'content-type': 'application/octet-stream',
      'content-length': String(length) } })).then(() => null, (error) => error);
    body = { controller, put, length };
  };
  const end = (reason) => {
    body?.controller.error(reason);
    body = null;
  };
  return {
    /**
     * The file, its appends and restarts passed on to the body too: an object whose prototype is
     * the file (so it is still the ModelFile `wasm.planLoad` is given), these three its own.
     * @param {ModelFile} file
     * @returns {ModelFile}
     */
    wrap(file) {
      inner = file;
      return Object.assign(Object.create(file), {
        append(chunk) {
          file.append(chunk);
          body?.controller.enqueue(chunk);
        },
        clear() {
          file.clear();
          if (!body) return;
          const { length } = body;
          end(new Error('the download started again from its first byte'));
          begin(length);
        },
        reserve(length) {
          begin(length);
          if (file.length) body.controller.enqueue(file.read(0, file.length));
          file.reserve(length);
        },
      });
    },
    /** @returns {Promise<Error | null>} */
    async commit() {
      if (!body) return inner ? storeModel(cache, url, inner) : null;
      const { controller, put, length } = body;
      body = null;
      controller.close();
      const error = await put;
      return error && notStored(error, length);
    },
    abandon() {
      end(new Error('the load failed'));
    },
  };
}

/**
 * Keeps a file given to the page (a `File` or another `Blob`) in `cache` under `url`, read from
 * the blob itself by the browser (nothing of it in JS): for a file whose bytes were not kept in
 * wasm memory. Resolves as storeModel does.
 * @param {Cache} cache
 * @param {string} url
 * @param {Blob} blob
 * @returns {Promise<Error | null>}
 */
export async function storeBlob(cache, url, blob) {
  try {
    await cache.put(url, new Response(blob, { headers: { 'content-type': 'application/octet-stream',
      'content-length': String(blob.size) } }));
    return null;
  } catch (error) {
    return notStored(error, blob.size);
  }
}

/** The bytes of the stored copy's body a slice at a time: what is copied out of wasm memory at once. */
export const STORE_SLICE_BYTES = 4 << 20;

/**
 * Keeps a downloaded model in `cache` under `url`, read out of `file` a slice at a time (never a
 * whole copy in JS). Resolves to null when it was stored, else to the `storage-quota` error (not
 * thrown: the model then runs from the download, and the next load downloads it again), saying
 * how much was needed and how much the browser had left. A failure of `file.read` itself (the
 * engine's) rejects with that failure.
 * @param {Cache} cache
 * @param {string} url
 * @param {Pick<ModelFile, 'length' | 'read'>} file
 * @returns {Promise<Error | null>}
 */
export async function storeModel(cache, url, file) {
  const { length } = file;
  let offset = 0;
  // The file's own failure (a trap in the engine) is thrown as it is, never taken for the
  // storage's: the Cache API reports a failed body as an error of its own.
  let readFailure = null;
  const body = new ReadableStream({
    pull(controller) {
      if (offset >= length) {
        controller.close();
        return;
      }
      let slice;
      try {
        slice = file.read(offset, STORE_SLICE_BYTES);
      } catch (error) {
        readFailure = error;
        throw error;
      }
      offset += slice.byteLength;
      controller.enqueue(slice);
    },
  }, { highWaterMark: 0 });
  const stored = new Response(body, { headers: { 'content-type': 'application/octet-stream',
    'content-length': String(length) } });
  try {
    await cache.put(url, stored);
    return null;
  } catch (error) {
    if (readFailure) throw readFailure;
    return notStored(error, length);
  }
}

/**
 * The `storage-quota` error of a copy of `length` bytes the Cache API did not keep (`error`:
 * why), saying how much the browser had left.
 * @param {Error} error
 * @param {number} length
 * @returns {Promise<Error>}
 */
async function notStored(error, length) {
  const mb = (n) => `${(n / 1e6).toFixed(1)} MB`;
  const { quota, usage } = await globalThis.navigator?.storage?.estimate?.().catch(() => ({})) ?? {};
  const left = Number.isFinite(quota) && Number.isFinite(usage) ? `; the browser lets this site keep ${mb(quota)} and `
    + `${mb(usage)} is in use, ${mb(Math.max(0, quota - usage))} free` : '';
  const full = error?.name === 'QuotaExceededError';
  return codedError('storage-quota', `the model was not kept for next time: ${full ? 'the storage quota is full' : error?.message || error?.name || String(error)}`
    + ` (keeping it needs ${mb(length)}${left}); it runs from this download, and the next load downloads it again`);
}

/** The file's whole size from a response: Content-Range's for a 206, else Content-Length. */
function totalOf(response, offset) {
  if (response.headers.get('content-encoding')) return 0; // lengths of the encoded body: unknown
  const range = /\/(\d+)\s*$/.exec(response.headers.get('content-range') ?? '');
  if (response.status === 206 && range) return Number(range[1]);
  const length = Number(response.headers.get('content-length'));
  return length ? length + (response.status === 206 ? offset : 0) : 0;
}

/**
 * A body that stopped arriving (the connection broke, the stored copy could not be read): a
 * download resumes after it. Every other failure while reading (a refusal, the engine's own) ends
 * the download as it is.
 */
class BrokenBody extends Error {
  constructor(cause) {
    super(cause?.message ?? String(cause), { cause });
    this.name = 'BrokenBody';
  }
}

/**
 * Reads a body into `file` in slices of at most APPEND_BYTES, calling `received(bytes)` after
 * each; a failure cancels the rest, and one of the body itself is a `BrokenBody`, as is no chunk
 * for `stallMs` (when given).
 */
async function readInto(response, file, received, stallMs = null) {
  const reader = response.body.getReader();
  try {
    for (;;) {
      let timer;
      const stalled = stallMs && new Promise((_, reject) => {
        timer = setTimeout(() => reject(new BrokenBody(new Error(`no bytes came for ${stallMs / 1000} s`))), stallMs);
      });
      const read = reader.read().catch((error) => {
        throw new BrokenBody(error);
      });
      // A read the stall outran is not awaited: whatever it ends in (the cancel below settles it)
      // is not an unhandled rejection.
      read.catch(() => {});
      const { done, value } = await (stalled ? Promise.race([read, stalled]) : read).finally(() => clearTimeout(timer));
      if (done) return;
      for (let at = 0; at < value.byteLength; at += APPEND_BYTES) {
        const slice = value.subarray(at, at + APPEND_BYTES);
        file.append(slice);
        received(slice.byteLength);
      }
    }
  } catch (error) {
    reader.cancel().catch(() => {});
    throw error;
  }
}

/**
 * A file given to the page, read whole into `file` (`report(loaded, total)` as it comes), checked
 * to begin like a GGUF file: else `bad-model` naming what it begins with (a PNG dropped on the
 * page); planned from its first bytes as a download is.
 * @param {Blob} blob
 * @param {string} name
 * @param {ModelFile} file  empty
 * @param {(loaded: number, total: number) => void} report
 * @param {Plan} [plan]
 * @returns {Promise<void>}
 */
export async function readFile(blob, name, file, report, plan) {
  const planned = headerPlanner(plan, blob.size, file);
  report(0, blob.size);
  await readInto({ body: blob.stream() }, file, (n) => {
    if (file.length - n < GGUF_MAGIC.length) checkMagic(name, file);
    report(file.length, blob.size);
    planned(file.length);
  });
  checkMagic(name, file, true);
}

/** A `bad-model` error as soon as the first bytes show the file is not GGUF (`whole`: all came). */
function checkMagic(url, file, whole = false) {
  const head = file.read(0, 64);
  if (head.length < GGUF_MAGIC.length && !whole) return;
  const magic = String.fromCharCode(...head.subarray(0, GGUF_MAGIC.length));
  if (magic === GGUF_MAGIC) return;
  const text = new TextDecoder('utf-8', { fatal: false }).decode(head.subarray(0, 40)).replace(/\s+/g, ' ');
  throw codedError('bad-model', `${url} is not a GGUF model file: it begins ${JSON.stringify(text)}`
    + (/^\s*</.test(text) ? ' (a web page: is the URL right?)' : ''));
}
