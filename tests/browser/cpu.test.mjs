// The CPU engine in a real browser: headless Chromium, whose only WebGPU adapter (SwiftShader) is
// a CPU emulation, so the default `Nucleus.load()` picks the CPU engine, on every core where the
// page is cross-origin isolated (the threaded wasm module) and on one thread where it is not. It
// reproduces the reference (every logit within 1e-3, top-20 order, greedy tokens) for both
// models, samples the same tokens as the GPU path for a seed, and runs without WebGPU at all.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { startServer, MEMORY_PER_FILE_BYTE, MODEL_NAME, MODEL_PATH, GEMMA_NAME, QWEN35_NAME, BLANK_PAGE } from './server.mjs';
import { keptThreads, launch, open, watchEngineWorkers } from './browser.mjs';
import { FIXTURES, assertScoreMatchesReference, lastLogits } from './reference.mjs';

const smollm = JSON.parse(readFileSync(path.join(FIXTURES, 'smollm2-135m-instruct-q4_1.json'), 'utf8'));
const gemma = JSON.parse(readFileSync(path.join(FIXTURES, 'gemma-3-270m-q4_k_m.json'), 'utf8'));
const modelBytes = readFileSync(MODEL_PATH).length;

let server;
let context;
let page;

/** Loads a model in the page as `window.lm` (ending the one before); its `info`. */
const loadInPage = (options = {}) => page.evaluate(async (given) => {
  const { Nucleus } = await import('/nucleus.js');
  window.lm?.dispose();
  window.lm = await Nucleus.load(given);
  return window.lm.info;
}, options);

/** Greedy steps of a prompt on the page's model: ids, the first step's top 20 and logits row, the timing. */
const greedyRun = (prompt, maxTokens) => page.evaluate(async ([text, count]) => {
  const gen = window.lm.generate({ prompt: text, maxTokens: count, temperature: 0, topLogprobs: 20, returnLogits: true });
  const steps = [];
  for await (const step of gen) steps.push(step);
  const result = await gen.result;
  return { ids: steps.map((s) => s.id), top: steps[0].top, row: [...steps[0].logits], timing: result.timing };
}, [prompt, maxTokens]);

/** Every logit within 1e-3 of the reference row, and its top 20 in order (neighbours closer than 1e-3 may swap). */
function assertMatchesReference(run, caseData, expectedGreedy, label) {
  const reference = lastLogits(caseData);
  assert.equal(run.row.length, reference.length, `${label}: the row's length`);
  let worst = 0;
  for (let i = 0; i < reference.length; i++) worst = Math.max(worst, Math.abs(run.row[i] - reference[i]));
  assert.ok(worst < 1e-3, `${label}: the largest logit difference is ${worst}`);
  caseData.top20.forEach((expected, rank) => {
    const got = run.top[rank];
    if (got.id !== expected.id) {
      assert.ok(Math.abs(reference[got.id] - expected.logit) < 1e-3, `${label}: rank ${rank + 1} is ${got.id}, not ${expected.id}`);
    }
  });
  assert.deepEqual(run.ids, expectedGreedy, `${label}: greedy tokens`);
  console.log(`  ${label}: max |Δlogit| ${worst.toExponential(2)}, ttft ${run.timing.ttftMs.toFixed(0)} ms, `
    + `decode ${run.timing.decodeTokensPerS.toFixed(1)} tok/s`);
}

before(async () => {
  server = await startServer({ extra: BLANK_PAGE });
  context = await launch();
  page = await open(context, `${server.url}blank.html`);
});

after(async () => {
  await context?.close();
  await server?.close();
});

test('Nucleus.load() picks the CPU engine where the only WebGPU adapter emulates a GPU, on every core', async () => {
  // Every console message of the page and its workers (the thread pool's helpers among them).
  const warnings = [];
  context.on('console', (message) => {
    if (['warning', 'error'].includes(message.type())) warnings.push(message.text());
  });
  const info = await loadInPage();
  const cores = await page.evaluate(() => navigator.hardwareConcurrency);
  console.log(`  ${info.device}: ${info.backend.reason}; weights ${(info.weightBytes / 2 ** 20).toFixed(1)} MiB, loaded in ${info.loadMs.toFixed(0)} ms`);
  assert.equal(info.backend.kind, 'cpu');
  assert.match(info.backend.reason, /^the only WebGPU adapter \(swiftshader\) emulates a GPU on the CPU/);
  // Every helper started and was timed; the threads kept are those that measurably help.
  const { threads, threadTimings } = info.backend;
  assert.ok(threadTimings[cores] > 0, JSON.stringify(threadTimings));
  assert.equal(threads, keptThreads(threadTimings), JSON.stringify(threadTimings));
  assert.equal(info.path, 'cpu');
  // Chromium validates relaxed SIMD: the threaded build with fused multiply-adds.
  assert.equal(info.device, `the CPU (${threads} thread${threads === 1 ? '' : 's'}, WebAssembly relaxed SIMD)`);
  // Its byte products were timed both ways, and the faster kept.
  const { byteDot, byteDotTimings } = info.backend;
  assert.deepEqual(Object.keys(byteDotTimings).sort(), ['accumulating', 'paired'], JSON.stringify(info.backend));
  assert.ok(Object.values(byteDotTimings).every((ms) => ms > 0), JSON.stringify(byteDotTimings));
  assert.equal(byteDotTimings[byteDot], Math.min(...Object.values(byteDotTimings)), JSON.stringify(info.backend));
  // The adapter it did not take is still described, so the page can say what a GPU would give.
  assert.match(info.adapter.vendor + info.adapter.architecture + info.adapter.description, /swiftshader/i);
  // The weights stay in their GGUF blocks: no larger than the file.
  assert.ok(info.weightBytes <= modelBytes * 1.1, `${info.weightBytes} bytes of weights for a file of ${modelBytes}`);
  // And they are read where they lie in the downloaded file: wasm memory holds the file once, not
  // the file and a copy of its weights (2.1 times the file before).
  const { wasmMemoryBytes } = await page.evaluate(() => window.lm.diagnostics());
  console.log(`  wasm memory ${(wasmMemoryBytes / 2 ** 20).toFixed(1)} MiB for a file of ${(modelBytes / 2 ** 20).toFixed(1)} MiB`);
  assert.ok(wasmMemoryBytes <= MEMORY_PER_FILE_BYTE * modelBytes, `${wasmMemoryBytes} bytes of wasm memory for a file of ${modelBytes}`);
  // The threaded start warns of nothing (wasm-bindgen's deprecated initialisation, among others).
  await page.evaluate(() => window.lm.tokenize('x'));
  assert.deepEqual(warnings, []);
});

for (const [name, caseData] of Object.entries(smollm.logit_cases)) {
  test(`SmolLM2 on the CPU engine: the "${name}" prompt's logits, top 20 and greedy tokens equal the reference`, async () => {
    const run = await greedyRun(caseData.text, caseData.greedy32.length);
    assertMatchesReference(run, caseData, caseData.greedy32, `SmolLM2 "${name}"`);
  });
}

test('a seeded sampled generation gives the same tokens on the CPU engine as on WebGPU', async () => {
  const options = { prompt: 'Once upon a time', maxTokens: 8, temperature: 0.8, topP: 0.95, seed: 42 };
  const { cpu, webgpu } = await page.evaluate(async (o) => {
    const { Nucleus } = await import('/nucleus.js');
    const ids = async (lm) => {
      const out = [];
      for await (const step of lm.generate(o)) out.push(step.id);
      return out;
    };
    const gpu = await Nucleus.load({ backend: 'webgpu' });
    try {
      return { cpu: await ids(window.lm), webgpu: await ids(gpu), path: gpu.info.path };
    } finally {
      gpu.dispose();
    }
  }, options);
  assert.equal(cpu.length, 8);
  assert.deepEqual(cpu, webgpu);
});

test('Gemma 3 on the CPU engine: logits, top 20 and greedy tokens equal the reference', async () => {
  const info = await loadInPage({ model: `/models/${GEMMA_NAME}` });
  assert.equal(info.backend.kind, 'cpu');
  assert.equal(info.architecture, 'gemma3');
  // The 713-token prompt is left to the native suite (tests/model_reference.rs).
  for (const name of ['capital', 'story']) {
    const caseData = gemma.logit_cases[name];
    const run = await greedyRun(caseData.text, caseData.greedy.length);
    assertMatchesReference(run, caseData, caseData.greedy, `Gemma 3 "${name}"`);
  }
});

test('a model that cannot fit is refused from its first bytes, naming the context that would; unasked, the CPU engine runs the most that fits', async () => {
  // Qwen3.5-0.8B's shape: its 262,144 trained positions of KV cache are 6 GiB, more than a
  // WebAssembly memory holds (4 GiB).
  const url = `/models/${QWEN35_NAME}`;
  const refused = await page.evaluate(async (model) => {
    const { Nucleus } = await import('/nucleus.js');
    window.lm?.dispose();
    window.lm = null;
    let downloaded = 0;
    const onProgress = (p) => { if (p.phase === 'download') downloaded = Math.max(downloaded, p.loaded); };
    try {
      await Nucleus.load({ model, contextLength: 262_144, onProgress, cache: false });
      return { code: null };
    } catch (error) {
      return { code: error.code, message: error.message, downloaded };
    }
  }, url);
  assert.equal(refused.code, 'out-of-memory', refused.message);
  assert.match(refused.message, /^the CPU engine needs .* more than this browser's WebAssembly memory \(4096\.0 MiB\): contextLength (\d+) or less would fit$/);
  const fits = Number(/contextLength (\d+) or less/.exec(refused.message)[1]);
  // Refused from the header: a few MiB of the 527 MB file were downloaded, not the rest.
  assert.ok(refused.downloaded < 64 * 2 ** 20, `${refused.downloaded} bytes downloaded before the refusal`);
  console.log(`  refused after ${(refused.downloaded / 2 ** 20).toFixed(1)} MiB: ${refused.message}`);
  // Without a contextLength, the load runs the most of the trained context that fits, and its
  // progress says what it will take from the header on, while the rest downloads.
  const { info, first, deviceMemory } = await page.evaluate(async (model) => {
    const { Nucleus } = await import('/nucleus.js');
    let first = null;
    const onProgress = ({ phase, loaded, total, plan }) => { first ??= plan && { phase, loaded, total, plan }; };
    window.lm = await Nucleus.load({ model, onProgress, cache: false });
    return { info: window.lm.info, first, deviceMemory: navigator.deviceMemory };
  }, url);
  assert.equal(first?.phase, 'download', JSON.stringify(first));
  assert.ok(first.loaded < first.total / 4, `the plan came after ${first.loaded} of ${first.total} bytes`);
  assert.deepEqual(first.plan, info.plan);
  assert.equal(info.contextLength, fits);
  assert.deepEqual([info.plan.contextLength, info.plan.trainedContextLength, info.plan.path], [fits, 262_144, 'cpu']);
  assert.ok(info.plan.hostBytes < 2 ** 32 && info.plan.hostBytes > info.fileBytes, JSON.stringify(info.plan));
  // Beside it, what the device offers: the WebAssembly ceiling, the browser's word on the memory,
  // the adapter's largest buffer and binding.
  assert.deepEqual(info.plan.offers, { wasmMemoryBytes: 2 ** 32, deviceMemoryBytes: deviceMemory * 2 ** 30,
    gpuMaxBufferBytes: info.adapter.maxBufferSize, gpuMaxBindingBytes: info.adapter.maxStorageBufferBindingSize });
  assert.ok(info.adapter.maxBufferSize >= 2 ** 28, JSON.stringify(info.adapter));
  // A copy kept in the browser is planned the same way: it loads with the same context.
  await loadInPage({ model: url });
  const stored = await loadInPage({ model: url });
  assert.equal(stored.fromCache, true);
  assert.deepEqual([stored.contextLength, stored.plan?.contextLength], [fits, fits]);
});

test('scoring a text on the CPU engine: SmolLM2 and Gemma 3 rate it as the reference does, nothing read back; their attention', async () => {
  for (const [model, reference] of [[GEMMA_NAME, gemma], [null, smollm]]) {
    // Gemma may be loaded by the test before; this one stands alone.
    if (model === null || (await page.evaluate(() => window.lm?.info.architecture)) !== 'gemma3') {
      await loadInPage(model === null ? {} : { model: `/models/${model}` });
    }
    const caseData = reference.logit_cases.capital;
    const report = await page.evaluate((text) => window.lm.score(text, { topK: 20 }), caseData.text);
    const worst = assertScoreMatchesReference(report, caseData, `${model ?? 'SmolLM2'} on the CPU engine`);
    assert.equal(report.bytesRead, 0);
    // The first layer's attention: Gemma's is local (its window said), every row sums to 1.
    const attention = await page.evaluate((text) => window.lm.attention({ prompt: text, layer: 1 }), caseData.text);
    assert.equal(attention.window, model === null ? undefined : 512);
    assert.equal(attention.rows.length, caseData.ids.length);
    for (const row of attention.rows) assert.ok(Math.abs(row.weights.reduce((a, b) => a + b, 0) - 1) < 1e-5);
    console.log(`  ${model ?? 'SmolLM2'}: ${report.tokens.length} tokens scored in ${report.elapsedMs.toFixed(0)} ms, `
      + `perplexity ${report.perplexity.toFixed(2)}, last position off by ${worst.toExponential(2)}`);
  }
});

test('OpenAI\'s legacy completions: echo with logprobs rates the prompt as lm.score does, then the continuation', async () => {
  const prompt = smollm.logit_cases.capital.text;
  const { completion, zero, score, errors } = await page.evaluate(async (text) => {
    const lm = window.lm;
    const refused = (request) => lm.completions.create(request).then(() => null, (e) => [e.code, e.option]);
    return {
      completion: await lm.completions.create({ prompt: text, max_tokens: 2, temperature: 0, echo: true, logprobs: 3 }),
      zero: await lm.completions.create({ prompt: text, max_tokens: 0, echo: true, logprobs: 1 }),
      score: await lm.score(text, { topK: 3 }),
      errors: [await refused({ prompt: text, logprobs: 21 }), await refused({ prompt: text, stream: true }),
        await refused({ prompt: text, top_pp: 1 })],
    };
  }, prompt);
  const choice = completion.choices[0];
  assert.equal(choice.text, `${prompt} Paris.`);
  const { tokens, token_logprobs: logprobs, top_logprobs: tops, text_offset: offsets } = choice.logprobs;
  const n = score.tokens.length;
  assert.deepEqual(tokens, [...score.tokens.map((t) => t.text), ' Paris', '.']);
  assert.deepEqual([logprobs[0], tops[0]], [null, null], 'nothing predicts the first token');
  score.tokens.slice(1).forEach((t, i) => {
    assert.equal(logprobs[i + 1], t.logprob);
    assert.deepEqual(Object.keys(tops[i + 1]), t.top.map((c) => c.text));
  });
  assert.deepEqual(offsets.slice(n), [prompt.length, prompt.length + ' Paris'.length]);
  assert.equal(Object.keys(tops[n]).length, 3);
  assert.deepEqual(completion.usage, { prompt_tokens: n, completion_tokens: 2, total_tokens: n + 2 });
  // max_tokens 0: the prompt rated, nothing generated.
  assert.equal(zero.choices[0].text, prompt);
  assert.equal(zero.choices[0].logprobs.tokens.length, n);
  assert.deepEqual(zero.usage, { prompt_tokens: n, completion_tokens: 0, total_tokens: n });
  assert.deepEqual(errors, [['bad-options', 'logprobs'], ['bad-options', 'stream'], ['bad-options', 'top_pp']]);
});

test('an unknown backend is bad-options, named', async () => {
  const error = await page.evaluate(async () => {
    const { Nucleus } = await import('/nucleus.js');
    try {
      await Nucleus.load({ backend: 'gpu' });
      return null;
    } catch (e) {
      return { code: e.code, option: e.option, message: e.message };
    }
  });
  assert.deepEqual(error, { code: 'bad-options', option: 'backend',
    message: "backend must be one of 'auto', 'webgpu', 'cpu', got \"gpu\"" });
});

test('a load aborted through its signal rejects with aborted, ends its worker and helpers and keeps nothing; so does a failed load', async () => {
  const workers = watchEngineWorkers(page);
  const outcome = await page.evaluate(async ({ url, bad }) => {
    const { Nucleus } = await import('/nucleus.js');
    const failure = (e) => ({ code: e.code, message: e.message, cause: e.cause?.message ?? null });
    const early = new AbortController();
    early.abort(new Error('not wanted'));
    const refused = await Nucleus.load({ model: url, signal: early.signal }).then(() => null, failure);
    const controller = new AbortController();
    const phases = [];
    const onProgress = ({ phase, loaded, total }) => {
      phases.push({ phase, loaded, total });
      if (phase === 'download' && loaded > 0) controller.abort(new Error('the person cancelled'));
    };
    const aborted = await Nucleus.load({ model: url, signal: controller.signal, onProgress }).then(() => null, failure);
    const failed = await Nucleus.load({ model: bad }).then(() => null, failure);
    const stored = (await Nucleus.storedModels()).models.map((m) => m.url);
    const notSignal = await Nucleus.load({ model: url, signal: 'stop' }).then(() => null, failure);
    return { refused, aborted, failed, notSignal, phases, stored };
  }, { url: `${server.url}models/${MODEL_NAME}?aborted`, bad: `${server.url}blank.html` });
  assert.deepEqual(outcome.refused, { code: 'aborted', message: 'the load was aborted (its signal)', cause: 'not wanted' });
  assert.deepEqual(outcome.aborted, { code: 'aborted', message: 'the load was aborted (its signal)', cause: 'the person cancelled' });
  const download = outcome.phases.find((p) => p.phase === 'download');
  assert.ok(download && download.loaded < download.total, `aborted part-way: ${JSON.stringify(outcome.phases)}`);
  assert.equal(outcome.failed?.code, 'bad-model', JSON.stringify(outcome.failed));
  assert.equal(outcome.notSignal?.code, 'bad-options');
  assert.ok(!outcome.stored.some((url) => url.endsWith('?aborted')), `nothing kept of the aborted download: ${outcome.stored}`);
  // The aborted and the failed loads' workers (and the aborted one's helpers) are gone.
  assert.ok(workers.started() > 0, `the loads ran in workers of their own`);
  await workers.settled('after the aborted and failed loads');
  const info = await loadInPage({ model: `${server.url}models/${MODEL_NAME}` });
  assert.equal(info.backend.kind, 'cpu', 'and the next load works');
});

test('a page that is not cross-origin isolated runs the CPU engine on one thread, and says why', async () => {
  const plainServer = await startServer({ extra: BLANK_PAGE, isolated: false });
  try {
    const plainPage = await open(context, `${plainServer.url}blank.html`);
    const capital = smollm.logit_cases.capital;
    const { info, ids } = await plainPage.evaluate(async (prompt) => {
      const { Nucleus } = await import('/nucleus.js');
      const lm = await Nucleus.load({ cache: false });
      const ids = [];
      for await (const step of lm.generate({ prompt, maxTokens: 4, temperature: 0 })) ids.push(step.id);
      lm.dispose();
      return { info: lm.info, ids };
    }, capital.text);
    assert.equal(info.backend.kind, 'cpu');
    assert.equal(info.backend.threads, 1);
    assert.match(info.backend.reason, /\(one thread: the page is not cross-origin isolated \(COOP and COEP headers\), which threads need\)$/);
    assert.equal(info.device, 'the CPU (1 thread, WebAssembly SIMD)');
    // One way of summing byte products in plain SIMD: nothing timed.
    assert.equal(info.backend.byteDot, undefined);
    assert.deepEqual(ids, capital.greedy32.slice(0, 4));
    await plainPage.close();
  } finally {
    await plainServer.close();
  }
});

test('without WebGPU, Nucleus.load() runs on the CPU engine; backend: \'webgpu\' fails with no-webgpu', async () => {
  const plain = await launch({ webgpu: false });
  try {
    const noGpuPage = await open(plain, `${server.url}blank.html`);
    const capital = smollm.logit_cases.capital;
    const outcome = await noGpuPage.evaluate(async (prompt) => {
      const { Nucleus } = await import('/nucleus.js');
      let error = null;
      try {
        await Nucleus.load({ backend: 'webgpu' });
      } catch (e) {
        error = { code: e.code, message: e.message };
      }
      const lm = await Nucleus.load();
      const ids = [];
      for await (const step of lm.generate({ prompt, maxTokens: 4, temperature: 0 })) ids.push(step.id);
      lm.dispose();
      return { error, info: lm.info, ids };
    }, capital.text);
    assert.equal(outcome.error?.code, 'no-webgpu', outcome.error?.message);
    assert.equal(outcome.info.backend.kind, 'cpu');
    assert.match(outcome.info.backend.reason, /WebGPU/);
    assert.equal(outcome.info.adapter, null);
    assert.deepEqual(outcome.ids, capital.greedy32.slice(0, 4));
    // The sampler's own module needs no engine: its what-if works on a logits row there.
    const capitalRow = readFileSync(path.join(FIXTURES, capital.last_logits_file));
    const explanation = await noGpuPage.evaluate(async (bytes) => {
      const { default: init, whatIf } = await import('/pkg/nucleus_sampler_web.js');
      await init();
      const logits = new Float32Array(new Uint8Array(bytes).buffer);
      return JSON.parse(whatIf(logits, JSON.stringify({ temperature: 1.5, topK: 5 }), undefined, 5));
    }, [...capitalRow]);
    assert.equal(explanation.chosen.id, 7042, '" Paris"');
    assert.equal(explanation.keptCount, 5);
    const kept = explanation.candidates.reduce((sum, c) => sum + c.finalProb, 0);
    assert.ok(Math.abs(kept - 1) < 1e-12, `the five kept candidates' final probabilities sum to ${kept}`);
  } finally {
    await plain.close();
  }
});
