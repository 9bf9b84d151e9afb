// The sampler's own wasm module (www/pkg/nucleus_sampler_web.js, built by ./build.sh web) in Node:
// its what-if gives byte for byte the explanations the native sampler recorded for the reference rows
// (tests/fixtures/sampler-what-if.json, written by crates/sampler-web/tests/what_if.rs), and
// refuses bad options by name; a row made from a step's top candidates gives the step's own
// probabilities. No GPU, no model: what a page without WebGPU gets.
// Usage: node tests/wasm/sampler-what-if.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { estimateRow, initSync, whatIf } from '../../www/pkg/nucleus_sampler_web.js';

const pkg = new URL('../../www/pkg/', import.meta.url);
const fixtures = new URL('../fixtures/', import.meta.url);
initSync({ module: readFileSync(new URL('nucleus_sampler_web_bg.wasm', pkg)) });

const { cases } = JSON.parse(readFileSync(new URL('sampler-what-if.json', fixtures), 'utf8'));
const rows = new Map();
function row(name) {
  if (!rows.has(name)) {
    const bytes = readFileSync(new URL(`smollm2-135m-instruct-q4_1-${name}-last-logits.f32`, fixtures));
    rows.set(name, new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4));
  }
  return rows.get(name);
}

test('the wasm what-if equals the native sampler on every recorded row and setting', () => {
  assert.ok(cases.length >= 24, `${cases.length} cases`);
  for (const { row: name, options, topN, explanation } of cases) {
    // Byte for byte: the same numbers, written the same way.
    assert.equal(whatIf(row(name), JSON.stringify(options), undefined, topN), explanation, `${name} ${JSON.stringify(options)}`);
  }
});

test('the step\'s own chosen token is reported as chosen', () => {
  const got = JSON.parse(whatIf(row('capital'), '{"temperature":0.7}', 260, 4));
  assert.equal(got.chosen.id, 260);
  assert.ok(got.candidates.some((c) => c.id === 260));
});

test('an unknown option or a bad value is bad-options, naming the option; a bad row is bad-row', () => {
  const logits = row('capital');
  assert.throws(() => whatIf(logits, '{"topQ":0.9}', undefined, 4), (e) => e.code === 'bad-options' && e.option === 'topQ');
  assert.throws(() => whatIf(logits, '{"topP":1.5}', undefined, 4),
    (e) => e.code === 'bad-options' && e.option === 'topP' && e.message === 'topP must be in (0, 1], got 1.5');
  assert.throws(() => whatIf(logits, '{"topP":null,"seed":-1}', undefined, 4), (e) => e.code === 'bad-options' && e.option === 'seed');
  assert.throws(() => whatIf(logits, 'not json', undefined, 4), (e) => e.code === 'bad-options' && e.option === 'options');
  assert.throws(() => whatIf(new Float32Array([0, NaN]), '{}', undefined, 4), (e) => e.code === 'bad-row');
});

test('a row from the top 64 candidates gives their own probabilities at temperature 1', () => {
  const logits = row('capital');
  const exact = JSON.parse(whatIf(logits, '{}', undefined, 64));
  const ids = Uint32Array.from(exact.candidates.slice(0, 64), (c) => c.id);
  const top = Float32Array.from(ids, (id) => logits[id]);
  const logSumExp = top[0] - Math.log(exact.candidates[0].prob);
  const estimated = estimateRow(ids, top, logSumExp, logits.length);
  assert.equal(estimated.length, logits.length);
  const fromTop = JSON.parse(whatIf(estimated, '{}', undefined, 64));
  fromTop.candidates.slice(0, 64).forEach((c, i) => {
    assert.equal(c.id, exact.candidates[i].id);
    assert.ok(Math.abs(c.prob - exact.candidates[i].prob) < 1e-9, `${c.id}: ${c.prob} vs ${exact.candidates[i].prob}`);
  });
  assert.throws(() => estimateRow(Uint32Array.of(1, 1), Float32Array.of(1, 2), 3, 8), (e) => e.code === 'bad-row' && /twice/.test(e.message));
});
