// Types of recorded runs (trace.js; the format: trace.schema.json, read by the sampler's wasm
// module). Checked with nucleus.d.ts by `tsc --noEmit` (see there).

import type { ChatMessage, FinishReason, GenerationResult, ModelInfo, SamplingOptions, Step, TopCandidate } from './nucleus.js';

/**
 * Loads the sampler's wasm module (which reads and writes traces) from the package's folder
 * (`assets`, as `Nucleus.load` takes it; default the folder of the package's modules), once.
 */
export function loadSampler(assets?: string | URL): Promise<void>;

/** A trace as written (trace.schema.json). */
export interface Trace {
  format: 'nucleus-trace';
  version: 1;
  /** The Nucleus version that recorded it ("nucleus 0.1.0"). */
  generator?: string;
  model: { name: string; sha256: string | null; vocabSize: number };
  prompt?: string;
  messages?: ChatMessage[];
  settings: SamplingOptions;
  steps: {
    id: number;
    token: string;
    logprob: number;
    logSumExp: number;
    candidates: { ids: number[]; texts: string[]; logits: number[] };
  }[];
  text: string;
  finishReason: FinishReason;
}

/** A finished run, as the page keeps it. */
export interface TraceRun {
  request: { prompt: string } | { messages: ChatMessage[] };
  settings: SamplingOptions;
  steps: Pick<Step, 'id' | 'token' | 'logprob' | 'top'>[];
  result: Pick<GenerationResult, 'text' | 'finishReason'>;
}

/** The trace of a finished run (`model`: `lm.info`). The sampler's wasm module must be loaded (the element or `loadSampler`). */
export function traceOf(run: TraceRun, model: Pick<ModelInfo, 'name' | 'vocabSize'> & { sha256?: string | null }): Trace;

/**
 * Reads a trace's text, whole or not at all; throws an Error with `code` 'bad-trace' and `path`
 * naming what is wrong.
 */
export function runOfTrace(text: string): {
  model: Trace['model'];
  run: TraceRun & { steps: (Pick<Step, 'index' | 'id' | 'token' | 'text' | 'logprob'> & { top: TopCandidate[] })[] };
};
