// The npm package as a documentation site uses it, in headless Chromium across three local
// origins: the site's pages on one (cross-origin isolated, each page with README.md's Content
// Security Policy in a meta tag), the package on a second as a CDN serves it (CORS; the packed
// tarball installed into a fresh folder), the model on a third (CORS). The examples' public URLs
// (jsDelivr, models.example.com) are rewritten to those origins as the pages are served.
//
// The static page's element generates the greedy reference and draws its chart; the docs
// generator's page does the same; the bundle (the typed example) streams a generation and calls
// the whole API; nothing is blocked by the policy; two versions side by side keep their own
// service worker caches (the second's wasm served as application/octet-stream, as some CDNs do),
// and an upgrade drops its old one.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';

import { MODEL_NAME, REPO, VERSION } from './server.mjs';
import { launch, open } from './browser.mjs';
import { packagePath, startOrigins } from './origins.mjs';
import { PACKAGE_NAME, installFresh } from '../package/fresh.mjs';

const reference = JSON.parse(readFileSync(path.join(REPO, 'tests/fixtures/smollm2-135m-instruct-q4_1.json'), 'utf8'));
const capital = reference.logit_cases.capital;
const hello = reference.tokenizer_cases.find((c) => c.text === 'Hello world');
const README = readFileSync(path.join(REPO, 'README.md'), 'utf8');
/** The policy README.md lists for documentation authors (a code block of one line). */
const POLICY = /\n(default-src 'self'; script-src [^\n]+)\n/.exec(README)[1];
/** A second version of the package, beside the first (the same files, another version). */
const SIDE_VERSION = `${VERSION}-side.1`;

let fresh;
let origins;
let page;
let cdn;
let models;
let context;
let site;

/** Opens `url`, keeping in `violations` each policy violation its console reports. */
async function openChecked(url) {
  const opened = await open(context, url);
  opened.violations = [];
  opened.on('console', (message) => {
    if (/Content Security Policy|Refused to/i.test(message.text())) opened.violations.push(message.text());
  });
  return opened;
}

/** The violations the page's document saw (`securitypolicyviolation` events, from the init script). */
const violations = (opened) => opened.evaluate(() => window.violations ?? []);

before(async () => {
  fresh = installFresh(VERSION);
  execFileSync(process.execPath, ['build.mjs'], { cwd: fresh.dir, stdio: 'inherit' });
  execFileSync(process.execPath, [path.join(REPO, 'examples/docs-generator/build.mjs'), path.join(fresh.dir, 'docs')], { stdio: 'inherit' });
  // The second version: the installed files with another version (what a publish of the next
  // version would carry), and a page for each beside its own copy of sw.js.
  const side = path.join(fresh.dir, 'side');
  cpSync(fresh.packageDir, side, { recursive: true });
  const manifest = JSON.parse(readFileSync(path.join(side, 'package.json'), 'utf8'));
  writeFileSync(path.join(side, 'package.json'), JSON.stringify({ ...manifest, version: SIDE_VERSION }));
  writeFileSync(path.join(side, 'pkg/version.js'), `export const VERSION = '${SIDE_VERSION}';\n`);
  const staticPage = readFileSync(path.join(REPO, 'examples/static/index.html'), 'utf8');
  for (const [folder, version] of [['v1', VERSION], ['v2', SIDE_VERSION]]) {
    mkdirSync(path.join(fresh.dir, folder));
    cpSync(path.join(fresh.packageDir, 'sw.js'), path.join(fresh.dir, folder, 'sw.js'));
    writeFileSync(path.join(fresh.dir, folder, 'index.html'), staticPage
      .replace(`${PACKAGE_NAME}@${VERSION}/`, `${PACKAGE_NAME}@${version}/`)
      .replace('<nucleus-playground ', '<nucleus-playground service-worker="sw.js" '));
  }

  origins = await startOrigins({
    cdnRoutes: {
      [packagePath(VERSION)]: fresh.packageDir,
      // Served as some CDNs serve wasm, not as application/wasm: instantiated without streaming.
      [packagePath(SIDE_VERSION)]: { path: side, types: { '.wasm': 'application/octet-stream' } },
    },
    siteRoutes: {
      '/static/': path.join(REPO, 'examples/static'),
      '/docs/': path.join(fresh.dir, 'docs'),
      '/bundler/': fresh.dir,
      '/v1/': path.join(fresh.dir, 'v1'),
      '/v2/': path.join(fresh.dir, 'v2'),
    },
  });
  ({ site, cdn, models } = origins);
  context = await launch();
  // Every page records the policy violations its document sees.
  await context.addInitScript(() => {
    window.violations = [];
    document.addEventListener('securitypolicyviolation', (event) => window.violations.push(`${event.violatedDirective} ${event.blockedURI}`));
  });
});

after(async () => {
  await context?.close();
  await origins?.close();
  if (fresh) rmSync(fresh.dir, { recursive: true, force: true });
});

test("the examples carry README's policy and this version", () => {
  for (const file of ['examples/static/index.html', 'examples/docs-generator/layout.html', 'examples/bundler/index.html']) {
    const text = readFileSync(path.join(REPO, file), 'utf8');
    assert.equal(/http-equiv="Content-Security-Policy" content="([^"]+)"/.exec(text)?.[1], POLICY, file);
    for (const [, version] of text.matchAll(new RegExp(`${PACKAGE_NAME}@([^/]+)/`, 'g'))) assert.equal(version, VERSION, file);
  }
  assert.ok(README.includes(`${PACKAGE_NAME}@${VERSION}/nucleus-element.js`), 'README names this version');
});

/** The members nucleus.d.ts declares for `interface name` (its top level): { required, optional }. */
function declaredKeys(name) {
  const declarations = readFileSync(path.join(REPO, 'www/nucleus.d.ts'), 'utf8');
  const body = new RegExp(`export interface ${name} (?:extends [^{]+)?\\{\\n([\\s\\S]*?)\\n\\}`).exec(declarations)[1];
  const members = [...body.matchAll(/^ {2}(\w+)(\??):/gm)];
  return { required: members.filter((m) => !m[2]).map((m) => m[1]), optional: members.filter((m) => m[2]).map((m) => m[1]) };
}

/** Waits for the page's `index`th element's model, generates, and returns its chips' ids. */
async function generateIn(opened, index = 0) {
  const element = opened.locator('nucleus-playground').nth(index);
  const state = () => element.evaluate((e) => [e.dataset.state, e.shadowRoot.querySelector('.status')?.textContent]);
  await opened.waitForFunction((i) => ['ready', 'error'].includes(document.querySelectorAll('nucleus-playground')[i]?.dataset.state),
    index, { timeout: 180_000 });
  const [loaded, status] = await state();
  assert.equal(loaded, 'ready', status);
  await element.locator('.go').click();
  await opened.waitForFunction((i) => /^Done/.test(document.querySelectorAll('nucleus-playground')[i].shadowRoot.querySelector('.status').textContent),
    index, { timeout: 180_000 });
  return element.locator('.token').evaluateAll((nodes) => nodes.map((n) => Number(n.dataset.id)));
}

test('the static page: one script tag from the CDN, the element generates the greedy reference and its chart, nothing blocked', async () => {
  page = await openChecked(`${site.url}static/index.html`);
  assert.deepEqual(await generateIn(page), capital.greedy32.slice(0, 8));
  assert.ok(await page.$('nucleus-playground >> .chart svg'), 'the chart is drawn');
  // The engine's worker came from a same-origin blob; its script and the threaded engine (the
  // page is cross-origin isolated; Chromium validates relaxed SIMD, so that build) and its helper
  // threads' script from the CDN; the model from the model host.
  assert.ok(page.workers().some((worker) => worker.url().startsWith(`blob:${site.url.slice(0, -1)}`)), 'a blob worker');
  const fromCdn = cdn.requests.map((r) => r.replace(`/npm/${PACKAGE_NAME}@${VERSION}/`, ''));
  for (const file of ['nucleus-element.js', 'nucleus-worker.js', 'nucleus-thread.js', 'pkg/nucleus_web_threads_relaxed_bg.wasm', 'pkg/nucleus_sampler_web_bg.wasm', 'chart.css']) {
    assert.ok(fromCdn.includes(file), `${file} from the CDN`);
  }
  assert.ok(models.requests.includes(`/${MODEL_NAME}`), 'the model from its host');
  assert.deepEqual(site.requests.filter((r) => r !== '/favicon.ico'), ['/static/index.html'], 'the site served only its page');
  // A bad `assets` is refused by name before any worker starts.
  const refused = await page.evaluate(async (url) => {
    const { Nucleus } = await import(url);
    return Nucleus.load({ assets: 'ftp://example.com/nucleus/' }).then(() => null, (error) => [error.code, error.option, error.message]);
  }, `${cdn.url}npm/${PACKAGE_NAME}@${VERSION}/nucleus.js`);
  assert.deepEqual(refused, ['bad-options', 'assets', 'assets must be an http(s) URL, got "ftp://example.com/nucleus/"']);
  assert.deepEqual([...await violations(page), ...page.violations], []);
});

test('the docs generator\'s page: the element as raw HTML in Markdown generates the same, scores a paragraph in place, shows its attention', async () => {
  const docs = await openChecked(`${site.url}docs/guide.html`);
  assert.equal(await docs.$$eval('nucleus-playground', (nodes) => nodes.length), 4);
  assert.deepEqual(await generateIn(docs, 0), capital.greedy32.slice(0, 8));
  await docs.waitForFunction(() => document.querySelectorAll('nucleus-playground')[1].dataset.state === 'ready');
  // mode="score": the element's own paragraph, each token rated (" Paris" the model's first guess).
  await docs.waitForFunction(() => document.querySelectorAll('nucleus-playground')[2].dataset.state === 'scored', null, { timeout: 180_000 });
  const scored = docs.locator('nucleus-playground').nth(2).locator('.token');
  const tokens = await scored.evaluateAll((nodes) => nodes.map((n) => [n.textContent, n.dataset.rank ?? null]));
  assert.equal(tokens.map(([text]) => text).join(''), 'The capital of France is Paris. The capital of Germany is Berlin.');
  assert.deepEqual(tokens.find(([text]) => text === ' Paris'), [' Paris', '1']);
  assert.equal(await docs.locator('nucleus-playground').nth(2).locator('.score-legend li').count(), 5);
  // mode="attention": the last layer's heatmap, a row per token, and the text shaded by the last token's row.
  await docs.waitForFunction(() => document.querySelectorAll('nucleus-playground')[3].dataset.state === 'attended', null, { timeout: 180_000 });
  const attention = docs.locator('nucleus-playground').nth(3);
  assert.equal(await attention.locator('.attention-row').count(), 14);
  assert.match(await attention.locator('.attention-detail').textContent(), /^“\.” \(token 14\) attends most to /);
  assert.deepEqual([...await violations(docs), ...docs.violations], []);
  await docs.close();
});

test('the bundle (the typed example) streams a generation and calls the whole API; its element finds the CDN through `assets`', async () => {
  const bundle = await openChecked(`${site.url}bundler/index.html`);
  await bundle.waitForFunction(() => document.body.dataset.report, null, { timeout: 300_000 });
  const report = JSON.parse(await bundle.evaluate(() => document.body.dataset.report));
  assert.equal(report.version, VERSION);
  assert.equal(report.backend, 'cpu');
  // Greedy, stopped at the first "\n\n" (the stop string): the reference's tokens up to it.
  assert.deepEqual(report.ids, capital.greedy32.slice(0, 4));
  assert.equal(report.text, ' Paris.');
  assert.equal(Number(await bundle.$eval('#output', (e) => e.dataset.steps)), 4, 'the steps streamed into the page');
  assert.equal(report.explained, true);
  // The declarations name every key the objects have, and each they say is always there is.
  for (const [name, keys] of Object.entries(report.keys)) {
    const { required, optional } = declaredKeys(name);
    assert.deepEqual(keys.filter((key) => !required.includes(key) && !optional.includes(key)), [], `${name}: keys nucleus.d.ts does not declare`);
    assert.deepEqual(required.filter((key) => !keys.includes(key)), [], `${name}: keys nucleus.d.ts says are always there`);
  }
  assert.match(report.regex, /^(red|green|blue)$/);
  assert.ok(['stop', 'length'].includes(report.completion));
  assert.ok(report.chunks >= 3, `${report.chunks} chunks`);
  assert.equal(report.lensLayers, 30);
  assert.equal(report.beams, 2);
  // " Paris" is the model's first guess after the prompt; nothing predicts the first token.
  assert.deepEqual([report.scoredRanks[0], report.scoredRanks[5]], [null, 1]);
  assert.deepEqual(report.attentionRows, [1, 2, 3, 4, 5]);
  assert.equal(report.legacyTokens, 5, 'the legacy completions echo the prompt rated');
  assert.deepEqual(report.tokens, hello.ids);
  assert.equal(report.generator, `nucleus ${VERSION}`);
  assert.equal(report.replayed, 4);
  assert.equal(report.stored, true);
  assert.equal(report.error, 'bad-options: topP');
  assert.equal(report.codeDocumented, true);
  assert.equal(report.offline, true);
  assert.equal(report.elementMode, 'inspector');
  assert.deepEqual(await generateIn(bundle), capital.greedy32.slice(0, 4));
  assert.deepEqual([...await violations(bundle), ...bundle.violations], []);
  await bundle.close();
});

/** The service worker caches of this origin, each with the package files it holds (by version folder). */
const appCaches = (opened) => opened.evaluate(async () => {
  const out = {};
  for (const name of await caches.keys()) {
    if (!name.startsWith('nucleus-app ')) continue;
    const keys = await (await caches.open(name)).keys();
    out[name] = [...new Set(keys.map((r) => /nucleus-lm@([^/]+)\//.exec(r.url)?.[1]).filter(Boolean))];
  }
  return out;
});

test('two versions side by side keep their own caches, offline each loads its own files; an upgrade drops its old cache', async () => {
  const pages = {};
  for (const folder of ['v1', 'v2']) {
    pages[folder] = await openChecked(`${site.url}${folder}/index.html`);
    await pages[folder].waitForFunction(() => document.querySelector('nucleus-playground').dataset.state === 'ready', null, { timeout: 180_000 });
    await pages[folder].evaluate(() => navigator.serviceWorker.ready);
  }
  const v1 = `nucleus-app ${VERSION} ${site.url}v1/`;
  const v2 = `nucleus-app ${SIDE_VERSION} ${site.url}v2/`;
  // (The bundle's page registered its own, in its own folder.)
  const bundler = `nucleus-app ${VERSION} ${site.url}bundler/`;
  assert.deepEqual(await appCaches(pages.v1), { [v1]: [VERSION], [v2]: [SIDE_VERSION], [bundler]: [VERSION] });

  // Offline (every origin gone), each page loads from its own cache and runs its own version.
  await context.setOffline(true);
  for (const server of [site, cdn, models]) server.setOffline(true);
  try {
    for (const [folder, version] of [['v1', VERSION], ['v2', SIDE_VERSION]]) {
      await pages[folder].reload();
      await pages[folder].waitForFunction(() => document.querySelector('nucleus-playground').dataset.state === 'ready', null, { timeout: 180_000 });
      const loaded = await pages[folder].evaluate((url) => import(url).then((m) => m.VERSION), `${cdn.url}npm/${PACKAGE_NAME}@${version}/nucleus.js`);
      assert.equal(loaded, version, folder);
    }
  } finally {
    for (const server of [site, cdn, models]) server.setOffline(false);
    await context.setOffline(false);
  }

  // v1's folder upgrades to the next version: a new worker URL, its files stored whole, then the
  // folder's old cache dropped; v2's is untouched.
  await pages.v1.evaluate(async (url) => {
    const { registerOffline } = await import(url);
    const registration = await registerOffline('sw.js', { assets: new URL('./', url).href });
    await new Promise((resolve) => {
      const waiting = registration.installing ?? registration.waiting;
      if (!waiting || waiting.state === 'activated') resolve();
      else waiting.addEventListener('statechange', () => waiting.state === 'activated' && resolve());
    });
  }, `${cdn.url}npm/${PACKAGE_NAME}@${SIDE_VERSION}/nucleus.js`);
  assert.deepEqual(await appCaches(pages.v1),
    { [`nucleus-app ${SIDE_VERSION} ${site.url}v1/`]: [SIDE_VERSION], [v2]: [SIDE_VERSION], [bundler]: [VERSION] });
  for (const opened of Object.values(pages)) assert.deepEqual([...await violations(opened), ...opened.violations], []);
});
