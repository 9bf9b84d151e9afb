// One run shown as a column: its tokens as chips (buttons: click, or arrows from the focused one,
// to inspect a step), and the chart of the step picked (else the latest). The
// <nucleus-playground> element draws its runs with it (one column, or one per temperature in
// compare mode), and the playground page its temperature comparison. `chipKeys` is the keyboard
// of every row of chips, the page's own included.

import { explainStep } from './what-if.js';
import { drawChart, shownToken } from './chart.js';

/**
 * Moves between the chips of `container` (buttons with `data-index`) from the focused one: ← and
 * → to the previous and next, Home and End to the first and last; `select(index)` inspects the
 * chip reached, which takes the focus.
 */
export function chipKeys(container, select) {
  container.addEventListener('keydown', (event) => {
    const chips = container.children;
    const focused = event.target.closest?.('.token');
    if (!focused || !chips.length) return;
    const current = [...chips].indexOf(focused);
    const last = chips.length - 1;
    const moves = { ArrowLeft: current - 1, ArrowRight: current + 1, Home: 0, End: last };
    if (!(event.key in moves)) return;
    const next = Math.max(0, Math.min(last, moves[event.key]));
    select(Number(chips[next].dataset.index));
    chips[next].focus();
    event.preventDefault();
  });
}

export class RunColumn {
  /**
   * Fills `section` with the column. Options: `title` (a heading, or none), `label` (the chips'
   * group), `bars` (the chart's), `vocabSize()` (known once a model or trace is), `whatIf()`
   * (settings that override the run's when drawing: sliders).
   */
  constructor(section, { title = null, label = 'Generated tokens', bars = 12, vocabSize, whatIf = () => ({}) }) {
    section.classList.add('column');
    section.innerHTML = `${title === null ? '' : '<h3></h3>'}<div class="tokens" role="group"></div>
      <p class="whatif"></p><div class="chart"></div><p class="rest"></p>`;
    if (title !== null) section.querySelector('h3').textContent = title;
    this.dom = { tokens: section.querySelector('.tokens'), whatif: section.querySelector('.whatif'),
      chart: section.querySelector('.chart'), rest: section.querySelector('.rest') };
    this.dom.tokens.setAttribute('aria-label', label);
    Object.assign(this, { bars, vocabSize, whatIf, steps: [], selected: null, settings: null });
    chipKeys(this.dom.tokens, (index) => this.select(index));
  }

  /** Empties the column for a run with `settings` (the sampler's). */
  reset(settings) {
    this.settings = settings;
    this.steps = [];
    this.selected = null;
    this.dom.tokens.replaceChildren();
  }

  /** Shows a recorded run's steps at once. */
  replay(steps, settings) {
    this.reset(settings);
    steps.forEach((step) => this.append(step));
    this.select(0);
  }

  /** Runs `request` (prompt, settings, maxTokens, seed) on `lm`, a chip per step as it comes. */
  async generate(lm, request, settings) {
    this.reset(settings);
    for await (const step of lm.generate({ ...request, ...settings })) this.append(step);
  }

  append(step) {
    this.steps.push(step);
    const chip = document.createElement('button');
    chip.type = 'button';
    chip.className = 'token';
    chip.dataset.index = String(step.index);
    chip.dataset.id = String(step.id);
    chip.textContent = step.token.replace(/\n/g, '↵\n');
    chip.setAttribute('aria-label', `token ${step.index + 1}: ${JSON.stringify(step.token)}`);
    chip.addEventListener('click', () => this.select(step.index));
    this.dom.tokens.append(chip);
    if (this.selected === null) this.draw();
  }

  select(index) {
    this.selected = index;
    for (const chip of this.dom.tokens.children) chip.classList.toggle('selected', Number(chip.dataset.index) === index);
    this.draw();
  }

  /** The chart of the picked (else latest) step, at the run's settings and the what-if's. */
  draw() {
    const step = this.steps.find((s) => s.index === this.selected) ?? this.steps.at(-1);
    const vocabSize = this.vocabSize();
    if (!step || !vocabSize) return;
    const settings = { ...this.settings, ...this.whatIf() };
    const explanation = explainStep(step, settings, { vocabSize, topN: this.bars });
    this.dom.whatif.textContent = `Step ${step.index + 1}: chose “${shownToken(step.token)}”; `
      + `${explanation.keptCount.toLocaleString('en')} token${explanation.keptCount === 1 ? '' : 's'} kept.`;
    drawChart({ chart: this.dom.chart, rest: this.dom.rest }, explanation, step, settings, { bars: this.bars, vocabSize });
  }
}
