// Types of the JS API (nucleus.js). Written beside the module and checked by `tsc --noEmit` over
// examples/bundler/src/main.ts, which uses every option and runs against the real package in the
// browser tests (tests/browser/package.test.mjs): an option renamed in the JS fails there, one
// renamed here fails the type check. README.md documents each.

/** The package's version (Cargo.toml's workspace version): the service worker's cache and traces carry it. */
export const VERSION: string;
/** The folder this module was loaded from: where the worker, the wasm modules and the CSS are unless `assets` says. */
export const DEFAULT_ASSETS: string;
/** `models/SmolLM2-135M-Instruct.Q4_1.gguf` in DEFAULT_ASSETS (the package does not include a model). */
export const DEFAULT_MODEL_URL: string;

/** Every error code, with when it happens (protocol.js owns the list). */
export const ERROR_CODES: Readonly<Record<ErrorCode, string>>;
export type ErrorCode =
  | 'no-webassembly' | 'no-webgpu' | 'fetch-failed' | 'bad-model' | 'unsupported-model' | 'bad-options' | 'context-overflow'
  | 'out-of-memory' | 'bad-logits' | 'storage-quota' | 'busy' | 'device-lost' | 'device' | 'internal' | 'aborted'
  | 'worker-crashed';

/** Every error of the API. */
export class NucleusError extends Error {
  readonly name: 'NucleusError';
  readonly code: ErrorCode;
  /** The option a `bad-options` error is about, in the spelling the caller used. */
  readonly option?: string;
  /** The HTTP status of a `fetch-failed` error. */
  readonly status?: number;
}

/** The assets' folder as an absolute URL ending in `/` (`assets`, or DEFAULT_ASSETS). */
export function assetsBase(assets?: string | URL | null): string;

/**
 * Registers the site's copy of the package's `sw.js` (a service worker must be same-origin) so
 * that the page works offline; null where the browser has no service workers.
 */
export function registerOffline(script: string | URL, options?: { assets?: string | URL }): Promise<ServiceWorkerRegistration | null>;

export type Backend = 'auto' | 'webgpu' | 'cpu';

export interface LoadProgress {
  /**
   * `download` (or `read`, a given file) as the bytes arrive; then, for a file kept whole (the CPU
   * engine's), `parse` and `upload`; on WebGPU each tensor goes to the GPU as it arrives, and
   * `upload` comes once, at its end.
   */
  phase: 'download' | 'read' | 'parse' | 'upload';
  loaded: number;
  total: number;
  /** The file came from the browser's cache. */
  cached: boolean;
  /** What the load will take, once the file's header has been read (before the rest of it). */
  plan?: LoadPlan;
}

export interface LoadOptions {
  /** A URL (same-origin or CORS) or a GGUF file a person gave the page. */
  model?: string | URL | Blob;
  backend?: Backend;
  /** The package's folder, when a bundler moved nucleus.js away from it. */
  assets?: string | URL;
  /** The file's SHA-256, 64 lowercase hex digits. */
  sha256?: string;
  onProgress?: (progress: LoadProgress) => void;
  /** KV cache positions (default the model's trained length). */
  contextLength?: number;
  /** Bytes for every GPU buffer together. */
  memoryBudget?: number;
  /** Keep the file in the Cache API (default true). */
  cache?: boolean;
  /** Aborted before the load finishes: it rejects with `aborted`, its worker (and the memory it took) ended, nothing kept. */
  signal?: AbortSignal;
}

export interface ModelInfo {
  title: string;
  name: string;
  basename?: string | null;
  sizeLabel?: string | null;
  architecture: string;
  quantization: string;
  vocabSize: number;
  contextLength: number;
  /** The file's chat template, or false for a base model (raw prompts only). */
  chatTemplate: string | false;
  parameters: number;
  fileBytes: number;
  /**
   * Where the model runs and why; the CPU engine's threads, and on the threaded engine the
   * milliseconds of one decode step by thread count, from which the most threads within twice
   * the fastest's time were kept; in the relaxed SIMD module, how its byte products are summed
   * (`byteDot`, the faster of the two on a timed product, `byteDotTimings` in ms).
   */
  backend: { kind: 'webgpu' | 'cpu'; reason: string; threads: number; threadTimings?: Record<number, number>;
    byteDot?: 'accumulating' | 'paired'; byteDotTimings?: Record<string, number> };
  device: string;
  path: 'fused' | 'cpu';
  weightBytes: number;
  /** Bytes a token takes in the KV cache, every attention layer together, while the cache holds it whole. */
  kvBytesPerToken: number;
  /**
   * A sliding-window model's local layers (Gemma 3) on this path: a ring of `rows` positions, `bytesPerToken` of
   * `kvBytesPerToken`; past `rows` tokens only the other layers grow. `null` where every layer keeps every position.
   */
  kvWindow: { rows: number; bytesPerToken: number } | null;
  /** Bytes of the recurrent blocks' state (Qwen3.5's Gated DeltaNet blocks): fixed, whatever the context; 0 when every block attends. */
  stateBytes: number;
  /** Blocks of the file not run (its multi-token-prediction blocks). */
  skippedBlocks: number;
  /** The WebGPU adapter's facts (with its largest buffer and storage binding, bytes), whether it runs the model or not. */
  adapter: {
    vendor: string; architecture: string; description: string; isFallback: boolean;
    maxBufferSize: number; maxStorageBufferBindingSize: number;
  } | null;
  f16: boolean;
  url: string;
  sha256: string;
  loadMs: number;
  fromCache: boolean;
  cacheError?: { code: 'storage-quota'; message: string } | null;
  /**
   * What the load was planned to take, from the file's first bytes before the rest was downloaded
   * or read (null where the server gave no length): the memory
   * in the page's WebAssembly memory (`hostBytes`: everything on the CPU engine, the file's copy
   * on WebGPU) and on the GPU (`deviceBytes`), the KV cache at the whole context and the state.
   */
  plan?: LoadPlan | null;
}

export interface LoadPlan {
  fileBytes: number;
  contextLength: number;
  trainedContextLength: number;
  path: 'fused' | 'cpu';
  hostBytes: number;
  deviceBytes: number;
  kvCacheBytes: number;
  stateBytes: number;
  /** What this device offers, beside what the model needs. */
  offers: DeviceOffers;
}

/** What a device offers a model, as the browser says it. */
export interface DeviceOffers {
  /** The most a WebAssembly memory holds (4 GiB): everything on the CPU engine, the file's copy on WebGPU. */
  wasmMemoryBytes: number;
  /** `navigator.deviceMemory` in bytes (whole GiB or less, rounded and capped by the browser); null where it does not say. */
  deviceMemoryBytes: number | null;
  /** The WebGPU adapter's largest buffer and storage binding; null without an adapter. */
  gpuMaxBufferBytes: number | null;
  gpuMaxBindingBytes: number | null;
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

export type ResponseFormat =
  | { type: 'json_schema'; schema: object }
  | { type: 'json_object' }
  | { type: 'regex'; pattern: string }
  | { type: 'grammar'; lark: string };

/** The sampler's options (`SamplingParams`, crates/sampler/src/params.rs). */
export interface SamplingOptions {
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  typicalP?: number;
  repetitionPenalty?: number;
  presencePenalty?: number;
  frequencyPenalty?: number;
  penaltyLastN?: number;
  penalizePrompt?: boolean;
  dryMultiplier?: number;
  dryBase?: number;
  dryAllowedLength?: number;
  dryPenaltyLastN?: number;
  dryIncludePrompt?: boolean;
  drySequenceBreakers?: string[];
  /** Token id -> bias added to its logit (-Infinity forbids it). */
  logitBias?: Record<number, number>;
  seed?: number;
}

export interface GenerateOptions extends SamplingOptions {
  /** A raw prompt; or `messages`, through the model's chat template. */
  prompt?: string;
  messages?: ChatMessage[];
  maxTokens?: number;
  stop?: string[];
  ignoreEos?: boolean;
  /** Candidates per step, 0..=256 (default 20). */
  topLogprobs?: number;
  /** > 0: the sampler's explanation of each step with that many candidates. */
  explain?: number;
  /** Each step also carries its whole raw logits row. */
  returnLogits?: boolean;
  /** The output's first token ids, given instead of sampled (a fork). */
  forcedTokens?: number[];
  speculative?: { lookup?: { maxDraft?: number; ngram?: number } };
  responseFormat?: ResponseFormat;
  signal?: AbortSignal;
  /**
   * The prompt's progress, in prompt tokens: on WebGPU after each chunk it runs in, on the CPU
   * engine after each block of its one pass; the last call has `done === total`.
   */
  onPrefill?: (progress: { done: number; total: number; cached: number }) => void;
}

export interface TopCandidate {
  id: number;
  text: string;
  logit: number;
  logprob: number;
}

export type RemovedBy = 'mask' | 'forbidden' | 'greedy' | 'top_k' | 'top_p' | 'min_p' | 'typical_p';

export interface ExplainedCandidate {
  id: number;
  text: string;
  rank: number;
  logit: number;
  adjustedLogit: number;
  prob: number;
  cumulative: number;
  kept: boolean;
  keptByMask: boolean;
  keptByTopK: boolean;
  keptByTopP: boolean;
  keptByMinP: boolean;
  keptByTypicalP: boolean;
  removedBy: RemovedBy | null;
  finalProb: number;
}

export interface StepExplanation {
  candidates: ExplainedCandidate[];
  entropy: number;
  massOutside: number;
  keptCount: number;
  keptMass: number;
  temperature: number;
  stages: { possible: number; afterTopK: number; afterTopP: number; afterMinP: number; afterTypicalP: number };
  chosen: { id: number; rank: number; prob: number; logprob: number; temperatureProb: number };
}

export type FinishReason = 'eos' | 'stop' | 'length' | 'abort';

export interface Step {
  index: number;
  id: number;
  /** The token's own text. */
  token: string;
  /** The text this step releases (stop- and UTF-8-safe; may be empty). */
  text: string;
  logprob: number;
  top: TopCandidate[];
  explain?: StepExplanation;
  logits?: Float32Array;
  finishReason?: FinishReason;
  draft?: {
    tokens: { id: number; text: string; targetProb: number; verdict: 'accepted' | 'rejected' | 'not_reached' }[];
    accepted: number;
  };
  constraint?: { forbidden: number[]; allowed: number; removedMass: number | null; allowedWords?: number[] };
}

export interface QueueCalls {
  dispatches: number;
  submits: number;
  bufferWrites: number;
}

export interface GenerationResult {
  text: string;
  finishReason: FinishReason;
  stopSequence?: string;
  usage: { promptTokens: number; completionTokens: number; cachedPromptTokens: number };
  timing: { loadMs: number; ttftMs: number; prefillMs: number; prefillTokensPerS: number; decodeMs: number; decodeTokensPerS: number };
  transfer: {
    readbackBytes: number;
    bytesPerToken: number;
    tailSteps: number;
    fullReadSteps: number;
    gpuQueue: { firstStep: QueueCalls; perDecodeToken: QueueCalls | null };
  };
  speculation?: {
    decodePasses: number;
    verifyPasses: number;
    draftedTokens: number;
    acceptedTokens: number;
    acceptanceRate: number;
    tokensPerPass: number;
  };
}

/** A running generation: its steps as they come, and its outcome. */
export class Generation implements AsyncIterable<Step> {
  private constructor();
  readonly result: Promise<GenerationResult>;
  /** Stops after the step in flight; `result` resolves with finishReason 'abort'. */
  abort(): Promise<void>;
  [Symbol.asyncIterator](): AsyncIterator<Step>;
}

export interface LogitLensOptions {
  prompt?: string;
  messages?: ChatMessage[];
  /** The ids generated before the step ([] for the first). */
  generated?: number[];
  /** 1..=64 (default 10). */
  candidates?: number;
}

export interface LogitLensReport {
  candidates: { id: number; text: string; prob: number }[];
  /** `memory`: what the block keeps of earlier positions: 'kv-rows' (attention) or 'state' (a Gated DeltaNet block's fixed-size state). */
  layers: { layer: number; probs: number[]; top: { id: number; text: string; prob: number }; memory: 'kv-rows' | 'state' }[];
  contextTokens: number;
  cachedTokens: number;
  bytesRead: number;
}

export interface ScoreOptions {
  /** Alternatives reported per token, 0..=20 (default 5). */
  topK?: number;
  /** Score a chat rendered with the model's template instead (pass `null` as the text). */
  messages?: ChatMessage[];
  /** Token ids after the text's (a run's generated ids, as sampled), scored with it. */
  generated?: number[];
}

export interface ScoredToken {
  id: number;
  /** The token's own text (U+FFFD where it holds part of a character). */
  text: string;
  /** A control token (chat-template markers, BOS), not text. */
  special: boolean;
  /** Absent for the first token, which nothing predicts. */
  prob?: number;
  logprob?: number;
  /** 1 for the model's most likely token there (ties to the lower id). */
  rank?: number;
  /** The entropy (nats) of the distribution the token was read from: how unsure the model was. */
  entropy?: number;
  /** The model's best tokens at this position, best first (empty for the first token). */
  top: TopCandidate[];
}

export interface ScoreReport {
  tokens: ScoredToken[];
  /** Tokens predicted: all but the first. */
  predictedTokens: number;
  /** Σ log p of the predicted tokens (natural log). */
  totalLogprob: number;
  /** exp(−totalLogprob / predictedTokens); absent when nothing was predicted. */
  perplexity?: number;
  /** What the model expects after the text, and that distribution's entropy (nats). */
  next: TopCandidate[];
  nextEntropy: number;
  /** Bytes read back from the GPU (0 on the CPU engine). */
  bytesRead: number;
  elapsedMs: number;
}

export interface AttentionOptions {
  prompt?: string;
  messages?: ChatMessage[];
  /** Token ids after the text's (a run's generated ids), read with it. */
  generated?: number[];
  /** 1-based; default the last layer. */
  layer?: number;
  /** 1-based; omitted: the mean of the layer's heads. */
  head?: number;
  /** The first query position (0-based token index); default `to − 256` (or 0). */
  from?: number;
  /** The position after the last query; default the text's end. */
  to?: number;
}

export interface AttentionReport {
  tokens: { id: number; text: string; special: boolean }[];
  layer: number;
  /** Absent for the mean of the layer's heads. */
  head?: number;
  heads: number;
  /** What each layer keeps of earlier positions: 'kv-rows' (attention) or 'state' (no attention to show). */
  layers: ('kv-rows' | 'state')[];
  /** A local layer's window: a position sees itself and the window − 1 before it. */
  window?: number;
  /** Per query position, the weight of each position up to its own (sums to 1); none for a 'state' layer. */
  rows: { position: number; weights: number[] }[];
  bytesRead: number;
  elapsedMs: number;
}

export interface BeamSearchOptions {
  prompt?: string;
  messages?: ChatMessage[];
  /** 1..=8 (default 3). */
  beams?: number;
  lengthPenalty?: number;
  /** 1..=64 (default 8). */
  maxTokens?: number;
  ignoreEos?: boolean;
}

export interface BeamSearchResult {
  hypotheses: { tokens: number[]; text: string; logprob: number; score: number; finishReason: FinishReason }[];
  trace: {
    nodes: {
      id: number;
      parent: number | null;
      step: number;
      token: number | null;
      text: string | null;
      tokenLogprob: number;
      logprob: number;
      score: number;
      status: 'root' | 'kept' | 'finished' | 'pruned';
    }[];
    steps: { step: number; kept: number[]; finished: number[]; pruned: number[] }[];
  };
  promptTokens: number;
}

export interface Diagnostics {
  liveBuffers: number;
  liveBytes: number;
  kvCacheBytes: number;
  wasmMemoryBytes: number;
}

export interface StoredModels {
  models: { url: string; name: string; bytes: number; local: boolean }[];
  usage: number | null;
  quota: number | null;
}

// ---- the OpenAI facade ------------------------------------------------------------------------

/** Every engine option in snake_case is taken too (top_k, dry_multiplier, …). */
export interface ChatCompletionRequest {
  messages: ChatMessage[];
  stream?: boolean;
  stream_options?: { include_usage?: boolean };
  model?: string;
  user?: string;
  n?: 1;
  max_tokens?: number;
  max_completion_tokens?: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  typical_p?: number;
  stop?: string[];
  seed?: number;
  frequency_penalty?: number;
  presence_penalty?: number;
  repetition_penalty?: number;
  logit_bias?: Record<number, number>;
  logprobs?: boolean;
  /** 0..=256. */
  top_logprobs?: number;
  response_format?: { type: 'text' } | { type: 'json_object' } | { type: 'json_schema'; json_schema: { name?: string; schema: object } }
    | { type: 'regex'; pattern: string } | { type: 'grammar'; lark: string };
  ignore_eos?: boolean;
  dry_multiplier?: number;
  dry_base?: number;
  dry_allowed_length?: number;
  dry_penalty_last_n?: number;
  penalty_last_n?: number;
  penalize_prompt?: boolean;
  dry_include_prompt?: boolean;
  dry_sequence_breakers?: string[];
  forced_tokens?: number[];
  explain?: number;
  speculative?: { lookup?: { maxDraft?: number; ngram?: number } };
}

export interface ChatCompletionLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
}

export interface ChatCompletionUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: {
    index: 0;
    message: { role: 'assistant'; content: string };
    logprobs: { content: ChatCompletionLogprob[] } | null;
    finish_reason: 'stop' | 'length' | 'abort';
  }[];
  usage: ChatCompletionUsage;
}

export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: {
    index: 0;
    delta: { role?: 'assistant'; content?: string };
    logprobs: { content: ChatCompletionLogprob[] } | null;
    finish_reason: 'stop' | 'length' | 'abort' | null;
  }[];
  usage?: ChatCompletionUsage;
}

export interface ChatCompletionStream extends AsyncIterable<ChatCompletionChunk> {
  abort(): Promise<void>;
}

export interface ChatCompletions {
  create(request: ChatCompletionRequest & { stream: true }): Promise<ChatCompletionStream>;
  create(request: ChatCompletionRequest & { stream?: false }): Promise<ChatCompletion>;
}

/** `lm.completions.create`: OpenAI's legacy completions (not streamed), with `echo` and `logprobs`. */
export interface CompletionRequest extends Omit<ChatCompletionRequest, 'messages' | 'stream' | 'logprobs' | 'top_logprobs'> {
  prompt: string;
  /** The prompt in the completion's text, and with `logprobs` its tokens rated too. */
  echo?: boolean;
  /** Alternatives per token, 0..=20; absent: no logprobs. */
  logprobs?: number | null;
  stream?: false;
}

export interface Completion {
  id: string;
  object: 'text_completion';
  created: number;
  model: string;
  choices: {
    index: number;
    text: string;
    /** The first token of an echoed prompt has no log-probability (null), as in OpenAI's. */
    logprobs: { tokens: string[]; token_logprobs: (number | null)[]; top_logprobs: (Record<string, number> | null)[]; text_offset: number[] } | null;
    finish_reason: 'stop' | 'length' | 'abort';
  }[];
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

// ---- the model ---------------------------------------------------------------------------------

export class Nucleus {
  private constructor();
  /** Loads a GGUF model into a new worker. */
  static load(options?: LoadOptions): Promise<Nucleus>;
  /** The models this browser keeps, largest first, and the site's storage use and quota. */
  static storedModels(): Promise<StoredModels>;
  /**
   * Makes the next load's first `tries` tries (1 to 3, default 1) panic as their engine starts:
   * each crashed try is tried again in a new worker, three workers in all (tests of a crashed load).
   */
  static crashNextLoadForTesting(tries?: number): void;
  /**
   * Makes the next load's first `tries` tries (1 to 3, default 1) block their worker for good as
   * their engine starts, each ended after `silenceMs` (default 60,000; at least 4,000) without a
   * word from it and tried again in a new worker (tests of a worker that stops answering).
   */
  static hangNextLoadForTesting(tries?: number, silenceMs?: number): void;
  /** Drops the kept copy of the model at `url`; resolves to whether one was kept. */
  static removeStoredModel(url: string | URL): Promise<boolean>;

  readonly info: Readonly<ModelInfo>;
  readonly chat: { readonly completions: ChatCompletions };
  readonly completions: { create(request: CompletionRequest): Promise<Completion> };
  generate(options: GenerateOptions): Generation;
  logitLens(options: LogitLensOptions): Promise<LogitLensReport>;
  /** How surprising `text` is to the model, token by token (`null` with `options.messages`: a chat). */
  score(text: string | null, options?: ScoreOptions): Promise<ScoreReport>;
  /** What a token attends to: one layer's attention weights over a text. */
  attention(options: AttentionOptions): Promise<AttentionReport>;
  beamSearch(options: BeamSearchOptions): Promise<BeamSearchResult>;
  tokenize(text: string): Promise<number[]>;
  diagnostics(): Promise<Diagnostics>;
  /** Ends the worker and frees the model's memory. */
  dispose(): void;
  /** Destroys the GPU device, as a driver reset would (tests of `device-lost`). */
  loseDeviceForTesting(): Promise<true>;
  /** Throws in the worker outside any request, as a trap in a callback would (tests of `worker-crashed`). */
  crashWorkerForTesting(): Promise<never>;
  /** Panics inside the engine, as a bug would (tests of `internal`). */
  panicForTesting(): Promise<never>;
}
