// How long scoring a text takes in Chromium, and what it reads back, on the CPU engine and on
// WebGPU (SwiftShader here: a CPU emulation, so its times say little about a real GPU; its bytes
// are what any GPU reads). Prints a line per backend and model; not a test.
//
//   node tests/browser/score-bench.mjs [tokens]      (after ./build.sh web; default 2000 tokens)

import { readFileSync } from 'node:fs';
import path from 'node:path';
import { BLANK_PAGE, GEMMA_NAME, MODEL_NAME, REPO, startServer } from './server.mjs';
import { launch, open } from './browser.mjs';

const wanted = Number(process.argv[2] ?? 2000);
// Prose to score: this repository's ARCHITECTURE.md, cut to about `wanted` tokens per model.
const source = readFileSync(path.join(REPO, 'ARCHITECTURE.md'), 'utf8');

const server = await startServer({ extra: BLANK_PAGE });
const context = await launch();
const page = await open(context, `${server.url}blank.html`);
try {
  for (const [model, backend, tokens] of [[GEMMA_NAME, 'cpu', wanted], [MODEL_NAME, 'cpu', wanted], [MODEL_NAME, 'webgpu', Math.min(wanted, 256)]]) {
    const line = await page.evaluate(async ({ model, backend, tokens, source }) => {
      const { Nucleus } = await import('/nucleus.js');
      const lm = await Nucleus.load({ model: `/models/${model}`, backend });
      try {
        // Cut the text to the tokens asked (the tokenizer's count, not characters).
        let text = source.slice(0, tokens * 6);
        while ((await lm.tokenize(text)).length > tokens) text = text.slice(0, Math.floor(text.length * 0.95));
        await lm.score(text.slice(0, 200), { topK: 5 }); // warm-up
        const report = await lm.score(text, { topK: 5 });
        return `${model} on ${lm.info.device}: ${report.tokens.length} tokens scored in ${report.elapsedMs.toFixed(0)} ms `
          + `(${(report.tokens.length / report.elapsedMs * 1000).toFixed(1)} tok/s), ${report.bytesRead} bytes read back `
          + `(whole rows: ${(report.tokens.length * lm.info.vocabSize * 4 / 1e6).toFixed(0)} MB), perplexity ${report.perplexity.toFixed(3)}`;
      } finally {
        lm.dispose();
      }
    }, { model, backend, tokens, source });
    console.log(line);
  }
} finally {
  await context.close();
  await server.close();
}
