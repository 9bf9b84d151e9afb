// Qwen3.5 in headless Chromium: its Gated DeltaNet layers run on the CPU engine (which `auto`
// picks here), threaded, and on WebGPU (SwiftShader) in the fused kernels. The tiny Qwen3.5 (the
// real 248,320-token vocabulary) reproduces its float64 reference on both; the file with
// Qwen3.5-0.8B's shapes runs in the playground end to end: a generation, the memory line (KV rows per token, and the recurrent
// state's fixed size), the logit lens saying which layers keep a state. Screenshots go to
// test-output/.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { startServer, REPO, QWEN35_NAME, BLANK_PAGE } from './server.mjs';
import { launch, open } from './browser.mjs';
import { FIXTURES, assertScoreMatchesReference, lastLogits } from './reference.mjs';

const OUTPUT = path.join(REPO, 'test-output');
const tiny = JSON.parse(readFileSync(path.join(FIXTURES, 'tiny/qwen35.json'), 'utf8'));
const extra = { ...BLANK_PAGE, '/test-models/qwen35.gguf': readFileSync(path.join(FIXTURES, 'tiny/qwen35.gguf')) };

let server;
let context;

before(async () => {
  mkdirSync(OUTPUT, { recursive: true });
  server = await startServer({ extra });
  context = await launch();
});

after(async () => {
  await context?.close();
  await server?.close();
});

test('the tiny Qwen3.5 on the CPU engine and on WebGPU: every logit, the top 20, the greedy tokens and the scored prompt equal the reference', async () => {
  const page = await open(context, `${server.url}blank.html`);
  for (const backend of ['auto', 'webgpu']) {
    const runs = await page.evaluate(async ({ cases, backend }) => {
      const { Nucleus } = await import('/nucleus.js');
      const lm = await Nucleus.load({ model: '/test-models/qwen35.gguf', backend, cache: false });
      const out = { info: lm.info, cases: {} };
      for (const [name, c] of Object.entries(cases)) {
        const gen = lm.generate({ prompt: c.text, maxTokens: c.greedy.length, temperature: 0, topLogprobs: 20,
          returnLogits: true, ignoreEos: true });
        const steps = [];
        for await (const step of gen) steps.push(step);
        out.cases[name] = { ids: steps.map((s) => s.id), top: steps[0].top.map((t) => t.id), row: [...steps[0].logits],
          score: await lm.score(c.text, { topK: 20 }), attention: await lm.attention({ prompt: c.text }),
          state: await lm.attention({ prompt: c.text, layer: 1 }) };
      }
      lm.dispose();
      return out;
    }, { cases: tiny.logit_cases, backend });
    // `auto` takes the CPU engine where WebGPU is SwiftShader, a CPU emulation.
    assert.equal(runs.info.backend.kind, backend === 'auto' ? 'cpu' : 'webgpu');
    assert.equal(runs.info.architecture, 'qwen35');
    // Six Gated DeltaNet layers of 6 heads: 16 × 16 matrices and 3 convolution inputs of 160 channels.
    assert.equal(runs.info.stateBytes, 6 * 4 * (6 * 16 * 16 + 3 * 160));
    for (const [name, caseData] of Object.entries(tiny.logit_cases)) {
      const run = runs.cases[name];
      const reference = lastLogits(caseData);
      let worst = 0;
      for (let i = 0; i < reference.length; i++) worst = Math.max(worst, Math.abs(run.row[i] - reference[i]));
      assert.ok(worst < 1e-3, `${backend}, ${name}: the largest logit difference is ${worst}`);
      // The top 20 in order (neighbours closer than 1e-3 may swap).
      caseData.top20.forEach((expected, rank) => {
        if (run.top[rank] !== expected.id) {
          assert.ok(Math.abs(reference[run.top[rank]] - expected.logit) < 1e-3, `${backend}, ${name}: rank ${rank + 1} is ${run.top[rank]}`);
        }
      });
      assert.deepEqual(run.ids, caseData.greedy, `${backend}, ${name}: the greedy tokens`);
      // Scored, the prompt ends on the same distribution; on WebGPU only the records come back.
      assertScoreMatchesReference(run.score, caseData, `${backend}, ${name}, scored`);
      const recordBytes = caseData.ids.length * (16 + 8 * 20);
      assert.equal(run.score.bytesRead, backend === 'webgpu' ? recordBytes : 0, `${backend}, ${name}: bytes read back`);
      // Its last layer attends: every row sums to 1. Its first keeps a state: nothing to show.
      assert.equal(run.attention.layers[run.attention.layer - 1], 'kv-rows');
      for (const row of run.attention.rows) assert.ok(Math.abs(row.weights.reduce((a, b) => a + b, 0) - 1) < 1e-5);
      assert.deepEqual([run.state.layers[0], run.state.rows], ['state', []]);
      console.log(`  tiny Qwen3.5 on ${runs.info.backend.kind}, "${name}" (${caseData.ids.length} tokens): max |Δlogit| ${worst.toExponential(2)}`);
    }
  }
  await page.close();
});

test('the file with Qwen3.5-0.8B\'s shapes in the playground: a generation, the memory line, the lens', async () => {
  const page = await open(context, `${server.url}?model=${encodeURIComponent(`${server.url}models/${QWEN35_NAME}`)}`);
  await page.waitForFunction(() => document.body.dataset.state === 'ready'
    && !document.getElementById('model-picker').dataset.loading, null, { timeout: 600_000 });
  assert.match(await page.textContent('#status'), /^qwen35-0\.8b-shape · qwen35 · Q4_K_M · 527 MB · 248,320 tokens, loaded in .*, on the CPU\./);
  assert.equal(await page.textContent('[data-stat="memory per token"]'), '24.0 KiB of KV rows');
  assert.equal(await page.textContent('[data-stat="recurrent state"]'), '19.3 MiB, a fixed size (no KV rows in those layers)');

  await page.check('input[name="mode"][value="raw"]');
  await page.click('[data-preset="greedy"]');
  await page.fill('#prompt', 'The recurrent layers of this model keep a state of fixed size, whatever the context:');
  await page.fill('#max-tokens', '4');
  await page.click('#generate');
  await page.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: 600_000 });
  assert.equal(await page.evaluate(() => window.playground.steps.length), 4);
  assert.match(await page.textContent('#timeline-summary'), /The recurrent layers’ state stayed 20\.2 MB \(a fixed size, whatever the context\)\./);

  await page.click('#tokens .token >> nth=0');
  await page.click('#lens-panel summary');
  await page.click('#lens-run');
  await page.waitForSelector('#lens table', { timeout: 600_000 });
  const rows = await page.$$eval('#lens tbody tr', (trs) => trs.map((tr) => [tr.dataset.layer, tr.dataset.memory, tr.cells[0].textContent]));
  assert.equal(rows.length, 24, 'one row per block');
  // Three Gated DeltaNet layers, then an attention layer, six times.
  rows.forEach(([layer, memory, label]) => {
    const recurrent = Number(layer) % 4 !== 0;
    assert.equal(memory, recurrent ? 'state' : 'kv-rows', `layer ${layer}`);
    assert.equal(label, recurrent ? `${layer} · state` : layer);
  });
  // The step's context but its last token came from the state kept before that token.
  assert.match(await page.textContent('#lens-summary'),
    /The lens ran 1 token; the KV cache held the other 16; 18 of 24 layers keep a fixed-size state, not KV rows;/);
  await page.screenshot({ path: path.join(OUTPUT, 'qwen35-playground-lens.png'), fullPage: true });
  await page.close();
});
