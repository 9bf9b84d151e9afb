// Where the answer forms: the logit lens of one step (lm.logitLens) as a heatmap. One row per
// block of the model, one column per candidate (the step's own top ones): each cell is the
// candidate's probability if the model stopped after that block (its final norm and output layer
// applied to the residual stream there), shaded by it; the last column is that depth's own top
// token. The last row is the step's own distribution.

import { shownToken } from './chart.js';

/** The first layer from which `id` stays the top prediction to the end (null: never). */
export function settledAt(report, id) {
  let from = null;
  for (const row of report.layers) {
    if (row.top.id === id) from ??= row.layer;
    else from = null;
  }
  return from;
}

/** Draws `report` (lm.logitLens's) into `target`, with a sentence in `summary`. */
export function drawLens(target, summary, report) {
  const table = document.createElement('table');
  table.className = 'lens-table';
  const caption = document.createElement('caption');
  caption.textContent = 'Probability of each candidate if the model stopped after each layer';
  const head = document.createElement('tr');
  head.append(Object.assign(document.createElement('th'), { scope: 'col', textContent: 'layer' }));
  for (const candidate of report.candidates) {
    head.append(Object.assign(document.createElement('th'), { scope: 'col', textContent: shownToken(candidate.text) }));
  }
  head.append(Object.assign(document.createElement('th'), { scope: 'col', textContent: 'top at this layer' }));
  const thead = document.createElement('thead');
  thead.append(head);
  const body = document.createElement('tbody');
  for (const row of report.layers) {
    const tr = document.createElement('tr');
    tr.dataset.layer = String(row.layer);
    tr.dataset.memory = row.memory;
    // A recurrent block says so: it keeps a fixed-size state where attention keeps KV rows.
    tr.append(Object.assign(document.createElement('th'), {
      scope: 'row',
      textContent: row.memory === 'state' ? `${row.layer} · state` : String(row.layer),
      title: row.memory === 'state' ? 'Gated DeltaNet: a state of fixed size' : 'attention: KV rows, one per position',
    }));
    row.probs.forEach((p, i) => {
      const td = document.createElement('td');
      td.textContent = p >= 0.005 ? p.toFixed(2) : '';
      td.dataset.p = String(p);
      td.style.setProperty('--heat', String(Math.sqrt(p)));
      td.title = `layer ${row.layer}: p(${JSON.stringify(report.candidates[i].text)}) = ${p.toPrecision(3)}`;
      tr.append(td);
    });
    const top = document.createElement('td');
    top.className = 'lens-top';
    top.textContent = `${shownToken(row.top.text)} ${row.top.prob.toFixed(2)}`;
    tr.append(top);
    body.append(tr);
  }
  table.append(caption, thead, body);
  target.replaceChildren(table);
  const winner = report.candidates[0];
  const from = settledAt(report, winner.id);
  const layers = report.layers.length;
  summary.textContent = `“${shownToken(winner.text)}” is the top prediction `
    + (from === layers ? 'only at the last layer' : `from layer ${from} of ${layers} on`)
    + ` (p ${report.layers.at(-1).probs[0].toFixed(3)} at the end). `
    + `The lens ran ${report.contextTokens - report.cachedTokens} token${report.contextTokens - report.cachedTokens === 1 ? '' : 's'}; `
    + `the KV cache held the other ${report.cachedTokens}; `
    + (report.layers.some((row) => row.memory === 'state')
      ? `${report.layers.filter((row) => row.memory === 'state').length} of ${layers} layers keep a fixed-size state, not KV rows; `
      : '')
    + (report.bytesRead ? `${(report.bytesRead / 1024).toFixed(1)} KB came back from the GPU.` : 'it ran on the CPU, where the rows already are.');
}
