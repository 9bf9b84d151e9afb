// A static file server for the browser tests and benchmark: serves www/ on 127.0.0.1, the default
// model at /models/, and extra in-memory files (a corrupt model, a truncated one, a blank page).

import { createServer } from 'node:http';
import { createReadStream, readFileSync, promises as fs } from 'node:fs';
import path from 'node:path';
import os from 'node:os';
import { fileURLToPath } from 'node:url';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
/** A page with nothing on it but the site's origin, for tests that drive the JS API themselves. */
export const BLANK_PAGE = { '/blank.html': { body: Buffer.from('<!doctype html><title>blank</title><link rel="icon" href="data:,">'), type: 'text/html' } };

export const MODEL_NAME = 'SmolLM2-135M-Instruct.Q4_1.gguf';
export const MODEL_PATH = process.env.NUCLEUS_MODEL
  ?? path.join(os.homedir(), '.cache/nucleus/models', MODEL_NAME);
/** The default model file's digest: build.sh's, which checks the download against it. */
/**
 * The most wasm memory the CPU engine may hold after loading a model, per byte of its file: its
 * weights are the file's bytes, held once (1.20-1.26x in every engine here; 2.1x while the
 * weights were a copy, and WebKit's 1.3-2.2x while its bodies' large chunks went into wasm memory
 * whole: download.js, APPEND_BYTES).
 */
export const MEMORY_PER_FILE_BYTE = 1.35;
export const MODEL_SHA256 = /MODEL_SHA256="([0-9a-f]{64})"/.exec(readFileSync(path.join(REPO, 'build.sh'), 'utf8'))[1];
/**
 * The package's version: Cargo.toml's workspace version, the one owner (build.sh writes
 * www/pkg/version.js and the package's package.json from it; traces carry it).
 */
export const VERSION = /\[workspace\.package\]\nversion = "([^"]+)"/.exec(readFileSync(path.join(REPO, 'Cargo.toml'), 'utf8'))[1];
/** Gemma 3 270M, the second architecture (`./build.sh model` fetches it). */
export const GEMMA_NAME = 'gemma-3-270m-q4_k_m.gguf';
export const GEMMA_PATH = process.env.NUCLEUS_GEMMA ?? path.join(os.homedir(), '.cache/nucleus/models', GEMMA_NAME);
/** The file with Qwen3.5-0.8B's shapes and random weights (`./build.sh model` makes it). */
export const QWEN35_NAME = 'qwen35-0.8b-shape-q4_k_m.gguf';
export const QWEN35_PATH = process.env.NUCLEUS_QWEN35 ?? path.join(os.homedir(), '.cache/nucleus/models', QWEN35_NAME);
/** The file with Gemma 3 1B's shapes and random weights, the bench's bigger model (`./build.sh bench` makes it). */
export const GEMMA1B_NAME = 'gemma3-1b-shape-q4_k_m.gguf';
export const GEMMA1B_PATH = process.env.NUCLEUS_GEMMA1B ?? path.join(os.homedir(), '.cache/nucleus/models', GEMMA1B_NAME);
/** Gemma 3 4B's shapes and random weights, 2.49 GB (`./build.sh bench --models gemma4b` makes it). */
export const GEMMA4B_NAME = 'gemma3-4b-shape-q4_k_m.gguf';
export const GEMMA4B_PATH = process.env.NUCLEUS_GEMMA4B ?? path.join(os.homedir(), '.cache/nucleus/models', GEMMA4B_NAME);
/** The models served at /models/, as `./build.sh serve` serves them (and the bench's bigger ones). */
const MODELS = {
  [`/models/${MODEL_NAME}`]: MODEL_PATH,
  [`/models/${GEMMA_NAME}`]: GEMMA_PATH,
  [`/models/${QWEN35_NAME}`]: QWEN35_PATH,
  [`/models/${GEMMA1B_NAME}`]: GEMMA1B_PATH,
  [`/models/${GEMMA4B_NAME}`]: GEMMA4B_PATH,
};

const TYPES = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8',
  '.wasm': 'application/wasm', '.json': 'application/json', '.svg': 'image/svg+xml', '.png': 'image/png',
  '.gguf': 'application/octet-stream',
};

/**
 * The headers that make a page cross-origin isolated (`crossOriginIsolated`: SharedArrayBuffer,
 * so the CPU engine's threads): what a site serving Nucleus sends with its pages.
 */
export const ISOLATION_HEADERS = { 'cross-origin-opener-policy': 'same-origin', 'cross-origin-embedder-policy': 'require-corp' };

/** The headers that let any origin read a response, Range requests and their answers included (a CDN's, a model host's). */
const CORS_HEADERS = {
  'access-control-allow-origin': '*',
  'access-control-allow-headers': 'range, if-range',
  'access-control-expose-headers': 'content-length, content-range, etag',
};

/**
 * A local HTTP server on a free port: every request's path recorded in `requests`, and refused
 * (the connection closed unanswered, as if the network were gone) while `setOffline(true)`; the
 * rest answered by `handle(request, response, pathname)`. Resolves to { url, requests, setOffline, close }.
 */
async function listen(handle, port = 0) {
  const requests = [];
  let offline = false;
  const server = createServer((request, response) => {
    const pathname = decodeURIComponent(new URL(request.url, 'http://x').pathname);
    requests.push(pathname);
    if (offline) {
      request.socket.destroy();
      return;
    }
    handle(request, response, pathname);
  });
  await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}/`,
    requests,
    setOffline: (on) => { offline = on; },
    close: () => new Promise((resolve) => { server.closeAllConnections?.(); server.close(resolve); }),
  };
}

/**
 * Serves `root` and `extra` (URL path -> Buffer, { body, type }, or a function answering
 * `(request, response, headers)` itself: `headers` are the isolation's), cross-origin isolated
 * unless `isolated` is false. Resolves to { url, close, requests, setOffline }.
 */
export async function startServer({ root = path.join(REPO, 'www'), extra = {}, port = 0, isolated = true } = {}) {
  const isolation = isolated ? ISOLATION_HEADERS : {};
  await fs.access(MODEL_PATH).catch(() => {
    throw new Error(`the model is missing at ${MODEL_PATH}: run ./build.sh model (or set NUCLEUS_MODEL)`);
  });
  return listen(async (request, response, pathname) => {
    if (typeof extra[pathname] === 'function') {
      extra[pathname](request, response, isolation);
      return;
    }
    if (extra[pathname]) {
      const { body, type } = Buffer.isBuffer(extra[pathname]) ? { body: extra[pathname] } : extra[pathname];
      response.writeHead(200, { ...isolation, 'content-type': type ?? 'application/octet-stream', 'content-length': body.length });
      response.end(body);
      return;
    }
    const file = MODELS[pathname]
      ?? path.join(root, path.normalize(pathname).replace(/^(\.\.[/\\])+/, ''), pathname.endsWith('/') ? 'index.html' : '');
    try {
      const stat = await fs.stat(file);
      if (!stat.isFile()) throw new Error('not a file');
      response.writeHead(200, {
        ...isolation,
        'content-type': TYPES[path.extname(file)] ?? 'application/octet-stream',
        'content-length': stat.size,
        'cache-control': 'no-store',
      });
      if (request.method === 'HEAD') response.end();
      else createReadStream(file).pipe(response);
    } catch {
      response.writeHead(404, { 'content-type': 'text/plain' });
      response.end('not found');
    }
  }, port);
}

/**
 * A second origin that serves the model with CORS, as a CDN would, and misbehaves on purpose:
 * - `/drop/model.gguf`: the first request's connection is cut after `dropAt` bytes; Range requests
 *   (`bytes=N-`) are answered 206 from byte N;
 * - `/no-range/model.gguf`: the same cut, but every request is answered 200 with the whole file;
 * - `/html/model.gguf`: an HTML "not found" page with status 200.
 * Resolves to { url, close, requests: [{ path, range }] }.
 */
export async function startModelOrigin({ dropAt = 20_000_000 } = {}) {
  const model = await fs.readFile(MODEL_PATH);
  const requests = [];
  const cut = new Set();
  const server = createServer((request, response) => {
    const pathname = new URL(request.url, 'http://x').pathname;
    if (request.method === 'OPTIONS') {
      response.writeHead(204, CORS_HEADERS);
      response.end();
      return;
    }
    const range = request.headers.range ?? null;
    requests.push({ path: pathname, range });
    if (pathname === '/html/model.gguf') {
      const page = Buffer.from('<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head><body>Not here</body></html>');
      response.writeHead(200, { ...CORS_HEADERS, 'content-type': 'text/html', 'content-length': page.length });
      response.end(page);
      return;
    }
    const [, kind] = /^\/(drop|no-range)\/model\.gguf$/.exec(pathname) ?? [];
    if (!kind) {
      response.writeHead(404, CORS_HEADERS);
      response.end();
      return;
    }
    const start = kind === 'drop' && range ? Number(/^bytes=(\d+)-$/.exec(range)?.[1] ?? 0) : 0;
    const headers = { ...CORS_HEADERS, 'content-type': 'application/octet-stream', etag: '"model-v1"' };
    if (start > 0) {
      response.writeHead(206, { ...headers, 'content-length': model.length - start,
        'content-range': `bytes ${start}-${model.length - 1}/${model.length}` });
      response.end(model.subarray(start));
      return;
    }
    response.writeHead(200, { ...headers, 'content-length': model.length });
    if (cut.has(kind)) {
      response.end(model);
      return;
    }
    cut.add(kind);
    response.write(model.subarray(0, dropAt), () => response.socket.destroy());
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}/`,
    requests,
    close: () => new Promise((resolve) => { server.closeAllConnections?.(); server.close(resolve); }),
  };
}

/**
 * One origin of a site made of several (a page's, a CDN's, a model host's): `routes` maps URL path
 * prefixes to a folder or a file, or to `{ path, types }` whose `types` overrides content types by
 * extension (a CDN that serves wasm as application/octet-stream); `rewrite` replaces strings in the HTML and JS it serves (the
 * public URLs an example names, by this test's origins); `cors` answers any origin;
 * `isolated` sends COOP and COEP. Resolves to { url, requests, setOffline, close }.
 */
export async function startOrigin({ routes, rewrite = [], cors = false, isolated = false }) {
  const headers = { ...(cors && CORS_HEADERS), ...(isolated && ISOLATION_HEADERS) };
  return listen(async (request, response, pathname) => {
    if (request.method === 'OPTIONS') {
      response.writeHead(204, headers);
      response.end();
      return;
    }
    const route = Object.keys(routes).filter((prefix) => pathname.startsWith(prefix)).sort((a, b) => b.length - a.length)[0];
    const { path: target, types = {} } = route === undefined ? {} : typeof routes[route] === 'string' ? { path: routes[route] } : routes[route];
    let file = target && (route.endsWith('/') ? path.join(target, path.normalize(pathname.slice(route.length)).replace(/^(\.\.[/\\])+/, '')) : target);
    try {
      if (file && (await fs.stat(file)).isDirectory()) file = path.join(file, 'index.html');
      const body = await fs.readFile(file);
      const type = types[path.extname(file)] ?? TYPES[path.extname(file)] ?? 'application/octet-stream';
      let out = body;
      if (/^text\/(html|javascript)/.test(type)) {
        let text = body.toString('utf8');
        for (const [from, to] of rewrite) text = text.replaceAll(from, to);
        out = Buffer.from(text);
      }
      response.writeHead(200, { ...headers, 'content-type': type, 'content-length': out.length, 'cache-control': 'no-store' });
      response.end(request.method === 'HEAD' ? undefined : out);
    } catch {
      response.writeHead(404, { ...headers, 'content-type': 'text/plain' });
      response.end('not found');
    }
  });
}
