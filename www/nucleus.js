// Nucleus: a language model in the browser, on WebGPU or the CPU. The page-side client.
//
//   import { Nucleus } from './nucleus.js';
//   const lm = await Nucleus.load({ onProgress: ({ phase, loaded, total }) => {} });
//   const gen = lm.generate({ prompt: 'The capital of France is', maxTokens: 16, temperature: 0 });
//   for await (const step of gen) console.log(step.text, step.top);
//   const { text, finishReason, usage, timing } = await gen.result;
//
// The engine (Rust compiled to wasm, on WebGPU or the CPU) runs in a module Web Worker
// (nucleus-worker.js); this module sends it typed requests, one id each, and pulls steps one at a
// time. It may be served from another origin than the page's (a CDN): the worker then starts from
// a same-origin blob that imports the real one. README.md documents the whole API; nucleus.d.ts
// types it.

import {
  ALIVE_MS, BACKENDS, ERROR_CODES, LOAD_SILENCE_MS, LOCAL_MODELS, NO_WEBGPU_MESSAGE, REPLY, REQUEST,
  openModelCache, webAssemblyProblem,
} from './protocol.js';
import { VERSION } from './pkg/version.js';

export { ERROR_CODES, VERSION };

/**
 * Where the package's files are (the worker, the wasm modules, the knobs, the CSS): the folder of
 * this module, unless a bundler moved it (then `assets` says where; assetsBase).
 */
export const DEFAULT_ASSETS = new URL('./', import.meta.url).href;

/** The model `Nucleus.load()` loads when no `model` is given, in `models/` of the assets' folder. */
const DEFAULT_MODEL_PATH = 'models/SmolLM2-135M-Instruct.Q4_1.gguf';
export const DEFAULT_MODEL_URL = new URL(DEFAULT_MODEL_PATH, DEFAULT_ASSETS).href;

/**
 * Every error of this API: `code` is one of ERROR_CODES (protocol.js), `option` names a bad
 * option, `status` an HTTP status.
 */
export class NucleusError extends Error {
  constructor(code, message, extra = {}) {
    super(message);
    this.name = 'NucleusError';
    this.code = code;
    Object.assign(this, extra);
  }
}

const badOption = (option, message) => new NucleusError('bad-options', message, { option });

/** A load's `aborted` error, the signal's reason as its cause. */
const loadAborted = (signal) => new NucleusError('aborted', 'the load was aborted (its signal)', { cause: signal.reason });

/**
 * The assets' folder as an absolute URL ending in `/`: `assets` (a URL, relative ones against the
 * page), or DEFAULT_ASSETS. `bad-options` naming `assets` if it is not a URL.
 */
export function assetsBase(assets) {
  if (assets === undefined || assets === null) return DEFAULT_ASSETS;
  let base;
  try {
    base = new URL(assets, globalThis.document?.baseURI ?? DEFAULT_ASSETS);
  } catch {
    throw badOption('assets', `assets must be the URL of the package's folder, got ${JSON.stringify(String(assets))}`);
  }
  if (!['http:', 'https:'].includes(base.protocol)) {
    throw badOption('assets', `assets must be an http(s) URL, got ${JSON.stringify(base.href)}`);
  }
  if (!base.pathname.endsWith('/')) base.pathname += '/';
  return base.href;
}

/**
 * A worker running `file` of `assets` (the engine's, or a helper thread's). A worker's script must
 * have the page's origin: from another origin (a CDN) the worker runs a same-origin blob
 * (importerOf) that imports the real script, whose own imports (the wasm modules) then resolve
 * against its real URL. The blob is a classic worker, not a module one: in a sandboxed frame (an
 * opaque origin, `location.origin` "null", so every package is another origin's) Chromium does
 * not start a module worker from a blob, and a classic one imports modules all the same. Returns
 * `{ worker, url }`, `url` the blob's, to revoke when the worker ends.
 */
function startWorker(assets, file, name) {
  const script = new URL(file, assets);
  const options = { type: 'module', name };
  if (script.origin === globalThis.location?.origin) return { worker: new Worker(script, options), url: null };
  const url = URL.createObjectURL(new Blob([importerOf(script.href)], { type: 'text/javascript' }));
  return { worker: new Worker(url, { name }), url };
}

/**
 * A blob worker's script that runs `script` from another origin. A dynamic `import()`, not a
 * static one: WebKit refuses a blob module worker's static import from another origin (the worker
 * fails to start, with or without a policy), and under a Content Security Policy a dynamic import
 * is a script, which `script-src` allows. The messages that arrive before the script has run are
 * kept and dispatched to it after; a script that does not import is rethrown as the worker's error.
 */
function importerOf(script) {
  return `const early = [];
const keep = (event) => early.push(event.data);
self.addEventListener('message', keep);
import(${JSON.stringify(script)}).then(() => {
  self.removeEventListener('message', keep);
  for (const data of early) self.dispatchEvent(new MessageEvent('message', { data }));
}, (error) => setTimeout(() => { throw error; }));
`;
}

/**
 * The worker behind one model: requests with ids, answers routed back to their promises; and the
 * helper workers of its threaded CPU engine, which the page starts when it asks (protocol.js,
 * HelpersReply) and ends with it.
 */
class WorkerClient {
  #worker;
  #pending = new Map();
  #nextId = 1;
  #broken = null;
  #assets;
  #blobUrls = [];
  #helpers = [];
  #script;
  #crashed = false;
  /** When the worker last sent anything (`performance.now()`; its start before the first). */
  #heard = performance.now();
  #answered = false;

  constructor(assets) {
    this.#assets = assets;
    this.#script = new URL('nucleus-worker.js', assets).href;
    const worker = this.#start('nucleus-worker.js', 'nucleus');
    this.#worker = worker;
    worker.onmessage = ({ data }) => {
      this.#heard = performance.now();
      this.#answered = true;
      if (data.type === REPLY.alive) return;
      if (data.type === REPLY.helpers) {
        this.#startHelpers(data);
        return;
      }
      const request = this.#pending.get(data.id);
      if (!request) return;
      if (data.type === REPLY.progress) {
        request.onProgress?.({ phase: data.phase, loaded: data.loaded, total: data.total, cached: data.cached,
          ...(data.plan && { plan: data.plan }) });
        return;
      }
      this.#pending.delete(data.id);
      if (data.type === REPLY.ok) {
        request.resolve(data.value);
      } else {
        const { code, message, crashed, ...extra } = data.error;
        const error = new NucleusError(code, message, extra);
        request.reject(error);
        // A trapped engine can do nothing more: end its worker (freeing its GPU memory); every
        // later call on this model gets the same error.
        if (crashed) this.#crash(error);
      }
    };
    // An error no request caught (a trap in a callback, a script that could not start) leaves
    // the worker in no known state: end it, and fail what waits on it and every later call.
    worker.onerror = (event) => {
      event.preventDefault?.();
      this.#crash(new NucleusError('worker-crashed', `the Nucleus worker (${this.#script}) failed: ${event.message
        ?? 'it could not start (is the package served there, with CORS if it is another origin, and does the page\'s CSP allow it?)'}`
        + '; load the model again'));
    };
  }

  /** A worker running `file` of the assets, its blob URL (if any) kept to revoke at the end. */
  #start(file, name) {
    const { worker, url } = startWorker(this.#assets, file, name);
    if (url) this.#blobUrls.push(url);
    return worker;
  }

  /**
   * `count` helper threads on the engine's shared memory. One that fails (its script refused, a
   * trap in a task, which would leave the engine waiting on that task) ends the model with
   * `worker-crashed`. One whose module does not instantiate says so and is only missing: the
   * engine runs without it (the load waits for the helpers a bounded time and says how many run).
   */
  #startHelpers({ count, script, module, memory }) {
    for (let i = 0; i < count; i += 1) {
      const helper = this.#start('nucleus-thread.js', `nucleus-thread-${i + 1}`);
      helper.onmessage = ({ data }) => console.warn(`nucleus: a helper thread did not start (${data.error})`);
      helper.onerror = (event) => {
        event.preventDefault?.();
        this.#end(new NucleusError('worker-crashed', `a helper thread of the Nucleus worker failed: ${event.message
          ?? 'it could not start'}; load the model again`));
      };
      helper.postMessage({ script, module, memory });
      this.#helpers.push(helper);
    }
  }

  call(type, payload = {}, onProgress) {
    if (this.#broken) return Promise.reject(this.#broken);
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject, onProgress });
      this.#worker.postMessage({ id, type, ...payload });
    });
  }

  #fail(error) {
    this.#broken ??= error;
    for (const { reject } of this.#pending.values()) reject(error);
    this.#pending.clear();
  }

  /** Whether the worker ended because its engine trapped or it failed outside any request. */
  get crashed() {
    return this.#crashed;
  }

  /** Whether the worker has sent anything: it started, and took a request. */
  get answered() {
    return this.#answered;
  }

  /** Milliseconds since the worker last sent anything. */
  get silentMs() {
    return performance.now() - this.#heard;
  }

  /** Ends a worker that sent nothing for `ms` (its thread blocked): `worker-crashed`, as a crash. */
  stoppedAnswering(ms) {
    this.#crash(new NucleusError('worker-crashed', `the Nucleus worker (${this.#script}) stopped answering while `
      + `loading: nothing from it for ${ms / 1000} s; load the model again`));
  }

  #crash(error) {
    this.#crashed = true;
    this.#end(error);
  }

  #end(error) {
    this.#worker.terminate();
    for (const helper of this.#helpers) helper.terminate();
    this.#helpers = [];
    for (const url of this.#blobUrls) URL.revokeObjectURL(url);
    this.#blobUrls = [];
    this.#fail(error);
  }

  /** Ends the worker and its helpers, every pending and later call rejecting with `error`. */
  terminate(error = new NucleusError('internal', 'this model was disposed')) {
    this.#end(error);
  }
}

/** JSON for the worker; non-finite numbers become strings so that the engine rejects them by name. */
function encodeOptions(options) {
  return JSON.stringify(options, (_key, value) =>
    typeof value === 'number' && !Number.isFinite(value) ? String(value) : value);
}

function checkOptionsObject(options, what) {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw badOption('options', `${what} takes an options object`);
  }
}

/**
 * A running generation: an async iterator of steps, and `result`, a promise of the outcome.
 * Awaiting `result` without iterating runs the generation to its end.
 */
export class Generation {
  #client;
  #started;
  #aborted = false;
  #finished = false;
  #iterating = false;
  #result;
  #settle;
  #onPrefill;

  constructor(client, options) {
    this.#client = client;
    this.#result = new Promise((resolve, reject) => { this.#settle = { resolve, reject }; });
    // An unobserved rejection of `result` is not an unhandled one: the iterator reports it too.
    this.#result.catch(() => {});
    let signal;
    try {
      checkOptionsObject(options, 'generate');
      const { signal: given, onPrefill, ...engineOptions } = options;
      if (given !== undefined && !(given instanceof AbortSignal)) {
        throw badOption('signal', 'signal must be an AbortSignal');
      }
      if (onPrefill !== undefined && typeof onPrefill !== 'function') {
        throw badOption('onPrefill', 'onPrefill must be a function');
      }
      signal = given;
      this.#onPrefill = onPrefill;
      this.#started = client.call(REQUEST.generate, { options: encodeOptions(engineOptions) });
    } catch (error) {
      this.#started = Promise.reject(error);
    }
    this.#started.catch((error) => this.#fail(error));
    if (signal) {
      if (signal.aborted) this.abort();
      else signal.addEventListener('abort', () => this.abort(), { once: true });
    }
  }

  /** The outcome: `{ text, finishReason, usage, timing, transfer }`. */
  get result() {
    if (!this.#iterating && !this.#finished) this.#drain();
    return this.#result;
  }

  /**
   * Stops the generation after the step in flight (which the iterator still yields); `result`
   * resolves with finishReason 'abort', counting exactly the steps yielded.
   */
  async abort() {
    if (this.#aborted || this.#finished) return;
    this.#aborted = true;
    try {
      const gen = await this.#started;
      this.#finish(await this.#client.call(REQUEST.abort, { gen }));
    } catch (error) {
      this.#fail(error);
    }
  }

  async *[Symbol.asyncIterator]() {
    if (this.#iterating) throw new NucleusError('busy', 'a generation can be iterated once');
    this.#iterating = true;
    const gen = await this.#started;
    try {
      while (!this.#aborted) {
        const onPrefill = this.#onPrefill;
        const step = await this.#client.call(REQUEST.next, { gen, reportPrefill: Boolean(onPrefill) },
          onPrefill && (({ loaded, total, cached }) => onPrefill({ done: loaded, total, cached })));
        if (step === null) break;
        // A step that was in flight when an abort came is yielded too: the result counts it, so
        // the steps' text is the result's text.
        yield step;
        if (step.finishReason) break;
      }
      if (!this.#aborted) this.#finish(await this.#client.call(REQUEST.result, { gen }));
    } catch (error) {
      this.#fail(error);
      throw error;
    } finally {
      // A consumer that leaves the loop early ends the generation, so the next one can start.
      if (!this.#finished && !this.#aborted) await this.abort();
    }
    await this.#result;
  }

  async #drain() {
    try {
      for await (const _step of this);
    } catch {
      // Reported through `result`.
    }
  }

  #finish(value) {
    this.#finished = true;
    this.#settle.resolve(value);
  }

  #fail(error) {
    this.#finished = true;
    this.#settle.reject(error);
  }
}

/** OpenAI's finish reasons: end-of-generation and stop strings are both 'stop'. */
const OPENAI_FINISH = { eos: 'stop', stop: 'stop', length: 'length', abort: 'abort' };

// The OpenAI names the facade handles itself (null: accepted and ignored). Every other name is
// an engine option in snake_case (top_p -> topP, dry_multiplier -> dryMultiplier): the engine's
// list of options is the facade's, and the engine rejects an unknown one by name.
const OPENAI_OWN_OPTIONS = {
  max_completion_tokens: 'maxTokens', model: null, user: null, n: null, stream: null, stream_options: null,
  logprobs: null, top_logprobs: null,
};
// Engine options that are not OpenAI's: a chat completion has messages, not a raw prompt.
const NOT_OPENAI_OPTIONS = ['prompt'];

const camelCase = (snake) => snake.replace(/_([a-z])/g, (_, c) => c.toUpperCase());

/** The engine's options from an OpenAI request, and the OpenAI name of each. */
function engineOptions(request) {
  const options = {};
  const openAiName = new Map();
  for (const [key, value] of Object.entries(request)) {
    if (NOT_OPENAI_OPTIONS.includes(key) || key !== key.toLowerCase()) {
      throw badOption(key, `unknown option ${JSON.stringify(key)}`);
    }
    const name = key in OPENAI_OWN_OPTIONS ? OPENAI_OWN_OPTIONS[key] : camelCase(key);
    if (name && value !== undefined) {
      options[name] = value;
      openAiName.set(name, key);
    }
  }
  return { options, openAiName };
}

/**
 * OpenAI's `response_format` as the engine's `responseFormat`: `text` is none, `json_schema`
 * carries its schema in `json_schema.schema`; `json_object` and the engine's own types (`regex`,
 * `grammar`) pass as they are.
 */
function engineResponseFormat(format) {
  if (format === undefined || format === null || format?.type === 'text') return undefined;
  if (format?.type === 'json_schema') {
    if (format.json_schema?.schema === undefined) {
      throw badOption('response_format', 'response_format of type json_schema needs json_schema.schema');
    }
    return { type: 'json_schema', schema: format.json_schema.schema };
  }
  return format;
}

/** An engine error about an option, in the OpenAI spelling the caller used (topP -> top_p). */
function inOpenAiNames(error, openAiName) {
  const name = openAiName.get(error?.option);
  if (name && name !== error.option) {
    error.message = error.message.replaceAll(error.option, name);
    error.option = name;
  }
  return error;
}

const utf8 = new TextEncoder();

function openAiLogprobs(step, topLogprobs) {
  return {
    token: step.token,
    logprob: step.logprob,
    bytes: [...utf8.encode(step.token)],
    top_logprobs: step.top.slice(0, topLogprobs).map((c) => ({ token: c.text, logprob: c.logprob, bytes: [...utf8.encode(c.text)] })),
  };
}

/** `lm.chat.completions.create(...)`, shaped like OpenAI's (and WebLLM's) API. */
function createChatCompletion(lm, request) {
  checkOptionsObject(request, 'chat.completions.create');
  const { options, openAiName } = engineOptions(request);
  if (request.n !== undefined && request.n !== 1) throw badOption('n', 'n must be 1');
  const logprobs = Boolean(request.logprobs);
  const topLogprobs = request.top_logprobs ?? 0;
  if (!Number.isInteger(topLogprobs) || topLogprobs < 0 || topLogprobs > 256) {
    throw badOption('top_logprobs', `top_logprobs must be a whole number in 0..=256, got ${topLogprobs}`);
  }
  options.topLogprobs = Math.max(topLogprobs, 1);
  options.responseFormat = engineResponseFormat(request.response_format);
  if (options.responseFormat === undefined) delete options.responseFormat;
  const id = `chatcmpl-${crypto.randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const model = lm.info.name;
  const usageOf = (result) => ({
    prompt_tokens: result.usage.promptTokens,
    completion_tokens: result.usage.completionTokens,
    total_tokens: result.usage.promptTokens + result.usage.completionTokens,
  });
  const generation = lm.generate(options);

  if (!request.stream) {
    return (async () => {
      const content = [];
      let result;
      try {
        for await (const step of generation) if (logprobs) content.push(openAiLogprobs(step, topLogprobs));
        result = await generation.result;
      } catch (error) {
        throw inOpenAiNames(error, openAiName);
      }
      return {
        id, object: 'chat.completion', created, model,
        choices: [{ index: 0, message: { role: 'assistant', content: result.text },
          logprobs: logprobs ? { content } : null, finish_reason: OPENAI_FINISH[result.finishReason] }],
        usage: usageOf(result),
      };
    })();
  }

  const chunk = (delta, extra = {}) => ({ id, object: 'chat.completion.chunk', created, model,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: null, ...extra }] });
  return Promise.resolve({
    async *[Symbol.asyncIterator]() {
      let first = true;
      let result;
      try {
        for await (const step of generation) {
          yield chunk({ ...(first && { role: 'assistant' }), content: step.text },
            logprobs ? { logprobs: { content: [openAiLogprobs(step, topLogprobs)] } } : {});
          first = false;
        }
        result = await generation.result;
      } catch (error) {
        throw inOpenAiNames(error, openAiName);
      }
      yield chunk({}, { finish_reason: OPENAI_FINISH[result.finishReason] });
      if (request.stream_options?.include_usage) {
        yield { id, object: 'chat.completion.chunk', created, model, choices: [], usage: usageOf(result) };
      }
    },
    abort: () => generation.abort(),
  });
}

/**
 * `lm.completions.create(...)`, OpenAI's legacy completions: a `prompt` string continued by up to
 * `max_tokens` (default 16, 0 allowed) tokens, with `echo` (the prompt in the text, and with
 * `logprobs` its tokens rated too: `lm.score`, the first token's log-probability null as OpenAI
 * gives it) and `logprobs` (0..=20 alternatives per token, OpenAI's `{ tokens, token_logprobs,
 * top_logprobs, text_offset }`). Every other option is the engine's in snake_case, as in
 * `chat.completions`. Not streamed.
 */
async function createCompletion(lm, request) {
  checkOptionsObject(request, 'completions.create');
  const { prompt, echo = false, logprobs = null, ...rest } = request;
  if (typeof prompt !== 'string') throw badOption('prompt', 'completions.create takes a prompt string');
  if (rest.stream) throw badOption('stream', 'completions.create does not stream: use chat.completions.create or generate');
  if (rest.n !== undefined && rest.n !== 1) throw badOption('n', 'n must be 1');
  if (logprobs !== null && !(Number.isInteger(logprobs) && logprobs >= 0 && logprobs <= 20)) {
    throw badOption('logprobs', `logprobs must be a whole number in 0..=20, got ${logprobs}`);
  }
  if (typeof echo !== 'boolean') throw badOption('echo', `echo must be true or false, got ${echo}`);
  const { options, openAiName } = engineOptions({ max_tokens: 16, ...rest });
  const rated = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  // Where the next token starts in the completion's text.
  let offset = 0;
  const add = (token, logprob, top) => {
    rated.text_offset.push(offset);
    offset += token.length;
    rated.tokens.push(token);
    rated.token_logprobs.push(logprob);
    rated.top_logprobs.push(top);
  };
  const topOf = (candidates) => Object.fromEntries(candidates.slice(0, logprobs ?? 0).map((c) => [c.text, c.logprob]));
  let promptTokens = null;
  try {
    if (echo && logprobs !== null) {
      const report = await lm.score(prompt, { topK: logprobs });
      for (const token of report.tokens) add(token.text, token.logprob ?? null, token.rank === undefined ? null : topOf(token.top));
      promptTokens = report.tokens.length;
    }
    offset = echo ? prompt.length : 0;
    let result = null;
    if (options.maxTokens > 0) {
      const generation = lm.generate({ ...options, prompt, topLogprobs: Math.max(logprobs ?? 0, 1) });
      for await (const step of generation) {
        if (logprobs !== null) add(step.token, step.logprob, topOf(step.top));
      }
      result = await generation.result;
      promptTokens = result.usage.promptTokens;
    }
    promptTokens ??= (await lm.tokenize(prompt)).length;
    const completionTokens = result?.usage.completionTokens ?? 0;
    return {
      id: `cmpl-${crypto.randomUUID()}`, object: 'text_completion', created: Math.floor(Date.now() / 1000), model: lm.info.name,
      choices: [{ index: 0, text: (echo ? prompt : '') + (result?.text ?? ''), logprobs: logprobs === null ? null : rated,
        finish_reason: result ? OPENAI_FINISH[result.finishReason] : 'length' }],
      usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens },
    };
  } catch (error) {
    throw inOpenAiNames(error, openAiName);
  }
}

/** The options `Nucleus.load` takes (nucleus.d.ts, LoadOptions, types each). */
const LOAD_OPTIONS = ['model', 'backend', 'assets', 'sha256', 'onProgress', 'contextLength', 'memoryBudget', 'cache', 'signal'];

/**
 * Registers the service worker that keeps the package's files and this page for visits with the
 * network off. `script`: where the site serves its copy of the package's `sw.js` (a service worker
 * must be same-origin); `assets` as `Nucleus.load` takes it. Its URL gets `version` (VERSION: a new
 * version is an update that replaces the old files) and `assets`; the page's URL and what it has
 * loaded so far are sent to it to keep. Resolves to the registration, or null where the browser has
 * no service workers (or forbids them: a private window); never throws for that, only for a bad
 * `script` or `assets`.
 */
export async function registerOffline(script, { assets } = {}) {
  const notUrl = () => badOption('script', `registerOffline takes the URL of the site's sw.js, got ${JSON.stringify(String(script))}`);
  if (typeof script !== 'string' && !(script instanceof URL)) throw notUrl();
  let url;
  try {
    url = new URL(script, globalThis.document?.baseURI ?? DEFAULT_ASSETS);
  } catch {
    throw notUrl();
  }
  url.searchParams.set('version', VERSION);
  url.searchParams.set('assets', assetsBase(assets));
  if (!globalThis.navigator?.serviceWorker) return null;
  try {
    const registration = await navigator.serviceWorker.register(url);
    const worker = registration.installing ?? registration.waiting ?? registration.active;
    const urls = [globalThis.location.href, ...performance.getEntriesByType('resource').map((entry) => entry.name)];
    worker?.postMessage({ type: 'keep', urls });
    return registration;
  } catch (error) {
    console.warn(`nucleus: the page will not work offline: ${error.message}`);
    return null;
  }
}

/**
 * The workers one `Nucleus.load()` may take in all: a load whose engine crashes (a trap), or whose
 * worker stops answering (LOAD_SILENCE_MS), is tried again in a new worker until this many have
 * failed so. JavaScriptCore traps now and then inside
 * safe code as a fresh worker loads ("Out of bounds memory access": about one load in a hundred
 * in WebKitGTK 2.50 on one machine here, none in 360 on another; ARCHITECTURE.md, "WebKit"), and
 * CI once failed on one after a second try. A fault of ours would crash every try: the third
 * try's error names all three crashes.
 */
const LOAD_TRIES = 3;

/** What a load's failed tries said, in turn; one that each said alike, once. */
function saidOnce(messages) {
  return messages.every((message) => message === messages[0]) && messages.length > 1
    ? `${messages[0]} (each of the ${messages.length})`
    : messages.join('; then ');
}

/** Set by `Nucleus.crashNextLoadForTesting(tries)`: how many of the next load's tries panic. */
let crashNextLoad = 0;
/** Set by `Nucleus.hangNextLoadForTesting`: how many of the next load's tries hang, and their bound. */
let hangNextLoad = { tries: 0, silenceMs: LOAD_SILENCE_MS };

/** The testing hooks' `tries`, checked: a whole number from 1 to LOAD_TRIES. */
function triesForTesting(tries) {
  if (!(Number.isInteger(tries) && tries >= 1 && tries <= LOAD_TRIES)) {
    throw badOption('tries', `tries must be a whole number from 1 to ${LOAD_TRIES}, got ${tries}`);
  }
  return tries;
}

/**
 * One load in a new worker: resolves to `{ client, info }`, or to `{ error, again }` once the
 * worker has ended (`again`: a new worker may well load it: this one's engine trapped after it
 * started, or it stopped answering for `silenceMs`; not a worker that could not start, nor an
 * error the engine gave). Aborted by `signal`, the worker ends at once (its download, its memory,
 * its helpers; every pending call rejects with `aborted`; a Cache API entry is only written whole,
 * so none is).
 */
async function loadInWorker(assets, request, onProgress, signal, silenceMs = LOAD_SILENCE_MS) {
  if (signal?.aborted) return { error: loadAborted(signal), again: false };
  const client = new WorkerClient(assets);
  const abort = () => client.terminate(loadAborted(signal));
  signal?.addEventListener('abort', abort, { once: true });
  // A worker that sends nothing for `silenceMs` (not even AliveReply) has a blocked thread. A
  // tick that comes late says the page's own thread was busy (or paused in a debugger, or its tab
  // throttled), with the worker's messages perhaps still queued behind it: that tick judges nothing.
  const period = Math.min(ALIVE_MS, silenceMs / 4);
  let tick = performance.now();
  let hung = false;
  const watch = setInterval(() => {
    const late = performance.now() - tick > 2 * period;
    tick = performance.now();
    if (late || client.silentMs <= silenceMs) return;
    hung = true;
    client.stoppedAnswering(silenceMs);
  }, period);
  try {
    return { client, info: await client.call(REQUEST.load, request, onProgress) };
  } catch (error) {
    const again = hung || (client.crashed && client.answered && !signal?.aborted);
    client.terminate();
    return { error, again };
  } finally {
    clearInterval(watch);
    signal?.removeEventListener('abort', abort);
  }
}

export class Nucleus {
  #client;

  /**
   * Loads a GGUF model into a new worker. Options: `model` (a URL, same-origin or CORS, default
   * `models/SmolLM2-135M-Instruct.Q4_1.gguf` in the assets' folder; or a `File`/`Blob`, a GGUF file
   * a person gave the page: read, checked and kept under a key of its own, `info.url`), `backend`
   * ('auto', the default: WebGPU on a hardware adapter, the CPU engine where there is none or only
   * a CPU emulation of one; 'webgpu'; 'cpu'; `info.backend` says which ran and why), `assets` (the
   * URL of the package's folder, when a bundler moved this module away from it; default
   * DEFAULT_ASSETS), `onProgress({ phase: 'download'|'read'|'parse'|'upload', loaded, total,
   * cached })`, `contextLength` (KV cache positions; default the model's), `memoryBudget` (bytes
   * for every GPU buffer together; default none), `cache` (keep the file in the Cache API; default
   * true), `sha256` (the file's, lowercase hex: a stored copy that differs is replaced, a download
   * that differs is `bad-model`; default: not checked beyond its length), `signal` (an
   * AbortSignal: aborted before the load finishes, it rejects with `aborted` and ends the load's
   * worker, the memory it took with it, nothing of the file kept). Whatever model the page already
   * loaded is untouched: load the next one, then dispose of the old one. A load whose engine
   * crashes (a trap), or whose worker stops answering (nothing from it for LOAD_SILENCE_MS), is
   * tried again in a new worker, up to LOAD_TRIES workers in all, `info.backend.reason` saying so.
   */
  static async load(options = {}) {
    checkOptionsObject(options, 'Nucleus.load');
    const unknown = Object.keys(options).find((key) => !LOAD_OPTIONS.includes(key));
    if (unknown) throw badOption(unknown, `unknown option ${JSON.stringify(unknown)} (known: ${LOAD_OPTIONS.join(', ')})`);
    const { backend = 'auto', sha256, onProgress, contextLength, memoryBudget, cache = true, signal } = options;
    const assets = assetsBase(options.assets);
    const model = options.model ?? new URL(DEFAULT_MODEL_PATH, assets).href;
    if (!BACKENDS.includes(backend)) {
      throw badOption('backend', `backend must be one of ${BACKENDS.map((b) => `'${b}'`).join(', ')}, got ${JSON.stringify(backend)}`);
    }
    const file = typeof Blob !== 'undefined' && model instanceof Blob ? model : null;
    if (!file && typeof model !== 'string' && !(model instanceof URL)) {
      throw badOption('model', 'model must be a URL or a File');
    }
    if (sha256 !== undefined && !/^[0-9a-f]{64}$/.test(sha256)) {
      throw badOption('sha256', `sha256 must be 64 lowercase hex digits, got ${JSON.stringify(sha256)}`);
    }
    if (onProgress !== undefined && typeof onProgress !== 'function') throw badOption('onProgress', 'onProgress must be a function');
    if (contextLength !== undefined && !(Number.isInteger(contextLength) && contextLength >= 1)) {
      throw badOption('contextLength', `contextLength must be a whole number >= 1, got ${contextLength}`);
    }
    if (memoryBudget !== undefined && !(Number.isSafeInteger(memoryBudget) && memoryBudget >= 1)) {
      throw badOption('memoryBudget', `memoryBudget must be a whole number of bytes >= 1, got ${memoryBudget}`);
    }
    if (signal !== undefined && !(signal instanceof AbortSignal)) throw badOption('signal', 'signal must be an AbortSignal');
    const noWebAssembly = webAssemblyProblem();
    if (noWebAssembly) throw new NucleusError('no-webassembly', noWebAssembly);
    if (backend === 'webgpu' && !globalThis.navigator?.gpu) {
      throw new NucleusError('no-webgpu', NO_WEBGPU_MESSAGE);
    }
    const source = file
      ? { file, name: file.name || 'model.gguf' }
      : { url: new URL(model, globalThis.document?.baseURI ?? import.meta.url).href };
    const request = { ...source, backend, sha256, contextLength, memoryBudget, cache: Boolean(cache) };
    const [panics, hangs] = [crashNextLoad, hangNextLoad];
    crashNextLoad = 0;
    hangNextLoad = { tries: 0, silenceMs: LOAD_SILENCE_MS };
    // A try whose engine trapped, or whose worker stopped answering, has ended its worker: a new
    // one loads the model again (LOAD_TRIES).
    const crashes = [];
    for (;;) {
      const panicForTesting = crashes.length < panics;
      const hangForTesting = crashes.length < hangs.tries;
      const { client, info, error, again } = await loadInWorker(assets, { ...request, panicForTesting, hangForTesting },
        onProgress, signal, hangForTesting ? hangs.silenceMs : LOAD_SILENCE_MS);
      if (info && !crashes.length) return new Nucleus(client, info);
      if (info) {
        const before = crashes.length === 1 ? 'the first crashed' : `the first ${crashes.length} crashed`;
        const reason = `${info.backend.reason} (loaded again in a new worker: ${before}: ${saidOnce(crashes)})`;
        return new Nucleus(client, { ...info, backend: { ...info.backend, reason } });
      }
      if (!again) throw error;
      crashes.push(error.message);
      if (crashes.length === LOAD_TRIES) {
        throw new NucleusError(error.code, `the load crashed in ${LOAD_TRIES} workers in turn: ${saidOnce(crashes)}`);
      }
    }
  }

  /**
   * Makes the next `Nucleus.load()`'s first `tries` tries (1 to LOAD_TRIES, default 1) panic as
   * their engine starts loading: for tests of a load that crashes.
   */
  static crashNextLoadForTesting(tries = 1) {
    crashNextLoad = triesForTesting(tries);
  }

  /**
   * Makes the next `Nucleus.load()`'s first `tries` tries (1 to LOAD_TRIES, default 1) block
   * their worker's thread for good as their engine starts loading, and ends each after
   * `silenceMs` of silence (default LOAD_SILENCE_MS; the other tries keep that): for tests of a
   * load whose worker stops answering.
   */
  static hangNextLoadForTesting(tries = 1, silenceMs = LOAD_SILENCE_MS) {
    if (!(Number.isInteger(silenceMs) && silenceMs >= 4 * ALIVE_MS)) {
      throw badOption('silenceMs', `silenceMs must be a whole number of milliseconds >= ${4 * ALIVE_MS}, got ${silenceMs}`);
    }
    hangNextLoad = { tries: triesForTesting(tries), silenceMs };
  }

  /**
   * The models this browser keeps (the Cache API, by URL: downloads, and files given to the page
   * under their LOCAL_MODELS keys), largest first, and the site's storage use and quota (bytes;
   * null where the browser does not say): `{ models: [{ url, name, bytes, local }], usage, quota }`;
   * none in a sandboxed frame, which has no Cache API.
   */
  static async storedModels() {
    const cache = await openModelCache();
    const models = [];
    for (const request of cache ? await cache.keys() : []) {
      const response = await cache.match(request);
      const bytes = Number(response?.headers.get('content-length')) || (await response?.blob())?.size || 0;
      const path = new URL(request.url).pathname;
      models.push({ url: request.url, name: decodeURIComponent(path.split('/').pop()), bytes,
        local: path.includes(`/${LOCAL_MODELS}/`) });
    }
    models.sort((a, b) => b.bytes - a.bytes || a.name.localeCompare(b.name));
    const { usage = null, quota = null } = await globalThis.navigator?.storage?.estimate?.().catch(() => ({})) ?? {};
    return { models, usage, quota };
  }

  /** Drops the kept copy of the model at `url` (a loaded model keeps running). Resolves to whether one was kept. */
  static async removeStoredModel(url) {
    if (typeof url !== 'string' && !(url instanceof URL)) throw badOption('url', 'url must be a URL');
    const cache = await openModelCache();
    return cache ? cache.delete(String(url)) : false;
  }

  constructor(client, info) {
    this.#client = client;
    /** `{ title, name, architecture, quantization, vocabSize, contextLength, chatTemplate, parameters, fileBytes, url, backend: { kind, reason, threads }, device, adapter, f16, sha256, loadMs, fromCache, cacheError }` */
    this.info = Object.freeze(info);
    this.chat = Object.freeze({ completions: Object.freeze({ create: (request) => createChatCompletion(this, request) }) });
    this.completions = Object.freeze({ create: (request) => createCompletion(this, request) });
  }

  /** Starts a generation; see the module documentation and README.md for its options. */
  generate(options) {
    return new Generation(this.#client, options);
  }

  /**
   * Where the answer forms: the logit lens of one step. `options`: the run's `prompt` or
   * `messages`, `generated` (the ids generated before the step; [] for the first), `candidates`
   * (1..=64, default 10). Resolves to `{ candidates: [{ id, text, prob }], layers: [{ layer, probs,
   * top: { id, text, prob } }], contextTokens, cachedTokens, bytesRead }`: for each block, the
   * probability of each candidate (the step's own top ones) if the model stopped there, and that
   * depth's own top token. The last layer is the step itself. What the KV cache holds of the
   * context is not run again; only what the lens shows is read back (`bytesRead`). Refused with
   * `busy` while a generation runs.
   */
  async logitLens(options) {
    checkOptionsObject(options, 'logitLens');
    return this.#client.call(REQUEST.logitLens, { options: encodeOptions(options) });
  }

  /**
   * How surprising `text` is to the model, token by token. `options`: `topK` (alternatives per
   * token, 0..=20, default 5); `messages` instead of `text` (pass `null`) scores a chat rendered
   * with the model's template; `generated` (token ids) is scored after the text, as a run
   * sampled them. Resolves to `{ tokens: [{ id, text, special, prob, logprob, rank, entropy,
   * top: [{ id, text, logit, logprob }] }], predictedTokens, totalLogprob, perplexity, next,
   * nextEntropy, bytesRead, elapsedMs }`: every token of the text in order; for every token but
   * the first (which nothing predicts) its probability after the tokens before it, its rank
   * among the whole vocabulary (1: the most likely), that distribution's entropy (nats) and its
   * best alternatives; the text's total log-likelihood (natural log) and perplexity; `next`,
   * what the model expects after it. One
   * pass over the text; on WebGPU only these figures are read back, never whole rows. The text
   * then fills the KV cache, so a generation that continues it prefills only what follows.
   * Refused with `busy` while a generation runs.
   */
  async score(text, options = {}) {
    checkOptionsObject(options, 'score');
    if (text !== null && typeof text !== 'string') {
      throw badOption('text', `score takes a string (or null with messages), got ${typeof text}`);
    }
    const request = text === null ? options : { ...options, prompt: text };
    return this.#client.call(REQUEST.score, { options: encodeOptions(request) });
  }

  /**
   * What a token attends to: one layer's attention weights over a text, after the softmax.
   * `options`: the text as `prompt` (or a chat as `messages`), `generated` (token ids after it, as
   * a run sampled them), `layer` (1-based, default the last), `head` (1-based; omitted: the mean
   * of the layer's heads), `from` and `to` (the query positions, 0-based token indices, `to`
   * excluded; default the text's last 256). Resolves to `{ tokens: [{ id, text, special }],
   * layer, head, heads, layers, window, rows: [{ position, weights }], bytesRead, elapsedMs }`:
   * for each query position the weight it gives each position up to its own (a row sums to 1;
   * 0 before a local layer's `window`). `layers` says what each layer keeps: 'kv-rows'
   * (attention) or 'state' (a Gated DeltaNet layer, which has no attention: its report has no
   * rows). Only the rows asked are read back. The text then fills the KV cache. Refused with
   * `busy` while a generation runs.
   */
  async attention(options) {
    checkOptionsObject(options, 'attention');
    return this.#client.call(REQUEST.attention, { options: encodeOptions(options) });
  }

  /**
   * Beam search (deterministic). `options`: `prompt` or `messages`, `beams` (1..=8, default 3),
   * `lengthPenalty` (α, default 1: hypotheses ranked by logprob / length^α), `maxTokens` (1..=64,
   * default 8), `ignoreEos`. Resolves to `{ hypotheses: [{ tokens, text, logprob, score,
   * finishReason }], trace: { nodes: [{ id, parent, step, token, text, tokenLogprob, logprob,
   * score, status }], steps: [{ step, kept, finished, pruned }] }, promptTokens }`.
   */
  async beamSearch(options) {
    checkOptionsObject(options, 'beamSearch');
    return this.#client.call(REQUEST.beamSearch, { options: encodeOptions(options) });
  }

  /** The token ids of `text`, as the model reads it. */
  async tokenize(text) {
    if (typeof text !== 'string') throw badOption('text', 'tokenize takes a string');
    return this.#client.call(REQUEST.tokenize, { text });
  }

  /**
   * What the engine holds now: `{ liveBuffers, liveBytes }` (every GPU buffer it holds, the
   * weights included), `kvCacheBytes`, `wasmMemoryBytes`. Flat over a long session.
   */
  async diagnostics() {
    return this.#client.call(REQUEST.diagnostics);
  }

  /** Ends the worker and frees the model's GPU memory. */
  dispose() {
    this.#client.terminate();
  }

  /** Destroys the GPU device, as a driver reset would: for tests of the `device-lost` error. */
  loseDeviceForTesting() {
    return this.#client.call(REQUEST.loseDeviceForTesting);
  }

  /** Throws in the worker outside any request, as a trap in a callback would (tests of `worker-crashed`). */
  crashWorkerForTesting() {
    return this.#client.call(REQUEST.crashWorkerForTesting);
  }

  /** Panics inside the engine, as a bug would: for tests of a crashed worker (`internal`). */
  panicForTesting() {
    return this.#client.call(REQUEST.panicForTesting);
  }
}
