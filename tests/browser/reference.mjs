// The float64 references' rows and the checks of a scored text against them, shared by the
// browser suites that score a reference prompt (cpu.test.mjs, qwen35.test.mjs).

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { REPO } from './server.mjs';

export const FIXTURES = path.join(REPO, 'tests/fixtures');

/** A reference case's last logits row (float64 reference, stored as f32). */
export const lastLogits = (caseData) => new Float32Array(readFileSync(path.join(FIXTURES, caseData.last_logits_file)).buffer.slice(0));

/**
 * `report` (lm.score of the case's text) against the reference: the case's token ids, nothing
 * rated for the first token, a rank and log-probability for every other, the total their sum,
 * and what the model expects after the text (`next`) within 1e-3 of the reference's
 * log-softmax, in its order (neighbours closer than 1e-3 may swap).
 */
export function assertScoreMatchesReference(report, caseData, label) {
  const row = lastLogits(caseData);
  let max = -Infinity;
  for (const x of row) max = Math.max(max, x);
  let sum = 0;
  for (const x of row) sum += Math.exp(x - max);
  const logSoftmax = (id) => row[id] - max - Math.log(sum);
  assert.deepEqual(report.tokens.map((t) => t.id), caseData.ids, `${label}: the text's tokens`);
  assert.equal(report.tokens[0].rank, undefined, `${label}: nothing predicts the first token`);
  assert.ok(report.tokens.slice(1).every((t) => t.rank >= 1 && t.logprob <= 0), `${label}: every other token rated`);
  const total = report.tokens.slice(1).reduce((s, t) => s + t.logprob, 0);
  assert.ok(Math.abs(report.totalLogprob - total) < 1e-9, `${label}: the total`);
  assert.ok(Math.abs(report.perplexity - Math.exp(-total / (caseData.ids.length - 1))) < 1e-6 * report.perplexity);
  let worst = 0;
  report.next.forEach((candidate, rank) => {
    worst = Math.max(worst, Math.abs(candidate.logprob - logSoftmax(candidate.id)));
    const expected = caseData.top20[rank];
    if (candidate.id !== expected.id) {
      assert.ok(Math.abs(row[candidate.id] - expected.logit) < 1e-3, `${label}: next rank ${rank + 1} is ${candidate.id}, not ${expected.id}`);
    }
  });
  assert.ok(worst < 1e-3, `${label}: the last position's log-probabilities are off by ${worst}`);
  return worst;
}
