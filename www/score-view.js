// A scored text (lm.score's report), GLTR's way: every token a button coloured by the rank the
// model gave it after the tokens before it, a legend of the rank buckets with their counts, and
// for the token picked (click, focus, or arrows/Home/End from the focused one) what the model
// expected there, as bars. Template and control tokens are marked as such. The playground's
// score panel and <nucleus-playground mode="score"> draw it; chart.css styles it.

import { shownToken, svg } from './chart.js';
import { chipKeys } from './run-column.js';

/** The rank buckets, best first: the one owner of their bounds, names and classes. */
export const RANK_BUCKETS = Object.freeze([
  { upTo: 1, name: 'top 1', className: 'rank-1' },
  { upTo: 10, name: 'top 10', className: 'rank-10' },
  { upTo: 100, name: 'top 100', className: 'rank-100' },
  { upTo: 1000, name: 'top 1000', className: 'rank-1000' },
  { upTo: Infinity, name: 'beyond', className: 'rank-beyond' },
]);

/** The bucket of a rank (1: the model's most likely token); null for a token nothing predicts. */
export const rankBucket = (rank) => (rank === undefined ? null : RANK_BUCKETS.find((b) => rank <= b.upTo));

const percent = (p) => (p >= 0.001 ? `${(p * 100).toFixed(1)} %` : p.toExponential(1));

/** A token's rating in words (its button's label and the detail line). */
export function describeToken(token, position) {
  const text = `${token.special ? 'template token ' : ''}“${shownToken(token.text)}”`;
  if (token.rank === undefined) return `${text}, token ${position + 1}: the first, which nothing predicts`;
  return `${text}, token ${position + 1}: rank ${token.rank}, p ${percent(token.prob)} (log p ${token.logprob.toFixed(2)})`;
}

/** Fills `legend` (a <ul>) with the buckets and how many of the report's tokens fall in each. */
export function drawScoreLegend(legend, report) {
  const counts = new Map(RANK_BUCKETS.map((b) => [b, 0]));
  for (const token of report.tokens) {
    const bucket = rankBucket(token.rank);
    if (bucket) counts.set(bucket, counts.get(bucket) + 1);
  }
  legend.replaceChildren(...RANK_BUCKETS.map((bucket) => {
    const item = document.createElement('li');
    const swatch = document.createElement('span');
    swatch.className = `swatch ${bucket.className}`;
    item.append(swatch, `${bucket.name}: ${counts.get(bucket)}`);
    return item;
  }));
}

/**
 * Draws `report`'s tokens into `container` as buttons and returns `select(position)`, which
 * marks a token and draws what the model expected there into `detail` (a sentence and bars of
 * the alternatives, the token itself marked). `onSelect(position)` is told each pick.
 */
export function drawScoredTokens(container, detail, report, { onSelect = () => {} } = {}) {
  const buttons = report.tokens.map((token, position) => {
    const button = document.createElement('button');
    button.type = 'button';
    const bucket = rankBucket(token.rank);
    button.className = `token scored ${bucket ? bucket.className : 'rank-none'}${token.special ? ' special' : ''}`;
    button.dataset.index = String(position);
    if (token.rank !== undefined) button.dataset.rank = String(token.rank);
    button.textContent = token.text;
    button.setAttribute('aria-label', describeToken(token, position));
    button.addEventListener('click', () => select(position));
    button.addEventListener('focus', () => select(position));
    button.addEventListener('mouseenter', () => select(position));
    return button;
  });
  container.replaceChildren(...buttons);
  let selected = null;
  function select(position) {
    if (selected === position) return;
    buttons[selected]?.classList.remove('selected');
    buttons[selected]?.setAttribute('aria-pressed', 'false');
    selected = position;
    buttons[position].classList.add('selected');
    buttons[position].setAttribute('aria-pressed', 'true');
    drawExpected(detail, report.tokens[position], position);
    onSelect(position);
  }
  chipKeys(container, select);
  return select;
}

/** What the model expected at `token`'s position: a sentence, then its alternatives as bars. */
function drawExpected(detail, token, position) {
  const sentence = document.createElement('p');
  sentence.textContent = describeToken(token, position);
  if (!token.top.length) {
    detail.replaceChildren(sentence);
    return;
  }
  const listed = token.top.some((c) => c.id === token.id);
  const rows = listed ? token.top : [...token.top, { id: token.id, text: token.text, logprob: token.logprob }];
  const rowHeight = 18;
  // Drawn at the detail's own width, so the text keeps its size in a narrow column.
  const width = Math.max(280, Math.min(520, detail.clientWidth || 460));
  const labelWidth = Math.round(width * 0.32);
  const height = rows.length * rowHeight + 4;
  const maxProb = Math.max(...rows.map((c) => Math.exp(c.logprob)), 1e-9);
  const chart = svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img',
    'aria-label': `What the model expected at token ${position + 1}: its ${token.top.length} most likely tokens` });
  rows.forEach((candidate, i) => {
    const y = 2 + i * rowHeight;
    const p = Math.exp(candidate.logprob);
    const chosen = candidate.id === token.id;
    const rank = chosen ? token.rank : i + 1;
    chart.append(svg('text', { x: 0, y: y + 12, class: 'label' }, `${rank}. ${shownToken(candidate.text)}`.slice(0, 18)));
    chart.append(svg('rect', { x: labelWidth, y: y + 2, width: Math.max(1, (p / maxProb) * (width - labelWidth - 70)),
      height: rowHeight - 5, class: chosen ? 'bar kept' : 'bar before' }));
    chart.append(svg('text', { x: width - 66, y: y + 12, class: 'value' }, percent(p)));
    if (chosen) chart.append(svg('rect', { x: labelWidth - 2, y: y + 1, width: width - labelWidth - 66, height: rowHeight - 3, class: 'chosen-mark' }));
  });
  const bars = document.createElement('div');
  bars.className = 'chart';
  bars.append(chart);
  detail.replaceChildren(sentence, bars);
}

/** A sentence about the whole text: its length, perplexity and what the pass cost. */
export function scoreSummary(report) {
  const perplexity = report.perplexity === undefined ? '' : `, perplexity ${report.perplexity.toFixed(2)}`;
  const read = report.bytesRead ? `, ${(report.bytesRead / 1024).toFixed(1)} KiB read back` : '';
  return `${report.tokens.length} tokens: log-likelihood ${report.totalLogprob.toFixed(2)} nats${perplexity} `
    + `(${report.elapsedMs.toFixed(0)} ms${read}).`;
}
