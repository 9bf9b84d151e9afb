// The sampler's temperature and truncation stages in JS, for the playground's "what if": re-apply
// other settings to a step's cached candidates without running the model again.
//
// It follows crates/sampler/src/distribution.rs: tokens in the processed order (logit descending,
// ties to the lower id); temperature; then top-k, top-p, min-p and typical-p one after another,
// each on the renormalised survivors of the previous one; then renormalisation.
//
// A step reports its top candidates, not the whole vocabulary. The rest is one *group* of `count`
// tokens whose total probability at temperature 1 is known exactly (from the candidates'
// log-probabilities); inside it every token is taken to have the same logit. Groups carry a
// multiplicity, so a stage can keep part of one. With the whole row as groups of one token the
// result is exact; with a rest group, everything about the candidates is exact at temperature 1
// and the rest is an estimate at other temperatures (`approximate` says so).

/**
 * A step's groups from its whole raw logits row (`returnLogits`): every token its own group, in
 * the processed order. Exact. `top` supplies the texts it has.
 */
export function rowGroups({ logits, top }) {
  const text = new Map(top.map((c) => [c.id, c.text]));
  const order = Array.from(logits.keys()).sort((a, b) => logits[b] - logits[a] || a - b);
  return { groups: order.map((id) => ({ id, text: text.get(id) ?? null, logit: logits[id], count: 1 })), approximate: false };
}

/**
 * A step's groups: its `top` candidates ({ id, text, logit, logprob }, best first) one token
 * each, then the rest of a `vocabSize` vocabulary as one group. Returns { groups, approximate }.
 */
export function stepGroups({ top }, vocabSize) {
  const groups = top.map((c) => ({ id: c.id, text: c.text, logit: c.logit, count: 1 }));
  if (!top.length) return { groups, approximate: false };
  const logNormaliser = top[0].logit - top[0].logprob;
  const candidateMass = top.reduce((sum, c) => sum + Math.exp(c.logprob), 0);
  const restCount = vocabSize - top.length;
  const restMass = 1 - candidateMass;
  if (restCount > 0 && restMass > 1e-12) {
    // Every rest token at the same logit, chosen so that the rest's mass at T = 1 is exact;
    // capped at the smallest candidate's logit, which no rest token exceeds.
    const logit = Math.min(logNormaliser + Math.log(restMass / restCount), top.at(-1).logit);
    groups.push({ id: -1, text: null, logit, count: restCount, rest: true });
  }
  return { groups, approximate: groups.length > top.length };
}

function validate({ temperature = 1, topK = 0, topP = 1, minP = 0, typicalP = 1 }) {
  if (!(temperature >= 0 && Number.isFinite(temperature))) throw new RangeError('temperature must be finite and >= 0');
  if (!(Number.isInteger(topK) && topK >= 0)) throw new RangeError('topK must be a whole number >= 0');
  if (!(topP > 0 && topP <= 1)) throw new RangeError('topP must be in (0, 1]');
  if (!(minP >= 0 && minP <= 1)) throw new RangeError('minP must be in [0, 1]');
  if (!(typicalP > 0 && typicalP <= 1)) throw new RangeError('typicalP must be in (0, 1]');
  return { temperature, topK, topP, minP, typicalP };
}

/**
 * Applies temperature and truncation to `groups` ([{ id, logit, count }], in processed order).
 * Returns { groups: [{ ...group, prob, cumulative, kept, finalProb, removedBy }], entropy,
 * keptCount, keptMass, cuts: { topK, topP, minP } }: per-token probabilities after temperature
 * (`prob`; at temperature 0, greedy, the model's own at 1) and in the final distribution
 * (`finalProb`); `entropy` of the distribution after temperature; `kept` tokens of each group;
 * `cumulative` = mass of the group and all before it; `cuts` = tokens left after top-k and after
 * top-p, and min-p's probability threshold.
 */
export function transform(groups, params) {
  const { temperature, topK, topP, minP, typicalP } = validate(params);
  const out = groups.map((g) => ({ ...g, count: g.count ?? 1, prob: 0, cumulative: 0, kept: 0, finalProb: 0, removedBy: null }));
  if (!out.length) return { groups: out, entropy: 0, keptCount: 0, keptMass: 0, cuts: {} };

  // Greedy keeps only the first token; the probabilities shown are the model's own (T = 1).
  const greedy = temperature === 0;
  const t = greedy ? 1 : temperature;
  const max = out[0].logit;
  let z = 0;
  for (const g of out) z += g.count * Math.exp((g.logit - max) / t);
  let cumulative = 0;
  let entropy = 0;
  for (const g of out) {
    g.prob = Math.exp((g.logit - max) / t) / z;
    cumulative += g.count * g.prob;
    g.cumulative = cumulative;
    if (g.prob > 0) entropy -= g.count * g.prob * Math.log(g.prob);
  }

  // Survivors: [group index, tokens kept], a prefix of the processed order until typical-p.
  let survivors = greedy ? [[0, 1]] : out.map((g, i) => [i, g.count]);
  const mass = (list) => list.reduce((sum, [i, n]) => sum + n * out[i].prob, 0);
  const tokens = (list) => list.reduce((sum, [, n]) => sum + n, 0);
  if (greedy) out.forEach((g, i) => { if (i > 0) g.removedBy = 'greedy'; });
  const cut = (list, stage) => {
    const keptOf = new Map(list.map(([i, n]) => [i, n]));
    for (const [i, n] of survivors) if ((keptOf.get(i) ?? 0) < n && !out[i].removedBy) out[i].removedBy = stage;
    survivors = list.filter(([, n]) => n > 0);
  };

  if (!greedy && topK > 0 && topK < tokens(survivors)) {
    let left = topK;
    cut(survivors.map(([i, n]) => {
      const take = Math.min(n, left);
      left -= take;
      return [i, take];
    }), 'top_k');
  }
  const afterTopK = tokens(survivors);

  if (!greedy && topP < 1) {
    const total = mass(survivors);
    let before = 0;
    let done = false;
    cut(survivors.map(([i, n]) => {
      if (done) return [i, 0];
      const p = out[i].prob;
      if ((before + n * p) / total >= topP) {
        done = true;
        const need = Math.min(n, Math.max(1, Math.ceil((topP * total - before) / p - 1e-9)));
        return [i, need];
      }
      before += n * p;
      return [i, n];
    }), 'top_p');
  }
  const afterTopP = tokens(survivors);

  const minPThreshold = minP * out[survivors[0][0]].prob;
  if (!greedy && minP > 0) cut(survivors.map(([i, n]) => [i, out[i].prob >= minPThreshold ? n : 0]), 'min_p');

  if (!greedy && typicalP < 1) {
    const total = mass(survivors);
    let h = 0;
    for (const [i, n] of survivors) {
      const q = out[i].prob / total;
      if (q > 0) h -= n * q * Math.log(q);
    }
    const order = [...survivors].sort(([a], [b]) => {
      const sa = Math.abs(-Math.log(out[a].prob / total) - h);
      const sb = Math.abs(-Math.log(out[b].prob / total) - h);
      return sa - sb || out[a].id - out[b].id;
    });
    let before = 0;
    let done = false;
    const keep = new Map();
    for (const [i, n] of order) {
      if (done) { keep.set(i, 0); continue; }
      const q = out[i].prob / total;
      if (before + n * q >= typicalP) {
        done = true;
        keep.set(i, Math.min(n, Math.max(1, Math.ceil((typicalP - before) / q - 1e-9))));
      } else {
        keep.set(i, n);
        before += n * q;
      }
    }
    cut(survivors.map(([i]) => [i, keep.get(i)]), 'typical_p');
  }

  const keptMass = mass(survivors);
  for (const [i, n] of survivors) {
    out[i].kept = n;
    out[i].finalProb = out[i].prob / keptMass;
  }
  return { groups: out, entropy, keptCount: tokens(survivors), keptMass, cuts: { topK: afterTopK, topP: afterTopP, minP: minPThreshold } };
}
