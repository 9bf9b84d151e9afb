// www/sampling.js, the playground's "what if", against the sampler's worked examples
// (crates/sampler/tests/behaviour.rs) and against itself with the rest of the vocabulary split up.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { transform, stepGroups, rowGroups } from '../../www/sampling.js';

// mat, sofa, floor, bed, and two unlikely tokens.
const WORKED = [6.0, 5.0, 4.5, 3.5, 2.0, 0.0].map((logit, id) => ({ id, logit }));
const finals = (params) => transform(WORKED, params).groups.map((g) => g.finalProb);
const close = (actual, expected, tolerance = 5e-4) =>
  actual.forEach((a, i) => assert.ok(Math.abs(a - expected[i]) <= tolerance, `entry ${i}: ${a} vs ${expected[i]}`));

test('temperature matches the worked examples', () => {
  close(finals({}), [0.590, 0.217, 0.132, 0.048, 0.011, 0.001]);
  close(finals({ temperature: 0.5 }).slice(0, 4), [0.839, 0.114, 0.042, 0.006]);
  close(finals({ temperature: 2 }), [0.392, 0.238, 0.185, 0.112, 0.053, 0.020]);
  assert.deepEqual(finals({ temperature: 0 }), [1, 0, 0, 0, 0, 0]);
});

test('top-k, top-p and min-p keep what the sampler keeps', () => {
  close(finals({ topK: 3 }), [0.62853, 0.23122, 0.14024, 0, 0, 0], 1e-5);
  const topP = transform(WORKED, { topP: 0.9 });
  assert.deepEqual(topP.groups.map((g) => g.kept), [1, 1, 1, 0, 0, 0], 'cumulative .590, .807, .939 reaches 0.9 at floor');
  assert.equal(topP.groups[3].removedBy, 'top_p');
  assert.equal(topP.cuts.topP, 3);
  const minP = transform(WORKED, { minP: 0.1 });
  assert.deepEqual(minP.groups.map((g) => g.kept), [1, 1, 1, 0, 0, 0], 'bed .048 < 0.1 · .590');
  assert.ok(Math.abs(minP.cuts.minP - 0.059) < 1e-3);
  assert.equal(transform(WORKED, { topK: 2, topP: 0.5 }).keptCount, 1, 'top-p on the renormalised top-2');
});

test('typical-p keeps the tokens whose surprisal is closest to the entropy', () => {
  const result = transform(WORKED, { typicalP: 0.5 });
  // Entropy 1.12 nats; surprisals 1.53 (sofa), .53 (mat), 2.03 (floor): sofa, then mat reach 0.5.
  assert.deepEqual(result.groups.map((g) => g.kept), [1, 1, 0, 0, 0, 0]);
  assert.equal(result.groups[1].removedBy, null);
});

test('a group of equal tokens gives what the tokens one by one give', () => {
  const split = [{ id: 0, logit: 3 }, { id: 1, logit: 2 }, ...Array.from({ length: 50 }, (_, i) => ({ id: 2 + i, logit: 0.5 }))];
  const grouped = [{ id: 0, logit: 3 }, { id: 1, logit: 2 }, { id: -1, logit: 0.5, count: 50 }];
  for (const params of [{}, { temperature: 1.7, topP: 0.8 }, { topK: 20 }, { minP: 0.02, temperature: 2 }, { typicalP: 0.6 }]) {
    const a = transform(split, params);
    const b = transform(grouped, params);
    assert.equal(b.keptCount, a.keptCount, JSON.stringify(params));
    assert.ok(Math.abs(a.keptMass - b.keptMass) < 1e-9, JSON.stringify(params));
    assert.ok(Math.abs(a.entropy - b.entropy) < 1e-9);
    assert.ok(Math.abs(a.groups[0].finalProb - b.groups[0].finalProb) < 1e-9);
  }
});

test('a step\'s candidates plus the rest reproduce its log-probabilities at temperature 1', () => {
  const logits = [5, 4, 3, 1, 1, 1, 1, 1];
  const lse = Math.log(logits.reduce((s, l) => s + Math.exp(l), 0));
  const top = logits.slice(0, 3).map((logit, id) => ({ id, text: `t${id}`, logit, logprob: logit - lse }));
  const { groups, approximate } = stepGroups({ top }, logits.length);
  assert.equal(approximate, true);
  assert.deepEqual(groups.at(-1).count, 5);
  const result = transform(groups, {});
  result.groups.slice(0, 3).forEach((g, i) => assert.ok(Math.abs(Math.log(g.prob) - top[i].logprob) < 1e-12));
  assert.ok(Math.abs(result.keptMass - 1) < 1e-12);
});

test('on a real logits row, the top 64 plus the rest agree with the whole row at temperature 1', () => {
  const bytes = readFileSync(new URL('../fixtures/smollm2-135m-instruct-q4_1-capital-last-logits.f32', import.meta.url));
  const logits = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
  const exact = transform(rowGroups({ logits, top: [] }).groups, {});
  const top = exact.groups.slice(0, 64).map((g) => ({ id: g.id, text: '', logit: g.logit, logprob: Math.log(g.prob) }));
  assert.equal(top[0].id, 7042, '" Paris"');
  const { groups, approximate } = stepGroups({ top }, logits.length);
  assert.equal(approximate, true);
  const estimated = transform(groups, {});
  for (let i = 0; i < 64; i++) assert.ok(Math.abs(estimated.groups[i].prob - exact.groups[i].prob) < 1e-9);
  // Truncations that stay inside the candidates keep the same tokens either way.
  for (const params of [{ topP: 0.9 }, { topK: 10 }, { minP: 0.05 }]) {
    assert.equal(transform(groups, params).keptCount, transform(rowGroups({ logits, top: [] }).groups, params).keptCount);
  }
});
