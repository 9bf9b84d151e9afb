// Where a run's time goes, as the page saw its steps arrive: the prefill (every prompt token in
// one pass, ending with the first new token) as one bar, then one bar per decode pass (one token,
// or with speculation the several a verified draft yields), the KV cache's size growing under
// them, and the rates. Drawn in SVG from
// `timelineOf`, which the tests read too.

import { svg } from './chart.js';

const mb = (bytes) => `${(bytes / 1e6).toFixed(bytes < 1e7 ? 2 : 1)} MB`;

/**
 * Bytes of the KV cache's rows at `tokens` positions for a model's `info` (`ModelInfo::kv_bytes`
 * in the engine): every attention block's rows, a sliding-window block's no more than its ring.
 */
export function kvBytesAt({ kvBytesPerToken, kvWindow }, tokens) {
  return tokens * kvBytesPerToken - Math.max(0, tokens - (kvWindow?.rows ?? tokens)) * (kvWindow?.bytesPerToken ?? 0);
}

/**
 * The numbers of a timeline. `times`: ms from the request to each step's arrival (the run's own
 * steps, not a fork's given ones); `prefill`: the last prefill report ({ total, cached }: the
 * context's tokens and those the cache held); `kvBytesPerToken`, `kvWindow` and `stateBytes`: the
 * model's (`lm.info`: the KV rows of a token, the part of them a sliding window's ring stops
 * keeping past its rows, and the recurrent blocks' fixed-size state, 0 without);
 * `joined` (optional): per step, whether it came out of the same forward pass as the step before
 * (a speculative pass yields its accepted drafts and one more token at once).
 */
export function timelineOf({ times, prefill, kvBytesPerToken, kvWindow = null, stateBytes = 0, joined = [] }) {
  const context = prefill?.total ?? 0;
  const run = context - (prefill?.cached ?? 0);
  const bars = [];
  times.forEach((end, i) => {
    // Tokens in the KV cache once this step's token is known: the context, then one per decode.
    const kvTokens = context + i;
    if (i > 0 && joined[i]) {
      Object.assign(bars.at(-1), { end, kvTokens, tokens: bars.at(-1).tokens + 1 });
    } else {
      bars.push({ kind: i === 0 ? 'prefill' : 'decode', start: i === 0 ? 0 : times[i - 1], end, kvTokens, tokens: 1 });
    }
  });
  const decodeMs = times.length > 1 ? times.at(-1) - times[0] : 0;
  return {
    bars,
    prefillTokens: run,
    cachedTokens: prefill?.cached ?? 0,
    prefillMs: times[0] ?? 0,
    prefillTokensPerS: times[0] ? (run * 1000) / times[0] : 0,
    decodeSteps: times.length - 1,
    decodePasses: bars.length - 1,
    decodeTokensPerS: decodeMs > 0 ? ((times.length - 1) * 1000) / decodeMs : 0,
    kvBytes: (tokens) => kvBytesAt({ kvBytesPerToken, kvWindow }, tokens),
    stateBytes,
  };
}

/** Draws the timeline of `run` ({ times, prefill, kvBytesPerToken }) into `chart`, its summary into `summary`. */
export function drawTimeline(chart, summary, run) {
  const t = timelineOf(run);
  if (!t.bars.length) {
    chart.replaceChildren();
    summary.textContent = '';
    return;
  }
  const width = Math.max(300, Math.min(720, chart.clientWidth || 520));
  const left = 64;
  const total = t.bars.at(-1).end || 1;
  const x = (ms) => left + (ms / total) * (width - left - 4);
  const maxKv = t.bars.at(-1).kvTokens || 1;
  const root = svg('svg', { viewBox: `0 0 ${width} 92`, role: 'img',
    'aria-label': `Time line: prefill ${t.prefillMs.toFixed(0)} ms, then ${t.decodeSteps} decode steps in ${t.decodePasses} passes; the KV cache grows to ${maxKv} tokens` });
  root.append(svg('text', { x: 0, y: 22, class: 'value' }, 'steps'), svg('text', { x: 0, y: 62, class: 'value' }, 'KV cache'));
  for (const [i, bar] of t.bars.entries()) {
    const rect = svg('rect', { x: x(bar.start), y: 10, width: Math.max(1, x(bar.end) - x(bar.start) - (bar.kind === 'decode' ? 1 : 0)),
      height: 18, class: `bar ${bar.kind}`, 'data-kind': bar.kind, 'data-ms': (bar.end - bar.start).toFixed(1), 'data-kv-tokens': bar.kvTokens });
    rect.append(svg('title', {}, bar.kind === 'prefill'
      ? `prefill: ${t.prefillTokens} token${t.prefillTokens === 1 ? '' : 's'} in one pass, ${bar.end.toFixed(0)} ms`
      : `pass ${i}: ${bar.tokens === 1 ? 'one token' : `${bar.tokens} tokens (a verified draft)`}, ${(bar.end - bar.start).toFixed(0)} ms`));
    root.append(rect);
    // The cache as an area: its height is its size.
    const h = (bar.kvTokens / maxKv) * 36;
    root.append(svg('rect', { x: x(bar.start), y: 80 - h, width: Math.max(1, x(bar.end) - x(bar.start)), height: h, class: 'kv' }));
  }
  root.append(svg('text', { x: width - 4, y: 90, class: 'value', 'text-anchor': 'end' }, `${total.toFixed(0)} ms`));
  chart.replaceChildren(root);
  const kvFrom = t.bars[0].kvTokens;
  const cached = t.cachedTokens ? ` (${t.cachedTokens} more were in the KV cache already)` : '';
  summary.textContent = `Prefill ran ${t.prefillTokens} token${t.prefillTokens === 1 ? '' : 's'} in one pass${cached}: `
    + `${t.prefillMs.toFixed(0)} ms, ${t.prefillTokensPerS.toFixed(1)} tok/s. `
    + (t.decodeSteps === t.decodePasses && t.decodeSteps
      ? `Decode ran ${t.decodeSteps} step${t.decodeSteps === 1 ? '' : 's'}, one token per pass: ${t.decodeTokensPerS.toFixed(1)} tok/s. `
      : '')
    + (t.decodeSteps > t.decodePasses
      ? `Decode ran ${t.decodeSteps} tokens in ${t.decodePasses} passes (speculative: `
        + `${(t.decodeSteps / t.decodePasses).toFixed(2)} tokens per pass): ${t.decodeTokensPerS.toFixed(1)} tok/s. `
      : '')
    + `The KV cache grew from ${kvFrom} to ${maxKv} tokens (${mb(t.kvBytes(kvFrom))} to ${mb(t.kvBytes(maxKv))}). `
    + (t.stateBytes
      ? `The recurrent layers’ state stayed ${mb(t.stateBytes)} (a fixed size, whatever the context). `
      : '')
    + 'Each pass reads every weight once, whatever its number of tokens: on a GPU that makes a prompt token far cheaper '
    + 'than a decoded one, which has a pass to itself.';
}

/**
 * The entropy track of a run's `steps` from `report` (lm.score of the run's prompt and its
 * generated ids): per step, the entropy (nats) of the distribution the step was drawn from and
 * its top token's probability, both at T = 1.
 */
export function entropyTrackOf(report, steps) {
  const first = report.tokens.length - steps.length;
  return steps.map((step, i) => {
    const scored = report.tokens[first + i];
    return { step: i, token: step.token, entropy: scored.entropy, top1: Math.exp(scored.top[0].logprob) };
  });
}

/**
 * Draws `points` (entropyTrackOf) into `chart`: a column per step, its entropy as a bar and its
 * top-1 probability as a dot on a 0..1 scale, so a reader sees where the model hesitated; the
 * most and least certain steps in `summary`.
 */
export function drawEntropyTrack(chart, summary, points) {
  if (!points.length) {
    chart.replaceChildren();
    summary.textContent = '';
    return;
  }
  const width = Math.max(300, Math.min(720, chart.clientWidth || 520));
  const left = 64;
  const height = 70;
  const column = (width - left - 4) / points.length;
  const maxEntropy = Math.max(1, ...points.map((p) => p.entropy));
  const y = (fraction) => 8 + (1 - fraction) * (height - 16);
  const hardest = points.reduce((a, b) => (b.entropy > a.entropy ? b : a));
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img',
    'aria-label': `Entropy and top-1 probability of ${points.length} steps: the model hesitated most at step ${hardest.step + 1}` });
  root.append(svg('text', { x: 0, y: 20, class: 'value' }, 'entropy'), svg('text', { x: 0, y: 34, class: 'value top1-label' }, '● top-1 p'));
  root.append(svg('text', { x: left - 4, y: 12, class: 'value', 'text-anchor': 'end' }, `${maxEntropy.toFixed(1)}`));
  for (const point of points) {
    const x = left + point.step * column;
    const group = svg('g', { class: 'entropy-step', 'data-step': point.step, 'data-entropy': point.entropy.toFixed(4),
      'data-top1': point.top1.toFixed(4) });
    group.append(svg('rect', { x: x + 1, y: y(point.entropy / maxEntropy), width: Math.max(1, column - 2),
      height: (point.entropy / maxEntropy) * (height - 16), class: 'bar entropy' }));
    group.append(svg('circle', { cx: x + column / 2, cy: y(point.top1), r: Math.min(4, Math.max(2, column / 4)), class: 'top1' }));
    group.append(svg('title', {}, `step ${point.step + 1} “${point.token}”: entropy ${point.entropy.toFixed(2)} nats, `
      + `top-1 p ${(point.top1 * 100).toFixed(1)} %`));
    root.append(group);
  }
  chart.replaceChildren(root);
  const surest = points.reduce((a, b) => (b.entropy < a.entropy ? b : a));
  const describe = (p) => `step ${p.step + 1} (“${p.token}”: ${p.entropy.toFixed(2)} nats, top-1 p ${(p.top1 * 100).toFixed(1)} %)`;
  summary.textContent = `The model hesitated most at ${describe(hardest)} and was surest at ${describe(surest)}. `
    + 'Entropy is 0 where one token has all the probability; the dot is that top token\u2019s probability.';
}
