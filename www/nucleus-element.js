// <nucleus-playground>: the playground as one element for documentation pages.
//
//   <script type="module" src=".../nucleus-element.js"></script>
//   <nucleus-playground prompt="The cat sat on the" temperature="0.7" top-p="0.9"
//                       mode="inspector" max-tokens="12" autoplay></nucleus-playground>
//
// Attributes: `model` (URL; default the default model) and `sha256` (its digest, checked before a
// cached copy is used); `backend` (`auto`, the default: WebGPU on a hardware GPU, else the CPU
// engine; `webgpu`; `cpu`); `assets` (the URL of the package's folder, when a bundler moved this
// module away from it; default this module's folder); `service-worker` (the URL of the site's
// copy of the package's sw.js: registered once per page, so that the page works offline);
// `prompt`; the sampling settings `temperature`, `top-k`, `top-p`, `min-p`, `typical-p` (ranges
// and defaults the sampler's own, from sampling-knobs.json), `seed`; `max-tokens`; `mode`:
// `inspector` (the prompt fixed, its tokens as chips,
// the chart of the step picked, what-if sliders), `full` (the prompt and the settings editable) or
// `compare` (the same prompt and seed at three temperatures, `temperatures="0 0.7 1.5"`, side by
// side, each with its chips and chart) or `score` (a paragraph scored in place once the model is
// loaded: the `text` attribute, else the element's own text; each token coloured by the rank the
// model gave it, with a legend, and what the model expected at the token picked) or `attention`
// (the same text's attention in one layer, `layer` 1-based, default the last, and `head`, default
// the mean of its heads: a heatmap, and the text shaded by what the token picked attends to);
// `autoplay` (generate once loaded); `trace` (the URL of a
// recorded run: replayed at once, before any model loads).
//
// Its DOM is a shadow root with its own styles (constructed style sheets: a page's CSP needs no
// style-src for them); it takes its container's width; its chips are buttons
// (arrows, Home and End move between them). Every element on
// a page that names the same model shares one loaded engine, and their generations run one at a
// time, in the order asked, each waiting element saying where it is in the line.

import { Nucleus, assetsBase, registerOffline } from './nucleus.js';
import { DEFAULTS, KNOBS, WHAT_IF_KEYS, loadSampler } from './what-if.js';
import { runOfTrace } from './trace.js';
import { RunColumn } from './run-column.js';
import { drawScoreLegend, drawScoredTokens, scoreSummary } from './score-view.js';
import { attentionSummary, drawAttention } from './attention-view.js';

/** `topP` -> `top-p`: a setting's attribute. */
const attributeOf = (key) => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
/** The settings an element takes as attributes, with their ranges: the sampler's own knobs (once loaded). */
const settingKnobs = () => KNOBS.filter((knob) => WHAT_IF_KEYS.includes(knob.key));
/** The what-if sliders an element shows (not in compare mode). */
const SLIDERS = ['temperature', 'topP'];
const MODES = ['inspector', 'full', 'compare', 'score', 'attention'];
/** Alternatives shown per token in score mode. */
const SCORE_TOP_K = 5;
const DEFAULT_TEMPERATURES = [0, 0.7, 1.5];
/** Bars in an element's chart, and candidates asked of each step. */
const BARS = 12;
const CANDIDATES = 64;

// ---- one engine per model, one generation at a time -----------------------------------------------

/** model URL ('' for the default), backend and assets -> Promise<Nucleus>, shared by every element of the page. */
const engines = new Map();

function sharedEngine(model, sha256, backend, assets) {
  const key = `${model ?? ''} ${backend ?? 'auto'} ${assets}`;
  if (!engines.has(key)) {
    const loading = Nucleus.load({ ...(model && { model }), ...(sha256 && { sha256 }), ...(backend && { backend }), assets });
    // A failed load is not kept: the next element (or a retry) tries again.
    loading.catch(() => engines.delete(key));
    engines.set(key, loading);
  }
  return engines.get(key);
}

/** The elements whose generation runs (the first) or waits its turn, in order. */
const line = [];
let lineTail = Promise.resolve();

/** Runs `job` when every generation asked before it has finished; the line is shown as it moves. */
async function inTurn(element, job) {
  const previous = lineTail;
  let done;
  lineTail = new Promise((resolve) => { done = resolve; });
  line.push(element);
  showLine();
  try {
    await previous;
    showLine();
    return await job();
  } finally {
    line.splice(line.indexOf(element), 1);
    showLine();
    done();
  }
}

function showLine() {
  line.forEach((element, position) => element.showPlaceInLine(position));
}

// ---- the element --------------------------------------------------------------------------------

const STYLE = `
.prompt-label { flex: 1 1 100%; }
:host { display: block; font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink, #1d1d1f);
  border: 1px solid var(--line, #dedbd2); border-radius: 10px; padding: 0.7rem; margin: 1rem 0; container-type: inline-size; }
:host([hidden]) { display: none; }
.top { display: flex; flex-wrap: wrap; gap: 0.4rem 0.7rem; align-items: center; }
.prompt { font-family: ui-monospace, monospace; background: rgba(127,127,127,0.12); padding: 0.1rem 0.35rem; border-radius: 4px; }
textarea { width: 100%; box-sizing: border-box; font: inherit; }
button { font: inherit; font-size: 0.9rem; padding: 0.3rem 0.75rem; border-radius: 6px; border: 1px solid var(--line, #ccc);
  background: var(--button, #f3f1ec); color: inherit; cursor: pointer; }
button:focus-visible, input:focus-visible, textarea:focus-visible { outline: 3px solid var(--accent, #2f5fd0); outline-offset: 1px; }
button:disabled { opacity: 0.55; cursor: default; }
.status { font-size: 0.85rem; color: var(--muted, #66666e); }
.status.error { color: var(--error, #b00020); }
.columns { display: grid; grid-template-columns: repeat(auto-fit, minmax(14rem, 1fr)); gap: 0.8rem; margin-top: 0.6rem; }
.column h3 { font-size: 0.9rem; margin: 0 0 0.3rem; }
.tokens { line-height: 1.9; margin: 0.5rem 0; min-height: 1.9em; }
.token { border: 1px solid transparent; border-radius: 4px; padding: 0 1px; font: inherit; background: rgba(127,127,127,0.12);
  white-space: pre-wrap; cursor: pointer; color: inherit; }
.token.selected { outline: 2px solid var(--chosen, #e0701b); }
.knobs { display: flex; flex-wrap: wrap; gap: 0.3rem 1rem; font-size: 0.85rem; }
.knobs label { display: flex; gap: 0.4rem; align-items: center; }
.rest, .whatif { font-size: 0.8rem; color: var(--muted, #66666e); margin: 0.2rem 0; }
.legend { display: flex; flex-wrap: wrap; gap: 0.2rem 0.9rem; list-style: none; padding: 0; margin: 0.4rem 0; font-size: 0.8rem; }
.legend li { display: inline-flex; align-items: center; gap: 0.3rem; }
.score-detail p { font-size: 0.85rem; margin: 0.3rem 0; }
`;

/** The element's own styles, one constructed sheet for every element. */
const OWN_SHEET = new CSSStyleSheet();
OWN_SHEET.replaceSync(STYLE);

/** assets -> Promise<CSSStyleSheet>: the chart's styles (chart.css), fetched once per folder. */
const chartSheets = new Map();

function chartSheet(assets) {
  if (!chartSheets.has(assets)) {
    const loading = fetch(new URL('chart.css', assets)).then(async (response) => {
      if (!response.ok) throw new Error(`${response.url}: HTTP ${response.status}`);
      const sheet = new CSSStyleSheet();
      sheet.replaceSync(await response.text());
      return sheet;
    });
    loading.catch(() => chartSheets.delete(assets));
    chartSheets.set(assets, loading);
  }
  return chartSheets.get(assets);
}

/** The service workers registered by elements of this page (one registration each). */
const registered = new Set();

export class NucleusPlaygroundElement extends HTMLElement {
  /** What changes the element's layout; the settings are read when a generation starts. */
  static observedAttributes = ['prompt', 'mode', 'temperatures', 'text', 'layer', 'head'];

  #root;
  /** The runs shown: one RunColumn, or one per temperature in compare mode (its `temperature`). */
  #columns = [];
  #vocabSize = null;
  #busy = false;
  #ready = false;
  /** The sampler and the styles are loaded (from #assets): the element is drawn. */
  #drawn = false;
  /** The package's folder (the `assets` attribute, or this module's). */
  #assets = null;
  /** The model is loaded: Generate can run. */
  #loaded = false;

  constructor() {
    super();
    this.#root = this.attachShadow({ mode: 'open' });
  }

  connectedCallback() {
    if (this.#ready) return;
    this.#ready = true;
    this.#root.adoptedStyleSheets = [OWN_SHEET];
    this.#root.innerHTML = '<span class="status" role="status" aria-live="polite">Loading…</span>';
    this.#start();
  }

  attributeChangedCallback() {
    if (!this.#drawn || this.#busy) return;
    this.#render();
    if (this.mode === 'score' && this.#loaded) this.score();
    if (this.mode === 'attention' && this.#loaded) this.attend();
  }

  get mode() {
    const mode = this.getAttribute('mode') ?? 'inspector';
    return MODES.includes(mode) ? mode : 'inspector';
  }

  /**
   * The run's settings from the attributes: each clamped to its slider's range; a missing or bad
   * number is the sampler's default.
   */
  settings() {
    return Object.fromEntries(settingKnobs().map(({ key, min, max }) => {
      const name = attributeOf(key);
      const value = Number(this.getAttribute(name));
      return [key, this.hasAttribute(name) && Number.isFinite(value) ? Math.min(max, Math.max(min, value)) : DEFAULTS[key]];
    }));
  }

  #temperatures() {
    const given = (this.getAttribute('temperatures') ?? '').split(/[\s,]+/).filter(Boolean).map(Number);
    return given.length && given.every((t) => Number.isFinite(t) && t >= 0) ? given : DEFAULT_TEMPERATURES;
  }

  /** The text score and attention modes read: the `text` attribute, else the element's own text. */
  get text() {
    return this.getAttribute('text') ?? this.textContent.trim();
  }

  #render() {
    if (this.mode === 'score') {
      this.#columns = [];
      this.#root.innerHTML = `
        <div class="top"><span class="status" role="status" aria-live="polite">Loading the model…</span></div>
        <ul class="legend score-legend" aria-label="Rank the model gave each token, with counts"></ul>
        <p class="scored-text" role="group" aria-label="The scored text, a button per token"></p>
        <div class="score-detail" aria-live="polite"></div>`;
      this.#root.querySelector('.scored-text').textContent = this.text;
      return;
    }
    if (this.mode === 'attention') {
      this.#columns = [];
      this.#root.innerHTML = `
        <div class="top"><span class="status" role="status" aria-live="polite">Loading the model…</span></div>
        <div class="attention-scroll" tabindex="0" role="region" aria-label="The attention heatmap"></div>
        <p class="scored-text" role="group" aria-label="The text: pick a token to see what it attends to"></p>
        <p class="attention-detail whatif" aria-live="polite"></p>`;
      this.#root.querySelector('.scored-text').textContent = this.text;
      return;
    }
    const compare = this.mode === 'compare';
    const prompt = this.getAttribute('prompt') ?? 'The capital of France is';
    this.#root.innerHTML = `
      <div class="top">
        ${this.mode === 'full'
    ? '<label class="prompt-label">Prompt <textarea class="prompt-box" rows="2"></textarea></label>'
    : '<span class="prompt"></span>'}
        <button type="button" class="go" disabled>Generate</button>
        <span class="status" role="status" aria-live="polite">Loading the model…</span>
      </div>
      ${compare ? '' : `<div class="knobs" role="group" aria-label="What if: sampling settings">
        ${settingKnobs().filter(({ key }) => SLIDERS.includes(key)).map(({ key, label, min, max, step }) => `<label>${label}
          <input type="range" class="knob" data-key="${key}" min="${min}" max="${max}" step="${step}"></label>`).join('')}
      </div>`}
      <div class="columns"></div>`;
    const promptNode = this.#root.querySelector(this.mode === 'full' ? '.prompt-box' : '.prompt');
    if (this.mode === 'full') promptNode.value = prompt;
    else promptNode.textContent = prompt;
    const settings = this.settings();
    for (const knob of this.#root.querySelectorAll('.knob')) {
      knob.value = settings[knob.dataset.key];
      knob.setAttribute('aria-valuetext', String(settings[knob.dataset.key]));
      knob.addEventListener('input', () => {
        knob.setAttribute('aria-valuetext', knob.value);
        this.#columns.forEach((column) => column.draw());
      });
    }
    const go = this.#root.querySelector('.go');
    go.addEventListener('click', () => this.generate());
    go.disabled = !this.#loaded || this.#busy;
    const temperatures = compare ? this.#temperatures() : [null];
    this.#columns = temperatures.map((temperature) => {
      const section = document.createElement('section');
      this.#root.querySelector('.columns').append(section);
      const column = new RunColumn(section, {
        title: temperature === null ? null : `T = ${temperature}`,
        label: `Generated tokens${temperature === null ? '' : ` at T = ${temperature}`}`,
        bars: BARS,
        vocabSize: () => this.#vocabSize,
        whatIf: () => this.#knobValues(),
      });
      column.temperature = temperature;
      return column;
    });
  }

  #status(text, error = false) {
    const status = this.#root.querySelector('.status');
    status.textContent = text;
    status.classList.toggle('error', error);
  }

  /** Called by the line of generations: 0 runs now, n waits behind n others. */
  showPlaceInLine(position) {
    this.dataset.queue = String(position);
    if (position > 0) this.#status(`Waiting: ${position} generation${position === 1 ? '' : 's'} on this page before this one.`);
  }

  /** The page's engine for this element's model and backend (one load for every element asking the same). */
  #engine() {
    return sharedEngine(this.getAttribute('model'), this.getAttribute('sha256'), this.getAttribute('backend'), this.#assets);
  }

  /**
   * The sampler's wasm module, the knobs and the chart's styles from the assets' folder, then the
   * element drawn; false (the element saying why) when they cannot load.
   */
  async #draw() {
    let assets = this.getAttribute('assets');
    try {
      assets = assetsBase(assets ?? undefined);
      const [, chart] = await Promise.all([loadSampler(assets), chartSheet(assets)]);
      this.#root.adoptedStyleSheets = [OWN_SHEET, chart];
    } catch (error) {
      this.dataset.state = 'error';
      this.#status(error.code === 'no-webassembly' ? `Nucleus cannot run here: ${error.message}`
        : `Nucleus could not start: its files at ${assets} did not load (${error.message}); `
          + 'set the element\'s `assets` attribute to the URL of the package\'s folder', true);
      return false;
    }
    this.#assets = assets;
    this.#drawn = true;
    this.#render();
    const serviceWorker = this.getAttribute('service-worker');
    if (serviceWorker && !registered.has(serviceWorker)) {
      registered.add(serviceWorker);
      registerOffline(serviceWorker, { assets })
        .catch((error) => console.warn(`nucleus: service-worker=${JSON.stringify(serviceWorker)}: ${error.message}`));
    }
    return true;
  }

  async #start() {
    if (!await this.#draw()) return;
    const trace = this.getAttribute('trace');
    const replayed = trace ? await this.#replay(trace) : false;
    try {
      const lm = await this.#engine();
      this.#vocabSize ??= lm.info.vocabSize;
      this.dataset.state = 'ready';
      this.#loaded = true;
      if (!trace) this.#status(`${lm.info.title} is loaded (on ${lm.info.backend.kind === 'cpu' ? 'the CPU' : 'the GPU'}).`);
      if (this.mode === 'score') {
        await this.score();
        return;
      }
      if (this.mode === 'attention') {
        await this.attend();
        return;
      }
      this.#root.querySelector('.go').disabled = false;
      if (this.hasAttribute('autoplay') && !trace) await this.generate();
    } catch (error) {
      // A recorded run stays on show; without one the element says why it is empty.
      if (replayed) return;
      this.dataset.state = 'error';
      this.#status(`The model could not load (${error.code}): ${error.message}`, true);
    }
  }

  async #replay(url) {
    try {
      const response = await fetch(new URL(url, document.baseURI));
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const { model, run } = runOfTrace(await response.text());
      this.#vocabSize = model.vocabSize;
      this.#columns[0].replay(run.steps, Object.fromEntries(WHAT_IF_KEYS.map((key) => [key, run.settings[key] ?? DEFAULTS[key]])));
      this.dataset.state = 'replay';
      this.#status(`A recorded run of ${model.name}, replayed: the sliders re-run the sampler on its steps.`);
      return true;
    } catch (error) {
      this.#status(`The trace ${url} could not be replayed: ${error.message}`, true);
      return false;
    }
  }

  /** Generates (each column in compare mode), in turn with the page's other elements. */
  async generate() {
    if (this.#busy) return;
    this.#busy = true;
    const button = this.#root.querySelector('.go');
    button.disabled = true;
    try {
      const lm = await this.#engine();
      await inTurn(this, async () => {
        for (const column of this.#columns) await this.#generateColumn(lm, column);
      });
      this.#status('Done: pick a token to see its step.');
    } catch (error) {
      this.#status(`${error.code ? `${error.code}: ` : ''}${error.message}`, true);
    } finally {
      this.#busy = false;
      button.disabled = false;
      delete this.dataset.queue;
    }
  }

  /** Score mode: rates the text, in turn with the page's other elements, and draws it. */
  async score() {
    if (this.#busy || this.mode !== 'score') return;
    this.#busy = true;
    try {
      const lm = await this.#engine();
      this.#status('Reading the text…');
      const report = await inTurn(this, () => lm.score(this.text, { topK: SCORE_TOP_K }));
      drawScoreLegend(this.#root.querySelector('.score-legend'), report);
      drawScoredTokens(this.#root.querySelector('.scored-text'), this.#root.querySelector('.score-detail'), report);
      this.dataset.state = 'scored';
      this.#status(`${scoreSummary(report)} Pick a token for what the model expected there.`);
    } catch (error) {
      this.#status(`${error.code ? `${error.code}: ` : ''}${error.message}`, true);
    } finally {
      this.#busy = false;
      delete this.dataset.queue;
    }
  }

  /** Attention mode: reads the text's attention in the `layer` and `head` asked, in turn, and draws it. */
  async attend() {
    if (this.#busy || this.mode !== 'attention') return;
    this.#busy = true;
    const whole = (name) => (this.hasAttribute(name) ? Number(this.getAttribute(name)) : undefined);
    try {
      const lm = await this.#engine();
      this.#status('Reading the text…');
      const report = await inTurn(this, () => lm.attention({ prompt: this.text, layer: whole('layer'), head: whole('head') }));
      drawAttention({ map: this.#root.querySelector('.attention-scroll'), text: this.#root.querySelector('.scored-text'),
        detail: this.#root.querySelector('.attention-detail') }, report);
      this.dataset.state = 'attended';
      this.#status(`${attentionSummary(report)} Pick a token to see what it attends to.`);
    } catch (error) {
      this.#status(`${error.code ? `${error.code}: ` : ''}${error.message}`, true);
    } finally {
      this.#busy = false;
      delete this.dataset.queue;
    }
  }

  async #generateColumn(lm, column) {
    // In full mode the sliders are the settings; elsewhere they only ask "what if".
    const knobs = this.mode === 'full' ? this.#knobValues() : {};
    const settings = { ...this.settings(), ...knobs, ...(column.temperature !== null && { temperature: column.temperature }) };
    const prompt = this.mode === 'full' ? this.#root.querySelector('.prompt-box').value : this.getAttribute('prompt') ?? '';
    const maxTokens = Math.max(1, Math.min(256, Number(this.getAttribute('max-tokens')) || 16));
    const seed = Number(this.getAttribute('seed') ?? 42);
    this.#status(column.temperature === null ? 'Generating…' : `Generating at T = ${column.temperature}…`);
    await column.generate(lm, { prompt, maxTokens, seed, topLogprobs: CANDIDATES }, settings);
  }

  /** The what-if sliders' values ({} in compare mode, which has none). */
  #knobValues() {
    return Object.fromEntries([...this.#root.querySelectorAll('.knob')].map((knob) => [knob.dataset.key, Number(knob.value)]));
  }
}

// Defined once, whichever copy of this module a page loads first.
if (!customElements.get('nucleus-playground')) customElements.define('nucleus-playground', NucleusPlaygroundElement);
