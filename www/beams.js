// The beam search view: the tree lm.beamSearch returns, one column per step. Each node is a
// sequence the search considered (its last token and its summed log-probability): kept as a live
// beam, finished (a hypothesis), or pruned (greyed, struck through); a line joins it to the beam
// it extends. Under it, the hypotheses, best first, with their length-penalised scores.

import { shownToken, svg } from './chart.js';

/** Draws `output` (lm.beamSearch's) into `tree` (the SVG) and `list` (an <ol> of hypotheses). */
export function drawBeams(tree, list, output) {
  const { nodes } = output.trace;
  const steps = Math.max(...nodes.map((n) => n.step));
  const columns = Array.from({ length: steps + 1 }, (_, step) => nodes.filter((n) => n.step === step));
  const rows = Math.max(...columns.map((c) => c.length));
  const columnWidth = 120;
  const rowHeight = 22;
  const width = (steps + 1) * columnWidth;
  const height = rows * rowHeight + 8;
  const place = new Map();
  columns.forEach((column, step) => column.forEach((node, i) => place.set(node.id, { x: step * columnWidth + 4, y: i * rowHeight + 4 })));
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, width, height, role: 'img',
    'aria-label': `Beam search tree: ${nodes.length - 1} sequences considered over ${steps} steps` });
  for (const node of nodes) {
    if (node.parent === null) continue;
    const from = place.get(node.parent);
    const to = place.get(node.id);
    root.append(svg('line', { x1: from.x + 100, y1: from.y + 9, x2: to.x, y2: to.y + 9, class: `edge ${node.status}` }));
  }
  for (const node of nodes) {
    const { x, y } = place.get(node.id);
    const group = svg('g', { class: `beam-node ${node.status}`, 'data-status': node.status, 'data-step': node.step,
      'data-token': node.token ?? '' });
    group.append(svg('rect', { x, y, width: 100, height: 18, rx: 3 }));
    const label = node.parent === null ? 'prompt' : `${shownToken(node.text)} ${node.logprob.toFixed(2)}`;
    group.append(svg('text', { x: x + 4, y: y + 13 }, label.length > 17 ? `${label.slice(0, 16)}…` : label));
    group.append(svg('title', {}, node.parent === null
      ? 'the prompt'
      : `${JSON.stringify(node.text)}: log p ${node.tokenLogprob.toFixed(3)}, sequence ${node.logprob.toFixed(3)}`
        + `${node.score === null ? '' : `, score ${node.score.toFixed(3)}`}; ${node.status}`));
    root.append(group);
  }
  tree.replaceChildren(root);
  list.replaceChildren(...output.hypotheses.map((h) => {
    const item = document.createElement('li');
    item.textContent = `${shownToken(h.text)} (score ${h.score.toFixed(3)}, log p ${h.logprob.toFixed(3)}, ${h.finishReason})`;
    return item;
  }));
}
