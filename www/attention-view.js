// One layer's attention over a text (lm.attention's report): a heatmap with a row per query
// position and a column per position it can attend to (a short text shows whole), and the text
// itself with each token shaded by how much the position picked attends to it. A Gemma 3 local
// layer's window shows as the empty band before it; a Qwen3.5 Gated DeltaNet layer has no
// attention, and the view says so. The playground's attention panel and
// <nucleus-playground mode="attention"> draw it; chart.css styles it.

import { shownToken, svg } from './chart.js';
import { chipKeys } from './run-column.js';

/** Rows up to which the heatmap labels every row and column with its token. */
const LABELLED = 48;

/** A sentence about the report: which layer and heads, its window, or why there is nothing. */
export function attentionSummary(report) {
  const attending = report.layers.flatMap((memory, i) => (memory === 'kv-rows' ? [i + 1] : []));
  if (report.layers[report.layer - 1] === 'state') {
    return `Layer ${report.layer} is a Gated DeltaNet layer: it keeps a fixed-size state, not a row per position, `
      + `so it has no attention to show. The layers that attend: ${attending.join(', ')}.`;
  }
  const heads = report.head === undefined ? `the mean of its ${report.heads} heads` : `head ${report.head} of ${report.heads}`;
  const window = report.window
    ? ` It is a local layer: each position sees itself and the ${report.window - 1} before it.`
    : ' Each position sees every position before it.';
  return `Layer ${report.layer}, ${heads}: ${report.rows.length} positions, each row sums to 1.${window} `
    + `(${report.elapsedMs.toFixed(0)} ms${report.bytesRead ? `, ${(report.bytesRead / 1024).toFixed(1)} KiB read back` : ''}.)`;
}

/** The heatmap of `report` into `container` (an SVG, cells shaded by weight); `select(position)` on a row's click. */
function drawHeatmap(container, report, select) {
  const { rows, tokens } = report;
  const keys = rows.at(-1).position + 1;
  const labelled = rows.length <= LABELLED;
  const cell = Math.max(4, Math.min(16, Math.floor(560 / keys)));
  const left = labelled ? 96 : 8;
  const top = labelled ? 64 : 8;
  const width = left + keys * cell + 4;
  const height = top + rows.length * cell + 4;
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', class: 'attention-map',
    'aria-label': `Attention heatmap: ${rows.length} query positions (rows) over ${keys} positions (columns); darker is more attention` });
  if (labelled) {
    for (let k = 0; k < keys; k += 1) {
      const x = left + k * cell + cell / 2;
      root.append(svg('text', { x, y: top - 4, class: 'value', transform: `rotate(-60 ${x} ${top - 4})` }, shownToken(tokens[k].text).slice(0, 10)));
    }
  }
  for (const [i, row] of rows.entries()) {
    const y = top + i * cell;
    const group = svg('g', { class: 'attention-row', 'data-position': row.position });
    if (labelled) group.append(svg('text', { x: left - 4, y: y + cell - 3, class: 'value', 'text-anchor': 'end' }, shownToken(tokens[row.position].text).slice(0, 14)));
    const peak = Math.max(...row.weights);
    row.weights.forEach((weight, k) => {
      const rect = svg('rect', { x: left + k * cell, y, width: cell - 1, height: cell - 1, class: 'attention-cell',
        'fill-opacity': (Math.sqrt(weight / (peak || 1))).toFixed(3), 'data-weight': weight.toFixed(5) });
      rect.append(svg('title', {}, `“${shownToken(tokens[row.position].text)}” (${row.position + 1}) → “${shownToken(tokens[k].text)}” (${k + 1}): ${(weight * 100).toFixed(1)} %`));
      group.append(rect);
    });
    group.addEventListener('click', () => select(row.position));
    root.append(group);
  }
  container.replaceChildren(root);
}

/**
 * Draws `report` into `targets` ({ map, text, detail }): the heatmap, the text as buttons (a
 * query position's button shades the text by its row), and a sentence about the row picked.
 * Returns `select(position)`; the last row is picked first.
 */
export function drawAttention(targets, report) {
  const { map, text, detail } = targets;
  if (!report.rows.length) {
    map.replaceChildren();
    text.replaceChildren();
    detail.textContent = '';
    return () => {};
  }
  const byPosition = new Map(report.rows.map((row) => [row.position, row]));
  const buttons = report.tokens.map((token, position) => {
    const button = document.createElement('button');
    button.type = 'button';
    button.className = `token attended${token.special ? ' special' : ''}`;
    button.dataset.index = String(position);
    button.textContent = token.text;
    button.disabled = !byPosition.has(position);
    button.addEventListener('click', () => select(position));
    button.addEventListener('focus', () => select(position));
    return button;
  });
  text.replaceChildren(...buttons);
  let selected = null;
  function select(position) {
    const row = byPosition.get(position);
    if (!row || selected === position) return;
    selected = position;
    const peak = Math.max(...row.weights);
    buttons.forEach((button, k) => {
      const weight = row.weights[k] ?? 0;
      button.style.setProperty('--weight', (Math.sqrt(weight / (peak || 1))).toFixed(3));
      button.classList.toggle('selected', k === position);
      button.setAttribute('aria-pressed', String(k === position));
      button.setAttribute('aria-label', `“${shownToken(report.tokens[k].text)}”, token ${k + 1}`
        + (k <= position ? `: ${(weight * 100).toFixed(1)} % of token ${position + 1}'s attention` : ': after it'));
    });
    for (const group of map.querySelectorAll('.attention-row')) group.classList.toggle('selected', Number(group.dataset.position) === position);
    const ranked = row.weights.map((w, k) => [w, k]).sort((a, b) => b[0] - a[0]).slice(0, 3);
    detail.textContent = `“${shownToken(report.tokens[position].text)}” (token ${position + 1}) attends most to `
      + ranked.map(([w, k]) => `“${shownToken(report.tokens[k].text)}” (${k + 1}, ${(w * 100).toFixed(1)} %)`).join(', ') + '.';
  }
  drawHeatmap(map, report, select);
  chipKeys(text, select);
  select(report.rows.at(-1).position);
  return select;
}
