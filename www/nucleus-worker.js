// The Web Worker that runs the engine (wasm: on WebGPU, or the CPU engine) off the page's thread.
//
// It answers the requests of `nucleus.js` (protocol.js types every message and error code). One
// model per worker, one generation at a time (a second one is `busy`).

import {
  ALIVE_MS, ERROR_CODES, HELPER_START_MS, LOCAL_MODELS, NO_ADAPTER_MESSAGE, NO_WEBGPU_MESSAGE, REPLY, REQUEST,
  codedError, emulatedAdapter, openModelCache, threadsProblem, webAssemblyProblem, wireError,
} from './protocol.js';
import { downloadModel, planWhole, readFile, readStored, storeAsRead, storeBlob, storeModel } from './download.js';

/** The loaded WasmEngine, its load time, and the current generation's bookkeeping. */
let engine = null;
let loadMs = 0;
let generation = null; // { id, aborted, inFlight: Promise | null, done, queueAtStart, queueAfterFirstStep, steps }
let nextGenerationId = 1;
/** The engine's wasm module once loaded (engineModule), and its memory (its size is one of the diagnostics). */
let wasm = null;
let wasmMemory = null;
/** Once the GPU device is lost, the error every later request that needs it gets. */
let deviceLost = null;
/** The requests that need the GPU. */
const NEEDS_GPU = new Set([REQUEST.generate, REQUEST.next, REQUEST.logitLens, REQUEST.score, REQUEST.attention,
  REQUEST.beamSearch]);

/**
 * The GPU calls this worker has made: every GPUComputePassEncoder.dispatchWorkgroups,
 * GPUQueue.submit and GPUQueue.writeBuffer. wgpu (inside the wasm) calls them through
 * wasm-bindgen's glue, which looks the method up on the object at each call, so wrapping the
 * prototypes' methods once counts them all.
 */
const queueCalls = { dispatches: 0, submits: 0, bufferWrites: 0 };
for (const [prototype, method, counter] of [
  [self.GPUComputePassEncoder?.prototype, 'dispatchWorkgroups', 'dispatches'],
  [self.GPUQueue?.prototype, 'submit', 'submits'],
  [self.GPUQueue?.prototype, 'writeBuffer', 'bufferWrites'],
]) {
  if (!prototype) continue;
  const original = prototype[method];
  prototype[method] = function counted(...args) {
    queueCalls[counter] += 1;
    return original.apply(this, args);
  };
}

/** The GPU calls between two copies of `queueCalls`. */
function queueCallsBetween(earlier, later) {
  return Object.fromEntries(Object.keys(later).map((key) => [key, later[key] - earlier[key]]));
}

const fail = codedError;

async function adapterFacts() {
  if (!navigator.gpu) {
    throw fail('no-webgpu', NO_WEBGPU_MESSAGE);
  }
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) {
    throw fail('no-webgpu', NO_ADAPTER_MESSAGE);
  }
  const info = adapter.info ?? {};
  return {
    adapter: {
      vendor: info.vendor ?? '',
      architecture: info.architecture ?? '',
      description: info.description ?? '',
      isFallback: Boolean(info.isFallbackAdapter ?? adapter.isFallbackAdapter ?? false),
      maxBufferSize: adapter.limits.maxBufferSize,
      maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
    },
    f16: adapter.features.has('shader-f16'),
  };
}

/**
 * The engine's wasm module for a backend: for the CPU engine in a cross-origin isolated page on
 * a machine with several cores, the threaded build (shared memory; threadedModule picks which),
 * whose helpers (one per core but this one) startHelpers asks the page for once the model is in
 * memory; else the plain build, one thread. Resolves to `{ module, memory, helpers, note, script
 * }`, `note` saying why it runs on one thread when it could not run on more, `script` the threaded
 * build's URL (its helpers load it).
 */
async function engineModule(kind) {
  const cores = navigator.hardwareConcurrency || 1;
  const plain = async (note) => {
    const module = await import('./pkg/nucleus_web.js');
    return { module, memory: (await module.default()).memory, helpers: 0, note };
  };
  if (kind !== 'cpu' || cores === 1) return plain(null);
  const problem = threadsProblem(self);
  if (problem) return plain(`one thread: ${problem}`);
  try {
    const script = threadedModule();
    const module = await import(script);
    const { memory } = await module.default();
    return { module, memory, helpers: cores - 1, note: null, script };
  } catch (error) {
    console.warn(`nucleus: the threaded engine did not start (${error.message}); running on one thread`);
    return plain(`one thread: the threaded engine did not start (${error.message})`);
  }
}

/**
 * The threaded build this engine runs: the one with relaxed SIMD (fused multiply-adds) where the
 * engine validates its instructions (Chromium, Firefox), else the one without (WebKit).
 */
function threadedModule() {
  const name = WebAssembly.validate(RELAXED_SIMD_PROBE) ? 'nucleus_web_threads_relaxed' : 'nucleus_web_threads';
  return new URL(`./pkg/${name}.js`, import.meta.url).href;
}

/** A module of one function that splats two i8x16 and swizzles them with `i8x16.relaxed_swizzle`. */
const RELAXED_SIMD_PROBE = new Uint8Array([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // \0asm, version 1
  0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7b, // types: () -> v128
  0x03, 0x02, 0x01, 0x00, // functions: one of type 0
  0x0a, 0x0f, 0x01, 0x0d, 0x00, // code: one body of 13 bytes, no locals
  0x41, 0x01, 0xfd, 0x0f, 0x41, 0x02, 0xfd, 0x0f, // i32.const 1, i8x16.splat, i32.const 2, i8x16.splat
  0xfd, 0x80, 0x02, 0x0b, // i8x16.relaxed_swizzle, end
]);

/**
 * The threaded engine's helpers, started by the page (protocol.js, HelpersReply) after the model
 * is in memory, so that the shared memory has grown to the model's size on one thread (Safari is
 * known to break growing a shared memory under several threads). Waits up to HELPER_START_MS for
 * them; the engine splits its work for those that run. Resolves to `{ threads, note }`.
 */
async function startHelpers(count, script, replyTo) {
  wasm.expectThreadHelpers(count);
  self.postMessage({ id: replyTo, type: REPLY.helpers, count, script, module: wasm.compiledModule(),
    memory: wasmMemory });
  const deadline = performance.now() + HELPER_START_MS;
  while (wasm.threadHelpersRunning() < count && performance.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  const running = wasm.threadHelpersRunning();
  if (running === count) return { threads: count + 1, note: null };
  wasm.expectThreadHelpers(running);
  const note = `${running} of ${count} helper threads started within ${HELPER_START_MS / 1000} s`;
  console.warn(`nucleus: ${note}`);
  return { threads: running + 1, note };
}

/** A thread count is kept unless its decode step is more than this much slower than the fastest's. */
const THREADS_TOLERANCE = 2;

/**
 * How many of the `available` threads the CPU engine uses: the most whose decode step
 * (`scratchStep`, best of two, on 1, 2, 4, ... threads and on all) is within THREADS_TOLERANCE
 * of the fastest; the other helpers wait on the bench. `hardwareConcurrency` alone can overshoot:
 * WebKit rounds it up (4 on a 2-core machine), where the extra helpers only take cores from the
 * others. The tolerance is wide because one step at position 0 under-reports what threads give a
 * whole decode (Gemma 3 270M in Chromium here: 49 ms on one thread, 54 on two, yet 18.4 against
 * 22.8 tok/s decoding), and helpers just started are slow (a first load in CI timed two threads
 * more than 25 % slower than one, and kept one): a count is dropped only when it is clearly
 * slower. Resolves to `{ threads, timings }` (ms per step by count).
 */
function measuredThreads(available) {
  const counts = [];
  for (let n = 1; n < available; n *= 2) counts.push(n);
  counts.push(available);
  // Helpers just started are slow at first (one first load here timed 23 ms on one thread and 39
  // on two, the next 22 and 14): two steps on all of them first.
  engine.scratchStep();
  engine.scratchStep();
  const timings = {};
  for (const n of counts) {
    wasm.expectThreadHelpers(n - 1);
    let best = Infinity;
    for (let i = 0; i < 2; i += 1) {
      const started = performance.now();
      engine.scratchStep();
      best = Math.min(best, performance.now() - started);
    }
    timings[n] = Math.round(best * 100) / 100;
  }
  const fastest = Math.min(...Object.values(timings));
  const threads = counts.findLast((n) => timings[n] <= fastest * THREADS_TOLERANCE);
  wasm.expectThreadHelpers(threads - 1);
  return { threads, timings };
}

/**
 * Rounds of each way to sum byte products (`measuredByteDot`), alternating, the fastest of each
 * kept. V8 compiles a function with its optimising tier once it has run hot, and a way's products
 * are several functions (each format's row loop is one of its own), hot one after another: on a
 * 2-core AMD EPYC in Chromium 156 the probe's time fell in steps until the 18th round
 * (`accumulating` 2.2 -> 1.2 -> 0.84 -> 0.80 ms, `paired` 1.3 -> 0.92 -> 0.70 -> 0.62). Ten rounds
 * there once kept `accumulating`, with which SmolLM2 decodes 5 % slower.
 */
const BYTE_DOT_ROUNDS = 30;

/**
 * How the CPU engine sums its byte products on this CPU (`byteDotChoices`: two in the relaxed SIMD
 * module, none in the others): each timed on `byteDotProbe` (decode-shaped products on this
 * thread), the fastest of BYTE_DOT_ROUNDS, alternating, and the faster kept. Which is faster
 * depends on the CPU, which a page cannot ask: ARM's `sdot` and x86's AVX-VNNI add bytes'
 * products in one instruction (`accumulating`), where other x86 CPUs sum them faster in pairs
 * (`paired`: Qwen3.5-0.8B's shape decoded 1.4x as fast on an Intel Xeon without AVX-VNNI).
 * Resolves to `{ byteDot, byteDotTimings }` (ms by name), or `{}` where the module has one way.
 */
function measuredByteDot() {
  const choices = wasm.byteDotChoices();
  if (choices.length < 2) return {};
  const timings = Object.fromEntries(choices.map((name) => [name, Infinity]));
  for (let round = 0; round < BYTE_DOT_ROUNDS; round += 1) {
    for (const name of choices) {
      wasm.setByteDot(name);
      const started = performance.now();
      wasm.byteDotProbe();
      timings[name] = Math.min(timings[name], performance.now() - started);
    }
  }
  const byteDot = choices.reduce((best, name) => (timings[name] < timings[best] ? name : best));
  wasm.setByteDot(byteDot);
  const byteDotTimings = Object.fromEntries(choices.map((name) => [name, Math.round(timings[name] * 1000) / 1000]));
  return { byteDot, byteDotTimings };
}

/**
 * Where the model runs, for what the page asked (protocol.js, Backend): `{ backend: { kind:
 * 'webgpu' | 'cpu', reason }, adapter, f16 }`, `adapter` the WebGPU adapter's facts whether it runs
 * the model or not (null without one). `webgpu` without an adapter is `no-webgpu`.
 */
async function chooseBackend(asked) {
  const none = { adapter: null, f16: false };
  if (asked === 'cpu') return { backend: { kind: 'cpu', reason: "asked for (backend: 'cpu')" }, ...none };
  let facts;
  try {
    facts = await adapterFacts();
  } catch (error) {
    if (asked === 'webgpu') throw error;
    return { backend: { kind: 'cpu', reason: error.message }, ...none };
  }
  const { vendor, architecture, description } = facts.adapter;
  const name = [vendor, architecture, description].filter(Boolean).join(' ') || 'unnamed';
  if (asked === 'webgpu') return { backend: { kind: 'webgpu', reason: `asked for (backend: 'webgpu'): ${name}` }, ...facts };
  const emulation = emulatedAdapter(facts.adapter);
  return emulation
    ? { backend: { kind: 'cpu', reason: `the only WebGPU adapter (${emulation}) emulates a GPU on the CPU, where the CPU engine is several times faster` }, ...facts }
    : { backend: { kind: 'webgpu', reason: `a hardware WebGPU adapter: ${name}` }, ...facts };
}

/**
 * The model's file (a `wasm.ModelFile` made by `newFile`: its bytes in wasm memory, or on WebGPU
 * sent on to the GPU as they arrive), from the Cache API when a previous load stored a whole
 * copy, else downloaded (download.js: resumed after a dropped connection, checked to begin like a
 * GGUF file, planned from its first bytes with `plan`), with the file's SHA-256 and `keep()`,
 * which stores a download in the Cache API once it has loaded (resolving as storeModel does), and
 * `drop()`, which gives that up. With `sha256` given, a stored copy that does not match is dropped
 * and downloaded again, never used; a download that does not match is `bad-model`. A failure frees
 * the file.
 */
async function fetchModel(url, useCache, expectedSha256, progress, plan, newFile) {
  const cache = await modelCache(useCache);
  const stored = cache ? await cache.match(url) : undefined;
  const nothingToKeep = { keep: async () => null, drop() {} };
  if (stored) {
    const file = await filled((file) => readStored(stored, file, (loaded, size) => progress('download', loaded, size, true)), newFile());
    const sha256 = file.length && file.sha256();
    if (sha256 && (!expectedSha256 || sha256 === expectedSha256)) {
      // Planned as a download is (a stored copy loads with the context a download would).
      await filled(() => planWhole(file, plan), file);
      return { file, sha256, cache, fromCache: true, ...nothingToKeep };
    }
    // A stored copy that is not the whole file, or not the file, is dropped and downloaded again.
    file.free();
    await cache.delete(url).catch(() => {});
  }
  // A file whose bytes go on to the GPU is stored as it arrives; one kept whole, from wasm memory.
  const asRead = cache && newFile.streams ? storeAsRead(cache, url) : null;
  const report = (loaded, total) => progress('download', loaded, total, false);
  let file;
  try {
    file = await filled((file) => downloadModel(url, asRead ? asRead.wrap(file) : file, report, plan), newFile());
  } catch (error) {
    asRead?.abandon();
    throw error;
  }
  const sha256 = file.sha256();
  const keeping = asRead
    ? { keep: () => asRead.commit(), drop: () => asRead.abandon() }
    : { keep: async () => (cache ? storeModel(cache, url, file) : null), drop() {} };
  if (expectedSha256 && sha256 !== expectedSha256) {
    keeping.drop();
    file.free();
    throw fail('bad-model', `${url} is not the model expected: its sha256 is ${sha256}, not ${expectedSha256}`);
  }
  return { file, sha256, cache, fromCache: false, ...keeping };
}

/**
 * `fill(file)` on `file`, which it resolves to; a failure frees it. A stored copy's `fill`
 * resolves to false when it is not whole: the file is emptied.
 */
async function filled(fill, file) {
  try {
    if ((await fill(file)) === false) file.clear();
    return file;
  } catch (error) {
    freeAfter(file, error);
  }
}

/**
 * Frees `object` after `error` ended its use, and throws `error`. A WebAssembly trap inside one of
 * the object's calls leaves it borrowed, and its `free()` then throws wasm-bindgen's "attempted to
 * take ownership of Rust value while it was borrowed": that must not hide the trap.
 */
function freeAfter(object, error) {
  try {
    object.free();
  } catch {
    // The memory is the worker's: it goes when the page ends the worker after this failure.
  }
  throw error;
}

/**
 * What loading a file takes here, from the first bytes a `ModelFile` holds as they arrive
 * (wasm.planLoad: the load's own checks, and this browser's WebAssembly memory), asked before the
 * rest is downloaded or read (download.js). A model that cannot fit is refused then with the
 * load's typed error, naming the largest contextLength that fits; without a contextLength asked,
 * the CPU engine runs the most of the trained context that fits. `plan.latest` is the last answer.
 */
function planner(backend, contextLength, memoryBudget, adapter) {
  const plan = (file, fileLength) => {
    const answer = JSON.parse(wasm.planLoad(file, fileLength, backend, contextLength ?? undefined,
      memoryBudget ?? undefined));
    plan.latest = answer.needBytes ? answer : { ...answer, offers: deviceOffers(adapter) };
    return plan.latest;
  };
  plan.latest = null;
  return plan;
}

/**
 * What this device offers a model, shown beside its plan (nucleus.d.ts, DeviceOffers): the most a
 * WebAssembly memory holds, the memory the browser says the device has (`navigator.deviceMemory`,
 * GiB, rounded and capped by the browser; null where it does not say), and the WebGPU adapter's
 * largest buffer and storage binding (null without an adapter).
 */
function deviceOffers(adapter) {
  const gib = navigator.deviceMemory;
  return {
    wasmMemoryBytes: wasm.wasmMemoryLimit(),
    deviceMemoryBytes: Number.isFinite(gib) && gib > 0 ? gib * 2 ** 30 : null,
    gpuMaxBufferBytes: adapter?.maxBufferSize ?? null,
    gpuMaxBindingBytes: adapter?.maxStorageBufferBindingSize ?? null,
  };
}

/** The models' cache, when the load may use it and the browser has one (a sandboxed frame has none). */
function modelCache(useCache) {
  return useCache ? openModelCache(self) : null;
}

/**
 * A file given to the page, as fetchModel: its bytes (checked to be GGUF before the engine sees
 * them), and the key it is kept under (LOCAL_MODELS): a file kept whole is stored from wasm
 * memory, one whose bytes went on to the GPU from the given file itself.
 */
async function readGivenFile(given, name, useCache, progress, plan, newFile) {
  const file = await filled((file) => readFile(given, name, file, (loaded, total) => progress('read', loaded, total, false), plan), newFile());
  const sha256 = file.sha256();
  const url = new URL(`${LOCAL_MODELS}/${sha256}/${encodeURIComponent(name)}`, self.location.href).href;
  const cache = await modelCache(useCache);
  const keep = async () => {
    if (!cache) return null;
    return newFile.streams ? storeBlob(cache, url, given) : storeModel(cache, url, file);
  };
  return { url, file, sha256, cache, fromCache: false, keep, drop() {} };
}

/**
 * Makes the `wasm.ModelFile` a load fills: on WebGPU one that sends each tensor on to the GPU as
 * it arrives and keeps the header alone (`streams`: wasm memory holds the tensor being received,
 * not the file); on the CPU engine, whose weights are the file's bytes, one that keeps them.
 */
function modelFiles(backend, contextLength, memoryBudget) {
  const streams = backend === 'webgpu';
  const newFile = () => (streams
    ? wasm.ModelFile.streaming(contextLength ?? undefined, memoryBudget ?? undefined)
    : new wasm.ModelFile());
  newFile.streams = streams;
  return newFile;
}

/** One handler per request type of protocol.js, each returning the reply's value. */
const handlers = {
  async [REQUEST.load]({ id, url: given, file, name, sha256: expectedSha256, contextLength, memoryBudget, cache: useCache, backend: asked, panicForTesting, hangForTesting }, progress) {
    if (engine) throw fail('busy', 'this worker already holds a model');
    const noWebAssembly = webAssemblyProblem(self);
    if (noWebAssembly) throw fail('no-webassembly', noWebAssembly);
    const started = performance.now();
    const facts = await chooseBackend(asked);
    const loaded = await engineModule(facts.backend.kind);
    ({ module: wasm, memory: wasmMemory } = loaded);
    if (panicForTesting) wasm.panicForTesting();
    // Blocks this thread as a `new Worker` that never returns did: nothing more comes from here.
    if (hangForTesting) for (;;);
    facts.backend.threads = 1;
    if (loaded.note) facts.backend.reason += ` (${loaded.note})`;
    // The WebGPU device first: the load is planned on it, between the download's chunks.
    if (facts.backend.kind === 'webgpu') await wasm.prepareBackend(facts.backend.kind);
    const plan = planner(facts.backend.kind, contextLength, memoryBudget, facts.adapter);
    // Once the header is read, every progress report carries the plan (the page shows it).
    const known = () => (plan.latest?.contextLength ? plan.latest : null);
    const reported = (phase, loaded, total, cached) => progress(phase, loaded, total, cached, known());
    const newFile = modelFiles(facts.backend.kind, contextLength, memoryBudget);
    const { url, file: model, sha256, cache, fromCache, keep, drop } = file
      ? await readGivenFile(file, name, useCache, reported, plan, newFile)
      : { url: given, ...await fetchModel(given, useCache, expectedSha256, reported, plan, newFile) };
    const planned = known();
    let cacheError = null;
    try {
      try {
        engine = await wasm.loadEngine(model, facts.backend.kind, contextLength ?? planned?.contextLength,
          memoryBudget ?? undefined,
          (phase, loaded, total) => reported(phase, loaded, total, fromCache));
      } catch (error) {
        // A stored copy that no longer loads is dropped, so the next load downloads it again.
        if (fromCache) await cache.delete(url).catch(() => {});
        drop();
        throw error;
      }
      // The byte products' summing first, on this thread alone: the threads are then timed with it.
      if (facts.backend.kind === 'cpu') Object.assign(facts.backend, measuredByteDot());
      if (loaded.helpers > 0) {
        const { threads: running, note } = await startHelpers(loaded.helpers, loaded.script, id);
        if (note) facts.backend.reason += ` (${note})`;
        if (running > 1) {
          const { threads, timings } = measuredThreads(running);
          Object.assign(facts.backend, { threads, threadTimings: timings });
          if (threads < running) facts.backend.reason += ` (${threads} of ${running} threads: more were slower)`;
        }
      }
      cacheError = await keep();
      if (cacheError) console.warn(`nucleus: ${cacheError.message}`);
    } catch (error) {
      freeAfter(model, error);
    }
    // The engine holds what it reads of the file (the CPU engine: the file's bytes, in place).
    model.free();
    loadMs = performance.now() - started;
    return {
      ...JSON.parse(engine.info(file ? name : String(url))), ...facts, url, sha256, loadMs, fromCache,
      plan: planned ?? null,
      cacheError: cacheError && { code: cacheError.code, message: cacheError.message },
    };
  },

  async [REQUEST.tokenize]({ text }) {
    return [...engine.tokenize(text)];
  },

  async [REQUEST.generate]({ options }) {
    if (generation && !generation.done) {
      throw fail('busy', 'a generation is running: iterate it to the end or abort it first');
    }
    engine.start(options);
    generation = { id: nextGenerationId++, aborted: false, inFlight: null, done: false,
      queueAtStart: { ...queueCalls }, queueAfterFirstStep: null, steps: 0 };
    return generation.id;
  },

  async [REQUEST.next]({ gen, reportPrefill }, progress) {
    const current = currentGeneration(gen);
    if (current.done || current.aborted) return null;
    current.inFlight = engine.nextStep(reportPrefill
      ? (done, total, cached) => progress('prefill', done, total, cached)
      : undefined);
    let json;
    try {
      json = await current.inFlight;
    } catch (error) {
      // A failed step ends its generation: the next one may start.
      current.done = true;
      throw error;
    } finally {
      current.inFlight = null;
    }
    if (json === null) {
      current.done = true;
      return null;
    }
    const step = JSON.parse(json);
    current.steps += 1;
    if (current.steps === 1) current.queueAfterFirstStep = { ...queueCalls };
    const logits = engine.takeLogits();
    if (logits) step.logits = logits;
    if (step.finishReason) current.done = true;
    return step;
  },

  async [REQUEST.logitLens]({ options }) {
    if (generation && !generation.done) {
      throw fail('busy', 'a generation is running: iterate it to the end or abort it first');
    }
    return JSON.parse(await engine.logitLens(options));
  },

  async [REQUEST.score]({ options }) {
    if (generation && !generation.done) {
      throw fail('busy', 'a generation is running: iterate it to the end or abort it first');
    }
    return JSON.parse(await engine.score(options));
  },

  async [REQUEST.attention]({ options }) {
    if (generation && !generation.done) {
      throw fail('busy', 'a generation is running: iterate it to the end or abort it first');
    }
    return JSON.parse(await engine.attention(options));
  },

  async [REQUEST.beamSearch]({ options }) {
    if (generation && !generation.done) {
      throw fail('busy', 'a generation is running: iterate it to the end or abort it first');
    }
    return JSON.parse(await engine.beamSearch(options));
  },

  /** Stops the generation after the step in flight, if any; resolves to its result. */
  async [REQUEST.abort]({ gen }) {
    const current = currentGeneration(gen);
    current.aborted = true;
    if (current.inFlight) await current.inFlight.catch(() => {});
    if (!current.done) {
      engine.stop();
      current.done = true;
    }
    return result();
  },

  async [REQUEST.result]({ gen }) {
    currentGeneration(gen);
    return result();
  },

  async [REQUEST.diagnostics]() {
    return { ...JSON.parse(engine.diagnostics()), wasmMemoryBytes: wasmMemory?.buffer.byteLength ?? 0 };
  },

  async [REQUEST.panicForTesting]() {
    wasm.panicForTesting();
  },

  [REQUEST.crashWorkerForTesting]() {
    setTimeout(() => {
      throw new Error('a crash for testing (crashWorkerForTesting)');
    });
    return new Promise(() => {});
  },

  async [REQUEST.loseDeviceForTesting]() {
    wasm.loseDeviceForTesting();
    // The loss is reported asynchronously; give it a moment to land.
    await new Promise((resolve) => setTimeout(resolve, 100));
    return true;
  },
};

function currentGeneration(id) {
  if (!generation || generation.id !== id) throw fail('bad-options', `generation ${id} is not the current one`);
  return generation;
}

function result() {
  const value = JSON.parse(engine.result());
  value.timing.loadMs = loadMs;
  value.transfer.gpuQueue = gpuQueueOf(generation);
  return value;
}

/**
 * A generation's GPU queue calls: the first step (prefill and the first token), then the mean per
 * later step (null before there is one).
 */
function gpuQueueOf({ queueAtStart, queueAfterFirstStep, steps }) {
  const now = { ...queueCalls };
  if (!queueAfterFirstStep) return { firstStep: queueCallsBetween(queueAtStart, now), perDecodeToken: null };
  const decode = queueCallsBetween(queueAfterFirstStep, now);
  const decodeSteps = steps - 1;
  return {
    firstStep: queueCallsBetween(queueAtStart, queueAfterFirstStep),
    perDecodeToken: decodeSteps > 0
      ? Object.fromEntries(Object.entries(decode).map(([key, n]) => [key, n / decodeSteps]))
      : null,
  };
}

/** @param {MessageEvent<import('./protocol.js').Request>} event */
self.onmessage = async ({ data }) => {
  const { id, type } = data;
  const progress = (phase, loaded, total, cached, plan) =>
    self.postMessage({ id, type: REPLY.progress, phase, loaded, total, cached, ...(plan && { plan }) });
  // A load says it is alive as it starts and while it runs (AliveReply): the page ends a worker
  // that stops answering, and tries again only one that started.
  const beat = () => self.postMessage({ id, type: REPLY.alive });
  const alive = type === REQUEST.load ? (beat(), setInterval(beat, ALIVE_MS)) : null;
  try {
    const handler = Object.hasOwn(handlers, type) ? handlers[type] : null;
    if (!handler) throw fail('internal', `unknown request ${type}`);
    if (deviceLost && NEEDS_GPU.has(type)) throw deviceLost;
    const value = await handler(data, progress);
    // A step's logits row moves to the page instead of being copied.
    self.postMessage({ id, type: REPLY.ok, value }, value?.logits ? [value.logits.buffer] : []);
  } catch (error) {
    const wire = wireError(error, () => wasm?.lastPanic());
    if (wire.code === 'device-lost') {
      const advice = ERROR_CODES['device-lost'];
      deviceLost ??= fail('device-lost', wire.message.includes(advice) ? wire.message : `${wire.message} (${advice})`);
    }
    self.postMessage({ id, type: REPLY.error, error: wire });
  } finally {
    clearInterval(alive);
  }
};
