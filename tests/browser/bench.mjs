// The browser path's benchmark, side by side with `nucleus bench` natively, in one run:
//   node tests/browser/bench.mjs [--prompt-tokens 32] [--gen-tokens 8] [--runs 2]
// (`./build.sh bench` builds what it needs first.) It prints load time, time to first token,
// prefill and decode tokens per second and bytes read back per token for headless Chromium
// (WebGPU on SwiftShader here), then runs the native CLI's bench on the same settings.

import { spawnSync } from 'node:child_process';
import path from 'node:path';
import os from 'node:os';
import { parseArgs } from 'node:util';
import { startServer, MODEL_PATH, BLANK_PAGE } from './server.mjs';
import { launch, open } from './browser.mjs';

const { values } = parseArgs({ options: {
  'prompt-tokens': { type: 'string', default: '32' },
  'gen-tokens': { type: 'string', default: '8' },
  runs: { type: 'string', default: '2' },
  'native-backend': { type: 'string', default: 'wgpu' },
} });
const promptTokens = Number(values['prompt-tokens']);
const genTokens = Number(values['gen-tokens']);
const runs = Number(values.runs);
const TARGET_DIR = process.env.CARGO_TARGET_DIR ?? path.join(os.homedir(), '.cache/nucleus/target');

const server = await startServer({ extra: BLANK_PAGE });
const context = await launch();
let browser;
try {
  const page = await open(context, `${server.url}blank.html`);
  browser = await page.evaluate(async ({ promptTokens, genTokens, runs }) => {
    const { Nucleus } = await import('/nucleus.js');
    const started = performance.now();
    const lm = await Nucleus.load();
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
  }, { promptTokens, genTokens, runs });
} finally {
  await context.close();
  await server.close();
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const of = (f) => median(browser.results.map(f));
const { adapter } = browser.info;
console.log(`browser: headless Chromium, WebGPU adapter ${adapter.vendor}/${adapter.architecture} (fallback ${adapter.isFallback}), `
  + `${browser.results[0].usage.promptTokens} prompt tokens, ${genTokens} generated, median of ${runs} runs after a warm-up`);
console.log(`${'metric'.padEnd(30)} ${'browser'.padStart(12)}`);
for (const [name, value] of [
  ['load (ms)', browser.loadMs],
  ['time to first token (ms)', of((r) => r.timing.ttftMs)],
  ['prefill (tok/s)', of((r) => r.timing.prefillTokensPerS)],
  ['decode (tok/s)', of((r) => r.timing.decodeTokensPerS)],
  ['decode (ms/token)', of((r) => r.timing.decodeMs / Math.max(1, r.usage.completionTokens - 1))],
  ['read back (bytes/token)', of((r) => r.transfer.bytesPerToken)],
  ['dispatches (/decode token)', of((r) => r.transfer.gpuQueue.perDecodeToken?.dispatches ?? NaN)],
  ['GPU submits (first step)', of((r) => r.transfer.gpuQueue.firstStep.submits)],
  ['GPU submits (/decode token)', of((r) => r.transfer.gpuQueue.perDecodeToken?.submits ?? NaN)],
  ['buffer writes (/decode token)', of((r) => r.transfer.gpuQueue.perDecodeToken?.bufferWrites ?? NaN)],
]) {
  console.log(`${name.padEnd(30)} ${value.toFixed(2).padStart(12)}`);
}

console.log(`\nnative, same settings: nucleus bench --backend ${values['native-backend']}`);
const native = spawnSync(path.join(TARGET_DIR, 'release/nucleus'), ['bench', '--model', MODEL_PATH,
  '--backend', values['native-backend'], '--prompt-tokens', String(promptTokens), '--gen-tokens', String(genTokens),
  '--runs', String(runs)], { stdio: 'inherit' });
process.exit(native.status ?? 1);
