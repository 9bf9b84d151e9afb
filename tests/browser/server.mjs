// A static file server for the browser tests and benchmark: serves www/ on 127.0.0.1, the default
// model at /models/, and extra in-memory files (a corrupt model, a truncated one, a blank page).

import { createServer } from 'node:http';
import { createReadStream, promises as fs } from 'node:fs';
import path from 'node:path';
import os from 'node:os';
import { fileURLToPath } from 'node:url';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
/** A page with nothing on it but the site's origin, for tests that drive the JS API themselves. */
export const BLANK_PAGE = { '/blank.html': { body: Buffer.from('<!doctype html><title>blank</title><link rel="icon" href="data:,">'), type: 'text/html' } };

export const MODEL_NAME = 'SmolLM2-135M-Instruct.Q4_1.gguf';
export const MODEL_PATH = process.env.NUCLEUS_MODEL
  ?? path.join(os.homedir(), '.cache/nucleus/models', MODEL_NAME);

const TYPES = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8',
  '.wasm': 'application/wasm', '.json': 'application/json', '.svg': 'image/svg+xml', '.png': 'image/png',
  '.gguf': 'application/octet-stream',
};

/** Serves `root` and `extra` (URL path -> Buffer, or { body, type }). Resolves to { url, close, requests }. */
export async function startServer({ root = path.join(REPO, 'www'), extra = {}, port = 0 } = {}) {
  await fs.access(MODEL_PATH).catch(() => {
    throw new Error(`the model is missing at ${MODEL_PATH}: run ./build.sh model (or set NUCLEUS_MODEL)`);
  });
  const requests = [];
  const server = createServer(async (request, response) => {
    const pathname = decodeURIComponent(new URL(request.url, 'http://x').pathname);
    requests.push(pathname);
    if (extra[pathname]) {
      const { body, type } = Buffer.isBuffer(extra[pathname]) ? { body: extra[pathname] } : extra[pathname];
      response.writeHead(200, { 'content-type': type ?? 'application/octet-stream', 'content-length': body.length });
      response.end(body);
      return;
    }
    const file = pathname === `/models/${MODEL_NAME}`
      ? MODEL_PATH
      : path.join(root, path.normalize(pathname).replace(/^(\.\.[/\\])+/, ''), pathname.endsWith('/') ? 'index.html' : '');
    try {
      const stat = await fs.stat(file);
      if (!stat.isFile()) throw new Error('not a file');
      response.writeHead(200, {
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
  });
  await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${server.address().port}/`;
  return { url, requests, close: () => new Promise((resolve) => server.close(resolve)) };
}
