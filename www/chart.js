// The chart of one step: its candidates as bars before and after the sampler's cuts, drawn in SVG
// from the sampler's explanation (what-if.js). The playground's inspector and the
// <nucleus-playground> element draw it; chart.css styles it.

import { explainStep } from './what-if.js';

const SVG = 'http://www.w3.org/2000/svg';

/** A token's text for a label: escapes visible, spaces as ␣ (null: a token whose text is unknown). */
export const shownToken = (text) => (text === null ? '?' : JSON.stringify(text).slice(1, -1).replace(/ /g, '␣'));

/** An SVG element with `attributes` and, if given, its text (the page's drawings all use it). */
export function svg(tag, attributes, text) {
  const element = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, value);
  if (text !== undefined) element.textContent = text;
  return element;
}

/**
 * Draws a step's candidates as bars into `targets` ({ chart, rest?, table? }: elements), from
 * the sampler's explanation `result` of `step` under `settings` (what-if.js): each kept one solid
 * at its probability after the cuts (the kept bars sum to 1), over a pale bar at its probability
 * before them; a removed one pale only, with the cut that removed it; the cuts as lines. The rest
 * of the vocabulary is a sentence in `rest`, the chart as a table in `table`. Options: `bars` (how
 * many), `vocabSize`, `sampler` (ids to the sampler's own final probabilities recorded by the
 * engine during the run, when there are some: each bar carries it as `data-sampler-p`). A
 * constrained step's bars keep the model's order (by raw logit).
 */
export function drawChart(targets, result, step, settings, { bars: count = 24, vocabSize, sampler = null }) {
  const text = new Map(step.top.map((c) => [c.id, c.text]));
  // Greedy puts all the mass on the first token: the pale bars then show the model's own p (T = 1).
  const atOne = settings.temperature === 0
    ? new Map(explainStep(step, { ...settings, temperature: 1 }, { vocabSize, topN: count }).candidates.map((c) => [c.id, c.prob]))
    : null;
  // A constrained step keeps the model's order, so that the candidates the grammar forbade (last
  // in the sampler's order, with nothing left) stay where the model put them.
  const ordered = step.constraint ? [...result.candidates].sort((a, b) => b.logit - a.logit) : result.candidates;
  const bars = ordered.slice(0, count)
    .map((c) => ({ ...c, text: text.get(c.id) ?? null, prob: atOne?.get(c.id) ?? c.prob }));
  const beyondCount = vocabSize - bars.length;
  const beyondBefore = Math.max(0, 1 - bars.reduce((sum, g) => sum + g.prob, 0));
  const beyondAfter = Math.max(0, 1 - bars.reduce((sum, g) => sum + g.finalProb, 0));
  const rowHeight = 18;
  // Drawn at the chart's own width, so the text keeps its size on a phone.
  const width = Math.max(300, Math.min(720, targets.chart.clientWidth || 520));
  const labelWidth = width < 420 ? 92 : 150;
  const valueWidth = width < 420 ? 112 : 150;
  const barWidth = width - labelWidth - valueWidth;
  const height = bars.length * rowHeight + 22;
  const maxProb = Math.max(...bars.map((g) => Math.max(g.prob, g.finalProb)), 1e-9);
  const x = (p) => labelWidth + (p / maxProb) * barWidth;
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img',
    'aria-label': `Top ${bars.length} candidates of step ${step.index + 1}: probability before and after the cuts` });
  root.append(svg('text', { x: labelWidth, y: 11, class: 'value' }, settings.temperature === 0
    ? 'greedy keeps the first; pale: p at T = 1'
    : `pale: p at T = ${settings.temperature}; solid: after the cuts`));
  const rows = [];
  bars.forEach((g, i) => {
    const y = 16 + i * rowHeight;
    const { kept } = g;
    const row = svg('g', { class: 'candidate', 'data-id': g.id, 'data-rank': i + 1, 'data-kept': kept,
      'data-p': g.prob, 'data-final-p': kept ? g.finalProb : 0 });
    if (sampler?.has(g.id)) row.dataset.samplerP = String(sampler.get(g.id));
    row.append(svg('text', { x: 0, y: y + 12, class: 'label' }, `${i + 1}. ${shownToken(g.text)}`.slice(0, Math.floor(labelWidth / 6.5))));
    row.append(svg('rect', { x: labelWidth, y: y + 2, width: Math.max(1, x(g.prob) - labelWidth), height: rowHeight - 5,
      class: `bar ${kept ? 'before' : 'removed'}` }));
    if (kept) {
      row.append(svg('rect', { x: labelWidth, y: y + 5, width: Math.max(1, x(g.finalProb) - labelWidth), height: rowHeight - 11,
        class: 'bar kept' }));
    }
    const shown = kept ? g.finalProb.toFixed(4) : `cut: ${g.removedBy}`;
    row.append(svg('text', { x: labelWidth + barWidth + 6, y: y + 12, class: 'value' }, `${shown} · ${g.logit.toFixed(2)}`));
    if (g.id === step.id) {
      row.append(svg('rect', { x: 1, y: y + 1, width: width - 2, height: rowHeight - 2, rx: 3, class: 'chosen-mark' }));
    }
    row.append(svg('title', {}, `id ${g.id}, raw logit ${g.logit.toFixed(3)}, p before the cuts ${g.prob.toFixed(5)}, `
      + (kept ? `kept, p after the cuts ${g.finalProb.toFixed(5)}` : `removed by ${g.removedBy}`)));
    root.append(row);
    rows.push([String(i + 1), shownToken(g.text), g.logit.toFixed(3), g.prob.toFixed(5), kept ? g.finalProb.toFixed(5) : '0',
      kept ? (g.id === step.id ? 'kept, chosen' : 'kept') : `cut by ${g.removedBy}`]);
  });

  // Cut lines: top-k and top-p after the last token they keep; min-p at its probability threshold.
  // A cut below the last bar is drawn under it, with the number of tokens it keeps.
  const cutAfter = (tokensKept, cls, label, offset) => {
    if (tokensKept <= 0) return;
    const beyondBars = tokensKept > bars.length;
    const y = 16 + Math.min(tokensKept, bars.length) * rowHeight;
    root.append(svg('line', { x1: 0, x2: width, y1: y, y2: y, class: `cut ${cls}` }));
    root.append(svg('text', { x: width - offset, y: y - 2, class: `cut-label ${cls}`, 'text-anchor': 'end', fill: 'currentColor' },
      beyondBars ? `${label}: ${tokensKept.toLocaleString('en')} kept` : label));
  };
  const { stages } = result;
  if (settings.temperature > 0 && settings.topK > 0 && settings.topK < stages.possible) {
    cutAfter(stages.afterTopK, 'top-k', `top-k ${settings.topK}`, 4);
  }
  if (settings.temperature > 0 && settings.topP < 1 && stages.afterTopP < stages.afterTopK) {
    cutAfter(stages.afterTopP, 'top-p', `top-p ${settings.topP}`, 90);
  }
  // Min-p keeps p >= minP times the most probable token's p (the first candidate's).
  const minPThreshold = settings.minP * result.candidates[0].prob;
  if (settings.temperature > 0 && settings.minP > 0 && minPThreshold <= maxProb) {
    const mx = x(minPThreshold);
    root.append(svg('line', { x1: mx, x2: mx, y1: 14, y2: height - 8, class: 'cut min-p' }));
    root.append(svg('text', { x: mx + 3, y: height - 2, class: 'cut-label min-p' }, `min-p ${settings.minP}`));
  }
  targets.chart.replaceChildren(root);

  const estimated = result.approximate ? 'about ' : '';
  if (targets.rest) targets.rest.textContent = beyondCount
    ? `Not drawn: the other ${beyondCount.toLocaleString('en')} tokens hold ${estimated}${beyondBefore.toFixed(4)} of the `
      + `probability before the cuts and ${estimated}${beyondAfter.toFixed(4)} after.`
    : '';
  if (!targets.table) return;
  const table = document.createElement('table');
  table.innerHTML = '<thead><tr><th scope="col">rank</th><th scope="col">token</th><th scope="col">logit</th>'
    + '<th scope="col">p before the cuts</th><th scope="col">p after</th><th scope="col"></th></tr></thead>';
  const body = document.createElement('tbody');
  for (const cells of rows) {
    const tr = document.createElement('tr');
    for (const text of cells) tr.append(Object.assign(document.createElement('td'), { textContent: text }));
    body.append(tr);
  }
  table.append(body);
  targets.table.replaceChildren(table);
}

