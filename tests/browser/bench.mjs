// The browser path's benchmark, side by side with `nucleus bench` natively, in one run, for both
// models (SmolLM2-135M and Gemma 3 270M):
//   node tests/browser/bench.mjs [--prompt-tokens 32] [--gen-tokens 8] [--runs 2] [--models default,gemma3]
// (`./build.sh bench` builds what it needs first.) It prints load time, time to first token,
// prefill and decode tokens per second, bytes read back per token and the GPU calls per decode
// token for headless Chromium (WebGPU on SwiftShader here), one column per model, then runs the
// native CLI's bench on the same settings and models.

import { spawnSync } from 'node:child_process';
import path from 'node:path';
import os from 'node:os';
import { parseArgs } from 'node:util';
import { startServer, MODEL_PATH, MODEL_NAME, GEMMA_PATH, GEMMA_NAME, BLANK_PAGE } from './server.mjs';
import { launch, open } from './browser.mjs';

const MODELS = {
  default: { name: 'SmolLM2-135M', url: `/models/${MODEL_NAME}`, file: MODEL_PATH },
  gemma3: { name: 'Gemma 3 270M', url: `/models/${GEMMA_NAME}`, file: GEMMA_PATH },
};

const { values } = parseArgs({ options: {
  'prompt-tokens': { type: 'string', default: '32' },
  'gen-tokens': { type: 'string', default: '8' },
  runs: { type: 'string', default: '2' },
  'native-backend': { type: 'string', default: 'wgpu' },
  models: { type: 'string', default: Object.keys(MODELS).join(',') },
} });
const promptTokens = Number(values['prompt-tokens']);
const genTokens = Number(values['gen-tokens']);
const runs = Number(values.runs);
const chosen = values.models.split(',').map((id) => {
  if (!MODELS[id]) throw new Error(`--models: ${id} is not one of ${Object.keys(MODELS).join(', ')}`);
  return MODELS[id];
});
const TARGET_DIR = process.env.CARGO_TARGET_DIR ?? path.join(os.homedir(), '.cache/nucleus/target');

/** Loads `model` in a fresh page and measures `runs` greedy generations after a warm-up. */
async function measure(context, server, model) {
  const page = await open(context, `${server.url}blank.html`);
  try {
    return await page.evaluate(async ({ url, promptTokens, genTokens, runs }) => {
      const { Nucleus } = await import('/nucleus.js');
      const started = performance.now();
      const lm = await Nucleus.load({ model: url, cache: false });
      const loadMs = performance.now() - started;
      // A prompt of promptTokens tokens (give or take the run number in front): filler text grown a
      // word at a time until the tokenizer counts enough.
      const filler = 'The quick brown fox jumps over the lazy dog while the river runs past the old mill, ';
      const words = filler.repeat(Math.ceil(promptTokens / 8) + 2).split(' ');
      let prompt = '';
      const results = [];
      for (let i = 0; i < words.length; i++) {
        prompt = words.slice(0, i + 1).join(' ');
        if ((await lm.tokenize(prompt)).length >= promptTokens) break;
      }
      for (let run = 0; run <= runs; run++) {
        // A different first word each run, so the KV cache does not hold the prompt already.
        const text = `${run}${prompt}`;
        const result = await lm.generate({ prompt: text, maxTokens: genTokens, temperature: 0, ignoreEos: true,
          topLogprobs: 0 }).result;
        if (run > 0) results.push(result);
      }
      lm.dispose();
      return { loadMs, info: lm.info, results };
    }, { url: model.url, promptTokens, genTokens, runs });
  } finally {
    await page.close();
  }
}

const server = await startServer({ extra: BLANK_PAGE });
const context = await launch();
const measured = [];
try {
  for (const model of chosen) measured.push({ model, ...await measure(context, server, model) });
} finally {
  await context.close();
  await server.close();
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const { adapter } = measured[0].info;
console.log(`browser: headless Chromium, WebGPU adapter ${adapter.vendor}/${adapter.architecture} (fallback ${adapter.isFallback}), `
  + `${measured[0].results[0].usage.promptTokens} prompt tokens, ${genTokens} generated, median of ${runs} runs after a warm-up`);
const width = Math.max(14, ...chosen.map((model) => model.name.length));
console.log(`${'metric'.padEnd(30)} ${measured.map(({ model }) => model.name.padStart(width)).join(' ')}`);
for (const [name, value] of [
  ['load (ms)', (m) => m.loadMs],
  ['time to first token (ms)', (m) => median(m.results.map((r) => r.timing.ttftMs))],
  ['prefill (tok/s)', (m) => median(m.results.map((r) => r.timing.prefillTokensPerS))],
  ['decode (tok/s)', (m) => median(m.results.map((r) => r.timing.decodeTokensPerS))],
  ['decode (ms/token)', (m) => median(m.results.map((r) => r.timing.decodeMs / Math.max(1, r.usage.completionTokens - 1)))],
  ['read back (bytes/token)', (m) => median(m.results.map((r) => r.transfer.bytesPerToken))],
  ['dispatches (/decode token)', (m) => median(m.results.map((r) => r.transfer.gpuQueue.perDecodeToken?.dispatches ?? NaN))],
  ['GPU submits (first step)', (m) => median(m.results.map((r) => r.transfer.gpuQueue.firstStep.submits))],
  ['GPU submits (/decode token)', (m) => median(m.results.map((r) => r.transfer.gpuQueue.perDecodeToken?.submits ?? NaN))],
  ['buffer writes (/decode token)', (m) => median(m.results.map((r) => r.transfer.gpuQueue.perDecodeToken?.bufferWrites ?? NaN))],
  ['weights on the GPU (MiB)', (m) => m.info.weightBytes / 2 ** 20],
]) {
  console.log(`${name.padEnd(30)} ${measured.map((m) => value(m).toFixed(2).padStart(width)).join(' ')}`);
}

console.log(`\nnative, same settings: nucleus bench --backend ${values['native-backend']}`);
const native = spawnSync(path.join(TARGET_DIR, 'release/nucleus'), ['bench',
  ...chosen.flatMap((model) => ['--model', model.file]),
  '--backend', values['native-backend'], '--prompt-tokens', String(promptTokens), '--gen-tokens', String(genTokens),
  '--runs', String(runs)], { stdio: 'inherit' });
process.exit(native.status ?? 1);
