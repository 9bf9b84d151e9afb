//! The explanation of one sampling step: the data the visualiser draws.
//!
//! [`explain`] is pure: it needs the raw logits, the [`AdjustedLogits`], the [`Distribution`]
//! and the chosen id, so the visualiser can recompute an explanation for other temperature or
//! truncation parameters from a cached step ("what if") without the model or the generator.
//!
//! Its JSON (serde) shape is
//! `{"candidates":[{"id","rank","logit","adjusted_logit","prob","cumulative","kept",
//! "kept_by_mask","kept_by_top_k","kept_by_top_p","kept_by_min_p","kept_by_typical_p",
//! "removed_by","final_prob"}],"entropy","mass_outside","kept_count","kept_mass","temperature",
//! "stages":{"possible","after_top_k","after_top_p","after_min_p","after_typical_p"},
//! "chosen":{"id","rank","prob","logprob","temperature_prob"}}`. Non-finite numbers (a -inf
//! logit) are written by serde_json as `null`. Token text is the caller's to add.

use std::cmp::Ordering;

use serde::Serialize;

use crate::distribution::{Distribution, RemovedBy, StageCounts};
use crate::error::SamplerError;
use crate::math::{top_k_ids, top_n_by_key};
use crate::penalties::AdjustedLogits;

/// The most candidates per ranking an explanation lists (`top_n` is clamped to it).
pub const MAX_EXPLAIN_TOP_N: usize = 256;

/// One token in an explanation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    /// Token id.
    pub id: u32,
    /// 1-based position in the processed order (by adjusted logit, highest first, ties to the
    /// lower id; masked and -inf tokens after all others).
    pub rank: usize,
    /// The model's raw logit.
    pub logit: f32,
    /// The logit after bias and penalties (before the mask).
    pub adjusted_logit: f64,
    /// Probability after the mask and temperature, over the whole vocabulary.
    pub prob: f64,
    /// `prob` summed over this token and every token ranked before it.
    pub cumulative: f64,
    /// Whether the token is in the final distribution.
    pub kept: bool,
    /// False only when the mask removed it.
    pub kept_by_mask: bool,
    /// False only when top-k removed it.
    pub kept_by_top_k: bool,
    /// False only when top-p removed it.
    pub kept_by_top_p: bool,
    /// False only when min-p removed it.
    pub kept_by_min_p: bool,
    /// False only when typical-p removed it.
    pub kept_by_typical_p: bool,
    /// The stage that removed it (`null` when kept).
    pub removed_by: Option<RemovedBy>,
    /// Probability in the final (truncated, renormalised) distribution; 0 when removed.
    pub final_prob: f64,
}

/// The chosen token's summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Chosen {
    /// Token id.
    pub id: u32,
    /// 1-based rank in the processed order.
    pub rank: usize,
    /// Probability in the final distribution (the one it was drawn from).
    pub prob: f64,
    /// Natural log of `prob`.
    pub logprob: f64,
    /// Probability after temperature, before truncation.
    pub temperature_prob: f64,
}

/// Everything about one sampling step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// The top-N tokens by raw logit, the top-N by processed order, and the chosen token,
    /// ordered by rank.
    pub candidates: Vec<Candidate>,
    /// Entropy (nats) of the temperature distribution over the whole vocabulary.
    pub entropy: f64,
    /// Temperature-distribution mass of the tokens not listed in `candidates`.
    pub mass_outside: f64,
    /// Number of tokens in the final distribution.
    pub kept_count: usize,
    /// Temperature-distribution mass of the tokens in the final distribution.
    pub kept_mass: f64,
    /// The temperature used (0 = greedy).
    pub temperature: f64,
    /// How many tokens each truncation left, along the processed order: where the visualiser
    /// draws its cuts.
    pub stages: StageCounts,
    /// The chosen token.
    pub chosen: Chosen,
}

/// The processed order over the whole vocabulary: possible tokens first, by adjusted logit
/// descending, ties to the lower id; then impossible ones, the same way.
fn processed_order(adjusted: &AdjustedLogits) -> impl FnMut(&u32, &u32) -> Ordering + '_ {
    let values = adjusted.values();
    move |a, b| {
        adjusted
            .is_possible(*b)
            .cmp(&adjusted.is_possible(*a))
            .then(values[*b as usize].total_cmp(&values[*a as usize]))
            .then(a.cmp(b))
    }
}

/// The first `n` tokens of the processed order, in order: a partial selection over
/// the possible tokens (bounded heap), then, only if there are fewer than `n`, of the impossible
/// ones.
fn processed_top(adjusted: &AdjustedLogits, n: usize) -> Vec<u32> {
    let values = adjusted.values();
    let select = |possible: bool, n: usize| {
        let items = (0..values.len() as u32)
            .filter(|&id| adjusted.is_possible(id) == possible)
            .map(|id| (values[id as usize], id));
        top_n_by_key(items, n).into_iter().map(|(_, id)| id)
    };
    let mut top: Vec<u32> = select(true, n).collect();
    if top.len() < n {
        let missing = n - top.len();
        top.extend(select(false, missing));
    }
    top
}

/// Builds the explanation of a step.
///
/// The candidates are the union of the `top_n` tokens by raw logit, the `top_n` first tokens of
/// the processed order and `chosen` (`top_n` clamped to [`MAX_EXPLAIN_TOP_N`]), sorted by rank.
/// Cost: two one-pass partial selections (bounded heaps) over the vocabulary; when the raw
/// ranking brings in tokens outside the processed top-N (penalties moved them) or the chosen
/// token lies beyond it, one more pass gives those extra candidates their exact rank and
/// cumulative mass. Nothing sorts the vocabulary.
pub fn explain(
    raw_logits: &[f32],
    adjusted: &AdjustedLogits,
    dist: &Distribution,
    chosen: u32,
    top_n: usize,
) -> Result<Explanation, SamplerError> {
    let vocab_size = adjusted.len();
    if raw_logits.len() != vocab_size || dist.vocab_size() != vocab_size {
        return Err(SamplerError::LengthMismatch {
            what: "raw logits and distribution vocabulary size",
            expected: vocab_size,
            got: if raw_logits.len() != vocab_size { raw_logits.len() } else { dist.vocab_size() },
        });
    }
    if chosen as usize >= vocab_size {
        return Err(SamplerError::TokenOutOfVocabulary { id: chosen, vocab_size });
    }
    let n = top_n.min(MAX_EXPLAIN_TOP_N).min(vocab_size);
    let mut order = processed_order(adjusted);
    let processed_top = processed_top(adjusted, n);

    let mut in_top = processed_top.clone();
    in_top.sort_unstable();
    let mut extras: Vec<u32> = top_k_ids(raw_logits, n);
    extras.push(chosen);
    extras.sort_unstable();
    extras.dedup();
    extras.retain(|id| in_top.binary_search(id).is_err());

    let (ids, ranks, cumulative) = if extras.is_empty() {
        let ranks: Vec<usize> = (1..=processed_top.len()).collect();
        let mut running = 0.0;
        let cumulative: Vec<f64> = processed_top
            .iter()
            .map(|&id| {
                running += dist.prob(id);
                running
            })
            .collect();
        (processed_top, ranks, cumulative)
    } else {
        let mut ids = processed_top;
        ids.extend(extras);
        ids.sort_unstable_by(&mut order);
        let (ranks, cumulative) = ranks_and_cumulative(&ids, adjusted, dist);
        (ids, ranks, cumulative)
    };

    let mut listed_mass = 0.0;
    let mut candidates = Vec::with_capacity(ids.len());
    for ((&id, rank), cumulative) in ids.iter().zip(ranks).zip(cumulative) {
        let prob = dist.prob(id);
        listed_mass += prob;
        let removed_by = dist.removed_by(adjusted, id, rank);
        candidates.push(Candidate {
            id,
            rank,
            logit: raw_logits[id as usize],
            adjusted_logit: adjusted.values()[id as usize],
            prob,
            cumulative,
            kept: removed_by.is_none(),
            kept_by_mask: removed_by != Some(RemovedBy::Mask),
            kept_by_top_k: removed_by != Some(RemovedBy::TopK),
            kept_by_top_p: removed_by != Some(RemovedBy::TopP),
            kept_by_min_p: removed_by != Some(RemovedBy::MinP),
            kept_by_typical_p: removed_by != Some(RemovedBy::TypicalP),
            removed_by,
            final_prob: dist.final_prob(id),
        });
    }
    let chosen_rank = candidates.iter().find(|c| c.id == chosen).map_or(0, |c| c.rank);

    Ok(Explanation {
        candidates,
        entropy: dist.entropy(),
        mass_outside: (1.0 - listed_mass).clamp(0.0, 1.0),
        kept_count: dist.kept_ids().len(),
        kept_mass: dist.kept_mass(),
        temperature: dist.temperature(),
        stages: dist.counts(),
        chosen: Chosen {
            id: chosen,
            rank: chosen_rank,
            prob: dist.final_prob(chosen),
            logprob: dist.final_logprob(chosen),
            temperature_prob: dist.prob(chosen),
        },
    })
}

/// Exact ranks and cumulative masses of `candidates` (sorted in the processed order) in one
/// pass over the vocabulary: every other token ranked before the last candidate is counted in
/// the gap between the candidates around it (found by binary search); tokens ranked after the
/// last candidate cost one comparison.
fn ranks_and_cumulative(candidates: &[u32], adjusted: &AdjustedLogits, dist: &Distribution) -> (Vec<usize>, Vec<f64>) {
    type Key = (bool, f64, u32);
    fn before(a: &Key, b: &Key) -> bool {
        if a.0 != b.0 {
            return a.0;
        }
        match a.1.total_cmp(&b.1) {
            Ordering::Greater => true,
            Ordering::Less => false,
            Ordering::Equal => a.2 < b.2,
        }
    }
    let values = adjusted.values();
    let key = |id: u32| -> Key { (adjusted.is_possible(id), values[id as usize], id) };
    let keys: Vec<Key> = candidates.iter().map(|&id| key(id)).collect();
    let c = keys.len();
    let mut gap_count = vec![0usize; c];
    let mut gap_mass = vec![0.0f64; c];
    if let Some(last) = keys.last() {
        for id in 0..values.len() as u32 {
            let k = key(id);
            if !before(&k, last) {
                continue;
            }
            let gap = keys.partition_point(|cand| before(cand, &k));
            if keys[gap].2 == id {
                continue;
            }
            gap_count[gap] += 1;
            gap_mass[gap] += dist.prob(id);
        }
    }
    let mut ranks = Vec::with_capacity(c);
    let mut cumulative = Vec::with_capacity(c);
    let mut others_before = 0usize;
    let mut mass_before = 0.0;
    for (i, &id) in candidates.iter().enumerate() {
        others_before += gap_count[i];
        mass_before += gap_mass[i];
        mass_before += dist.prob(id);
        ranks.push(1 + i + others_before);
        cumulative.push(mass_before);
    }
    (ranks, cumulative)
}
