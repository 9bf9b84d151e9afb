// The messages between the page (nucleus.js) and the engine's worker (nucleus-worker.js), and the
// error codes of the whole API: one definition, imported by both sides. README.md's error table
// is checked against ERROR_CODES (tests/browser/protocol.test.mjs), and so are the codes the Rust
// engine (crates/engine/src/error.rs) and its wasm glue (crates/web) can produce.
//
// A request is { id, type, ...payload }; the worker answers each with exactly one reply of type
// 'ok' or 'error' carrying the same id, and, for 'load' and 'next', any number of 'progress'
// messages first.

/**
 * @typedef {{ id: number, type: 'load', url?: string, file?: Blob, name?: string, sha256?: string,
 *   contextLength?: number, memoryBudget?: number, cache: boolean, backend: Backend,
 *   panicForTesting?: boolean, hangForTesting?: boolean }} LoadRequest
 *   Loads the model at `url` (one per worker), or the GGUF `file` a person gave the page (`name`:
 *   its file name), kept under a key of LOCAL_MODELS, on the backend `backend` asks for
 *   (chooseBackend). Replies with the model's `info`, whose `url` is where it was loaded from
 *   (that key, for a file) and whose `backend` says where it runs and why. `panicForTesting`:
 *   the engine panics once its module is in (`Nucleus.crashNextLoadForTesting`);
 *   `hangForTesting`: the worker's thread then blocks for good (`Nucleus.hangNextLoadForTesting`).
 * @typedef {{ id: number, type: 'tokenize', text: string }} TokenizeRequest
 *   Replies with the token ids (number[]).
 * @typedef {{ id: number, type: 'generate', options: string }} GenerateRequest
 *   Starts a generation; `options` is the generation request as JSON (non-finite numbers as
 *   strings, so that the engine rejects them by name). Replies with the generation's id.
 * @typedef {{ id: number, type: 'next', gen: number, reportPrefill?: boolean }} NextRequest
 *   Runs one step of generation `gen`. Replies with the step, or null when it has ended. With
 *   `reportPrefill`, a first step sends 'prefill' progress messages as its prompt goes: on WebGPU
 *   after each chunk it runs the prompt in, on the CPU engine after each block of its one pass.
 * @typedef {{ id: number, type: 'logitLens', options: string }} LogitLensRequest
 *   The logit lens of one step (`options`: `lm.logitLens`'s, as JSON). Replies with the report.
 *   Uses the KV cache: refused with `busy` while a generation runs.
 * @typedef {{ id: number, type: 'score', options: string }} ScoreRequest
 *   A text rated token by token (`options`: `lm.score`'s, the text as `prompt`, as JSON). Replies
 *   with the report. Replaces the KV cache's contents: refused with `busy` while a generation runs.
 * @typedef {{ id: number, type: 'attention', options: string }} AttentionRequest
 *   One layer's attention over a text (`options`: `lm.attention`'s, as JSON). Replies with the
 *   report. Replaces the KV cache's contents: refused with `busy` while a generation runs.
 * @typedef {{ id: number, type: 'beamSearch', options: string }} BeamSearchRequest
 *   A beam search (`options`: `lm.beamSearch`'s, as JSON). Replies with its hypotheses and tree.
 * @typedef {{ id: number, type: 'abort', gen: number }} AbortRequest
 *   Stops generation `gen` after the step in flight. Replies with its result.
 * @typedef {{ id: number, type: 'result', gen: number }} ResultRequest
 *   Replies with the result of generation `gen` (after its last step).
 * @typedef {{ id: number, type: 'loseDeviceForTesting' }} LoseDeviceRequest
 *   Destroys the GPU device, as a driver reset would. Replies with true.
 * @typedef {{ id: number, type: 'diagnostics' }} DiagnosticsRequest
 *   Replies with what the engine holds: { liveBuffers, liveBytes, kvCacheBytes, wasmMemoryBytes }.
 * @typedef {{ id: number, type: 'panicForTesting' }} PanicRequest
 *   Panics inside the engine, as a bug would. Replies with an `internal` error marked `crashed`.
 * @typedef {{ id: number, type: 'crashWorkerForTesting' }} CrashWorkerRequest
 *   Throws in the worker outside any request's handling, as a trap in a callback would. Never
 *   replies: the page's `worker.onerror` fails it with `worker-crashed`.
 * @typedef {LoadRequest | TokenizeRequest | GenerateRequest | NextRequest | LogitLensRequest | ScoreRequest | AttentionRequest | BeamSearchRequest
 *   | AbortRequest
 *   | ResultRequest | DiagnosticsRequest | LoseDeviceRequest | PanicRequest | CrashWorkerRequest} Request
 *
 * @typedef {{ id: number, type: 'progress', phase: 'download' | 'read' | 'parse' | 'upload', loaded: number,
 *   total: number, cached: boolean, plan?: object }} LoadProgressReply
 *   `loaded` and `total` in bytes (`read`: a file given to the page); `cached`: the file came from the
 *   browser's cache; `plan`: what the load will take (LoadPlan, nucleus.d.ts), once the file's
 *   header has been read.
 * @typedef {{ id: number, type: 'progress', phase: 'prefill', loaded: number, total: number,
 *   cached: number }} PrefillProgressReply
 *   `loaded` and `total` in prompt tokens; `cached`: the prompt tokens the KV cache already held.
 * @typedef {LoadProgressReply | PrefillProgressReply} ProgressReply
 * @typedef {{ id: number, type: 'helpers', count: number, script: string, module: WebAssembly.Module,
 *   memory: WebAssembly.Memory }} HelpersReply
 *   During a 'load' on the threaded CPU engine, once the model is in memory: the page starts
 *   `count` helper workers (nucleus-thread.js), each instantiating `module` (the script `script`)
 *   on the shared `memory`, and ends them with this worker. The page starts them, not this
 *   worker: Firefox's `new Worker` inside a worker blocked that worker for good about once in a
 *   hundred starts. The load waits for them a bounded time (HELPER_START_MS) and says how many run.
 * @typedef {{ id: number, type: 'alive' }} AliveReply
 *   As a 'load' starts and every ALIVE_MS while it runs: the worker started and its thread is
 *   not blocked. A load that hears nothing from its worker for LOAD_SILENCE_MS ends it
 *   (`worker-crashed`) and tries again; one whose worker crashed before it said anything (it
 *   could not start) does not.
 * @typedef {{ id: number, type: 'ok', value: unknown }} OkReply
 * @typedef {{ code: ErrorCode, message: string, option?: string, status?: number, crashed?: boolean }} WireError
 *   An error as it crosses to the page: `option` names a bad option, `status` an HTTP status;
 *   `crashed`: the engine trapped (a panic, or a fault of the browser's WebAssembly) and this
 *   worker can do nothing more: the page ends it (wireError).
 * @typedef {{ id: number, type: 'error', error: WireError }} ErrorReply
 * @typedef {ProgressReply | HelpersReply | AliveReply | OkReply | ErrorReply} Reply
 *
 * @typedef {keyof typeof ERROR_CODES} ErrorCode
 */

/**
 * @typedef {'auto' | 'webgpu' | 'cpu'} Backend
 *   What `Nucleus.load` may ask for: `webgpu` (the fused kernels on the GPU), `cpu` (the CPU
 *   engine, in the worker's wasm), or `auto`: WebGPU on a hardware adapter, the CPU engine where
 *   there is no adapter or only a CPU emulation of one.
 */
export const BACKENDS = Object.freeze(['auto', 'webgpu', 'cpu']);

/**
 * What runs a WebGPU adapter on the CPU, by the names browsers give them: Chromium's SwiftShader,
 * Mesa's llvmpipe and lavapipe (Firefox and Chromium on Linux without a GPU driver), Windows'
 * WARP ("Microsoft Basic Render Driver"). Such an adapter decodes the default model at 1.7
 * tokens a second here, the CPU engine at about 15 times that.
 */
const CPU_ADAPTERS = /swiftshader|llvmpipe|lavapipe|softpipe|warp|basic render/i;

/**
 * The name of the CPU emulation an adapter is (`isFallback`, or one of CPU_ADAPTERS), or null for
 * a hardware adapter.
 * @param {{ vendor: string, architecture: string, description: string, isFallback: boolean }} adapter
 */
export function emulatedAdapter({ vendor, architecture, description, isFallback }) {
  const named = CPU_ADAPTERS.exec(`${vendor} ${architecture} ${description}`)?.[0];
  if (named) return named;
  return isFallback ? [vendor, architecture, description].filter(Boolean).join(' ') || 'a fallback adapter' : null;
}

/** The Cache API cache that keeps models between visits, by URL (the worker stores, the page lists). */
export const MODEL_CACHE = 'nucleus-models-v1';

/**
 * Where in MODEL_CACHE a file given to the page is kept: `<this path>/<sha256>/<file name>` beside
 * the worker's script, a key that is never fetched (once removed from the cache, loading it fails
 * with `fetch-failed`).
 */
export const LOCAL_MODELS = 'nucleus-local-models';

/** The request types, by name. */
export const REQUEST = Object.freeze({
  load: 'load',
  tokenize: 'tokenize',
  generate: 'generate',
  next: 'next',
  logitLens: 'logitLens',
  score: 'score',
  attention: 'attention',
  beamSearch: 'beamSearch',
  abort: 'abort',
  result: 'result',
  diagnostics: 'diagnostics',
  loseDeviceForTesting: 'loseDeviceForTesting',
  panicForTesting: 'panicForTesting',
  crashWorkerForTesting: 'crashWorkerForTesting',
});

/** The reply types, by name. */
export const REPLY = Object.freeze({ ok: 'ok', error: 'error', progress: 'progress', helpers: 'helpers', alive: 'alive' });

/**
 * While it loads, the worker says it is alive this often (AliveReply), whatever else it sends: its
 * thread is not blocked.
 */
export const ALIVE_MS = 1_000;

/**
 * A load whose worker sends nothing for this long has stopped answering (its thread blocked: a
 * `new Worker` that never returned in Firefox, once; ARCHITECTURE.md, "Who starts the helpers"):
 * the page ends that worker, `worker-crashed`, and tries the load again in a new one. Measured
 * here, the longest a load's worker was silent: 0.13–0.69 s for SmolLM2 and 0.21–1.46 s for
 * Gemma 3 270M in Chromium, Firefox and WebKit (what fills those gaps was not measured); a 4B
 * file's largest tensors are four times Gemma 270M's, and a slow phone a few times slower.
 */
export const LOAD_SILENCE_MS = 60_000;

/**
 * How long a load waits for its helper workers to start (each instantiates the threaded module on
 * the shared memory: about 0.1 s here) before it runs with those that did, saying so.
 */
export const HELPER_START_MS = 10_000;

/** Every error code of the API, with when it happens (README.md's table says the same). */
export const ERROR_CODES = Object.freeze({
  'no-webassembly': 'this browser runs no WebAssembly (Safari\'s Lockdown Mode, a policy that turns the JavaScript JIT off), or one without SIMD, or the page\'s Content Security Policy does not let it compile (no `\'wasm-unsafe-eval\'`), which every backend needs; thrown at once, no worker started',
  'no-webgpu': 'no `navigator.gpu`, or no adapter, where `backend: \'webgpu\'` asked for one (`auto` runs the CPU engine then)',
  'fetch-failed': 'the model URL failed (`status` holds the HTTP status; or no answer for 30 s), or the download broke (or sent nothing for 30 s) and three resumes did not finish it',
  'bad-model': 'not a GGUF file (an HTML page: its first bytes are named), truncated, or inconsistent',
  'unsupported-model': 'an architecture or tensor type Nucleus does not run',
  'bad-options': 'an invalid option (`contextLength` beyond the model\'s trained length too); `option` names it in the API\'s spelling',
  'context-overflow': 'the prompt does not fit the context',
  'out-of-memory': 'a buffer the model needs is larger than the GPU allows, all of them more than `memoryBudget`, or the CPU engine\'s more than the 4 GiB of a WebAssembly memory; checked from the file\'s first bytes before the rest is downloaded (where the server sends ranges) and again before anything is uploaded, naming the largest `contextLength` that fits and, where the GPU cannot hold the model, the CPU engine when it would',
  'bad-logits': 'the model produced NaN or +inf logits, or none that is finite',
  'storage-quota': 'the model could not be kept in the browser\'s storage (a full quota: how much was needed and how much is free); not thrown: `lm.info.cacheError` holds it, and the model runs from the download',
  busy: '`generate` while another generation runs',
  'device-lost': 'the GPU device was lost; load the model again',
  device: 'another GPU error',
  internal: 'a bug in the engine (its panic message); the worker is ended and the next `Nucleus.load()` starts a new one',
  aborted: 'a load\'s `signal` aborted it before it finished: its worker is ended, the memory it took with it, and nothing of the file is kept (`cause` is the signal\'s reason)',
  'worker-crashed': 'the engine\'s worker failed outside any request (an error in a callback, or the worker could not start: its message), or stopped answering while loading (nothing from it for 60 s); the worker is ended, every call on the model gets this error, and the next `Nucleus.load()` starts a new one',
});

/**
 * Why `scope` (the page's global, or a worker's) cannot run the engine's WebAssembly, or null when
 * it can: WebAssembly itself, its fixed-width SIMD, which every module of Nucleus is built with,
 * and a page policy that lets it compile. Without them the page learns so at once
 * (`no-webassembly`), not from a worker that fails to start, a module that "doesn't parse", or a
 * policy violation that names `'unsafe-eval'`.
 */
export function webAssemblyProblem(scope = globalThis) {
  if (typeof scope.WebAssembly?.validate !== 'function') {
    return 'this browser runs no WebAssembly (Safari\'s Lockdown Mode and policies that turn the JavaScript JIT off '
      + 'remove it), which every backend of Nucleus needs';
  }
  if (!scope.WebAssembly.validate(SIMD_PROBE)) {
    return 'this browser\'s WebAssembly has no SIMD (Chrome 91, Firefox 89 and Safari 16.4 added it), which every '
      + 'backend of Nucleus needs';
  }
  try {
    // Chromium and Firefox refuse the compile, WebKit the instance.
    new scope.WebAssembly.Instance(new scope.WebAssembly.Module(SIMD_PROBE));
  } catch (error) {
    return 'this page\'s Content Security Policy does not let it compile WebAssembly: its `script-src` needs '
      + `'wasm-unsafe-eval' (the browser said: ${error.message})`;
  }
  return null;
}

/** A module of one function that splats an i32 into an i8x16: valid where WebAssembly has SIMD. */
const SIMD_PROBE = new Uint8Array([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // \0asm, version 1
  0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7b, // types: () -> v128
  0x03, 0x02, 0x01, 0x00, // functions: one of type 0
  0x0a, 0x08, 0x01, 0x06, 0x00, // code: one body of 6 bytes, no locals
  0x41, 0x01, 0xfd, 0x0f, 0x0b, // i32.const 1, i8x16.splat, end
]);

/**
 * The models' cache (MODEL_CACHE, in the Cache API) of `scope`, the page's global or a worker's;
 * null where there is none: in a sandboxed frame without `allow-same-origin` (an opaque origin),
 * reading `caches` throws a SecurityError (Chromium, WebKit), or opening one does (Firefox).
 */
export async function openModelCache(scope = globalThis) {
  try {
    return (await scope.caches?.open(MODEL_CACHE)) ?? null;
  } catch {
    return null;
  }
}

/** What the page says when the browser has no WebGPU, and when WebGPU offers no adapter. */
export const NO_WEBGPU_MESSAGE = 'this browser has no WebGPU (navigator.gpu is missing): use Chrome or Edge 113+, '
  + 'Safari 26+, or Firefox 141+ on Windows; elsewhere enable WebGPU in the browser\'s flags';
export const NO_ADAPTER_MESSAGE = 'WebGPU is present but offers no adapter (the GPU may be blocklisted; '
  + 'Chromium needs --enable-unsafe-webgpu for a software adapter)';

/**
 * An Error carrying one of ERROR_CODES (and `extra`: `option`, `status`). An unknown code is a bug
 * in Nucleus, reported as `internal` with the code in the message.
 * @param {ErrorCode} code
 * @param {string} message
 * @param {{ option?: string, status?: number }} [extra]
 */
export function codedError(code, message, extra = {}) {
  if (!Object.hasOwn(ERROR_CODES, code)) {
    return Object.assign(new Error(`${message} (unknown error code ${JSON.stringify(code)})`), { code: 'internal' });
  }
  return Object.assign(new Error(message), { code }, extra);
}

/**
 * wasm-bindgen's words for a Rust object still borrowed by a call into the engine that never
 * returned. The worker never calls into the engine while another call is running, so only a trap
 * (which unwinds past the borrow's release) leaves an object so: the engine has crashed.
 */
const LEFT_BORROWED = /recursive use of an object detected|attempted to take ownership of Rust value while it was borrowed/;

/**
 * A value the worker caught, as the error of an ErrorReply: the engine's own code, or `internal`.
 * A WebAssembly trap (a panic, named by the message the engine recorded; or a fault with no panic
 * behind it, such as JavaScriptCore's "Out of bounds memory access") is `crashed`, and so is an
 * object an earlier trap left borrowed.
 * @param {unknown} error
 * @param {() => string | null | undefined} lastPanic  the engine's last panic message, asked only
 *   after a trap (wasm.lastPanic())
 * @returns {WireError}
 */
export function wireError(error, lastPanic) {
  // `globalThis.WebAssembly`: a worker without WebAssembly still answers with its error.
  if (globalThis.WebAssembly && error instanceof WebAssembly.RuntimeError) {
    const panic = lastPanic();
    return { code: 'internal', message: `the engine crashed: ${panic ?? error.message}; load the model again`, crashed: true };
  }
  if (LEFT_BORROWED.test(error?.message)) {
    return { code: 'internal', message: `the engine crashed earlier (a call into it never returned): ${error.message}; `
      + 'load the model again', crashed: true };
  }
  const { code = 'internal', message = String(error), option, status } = codedError(error?.code ?? 'internal',
    error?.message ?? String(error), { option: error?.option, status: error?.status });
  return { code, message, ...(option && { option }), ...(status && { status }) };
}

/**
 * Why the CPU engine's threads cannot start in `scope` (a worker's global), or null when they
 * can: they need a cross-origin isolated page, `SharedArrayBuffer`, and a shared WebAssembly
 * memory that can be handed to another worker. Asked before the threaded module is fetched, so a
 * browser that says it is isolated but cannot share (WebKitGTK: no `SharedArrayBuffer`) runs on
 * one thread for that reason, not after a `DataCloneError`.
 */
export function threadsProblem(scope = globalThis) {
  if (!scope.crossOriginIsolated) {
    return 'the page is not cross-origin isolated (COOP and COEP headers), which threads need';
  }
  if (typeof scope.SharedArrayBuffer !== 'function') {
    return 'this browser has no SharedArrayBuffer, though the page is cross-origin isolated';
  }
  try {
    const memory = new scope.WebAssembly.Memory({ initial: 1, maximum: 1, shared: true });
    const { port1, port2 } = new scope.MessageChannel();
    port1.postMessage(memory);
    port1.close();
    port2.close();
  } catch (error) {
    return `this browser cannot hand a shared WebAssembly memory to another worker (${error.name}: ${error.message})`;
  }
  return null;
}
