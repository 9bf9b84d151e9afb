// The <nucleus-playground> element on www/embed.html (a documentation page with three embeds) in
// headless Chromium: each renders in its own shadow root, the three share one loaded model, their
// generations queue (and say so), compare mode runs three temperatures with T = 0 equal to the
// greedy reference, and without WebGPU the embed with a trace replays it, sliders and all, while
// the others run on the CPU engine (as they do here, SwiftShader being a CPU emulation).
// Screenshots go to test-output/.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { startServer, REPO } from './server.mjs';
import { launch, open } from './browser.mjs';

const OUTPUT = path.join(REPO, 'test-output');
const reference = JSON.parse(readFileSync(path.join(REPO, 'tests/fixtures/smollm2-135m-instruct-q4_1.json'), 'utf8'));

let server;
let context;
let page;

/** The chips of an element (or of one of its columns), as { id, text }. */
const chips = (selector) => page.$$eval(`${selector} .token`, (nodes) => nodes.map((n) => ({ id: Number(n.dataset.id), text: n.textContent })));
const state = (id) => page.$eval(`#${id}`, (e) => e.dataset.state);

before(async () => {
  mkdirSync(OUTPUT, { recursive: true });
  server = await startServer();
  context = await launch();
  page = await open(context, `${server.url}embed.html`);
  await page.waitForFunction(() => [...document.querySelectorAll('nucleus-playground')].every((e) => ['ready', 'error'].includes(e.dataset.state)),
    null, { timeout: 120_000 });
});

after(async () => {
  await context?.close();
  await server?.close();
});

test('each embed renders in its own shadow root, and the three share one loaded model', async () => {
  for (const id of ['greedy', 'top-p', 'compare']) {
    assert.equal(await state(id), 'ready', id);
    const inside = await page.$eval(`#${id}`, (e) => ({ open: e.shadowRoot !== null, go: Boolean(e.shadowRoot?.querySelector('.go')),
      leaked: document.querySelectorAll('.go').length }));
    assert.deepEqual(inside, { open: true, go: true, leaked: 0 }, `${id}: its DOM is inside its shadow root`);
  }
  // One Nucleus.load: one engine worker, one download of the model.
  assert.equal(page.workers().filter((w) => /nucleus-worker\.js/.test(w.url())).length, 1, 'one engine worker for three embeds');
  assert.equal(server.requests.filter((r) => r.endsWith('.gguf')).length, 1, 'the model downloaded once');
  // The trace embed shows its recorded run at once.
  assert.deepEqual((await chips('#top-p')).map((c) => c.text), [' Paris', '.', '↵\n']);
  await page.screenshot({ path: path.join(OUTPUT, 'embed-loaded.png'), fullPage: true });
});

test('two generations asked at once run one after the other, the second saying it waits', async () => {
  await page.$eval('#greedy', (e) => e.setAttribute('max-tokens', '2'));
  await page.$eval('#top-p', (e) => e.setAttribute('max-tokens', '1'));
  // The CPU engine may finish the first before a poll sees the second wait: an observer keeps
  // each place in line the second element showed, with its status then.
  await page.$eval('#top-p', (element) => {
    window.placesInLine = [];
    new MutationObserver(() => window.placesInLine.push([element.dataset.queue,
      element.shadowRoot.querySelector('.status').textContent])).observe(element, { attributeFilter: ['data-queue'] });
  });
  await page.click('#greedy .go');
  await page.click('#top-p .go');
  await page.waitForFunction(() => ['greedy', 'top-p'].every((id) => document.getElementById(id).dataset.queue === undefined
    && /^Done/.test(document.getElementById(id).shadowRoot.querySelector('.status').textContent)), null, { timeout: 300_000 });
  assert.equal((await chips('#greedy')).length, 2);
  assert.equal((await chips('#top-p')).length, 1, 'the live run replaced the recorded one');
  const places = await page.evaluate(() => window.placesInLine);
  assert.deepEqual(places[0], ['1', 'Waiting: 1 generation on this page before this one.'], JSON.stringify(places));
  await page.screenshot({ path: path.join(OUTPUT, 'embed-queue.png'), fullPage: true });
});

test('compare runs the prompt at T = 0, 0.7 and 1.5 side by side; the T = 0 column is the greedy reference', async () => {
  const once = reference.logit_cases.once;
  await page.$eval('#compare', (e) => e.setAttribute('max-tokens', '3'));
  await page.click('#compare .go');
  await page.waitForFunction(() => /^Done/.test(document.querySelector('#compare').shadowRoot.querySelector('.status').textContent),
    null, { timeout: 300_000 });
  const headings = await page.$$eval('#compare .column h3', (nodes) => nodes.map((n) => n.textContent));
  assert.deepEqual(headings, ['T = 0', 'T = 0.7', 'T = 1.5']);
  const columns = await page.$$eval('#compare .column', (nodes) => nodes.map((n) => n.querySelectorAll('.token').length));
  assert.deepEqual(columns, [3, 3, 3]);
  assert.deepEqual((await chips('#compare .column:nth-of-type(1)')).map((c) => c.id), once.greedy32.slice(0, 3));
  assert.ok(await page.$('#compare .column:nth-of-type(3) .chart svg'), 'each column draws its chart');
  await page.screenshot({ path: path.join(OUTPUT, 'embed-compare.png'), fullPage: true });
});

test('an embed works from the keyboard, and axe-core finds nothing serious inside the shadow roots', async () => {
  // The greedy embed holds two chips from the queue test: End and Home move between them, each inspected.
  await page.focus('#greedy .token >> nth=0');
  await page.keyboard.press('End');
  const focused = () => page.$eval('#greedy', (e) => e.shadowRoot.activeElement?.dataset.index);
  assert.equal(await focused(), '1');
  assert.match(await page.textContent('#greedy .whatif'), /^Step 2: chose/);
  await page.keyboard.press('ArrowLeft');
  assert.equal(await focused(), '0');
  assert.match(await page.textContent('#greedy .whatif'), /^Step 1: chose/);
  await page.addScriptTag({ path: path.join(REPO, 'node_modules/axe-core/axe.min.js') });
  const { violations, checked } = await page.evaluate(async () => {
    const result = await window.axe.run(document, { resultTypes: ['violations', 'passes'] });
    // axe-core walks open shadow roots: the passes name nodes inside them (targets as arrays).
    const inShadow = result.passes.some((rule) => rule.nodes.some((node) => Array.isArray(node.target[0])));
    return { violations: result.violations, checked: inShadow };
  });
  assert.ok(checked, 'axe-core checked nodes inside the shadow roots');
  const serious = violations.filter((v) => ['serious', 'critical'].includes(v.impact))
    .map((v) => `${v.id}: ${v.help}: ${v.nodes.slice(0, 3).map((n) => JSON.stringify(n.target)).join('; ')}`);
  assert.deepEqual(serious, []);
});

test('without WebGPU the trace embed replays and its sliders change the chart; the others run on the CPU engine', async () => {
  const plain = await launch({ webgpu: false });
  try {
    const noGpu = await open(plain, `${server.url}embed.html`);
    // The trace embed shows its recorded run at once ('replay'), and keeps it when the model is ready.
    await noGpu.waitForFunction(() => ['replay', 'ready'].includes(document.querySelector('#top-p').dataset.state)
      && document.querySelector('#greedy').dataset.state === 'ready', null, { timeout: 120_000 });
    assert.equal(await noGpu.$$eval('#top-p .token', (nodes) => nodes.length), 3);
    assert.match(await noGpu.textContent('#greedy .status'), /is loaded \(on the CPU\)\.$/);
    const chart = () => noGpu.$eval('#top-p .chart', (c) => c.innerHTML);
    const before = await chart();
    await noGpu.fill('#top-p .knob[data-key="topP"]', '0.5');
    assert.notEqual(await chart(), before, 'top-p changed the chart');
    await noGpu.$eval('#greedy', (e) => e.setAttribute('max-tokens', '3'));
    await noGpu.click('#greedy .go');
    await noGpu.waitForFunction(() => /^Done/.test(document.querySelector('#greedy').shadowRoot.querySelector('.status').textContent),
      null, { timeout: 120_000 });
    const texts = await noGpu.$$eval('#greedy .token', (nodes) => nodes.map((n) => n.textContent));
    assert.equal(texts.length, 3);
    await noGpu.screenshot({ path: path.join(OUTPUT, 'embed-no-webgpu.png'), fullPage: true });
  } finally {
    await plain.close();
  }
});
