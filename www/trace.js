// Recorded runs (traces): a generation written as JSON (www/trace.schema.json) and read back,
// checked whole by the sampler's wasm module (nucleus_sampler_web::trace), so that a page replays
// its steps in the inspector, what-if sliders and all, without the model and without WebGPU.

import { readTrace, traceHeader } from './pkg/nucleus_sampler_web.js';
import { logSumExp } from './what-if.js';

/** Both functions here need the sampler's wasm module: `await loadSampler(assets)` first (the element does). */
export { loadSampler } from './what-if.js';

/**
 * The trace of a finished run. `run`: { request: { prompt } or { messages }, settings (the
 * sampling options it used, seed included), steps (the API's steps), result }; `model`: the
 * model's { name, sha256, vocabSize } (`lm.info`).
 */
export function traceOf(run, model) {
  return {
    ...JSON.parse(traceHeader()),
    model: { name: model.name, sha256: model.sha256 ?? null, vocabSize: model.vocabSize },
    ...run.request,
    settings: run.settings,
    steps: run.steps.map((step) => ({
      id: step.id,
      token: step.token,
      logprob: step.logprob,
      logSumExp: logSumExp(step),
      candidates: {
        ids: step.top.map((c) => c.id),
        texts: step.top.map((c) => c.text),
        logits: step.top.map((c) => c.logit),
      },
    })),
    text: run.result.text,
    finishReason: run.result.finishReason,
  };
}

/**
 * Reads a trace's text, whole or not at all: `{ model, run }` with the run in the shape a live
 * one has (steps with `top` candidates and their log-probabilities), or an `Error` with `code`
 * `bad-trace` and `path` naming what is wrong.
 */
export function runOfTrace(text) {
  const trace = JSON.parse(readTrace(text));
  const steps = trace.steps.map((step, index) => ({
    index,
    id: step.id,
    token: step.token,
    text: '',
    logprob: step.logprob,
    top: step.candidates.ids.map((id, j) => ({
      id,
      text: step.candidates.texts[j],
      logit: step.candidates.logits[j],
      logprob: step.candidates.logits[j] - step.logSumExp,
    })),
  }));
  const request = trace.messages ? { messages: trace.messages } : { prompt: trace.prompt };
  return {
    model: trace.model,
    run: { request, settings: trace.settings, steps, result: { text: trace.text, finishReason: trace.finishReason } },
  };
}
