// Where a decode step's time goes in the browser: Chromium's sampling profiler on every Nucleus
// worker (the engine's and its helper threads), over the DevTools protocol (puppeteer-core; Playwright
// cannot reach a worker's session), while the CPU engine generates. Prints each worker's functions
// by self time and writes the profiles (`.cpuprofile`, which DevTools' Performance panel opens).
// A measurement, not a test.
//
// The shipped modules have lost their function names to wasm-opt, so the tool binds cargo's
// modules (`./build.sh web` builds them) again without it, into a copy of www/ of its own.
// Usage: node tests/browser/profile.mjs [--model default|gemma3|qwen35|gemma1b] [--threads auto|1]
//        [--tokens 64] [--temperature 0] [--top-p 1] [--out DIR]
// `--threads 1` serves the page without cross-origin isolation: the one-thread module.
import { execFileSync } from 'node:child_process';
import { cp, mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import puppeteer from 'puppeteer-core';
import { CHROMIUM } from './browser.mjs';
import { BLANK_PAGE, GEMMA1B_NAME, GEMMA_NAME, MODEL_NAME, QWEN35_NAME, REPO, startServer } from './server.mjs';

const MODELS = { default: MODEL_NAME, gemma3: GEMMA_NAME, qwen35: QWEN35_NAME, gemma1b: GEMMA1B_NAME };
const { values } = parseArgs({ options: {
  model: { type: 'string', default: 'gemma3' },
  threads: { type: 'string', default: 'auto' },
  tokens: { type: 'string', default: '64' },
  temperature: { type: 'string', default: '0' },
  'top-p': { type: 'string', default: '1' },
  out: { type: 'string', default: path.join(os.tmpdir(), 'nucleus-profiles') },
} });
const model = MODELS[values.model];
if (!model) throw new Error(`--model is one of ${Object.keys(MODELS).join(', ')}`);
if (!['auto', '1'].includes(values.threads)) throw new Error('--threads is auto or 1');

// cargo's modules, as build.sh's build_wasm_module leaves them, by the name the page loads.
const target = process.env.CARGO_TARGET_DIR ?? path.join(os.homedir(), '.cache/nucleus/target');
const MODULES = {
  nucleus_web: path.join(target, 'wasm32-unknown-unknown/wasm-release/nucleus_web.wasm'),
  nucleus_web_threads: path.join(target, 'wasm-threads/wasm32-unknown-unknown/wasm-release/nucleus_web.wasm'),
  nucleus_web_threads_relaxed: path.join(target, 'wasm-threads-relaxed/wasm32-unknown-unknown/wasm-release/nucleus_web.wasm'),
};
const www = await mkdtemp(path.join(os.tmpdir(), 'nucleus-profile-www-'));
try {
  await cp(path.join(REPO, 'www'), www, { recursive: true });
  for (const [name, built] of Object.entries(MODULES)) {
    await stat(built).catch(() => { throw new Error(`${built} is missing: run ./build.sh web first`); });
    execFileSync('wasm-bindgen', ['--target', 'web', '--no-typescript', '--out-dir', path.join(www, 'pkg'), '--out-name', name, built]);
  }
  const server = await startServer({ root: www, extra: BLANK_PAGE, isolated: values.threads !== '1' });
  const browser = await puppeteer.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
  try {
    const page = await browser.newPage();
    const workers = [];
    page.on('workercreated', (worker) => workers.push(worker));
    await page.goto(`${server.url}blank.html`);
    const options = { maxTokens: Number(values.tokens), temperature: Number(values.temperature), topP: Number(values['top-p']),
      seed: 1, ignoreEos: true, topLogprobs: 0 };
    const info = await page.evaluate(async (url) => {
      const { Nucleus } = await import('/nucleus.js');
      window.lm = await Nucleus.load({ model: url, cache: false, backend: 'cpu' });
      await window.lm.generate({ prompt: 'A warm-up', maxTokens: 8, temperature: 0, ignoreEos: true }).result;
      return { device: window.lm.info.device, reason: window.lm.info.backend?.reason };
    }, `/models/${model}`);
    const sessions = workers.filter((worker) => /nucleus-(worker|thread)\.js/.test(worker.url())).map((worker) => worker.client);
    for (const session of sessions) {
      await session.send('Profiler.enable');
      await session.send('Profiler.setSamplingInterval', { interval: 200 });
      await session.send('Profiler.start');
    }
    const timing = await page.evaluate(async (options) => {
      const result = await window.lm.generate({ prompt: 'Once upon a time', ...options }).result;
      return result.timing;
    }, options);
    console.log(`${model}, ${info.device}; ${info.reason ?? ''}`);
    console.log(`decode ${timing.decodeTokensPerS.toFixed(1)} tok/s (${options.maxTokens} tokens, temperature ${options.temperature}, top-p ${options.topP}), under the profiler`);
    await mkdir(values.out, { recursive: true });
    for (const [index, session] of sessions.entries()) {
      const { profile } = await session.send('Profiler.stop');
      const file = path.join(values.out, `${values.model}-${index === 0 ? 'engine' : `helper-${index}`}.cpuprofile`);
      await writeFile(file, JSON.stringify(profile));
      printSelfTimes(index === 0 ? 'the engine\'s worker' : `helper thread ${index}`, profile, file);
    }
    await page.evaluate(() => window.lm.dispose());
  } finally {
    await browser.close();
    await server.close();
  }
} finally {
  await rm(www, { recursive: true, force: true });
}

/** A profile's functions by self time, the 25 longest, names without crate hashes. */
function printSelfTimes(title, profile, file) {
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const self = new Map();
  let total = 0;
  profile.samples.forEach((id, i) => {
    const frame = nodes.get(id).callFrame;
    const name = (frame.functionName || `(${frame.url.split('/').pop() || 'program'})`).replace(/\[[0-9a-f]{16}\]|::h[0-9a-f]{16}$/g, '');
    self.set(name, (self.get(name) ?? 0) + profile.timeDeltas[i]);
    total += profile.timeDeltas[i];
  });
  console.log(`\n${title}: ${(total / 1000).toFixed(0)} ms sampled (${file})`);
  for (const [name, us] of [...self].sort((a, b) => b[1] - a[1]).slice(0, 25)) {
    console.log(`${(100 * us / total).toFixed(1).padStart(5)} %  ${(us / 1000).toFixed(1).padStart(8)} ms  ${name.slice(0, 140)}`);
  }
}
