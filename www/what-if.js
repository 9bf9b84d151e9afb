// The page's "what if": the Rust sampler's own stages, from its wasm module (www/pkg/
// nucleus_sampler_web.js: no model, no GPU), re-run on a step's logits with other settings. The
// same code chose the token in the engine, so what the chart shows is what sampling would do.

import init, { estimateRow, whatIf } from './pkg/nucleus_sampler_web.js';

await init();

/**
 * The sliders and the sampling defaults, written from the Rust sampler (crates/sampler/src/knobs.rs
 * and SamplingParams::default) by its test, which keeps the file current.
 */
export const { knobs: KNOBS, defaults: DEFAULTS } = await (await fetch(new URL('sampling-knobs.json', import.meta.url))).json();
/** The settings a what-if re-applies to a step: temperature and the truncations (penalties need the run's history). */
export const WHAT_IF_KEYS = ['temperature', 'topK', 'topP', 'minP', 'typicalP'];

/** The full vocabulary's log-sum-exp of a step: any candidate's logit minus its log-probability. */
export const logSumExp = (step) => step.top[0].logit - step.top[0].logprob;

/**
 * A step's logits row and whether it is estimated: its whole row when the run read it
 * (`returnLogits`), else its top candidates with the rest of the vocabulary at one logit that
 * makes the rest's mass at temperature 1 exact (nucleus_sampler_web::estimated_row). The last
 * row made is kept (a row is 4 bytes per token: one at a time).
 */
let lastRow = { step: null, vocabSize: 0, value: null };
export function stepRow(step, vocabSize) {
  if (lastRow.step !== step || lastRow.vocabSize !== vocabSize) {
    const value = step.logits
      ? { row: step.logits, approximate: false }
      : {
        row: estimateRow(Uint32Array.from(step.top, (c) => c.id), Float32Array.from(step.top, (c) => c.logit), logSumExp(step), vocabSize),
        approximate: step.top.length < vocabSize,
      };
    lastRow = { step, vocabSize, value };
  }
  return lastRow.value;
}

/**
 * The sampler's explanation of `step` under `settings` (the JS API's sampling options): its
 * candidates by rank (`topN` of them, and the step's chosen token), each with `prob` after
 * temperature, `kept`, `removedBy`, `finalProb`; `stages` (tokens left after each cut),
 * `keptCount`, `keptMass`, `entropy`, `chosen`. `approximate` is true when the rest of the
 * vocabulary was estimated and the temperature is not 1 or 0 (then the rest's share is estimated;
 * everything at temperature 1 is exact). `known(id)` says whether a candidate's numbers are the
 * step's own (false for a token of the estimated rest).
 */
export function explainStep(step, settings, { vocabSize, topN }) {
  const { row, approximate } = stepRow(step, vocabSize);
  const explanation = JSON.parse(whatIf(row, JSON.stringify(settings), step.id, topN));
  const listed = step.logits ? null : new Set(step.top.map((c) => c.id));
  explanation.approximate = approximate && ![0, 1].includes(settings.temperature ?? 1);
  explanation.known = (id) => listed === null || listed.has(id);
  return explanation;
}
