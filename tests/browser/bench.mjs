// The benchmark of every engine that runs the model on this machine, in one run, on the same
// model, prompt and settings, one table per model (SmolLM2-135M, Gemma 3 270M, and the files with
// Qwen3.5-0.8B's and Gemma 3 1B's shapes and random weights):
//   node tests/browser/bench.mjs [--prompt-tokens 32] [--gen-tokens 32] [--runs 3]
//     [--models default,gemma3,qwen35,gemma1b (and gemma4b, asked only)] [--browser auto,cpu-1 (and firefox,webkit)]
//     [--peer-threads 1,2] [--native cpu,cpu-1,burn-cpu]
// (`./build.sh bench` builds what it needs and fetches the peer first.) Rows:
// - headless Chromium, Nucleus: `auto` (what Nucleus.load() picks: here the CPU engine on every
//   core, SwiftShader being a CPU emulation), `cpu-1` (the CPU engine on one thread: a page that
//   is not cross-origin isolated), `webgpu` (the GPU path on whatever adapter there is);
// - Firefox and WebKit (browser.mjs's engines, the cross-engine suite's), Nucleus, `firefox` and
//   `webkit`: what Nucleus.load() picks in a cross-origin isolated page there (the CPU engine
//   here: threaded in Firefox, on one thread in WebKitGTK, which has no SharedArrayBuffer);
// - headless Chromium, wllama (llama.cpp compiled to wasm, the peer; WLLAMA_DIR, which
//   ./build.sh bench fills), each thread count of --peer-threads, cross-origin isolated;
// - native, `nucleus bench`: `cpu` (the CPU engine, every core), `cpu-1` (one thread), `burn-cpu`
//   (Burn's CPU backend), `wgpu` (the GPU path);
// - native llama.cpp: through llama-cpp-python when LLAMA_CPP_PYTHON names an interpreter that has
//   it (./build.sh bench makes one, tests/tools/llama_cpp_bench.py), or its llama-bench binary when
//   LLAMA_BENCH names one; each thread count of --peer-threads.
// Greedy, end-of-generation ignored, the median of --runs runs after a warm-up. Time to first
// token is the prompt's prefill and the first token; decode is the tokens after it.

import { spawnSync } from 'node:child_process';
import { createServer } from 'node:http';
import { createReadStream, existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import os from 'node:os';
import { parseArgs } from 'node:util';
import { startServer, REPO, MODEL_PATH, MODEL_NAME, GEMMA_PATH, GEMMA_NAME, QWEN35_PATH, QWEN35_NAME, GEMMA1B_PATH,
  GEMMA1B_NAME, GEMMA4B_PATH, GEMMA4B_NAME, BLANK_PAGE, ISOLATION_HEADERS } from './server.mjs';
import { ENGINES, launch, open } from './browser.mjs';

const MODELS = {
  default: { name: 'SmolLM2-135M', url: `/models/${MODEL_NAME}`, file: MODEL_PATH },
  gemma3: { name: 'Gemma 3 270M', url: `/models/${GEMMA_NAME}`, file: GEMMA_PATH },
  // Burn's operations do not compute its recurrent layers: no Burn rows.
  qwen35: { name: 'Qwen3.5 0.8B shape (random weights)', url: `/models/${QWEN35_NAME}`, file: QWEN35_PATH, noBurn: true },
  // Burn's f32 weights of a 1B model would be 4 GB: no Burn rows.
  gemma1b: { name: 'Gemma 3 1B shape (random weights)', url: `/models/${GEMMA1B_NAME}`, file: GEMMA1B_PATH, noBurn: true },
  // 2.49 GB: more than half of a WebAssembly memory; run when asked for.
  gemma4b: { name: 'Gemma 3 4B shape (random weights)', url: `/models/${GEMMA4B_NAME}`, file: GEMMA4B_PATH, noBurn: true,
    asked: true },
};
/** Rows that run in Burn's operations, which a `noBurn` model skips. */
const BURN_ROWS = new Set(['burn-cpu']);
const BROWSER_ROWS = ['auto', 'cpu-1', 'webgpu', 'firefox', 'webkit'];
/** The browser rows run in another engine than Chromium: the key of its engine in `ENGINES`. */
const OTHER_ENGINES = new Set(['firefox', 'webkit']);
const NATIVE_ROWS = {
  cpu: { label: 'Nucleus CPU engine', args: ['--backend', 'cpu'], env: {} },
  'cpu-1': { label: 'Nucleus CPU engine', args: ['--backend', 'cpu'], env: { NUCLEUS_THREADS: '1' } },
  'burn-cpu': { label: 'Burn CPU backend (flex)', args: ['--backend', 'burn-cpu'], env: {} },
  wgpu: { label: 'Nucleus on wgpu', args: ['--backend', 'wgpu', '--path', 'fused'], env: {} },
};

const { values } = parseArgs({ options: {
  'prompt-tokens': { type: 'string', default: '32' },
  'gen-tokens': { type: 'string', default: '32' },
  runs: { type: 'string', default: '3' },
  models: { type: 'string', default: Object.keys(MODELS).filter((id) => !MODELS[id].asked).join(',') },
  browser: { type: 'string', default: 'auto,cpu-1' },
  'peer-threads': { type: 'string', default: '1,2' },
  native: { type: 'string', default: 'cpu,cpu-1,burn-cpu' },
} });
const promptTokens = Number(values['prompt-tokens']);
const genTokens = Number(values['gen-tokens']);
const runs = Number(values.runs);
const list = (text) => text.split(',').filter(Boolean);
const pick = (name, given, known) => list(given).map((id) => {
  if (!known.includes(id)) throw new Error(`--${name}: ${id} is not one of ${known.join(', ')}`);
  return id;
});
const chosen = pick('models', values.models, Object.keys(MODELS)).map((id) => MODELS[id]);
const browserRows = pick('browser', values.browser, BROWSER_ROWS);
const nativeRows = pick('native', values.native, Object.keys(NATIVE_ROWS));
const peerThreads = list(values['peer-threads']).map(Number);
const TARGET_DIR = process.env.CARGO_TARGET_DIR ?? path.join(os.homedir(), '.cache/nucleus/target');
const WLLAMA_DIR = process.env.WLLAMA_DIR;
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/**
 * Words of filler text until the tokenizer (`count`, async) counts `n` tokens: the same prompt
 * for every engine of one model (each counts with the model's own tokenizer).
 */
async function promptOf(count, n) {
  const filler = 'The quick brown fox jumps over the lazy dog while the river runs past the old mill, ';
  const words = filler.repeat(Math.ceil(n / 8) + 2).split(' ');
  for (let i = 0; i < words.length; i++) {
    const prompt = words.slice(0, i + 1).join(' ');
    if (await count(prompt) >= n) return prompt;
  }
  throw new Error('the filler text is too short');
}

/**
 * `work`'s result and the largest resident memory any Chromium renderer process reached while it
 * ran (sampled every 20 ms from /proc: the page and its worker run in one renderer), in bytes;
 * undefined where there is no /proc.
 */
async function rendererPeak(work) {
  if (!existsSync('/proc/self/status')) return { result: await work, peakBytes: undefined };
  let peakBytes = 0;
  const sample = () => {
    for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
      try {
        if (!readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('--type=renderer')) continue;
        const kib = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
        peakBytes = Math.max(peakBytes, Number(kib ?? 0) * 1024);
      } catch {
        // the process ended while it was read
      }
    }
  };
  const timer = setInterval(sample, 20);
  try {
    return { result: await work, peakBytes };
  } finally {
    clearInterval(timer);
  }
}

/**
 * Nucleus in a fresh Chromium page of `server`: load with `backend` (the renderer's peak memory
 * measured while it loads), then `runs` greedy runs after a warm-up.
 */
async function nucleusRow(context, server, model, backend, prompt) {
  const page = await open(context, `${server.url}blank.html`);
  try {
    return await measureNucleus({ run: (fn, arg) => page.evaluate(fn, arg) }, model, backend, prompt, rendererPeak);
  } finally {
    await page.close();
  }
}

/**
 * `nucleusRow` in a page of another engine (`ENGINES[key]`, a fresh browser), Nucleus's own
 * choice of backend; no renderer's peak (that sampling knows Chromium's processes).
 */
async function otherEngineRow(key, server, model, prompt) {
  const browser = await ENGINES[key].launch();
  try {
    const page = await browser.open(`${server.url}blank.html`);
    try {
      return await measureNucleus(page, model, 'auto', prompt, async (work) => ({ result: await work }));
    } finally {
      await page.close();
    }
  } finally {
    await browser.close();
  }
}

/**
 * Nucleus in `page` (`run(fn, arg)`: `fn(arg)` there, awaited): load with `backend`, `sample`
 * watching the load, then `runs` greedy runs after a warm-up.
 */
async function measureNucleus(page, model, backend, prompt, sample) {
  const { result: loadMs, peakBytes } = await sample(page.run(async ({ url, backend }) => {
    const { Nucleus } = await import('/nucleus.js');
    const started = performance.now();
    window.lm = await Nucleus.load({ model: url, cache: false, backend });
    return performance.now() - started;
  }, { url: model.url, backend }));
  const measured = await page.run(async ({ prompt, genTokens, runs }) => {
    const { lm } = window;
    const results = [];
    for (let run = 0; run <= runs; run++) {
      // A different first word each run, so the KV cache does not hold the prompt already.
      const result = await lm.generate({ prompt: `${run}${prompt}`, maxTokens: genTokens, temperature: 0,
        ignoreEos: true, topLogprobs: 0 }).result;
      if (run > 0) results.push(result);
    }
    const { wasmMemoryBytes } = await lm.diagnostics();
    lm.dispose();
    return { info: lm.info, results, wasmMemoryBytes };
  }, { prompt, genTokens, runs });
  return { ...measured, loadMs, rendererPeakBytes: peakBytes };
}

/** The prompt's token count on Nucleus's tokenizer, in a page of `server`. */
async function nucleusPrompt(context, server, model) {
  const page = await open(context, `${server.url}blank.html`);
  try {
    await page.evaluate(async (url) => {
      const { Nucleus } = await import('/nucleus.js');
      window.lm = await Nucleus.load({ model: url, cache: false, backend: 'cpu' });
    }, model.url);
    return await promptOf((text) => page.evaluate(async (t) => (await window.lm.tokenize(t)).length, text), promptTokens);
  } finally {
    // Its engine ended before the next row's starts: a closing page's threads and memory
    // otherwise share the cores with it (a 0.8B model's two-thread row measured as one thread).
    await page.evaluate(() => window.lm?.dispose()).catch(() => {});
    await page.close();
  }
}

/** A server for wllama's page: its ES modules and wasm, and the model, cross-origin isolated. */
async function startPeerServer(modelFile) {
  const esm = path.join(WLLAMA_DIR, 'esm');
  const server = createServer((request, response) => {
    const { pathname } = new URL(request.url, 'http://x');
    let file = null;
    if (pathname === '/') {
      response.writeHead(200, { ...ISOLATION_HEADERS, 'content-type': 'text/html' });
      response.end('<!doctype html><title>wllama</title><link rel="icon" href="data:,">');
      return;
    }
    if (pathname === '/model.gguf') file = modelFile;
    else if (pathname.startsWith('/wllama/')) file = path.join(esm, path.normalize(pathname.slice('/wllama/'.length)));
    if (!file || !file.startsWith(esm) && file !== modelFile || !existsSync(file) || !statSync(file).isFile()) {
      response.writeHead(404, ISOLATION_HEADERS);
      response.end('not found');
      return;
    }
    const type = file.endsWith('.wasm') ? 'application/wasm' : file.endsWith('.js') ? 'text/javascript' : 'application/octet-stream';
    response.writeHead(200, { ...ISOLATION_HEADERS, 'content-type': type, 'content-length': statSync(file).size });
    createReadStream(file).pipe(response);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  // Chromium keeps its connections open: closed with the server, or close() waits on them.
  return { url: `http://127.0.0.1:${server.address().port}/`,
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); }) };
}

/** wllama with `threads` threads in a fresh page: load, then `runs` greedy runs after a warm-up. */
async function wllamaRow(context, server, threads, prompt) {
  const page = await open(context, server.url);
  try {
    return await page.evaluate(async ({ threads, prompt, genTokens, runs, context }) => {
      const { Wllama } = await import('/wllama/index.js');
      const blob = await (await fetch('/model.gguf')).blob();
      const wllama = new Wllama({ default: '/wllama/wasm/wllama.wasm' }, { suppressNativeLog: true });
      const started = performance.now();
      await wllama.loadModel([blob], { n_threads: threads, n_ctx: context, n_batch: context, n_gpu_layers: 0, n_parallel: 1 });
      const loadMs = performance.now() - started;
      const results = [];
      for (let run = 0; run <= runs; run++) {
        let first = null;
        let last = null;
        const t0 = performance.now();
        await wllama.createCompletion({ prompt: `${run}${prompt}`, max_tokens: genTokens, temperature: 0, top_k: 1,
          ignore_eos: true, cache_prompt: false, stream: true,
          onData: (chunk) => { first ??= performance.now() - t0; last = chunk; } });
        const { timings } = last;
        if (run > 0) {
          results.push({ ttftMs: first, prefillTokensPerS: timings.prompt_per_second, decodeTokensPerS: timings.predicted_per_second,
            promptTokens: timings.prompt_n });
        }
      }
      const info = { threads: wllama.getNumThreads(), multithread: wllama.isMultithread() };
      await wllama.exit();
      return { loadMs, info, results };
    }, { threads, prompt, genTokens, runs, context: Math.max(512, promptTokens + genTokens + 16) });
  } finally {
    await page.close();
  }
}

/** `nucleus bench` on `model` for one native row; its JSON summary. */
function nativeRow(model, row) {
  const { args, env } = NATIVE_ROWS[row];
  const run = spawnSync(path.join(TARGET_DIR, 'release/nucleus'), ['bench', '--model', model.file, ...args,
    '--prompt-tokens', String(promptTokens), '--gen-tokens', String(genTokens), '--runs', String(runs),
    '--speculative-lookup', '0', '--no-tail', '--long-context', '0', '--json'],
  { encoding: 'utf8', env: { ...process.env, ...env }, maxBuffer: 1 << 24 });
  if (run.status !== 0) throw new Error(`nucleus bench ${args.join(' ')} failed: ${run.stderr}`);
  return JSON.parse(run.stdout.trim().split('\n').at(-1));
}

/** llama.cpp through llama-cpp-python (LLAMA_CPP_PYTHON) on `model` with `threads` threads. */
function llamaCppPythonRow(model, threads) {
  const run = spawnSync(process.env.LLAMA_CPP_PYTHON, [path.join(REPO, 'tests/tools/llama_cpp_bench.py'), model.file,
    String(threads), String(promptTokens), String(genTokens), String(runs)], { encoding: 'utf8', maxBuffer: 1 << 24 });
  if (run.status !== 0) throw new Error(`llama_cpp_bench.py failed: ${run.stderr}`);
  return JSON.parse(run.stdout.trim().split('\n').at(-1));
}

/** llama.cpp's llama-bench (LLAMA_BENCH) on `model` with `threads` threads: prefill and decode tok/s. */
function llamaCppRow(model, threads) {
  const run = spawnSync(process.env.LLAMA_BENCH, ['-m', model.file, '-p', String(promptTokens), '-n', String(genTokens),
    '-t', String(threads), '-r', String(runs), '-o', 'json'], { encoding: 'utf8', maxBuffer: 1 << 24 });
  if (run.status !== 0) throw new Error(`llama-bench failed: ${run.stderr}`);
  const rows = JSON.parse(run.stdout);
  const speed = (test) => rows.find((r) => (test === 'prefill' ? r.n_prompt > 0 : r.n_gen > 0)).avg_ts;
  return { prefill: speed('prefill'), decode: speed('decode'), version: rows[0].build_commit };
}

const table = [];
/** Per model: the weights a decode step reads and what this machine reads a second (`nucleus bench`). */
const limits = new Map();
const row = (model, where, engine, threads, figures) => {
  table.push({ model: model.name, where, engine, threads, ...figures });
  // Each row as it is measured, so a run cut short keeps what it measured.
  console.error(`[bench] ${model.name} | ${where} | ${engine} | ${threads} | ${JSON.stringify(figures)}`);
};
const fromResults = (results) => ({
  ttftMs: median(results.map((r) => r.timing?.ttftMs ?? r.ttftMs)),
  prefill: median(results.map((r) => r.timing?.prefillTokensPerS ?? r.prefillTokensPerS)),
  decode: median(results.map((r) => r.timing?.decodeTokensPerS ?? r.decodeTokensPerS)),
});

const isolated = await startServer({ extra: BLANK_PAGE });
const plain = browserRows.includes('cpu-1') ? await startServer({ extra: BLANK_PAGE, isolated: false }) : null;
const context = await launch();
let browserFacts = '';
try {
  for (const model of chosen) {
    const prompt = await nucleusPrompt(context, isolated, model);
    for (const backend of browserRows.filter((r) => !(model.noBurn && BURN_ROWS.has(r)))) {
      const where = OTHER_ENGINES.has(backend) ? ENGINES[backend].name : 'Chromium';
      console.error(`[bench] ${model.name}: ${where}, Nucleus ${backend}`);
      const measured = OTHER_ENGINES.has(backend) ? await otherEngineRow(backend, isolated, model, prompt)
        : backend === 'cpu-1' ? await nucleusRow(context, plain, model, 'cpu', prompt)
          : await nucleusRow(context, isolated, model, backend, prompt);
      const { info } = measured;
      if (where === 'Chromium') {
        browserFacts ||= info.adapter ? `WebGPU adapter ${info.adapter.vendor}/${info.adapter.architecture}` : 'no WebGPU adapter';
      }
      const asked = backend === 'auto' || OTHER_ENGINES.has(backend) ? 'auto' : 'cpu';
      const engine = info.backend.kind === 'cpu' ? `Nucleus CPU engine (${asked})`
        : `Nucleus WebGPU (${info.adapter.vendor || info.adapter.architecture})`;
      row(model, where, engine, info.backend.threads, { loadMs: measured.loadMs, ...fromResults(measured.results),
        memoryMiB: measured.wasmMemoryBytes / 2 ** 20, rendererMiB: measured.rendererPeakBytes / 2 ** 20,
        promptTokens: measured.results[0].usage.promptTokens });
    }
    if (WLLAMA_DIR && peerThreads.length) {
      const version = JSON.parse(readFileSync(path.join(WLLAMA_DIR, 'package.json'), 'utf8')).version;
      const peer = await startPeerServer(model.file);
      try {
        for (const threads of peerThreads) {
          console.error(`[bench] ${model.name}: Chromium, wllama ${version}, ${threads} thread(s)`);
          const measured = await wllamaRow(context, peer, threads, prompt);
          row(model, 'Chromium', `wllama ${version}`, measured.info.threads, { loadMs: measured.loadMs,
            ...fromResults(measured.results), promptTokens: measured.results[0].promptTokens });
        }
      } finally {
        await peer.close();
      }
    } else if (peerThreads.length) {
      console.error('[bench] WLLAMA_DIR is not set: no wllama rows (./build.sh bench fetches it)');
    }
  }
} finally {
  await context.close();
  await isolated.close();
  await plain?.close();
}

for (const model of chosen) {
  for (const id of nativeRows.filter((r) => !(model.noBurn && BURN_ROWS.has(r)))) {
    console.error(`[bench] ${model.name}: native, nucleus bench ${NATIVE_ROWS[id].args.join(' ')} ${JSON.stringify(NATIVE_ROWS[id].env)}`);
    const summary = nativeRow(model, id);
    const report = summary.reports[0];
    if (summary.memoryBandwidth && !NATIVE_ROWS[id].env.NUCLEUS_THREADS) {
      limits.set(model.name, { bandwidth: summary.memoryBandwidth, bytes: report.readBytesPerToken });
    }
    const threads = Number(NATIVE_ROWS[id].env.NUCLEUS_THREADS ?? os.availableParallelism());
    row(model, 'native', NATIVE_ROWS[id].label, id === 'wgpu' ? 1 : threads, { loadMs: report.loadMs, ttftMs: report.ttftMs,
      prefill: report.prefillTokensPerS, decode: report.decodeTokensPerS, memoryMiB: summary.peakRssMiB, promptTokens });
  }
  if (process.env.LLAMA_CPP_PYTHON) {
    for (const threads of peerThreads) {
      console.error(`[bench] ${model.name}: native, llama.cpp (llama-cpp-python), ${threads} thread(s)`);
      const figures = llamaCppPythonRow(model, threads);
      row(model, 'native', `llama.cpp (${figures.version})`, threads, { loadMs: figures.loadMs, ttftMs: figures.ttftMs,
        prefill: figures.prefill, decode: figures.decode, memoryMiB: figures.peakRssMiB, promptTokens });
    }
  }
  if (process.env.LLAMA_BENCH) {
    for (const threads of peerThreads) {
      const figures = llamaCppRow(model, threads);
      row(model, 'native', `llama.cpp ${figures.version}`, threads, { prefill: figures.prefill, decode: figures.decode, promptTokens });
    }
  }
}

const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
console.log(`\n${os.availableParallelism()} cores (${cpu}); headless Chromium (${browserFacts}); ${promptTokens}-token prompt, `
  + `${genTokens} tokens generated greedily, median of ${runs} runs after a warm-up`);
console.log('memory: the wasm memory in the browser (Nucleus), the process\'s peak resident memory natively; '
  + 'renderer: the Chromium renderer\'s peak resident memory while Nucleus loads');
const cell = (value, digits = 1) => (value === undefined || Number.isNaN(value) ? '-' : value.toFixed(digits));
for (const model of chosen) {
  console.log(`\n${model.name}`);
  const file = statSync(model.file).size / 2 ** 20;
  console.log(`file: ${file.toFixed(1)} MiB`);
  console.log(`| where | engine | threads | load (ms) | time to first token (ms) | prefill (tok/s) | decode (tok/s) | memory (MiB) | renderer (MiB) |`);
  console.log('|---|---|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of table.filter((t) => t.model === model.name)) {
    console.log(`| ${r.where} | ${r.engine} | ${r.threads} | ${cell(r.loadMs, 0)} | ${cell(r.ttftMs, 0)} | ${cell(r.prefill)} | `
      + `${cell(r.decode)} | ${cell(r.memoryMiB, 0)} | ${cell(r.rendererMiB, 0)} |`);
  }
  const limit = limits.get(model.name);
  if (limit) {
    // The physical limit: a decode step reads every weight once.
    const { oneThreadBytesPerS: one, allThreadsBytesPerS: all, threads } = limit.bandwidth;
    console.log(`\nthe memory's limit: a decode token reads ${(limit.bytes / 1e6).toFixed(1)} MB of weights; this machine `
      + `reads ${(all / 1e9).toFixed(1)} GB/s on ${threads} threads (${(one / 1e9).toFixed(1)} on one): at most `
      + `${(all / limit.bytes).toFixed(0)} tok/s (${(one / limit.bytes).toFixed(0)} on one thread)`);
  }
}
