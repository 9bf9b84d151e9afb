// The page's "what if": the Rust sampler's own stages, from its wasm module (www/pkg/
// nucleus_sampler_web.js: no model, no GPU), re-run on a step's logits with other settings. The
// same code chose the token in the engine, so what the chart shows is what sampling would do.

import init, { estimateRow, whatIf } from './pkg/nucleus_sampler_web.js';
import { NucleusError, assetsBase } from './nucleus.js';
import { webAssemblyProblem } from './protocol.js';

/**
 * The sliders and the sampling defaults, written from the Rust sampler (crates/sampler/src/knobs.rs
 * and SamplingParams::default) by its test, which keeps the file current. Set by loadSampler.
 */
export let KNOBS = [];
export let DEFAULTS = {};

let loading = null;

/**
 * Loads the sampler's wasm module and the knobs from `assets` (the package's folder, as
 * `Nucleus.load` takes it; default this module's) once; every function here needs it done. Later
 * calls get the first load, whatever their base. Without WebAssembly: `no-webassembly`.
 */
export function loadSampler(assets) {
  if (loading) return loading;
  const noWebAssembly = webAssemblyProblem();
  if (noWebAssembly) return Promise.reject(new NucleusError('no-webassembly', noWebAssembly));
  loading = (async () => {
    const base = assetsBase(assets);
    const [, knobs] = await Promise.all([
      init({ module_or_path: new URL('pkg/nucleus_sampler_web_bg.wasm', base) }),
      fetch(new URL('sampling-knobs.json', base)).then((response) => {
        if (!response.ok) throw new Error(`${response.url}: HTTP ${response.status}`);
        return response.json();
      }),
    ]);
    ({ knobs: KNOBS, defaults: DEFAULTS } = knobs);
  })();
  // A failed load is not kept: the next call tries again.
  loading.catch(() => { loading = null; });
  return loading;
}

/** The settings a what-if re-applies to a step: temperature and the truncations (penalties need the run's history). */
export const WHAT_IF_KEYS = ['temperature', 'topK', 'topP', 'minP', 'typicalP'];

/** The full vocabulary's log-sum-exp of a step: any candidate's logit minus its log-probability. */
export const logSumExp = (step) => step.top[0].logit - step.top[0].logprob;

/**
 * A step's logits row and whether it is estimated: its whole row when the run read it
 * (`returnLogits`), else its top candidates with the rest of the vocabulary at one logit that
 * makes the rest's mass at temperature 1 exact (nucleus_sampler_web::estimated_row). A
 * constrained step whose removed mass is known is estimated from its allowed candidates and the
 * allowed mass (the row the grammar left), so that the same holds under the mask; when the mass
 * is not known (`maskEstimated`), the mask outside the candidates is not either. The last row
 * made is kept (a row is 4 bytes per token: one at a time).
 */
let lastRow = { step: null, vocabSize: 0, value: null };
export function stepRow(step, vocabSize) {
  if (lastRow.step !== step || lastRow.vocabSize !== vocabSize) {
    lastRow = { step, vocabSize, value: step.logits ? { row: step.logits, approximate: false, maskEstimated: false } : estimatedRow(step, vocabSize) };
  }
  return lastRow.value;
}

function estimatedRow(step, vocabSize) {
  const removed = step.constraint?.removedMass ?? null;
  const forbidden = new Set(removed === null ? [] : step.constraint.forbidden);
  const top = step.top.filter((c) => !forbidden.has(c.id));
  // The allowed row's log-sum-exp: the whole row's, less the mass the grammar removed.
  const lse = logSumExp(step) + (removed === null ? 0 : Math.log1p(-removed));
  const row = estimateRow(Uint32Array.from(top, (c) => c.id), Float32Array.from(top, (c) => c.logit), lse, vocabSize);
  return { row, approximate: step.top.length < vocabSize, maskEstimated: Boolean(step.constraint) && removed === null };
}

/**
 * A constrained step's allowed set as the what-if takes it (one bit per token): the engine's own
 * when the step carries it (a step that returned its row), else every token but the candidates
 * the grammar forbade. Undefined for a step without a constraint.
 */
function allowedWords(step, vocabSize) {
  const report = step.constraint;
  if (!report) return undefined;
  if (report.allowedWords) return Uint32Array.from(report.allowedWords);
  const words = new Uint32Array(Math.ceil(vocabSize / 32)).fill(0xffffffff);
  for (const id of report.forbidden) words[id >>> 5] &= ~(1 << (id & 31));
  return words;
}

/**
 * The sampler's explanation of `step` under `settings` (the JS API's sampling options), with a
 * constrained step's mask where the engine applied it: its candidates by rank (`topN` of them,
 * and the step's chosen token), each with `prob` after temperature, `kept`, `removedBy`,
 * `finalProb`; `stages` (tokens left after each cut), `keptCount`, `keptMass`, `entropy`,
 * `chosen`. `approximate` is true when the rest of the vocabulary was estimated and the
 * temperature is not 1 or 0 (then the rest's share is estimated; everything at temperature 1 is
 * exact), or when the grammar's mask outside the candidates was not known. `known(id)` says
 * whether a candidate's numbers are the step's own (false for a token of the estimated rest).
 */
export function explainStep(step, settings, { vocabSize, topN }) {
  const { row, approximate, maskEstimated } = stepRow(step, vocabSize);
  const explanation = JSON.parse(whatIf(row, JSON.stringify(settings), step.id, topN, allowedWords(step, vocabSize)));
  const listed = step.logits ? null : new Set(step.top.map((c) => c.id));
  explanation.approximate = maskEstimated || (approximate && ![0, 1].includes(settings.temperature ?? 1));
  explanation.known = (id) => listed === null || listed.has(id);
  return explanation;
}
