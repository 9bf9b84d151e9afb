// The playground page in headless Chromium, driven like a person would: generate, click a token,
// move sliders, stop. Its only WebGPU adapter is SwiftShader, a CPU emulation, so the page runs
// the CPU engine (on both cores: the test server sends COOP and COEP) unless asked for the GPU.
// Screenshots go to test-output/.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { startServer, REPO, MODEL_SHA256, VERSION } from './server.mjs';
import { launch, open } from './browser.mjs';

const OUTPUT = path.join(REPO, 'test-output');
const reference = JSON.parse(readFileSync(path.join(REPO, 'tests/fixtures/smollm2-135m-instruct-q4_1.json'), 'utf8'));
const capital = reference.logit_cases.capital;
/** The committed trace of the greedy capital run (replayed by trace.test.mjs, read by the Rust tests). */
const TRACE_FIXTURE = path.join(REPO, 'www/traces/capital-greedy.json');

let server;
let context;
let page;

const state = () => page.evaluate(() => document.body.dataset.state);
const generateCalls = () => page.evaluate(() => Number(document.body.dataset.generateCalls));
/** The serious and critical violations axe-core finds on `target`, one line each. */
async function accessibilityViolations(target = page) {
  await target.addScriptTag({ path: path.join(REPO, 'node_modules/axe-core/axe.min.js') });
  const { violations } = await target.evaluate(() => window.axe.run(document, { resultTypes: ['violations'] }));
  return violations.filter((v) => ['serious', 'critical'].includes(v.impact))
    .map((v) => `${v.id} (${v.impact}): ${v.help}: ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join('; ')}`);
}
const chartSnapshot = () => page.evaluate(() => document.querySelector('#chart').innerHTML + document.querySelector('#whatif').textContent);

before(async () => {
  mkdirSync(OUTPUT, { recursive: true });
  server = await startServer();
  context = await launch();
  // Every text the load line shows, as it changes (the first test reads them).
  await context.addInitScript(() => {
    window.loadLabels = [];
    document.addEventListener('DOMContentLoaded', () => {
      const label = document.getElementById('load-label');
      new MutationObserver(() => window.loadLabels.push(label.textContent)).observe(label, { childList: true, characterData: true, subtree: true });
    });
  });
  page = await open(context, server.url);
  await page.screenshot({ path: path.join(OUTPUT, 'playground-loading.png') });
  await page.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: 120_000 });
});

after(async () => {
  await context?.close();
  await server?.close();
});

test('the page loads the model on the CPU engine, says why and what a GPU would give', async () => {
  assert.match(await page.textContent('#status'), /^SmolLM2-135M-Instruct · llama · Q4_1 · 98 MB · 49,152 tokens, loaded in .*, on the CPU\.$/);
  // As many threads as the load measured to help (cpu.test.mjs checks the measurement).
  const { threads } = await page.evaluate(() => window.playground.lm.info.backend);
  assert.equal(await page.textContent('[data-stat="runs on"]'), `the CPU engine, ${threads} thread${threads === 1 ? '' : 's'}`);
  assert.match(await page.textContent('[data-stat="WebGPU adapter"]'), /swiftshader.*\(a CPU emulation\)$/i);
  assert.match(await page.textContent('#backend-note'),
    /^Runs on the CPU \(\d+ threads?, WebAssembly relaxed SIMD\): the only WebGPU adapter \(swiftshader\) emulates a GPU on the CPU.*A hardware GPU runs it/);
  assert.equal(await page.inputValue('#backend-choice'), 'auto');
  assert.equal(await page.isEnabled('#generate'), true);
  // While it downloaded, the load line said what the model needs, from the file's first bytes,
  // beside what the device offers.
  const [labels, gib] = await page.evaluate(() => [window.loadLabels, navigator.deviceMemory]);
  const planned = labels.filter((text) => text.includes(' · needs '));
  assert.ok(planned.length > 0, labels.slice(0, 5).join('\n'));
  assert.match(planned[0], new RegExp('^Downloading SmolLM2-135M-Instruct \\(the default, 98 MB\\): [\\d.]+ of 98\\.4 MB · needs [\\d,]+ MB in this '
    + `tab for 8,192 positions \\(a tab holds 4,295 MB; the browser reports ${gib} GiB on this device\\)$`));
  await page.screenshot({ path: path.join(OUTPUT, 'playground-cpu-engine.png'), fullPage: true });
  assert.deepEqual(await accessibilityViolations(), [], 'axe-core on the page before a generation');
});

test('greedy tokens of a reference prompt stream as chips, and the inspector shows the reference top candidate', async () => {
  await page.check('input[name="mode"][value="raw"]');
  await page.fill('#prompt', capital.text);
  await page.click('[data-preset="greedy"]');
  await page.fill('#max-tokens', '3');
  // The prompt's progress bar shows at once, and ends at the prompt's length (on the CPU engine
  // the prompt takes a few milliseconds: an observer sees the bar shown).
  await page.evaluate(() => {
    const bar = document.getElementById('prefill');
    window.prefillShown = false;
    new MutationObserver(() => { window.prefillShown ||= !bar.hidden; }).observe(bar, { attributes: true });
  });
  await page.click('#generate');
  await page.waitForFunction(() => document.querySelectorAll('#tokens .token').length >= 1, null, { timeout: 300_000 });
  await page.screenshot({ path: path.join(OUTPUT, 'playground-mid-generation.png'), fullPage: true });
  await page.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: 300_000 });
  assert.equal(await page.isVisible('#prefill'), false);
  assert.equal(await page.evaluate(() => window.prefillShown), true, 'the prompt\'s progress was shown');
  assert.equal((await page.getAttribute('#prefill', 'data-reports')).split(',').at(-1), String(capital.ids.length));

  const chips = await page.$$eval('#tokens .token', (nodes) => nodes.map((n) => n.textContent));
  assert.deepEqual(chips, [' Paris', '.', '↵\n']);
  assert.equal(await page.textContent('[data-stat="finish reason"]'), 'length');
  assert.equal(await page.textContent('[data-stat="tokens generated"]'), '3');

  await page.click('#tokens .token >> nth=0');
  const first = await page.$eval('#chart .candidate[data-rank="1"]', (g) => ({ id: Number(g.dataset.id), label: g.querySelector('.label').textContent }));
  assert.equal(first.id, capital.top20[0].id);
  assert.equal(first.label, '1. ␣Paris', 'the space shown as ␣');
  assert.match(await page.textContent('#inspector-step'), /step 1 of 3/);
  await page.screenshot({ path: path.join(OUTPUT, 'playground-inspector.png'), fullPage: true });

  // Keys move from the focused chip: End to the last, ← back one, Home to the first.
  const focusedIndex = () => page.evaluate(() => document.activeElement.dataset.index);
  await page.focus('#tokens .token >> nth=1');
  await page.keyboard.press('End');
  assert.equal(await focusedIndex(), '2');
  assert.match(await page.textContent('#inspector-step'), /step 3 of 3/);
  await page.keyboard.press('ArrowLeft');
  assert.equal(await focusedIndex(), '1');
  await page.keyboard.press('Home');
  assert.equal(await focusedIndex(), '0');
  assert.match(await page.textContent('#inspector-step'), /step 1 of 3/);
});

/** Asserts `actual` equals `expected` in shape and text, and each number to within `tolerance`. */
function assertClose(actual, expected, tolerance, where = 'trace') {
  if (typeof expected === 'number') {
    assert.ok(typeof actual === 'number' && Math.abs(actual - expected) <= tolerance, `${where}: ${actual} vs ${expected}`);
  } else if (expected && typeof expected === 'object') {
    assert.deepEqual(Object.keys(actual ?? {}).sort(), Object.keys(expected).sort(), where);
    for (const key of Object.keys(expected)) assertClose(actual[key], expected[key], tolerance, `${where}.${key}`);
  } else {
    assert.equal(actual, expected, where);
  }
}

test('the run saves as a trace: the model digest, the candidates of each step, the committed trace', async () => {
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#export-trace')]);
  const saved = JSON.parse(readFileSync(await download.path(), 'utf8'));
  // It says which version recorded it: the package's, Cargo.toml's workspace version. (The
  // committed trace is kept without it, as a trace from before traces carried it.)
  const { generator, ...recorded } = saved;
  assert.equal(generator, `nucleus ${VERSION}`);
  if (process.env.NUCLEUS_UPDATE_FIXTURES) writeFileSync(TRACE_FIXTURE, `${JSON.stringify(recorded, null, 1)}\n`);
  assert.equal(saved.model.sha256, MODEL_SHA256, 'the digest the worker computed is the file\'s');
  assert.equal(saved.prompt, capital.text);
  assert.deepEqual(saved.steps.map((s) => s.token), [' Paris', '.', '\n']);
  assert.equal(saved.steps[0].candidates.ids.length, 64);
  // The first step's candidates are the reference's top 20, and their log-probabilities follow
  // from the logits and the log-sum-exp.
  const first = saved.steps[0];
  capital.top20.forEach(({ id, logit }, i) => {
    assert.equal(first.candidates.ids[i], id);
    assert.ok(Math.abs(first.candidates.logits[i] - logit) < 1e-3, `${id}: ${first.candidates.logits[i]} vs ${logit}`);
  });
  assert.ok(Math.abs(first.logprob - (first.candidates.logits[0] - first.logSumExp)) < 1e-9);
  // The same run gives the committed trace (numbers to 1e-4: another machine's SwiftShader).
  assertClose(recorded, JSON.parse(readFileSync(TRACE_FIXTURE, 'utf8')), 1e-4);
});

test('moving the temperature and top-p sliders redraws the chart without a new generation', async () => {
  const calls = await generateCalls();
  const before = await chartSnapshot();
  await page.fill('#knob-temperature', '1.5');
  const hot = await chartSnapshot();
  assert.notEqual(hot, before, 'the temperature changed the chart');
  await page.fill('#knob-topP', '0.5');
  const cut = await chartSnapshot();
  assert.notEqual(cut, hot, 'top-p changed the chart');
  assert.ok(await page.$('#chart line.top-p'), 'the top-p cut line is drawn');
  assert.match(await page.textContent('#whatif'), /What if/);
  assert.equal(await generateCalls(), calls, 'no generation ran');
  await page.screenshot({ path: path.join(OUTPUT, 'playground-what-if.png'), fullPage: true });
});

test('the chart explains itself: kept bars sum to 1, equal the sampler\'s, and the sentence quotes the chosen one', async () => {
  for (const [key, value] of Object.entries({ temperature: '0.7', topK: '10', topP: '1', minP: '0', typicalP: '1' })) {
    await page.fill(`#knob-${key}-number`, value);
  }
  await page.fill('#max-tokens', '2');
  await page.fill('#seed', '5');
  await page.click('#generate');
  await page.waitForFunction(() => document.body.dataset.state === 'ready' && document.querySelectorAll('#tokens .token').length === 2,
    null, { timeout: 300_000 });
  await page.click('#tokens .token >> nth=0');
  const rows = await page.$$eval('#chart .candidate', (nodes) => nodes.map((g) => ({
    kept: g.dataset.kept === 'true',
    finalP: Number(g.dataset.finalP),
    samplerP: g.dataset.samplerP === undefined ? null : Number(g.dataset.samplerP),
    value: g.querySelector('.value').textContent,
    chosen: Boolean(g.querySelector('.chosen-mark')),
  })));
  const kept = rows.filter((r) => r.kept);
  assert.equal(kept.length, 10, 'top-k 10 keeps 10');
  const sum = kept.reduce((total, r) => total + r.finalP, 0);
  assert.ok(Math.abs(sum - 1) < 1e-6, `the kept bars sum to ${sum}`);
  for (const r of kept) assert.ok(Math.abs(r.finalP - r.samplerP) < 1e-6, `chart ${r.finalP} vs the sampler's ${r.samplerP}`);
  const chosen = rows.find((r) => r.chosen);
  const quoted = chosen.value.split(' · ')[0];
  assert.match(quoted, /^0\.\d{4}$/);
  assert.ok((await page.textContent('#whatif')).includes(`p = ${quoted}`), 'the sentence quotes the chosen bar');
  assert.match(await page.textContent('#chart-rest'), /^Not drawn: the other 49,1\d\d tokens/);
  assert.equal(await page.isVisible('#chart-legend'), true);
  assert.deepEqual(await accessibilityViolations(), [], 'axe-core on the page after a generation');

  // Pointing at a token shows the model's alternatives for it.
  await page.hover('#tokens .token >> nth=0');
  assert.equal(await page.isVisible('#alternatives'), true);
  const alternatives = await page.$$eval('#alternatives li', (items) => items.map((li) => li.textContent));
  assert.equal(alternatives.length, 5);
  assert.match(alternatives[0], /^“␣Paris” 0\.\d{4}$/);
  await page.screenshot({ path: path.join(OUTPUT, 'playground-alternatives.png') });
  await page.mouse.move(0, 0);
  assert.equal(await page.isVisible('#alternatives'), false);

  // Clearing a box marks it, holds Generate, and leaves the output as it was.
  await page.fill('#max-tokens', '');
  assert.match(await page.textContent('#max-tokens-error'), /whole number from 1 to 2048/);
  assert.equal(await page.isEnabled('#generate'), false);
  assert.equal(await page.$$eval('#tokens .token', (nodes) => nodes.length), 2);
  assert.equal(await page.textContent('[data-stat="tokens generated"]'), '2');
  await page.fill('#max-tokens', '2');
  assert.equal(await page.isEnabled('#generate'), true);
});

test('the tokens of a stop string are shown as the stop, not as text', async () => {
  await page.click('[data-preset="greedy"]');
  await page.fill('#max-tokens', '4');
  await page.fill('#stop-strings', '.');
  await page.click('#generate');
  await page.waitForFunction(() => document.body.dataset.state === 'ready' && document.querySelector('[data-stat="finish reason"]'),
    null, { timeout: 300_000 });
  await page.fill('#stop-strings', '');
  assert.equal(await page.textContent('[data-stat="finish reason"]'), 'stop');
  const chips = await page.$$eval('#tokens .token', (nodes) => nodes.map((n) => [n.textContent, n.classList.contains('stop')]));
  assert.deepEqual(chips, [[' Paris', false], ['⏹ .', true]]);
  assert.match(await page.getAttribute('#tokens .token.stop', 'aria-label'), /part of the stop string "\."/);
});

test('Stop ends a run mid-generation and the page can generate again', async () => {
  await page.click('[data-preset="greedy"]');
  await page.fill('#max-tokens', '40');
  await page.click('#generate');
  await page.waitForFunction(() => document.querySelectorAll('#tokens .token').length >= 1, null, { timeout: 300_000 });
  await page.click('#stop');
  await page.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: 120_000 });
  assert.equal(await page.textContent('[data-stat="finish reason"]'), 'abort');
  const count = await page.$$eval('#tokens .token', (nodes) => nodes.length);
  assert.ok(count < 40, `${count} tokens`);
  assert.equal(await page.isEnabled('#generate'), true);
});

test('a fork continues from another candidate, reusing the cache; the branches switch; the time line shows the steps', async () => {
  await page.check('input[name="mode"][value="raw"]');
  await page.click('[data-preset="greedy"]');
  await page.fill('#prompt', capital.text);
  await page.fill('#max-tokens', '3');
  await page.click('#generate');
  await page.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: 300_000 });
  const chips = () => page.$$eval('#tokens .token', (nodes) => nodes.map((n) => n.textContent));
  assert.deepEqual(await chips(), [' Paris', '.', '↵\n']);

  // The time line: the prefill bar, then a bar per decode step; the cache grows a token a step.
  const bars = await page.$$eval('#timeline rect.bar', (nodes) => nodes.map((n) => [n.dataset.kind, Number(n.dataset.kvTokens)]));
  const n = capital.ids.length;
  assert.deepEqual(bars, [['prefill', n], ['decode', n + 1], ['decode', n + 2]]);
  // SmolLM2-135M's cache: 30 blocks, keys and values of 3 heads of 64, f32.
  const kv = await page.evaluate(() => window.playground.lm.info.kvBytesPerToken);
  assert.equal(kv, 30 * 2 * 3 * 64 * 4);
  const mb = (tokens) => (tokens * kv / 1e6).toFixed(2).replace('.', '\\.');
  // When the same prompt ran before (the earlier tests), all but its last token came from the cache.
  assert.match(await page.textContent('#timeline-summary'),
    new RegExp(`^Prefill ran (1 token in one pass \\(${n - 1} more were in the KV cache already\\)|${n} tokens in one pass): \\d+ ms, [\\d.]+ tok/s\\. `
      + `Decode ran 2 steps, one token per pass: [\\d.]+ tok/s\\. The KV cache grew from ${n} to ${n + 2} tokens \\(${mb(n)} MB to ${mb(n + 2)} MB\\)`));
  await page.screenshot({ path: path.join(OUTPUT, 'playground-timeline.png'), fullPage: true });

  // Fork at step 2 ('.') with its best other candidate.
  await page.click('#tokens .token >> nth=1');
  assert.match(await page.textContent('#fork-title'), /^Fork at step 2: continue with another token instead of “\.”/);
  const alternative = await page.$eval('#fork-choices button', (b) => ({ id: Number(b.dataset.id), text: b.textContent }));
  const calls = await generateCalls();
  await page.click('#fork-choices button >> nth=0');
  await page.waitForFunction((c) => Number(document.body.dataset.generateCalls) > c && document.body.dataset.state === 'ready',
    calls, { timeout: 300_000 });
  const forked = await page.evaluate(() => window.playground.steps.map((s) => ({ id: s.id, index: s.index, forced: Boolean(s.forced) })));
  assert.equal(forked.length, 3);
  assert.deepEqual(forked[0], { id: capital.greedy32[0], index: 0, forced: false }, 'the tokens before the fork are the run\'s');
  assert.deepEqual(forked[1], { id: alternative.id, index: 1, forced: true }, 'the fork\'s first token is the one clicked');
  assert.deepEqual(forked[2].index, 2);
  assert.equal(await page.getAttribute('#tokens .token >> nth=1', 'class'), 'token forced');
  // The engine kept the prompt and ' Paris' in its cache and ran only the new token.
  const report = await page.evaluate(() => window.playground.prefillReports.at(-1));
  assert.deepEqual(report, { done: n + 2, total: n + 2, cached: n + 1 });
  assert.equal(await page.textContent('[data-stat="tokens generated"]'), '3');

  // The tree: the first run and its fork; each shows its own chips.
  const branches = () => page.$$eval('#branches .branch', (nodes) => nodes.map((b) => [b.textContent, b.getAttribute('aria-pressed')]));
  const tree = await branches();
  assert.equal(tree.length, 2);
  assert.match(tree[0][0], /^the first run · ␣Paris\.\\n$/);
  assert.equal(tree[1][1], 'true');
  assert.ok(tree[1][0].startsWith(`step 2: “${alternative.text.split('”')[0].slice(1)}” instead of “.”`), tree[1][0]);
  assert.ok(await page.$('#branches ul .branch'), 'the fork is nested under the run it came from');
  await page.screenshot({ path: path.join(OUTPUT, 'playground-fork.png'), fullPage: true });
  await page.click('#branches .branch >> nth=0');
  assert.deepEqual(await chips(), [' Paris', '.', '↵\n']);
  assert.equal((await branches())[0][1], 'true');
  assert.deepEqual(await accessibilityViolations(), [], 'axe-core with the branches and the time line');
});

test('the logit lens of a step: one row per layer, the last the step itself; " Paris" wins only near the top', async () => {
  // The first run of the last test is shown: ' Paris', '.', '↵'.
  await page.click('#tokens .token >> nth=0');
  await page.click('#lens-panel summary');
  await page.click('#lens-run');
  await page.waitForSelector('#lens table', { timeout: 300_000 });
  await page.waitForFunction(() => document.body.dataset.state === 'ready');
  const heads = await page.$$eval('#lens thead th', (nodes) => nodes.map((n) => n.textContent));
  assert.equal(heads[1], '␣Paris', 'the step\'s own best candidate is the first column');
  assert.equal(await page.$$eval('#lens tbody tr', (rows) => rows.length), 30);
  // The last layer is the step's distribution: its first cell is " Paris"'s probability in the chart (T = 1, greedy pale bar).
  const lastP = Number(await page.$eval('#lens tbody tr:last-child td[data-p]', (td) => td.dataset.p));
  const chartP = Number(await page.$eval('#chart .candidate[data-rank="1"]', (g) => g.dataset.p));
  assert.ok(Math.abs(lastP - chartP) < 1e-4, `${lastP} vs the chart's ${chartP}`);
  const firstTop = await page.textContent('#lens tbody tr:first-child .lens-top');
  assert.ok(!firstTop.startsWith('␣Paris '), `layer 1 already says ${firstTop}`);
  const n = capital.ids.length;
  assert.match(await page.textContent('#lens-summary'),
    new RegExp(`^“␣Paris” is the top prediction (from layer \\d+ of 30 on|only at the last layer) \\(p 0\\.\\d{3} at the end\\)\\. The lens ran 1 token; the KV cache held the other ${n - 1}; it ran on the CPU, where the rows already are\\.$`));
  await page.screenshot({ path: path.join(OUTPUT, 'playground-logit-lens.png'), fullPage: true });
  // Another step clears it.
  await page.click('#tokens .token >> nth=1');
  assert.equal(await page.$('#lens table'), null);
});

test('beam search on the prompt: its tree of kept, finished and pruned sequences, and its hypotheses', async () => {
  await page.click('#beam-panel summary');
  await page.selectOption('#beam-width', '2');
  await page.fill('#beam-tokens', '3');
  await page.click('#beam-run');
  await page.waitForSelector('#beam-tree svg', { timeout: 300_000 });
  await page.waitForFunction(() => document.body.dataset.state === 'ready');
  const nodes = await page.$$eval('#beam-tree .beam-node', (gs) => gs.map((g) => ({ status: g.dataset.status, step: Number(g.dataset.step),
    token: g.dataset.token, label: g.querySelector('text').textContent })));
  assert.equal(nodes[0].status, 'root');
  for (let step = 1; step <= 3; step += 1) {
    const atStep = nodes.filter((node) => node.step === step);
    assert.ok(atStep.length <= 2 * 3, `step ${step}: ${atStep.length} considered (beams × (1 + end tokens))`);
    assert.ok(atStep.filter((node) => node.status === 'kept').length <= 2);
  }
  // The greedy first token is among the first step's kept beams.
  assert.ok(nodes.some((node) => node.step === 1 && node.status === 'kept' && Number(node.token) === capital.greedy32[0]));
  assert.ok(nodes.some((node) => node.status === 'pruned'), 'some sequences were pruned');
  const hypotheses = await page.$$eval('#beam-hypotheses li', (items) => items.map((li) => li.textContent));
  assert.equal(hypotheses.length, 2);
  assert.match(hypotheses[0], /^␣Paris.* \(score -?\d+\.\d{3}, log p -?\d+\.\d{3}, (length|eos)\)$/);
  await page.screenshot({ path: path.join(OUTPUT, 'playground-beams.png'), fullPage: true });
  assert.deepEqual(await accessibilityViolations(), [], 'axe-core with the lens and the beam tree');
});

test('score a text: its tokens coloured by rank with a legend, a token\'s alternatives from the keyboard, a run continued from it', async () => {
  const text = 'The capital of France is Paris. The capital of Germany is Berlin.';
  await page.click('#score-panel summary');
  await page.fill('#score-text', text);
  await page.click('#score-run');
  await page.waitForSelector('#score-tokens .token', { timeout: 120_000 });
  await page.waitForFunction(() => document.body.dataset.state === 'ready');
  const tokens = await page.$$eval('#score-tokens .token', (nodes) => nodes.map((n) => ({ text: n.textContent,
    rank: n.dataset.rank === undefined ? null : Number(n.dataset.rank), classes: [...n.classList] })));
  assert.equal(tokens.map((t) => t.text).join(''), text);
  assert.equal(tokens[0].rank, null, 'nothing predicts the first token');
  assert.ok(tokens[0].classes.includes('rank-none'));
  // What SmolLM2 makes of it (as `nucleus score` says natively): the answers are its first guesses.
  const rankOf = (piece) => tokens.find((t) => t.text === piece).rank;
  assert.deepEqual([rankOf(' Paris'), rankOf(' Berlin'), rankOf(' Germany')], [1, 1, 6]);
  const bucket = (rank) => ['rank-1', 'rank-10', 'rank-100', 'rank-1000'][[1, 10, 100, 1000].findIndex((b) => rank <= b)] ?? 'rank-beyond';
  for (const token of tokens.slice(1)) assert.ok(token.classes.includes(bucket(token.rank)), `${token.text}: ${token.classes}`);
  const legend = await page.$$eval('#score-legend li', (items) => items.map((li) => li.textContent));
  assert.deepEqual(legend.map((item) => item.split(':')[0]), ['top 1', 'top 10', 'top 100', 'top 1000', 'beyond']);
  assert.equal(legend.reduce((sum, item) => sum + Number(item.split(': ')[1]), 0), tokens.length - 1);
  assert.match(await page.textContent('#score-status'), /^14 tokens: log-likelihood -\d+\.\d\d nats, perplexity \d+\.\d\d \(\d+ ms\)\.$/);
  // From the keyboard: a token's alternatives, then the next one's.
  await page.focus('#score-tokens .token >> nth=10');
  assert.match(await page.textContent('#score-detail p'), /^“␣Germany”, token 11: rank 6, p \d+\.\d %/);
  assert.equal(await page.$$eval('#score-detail .chart svg text.label', (labels) => labels.length), 8, 'its 8 alternatives, itself among them');
  await page.keyboard.press('ArrowRight');
  assert.match(await page.textContent('#score-detail p'), /^“␣is”, token 12: rank 1/);
  await page.screenshot({ path: path.join(OUTPUT, 'playground-score.png'), fullPage: true });
  await page.locator('#score-panel').screenshot({ path: path.join(OUTPUT, 'score-panel.png') });
  assert.deepEqual(await accessibilityViolations(), [], 'axe-core with a scored text');
  // Continue from " Germany": the text up to it is the prompt, its first 10 tokens from the cache.
  await page.click('#score-tokens .token >> nth=10');
  await page.click('#score-continue');
  await page.waitForFunction(() => document.body.dataset.state === 'ready' && window.playground.shownRun?.result, null, { timeout: 120_000 });
  const run = await page.evaluate(() => ({ prompt: window.playground.shownRun.request.prompt,
    cached: window.playground.shownRun.result.usage.cachedPromptTokens }));
  assert.deepEqual(run, { prompt: 'The capital of France is Paris. The capital of Germany', cached: 10 });
  assert.ok(await page.$$eval('#tokens .token', (chips) => chips.length) > 0);
});

test('attention: one layer over a text as a heatmap, a row per position summing to 1; a token picked shades what it attends to', async () => {
  const text = 'The capital of France is Paris. The capital of Germany is Berlin.';
  await page.click('#attention-panel summary');
  await page.fill('#attention-text', text);
  await page.fill('#attention-layer', '');
  await page.fill('#attention-head', '');
  await page.click('#attention-run');
  await page.waitForSelector('#attention-map svg', { timeout: 120_000 });
  await page.waitForFunction(() => document.body.dataset.state === 'ready');
  assert.match(await page.textContent('#attention-status'),
    /^Layer 30, the mean of its 9 heads: 14 positions, each row sums to 1\. Each position sees every position before it\./);
  const rows = await page.$$eval('#attention-map .attention-row', (groups) => groups.map((g) => ({ position: Number(g.dataset.position),
    weights: [...g.querySelectorAll('.attention-cell')].map((cell) => Number(cell.dataset.weight)) })));
  assert.deepEqual(rows.map((row) => row.position), [...Array(14).keys()]);
  for (const row of rows) {
    assert.equal(row.weights.length, row.position + 1, `row ${row.position}: nothing past its own position`);
    const sum = row.weights.reduce((a, b) => a + b, 0);
    assert.ok(Math.abs(sum - 1) < 1e-3, `row ${row.position} sums to ${sum}`);
  }
  // The last token is picked first; the text is shaded by its row.
  assert.match(await page.textContent('#attention-detail'), /^“\.” \(token 14\) attends most to /);
  await page.focus('#attention-text-view .token >> nth=12');
  assert.match(await page.textContent('#attention-detail'), /^“␣Berlin” \(token 13\) attends most to “.*” \(\d+, \d+\.\d %\)/);
  assert.equal(await page.getAttribute('#attention-text-view .token >> nth=12', 'aria-pressed'), 'true');
  // One head of the first layer.
  await page.fill('#attention-layer', '1');
  await page.fill('#attention-head', '2');
  await page.click('#attention-run');
  await page.waitForFunction(() => /^Layer 1, head 2 of 9/.test(document.querySelector('#attention-status').textContent), null, { timeout: 120_000 });
  await page.screenshot({ path: path.join(OUTPUT, 'playground-attention.png'), fullPage: true });
  await page.locator('#attention-panel').screenshot({ path: path.join(OUTPUT, 'attention-panel.png') });
  assert.deepEqual(await accessibilityViolations(), [], 'axe-core with an attention heatmap');
  // A layer the model does not have is refused by name; the heatmap shown stays.
  await page.fill('#attention-layer', '31');
  await page.click('#attention-run');
  await page.waitForSelector('#attention-error:not([hidden])');
  assert.match(await page.textContent('#attention-error'), /\(bad-options\): .*layer.*1\.\.=30/);
  assert.ok(await page.$('#attention-map svg'));
});

test('Step: five single tokens, each inspected as it comes, the run growing by one; the entropy track of every step', async () => {
  await page.check('input[name="mode"][value="raw"]');
  await page.fill('#prompt', capital.text);
  await page.click('[data-preset="greedy"]');
  for (let n = 1; n <= 5; n += 1) {
    await page.click('#step-one');
    await page.waitForFunction((count) => document.body.dataset.state === 'ready'
      && window.playground.shownRun?.steps.length === count && window.playground.shownRun.entropy?.length === count, n, { timeout: 120_000 });
    assert.equal(await page.$$eval('#tokens .token', (chips) => chips.length), n, `step ${n}: the chips grow by one`);
    assert.equal(await page.$eval('#tokens .token.selected', (chip) => Number(chip.dataset.index)), n - 1, 'the new step is inspected');
    assert.match(await page.textContent('#inspector-step'), new RegExp(`step ${n}\\b`));
  }
  const run = await page.evaluate(() => ({ ids: window.playground.shownRun.steps.map((s) => s.id),
    prefill: window.playground.shownRun.timing.prefill }));
  assert.deepEqual(run.ids, capital.greedy32.slice(0, 5), 'stepping greedily gives the greedy tokens');
  // The fifth step's context: the prompt and four steps, all but the last token in the KV cache.
  assert.deepEqual([run.prefill.total, run.prefill.cached], [capital.ids.length + 4, capital.ids.length + 3]);
  // The entropy track: one column per step; a greedy step's top-1 p is the chosen token's p.
  const columns = await page.$$eval('#entropy-track .entropy-step', (gs) => gs.map((g) => ({
    step: Number(g.dataset.step), entropy: Number(g.dataset.entropy), top1: Number(g.dataset.top1) })));
  assert.deepEqual(columns.map((c) => c.step), [0, 1, 2, 3, 4]);
  const steps = await page.evaluate(() => window.playground.shownRun.steps.map((s) => s.logprob));
  columns.forEach((column, i) => {
    assert.ok(column.entropy >= 0, `step ${i + 1}: entropy ${column.entropy}`);
    assert.ok(Math.abs(column.top1 - Math.exp(steps[i])) < 1e-3, `step ${i + 1}: top-1 p ${column.top1} vs ${Math.exp(steps[i])}`);
  });
  assert.match(await page.textContent('#entropy-summary'), /^The model hesitated most at step \d \(“.*”: \d+\.\d\d nats, top-1 p \d+\.\d %\)/);
  // What-if works on the new step at once: the chart is the fifth step's.
  assert.ok(await page.$('#chart svg'), 'the chart of the new step');
  await page.screenshot({ path: path.join(OUTPUT, 'playground-steps.png'), fullPage: true });
  await page.locator('.panel.output').screenshot({ path: path.join(OUTPUT, 'steps.png') });
});

test('compare: the prompt at T = 0, 0.7 and 1.5 side by side, the T = 0 column the greedy reference', async () => {
  // The capital prompt, greedy settings and 3 tokens, from the tests before.
  await page.click('#compare-panel summary');
  await page.click('#compare-run');
  await page.waitForFunction(() => document.body.dataset.state === 'ready' && /^Seed/.test(document.querySelector('#compare-status').textContent),
    null, { timeout: 300_000 });
  const headings = await page.$$eval('#compare-columns .column h3', (nodes) => nodes.map((n) => n.textContent));
  assert.deepEqual(headings, ['T = 0', 'T = 0.7', 'T = 1.5']);
  const ids = await page.$$eval('#compare-columns .column', (columns) => columns.map((c) => [...c.querySelectorAll('.token')].map((t) => Number(t.dataset.id))));
  assert.deepEqual(ids[0], capital.greedy32.slice(0, 3));
  assert.ok(ids.every((column) => column.length === 3), JSON.stringify(ids));
  assert.ok(await page.$('#compare-columns .column:nth-of-type(3) .chart svg'), 'each column draws its chart');
  // A chip of a column shows its step in that column.
  await page.click('#compare-columns .column:nth-of-type(2) .token >> nth=1');
  assert.match(await page.textContent('#compare-columns .column:nth-of-type(2) .whatif'), /^Step 2: chose/);
  await page.screenshot({ path: path.join(OUTPUT, 'playground-compare.png'), fullPage: true });
});

/**
 * A raw prompt whose greedy continuation partly repeats it: prompt lookup drafts from it, and the
 * model accepts some drafted tokens and rejects others (" 5," is drafted where it counts on).
 */
const REPEATING = '1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 5,';

test('speculative decoding: the ledger shows each pass\'s draft, accepted green and rejected red, and plain decoding gives the same tokens', async () => {
  await page.check('input[name="mode"][value="raw"]');
  await page.click('[data-preset="greedy"]');
  await page.fill('#prompt', REPEATING);
  await page.fill('#max-tokens', '10');
  await page.check('#speculative');
  await page.fill('#max-draft', '4');
  await page.click('#generate');
  await page.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: 300_000 });
  const ids = await page.evaluate(() => window.playground.steps.map((s) => s.id));
  assert.equal(ids.length, 10);
  const passes = await page.$$eval('#ledger .ledger-pass', (items) => items.map((li) => ({
    first: Number(li.dataset.first),
    accepted: Number(li.dataset.accepted),
    drafted: [...li.querySelectorAll('.draft:not(.added)')].map((c) => ({ id: Number(c.dataset.id), verdict: c.dataset.verdict })),
    added: li.querySelector('.draft.added') ? Number(li.querySelector('.draft.added').dataset.id) : null,
  })));
  assert.ok(passes.length > 0, 'the repeating prompt gave drafts');
  for (const pass of passes) {
    const verdicts = pass.drafted.map((d) => d.verdict);
    // The accepted drafts are the run's next tokens; then one rejected (and replaced) or none.
    assert.deepEqual(verdicts.slice(0, pass.accepted), Array(pass.accepted).fill('accepted'), JSON.stringify(pass));
    assert.deepEqual(pass.drafted.slice(0, pass.accepted).map((d) => d.id), ids.slice(pass.first, pass.first + pass.accepted));
    if (pass.added !== null) assert.equal(pass.added, ids[pass.first + pass.accepted]);
    if (pass.accepted < pass.drafted.length) {
      assert.equal(verdicts[pass.accepted], 'rejected');
      assert.ok(verdicts.slice(pass.accepted + 1).every((v) => v === 'not_reached'));
      if (pass.added !== null) assert.notEqual(pass.added, pass.drafted[pass.accepted].id, 'the sampler drew another token');
    }
  }
  const accepted = passes.reduce((n, pass) => n + pass.accepted, 0);
  assert.ok(accepted > 0, JSON.stringify(passes));
  assert.ok(passes.some((pass) => pass.accepted < pass.drafted.length), `some draft was rejected: ${JSON.stringify(passes)}`);
  // The colours: accepted green, rejected red (and struck through).
  const colour = (verdict) => page.evaluate((v) => {
    const chip = document.querySelector(`#ledger .draft.${v}`);
    return chip && getComputedStyle(chip).borderTopColor;
  }, verdict);
  assert.equal(await colour('accepted'), 'rgb(46, 157, 79)');
  assert.equal(await colour('rejected'), 'rgb(210, 58, 58)');
  assert.match(await page.textContent('[data-stat="speculation"]'), new RegExp(`^${accepted} of \\d+ drafted tokens accepted \\(\\d+ %\\), [\\d.]+ tokens/pass$`));
  assert.match(await page.textContent('#ledger-summary'), new RegExp(`^${passes.length} of \\d+ decode passes verified a draft: ${accepted} of \\d+ drafted tokens accepted`));
  // The time line has a bar per pass: a pass's tokens share one.
  const bars = await page.$$eval('#timeline rect.bar', (nodes) => nodes.length);
  const decodePasses = ids.length - 1 - accepted;
  assert.equal(bars, 1 + decodePasses);
  assert.match(await page.textContent('#timeline-summary'),
    new RegExp(`Decode ran ${ids.length - 1} tokens in ${decodePasses} passes \\(speculative: [\\d.]+ tokens per pass\\)`));
  await page.screenshot({ path: path.join(OUTPUT, 'playground-speculative.png'), fullPage: true });

  // The same request without speculation: the same tokens, one per pass.
  await page.click('#ledger-compare');
  await page.waitForFunction(() => document.body.dataset.state === 'ready' && /same tokens/.test(document.querySelector('#ledger-compare-status').textContent),
    null, { timeout: 300_000 });
  assert.match(await page.textContent('#ledger-compare-status'),
    /^Without speculation: [\d.]+ tok\/s, 1\.00 tokens per pass\. With: [\d.]+ tok\/s, [\d.]+ tokens per pass\. The same tokens: yes\.$/);
  assert.deepEqual(await accessibilityViolations(), [], 'axe-core with the ledger');
  await page.uncheck('#speculative');
});

/**
 * A regex-constrained seeded run, and the tokens the same request gives natively (the CLI on
 * lavapipe: `nucleus generate --prompt 'My phone number is' --regex '\d{3}-\d{4}' --temperature 1
 * --seed 7 --max-tokens 12 --json`: "100-8539", finish reason stop).
 */
const PHONE = { prompt: 'My phone number is', pattern: String.raw`\d{3}-\d{4}`, seed: 7, native: [33, 32, 32, 29, 40, 37, 35, 41] };

test('structured output: a regex-constrained run matches it, gives the native tokens, and the inspector strikes the forbidden candidates', async () => {
  await page.check('input[name="mode"][value="raw"]');
  await page.click('[data-preset="greedy"]');
  await page.fill('#knob-temperature-number', '1');
  await page.fill('#prompt', PHONE.prompt);
  await page.fill('#max-tokens', '12');
  await page.fill('#seed', String(PHONE.seed));
  await page.selectOption('#response-format', 'regex');
  assert.equal(await page.inputValue('#format-text'), PHONE.pattern, 'the example pattern');
  await page.click('#generate');
  await page.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: 300_000 });
  const ids = await page.evaluate(() => window.playground.steps.map((s) => s.id));
  assert.deepEqual(ids, PHONE.native, 'the same tokens as natively');
  const text = await page.evaluate(() => window.playground.shownRun.result.text);
  assert.match(text, /^\d{3}-\d{4}$/);
  assert.equal(await page.textContent('[data-stat="finish reason"]'), 'stop');

  // A step whose chart holds candidates the grammar allowed and ones it forbade: the model's own
  // candidates, the forbidden ones struck through.
  await page.click('#tokens .token >> nth=0');
  const bars = await page.$$eval('#chart .candidate', (gs) => gs.length);
  const index = await page.evaluate((n) => window.playground.steps.findIndex((s) => {
    const shown = s.top.slice(0, n).map((c) => s.constraint.forbidden.includes(c.id));
    return shown.includes(true) && shown.includes(false);
  }), bars);
  assert.ok(index >= 0, 'a step with allowed and forbidden candidates in its chart');
  await page.click(`#tokens .token >> nth=${index}`);
  const rows = await page.$$eval('#chart .candidate', (gs) => gs.map((g) => ({
    id: Number(g.dataset.id), masked: g.dataset.masked === 'true', kept: g.dataset.kept === 'true', finalP: Number(g.dataset.finalP),
  })));
  const step = await page.evaluate((i) => window.playground.steps[i], index);
  assert.deepEqual(rows.map((r) => r.id), step.top.slice(0, rows.length).map((c) => c.id), 'the chart keeps the model\'s order');
  for (const row of rows) {
    assert.equal(row.masked, step.constraint.forbidden.includes(row.id), JSON.stringify(row));
    // The what-if re-applies the mask: nothing is left of a forbidden candidate.
    if (row.masked) assert.deepEqual([row.kept, row.finalP], [false, 0], JSON.stringify(row));
  }
  assert.ok(rows.some((r) => r.masked) && rows.some((r) => !r.masked));
  const forks = await page.$$eval('#fork-choices button', (bs) => bs.map((b) => Number(b.dataset.id)));
  assert.ok(forks.length > 0 && forks.every((id) => !step.constraint.forbidden.includes(id)), 'no fork to a forbidden token');
  const link = new URL(page.url()).searchParams;
  assert.deepEqual([link.get('responseFormat'), link.get('format')], ['regex', PHONE.pattern], 'the format is in the link');
  assert.match(await page.textContent('#chart-mask'),
    /^The response format allowed [\d,]+ tokens here and forbade \d+ of the candidates drawn \(struck through\)\. The grammar removed 0\.\d{3} of the model's probability before temperature\.$/);
  await page.screenshot({ path: path.join(OUTPUT, 'playground-structured.png'), fullPage: true });

  // A schema that is not JSON is caught in the form; the engine names a bad pattern.
  await page.selectOption('#response-format', 'json_schema');
  await page.fill('#format-text', '{ not json');
  assert.equal(await page.isEnabled('#generate'), false);
  await page.selectOption('#response-format', 'regex');
  await page.fill('#format-text', '(unclosed');
  await page.click('#generate');
  await page.waitForSelector('#form-error:not([hidden])');
  assert.match(await page.textContent('#form-error'), /responseFormat: the regex does not compile/);
  await page.selectOption('#response-format', '');
  await page.click('[data-preset="greedy"]');
});

test('a conversation: the second turn prefills only the new message, and each answer keeps its inspector', async () => {
  const ready = () => page.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: 300_000 });
  const prefill = async () => {
    const [, total, cached] = /^[\d.]+ tok\/s \((\d+) prompt tokens(?:, (\d+) cached)?\)$/.exec(await page.textContent('[data-stat="prefill"]'));
    return { total: Number(total), cached: Number(cached ?? 0) };
  };
  await page.check('input[name="mode"][value="chat"]');
  assert.equal(await page.isVisible('#system-prompt'), true);
  await page.click('[data-preset="greedy"]');
  await page.fill('#max-tokens', '3');
  await page.fill('#prompt', 'What is 2+2?');
  await page.click('#generate');
  await ready();
  const first = await prefill();
  assert.deepEqual(await page.$$eval('#conversation li', (items) => items.map((li) => li.className)), ['user', 'assistant']);
  assert.equal(await page.inputValue('#prompt'), '', 'the message box is emptied for the next one');
  assert.equal(await page.isEnabled('#generate'), false, 'nothing to send yet');

  await page.fill('#prompt', 'And 3+3?');
  await page.click('#generate');
  await ready();
  const second = await prefill();
  assert.ok(second.cached >= first.total && second.cached < second.total, `${JSON.stringify(second)} after ${JSON.stringify(first)}`);
  const reports = (await page.getAttribute('#prefill', 'data-reports')).split(',').map(Number);
  assert.equal(reports.at(-1), second.total);
  assert.equal(await page.$$eval('#conversation li', (items) => items.length), 4);
  await page.screenshot({ path: path.join(OUTPUT, 'playground-chat.png'), fullPage: true });

  // A cold run of the same conversation (the cache first holding something else) gives the
  // cached turn's first-step logits.
  const { warm, cold, coldCached } = await page.evaluate(async () => {
    const { lm, turns } = window.playground;
    await lm.generate({ prompt: 'Something else entirely', maxTokens: 1 }).result;
    const messages = turns.slice(0, 3).map(({ role, content }) => ({ role, content }));
    const gen = lm.generate({ messages, maxTokens: 1, temperature: 0, topLogprobs: 5 });
    let step;
    for await (const s of gen) step = s;
    return { warm: turns[3].run.steps[0].top.slice(0, 5), cold: step.top, coldCached: (await gen.result).usage.cachedPromptTokens };
  });
  assert.equal(coldCached, 0);
  assert.deepEqual(cold.map((c) => c.id), warm.map((c) => c.id));
  const worst = Math.max(...cold.map((c, i) => Math.abs(c.logit - warm[i].logit)));
  assert.ok(worst < 1e-3, `the cached turn's logits differ from a cold run's by ${worst}`);

  // The first answer's chips and stats come back with its button.
  await page.click('#conversation li.assistant >> nth=0 >> button');
  assert.equal(await page.$$eval('#tokens .token', (nodes) => nodes.length), 3);
  assert.deepEqual(await prefill(), first);
  assert.match(await page.textContent('#inspector-step'), /step 3 of 3/);
  await page.click('#new-chat');
  assert.equal(await page.isVisible('#conversation'), false);
  await page.check('input[name="mode"][value="raw"]');
});

test('on the GPU chosen under "Runs on": a lost device offers to reload the model, keeping the prompt and settings', async () => {
  // The person picks the GPU: the model loads again there (the CPU one works until then).
  await page.selectOption('#backend-choice', 'webgpu');
  await page.waitForFunction(() => document.querySelector('[data-stat="runs on"]')?.textContent === 'WebGPU'
    && !document.getElementById('model-picker').dataset.loading, null, { timeout: 120_000 });
  assert.match(await page.textContent('#status'), /, on the GPU\.$/);
  assert.match(await page.textContent('#backend-note'), /^Runs on WebGPU: asked for .*emulates the GPU on the CPU: expect about a token a second; “CPU” is several times faster\.$/);
  assert.match(page.url(), /backend=webgpu/);
  await page.check('input[name="mode"][value="raw"]');
  await page.fill('#prompt', capital.text);
  await page.click('[data-preset="greedy"]');
  await page.fill('#max-tokens', '2');
  await page.evaluate(() => window.playground.lm.loseDeviceForTesting());
  await page.click('#generate');
  await page.waitForSelector('#reload-model', { state: 'visible', timeout: 120_000 });
  assert.match(await page.textContent('#form-error'), /^The model stopped working \(device-lost\).*Your prompt and settings are kept\.$/);
  await page.screenshot({ path: path.join(OUTPUT, 'playground-device-lost.png'), fullPage: true });
  await page.click('#reload-model');
  await page.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: 120_000 });
  assert.equal(await page.inputValue('#prompt'), capital.text);
  assert.equal(await page.inputValue('#max-tokens'), '2');
  await page.click('#generate');
  await page.waitForFunction(() => document.body.dataset.state === 'ready' && document.querySelectorAll('#tokens .token').length === 2,
    null, { timeout: 300_000 });
  assert.deepEqual(await page.$$eval('#tokens .token', (nodes) => nodes.map((n) => n.textContent)), [' Paris', '.']);
  // Back to "Auto": the CPU engine again, for the tests after this one.
  await page.selectOption('#backend-choice', 'auto');
  await page.waitForFunction(() => /^the CPU engine/.test(document.querySelector('[data-stat="runs on"]')?.textContent)
    && !document.getElementById('model-picker').dataset.loading, null, { timeout: 120_000 });
});

test('at 390 px the page has no horizontal scroll, and the dark scheme passes the audit too', async () => {
  await page.emulateMedia({ colorScheme: 'dark' });
  assert.equal(await page.evaluate(() => getComputedStyle(document.documentElement).backgroundColor), 'rgb(22, 23, 27)');
  assert.deepEqual(await accessibilityViolations(), [], 'axe-core in the dark scheme');
  await page.screenshot({ path: path.join(OUTPUT, 'playground-dark.png'), fullPage: true });
  await page.setViewportSize({ width: 390, height: 844 });
  for (const scheme of ['dark', 'light']) {
    await page.emulateMedia({ colorScheme: scheme });
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `${overflow} px wider than the screen (${scheme})`);
    await page.screenshot({ path: path.join(OUTPUT, `playground-phone-${scheme}.png`), fullPage: true });
  }
  await page.setViewportSize({ width: 1280, height: 900 });
});

test('the settings live in the URL and in localStorage, and a bad box or link value is reported, not used', async () => {
  // In a browser without WebGPU too (the CPU engine runs the model there).
  const plain = await launch({ webgpu: false });
  try {
    const linked = await open(plain, `${server.url}?mode=raw&prompt=${encodeURIComponent('Hello there')}&temperature=0.35&seed=77&maxTokens=12`);
    await linked.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: 120_000 });
    const fields = () => linked.evaluate(() => ({
      mode: document.querySelector('input[name="mode"]:checked').value,
      prompt: document.querySelector('#prompt').value,
      temperature: document.querySelector('#knob-temperature-number').value,
      topP: document.querySelector('#knob-topP-number').value,
      seed: document.querySelector('#seed').value,
      maxTokens: document.querySelector('#max-tokens').value,
    }));
    assert.deepEqual(await fields(), { mode: 'raw', prompt: 'Hello there', temperature: '0.35', topP: '0.9', seed: '77', maxTokens: '12' });
    assert.equal(await linked.isVisible('#settings-error'), false);

    // An exact value typed in a knob's box stays exact, and a reload without the query keeps it.
    await linked.fill('#knob-topP-number', '0.83');
    await linked.goto(server.url);
    await linked.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: 120_000 });
    assert.deepEqual(await fields(), { mode: 'raw', prompt: 'Hello there', temperature: '0.35', topP: '0.83', seed: '77', maxTokens: '12' });
    assert.match(linked.url(), /topP=0\.83/);

    // A bad box is marked beside it with the reason; nothing else changes.
    await linked.fill('#max-tokens', '');
    assert.equal(await linked.getAttribute('#max-tokens', 'aria-invalid'), 'true');
    assert.match(await linked.textContent('#max-tokens-error'), /whole number from 1 to 2048/);
    await linked.fill('#max-tokens', '20');
    assert.equal(await linked.isVisible('#max-tokens-error'), false);

    // A link with an unknown key and a bad value: both reported; the bad one keeps its value.
    await linked.goto(`${server.url}?temperature=hot&bogus=1`);
    await linked.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: 120_000 });
    const report = await linked.textContent('#settings-error');
    assert.match(report, /temperature=hot \(must be a number from 0 to 2/);
    assert.match(report, /bogus \(not a setting\)/);
    assert.equal((await fields()).temperature, '0.35');
    await linked.screenshot({ path: path.join(OUTPUT, 'playground-bad-link.png') });
  } finally {
    await plain.close();
  }
});

test('without WebGPU the playground runs end to end on the CPU engine', async () => {
  const plain = await launch({ webgpu: false });
  try {
    const noGpu = await open(plain, server.url);
    await noGpu.waitForFunction(() => document.body.dataset.state === 'ready', null, { timeout: 120_000 });
    assert.match(await noGpu.textContent('[data-stat="runs on"]'), /^the CPU engine, \d+ threads?$/);
    assert.equal(await noGpu.textContent('[data-stat="WebGPU adapter"]'), 'none');
    // Threaded where the page shares memory (Chromium: the relaxed-SIMD build), else one thread.
    // The threads kept are those the worker's timing found worth it: one of the threaded build's,
    // saying so, when a busy machine made more slower (seen once in CI).
    const note = await noGpu.textContent('#backend-note');
    assert.match(note, /^Runs on the CPU \((\d+ threads, WebAssembly relaxed SIMD|1 thread, WebAssembly (relaxed )?SIMD)\): .*WebGPU/);
    if (/^Runs on the CPU \(1 thread, WebAssembly relaxed SIMD\)/.test(note)) assert.match(note, /\(1 of \d+ threads: more were slower\)/);
    await noGpu.check('input[name="mode"][value="raw"]');
    await noGpu.fill('#prompt', capital.text);
    await noGpu.click('[data-preset="greedy"]');
    await noGpu.fill('#max-tokens', '3');
    await noGpu.click('#generate');
    await noGpu.waitForFunction(() => document.body.dataset.state === 'ready' && document.querySelectorAll('#tokens .token').length === 3,
      null, { timeout: 120_000 });
    assert.deepEqual(await noGpu.$$eval('#tokens .token', (nodes) => nodes.map((n) => n.textContent)), [' Paris', '.', '↵\n']);
    await noGpu.click('#tokens .token >> nth=0');
    assert.equal(await noGpu.$eval('#chart .candidate[data-rank="1"]', (g) => Number(g.dataset.id)), capital.top20[0].id);
    await noGpu.screenshot({ path: path.join(OUTPUT, 'playground-no-webgpu.png'), fullPage: true });
    // Asking for the GPU there says why not, and the CPU engine's model stays.
    await noGpu.selectOption('#backend-choice', 'webgpu');
    await noGpu.waitForSelector('#model-error', { state: 'visible', timeout: 60_000 });
    assert.match(await noGpu.textContent('#model-error'), /could not load \(no-webgpu\): .* is still loaded\.$/);
    assert.equal(await noGpu.inputValue('#backend-choice'), 'auto');
  } finally {
    await plain.close();
  }
});

test('after one visit, a reload with the network off loads the page and the model and generates', async () => {
  // The service worker is installed and controls the page (it stored the page's files then).
  await page.evaluate(() => navigator.serviceWorker.ready);
  assert.ok(await page.evaluate(() => navigator.serviceWorker.controller !== null), 'the page is controlled');
  const requests = server.requests.length;
  // Offline twice over: the browser's emulation, and a server that answers nothing (Chromium
  // checks the service worker's own script for an update past the emulation).
  await context.setOffline(true);
  server.setOffline(true);
  try {
    await page.reload();
    await page.waitForFunction(() => ['ready', 'error'].includes(document.body.dataset.state), null, { timeout: 120_000 });
    assert.match(await page.textContent('#status'), /loaded in .* from the browser cache/);
    await page.check('input[name="mode"][value="raw"]');
    await page.fill('#prompt', capital.text);
    await page.click('[data-preset="greedy"]');
    await page.fill('#max-tokens', '1');
    await page.click('#generate');
    await page.waitForFunction(() => document.body.dataset.state === 'ready' && document.querySelectorAll('#tokens .token').length === 1,
      null, { timeout: 300_000 });
    assert.deepEqual(await page.$$eval('#tokens .token', (nodes) => nodes.map((n) => n.textContent)), [' Paris']);
    await page.screenshot({ path: path.join(OUTPUT, 'playground-offline.png'), fullPage: true });
    const asked = server.requests.slice(requests);
    assert.ok(asked.every((r) => r === '/sw.js'), `only the service worker's update check asked, and was refused: ${asked}`);
  } finally {
    server.setOffline(false);
    await context.setOffline(false);
  }
});
