// Many load -> generate -> dispose cycles in one page of one engine, counted by outcome: how often
// a load had to be tried again in a new worker (its engine crashed), a load or a generation
// failed, or the ids differ from the reference. A tool for the engines' rare faults (ARCHITECTURE.md,
// "WebKit"), not a test: `node tests/browser/load-loop.mjs [cycles=20]`, ENGINE=webkit (default),
// firefox or chromium; after `./build.sh web`. HOLD_MEMORIES=N first makes and keeps N WebAssembly
// memories in the page: past JavaScriptCore's fast memories (8 a process on Linux, 3 on iOS) the
// engine's memory is a bounds-checked one, which every grow copies whole. WebKit's processes read
// JavaScriptCore's options from the environment (`JSC_dumpOptions=1` lists those set, on the
// driver's standard error): `JSC_thresholdForOMGOptimizeAfterWarmUp=20 ENGINE=webkit node
// tests/browser/load-loop.mjs` tiers every hot function up early.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { BLANK_PAGE, REPO, startServer } from './server.mjs';
import { ENGINES } from './browser.mjs';

const capital = JSON.parse(readFileSync(path.join(REPO, 'tests/fixtures/smollm2-135m-instruct-q4_1.json'), 'utf8'))
  .logit_cases.capital;
const TOKENS = 16;
const cycles = Number(process.argv[2] ?? 20);
const engine = ENGINES[process.env.ENGINE ?? 'webkit'];
const server = await startServer({ extra: BLANK_PAGE });
const browser = await engine.launch();
const page = await browser.open(`${server.url}blank.html`);
await page.run((count) => {
  globalThis.heldMemories = Array.from({ length: count }, () => new WebAssembly.Memory({ initial: 1 }));
}, Number(process.env.HOLD_MEMORIES ?? 0));
const counts = { ok: 0, retried: 0, load: 0, generate: 0, wrong: 0 };
const started = Date.now();
for (let i = 1; i <= cycles; i += 1) {
  const outcome = await page.run(async ({ prompt, maxTokens }) => {
    const { Nucleus } = await import('/nucleus.js');
    let lm;
    try {
      lm = await Nucleus.load();
    } catch (error) {
      return { failed: 'load', message: error.message };
    }
    const ids = [];
    try {
      for await (const step of lm.generate({ prompt, maxTokens, temperature: 0, returnLogits: true })) ids.push(step.id);
    } catch (error) {
      return { failed: 'generate', message: `after ${ids.length} steps: ${error.message}` };
    } finally {
      lm.dispose();
    }
    return { ids, reason: lm.info.backend.reason };
  }, { prompt: capital.text, maxTokens: TOKENS });
  if (outcome.failed) {
    counts[outcome.failed] += 1;
    console.log(`cycle ${i}: the ${outcome.failed} failed: ${outcome.message}`);
  } else if (/loaded again in a new worker/.test(outcome.reason)) {
    counts.retried += 1;
    console.log(`cycle ${i}: ${outcome.reason}`);
  } else if (outcome.ids.join() !== capital.greedy32.slice(0, TOKENS).join()) {
    counts.wrong += 1;
    console.log(`cycle ${i}: ids ${outcome.ids.join(' ')}`);
  } else {
    counts.ok += 1;
  }
}
console.log(JSON.stringify(counts), `${((Date.now() - started) / cycles / 1000).toFixed(1)} s a cycle`);
await page.close();
await browser.close();
await server.close();
process.exit(0);
