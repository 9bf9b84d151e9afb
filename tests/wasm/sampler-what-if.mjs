// The sampler's own wasm module (www/pkg/nucleus_sampler_web.js, built by ./build.sh web) in Node:
// its what-if gives byte for byte the explanations the native sampler recorded for the reference rows
// (tests/fixtures/sampler-what-if.json, written by crates/sampler-web/tests/what_if.rs), and
// refuses bad options by name. No GPU, no model: what a page without WebGPU gets.
// Usage: node tests/wasm/sampler-what-if.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { initSync, whatIf } from '../../www/pkg/nucleus_sampler_web.js';

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

test('an unknown option or a bad value is bad-options, naming the option', () => {
  const logits = row('capital');
  assert.throws(() => whatIf(logits, '{"topQ":0.9}', undefined, 4), (e) => e.code === 'bad-options' && e.option === 'topQ');
  assert.throws(() => whatIf(logits, '{"topP":1.5}', undefined, 4), (e) => e.code === 'bad-options' && /top_p/.test(e.message));
  assert.throws(() => whatIf(logits, 'not json', undefined, 4), (e) => e.code === 'bad-options');
  assert.throws(() => whatIf(new Float32Array([0, NaN]), '{}', undefined, 4), (e) => e.code === 'bad-options');
});
