// The playground: the public Nucleus API (nucleus.js) and the Rust sampler's own stages for the
// "what if" (what-if.js, the sampler's wasm module), drawn with plain DOM and SVG. Nothing here
// reaches into the engine.

import { DEFAULT_ASSETS, Nucleus, registerOffline } from './nucleus.js';
import { BACKENDS, emulatedAdapter } from './protocol.js';
import { DEFAULTS, KNOBS, WHAT_IF_KEYS, explainStep, loadSampler } from './what-if.js';
import { drawChart, shownToken } from './chart.js';
import { runOfTrace, traceOf } from './trace.js';
import { addFork, drawBranches, forkOptions, forkPrefix } from './branches.js';
import { drawEntropyTrack, drawTimeline, entropyTrackOf } from './timeline.js';
import { drawLens } from './lens.js';
import { drawBeams } from './beams.js';
import { drawScoreLegend, drawScoredTokens, scoreSummary } from './score-view.js';
import { attentionSummary, drawAttention } from './attention-view.js';
import { RunColumn, chipKeys } from './run-column.js';
import { drawLedger } from './ledger.js';
import {
  FILE_CHOICE, LOADED_CHOICE, MODEL_PARAM, URL_CHOICE, acceptDroppedFiles, fillPicker, initialChoice, knownChoice,
  linkProblem, rememberChoice, showStoredModels, urlChoice,
} from './models.js';

const $ = (id) => document.getElementById(id);
/** Candidates per step: the GPU decode tail's own K, so asking for them costs no extra read. */
const CANDIDATES = 64;
/** Bars in the inspector's chart. */
const BARS = 24;
/** Rows of the softmax walkthrough. */
const WALK_ROWS = 8;

const PRESETS = {
  greedy: { temperature: 0, topK: 0, topP: 1, minP: 0, typicalP: 1 },
  balanced: { temperature: 0.7, topK: 0, topP: 0.9, minP: 0, typicalP: 1 },
  hot: { temperature: 1.5, topK: 0, topP: 1, minP: 0, typicalP: 1 },
};

const state = {
  lm: null,
  /** The current run: its steps, the settings it used, its generation. */
  steps: [],
  runSettings: null,
  /** The model of the steps shown: { name, sha256, vocabSize } (a trace's, when replaying one). */
  model: null,
  generation: null,
  /** The step the inspector shows; null follows the latest. */
  selected: null,
  walkTemperature: 1,
  generateCalls: 0,
  busy: false,
  /** Boxes whose text is not valid: element id -> what it must be. */
  formProblems: new Map(),
  /** The prompt's progress reports of the current run ({ done, total, cached }). */
  prefillReports: [],
  /**
   * The conversation (chat mode): { role, content } in order; an assistant turn also keeps its
   * run for the inspector: { request, settings, model, steps, runSettings, result } (request:
   * { prompt } or { messages }; settings: the sampling options it used, seed included).
   */
  turns: [],
  /** The run whose chips are shown. */
  shownRun: null,
  /** The step whose logit lens is shown: { run, index }, or null. */
  lensOf: null,
  /** The model loaded (or loading): a ModelChoice of models.js. */
  modelChoice: null,
  /** The backend the loaded model was asked for (Nucleus.load's `backend`). */
  loadedBackend: null,
  /** The text scored last: { report, selected } (selected: the token picked, or null). */
  score: null,
  /** A model replaced while a run used it: disposed of when the run ends. */
  retired: null,
};

// The page's state, for the browser's console and the tests.
window.playground = state;

const isChat = () => document.querySelector('input[name="mode"]:checked').value === 'chat';

// ---- controls ---------------------------------------------------------------------------------

function buildKnobs() {
  const container = $('knobs');
  for (const knob of KNOBS) {
    const wrap = document.createElement('div');
    wrap.className = 'knob';
    const id = `knob-${knob.key}`;
    const value = PRESETS.balanced[knob.key] ?? DEFAULTS[knob.key];
    const range = `min="${knob.min}" max="${knob.max}" value="${value}"`;
    wrap.innerHTML = `<label for="${id}">${knob.label} <span class="hint">${knob.hint}</span></label>
      <input type="range" id="${id}" name="${knob.key}" step="${knob.step}" ${range}>
      <input type="number" id="${id}-number" aria-label="${knob.label}, exact value" step="any" ${range}>
      <output for="${id}" id="${id}-value" class="off"></output>
      <span class="field-error" id="${id}-number-error" hidden></span>`;
    container.append(wrap);
    const slider = wrap.querySelector('input[type="range"]');
    const box = wrap.querySelector('input[type="number"]');
    // The box holds the exact value (the slider moves in steps); each follows the other.
    slider.addEventListener('input', () => {
      box.value = slider.value;
      showKnobValue(knob);
      renderInspector();
    });
    box.addEventListener('input', () => {
      if (checkForm().has(box.id)) return;
      slider.value = box.value;
      showKnobValue(knob);
      renderInspector();
    });
  }
  for (const knob of KNOBS) showKnobValue(knob);
}

/** A knob's value: its box's, or its slider's while the box holds no valid number. */
function knobValue(knob) {
  const exact = numberIn($(`knob-${knob.key}-number`).value, knob.min, knob.max);
  return exact ?? Number($(`knob-${knob.key}`).value);
}

function showKnobValue(knob) {
  const value = knobValue(knob);
  $(`knob-${knob.key}-value`).textContent = knob.off !== null && value === knob.off ? 'off' : '';
  markPreset();
}

function knobValues() {
  return Object.fromEntries(KNOBS.map((knob) => [knob.key, knobValue(knob)]));
}

/** Sets a knob's slider and box. */
function setKnob(knob, value) {
  $(`knob-${knob.key}`).value = value;
  $(`knob-${knob.key}-number`).value = value;
  showKnobValue(knob);
}

function setKnobs(values) {
  for (const knob of KNOBS) {
    if (values[knob.key] !== undefined) setKnob(knob, values[knob.key]);
  }
  checkForm();
  saveSettings();
  renderInspector();
}

/** Marks the preset the knobs match, if any. */
function markPreset() {
  const values = knobValues();
  for (const button of document.querySelectorAll('[data-preset]')) {
    const preset = PRESETS[button.dataset.preset];
    const active = Object.entries(preset).every(([key, value]) => values[key] === value);
    button.setAttribute('aria-pressed', String(active));
  }
}

// ---- checks: every box says inline what is wrong, and Generate waits until it is fixed ----------

/** A number in [min, max] (whole when `whole`), from a box's text; null when it is not one. */
function numberIn(text, min, max, whole = false) {
  const n = Number(text);
  if (text.trim() === '' || !Number.isFinite(n) || n < min || n > max || (whole && !Number.isInteger(n))) return null;
  return n;
}

/** The boxes that are checked: element id -> [what it must be, a check of its text]. */
function checkedFields() {
  const fields = new Map(KNOBS.map((knob) => [`knob-${knob.key}-number`,
    [`a number from ${knob.min} to ${knob.max}`, (text) => numberIn(text, knob.min, knob.max) !== null]]));
  fields.set('seed', ['a whole number from 0 to 2^53 - 1', (text) => $('seed-random').checked || numberIn(text, 0, Number.MAX_SAFE_INTEGER, true) !== null]);
  fields.set('max-tokens', ['a whole number from 1 to 2048', (text) => numberIn(text, 1, 2048, true) !== null]);
  fields.set('max-draft', ['a whole number from 1 to 15', (text) => !$('speculative').checked || numberIn(text, 1, 15, true) !== null]);
  fields.set('format-text', ['a JSON schema (JSON text)', (text) => {
    if ($('response-format').value !== 'json_schema') return true;
    try {
      JSON.parse(text);
      return true;
    } catch {
      return false;
    }
  }]);
  return fields;
}

/** Marks every bad box with its reason and disables Generate while there is one; returns them. */
function checkForm() {
  const problems = new Map();
  for (const [id, [expected, ok]] of checkedFields()) {
    const box = $(id);
    const bad = !ok(box.value);
    box.setAttribute('aria-invalid', String(bad));
    const note = $(`${id}-error`);
    note.textContent = bad ? `Must be ${expected}.` : '';
    note.hidden = !bad;
    if (bad) {
      problems.set(id, expected);
      box.setAttribute('aria-describedby', note.id);
    } else {
      box.removeAttribute('aria-describedby');
    }
  }
  state.formProblems = problems;
  updateButtons();
  return problems;
}

// ---- settings: in the page's URL and in localStorage --------------------------------------------
// Under the JS API's option names (prompt, temperature, topP, …, seed, maxTokens, stop) plus mode
// (chat or raw) and system (the chat's system prompt), so a link reproduces what its sender saw. On
// load the URL wins over what is stored.

const SETTINGS_KEY = 'nucleus-playground-settings';
/** The link's parameter that names a trace to replay (kept in the link, not a setting). */
const TRACE_PARAM = 'trace';
/** Parameters of the link that are not settings: a trace to replay, a model at a URL (models.js). */
const LINK_PARAMS = [TRACE_PARAM, MODEL_PARAM];

/** Every setting: key -> { read(), write(text) -> true when the text was valid, expected }. */
function settings() {
  const box = (id) => ({ read: () => $(id).value, write: (text) => { $(id).value = text; return true; } });
  const checked = (id, min, max, whole) => ({
    read: () => $(id).value,
    write: (text) => numberIn(text, min, max, whole) !== null && (($(id).value = text), true),
  });
  const entries = [
    ['mode', {
      read: () => document.querySelector('input[name="mode"]:checked').value,
      write: (text) => {
        const radio = document.querySelector(`input[name="mode"][value="${CSS.escape(text)}"]`);
        if (radio) radio.checked = true;
        return Boolean(radio);
      },
      expected: 'chat or raw',
    }],
    ['prompt', box('prompt')],
    ['system', box('system-prompt')],
    ...KNOBS.map((knob) => [knob.key, {
      read: () => String(knobValue(knob)),
      write: (text) => {
        if (numberIn(text, knob.min, knob.max) === null) return false;
        setKnob(knob, text);
        return true;
      },
      expected: `a number from ${knob.min} to ${knob.max}`,
    }]),
    ['seed', { ...checked('seed', 0, Number.MAX_SAFE_INTEGER, true), expected: 'a whole number >= 0' }],
    ['maxTokens', { ...checked('max-tokens', 1, 2048, true), expected: 'a whole number from 1 to 2048' }],
    ['stop', box('stop-strings')],
    // Where the model runs (Nucleus.load's backend): changing it reloads the model.
    ['backend', {
      read: () => $('backend-choice').value,
      write: (text) => BACKENDS.includes(text) && (($('backend-choice').value = text), true),
      expected: BACKENDS.join(', '),
    }],
    // Tokens drafted per pass by prompt lookup; 0: no speculation.
    ['speculative', {
      read: () => ($('speculative').checked ? $('max-draft').value : '0'),
      write: (text) => {
        const draft = numberIn(text, 0, 15, true);
        if (draft === null) return false;
        $('speculative').checked = draft > 0;
        if (draft > 0) $('max-draft').value = text;
        return true;
      },
      expected: 'a whole number from 0 (off) to 15',
    }],
    // The structured output: its kind, then its schema or pattern (applied after the kind).
    ['responseFormat', {
      read: () => $('response-format').value || 'none',
      write: (text) => {
        const kind = text === 'none' ? '' : text;
        if (![...$('response-format').options].some((option) => option.value === kind)) return false;
        $('response-format').value = kind;
        showFormatText();
        return true;
      },
      expected: [...$('response-format').options].map((option) => option.value || 'none').join(', '),
    }],
    ['format', {
      read: () => ($('format-text').hidden ? '' : $('format-text').value),
      write: (text) => {
        if (text !== '' && !$('format-text').hidden) $('format-text').value = text;
        return true;
      },
    }],
  ];
  return new Map(entries);
}

/** Applies stored settings, then the URL's; reports what the URL had that could not be used. */
function loadSettings() {
  const all = settings();
  // In the settings' own order, whatever the link's (a format's text after its kind).
  const apply = (params, report) => {
    for (const key of params.keys()) {
      if (!LINK_PARAMS.includes(key) && !all.has(key)) report.push(`${key} (not a setting)`);
    }
    for (const [key, setting] of all) {
      const text = params.get(key);
      if (text !== null && !setting.write(text)) report.push(`${key}=${text} (must be ${setting.expected})`);
    }
  };
  let stored = new URLSearchParams();
  try {
    stored = new URLSearchParams(localStorage.getItem(SETTINGS_KEY) ?? '');
  } catch {
    // Storage can be off (some private windows): settings then live in the URL only.
  }
  apply(stored, []);
  const problems = [linkProblem()].filter(Boolean);
  apply(new URLSearchParams(location.search), problems);
  $('settings-error').hidden = problems.length === 0;
  $('settings-error').textContent = problems.length ? `Not used from the link: ${problems.join('; ')}.` : '';
  checkForm();
  saveSettings();
}

/** Writes the settings to the URL (replacing the history entry) and to localStorage. */
function saveSettings() {
  const params = new URLSearchParams();
  for (const [key, setting] of settings()) params.set(key, setting.read());
  const query = params.toString();
  const current = new URLSearchParams(location.search);
  const kept = new URLSearchParams(LINK_PARAMS.filter((key) => current.has(key)).map((key) => [key, current.get(key)]));
  const link = kept.size ? `${query}&${kept}` : query;
  history.replaceState(null, '', `${location.pathname}?${link}${location.hash}`);
  try {
    localStorage.setItem(SETTINGS_KEY, query);
  } catch {
    // See loadSettings.
  }
}

async function copyLink() {
  saveSettings();
  try {
    await navigator.clipboard.writeText(location.href);
    $('copy-link-status').textContent = 'Link copied.';
  } catch {
    $('copy-link-status').textContent = `Copy this link: ${location.href}`;
  }
}

function parseStops(text) {
  return text.split('\n').filter((line) => line.length > 0)
    .map((line) => line.replace(/\\n/g, '\n').replace(/\\t/g, '\t'));
}

/** The examples the structured-output box starts from, by format. */
const FORMAT_EXAMPLES = {
  json_schema: JSON.stringify({
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 12 },
      age: { type: 'integer', minimum: 18, maximum: 99 },
      colour: { enum: ['red', 'green', 'blue'] },
    },
    required: ['name', 'age', 'colour'],
    additionalProperties: false,
  }, null, 1),
  regex: String.raw`\d{3}-\d{4}`,
};

/** Shows the schema or pattern box for the chosen format, with its example when it is empty. */
function showFormatText() {
  const kind = $('response-format').value;
  const box = $('format-text');
  box.hidden = !(kind in FORMAT_EXAMPLES);
  if (kind !== state.formatKind) {
    box.value = FORMAT_EXAMPLES[kind] ?? '';
    state.formatKind = kind;
  }
}

/** The request's `responseFormat` from the form (undefined: none). */
function responseFormat() {
  const kind = $('response-format').value;
  const text = $('format-text').value;
  if (kind === 'json_schema') return { type: kind, schema: JSON.parse(text) };
  if (kind === 'regex') return { type: kind, pattern: text };
  return kind ? { type: kind } : undefined;
}

function generateOptions() {
  const knobs = knobValues();
  let seed = Number($('seed').value);
  if ($('seed-random').checked) {
    seed = Math.floor(Math.random() * 2 ** 32);
    $('seed').value = seed;
  }
  return {
    ...promptOptions(),
    ...knobs,
    maxTokens: Number($('max-tokens').value),
    seed,
    stop: parseStops($('stop-strings').value),
    topLogprobs: CANDIDATES,
    returnLogits: $('exact').checked,
    ...($('speculative').checked ? { speculative: { lookup: { maxDraft: Number($('max-draft').value) } } } : {}),
    ...(responseFormat() ? { responseFormat: responseFormat() } : {}),
    // The sampler's own account of each step, for the chart to show beside its own numbers; it
    // needs the whole row, which an exact what-if reads anyway.
    explain: $('exact').checked ? BARS : 0,
  };
}

/** The conversation so far, then `message`: the engine renders it with the model's template. */
function chatMessages(message) {
  const system = $('system-prompt').value.trim();
  return [
    ...(system ? [{ role: 'system', content: system }] : []),
    ...state.turns.map(({ role, content }) => ({ role, content })),
    { role: 'user', content: message },
  ];
}

// ---- generation --------------------------------------------------------------------------------

function setBusy(busy) {
  state.busy = busy;
  if (!busy) {
    // A model replaced during the run that used it goes now.
    state.retired?.dispose();
    state.retired = null;
  }
  updateButtons();
  document.body.dataset.state = busy ? 'generating' : 'ready';
}

/** Whether `run` was made by the model loaded now (its tokens are this vocabulary's). */
const ofLoadedModel = (run) => Boolean(state.lm && run?.model && run.model.sha256 === (state.lm.info.sha256 ?? null));

function updateButtons() {
  const noMessage = isChat() && $('prompt').value.trim() === '';
  $('generate').disabled = state.busy || !state.lm || state.formProblems.size > 0 || noMessage;
  $('beam-run').disabled = state.busy || !state.lm || noMessage;
  $('compare-run').disabled = $('generate').disabled;
  $('step-one').disabled = $('generate').disabled;
  $('entropy-run').disabled = state.busy || !state.lm || !state.shownRun?.options || !state.shownRun.result
    || !ofLoadedModel(state.shownRun);
  $('ledger-compare').disabled = state.busy || !state.lm || !state.shownRun?.options?.speculative
    || !ofLoadedModel(state.shownRun);
  $('lens-run').disabled = state.busy || !state.lm || !state.shownRun?.options || state.shownRun.steps !== state.steps
    || !ofLoadedModel(state.shownRun);
  $('score-run').disabled = state.busy || !state.lm || $('score-text').value.trim() === '';
  $('score-use-run').disabled = state.busy || !state.shownRun?.request?.prompt || !state.shownRun.result;
  $('attention-run').disabled = state.busy || !state.lm || $('attention-text').value.trim() === '';
  $('attention-use-run').disabled = $('score-use-run').disabled;
  $('score-continue').disabled = state.busy || !state.lm || (state.score?.selected ?? null) === null;
  $('stop').disabled = !state.busy;
  $('export-trace').disabled = state.busy || !state.shownRun;
  $('trace-file').disabled = state.busy;
}

/** What a trace says about the model: `lm.info`'s title, file digest and vocabulary size. */
const modelFacts = ({ title, sha256, vocabSize }) => ({ name: title, sha256: sha256 ?? null, vocabSize });

// ---- recorded runs (traces): saved as JSON, replayed without the model --------------------------

/** Saves the run shown as a trace file. */
function exportTrace() {
  const run = state.shownRun;
  if (!run) return;
  const text = JSON.stringify(traceOf(run, run.model), null, 1);
  const link = document.createElement('a');
  link.href = URL.createObjectURL(new Blob([text], { type: 'application/json' }));
  link.download = `nucleus-trace-${run.model.name.replace(/[^\w.-]+/g, '-')}.json`;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
}

/**
 * Replays a trace's text (`source` names where it came from): its steps as chips, its settings on
 * the knobs, the inspector on its steps. A trace that does not read is an error naming what is
 * wrong, and what the page showed stays as it was.
 */
function openTrace(text, source) {
  let replay;
  try {
    replay = runOfTrace(text);
  } catch (error) {
    // The message names where the trace is wrong (`steps[3].candidates.ids[5]: …`).
    showTraceProblem(`${source} is not a trace this page can replay: ${error.message}`);
    return;
  }
  const { model, run } = replay;
  $('trace-error').hidden = true;
  const runSettings = Object.fromEntries(WHAT_IF_KEYS.map((k) => [k, run.settings[k] ?? DEFAULTS[k]]));
  showRun({ ...run, model, runSettings });
  setKnobs(runSettings);
  document.body.dataset.replay = 'true';
  const prompt = run.request.prompt ?? run.request.messages.at(-1).content;
  $('trace-status').textContent = `Replaying a recorded run of ${model.name} (${run.steps.length} steps) for “${prompt}”: `
    + 'no model needed; the sliders re-run the sampler on its candidates.';
}

function showTraceProblem(message) {
  $('trace-error').textContent = message;
  $('trace-error').hidden = false;
}

async function openTraceFile(event) {
  const [file] = event.target.files;
  event.target.value = '';
  if (file) openTrace(await file.text(), `The file ${file.name}`);
}

/** A trace from a URL (the page's `?trace=` parameter). */
async function openTraceUrl(url) {
  let text;
  try {
    const response = await fetch(url);
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    text = await response.text();
  } catch (error) {
    showTraceProblem(`The trace ${url} could not be fetched: ${error.message}`);
    return;
  }
  openTrace(text, `The trace ${url}`);
}

async function generate(event) {
  event?.preventDefault();
  if (!state.lm || state.generation) return;
  // A bad box leaves everything on the page as it is (checkForm marks it and disables Generate).
  if (checkForm().size) return;
  const options = generateOptions();
  const message = $('prompt').value;
  saveSettings();
  const run = await stream(options);
  if (run && isChat()) {
    state.turns.push({ role: 'user', content: message }, { role: 'assistant', content: run.result.text, run });
    $('prompt').value = '';
    saveSettings();
    renderConversation();
  }
}

/**
 * One token at a time: the run shown grows by one step when it was stepped and nothing ended it
 * (its tokens are given as forced, which the KV cache holds, so one pass runs); otherwise a new
 * run of one token starts from the prompt and settings on the page. Then the entropy track.
 */
async function stepOnce() {
  if (!state.lm || state.generation || state.busy || checkForm().size) return;
  const base = state.shownRun;
  const grows = Boolean(base?.stepped && base.result?.finishReason === 'length' && ofLoadedModel(base));
  const options = grows
    ? { ...base.options, forcedTokens: base.steps.map((step) => step.id), maxTokens: base.steps.length + 1 }
    : { ...generateOptions(), maxTokens: 1 };
  if (!grows) saveSettings();
  const run = await stream(options, grows ? base.steps : []);
  if (!run) return;
  run.stepped = true;
  // The new step is inspected, so what-if and fork work on it at once.
  select(run.steps.length - 1);
  await showEntropy(run);
}

/**
 * The entropy track of `run` (the shown run by default): its prompt and generated ids scored in
 * one pass (lm.score), each step's entropy and top-1 probability drawn on the time line.
 */
async function showEntropy(run = state.shownRun) {
  if (!state.lm || state.busy || !run?.options || !run.steps.length) return;
  await panelJob({ status: 'entropy-summary', error: 'entropy-error' }, 'Scoring the run…', 'The entropy track could not be made',
    async () => {
      const report = await state.lm.score(null, { ...run.request, generated: run.steps.map((step) => step.id), topK: 1 });
      run.entropy = entropyTrackOf(report, run.steps);
      if (run === state.shownRun) drawEntropyTrack($('entropy-track'), $('entropy-summary'), run.entropy);
    });
}

/**
 * Forks the run shown at step `at`: the same request with that step's `candidate` in place of its
 * choice; the engine keeps what its KV cache holds of the tokens before it. The fork joins the
 * run's tree of branches and is shown.
 */
async function fork(at, candidate) {
  const parent = state.shownRun;
  if (!state.lm || state.generation || !parent?.options) return;
  const prefix = forkPrefix(parent, at, candidate);
  const run = await stream(forkOptions(parent, prefix), prefix);
  if (run) addFork(parent, run, at);
  drawBranches($('branches'), state.shownRun, showRun);
}

/**
 * Runs `options` on the model and streams its steps as chips after `prefix` (a fork's first
 * steps, shown at once); returns the run, or null when it failed (the error shown, the page
 * usable).
 */
async function stream(options, prefix = []) {
  $('form-error').hidden = true;
  state.steps = [...prefix];
  state.selected = null;
  state.runSettings = Object.fromEntries(WHAT_IF_KEYS.map((k) => [k, options[k]]));
  state.model = modelFacts(state.lm.info);
  delete document.body.dataset.replay;
  $('tokens').replaceChildren();
  for (const step of prefix) appendChip(step);
  $('stats').replaceChildren();
  drawEntropyTrack($('entropy-track'), $('entropy-summary'), []);
  const speculating = Boolean(options.speculative);
  showLedger(prefix, null, speculating);
  renderInspector();
  state.generateCalls += 1;
  document.body.dataset.generateCalls = String(state.generateCalls);
  const generation = state.lm.generate({ ...options, onPrefill: showPrefill });
  state.generation = generation;
  state.prefillReports = [];
  showPrefill(null);
  setBusy(true);
  const started = performance.now();
  const timing = {
    times: [], joined: [], prefill: null, kvBytesPerToken: state.lm.info.kvBytesPerToken, kvWindow: state.lm.info.kvWindow, stateBytes: state.lm.info.stateBytes,
  };
  // Steps still to come from the speculative pass in flight (they arrive with its first).
  let passLeft = 0;
  try {
    for await (const step of generation) {
      timing.times.push(performance.now() - started);
      timing.joined.push(!step.draft && passLeft > 0);
      passLeft = step.draft ? step.draft.accepted : Math.max(0, passLeft - 1);
      timing.prefill = state.prefillReports.at(-1) ?? null;
      $('prefill').hidden = true;
      state.steps.push(step);
      appendChip(step);
      showStats({ tokens: state.steps.length, elapsedMs: performance.now() - started });
      drawTimeline($('timeline'), $('timeline-summary'), timing);
      if (step.draft) showLedger(state.steps, null, speculating);
      if (state.selected === null) renderInspector();
    }
    const result = await generation.result;
    showStats({ result });
    showLedger(state.steps, result, speculating);
    const run = {
      request: options.messages ? { messages: options.messages } : { prompt: options.prompt },
      options,
      settings: { ...state.runSettings, seed: options.seed },
      model: state.model,
      steps: state.steps,
      runSettings: state.runSettings,
      result,
      timing,
    };
    state.shownRun = run;
    return run;
  } catch (error) {
    // The message names the option already.
    $('form-error').textContent = MODEL_GONE.includes(error.code)
      ? `The model stopped working (${error.code}): ${error.message}. Your prompt and settings are kept.`
      : error.message;
    $('form-error').hidden = false;
    $('reload-model').hidden = !MODEL_GONE.includes(error.code);
    return null;
  } finally {
    state.generation = null;
    $('prefill').hidden = true;
    markStopChips(await generation.result.catch(() => null));
    setBusy(false);
    renderConversation();
    drawBranches($('branches'), state.shownRun, showRun);
    renderInspector();
  }
}

/** Chat mode: the turns so far, each answer with a button that shows its chips and inspector. */
function renderConversation() {
  const chat = isChat();
  $('chat-setup').hidden = !chat;
  $('new-chat').hidden = !chat;
  $('conversation').hidden = !chat || state.turns.length === 0;
  $('prompt-label').textContent = !chat ? 'Prompt' : state.turns.length ? 'Your next message' : 'Your message';
  updateButtons();
  $('conversation').replaceChildren(...state.turns.map((turn, i) => {
    const item = document.createElement('li');
    item.className = turn.role;
    const role = Object.assign(document.createElement('span'), { className: 'role', textContent: turn.role === 'user' ? 'You' : 'Model' });
    item.append(role, document.createTextNode(turn.content));
    if (turn.run) {
      const inspect = Object.assign(document.createElement('button'), { type: 'button', textContent: 'Inspect this answer' });
      inspect.setAttribute('aria-label', `Inspect answer ${(i + 1) / 2}`);
      inspect.setAttribute('aria-pressed', String(turn.run === state.shownRun));
      inspect.addEventListener('click', () => showRun(turn.run));
      item.append(document.createElement('br'), inspect);
    }
    return item;
  }));
}

/** Shows an earlier run's chips, stats and inspector. */
function showRun(run) {
  if (state.generation) return;
  state.steps = run.steps;
  state.runSettings = run.runSettings;
  state.model = run.model;
  state.selected = null;
  state.shownRun = run;
  $('tokens').replaceChildren();
  for (const step of run.steps) appendChip(step);
  markStopChips(run.result);
  showStats({ result: run.result });
  if (run.timing) drawTimeline($('timeline'), $('timeline-summary'), run.timing);
  else drawTimeline($('timeline'), $('timeline-summary'), { times: [] });
  drawEntropyTrack($('entropy-track'), $('entropy-summary'), run.entropy ?? []);
  showLedger(run.steps, run.result, Boolean(run.options?.speculative));
  renderConversation();
  drawBranches($('branches'), run, showRun);
  renderInspector();
}

function newConversation() {
  state.turns = [];
  renderConversation();
}

/**
 * The prompt's progress: `null` before the first report (the bar then moves without a value),
 * else `{ done, total, cached }` in prompt tokens.
 */
function showPrefill(progress) {
  $('prefill').hidden = false;
  if (!progress) {
    $('prefill-label').textContent = 'Reading the prompt…';
    $('prefill-bar').removeAttribute('value');
    return;
  }
  const { done, total, cached } = progress;
  state.prefillReports.push(progress);
  $('prefill').dataset.reports = state.prefillReports.map((r) => r.done).join(',');
  $('prefill-label').textContent = `Reading the prompt: ${done} of ${total} tokens`
    + (cached ? ` (${cached} already in the cache)` : '');
  $('prefill-bar').value = total ? done / total : 1;
}

/**
 * Marks the chips of a stop string: the tokens after the result's text were held back and cut,
 * so they are shown as the stop, not as text.
 */
function markStopChips(result) {
  if (!result?.stopSequence) return;
  let offset = 0;
  for (const chip of $('tokens').children) {
    const step = state.steps[Number(chip.dataset.index)];
    if (offset >= result.text.length) {
      chip.classList.add('stop');
      chip.textContent = `⏹ ${shownToken(step.token)}`;
      chip.setAttribute('aria-label', `token ${step.index + 1}: part of the stop string ${JSON.stringify(result.stopSequence)}, not output`);
      chip.title = `part of the stop string ${JSON.stringify(result.stopSequence)}: generated, then cut`;
    }
    offset += step.token.length;
  }
}

function stop() {
  state.generation?.abort();
}

// ---- output ------------------------------------------------------------------------------------

/** The sampler's explanation of a step under `settings`, listing the chart's bars. */
const explained = (step, settings, topN = BARS) => explainStep(step, settings, { vocabSize: state.model.vocabSize, topN });

/** The chosen token's probability and rank under the settings the run used (null: not known). */
function chosenUnderRun(step) {
  const { chosen, known } = explained(step, state.runSettings, 1);
  return known(step.id) ? { probability: chosen.prob, rank: chosen.rank } : { probability: null, rank: null };
}

function chipColour(probability) {
  if (probability === null) return 'hsl(0 0% var(--chip-light))';
  const colourBy = $('colour-by').value;
  // Probability: red (unlikely) to green (certain). Surprisal: the same scale over 0..8 bits.
  const level = colourBy === 'surprisal'
    ? 1 - Math.min(1, -Math.log2(Math.max(probability, 1e-12)) / 8)
    : probability;
  return `hsl(${Math.round(level * 120)} 70% var(--chip-light))`;
}

function appendChip(step) {
  const { probability: underRun, rank } = chosenUnderRun(step);
  // Greedy gives every chosen token p = 1: colour by the model's own probability instead.
  const greedy = state.runSettings.temperature === 0;
  const probability = greedy ? Math.exp(step.logprob) : underRun;
  const chip = document.createElement('button');
  chip.type = 'button';
  chip.className = step.forced ? 'token forced' : 'token';
  chip.dataset.index = String(step.index);
  chip.dataset.probability = probability === null ? '' : String(probability);
  chip.style.setProperty('--chip', chipColour(probability));
  const shown = step.token.replace(/\n/g, '↵\n');
  chip.textContent = shown;
  const pText = probability === null
    ? `below the top ${CANDIDATES}`
    : `${greedy ? 'model p' : 'p'} ${probability.toFixed(4)}, rank ${rank}`;
  const forced = step.forced ? ' · chosen by you (a fork)' : '';
  chip.title = `id ${step.id} · ${pText} · raw logprob ${step.logprob.toFixed(3)}${forced}`;
  chip.setAttribute('aria-label', `token ${step.index + 1}: ${JSON.stringify(step.token)}, ${pText}${forced}`);
  chip.addEventListener('click', () => select(step.index));
  chip.addEventListener('mouseenter', () => showAlternatives(chip, step));
  chip.addEventListener('focus', () => showAlternatives(chip, step));
  chip.addEventListener('mouseleave', hideAlternatives);
  chip.addEventListener('blur', hideAlternatives);
  $('tokens').append(chip);
}

/** Alternatives shown when a chip is pointed at or focused: the model's own top candidates. */
const ALTERNATIVES = 5;

function showAlternatives(chip, step) {
  const box = $('alternatives');
  const heading = document.createElement('p');
  heading.textContent = `Step ${step.index + 1}: the model's top ${ALTERNATIVES} (temperature 1, before any cut)`;
  const list = document.createElement('ol');
  for (const c of step.top.slice(0, ALTERNATIVES)) {
    const item = document.createElement('li');
    item.textContent = `“${shownToken(c.text)}” ${Math.exp(c.logprob).toFixed(4)}`;
    if (c.id === step.id) item.className = 'chosen';
    list.append(item);
  }
  const hint = document.createElement('p');
  hint.className = 'hint';
  hint.textContent = 'Click or press Enter to inspect this step.';
  box.replaceChildren(heading, list, hint);
  box.hidden = false;
  box.dataset.step = String(step.index);
  chip.setAttribute('aria-describedby', 'alternatives');
  // Under the chip, kept inside the window (fixed: the page may scroll).
  const rect = chip.getBoundingClientRect();
  const width = Math.min(280, window.innerWidth - 16);
  box.style.width = `${width}px`;
  box.style.left = `${Math.max(8, Math.min(rect.left, window.innerWidth - width - 8))}px`;
  box.style.top = `${rect.bottom + 4}px`;
}

function hideAlternatives() {
  $('alternatives').hidden = true;
}

function recolourChips() {
  for (const chip of $('tokens').children) {
    const p = chip.dataset.probability;
    chip.style.setProperty('--chip', chipColour(p === '' ? null : Number(p)));
  }
}

function select(index) {
  state.selected = index;
  for (const chip of $('tokens').children) chip.classList.toggle('selected', Number(chip.dataset.index) === index);
  renderInspector();
}

/** Fills a <dl> with [name, value] rows; each value is findable by `[data-stat="name"]`. */
function fillList(list, rows) {
  list.replaceChildren(...rows.flatMap(([name, value]) => {
    const dt = document.createElement('dt');
    dt.textContent = name;
    const dd = document.createElement('dd');
    dd.textContent = value;
    dd.dataset.stat = name;
    return [dt, dd];
  }));
}

/** What a person wants to know about a run; what an engineer wants goes under "Details". */
function showStats({ tokens, elapsedMs, result }) {
  fillList($('run-facts'), result?.transfer
    ? [
      ['read back', `${result.transfer.bytesPerToken.toFixed(0)} bytes/token`],
      ...(result.transfer.gpuQueue.perDecodeToken
        ? [
          ['kernels', `${result.transfer.gpuQueue.perDecodeToken.dispatches.toFixed(0)}/decode token`],
          ['GPU submits', `${result.transfer.gpuQueue.perDecodeToken.submits.toFixed(1)}/decode token`],
        ]
        : []),
    ]
    : []);
  if (result && !result.timing) {
    // A replayed trace: what it recorded, no timings.
    fillList($('stats'), [['tokens generated', String(state.steps.length)], ['finish reason', result.finishReason],
      ['source', 'a recorded trace']]);
    return;
  }
  const rows = result
    ? [
      ['time to first token', `${result.timing.ttftMs.toFixed(0)} ms`],
      ['prefill', `${result.timing.prefillTokensPerS.toFixed(2)} tok/s (${result.usage.promptTokens} prompt tokens${result.usage.cachedPromptTokens ? `, ${result.usage.cachedPromptTokens} cached` : ''})`],
      // The first token comes out of prefill: a decode rate needs a second one (a fork's given
      // tokens are not decoded).
      ...(result.timing.decodeMs > 0 ? [['decode', `${result.timing.decodeTokensPerS.toFixed(2)} tok/s`]] : []),
      ...(result.speculation?.verifyPasses
        ? [['speculation', `${result.speculation.acceptedTokens} of ${result.speculation.draftedTokens} drafted tokens accepted `
          + `(${(result.speculation.acceptanceRate * 100).toFixed(0)} %), ${result.speculation.tokensPerPass.toFixed(2)} tokens/pass`]]
        : []),
      ['tokens generated', String(result.usage.completionTokens)],
      ['finish reason', result.finishReason],
    ]
    : [['tokens generated', String(tokens)], ['elapsed', `${(elapsedMs / 1000).toFixed(1)} s`]];
  fillList($('stats'), rows);
}

// ---- inspector ---------------------------------------------------------------------------------

function renderInspector() {
  const index = inspectedIndex();
  const step = state.steps[index];
  if (!step) {
    $('whatif').textContent = 'Generate, then pick a token to see its step.';
    $('chart').replaceChildren();
    $('chart-table').replaceChildren();
    $('chart-rest').textContent = '';
    $('walkthrough').replaceChildren();
    $('inspector-step').textContent = '';
    $('fork').hidden = true;
    return;
  }
  const settings = Object.fromEntries(WHAT_IF_KEYS.map((k) => [k, knobValues()[k]]));
  const now = explained(step, settings);
  const then = explained(step, state.runSettings, 1);
  const chosenKnown = now.known(step.id);
  $('inspector-step').textContent = `step ${index + 1} of ${state.steps.length}: chose “${shownToken(step.token)}”`;

  const differs = WHAT_IF_KEYS.some((k) => settings[k] !== state.runSettings[k]);
  const fmt = (p) => (chosenKnown ? p.toFixed(4) : `below the top ${CANDIDATES}`);
  const parts = [
    `${now.keptCount.toLocaleString('en')} token${now.keptCount === 1 ? '' : 's'} kept (mass ${now.keptMass.toFixed(3)} after temperature); `,
    `entropy ${now.entropy.toFixed(3)} nats (${(now.entropy / Math.LN2).toFixed(2)} bits). `,
    `The chosen token had p = ${fmt(then.chosen.prob)} with the run's settings`,
  ];
  if (differs) parts.push(`; with these it would have p = ${fmt(now.chosen.prob)}`);
  $('whatif').innerHTML = '';
  if (differs) {
    const badge = document.createElement('span');
    badge.className = 'differs';
    badge.textContent = 'What if: ';
    $('whatif').append(badge);
  }
  $('whatif').append(parts.join('') + (now.approximate ? ' (the rest of the vocabulary is estimated).' : '.'));
  $('whatif').dataset.keptCount = String(now.keptCount);

  const sampler = !differs && step.explain
    ? new Map(step.explain.candidates.map((c) => [c.id, c.finalProb]))
    : null;
  drawChart({ chart: $('chart'), rest: $('chart-rest'), table: $('chart-table') }, now, step, settings,
    { bars: BARS, vocabSize: state.model.vocabSize, sampler });
  showMask(step);
  drawForks(step);
  if (state.lensOf && (state.lensOf.run !== state.shownRun || state.lensOf.index !== index)) clearLens();
  drawWalkthrough(step);
}

/** The step the inspector shows. */
const inspectedIndex = () => state.selected ?? state.steps.length - 1;

/**
 * Runs `job` (a panel's work on the model) with the page busy: `status` (an element id) says
 * `running`, then what `job` resolves to when it is a string; a failure goes to `error` as
 * "`failed` (code): message", and the page stays usable.
 */
async function panelJob({ status, error: errorId }, running, failed, job) {
  $(errorId).hidden = true;
  $(status).textContent = running;
  setBusy(true);
  try {
    const done = await job();
    if (typeof done === 'string') $(status).textContent = done;
  } catch (error) {
    $(status).textContent = '';
    $(errorId).textContent = `${failed} (${error.code}): ${error.message}`;
    $(errorId).hidden = false;
  } finally {
    setBusy(false);
  }
}

/** The prompt in the box as a request's `prompt`, or its `messages` in chat mode. */
function promptOptions() {
  const prompt = $('prompt').value;
  return isChat() ? { messages: chatMessages(prompt) } : { prompt };
}

/** Candidates (columns) of the lens's heatmap. */
const LENS_CANDIDATES = 8;

/** The logit lens of the inspected step: its context runs once more (all but its last token from the cache). */
async function lookInside() {
  const run = state.shownRun;
  const index = inspectedIndex();
  if (!state.lm || state.busy || !run?.options || !run.steps[index]) return;
  await panelJob({ status: 'lens-summary', error: 'lens-error' }, `Running step ${index + 1} once more, layer by layer…`,
    'The lens could not run', async () => {
      const generated = run.steps.slice(0, index).map((s) => s.id);
      const report = await state.lm.logitLens({ ...run.request, generated, candidates: LENS_CANDIDATES });
      drawLens($('lens'), $('lens-summary'), report);
      state.lensOf = { run, index };
    });
}

/** Empties the lens (it showed another step). */
function clearLens() {
  state.lensOf = null;
  $('lens').replaceChildren();
  $('lens-summary').textContent = '';
}

/** Alternatives reported per scored token. */
const SCORE_TOP_K = 8;

/** Scores the text in the score panel's box (as a chat message when asked) and draws it. */
async function scoreText() {
  const text = $('score-text').value;
  if (!state.lm || state.busy || text.trim() === '') return;
  await panelJob({ status: 'score-status', error: 'score-error' }, 'Reading the text…', 'The text could not be scored',
    async () => {
      const report = $('score-chat').checked
        ? await state.lm.score(null, { messages: [{ role: 'user', content: text }], topK: SCORE_TOP_K })
        : await state.lm.score(text, { topK: SCORE_TOP_K });
      state.score = { report, selected: null };
      drawScoreLegend($('score-legend'), report);
      drawScoredTokens($('score-tokens'), $('score-detail'), report, {
        onSelect: (position) => {
          state.score.selected = position;
          updateButtons();
        },
      });
      return scoreSummary(report);
    });
}

/** The shown run's prompt and output, into the box `id` (the score or attention panel's). */
function useRunText(id) {
  const run = state.shownRun;
  if (!run?.request?.prompt || !run.result) return;
  $(id).value = run.request.prompt + run.result.text;
  if (id === 'score-text') $('score-chat').checked = false;
  updateButtons();
}

/** A positive whole number from the box `id`, or undefined when it is empty. */
function optionalWhole(id) {
  const text = $(id).value.trim();
  return text === '' ? undefined : Number(text);
}

/** One layer's attention over the attention panel's text (its layer and head, or the defaults). */
async function showAttention() {
  const prompt = $('attention-text').value;
  if (!state.lm || state.busy || prompt.trim() === '') return;
  await panelJob({ status: 'attention-status', error: 'attention-error' }, 'Reading the text…', 'The attention could not be read',
    async () => {
      const report = await state.lm.attention({ prompt, layer: optionalWhole('attention-layer'), head: optionalWhole('attention-head') });
      drawAttention({ map: $('attention-map'), text: $('attention-text-view'), detail: $('attention-detail') }, report);
      return attentionSummary(report);
    });
}

/**
 * A generation that continues the scored text from the token picked, with the page's settings:
 * the text up to it is the prompt (the KV cache holds it already, so only the generation runs).
 */
async function continueFromScored() {
  const picked = state.score?.selected;
  if (!state.lm || state.busy || picked === null || picked === undefined) return;
  const prefix = state.score.report.tokens.slice(0, picked + 1).map((t) => t.text).join('');
  const { messages: _, ...options } = generateOptions();
  await stream({ ...options, prompt: prefix });
}

/**
 * The speculative ledger of `steps` (the run shown; `result` once it has ended), its panel shown
 * when the run has a pass, or has ended having `asked` for speculation.
 */
function showLedger(steps, result, asked) {
  const passes = drawLedger($('ledger'), $('ledger-summary'), steps, result);
  $('ledger-panel').hidden = !passes && !(result?.speculation && asked);
  $('ledger-compare-status').textContent = '';
}

/** The shown run once more without speculation: its decode rate and passes beside the run's. */
async function compareWithoutSpeculation() {
  const run = state.shownRun;
  if (!state.lm || state.busy || !run?.options?.speculative) return;
  const { speculative: _, ...plain } = run.options;
  await panelJob({ status: 'ledger-compare-status', error: 'ledger-compare-error' }, 'Running it again without speculation…',
    'The run without speculation stopped', async () => {
      const generation = state.lm.generate(plain);
      const ids = [];
      for await (const step of generation) ids.push(step.id);
      const result = await generation.result;
      const same = ids.length === run.steps.length && ids.every((id, i) => id === run.steps[i].id);
      const rate = (r) => `${r.timing.decodeTokensPerS.toFixed(2)} tok/s`;
      return `Without speculation: ${rate(result)}, ${result.speculation.tokensPerPass.toFixed(2)} tokens per pass. `
        + `With: ${rate(run.result)}, ${run.result.speculation.tokensPerPass.toFixed(2)} tokens per pass. `
        + `The same tokens: ${same ? 'yes' : 'no'}.`;
    });
}

/** The temperatures of the comparison. */
const COMPARE_TEMPERATURES = [0, 0.7, 1.5];

/** The prompt in the box with the settings and seed on the page, once per temperature, side by side. */
async function compareTemperatures() {
  if (!state.lm || state.busy || checkForm().size) return;
  const options = generateOptions();
  const request = { ...promptOptions(), maxTokens: options.maxTokens, seed: options.seed, stop: options.stop, topLogprobs: CANDIDATES };
  const settings = Object.fromEntries(WHAT_IF_KEYS.map((k) => [k, options[k]]));
  const columns = COMPARE_TEMPERATURES.map((temperature) => {
    const section = document.createElement('section');
    const column = new RunColumn(section, { title: `T = ${temperature}`, label: `Tokens at T = ${temperature}`, bars: 10,
      vocabSize: () => state.lm.info.vocabSize });
    return { section, column, temperature };
  });
  $('compare-columns').replaceChildren(...columns.map((c) => c.section));
  await panelJob({ status: 'compare-status', error: 'compare-error' }, 'Generating…', 'The comparison stopped', async () => {
    for (const { column, temperature } of columns) {
      $('compare-status').textContent = `Generating at T = ${temperature}…`;
      await column.generate(state.lm, request, { ...settings, temperature });
    }
    return `Seed ${request.seed}, ${request.maxTokens} tokens at most: the same start, three temperatures.`;
  });
}

/** A beam search on the prompt in the box, drawn as its tree. */
async function searchBeams() {
  if (!state.lm || state.busy) return;
  const beams = Number($('beam-width').value);
  const maxTokens = Math.max(1, Math.min(12, Math.round(Number($('beam-tokens').value)) || 6));
  await panelJob({ status: 'beam-status', error: 'beam-error' }, `Searching with ${beams} beams…`, 'The search could not run', async () => {
    const output = await state.lm.beamSearch({ ...promptOptions(), beams, maxTokens });
    drawBeams($('beam-tree'), $('beam-hypotheses'), output);
    const considered = output.trace.nodes.length - 1;
    const kept = output.trace.nodes.filter((n) => n.status === 'kept').length;
    return `${considered} sequences considered, ${kept} kept as beams; the hypotheses, best first:`;
  });
}

/**
 * What the response format's grammar did at `step`: its forbidden candidates struck through in
 * the chart (the model's own numbers stay), and a sentence with the probability it removed.
 */
function showMask(step) {
  const report = step.constraint;
  $('chart-mask').hidden = !report;
  if (!report) return;
  const forbidden = new Set(report.forbidden);
  let shown = 0;
  for (const row of document.querySelectorAll('#chart .candidate')) {
    if (!forbidden.has(Number(row.dataset.id))) continue;
    shown += 1;
    row.classList.add('masked');
    row.dataset.masked = 'true';
    row.querySelector('title')?.append(' · forbidden by the response format');
  }
  const inTop = step.top.filter((c) => forbidden.has(c.id)).reduce((sum, c) => sum + Math.exp(c.logprob), 0);
  const mass = report.removedMass ?? null;
  $('chart-mask').textContent = `The response format allowed ${report.allowed.toLocaleString('en')} tokens here and forbade `
    + `${shown} of the candidates drawn (struck through). `
    + (mass === null
      ? `The forbidden candidates among the top ${step.top.length} held ${inTop.toFixed(3)} of the model's probability.`
      : `The grammar removed ${mass.toFixed(3)} of the model's probability before temperature.`);
}

/** The inspected step's other top candidates, each a button that forks the run there. */
const FORKS = 5;

function drawForks(step) {
  const run = state.shownRun;
  const canFork = Boolean(state.lm && run?.options && run.steps === state.steps && !state.busy && ofLoadedModel(run));
  $('fork').hidden = !canFork;
  if (!canFork) return;
  $('fork-title').textContent = `Fork at step ${step.index + 1}: continue with another token instead of “${shownToken(step.token)}”`;
  // Not a candidate the response format forbade there: the engine refuses to force it.
  const forbidden = new Set(step.constraint?.forbidden ?? []);
  const choices = step.top.filter((c) => c.id !== step.id && !forbidden.has(c.id)).slice(0, FORKS);
  $('fork-choices').replaceChildren(...choices.map((candidate) => {
    const button = document.createElement('button');
    button.type = 'button';
    button.dataset.id = String(candidate.id);
    button.textContent = `“${shownToken(candidate.text)}” ${Math.exp(candidate.logprob).toFixed(3)}`;
    button.addEventListener('click', () => fork(step.index, candidate));
    return button;
  }));
}

/**
 * Softmax by hand for the step's first rows at the walkthrough's temperature; the last column is
 * the sampler's, whose normaliser is over the whole vocabulary, not just these rows.
 */
function drawWalkthrough(step) {
  const t = state.walkTemperature;
  const rows = step.top.slice(0, WALK_ROWS);
  const scaled = rows.map((g) => g.logit / t);
  const max = Math.max(...scaled);
  const exps = scaled.map((s) => Math.exp(s - max));
  const whole = new Map(explained(step, { temperature: t }, WALK_ROWS).candidates.map((c) => [c.id, c.prob]));
  const table = document.createElement('table');
  table.innerHTML = `<thead><tr><th>token</th><th>logit</th><th>÷ T = ${t}</th><th>exp(· − max)</th><th>÷ Σ = p</th></tr></thead>`;
  const body = document.createElement('tbody');
  rows.forEach((g, i) => {
    const tr = document.createElement('tr');
    if (g.id === step.id) tr.className = 'chosen';
    const cells = [shownToken(g.text), g.logit.toFixed(3), scaled[i].toFixed(3), exps[i].toPrecision(4), whole.get(g.id).toFixed(4)];
    tr.innerHTML = cells.map((c) => `<td></td>`).join('');
    cells.forEach((c, j) => { tr.children[j].textContent = c; });
    body.append(tr);
  });
  table.append(body);
  $('walkthrough').replaceChildren(table);
}

// ---- start -------------------------------------------------------------------------------------

async function start() {
  // The service worker (sw.js) that keeps the page's files for visits with the network off.
  registerOffline(new URL('sw.js', import.meta.url));
  buildKnobs();
  for (const id of checkedFields().keys()) {
    if ($(`${id}-error`)) continue;
    const note = document.createElement('span');
    Object.assign(note, { id: `${id}-error`, className: 'field-error', hidden: true });
    $(id).after(note);
  }
  loadSettings();
  $('form').noValidate = true; // checkForm says what is wrong, beside the box
  $('form').addEventListener('input', () => {
    checkForm();
    saveSettings();
  });
  $('form').addEventListener('change', saveSettings);
  $('seed-random').addEventListener('change', checkForm);
  $('copy-link').addEventListener('click', copyLink);
  $('export-trace').addEventListener('click', exportTrace);
  $('trace-file').addEventListener('change', openTraceFile);
  $('form').addEventListener('submit', generate);
  $('lens-run').addEventListener('click', lookInside);
  $('beam-run').addEventListener('click', searchBeams);
  $('score-run').addEventListener('click', scoreText);
  $('step-one').addEventListener('click', stepOnce);
  $('entropy-run').addEventListener('click', () => showEntropy());
  $('score-text').addEventListener('input', updateButtons);
  $('score-use-run').addEventListener('click', () => useRunText('score-text'));
  $('attention-use-run').addEventListener('click', () => useRunText('attention-text'));
  $('attention-run').addEventListener('click', showAttention);
  $('attention-text').addEventListener('input', updateButtons);
  $('score-continue').addEventListener('click', continueFromScored);
  $('compare-run').addEventListener('click', compareTemperatures);
  $('ledger-compare').addEventListener('click', compareWithoutSpeculation);
  $('speculative').addEventListener('change', checkForm);
  $('response-format').addEventListener('change', () => {
    showFormatText();
    checkForm();
  });
  showFormatText();
  $('stop').addEventListener('click', stop);
  $('new-chat').addEventListener('click', newConversation);
  $('reload-model').addEventListener('click', () => {
    $('form-error').hidden = true;
    state.lm?.dispose();
    state.lm = null;
    loadModel();
  });
  installPicker();
  for (const radio of document.querySelectorAll('input[name="mode"]')) radio.addEventListener('change', renderConversation);
  renderConversation();
  $('show-boundaries').addEventListener('change', (e) => $('tokens').classList.toggle('boundaries', e.target.checked));
  $('colour-by').addEventListener('change', recolourChips);
  window.addEventListener('resize', () => renderInspector());
  for (const button of document.querySelectorAll('[data-preset]')) {
    button.addEventListener('click', () => setKnobs(PRESETS[button.dataset.preset]));
  }
  for (const button of document.querySelectorAll('[data-walk-t]')) {
    button.addEventListener('click', () => {
      state.walkTemperature = Number(button.dataset.walkT);
      for (const other of document.querySelectorAll('[data-walk-t]')) other.setAttribute('aria-pressed', String(other === button));
      renderInspector();
    });
  }
  // Keyboard, from the focused chip: arrows to the previous or next, Home and End to the first or
  // last, each inspected as it is reached (Enter and Space inspect too: chips are buttons).
  chipKeys($('tokens'), select);

  // A trace in the link replays at once, before any model loads.
  const traceUrl = new URLSearchParams(location.search).get(TRACE_PARAM);
  if (traceUrl) await openTraceUrl(traceUrl);
  await loadModel(initialChoice());
}

/**
 * Loads `choice` (models.js), by default the one loaded last (again, after the GPU was lost or
 * the engine crashed: the page, its prompt and settings stay as they are; the file comes from the
 * browser's cache). The model loaded so far keeps working until the new one is ready, and stays
 * when the new one fails: the picker says why. The engine checks what the model needs of the GPU
 * before it uploads anything.
 */
async function loadModel(choice = state.modelChoice) {
  $('reload-model').hidden = true;
  $('model-error').hidden = true;
  const previous = state.lm;
  const previousChoice = state.modelChoice;
  state.modelChoice = choice;
  $('model-url-row').hidden = choice.id !== URL_CHOICE;
  $('model-picker').dataset.loading = 'true';
  if (!previous) {
    updateButtons();
    document.body.dataset.state = 'loading';
  }
  $('load').hidden = false;
  $('load-bar').value = 0;
  const backend = $('backend-choice').value;
  const phases = {
    download: 'Downloading', read: 'Reading the file', parse: 'Reading the model',
    upload: backend === 'cpu' ? 'Preparing the weights' : 'Uploading the weights',
  };
  // "Stop loading" ends this load: its worker and the memory it took; the model before stays.
  const stopping = new AbortController();
  $('load-stop').onclick = () => stopping.abort();
  let next;
  try {
    next = await Nucleus.load({
      model: choice.file ?? choice.url,
      backend,
      signal: stopping.signal,
      onProgress: ({ phase, loaded, total, cached, plan }) => {
        const mb = (n) => (n / 1e6).toFixed(1);
        $('load-label').textContent = `${phases[phase]} ${choice.label}${cached && phase === 'download' ? ' (from the browser cache)' : ''}: `
          + `${mb(loaded)} of ${mb(total)} MB${plan ? ` · ${planText(plan)}` : ''}`;
        $('load-bar').value = total ? loaded / total : 0;
      },
    });
  } catch (error) {
    $('load').hidden = true;
    delete $('model-picker').dataset.loading;
    if (previous) {
      // The model before stays: say why the new one did not load, and show it picked, where it runs.
      state.modelChoice = previousChoice;
      fillPicker($('model-choice'), previousChoice);
      if (backend !== state.loadedBackend) {
        $('backend-choice').value = state.loadedBackend;
        saveSettings();
      }
      showModelError(choice, error);
    } else if (error.code === 'aborted') {
      // Stopped with nothing loaded: the page waits for a choice, or the same one again.
      document.body.dataset.state = 'error';
      $('status').textContent = `Loading ${choice.label} stopped. Pick a model, or load it again.`;
      $('reload-model').hidden = false;
    } else if (choice.id !== 'default') {
      // A kept choice that no longer loads (a removed file, a URL gone): the default instead.
      showModelError(choice, error);
      await loadModel(knownChoice('default'));
    } else {
      document.body.dataset.state = 'error';
      $('status').textContent = `The model could not load (${error.code}): ${error.message}`
        + (error.code === 'no-webgpu' ? ' Choose “Auto” or “CPU” under “Runs on” to run it on the CPU.' : '');
    }
    return;
  }
  delete $('model-picker').dataset.loading;
  $('load').hidden = true;
  state.lm = next;
  state.loadedBackend = backend;
  state.modelChoice = next.info.url === choice.url ? choice : urlChoice(next.info.url);
  fillPicker($('model-choice'), state.modelChoice);
  if (previous) {
    // Runs of the old model stay on the page (their tokens are its own): no lens or fork on them.
    if (state.busy) state.retired = previous;
    else previous.dispose();
    newConversation();
  }
  rememberChoice(next.info.url);
  showModel(next.info);
  refreshStoredModels();
  if (!state.busy) setBusy(false);
}

/** A model that did not load: the picker says which and why; what was loaded stays. */
/**
 * What a load will take, from its plan (read from the file's header before the rest downloads),
 * beside what the device offers: "needs 612 MB in this tab for 8,192 positions (a tab holds 4,295
 * MB; the browser reports 8 GiB on this device)", and the GPU's share on WebGPU.
 */
function planText({ hostBytes, deviceBytes, contextLength, offers }) {
  const mb = (n) => Math.round(n / 1e6).toLocaleString('en-US');
  const has = [`a tab holds ${mb(offers.wasmMemoryBytes)} MB`];
  // navigator.deviceMemory: GiB, rounded and capped by the browser.
  if (offers.deviceMemoryBytes) has.push(`the browser reports ${offers.deviceMemoryBytes / 2 ** 30} GiB on this device`);
  return `needs ${mb(hostBytes)} MB in this tab${deviceBytes ? ` and ${mb(deviceBytes)} MB on the GPU` : ''} `
    + `for ${contextLength.toLocaleString('en-US')} positions (${has.join('; ')})`;
}

function showModelError(choice, error) {
  const fits = /contextLength (\d+) or less would fit/.exec(error.message)?.[1];
  $('model-error').textContent = (error.code === 'aborted'
    ? `Loading ${choice.label} stopped.`
    : `${choice.label} could not load (${error.code}): ${error.message}`)
    + (fits ? ` The engine checked this before uploading anything: a shorter context would fit (${fits} positions).` : '')
    + (state.lm ? ` ${state.lm.info.title} is still loaded.` : '');
  $('model-error').hidden = false;
}

/** The loaded model in the page: its title, where it runs and why, its facts, and what it can do (a chat needs a template). */
function showModel(info) {
  const onCpu = info.backend.kind === 'cpu';
  const adapter = info.adapter
    ? [info.adapter.vendor, info.adapter.architecture].filter(Boolean).join(' / ') || 'unnamed adapter'
    : 'none';
  const emulation = info.adapter && emulatedAdapter(info.adapter);
  $('status').textContent = `${info.title}, loaded in ${(info.loadMs / 1000).toFixed(1)} s`
    + `${info.fromCache ? ' from the browser cache' : ''}, on ${onCpu ? 'the CPU' : 'the GPU'}.`
    + (info.cacheError ? ` Not kept for next time (${info.cacheError.code}): ${info.cacheError.message}.` : '');
  $('backend-note').textContent = onCpu
    ? `Runs on ${info.device}: ${info.backend.reason}. `
      + 'A hardware GPU runs it in Nucleus’s WebGPU kernels instead, one submission per token: where this browser '
      + 'has one, “Auto” picks it.'
    : `Runs on WebGPU: ${info.backend.reason}.`
      + (emulation ? ` ${emulation} emulates the GPU on the CPU: expect about a token a second; “CPU” is several times faster.` : '');
  fillList($('model-facts'), [
    ['runs on', onCpu ? `the CPU engine, ${info.backend.threads} thread${info.backend.threads === 1 ? '' : 's'}` : 'WebGPU'],
    ['WebGPU adapter', `${adapter}${emulation ? ' (a CPU emulation)' : ''}`],
    ['model', `${info.name}: ${info.architecture}, ${info.quantization}, ${(info.parameters / 1e6).toFixed(0)}M parameters, ${info.vocabSize.toLocaleString('en')} tokens`],
    ['forward pass', onCpu ? `${info.path} (${info.device.replace(/^.*, ([^,]+)\)$/, '$1')})` : `${info.path}, ${info.f16 ? 'f16 available' : 'f32'}`],
    [onCpu ? 'weights in memory' : 'weights on the GPU', `${(info.weightBytes / 2 ** 20).toFixed(1)} MiB`],
    // What the context costs: KV rows per token for the attention layers, and for recurrent
    // layers (Qwen3.5's Gated DeltaNet) a state of fixed size.
    ['memory per token', `${(info.kvBytesPerToken / 1024).toFixed(1)} KiB of KV rows`
      + (info.kvWindow
        ? `; ${(info.kvWindow.bytesPerToken / 1024).toFixed(1)} KiB of them in the sliding-window layers, which keep a ring of `
          + `${info.kvWindow.rows.toLocaleString('en')} positions: past it, ${((info.kvBytesPerToken - info.kvWindow.bytesPerToken) / 1024).toFixed(1)} KiB`
        : '')],
    ...(info.stateBytes
      ? [['recurrent state', `${(info.stateBytes / 2 ** 20).toFixed(1)} MiB, a fixed size (no KV rows in those layers)`]]
      : []),
  ]);
  // A base model has no chat template: it continues the text it is given.
  const chat = document.querySelector('input[name="mode"][value="chat"]');
  chat.disabled = !info.chatTemplate;
  if (!info.chatTemplate && chat.checked) {
    document.querySelector('input[name="mode"][value="raw"]').checked = true;
    renderConversation();
    saveSettings();
  }
  $('base-model').hidden = info.chatTemplate;
  $('base-model').textContent = info.chatTemplate ? ''
    : `${info.title.split(' · ')[0]} has no chat template (a base model): it continues the text you give it.`;
  $('exact-hint').textContent = `each step reads its whole logits row (${(info.vocabSize * 4 / 1024).toLocaleString('en', { maximumFractionDigits: 0 })} KB) instead of only the top candidates`;
}

/** The picker's list of the models this browser keeps. */
function refreshStoredModels() {
  showStoredModels({
    tbody: $('stored-list').tBodies[0],
    summary: $('stored-summary'),
    quota: $('stored-quota'),
    currentUrl: state.lm?.info.url,
    onLoad: (choice) => loadModel(choice),
    onRemoved: () => refreshStoredModels(),
  }).catch((error) => {
    $('stored-quota').textContent = `This browser's storage could not be read: ${error.message}`;
  });
}

/** The picker's events: a known model, a file (chosen or dropped anywhere), a URL. */
function installPicker() {
  fillPicker($('model-choice'));
  const pickFile = (file) => loadModel({ id: FILE_CHOICE, file, label: file.name || 'the file' });
  // Another backend: the same model again, there (the one loaded stays until it is ready).
  $('backend-choice').addEventListener('change', () => {
    saveSettings();
    loadModel();
  });
  $('model-choice').addEventListener('change', () => {
    const id = $('model-choice').value;
    $('model-url-row').hidden = id !== URL_CHOICE;
    if (id === FILE_CHOICE) {
      $('model-file').click();
    } else if (id !== URL_CHOICE && id !== LOADED_CHOICE) {
      loadModel(knownChoice(id));
    }
  });
  // The file dialog closed without a file: the picker shows the model loaded again.
  $('model-file').addEventListener('cancel', () => fillPicker($('model-choice'), state.modelChoice));
  $('model-file').addEventListener('change', () => {
    const [file] = $('model-file').files;
    if (file) pickFile(file);
    $('model-file').value = '';
  });
  $('model-url-load').addEventListener('click', () => {
    let url;
    try {
      url = new URL($('model-url').value.trim(), location.href).href;
    } catch {
      $('model-error').textContent = `“${$('model-url').value}” is not a URL.`;
      $('model-error').hidden = false;
      return;
    }
    loadModel(urlChoice(url));
  });
  acceptDroppedFiles($('drop-zone'), pickFile);
  $('stored-models').addEventListener('toggle', refreshStoredModels);
}

/** Errors after which this model can do nothing more: the page offers to load it again. */
const MODEL_GONE = ['device-lost', 'internal'];

// The sampler's wasm module and knobs first: the page's controls are made from them.
try {
  await loadSampler(DEFAULT_ASSETS);
  start();
} catch (error) {
  document.body.dataset.state = 'error';
  $('status').textContent = `The playground could not start (${error.code ?? 'internal'}): ${error.message}`;
}
