// The models people bring, on the playground in headless Chromium (WebGPU on SwiftShader): the
// picker, a GGUF file from this computer (chosen and dropped on the page), a GGUF at a URL, the
// models the browser keeps, files Nucleus cannot run (each refused by name while the model before
// stays), and Gemma 3 270M end to end: the reference's greedy tokens, the chart, the logit lens,
// a regex-constrained run. Screenshots go to test-output/.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { startServer, REPO } from './server.mjs';
import { launch, open, watchEngineWorkers } from './browser.mjs';

const OUTPUT = path.join(REPO, 'test-output');
const TINY = path.join(REPO, 'tests/fixtures/tiny');
const tinyReference = (name) => JSON.parse(readFileSync(path.join(TINY, `${name}.json`), 'utf8'));
const gemma = JSON.parse(readFileSync(path.join(REPO, 'tests/fixtures/gemma-3-270m-q4_k_m.json'), 'utf8'));
/** Gemma 3 under `\d{3}-\d{4}` at T = 1, seed 7, as the CLI gives it natively on lavapipe. */
const GEMMA_PHONE = { prompt: 'My phone number is', pattern: String.raw`\d{3}-\d{4}`, seed: 7,
  native: [236770, 236770, 236770, 236772, 236828, 236810, 236810, 236832] };

const qwen2Bytes = readFileSync(path.join(TINY, 'qwen2.gguf'));
const extra = {
  '/test-models/qwen2.gguf': qwen2Bytes,
  // A download that stalls after its first 64 KiB until the page stops it.
  '/test-models/stalled.gguf': (_request, response, headers) => {
    response.writeHead(200, { ...headers, 'content-type': 'application/octet-stream', 'content-length': qwen2Bytes.length });
    response.write(qwen2Bytes.subarray(0, 65_536));
  },
};

let server;
let context;
let page;

const ready = () => page.waitForFunction(() => document.body.dataset.state === 'ready'
  && !document.getElementById('model-picker').dataset.loading, null, { timeout: 300_000 });
const status = () => page.textContent('#status');
const modelError = () => page.evaluate(() => (document.getElementById('model-error').hidden ? null
  : document.getElementById('model-error').textContent));

/** Drops a file with `name` and `bytes` on the page, as a person dragging it from their desktop would. */
async function drop(name, bytes) {
  const transfer = await page.evaluateHandle(([fileName, data]) => {
    const dt = new DataTransfer();
    dt.items.add(new File([new Uint8Array(data)], fileName, { type: 'application/octet-stream' }));
    return dt;
  }, [name, [...bytes]]);
  for (const type of ['dragenter', 'dragover', 'drop']) {
    await page.dispatchEvent('main', type, { dataTransfer: transfer });
  }
}

/** Waits until a model load ended: loaded (the status names `title`) or refused (the picker says why). */
const settled = () => page.waitForFunction(() => !document.getElementById('model-picker').dataset.loading, null,
  { timeout: 300_000 });

/** Greedy ids of a raw prompt on the page's model. */
async function greedy(prompt, maxTokens) {
  await page.check('input[name="mode"][value="raw"]');
  await page.click('[data-preset="greedy"]');
  await page.selectOption('#response-format', '');
  await page.fill('#prompt', prompt);
  await page.fill('#max-tokens', String(maxTokens));
  await page.click('#generate');
  await ready();
  return page.evaluate(() => window.playground.steps.map((s) => s.id));
}

before(async () => {
  mkdirSync(OUTPUT, { recursive: true });
  server = await startServer({ extra });
  context = await launch();
  // On WebGPU (SwiftShader), which `auto` would not pick here: the models' fused kernels in a
  // browser. (cpu.test.mjs runs Gemma 3 on the CPU engine.)
  page = await open(context, `${server.url}?backend=webgpu`);
  await ready();
});

after(async () => {
  await context?.close();
  await server?.close();
});

test('the picker offers the default, Gemma 3, Qwen3.5\'s shape, a file and a URL, and the title names the model', async () => {
  const options = await page.$$eval('#model-choice option', (os) => os.map((o) => [o.value, o.textContent]));
  assert.deepEqual(options.map(([value]) => value), ['default', 'gemma3', 'qwen35', 'file', 'url']);
  assert.match(await status(), /^SmolLM2-135M-Instruct · llama · Q4_1 · 98 MB · 49,152 tokens, loaded in/);
  assert.equal(await page.isEnabled('input[name="mode"][value="chat"]'), true, 'SmolLM2 has a chat template');
});

test('a GGUF file from this computer loads (chosen, then dropped on the page) and runs its reference', async () => {
  // Chosen with the file input.
  await page.selectOption('#model-choice', 'file');
  await page.setInputFiles('#model-file', path.join(TINY, 'qwen3.gguf'));
  await settled();
  assert.equal(await modelError(), null);
  assert.match(await status(), /^qwen3 · qwen3 · Q8_0 · 0 MB · 400 tokens, loaded in/);
  const qwen3 = tinyReference('qwen3').logit_cases.capital;
  assert.deepEqual(await greedy(qwen3.text, qwen3.greedy.length), qwen3.greedy, 'Qwen3\'s reference greedy tokens');
  // Dropped anywhere on the page: Llama 3 (BOS added by default, rope_freqs).
  await drop('llama3.gguf', readFileSync(path.join(TINY, 'llama3.gguf')));
  await settled();
  assert.match(await status(), /^llama3 · llama · Q8_0 · 0 MB · 400 tokens, loaded in/);
  const llama3 = tinyReference('llama3').logit_cases.count;
  assert.deepEqual(await greedy(llama3.text, 4), llama3.greedy.slice(0, 4), 'Llama 3\'s reference greedy tokens');
  // The file is kept under its digest: the choice survives a reload.
  const choice = await page.evaluate(() => JSON.parse(localStorage.getItem('nucleus-playground-model')));
  assert.match(choice.url, /\/nucleus-local-models\/[0-9a-f]{64}\/llama3\.gguf$/);
});

test('files Nucleus cannot run are refused by name, and the model before stays', async () => {
  const qwen2 = readFileSync(path.join(TINY, 'qwen2.gguf'));
  const png = Buffer.concat([Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex'), Buffer.alloc(64)]);
  const cases = [
    ['picture.png', png, /^picture\.png could not load \(bad-model\): picture\.png is not a GGUF model file: it begins "\uFFFDPNG/],
    ['half.gguf', qwen2.subarray(0, qwen2.length - 1000), /\(bad-model\): .*blk\.1/],
    ['unknown-architecture.gguf', readFileSync(path.join(TINY, 'unknown-architecture.gguf')),
      /\(unsupported-model\): unsupported architecture 'mamba' \(supported: llama, qwen2, qwen3, gemma3, qwen35\)/],
    ['unknown-tokenizer.gguf', readFileSync(path.join(TINY, 'unknown-tokenizer.gguf')), /\(unsupported-model\): unsupported tokenizer model 'bert'/],
    ['unsupported-type.gguf', readFileSync(path.join(TINY, 'unsupported-type.gguf')),
      /\(unsupported-model\): tensor 'blk\.0\.ffn_gate\.weight' has type IQ4_NL, which the fused kernels cannot read/],
  ];
  const before = await status();
  for (const [name, bytes, expected] of cases) {
    await drop(name, bytes);
    await settled();
    const error = await modelError();
    assert.match(error ?? '', expected, name);
    assert.match(error, /llama3 · llama · Q8_0 · 0 MB · 400 tokens is still loaded\.$/, name);
    assert.equal(await status(), before, `${name}: the loaded model is untouched`);
    if (name === 'picture.png') await page.screenshot({ path: path.join(OUTPUT, 'models-refused-png.png'), fullPage: true });
  }
  assert.deepEqual(await page.$eval('#model-choice', (s) => [s.value, s.selectedOptions[0].textContent]),
    ['loaded', 'llama3.gguf (from this computer) (loaded)'], 'the picker shows the model still loaded');
  const llama3 = tinyReference('llama3').logit_cases.count;
  assert.deepEqual(await greedy(llama3.text, 2), llama3.greedy.slice(0, 2), 'and it still generates');
});

test('"Stop loading" ends a load part-way: its worker gone, nothing kept, and the model before still runs', async () => {
  const workers = watchEngineWorkers(page);
  const before = { status: await status() };
  await page.selectOption('#model-choice', 'url');
  await page.fill('#model-url', `${server.url}test-models/stalled.gguf`);
  await page.click('#model-url-load');
  await page.waitForFunction(() => /^Downloading stalled\.gguf/.test(document.getElementById('load-label').textContent));
  assert.ok(workers.started() > 0, 'the load runs in a worker of its own');
  await page.click('#load-stop');
  await settled();
  assert.match(await modelError(), /^Loading stalled\.gguf stopped\. llama3 · llama · Q8_0 · 0 MB · 400 tokens is still loaded\.$/);
  assert.equal(await status(), before.status, 'the loaded model is untouched');
  await workers.settled('after the stop');
  const stored = await page.evaluate(async () => (await (await import('/nucleus.js')).Nucleus.storedModels()).models.map((m) => m.url));
  assert.ok(!stored.some((url) => url.endsWith('stalled.gguf')), `nothing kept of the stopped download: ${stored}`);
  const llama3 = tinyReference('llama3').logit_cases.count;
  assert.deepEqual(await greedy(llama3.text, 2), llama3.greedy.slice(0, 2), 'and it still generates');
});

test('a GGUF at a URL loads, is kept in the link, and the kept models are listed with their sizes', async () => {
  const url = `${server.url}test-models/qwen2.gguf`;
  await page.selectOption('#model-choice', 'url');
  await page.fill('#model-url', url);
  await page.click('#model-url-load');
  await settled();
  assert.match(await status(), /^qwen2 · qwen2 · Q8_0 · 0 MB · 400 tokens, loaded in/);
  assert.equal(new URL(page.url()).searchParams.get('model'), url, 'a URL model is in the link');
  const qwen2 = tinyReference('qwen2').logit_cases.chat;
  await page.check('input[name="mode"][value="raw"]');
  assert.deepEqual(await greedy(qwen2.text, 3), qwen2.greedy.slice(0, 3), 'Qwen2\'s reference greedy tokens (its chat prompt, raw)');
  await page.click('#stored-models summary');
  await page.waitForFunction(() => document.querySelectorAll('#stored-list tbody tr').length >= 4);
  const rows = await page.$$eval('#stored-list tbody tr', (trs) => trs.map((tr) => [...tr.cells].map((td) => td.textContent)));
  const names = rows.map(([name]) => name);
  assert.ok(names.some((n) => n.startsWith('SmolLM2-135M-Instruct.Q4_1.gguf')), names.join(' | '));
  assert.ok(names.some((n) => n.startsWith('qwen3.gguf (a file from this computer)')), names.join(' | '));
  assert.ok(names.some((n) => n.startsWith('qwen2.gguf — loaded') || n === 'qwen2.gguf — loaded'), names.join(' | '));
  assert.equal(rows.find(([n]) => n.startsWith('SmolLM2'))[1], '98 MB');
  assert.match(await page.textContent('#stored-quota'), /^This site keeps [\d,.]+ MB of the [\d,.]+ MB this browser lets it keep;/);
  await page.screenshot({ path: path.join(OUTPUT, 'models-picker.png'), fullPage: true });
  // Removing one leaves the others (and the loaded model runs on).
  const count = rows.length;
  await page.click('#stored-list button[aria-label="Remove qwen3.gguf from this browser"]');
  await page.waitForFunction((n) => document.querySelectorAll('#stored-list tbody tr').length === n - 1, count);
  // The link reloads the URL model.
  await page.reload();
  await ready();
  assert.match(await status(), /^qwen2 · qwen2 · Q8_0 · 0 MB · 400 tokens, loaded in .* from the browser cache, on the GPU\./);
});

test('Gemma 3 270M: a base model, the reference greedy tokens, the chart, the logit lens, a regex', async () => {
  await page.selectOption('#model-choice', 'gemma3');
  await settled();
  assert.equal(await modelError(), null);
  assert.match(await status(), /^gemma-3-270m · gemma3 · Q4_K_M · 253 MB · 262,144 tokens, loaded in/);
  assert.equal(await page.isEnabled('input[name="mode"][value="chat"]'), false, 'no chat template');
  assert.match(await page.textContent('#base-model'), /^gemma-3-270m has no chat template \(a base model\): it continues the text you give it\.$/);
  assert.match(await page.textContent('#exact-hint'), /\(1,024 KB\)/);
  // Streamed to the GPU piece by piece: wasm memory never held its 170 MiB embedding (65.8 MiB
  // measured: the module, the header and the tokenizer of 262,144 tokens; 321.6 MiB when each
  // tensor was staged whole).
  const { wasmMemoryBytes } = await page.evaluate(() => window.playground.lm.diagnostics());
  assert.ok(wasmMemoryBytes < 128 * 2 ** 20, `${wasmMemoryBytes} bytes of wasm memory`);
  // 18 layers keep keys and values of one head of 256 (2 KiB a token each); 15 of them are
  // local, and on the fused path their ring holds the 512-position window's 511 rows and 128 more.
  assert.equal(await page.textContent('[data-stat="memory per token"]'),
    '36.0 KiB of KV rows; 30.0 KiB of them in the sliding-window layers, which keep a ring of 639 positions: past it, 6.0 KiB');

  const capital = gemma.logit_cases.capital;
  assert.deepEqual(await greedy(capital.text, 6), capital.greedy.slice(0, 6), 'the reference greedy tokens');
  await page.click('#tokens .token >> nth=0');
  const bars = await page.$$eval('#chart .candidate', (gs) => gs.map((g) => Number(g.dataset.id)));
  assert.deepEqual(bars.slice(0, 5), capital.top20.slice(0, 5).map((t) => t.id), 'the chart\'s candidates are the reference\'s');
  await page.screenshot({ path: path.join(OUTPUT, 'models-gemma-chart.png'), fullPage: true });

  await page.click('#lens-panel summary');
  await page.click('#lens-run');
  await page.waitForSelector('#lens table', { timeout: 300_000 });
  assert.equal(await page.$$eval('#lens tbody tr', (trs) => trs.length), 18, 'one row per block');
  assert.match(await page.textContent('#lens-summary'), /^“␣the” is the top prediction .* \d+\.\d KB came back from the GPU\.$/);
  await page.screenshot({ path: path.join(OUTPUT, 'models-gemma-lens.png'), fullPage: true });

  await page.click('[data-preset="greedy"]');
  await page.fill('#knob-temperature-number', '1');
  await page.fill('#prompt', GEMMA_PHONE.prompt);
  await page.fill('#max-tokens', '12');
  await page.fill('#seed', String(GEMMA_PHONE.seed));
  await page.selectOption('#response-format', 'regex');
  await page.fill('#format-text', GEMMA_PHONE.pattern);
  await page.click('#generate');
  await ready();
  const text = await page.evaluate(() => window.playground.shownRun.result.text);
  assert.match(text, /^\d{3}-\d{4}$/);
  assert.equal(await page.textContent('[data-stat="finish reason"]'), 'stop');
  assert.deepEqual(await page.evaluate(() => window.playground.steps.map((s) => s.id)), GEMMA_PHONE.native,
    'the same tokens as natively');
});
