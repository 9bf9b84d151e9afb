// Replaying a recorded run (a trace) in Chromium without WebGPU: the committed trace
// (www/traces/capital-greedy.json, saved by the playground) from a file and from the
// page's ?trace= link; its sliders re-run the sampler module; a damaged trace is refused naming
// what is wrong, and what the page showed stays. Screenshots go to test-output/.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { startServer, REPO } from './server.mjs';
import { launch, open } from './browser.mjs';

const OUTPUT = path.join(REPO, 'test-output');
const TRACE_FILE = path.join(REPO, 'www/traces/capital-greedy.json');
const trace = JSON.parse(readFileSync(TRACE_FILE, 'utf8'));

let server;
let context;
let page;

const chartSnapshot = () => page.evaluate(() => document.querySelector('#chart').innerHTML + document.querySelector('#whatif').textContent);
const chips = () => page.$$eval('#tokens .token', (nodes) => nodes.map((n) => n.textContent));

before(async () => {
  mkdirSync(OUTPUT, { recursive: true });
  server = await startServer({ extra: { '/trace.json': { body: Buffer.from(JSON.stringify(trace)), type: 'application/json' } } });
  context = await launch({ webgpu: false });
  page = await open(context, server.url);
  // Without WebGPU the page loads the model on the CPU engine; the replays below need no engine.
  await page.waitForFunction(() => ['ready', 'error'].includes(document.body.dataset.state), null, { timeout: 120_000 });
});

after(async () => {
  await context?.close();
  await server?.close();
});

test('without WebGPU a trace file replays: its chips, its settings on the knobs, the inspector', async () => {
  await page.setInputFiles('#trace-file', TRACE_FILE);
  await page.waitForFunction(() => document.body.dataset.replay === 'true');
  assert.deepEqual(await chips(), [' Paris', '.', '↵\n']);
  assert.match(await page.textContent('#trace-status'), /Replaying a recorded run of SmolLM2-135M-Instruct · llama · Q4_1 · 98 MB · 49,152 tokens \(3 steps\) for “The capital of France is”/);
  assert.equal(await page.inputValue('#knob-temperature-number'), '0', 'the run was greedy');
  assert.equal(await page.textContent('[data-stat="finish reason"]'), 'length');
  await page.click('#tokens .token >> nth=0');
  const first = await page.$eval('#chart .candidate[data-rank="1"]', (g) => ({ id: Number(g.dataset.id), p: Number(g.dataset.p) }));
  assert.equal(first.id, 7042, '" Paris"');
  // Its probability at T = 1 is the step's own, exp(logit - log-sum-exp), up to the rest of the
  // vocabulary's logit held as an f32 (a relative 1e-7 of the rest's mass).
  const step = trace.steps[0];
  assert.ok(Math.abs(first.p - Math.exp(step.candidates.logits[0] - step.logSumExp)) < 1e-8, `${first.p}`);
  assert.match(await page.textContent('#whatif'), /The chosen token had p = 1\.0000 with the run's settings/);
  await page.screenshot({ path: path.join(OUTPUT, 'trace-replay.png'), fullPage: true });
});

test('the sliders re-run the sampler on the replayed step', async () => {
  const before = await chartSnapshot();
  await page.fill('#knob-temperature', '1.5');
  const hot = await chartSnapshot();
  assert.notEqual(hot, before, 'the temperature changed the chart');
  await page.fill('#knob-topP', '0.5');
  assert.notEqual(await chartSnapshot(), hot, 'top-p changed the chart');
  assert.ok(await page.$('#chart line.top-p'), 'the top-p cut line is drawn');
  assert.match(await page.textContent('#whatif'), /What if: .* with these it would have p = /);
  assert.match(await page.textContent('#whatif'), /the rest of the vocabulary is estimated/, 'a trace has only the top candidates');
  await page.screenshot({ path: path.join(OUTPUT, 'trace-what-if.png'), fullPage: true });
});

test('a damaged trace is refused naming what is wrong, and the replay shown stays', async () => {
  const shown = await chips();
  const damaged = structuredClone(trace);
  damaged.steps[1].candidates.ids[4] = 60_000;
  await page.setInputFiles('#trace-file', { name: 'damaged.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(damaged)) });
  await page.waitForSelector('#trace-error', { state: 'visible' });
  assert.equal(await page.textContent('#trace-error'),
    'The file damaged.json is not a trace this page can replay: '
    + 'steps[1].candidates.ids[4]: 60000 is outside the vocabulary (ids 0..49152)');
  assert.deepEqual(await chips(), shown, 'nothing half-loaded');
  await page.screenshot({ path: path.join(OUTPUT, 'trace-bad-file.png'), fullPage: true });

  await page.setInputFiles('#trace-file', { name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('shopping list') });
  await page.waitForFunction(() => /notes\.txt/.test(document.querySelector('#trace-error').textContent));
  assert.match(await page.textContent('#trace-error'), /The file notes\.txt is not a trace this page can replay: not JSON/);
  assert.deepEqual(await chips(), shown);
});

test('a trace in the link replays when the page opens', async () => {
  const linked = await open(context, `${server.url}?trace=${encodeURIComponent('/trace.json')}`);
  try {
    await linked.waitForFunction(() => document.body.dataset.replay === 'true', null, { timeout: 30_000 })
      .catch(async (error) => assert.fail(`${error.message}; the page says: ${await linked.textContent('#trace-error')}`));
    assert.equal(await linked.$$eval('#tokens .token', (nodes) => nodes.length), 3);
    assert.match(linked.url(), /[?&]trace=%2Ftrace\.json/, 'the link keeps naming the trace');
  } finally {
    await linked.close();
  }
});
