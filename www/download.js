// Downloading a model file: resumed where a dropped connection left it, checked before a byte of
// it is parsed. Used by the worker (nucleus-worker.js).
//
// A model is a hundred megabytes fetched over whatever network the visitor has. When the
// connection drops part-way, the download asks again from the byte it reached with an HTTP Range
// request (`bytes=N-`, guarded by `If-Range` when the server gave an ETag or Last-Modified), up to
// RESUMES times, and the progress goes on from there. A server that ignores Range (status 200)
// sends the whole file again, and the download restarts from zero. The result is the whole file or
// an error: never a part of one.
//
// A load is planned from the file's first bytes as they arrive (its header: the model's shape,
// what it will need): a model that cannot run here is refused then, and the rest of the file is
// never downloaded (or read, for a file given to the page).

import { codedError } from './protocol.js';

/** Resumes after a dropped connection before the download fails. */
export const RESUMES = 3;
/** The first bytes of a file a load is planned from; more (what the plan asks, or twice as many) while its header goes on. */
export const HEADER_FIRST_BYTES = 1 << 20;
/** The most bytes a plan waits for: a header longer than that is planned with the whole file. */
export const HEADER_MAX_BYTES = 64 << 20;
/** The first bytes of every GGUF file. */
const GGUF_MAGIC = 'GGUF';

/**
 * @callback Plan  what loading a file takes, from its first bytes (the worker's wasm.planLoad):
 *   `{ needBytes }` while they end inside its header; rejects with a typed error when the model
 *   cannot run here
 * @param {Uint8Array} prefix
 * @param {number} fileLength
 * @returns {Promise<object>}
 */

/**
 * Calls `plan` with the first bytes of a file of `total` bytes as they come in (`received(chunks,
 * loaded)` after each chunk), until it answers with more than `{ needBytes }`: HEADER_FIRST_BYTES,
 * then what it asks or twice as many, up to HEADER_MAX_BYTES. Nothing without a plan or a total.
 * @param {Plan | undefined} plan
 * @param {number} total
 */
function headerPlanner(plan, total) {
  let wanted = HEADER_FIRST_BYTES;
  let done = !plan || !total;
  return async (chunks, loaded) => {
    if (done || (loaded < wanted && loaded < total)) return;
    const answer = await plan(concatenate(chunks, loaded), total);
    done = !answer?.needBytes || loaded >= total || wanted >= HEADER_MAX_BYTES;
    wanted = Math.max(answer?.needBytes ?? 0, 2 * wanted);
  };
}

/**
 * `plan` for a file already whole in memory (a stored copy): the same answers, from its first
 * bytes only (never the whole file copied for it).
 * @param {Uint8Array} bytes
 * @param {Plan} plan
 */
export async function planBytes(bytes, plan) {
  const planned = headerPlanner(plan, bytes.byteLength);
  for (let n = HEADER_FIRST_BYTES; ; n *= 2) {
    await planned([bytes], Math.min(n, bytes.byteLength));
    if (n >= bytes.byteLength || n >= HEADER_MAX_BYTES) return;
  }
}

/**
 * Downloads `url` whole. `report(loaded, total)` is called as bytes arrive (`total` 0 when the
 * server did not say). Rejects with `fetch-failed` (HTTP `status` when there is one) or, when the
 * file does not begin like a GGUF file (an HTML error page served with status 200), `bad-model`
 * naming what it begins with; or with `plan`'s refusal, from the file's first bytes, the rest not
 * downloaded.
 * @param {string} url
 * @param {(loaded: number, total: number) => void} report
 * @param {Plan} [plan]
 * @returns {Promise<Uint8Array>}
 */
export async function downloadModel(url, report, plan) {
  const chunks = [];
  let loaded = 0;
  let total = 0;
  let validator = null;
  let lastError = null;
  let planned = null;
  for (let attempt = 0; attempt <= RESUMES; attempt += 1) {
    const resuming = loaded > 0;
    let response;
    try {
      const headers = resuming ? { Range: `bytes=${loaded}-`, ...(validator && { 'If-Range': validator }) } : {};
      response = await fetch(url, { headers });
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
    if (resuming && response.status !== 206) {
      // The server ignored the Range request (or the file changed): start again from zero.
      chunks.length = 0;
      loaded = 0;
    }
    total = totalOf(response, loaded) || total;
    planned ??= headerPlanner(plan, total);
    validator = response.headers.get('etag') ?? response.headers.get('last-modified') ?? validator;
    try {
      await readInto(response, chunks, async (n) => {
        loaded += n;
        if (chunks.length === 1 || loaded - n < GGUF_MAGIC.length) checkMagic(url, chunks);
        report(loaded, total);
        await planned(chunks, loaded);
      });
    } catch (error) {
      // A typed refusal (not GGUF, a model that cannot run here) ends the download; a broken
      // connection resumes it.
      if (error.code) throw error;
      lastError = error;
      continue;
    }
    if (total && loaded < total) {
      lastError = new Error(`the connection closed after ${loaded} of ${total} bytes`);
      continue;
    }
    if (total && loaded > total) {
      throw codedError('fetch-failed', `${url} sent ${loaded} bytes where it announced ${total}`);
    }
    checkMagic(url, chunks, true);
    return concatenate(chunks, loaded);
  }
  const reached = total ? `${loaded} of ${total} bytes` : `${loaded} bytes`;
  throw codedError('fetch-failed', `could not fetch ${url}: the download broke at ${reached}, ${RESUMES} resumes `
    + `tried (${lastError?.message ?? 'no reason given'}); try again on a steadier connection`);
}

/**
 * Reads a stored copy of a model (a Cache API response) whole, reporting bytes as they arrive.
 * Resolves to null when it is not a whole GGUF file (fewer or more bytes than its recorded
 * Content-Length, or not beginning like GGUF): the caller drops it and downloads again.
 * @param {Response} response
 * @param {(loaded: number, total: number) => void} report
 * @returns {Promise<Uint8Array | null>}
 */
export async function readStored(response, report) {
  const total = Number(response.headers.get('content-length')) || 0;
  const chunks = [];
  let loaded = 0;
  report(loaded, total);
  await readInto(response, chunks, (n) => {
    loaded += n;
    report(loaded, total);
  });
  if (total && loaded !== total) return null;
  try {
    checkMagic('the stored model', chunks, true);
  } catch {
    return null;
  }
  return concatenate(chunks, loaded);
}

/** A file's SHA-256 as lowercase hex (WebCrypto: off the calling thread, on a copy of the bytes). */
export async function sha256Hex(bytes) {
  const digest = await crypto.subtle.digest('SHA-256', bytes);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, '0')).join('');
}

/**
 * Keeps a downloaded model in `cache` under `url`. Resolves to null when it was stored, else to
 * the `storage-quota` error (not thrown: the model then runs from the download, and the next
 * load downloads it again), saying how much was needed and how much the browser had left.
 * @param {Cache} cache
 * @param {string} url
 * @param {Uint8Array} bytes
 * @returns {Promise<Error | null>}
 */
export async function storeModel(cache, url, bytes) {
  const stored = new Response(bytes, { headers: { 'content-type': 'application/octet-stream',
    'content-length': String(bytes.byteLength) } });
  try {
    await cache.put(url, stored);
    return null;
  } catch (error) {
    const mb = (n) => `${(n / 1e6).toFixed(1)} MB`;
    const { quota, usage } = await globalThis.navigator?.storage?.estimate?.().catch(() => ({})) ?? {};
    const left = Number.isFinite(quota) && Number.isFinite(usage) ? `; the browser lets this site keep ${mb(quota)} and `
      + `${mb(usage)} is in use, ${mb(Math.max(0, quota - usage))} free` : '';
    const full = error?.name === 'QuotaExceededError';
    return codedError('storage-quota', `the model was not kept for next time: ${full ? 'the storage quota is full' : error?.message || error?.name || String(error)}`
      + ` (keeping it needs ${mb(bytes.byteLength)}${left}); it runs from this download, and the next load downloads it again`);
  }
}

/** The file's whole size from a response: Content-Range's for a 206, else Content-Length. */
function totalOf(response, offset) {
  if (response.headers.get('content-encoding')) return 0; // lengths of the encoded body: unknown
  const range = /\/(\d+)\s*$/.exec(response.headers.get('content-range') ?? '');
  if (response.status === 206 && range) return Number(range[1]);
  const length = Number(response.headers.get('content-length'));
  return length ? length + (response.status === 206 ? offset : 0) : 0;
}

/** Reads a body into `chunks`, awaiting `received(bytes)` after each; a failure cancels the rest. */
async function readInto(response, chunks, received) {
  const reader = response.body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      chunks.push(value);
      await received(value.byteLength);
    }
  } catch (error) {
    reader.cancel().catch(() => {});
    throw error;
  }
}

/**
 * A file given to the page, read whole (`report(loaded, total)` as it comes), checked to begin like
 * a GGUF file: else `bad-model` naming what it begins with (a PNG dropped on the page); planned
 * from its first bytes as a download is.
 * @param {Blob} file
 * @param {string} name
 * @param {(loaded: number, total: number) => void} report
 * @param {Plan} [plan]
 * @returns {Promise<Uint8Array>}
 */
export async function readFile(file, name, report, plan) {
  const chunks = [];
  let loaded = 0;
  const planned = headerPlanner(plan, file.size);
  report(0, file.size);
  await readInto({ body: file.stream() }, chunks, async (n) => {
    loaded += n;
    if (chunks.length === 1) checkMagic(name, chunks);
    report(loaded, file.size);
    await planned(chunks, loaded);
  });
  checkMagic(name, chunks, true);
  return concatenate(chunks, loaded);
}

/** A `bad-model` error as soon as the first bytes show the file is not GGUF (`whole`: all came). */
function checkMagic(url, chunks, whole = false) {
  const head = concatenate(chunks.slice(0, 4), Math.min(64, chunks.slice(0, 4).reduce((n, c) => n + c.byteLength, 0)));
  if (head.length < GGUF_MAGIC.length && !whole) return;
  const magic = String.fromCharCode(...head.subarray(0, GGUF_MAGIC.length));
  if (magic === GGUF_MAGIC) return;
  const text = new TextDecoder('utf-8', { fatal: false }).decode(head.subarray(0, 40)).replace(/\s+/g, ' ');
  throw codedError('bad-model', `${url} is not a GGUF model file: it begins ${JSON.stringify(text)}`
    + (/^\s*</.test(text) ? ' (a web page: is the URL right?)' : ''));
}

function concatenate(chunks, length) {
  const bytes = new Uint8Array(length);
  let offset = 0;
  for (const chunk of chunks) {
    if (offset >= length) break;
    const part = chunk.subarray(0, length - offset);
    bytes.set(part, offset);
    offset += part.byteLength;
  }
  return bytes;
}
