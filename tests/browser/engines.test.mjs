// Every browser engine: Chromium (playwright-core), Firefox ESR (puppeteer-core over WebDriver
// BiDi) and WebKit (WebKitGTK's MiniBrowser through WebKitWebDriver), one suite for all three
// behind browser.mjs's page interface (`ENGINES`). Firefox and WebKit have no WebGPU here, and
// Chromium's is an emulation, so `Nucleus.load()` runs the CPU engine: threaded where the page can
// share memory (Chromium, Firefox), on one thread saying why where it cannot (WebKitGTK: cross-origin
// isolated but no SharedArrayBuffer). What is checked: the API's load ->
// generate -> dispose cycle repeated in one page (each step's logits returned: WebKit once failed
// the third load in a page with an out-of-bounds access) and from fresh profiles, each bounded in
// time (Firefox once hung in its threads' start: its `new Worker` inside a worker blocked about
// one start in a hundred, so the page now starts the helpers); the reference's greedy ids; a page
// that is not isolated; scoring and attention; the playground end to end. No console warning where
// the driver can read the console (Chromium, Firefox). `NUCLEUS_ENGINES=firefox,webkit` runs some.

import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { BLANK_PAGE, REPO, startServer } from './server.mjs';
import { ENGINES, keptThreads, within } from './browser.mjs';

const reference = JSON.parse(readFileSync(path.join(REPO, 'tests/fixtures/smollm2-135m-instruct-q4_1.json'), 'utf8'));
const capital = reference.logit_cases.capital;
/** A load that takes longer than this has hung (one takes about 2 s here). */
const LOAD_LIMIT_MS = 60_000;
/** Tokens each cycle generates, every step's logits row returned. */
const CYCLE_TOKENS = 16;
const engines = (process.env.NUCLEUS_ENGINES ?? Object.keys(ENGINES).join(',')).split(',');

/**
 * One cycle in `page`: load the default model, its greedy tokens for the capital prompt with every
 * logits row, dispose. Returns the ids, the rows' lengths, the backend, and the threads the page
 * could have (the cores where it can share memory, else 1).
 */
const cycle = (page) => within(LOAD_LIMIT_MS, 'a load, a generation and a dispose', page.run(async ({ prompt, maxTokens }) => {
  const { Nucleus } = await import('/nucleus.js');
  const lm = await Nucleus.load();
  const ids = [];
  const rows = [];
  for await (const step of lm.generate({ prompt, maxTokens, temperature: 0, returnLogits: true })) {
    ids.push(step.id);
    rows.push(step.logits.length);
  }
  const { backend, vocabSize } = lm.info;
  lm.dispose();
  const shares = globalThis.crossOriginIsolated && typeof SharedArrayBuffer === 'function';
  return { ids, rows, vocabSize, backend, possible: shares ? navigator.hardwareConcurrency : 1 };
}, { prompt: capital.text, maxTokens: CYCLE_TOKENS }));

/**
 * A cycle's outcome against the reference. Where the page can share memory, every helper started
 * and was timed, and the threads kept are the fewest within 10 % of the fastest step.
 */
function assertCycle({ ids, rows, vocabSize, backend, possible }, what) {
  assert.deepEqual(ids, capital.greedy32.slice(0, CYCLE_TOKENS), what);
  assert.ok(rows.every((n) => n === vocabSize), `${what}: every logits row whole`);
  assert.equal(backend.kind, 'cpu', what);
  if (possible === 1) {
    assert.equal(backend.threads, 1, what);
    assert.match(backend.reason, /one thread: /, `${what}: says why one thread`);
    return;
  }
  const timings = backend.threadTimings;
  assert.ok(timings?.[possible] > 0, `${what}: every helper started and was timed: ${backend.reason}`);
  assert.equal(backend.threads, keptThreads(timings), `${what}: ${JSON.stringify(timings)}`);
}

for (const key of engines) {
  const engine = ENGINES[key];
  describe(engine.name, () => {
    let server;
    let plainServer;
    let browser;

    before(async () => {
      server = await startServer({ extra: BLANK_PAGE });
      plainServer = await startServer({ extra: BLANK_PAGE, isolated: false });
      browser = await engine.launch();
    });

    after(async () => {
      await browser?.close();
      await server?.close();
      await plainServer?.close();
    });

    test(`the API in ${engine.name}: 20 load, generate, dispose cycles in one page, the reference ids, nothing warned`, async (t) => {
      const page = await browser.open(`${server.url}blank.html`);
      t.after(() => page.close());
      for (let i = 0; i < 20; i += 1) assertCycle(await cycle(page), `cycle ${i + 1}`);
      if (page.warnings) assert.deepEqual(page.warnings, []);
    });

    test(`the first load in a fresh ${engine.name} profile finishes, three times; a page that is not isolated runs on one thread`, async () => {
      for (let i = 0; i < 3; i += 1) {
        const fresh = await engine.launch();
        try {
          const page = await fresh.open(`${server.url}blank.html`);
          assertCycle(await cycle(page), `profile ${i + 1}`);
          await page.close();
        } finally {
          await fresh.close();
        }
      }
      const page = await browser.open(`${plainServer.url}blank.html`);
      try {
        const outcome = await cycle(page);
        assertCycle(outcome, 'not isolated');
        assert.match(outcome.backend.reason, /not cross-origin isolated/);
      } finally {
        await page.close();
      }
    });

    test(`scoring and attention in ${engine.name}: the greedy token ranked first, rows summing to 1`, async (t) => {
      const page = await browser.open(`${server.url}blank.html`);
      t.after(() => page.close());
      const { ranks, sums } = await within(LOAD_LIMIT_MS, 'a load, a score and an attention read', page.run(async (prompt) => {
        const { Nucleus } = await import('/nucleus.js');
        const lm = await Nucleus.load();
        const score = await lm.score(`${prompt} Paris.`, { topK: 3 });
        const attention = await lm.attention({ prompt, layer: 30 });
        lm.dispose();
        return { ranks: score.tokens.map((t) => t.rank ?? null), sums: attention.rows.map((r) => r.weights.reduce((a, b) => a + b, 0)) };
      }, capital.text));
      assert.equal(ranks[0], null);
      assert.equal(ranks[capital.ids.length], 1, '" Paris" is the model\'s first guess');
      assert.equal(sums.length, capital.ids.length);
      for (const sum of sums) assert.ok(Math.abs(sum - 1) < 1e-5, `a row sums to ${sum}`);
    });

    test(`the playground in ${engine.name}: the model loads on the CPU engine, a greedy run gives the reference tokens and its chart`, async (t) => {
      const page = await browser.open(server.url);
      t.after(() => page.close());
      await page.waitFor(() => document.body.dataset.state === 'ready', LOAD_LIMIT_MS);
      await page.click('input[name="mode"][value="raw"]');
      await page.fill('#prompt', capital.text);
      await page.click('[data-preset="greedy"]');
      await page.fill('#max-tokens', '3');
      await page.click('#generate');
      await page.waitFor(() => document.body.dataset.state === 'ready' && document.querySelectorAll('#tokens .token').length === 3,
        LOAD_LIMIT_MS);
      assert.deepEqual(await page.texts('#tokens .token'), [' Paris', '.', '↵\n']);
      assert.equal((await page.texts('#chart svg')).length, 1, 'the chart is drawn');
      if (page.warnings) assert.deepEqual(page.warnings, []);
    });
  });
}
