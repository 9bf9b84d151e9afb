// A measurement, not a test: Burn's own CPU backend (flex, the Burn-op path) compiled to wasm,
// against the CPU engine, in the same headless Chromium, on the default model. Needs the
// measurement build of the engine module (never shipped), which this script does not make:
//   cargo build --profile wasm-release --target wasm32-unknown-unknown -p nucleus-web --features burn-cpu
//   wasm-bindgen --target web --no-typescript --out-dir www/pkg-burn --out-name nucleus_web_burn \
//     $CARGO_TARGET_DIR/wasm32-unknown-unknown/wasm-release/nucleus_web.wasm
//   node tests/browser/burn-wasm-probe.mjs
// Both engines run in the page's main thread here (one thread each: flex has no threads in
// wasm), greedy, the bench's 32-token prompt, 32 tokens, the median of 3 runs after a warm-up.

import { startServer, MODEL_NAME, BLANK_PAGE } from './server.mjs';
import { launch, open } from './browser.mjs';

const server = await startServer({ extra: BLANK_PAGE });
const context = await launch();
try {
  const page = await open(context, `${server.url}blank.html`);
  const rows = await page.evaluate(async (url) => {
    const bytes = new Uint8Array(await (await fetch(url)).arrayBuffer());
    const prompt = 'The quick brown fox jumps over the lazy dog while the river runs past the old mill, '
      + 'The quick brown fox jumps over the lazy';
    const wasm = await import('/pkg-burn/nucleus_web_burn.js');
    await wasm.default();
    const rows = [];
    for (const backend of ['cpu', 'burn-cpu']) {
      const started = performance.now();
      const file = new wasm.ModelFile();
      file.append(bytes);
      const engine = await wasm.loadEngine(file, backend, 512, undefined, () => {});
      file.free();
      const loadMs = performance.now() - started;
      const runs = [];
      for (let run = 0; run <= 3; run++) {
        engine.start(JSON.stringify({ prompt: `${run}${prompt}`, maxTokens: 32, temperature: 0, ignoreEos: true, topLogprobs: 0 }));
        while (await engine.nextStep(undefined) !== null) { /* every step */ }
        const { timing, usage } = JSON.parse(engine.result());
        if (run > 0) runs.push({ ...timing, promptTokens: usage.promptTokens });
      }
      const info = JSON.parse(engine.info(undefined));
      engine.free();
      const median = (key) => runs.map((r) => r[key]).sort((a, b) => a - b)[1];
      rows.push({ backend, path: info.path, weightMiB: info.weightBytes / 2 ** 20, loadMs, promptTokens: runs[0].promptTokens,
        ttftMs: median('ttftMs'), prefill: median('prefillTokensPerS'), decode: median('decodeTokensPerS') });
    }
    return rows;
  }, `/models/${MODEL_NAME}`);
  console.table(rows);
} finally {
  await context.close();
  await server.close();
}
