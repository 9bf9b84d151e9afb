// Firefox ESR (Debian's, headless, driven by puppeteer-core over WebDriver BiDi): no WebGPU on
// Linux, so `Nucleus.load()` runs the CPU engine, threaded where the page is cross-origin
// isolated. The API's load -> generate -> dispose cycle repeated in one page and from fresh
// profiles, each load bounded in time (a first load once hung in a fresh profile); the reference's
// greedy ids; no console warning in a threaded run; scoring and attention; the playground end to
// end. The same server and helpers as the Chromium suites.
//
// Run by `./build.sh test-firefox`, not yet by `./build.sh test`: about one load in sixty hangs
// (issue 38). Caught with the worker's stages logged: the worker had started the threaded
// module's pool (`initThreadPool`) and never came back, and a timer in the worker did not fire
// either (the worker's thread is blocked, not waiting).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { BLANK_PAGE, REPO, startServer } from './server.mjs';
import { launchFirefox, within } from './browser.mjs';

const reference = JSON.parse(readFileSync(path.join(REPO, 'tests/fixtures/smollm2-135m-instruct-q4_1.json'), 'utf8'));
const capital = reference.logit_cases.capital;
/** A load that takes longer than this has hung (one takes about 2 s here). */
const LOAD_LIMIT_MS = 60_000;

let server;
let browser;

before(async () => {
  server = await startServer({ extra: BLANK_PAGE });
  browser = await launchFirefox();
});

after(async () => {
  await browser?.close();
  await server?.close();
});

/** A page of `target` with its console's warnings and errors kept in `page.warnings`. */
async function openPage(target, url) {
  const page = await target.newPage();
  page.warnings = [];
  page.on('console', (message) => {
    if (['warn', 'warning', 'error'].includes(message.type())) page.warnings.push(message.text());
  });
  await page.goto(url);
  return page;
}

/** One cycle in `page`: load the default model, its greedy ids for the capital prompt, dispose. */
const cycle = (page) => within(LOAD_LIMIT_MS, 'a load, a generation and a dispose', page.evaluate(async (prompt) => {
  const { Nucleus } = await import('/nucleus.js');
  const lm = await Nucleus.load();
  const ids = [];
  for await (const step of lm.generate({ prompt, maxTokens: 4, temperature: 0 })) ids.push(step.id);
  const { backend } = lm.info;
  lm.dispose();
  return { ids, backend };
}, capital.text));

test('the API in Firefox: 20 load, generate, dispose cycles in one page, threaded, the reference ids, nothing warned', async (t) => {
  const page = await openPage(browser, `${server.url}blank.html`);
  t.after(() => page.close());
  const cores = await page.evaluate(() => navigator.hardwareConcurrency);
  for (let i = 0; i < 20; i += 1) {
    const { ids, backend } = await cycle(page);
    assert.deepEqual(ids, capital.greedy32.slice(0, 4), `cycle ${i + 1}`);
    assert.equal(backend.kind, 'cpu');
    assert.equal(backend.threads, cores, `cycle ${i + 1}: ${backend.reason}`);
  }
  assert.deepEqual(page.warnings, []);
});

test('the first load in a fresh Firefox profile finishes, three times', async () => {
  for (let i = 0; i < 3; i += 1) {
    const fresh = await launchFirefox();
    try {
      const page = await openPage(fresh, `${server.url}blank.html`);
      const { ids } = await cycle(page);
      assert.deepEqual(ids, capital.greedy32.slice(0, 4), `profile ${i + 1}`);
    } finally {
      await fresh.close();
    }
  }
});

test('scoring and attention in Firefox: the greedy token ranked first, rows summing to 1', async (t) => {
  const page = await openPage(browser, `${server.url}blank.html`);
  t.after(() => page.close());
  const { ranks, sums } = await within(LOAD_LIMIT_MS, 'a load, a score and an attention read', page.evaluate(async (prompt) => {
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

test('the playground in Firefox: the model loads on the CPU engine, a greedy run gives the reference tokens and its chart', async (t) => {
  const page = await openPage(browser, server.url);
  t.after(() => page.close());
  await page.waitForFunction(() => document.body.dataset.state === 'ready', { timeout: LOAD_LIMIT_MS });
  await page.click('input[name="mode"][value="raw"]');
  await page.locator('#prompt').fill(capital.text);
  await page.click('[data-preset="greedy"]');
  await page.locator('#max-tokens').fill('3');
  await page.click('#generate');
  await page.waitForFunction(() => document.body.dataset.state === 'ready' && document.querySelectorAll('#tokens .token').length === 3,
    { timeout: LOAD_LIMIT_MS });
  const chips = await page.$$eval('#tokens .token', (nodes) => nodes.map((n) => n.textContent));
  assert.deepEqual(chips, [' Paris', '.', '↵\n']);
  assert.ok(await page.$('#chart svg'), 'the chart is drawn');
  assert.deepEqual(page.warnings, []);
});
