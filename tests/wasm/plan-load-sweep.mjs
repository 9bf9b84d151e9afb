// Whether the engine's own memory accesses while a model loads stay in bounds, whatever chunks the
// network hands over: the plain module (www/pkg, `./build.sh web`; MODULE=nucleus_web_threads the
// threaded one without relaxed SIMD, on its one thread) in Node's V8 fills a wasm `ModelFile`
// through www/download.js as a worker does, from a stub `fetch` whose body comes in chunks of
// random sizes, planned by `planLoad` as the worker plans (`downloadModel`); then the stored copy's
// way (`readStored`, `planWhole`); then `planLoad` on prefixes of the header every 4,099 bytes. A
// tool for WebKit's "Out of bounds memory access" trap (ARCHITECTURE.md, "WebKit"), not a test:
// WebAssembly is deterministic, and each load runs in a new worker, so an access out of bounds that
// the module itself made for some chunking would trap here as well.
// Usage: node tests/wasm/plan-load-sweep.mjs [model.gguf (default $NUCLEUS_MODEL)] [downloads=100]
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { HEADER_FIRST_BYTES, downloadModel, planWhole, readStored } from '../../www/download.js';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const MODULE = process.env.MODULE ?? 'nucleus_web';
const wasm = await import(path.join(REPO, `www/pkg/${MODULE}.js`));
wasm.initSync({ module: readFileSync(path.join(REPO, `www/pkg/${MODULE}_bg.wasm`)) });

const modelPath = process.argv[2] ?? process.env.NUCLEUS_MODEL;
if (!modelPath) throw new Error('name a GGUF file, or set NUCLEUS_MODEL');
const downloads = Number(process.argv[3] ?? 100);
const bytes = readFileSync(modelPath);
const total = bytes.length;

// A seeded generator (SEED, default 1), so that a chunking that traps can be replayed.
let seed = Number(process.env.SEED ?? 1);
const random = () => {
  seed = (seed * 1103515245 + 12345) % 2 ** 31;
  return seed / 2 ** 31;
};

const counts = { plans: 0 };
const plan = (file, fileLength) => {
  counts.plans += 1;
  return JSON.parse(wasm.planLoad(file, fileLength, 'cpu', undefined, undefined));
};
/** Ends the sweep at the first failure: after a trap the instance is not to be trusted. */
const failed = (what, error) => {
  console.log(`${what}: ${error.message}`);
  console.log(JSON.stringify({ module: MODULE, ...counts, failed: what }));
  process.exit(1);
};

/** A response whose body is the file in chunks of random sizes, mostly small, up to 3 MiB. */
function chunkedResponse() {
  let at = 0;
  const body = new ReadableStream({
    pull(controller) {
      if (at >= total) {
        controller.close();
        return;
      }
      const end = Math.min(total, at + 1 + Math.floor(random() * random() * (3 << 20)));
      controller.enqueue(bytes.slice(at, end));
      at = end;
    },
  });
  return new Response(body, { headers: { 'content-length': String(total) } });
}

globalThis.fetch = async () => chunkedResponse();
for (let i = 0; i < downloads; i += 1) {
  const file = new wasm.ModelFile();
  const start = seed;
  try {
    await downloadModel('stub:model.gguf', file, () => {}, plan);
  } catch (error) {
    failed(`download ${i} (replayed by SEED=${start} and one download)`, error);
  }
  file.free();
}

for (let i = 0; i < 10; i += 1) {
  const file = new wasm.ModelFile();
  try {
    if (!(await readStored(chunkedResponse(), file, () => {}))) throw new Error('the stored copy did not read whole');
    planWhole(file, plan);
  } catch (error) {
    failed(`stored copy ${i}`, error);
  }
  file.free();
}

// Every 4,099th prefix from the first plan's size until the header is planned, and a MiB past it.
const file = new wasm.ModelFile();
let length = 0;
let planned = Infinity;
for (let end = HEADER_FIRST_BYTES; end <= Math.min(total, planned + (1 << 20)); end += 4099) {
  file.append(bytes.subarray(length, end));
  length = end;
  try {
    if (!plan(file, total).needBytes) planned = Math.min(planned, end);
  } catch (error) {
    failed(`the prefix of ${end} bytes`, error);
  }
}
file.free();
console.log(JSON.stringify({ module: MODULE, ...counts, failed: null, downloads, headerPlannedAt: planned }));
