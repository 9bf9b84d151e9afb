//! Stages 4–6: temperature, truncation (top-k, top-p, min-p, typical-p), renormalisation and
//! the draw.
//!
//! [`process`] is pure: given [`AdjustedLogits`] and the parameters it returns a
//! [`Distribution`], from which [`Distribution::draw`] picks a token for a uniform number.
//!
//! # Order and definitions
//!
//! Tokens are ordered by adjusted logit, highest first, ties to the lowest id ("the processed
//! order"); tokens the mask disallows or whose adjusted logit is -inf are excluded.
//!
//! * **Temperature** `T > 0`: `p_i = exp((a_i - a_max)/T) / Z` over the allowed tokens, `Z`
//!   summed in the crate's one order for a row (id `i` into running sum `i mod 8`, joined
//!   pairwise: `math::lane_sum`). `T = 0` is greedy: all mass on the argmax (ties to the lowest
//!   id), no truncation.
//! * Truncation filters apply one after another, each to the renormalised survivors of the
//!   previous one (as in Hugging Face's warper list):
//!   1. **top-k**: keep the first `k` tokens of the processed order (exactly `k`; ties at the
//!      boundary go to the lower id).
//!   2. **top-p**: keep the smallest prefix of the processed order whose renormalised mass,
//!      summed in that order, reaches `top_p` (`cumulative / total >= top_p`); at least one
//!      token; all survivors if rounding keeps the sum below `top_p`.
//!   3. **min-p**: keep `p_i >= min_p · p_max`.
//!   4. **typical-p**: with `H` the entropy of the survivors, order them by `|-ln p_i - H|`
//!      ascending (ties to the lower id) and keep the smallest prefix whose mass reaches
//!      `typical_p`.
//! * **Renormalise and draw**: the survivors, in id order, are the final distribution; a
//!   uniform `u` in `[0, 1)` picks the first survivor whose cumulative weight (summed in id
//!   order) exceeds `u` times the total.
//!
//! Top-k, top-p and min-p always keep a prefix of the processed order, so their effect is
//! recorded as three prefix lengths ([`StageCounts`]); typical-p's survivors are recorded as a
//! set. No stage sorts the whole vocabulary: top-k and top-p select a prefix with
//! `select_nth_unstable` and sort only that prefix, growing it when top-p needs more; where top-p
//! cuts first, it lists only the tokens at or above a floor its prefix cannot end above
//! (`math::nucleus_floor`), and everything only where rounding leaves those short.

use std::cmp::Ordering;

use serde::Serialize;

use crate::error::SamplerError;
use crate::math::{
    argmax, draw_with_total, ensure_sorted_prefix, ln, nucleus_floor, smallest_prefix_with_mass, temperature_weights,
};
use crate::params::SamplingParams;
use crate::penalties::AdjustedLogits;

/// The stage that removed a token from the final distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RemovedBy {
    /// The constraint mask disallowed it.
    Mask,
    /// Its logit was -inf after bias and penalties (or from the model).
    Forbidden,
    /// Temperature 0: only the argmax is kept.
    Greedy,
    /// The top-k filter.
    TopK,
    /// The top-p (nucleus) filter.
    TopP,
    /// The min-p filter.
    MinP,
    /// The typical-p filter.
    TypicalP,
}

/// How many tokens survive each prefix-shaped stage (counted along the processed order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StageCounts {
    /// Tokens allowed by the mask with a logit above -inf.
    pub possible: usize,
    /// Survivors after top-k.
    pub after_top_k: usize,
    /// Survivors after top-p.
    pub after_top_p: usize,
    /// Survivors after min-p.
    pub after_min_p: usize,
    /// Survivors after typical-p (the final count).
    pub after_typical_p: usize,
}

/// The processed distribution of one step: the temperature distribution over the whole
/// vocabulary and the final, truncated and renormalised one.
#[derive(Debug, Clone, PartialEq)]
pub struct Distribution {
    temperature: f64,
    argmax: u32,
    vocab_size: usize,
    /// `exp((a_i - a_max)/T)` for possible tokens, 0 otherwise; empty when greedy.
    weights: Vec<f64>,
    /// Sum of `weights` in `lane_sum`'s order (1 when greedy).
    total_weight: f64,
    entropy: f64,
    counts: StageCounts,
    /// Ids kept by typical-p, ascending, when typical-p removed anything.
    typical_kept: Option<Vec<u32>>,
    /// Final survivors, ascending id.
    kept: Vec<u32>,
    /// Sum of the survivors' weights in id order (the draw's order: a compact row of candidates
    /// sums them in the same order).
    kept_weight: f64,
}

/// Stages 4–6 (temperature and truncation) on adjusted logits; see the module doc.
///
/// Errors when a temperature or truncation parameter is out of range, or when no token is
/// possible (everything masked or -inf).
pub fn process(adjusted: &AdjustedLogits, params: &SamplingParams) -> Result<Distribution, SamplerError> {
    params.validate_processing()?;
    let values = adjusted.values();
    let vocab_size = values.len();

    let (possible, argmax) = match adjusted.allowed() {
        // Without a mask, a possible token is one above -inf, and the argmax the first at the
        // largest value: passes the compiler vectorises (a Gemma 3 row: 0.8 ms walked id by id).
        None => {
            let possible = values.iter().filter(|&&v| v > f64::NEG_INFINITY).count();
            let (max, id) = argmax(values);
            (possible, (max > f64::NEG_INFINITY).then_some(id as u32))
        }
        Some(_) => {
            let mut possible = 0usize;
            let mut argmax: Option<u32> = None;
            for id in 0..vocab_size as u32 {
                if adjusted.is_possible(id) {
                    possible += 1;
                    if argmax.is_none_or(|best| values[id as usize] > values[best as usize]) {
                        argmax = Some(id);
                    }
                }
            }
            (possible, argmax)
        }
    };
    let argmax = argmax.ok_or(SamplerError::AllTokensExcluded)?;

    if params.temperature == 0.0 {
        return Ok(Distribution {
            temperature: 0.0,
            argmax,
            vocab_size,
            weights: Vec::new(),
            total_weight: 1.0,
            entropy: 0.0,
            counts: StageCounts { possible, after_top_k: 1, after_top_p: 1, after_min_p: 1, after_typical_p: 1 },
            typical_kept: None,
            kept: vec![argmax],
            kept_weight: 1.0,
        });
    }

    let temperature = params.temperature;
    let max = values[argmax as usize];
    let scaled = |id: u32| (values[id as usize] - max) / temperature;

    // Temperature distribution over the whole vocabulary, and its entropy
    // H = ln Z - sum(w x) / Z with w = exp(x), x = (a - a_max)/T: x = -inf (w = 0) for a token
    // that is not possible.
    let masked: Vec<f64>;
    let possible_values = match adjusted.allowed() {
        None => values,
        Some(_) => {
            masked = (0..vocab_size as u32)
                .map(|id| if adjusted.is_possible(id) { values[id as usize] } else { f64::NEG_INFINITY })
                .collect();
            &masked
        }
    };
    let mut weights = vec![0.0f64; vocab_size];
    let (total_weight, weighted_scaled) = temperature_weights(possible_values, max, temperature, &mut weights);
    let entropy = (ln(total_weight) - weighted_scaled / total_weight).max(0.0);

    // Survivors as (adjusted value, id) pairs, so comparisons need no indirection. The list
    // starts as every possible token in id order (where top-p cuts first, those at or above its
    // floor). `sorted` = length of the prefix known to be the first tokens of the processed
    // order, sorted. `in_id_order` = still in id order.
    let truncating = (params.top_k > 0 && params.top_k < possible)
        || params.top_p < 1.0
        || params.min_p > 0.0
        || params.typical_p < 1.0;
    let mut after_top_k = possible;
    let mut after_top_p = possible;
    let mut after_min_p = possible;
    let mut typical_kept = None;
    let (kept, kept_weight) = if !truncating {
        // Nothing to cut: the survivors are the possible tokens, their weight summed in id order
        // as the draw walks them (a compact row of the same candidates sums the same way; the
        // total's running sums would not).
        let kept: Vec<u32> = (0..vocab_size as u32).filter(|&id| adjusted.is_possible(id)).collect();
        let kept_weight = kept.iter().map(|&id| weights[id as usize]).sum();
        (kept, kept_weight)
    } else {
        let mut order = |a: &(f64, u32), b: &(f64, u32)| -> Ordering { b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)) };
        let weight_of = |item: &(f64, u32)| weights[item.1 as usize];
        // The possible tokens whose adjusted logit is at least `floor`: a prefix of the
        // processed order, in id order.
        let list = |floor: f64| -> Vec<(f64, u32)> {
            (0..vocab_size as u32)
                .filter(|&id| adjusted.is_possible(id) && values[id as usize] >= floor)
                .map(|id| (values[id as usize], id))
                .collect()
        };
        let top_k_cuts = params.top_k > 0 && params.top_k < possible;
        // Where top-p cuts first, its total is every possible token's weight in id order (the
        // others weigh 0), and at first only the tokens it can keep are listed: those at or
        // above the lowest logit whose weight reaches the row's nucleus floor.
        let top_p_total = (!top_k_cuts && params.top_p < 1.0 && possible > 1).then(|| weights.iter().sum::<f64>());
        let floor = top_p_total.and_then(|total| nucleus_floor(&weights, total, params.top_p)).map(|floor| {
            let at_or_above = (0..vocab_size).filter(|&id| weights[id] >= floor);
            at_or_above.map(|id| values[id]).fold(f64::INFINITY, f64::min)
        });
        let mut survivors = list(floor.unwrap_or(f64::NEG_INFINITY));
        let mut sorted = 0usize;
        let mut in_id_order = true;

        // 1. top-k
        if top_k_cuts {
            sorted = ensure_sorted_prefix(&mut survivors, sorted, params.top_k, &mut order);
            survivors.truncate(params.top_k);
            in_id_order = false;
            after_top_k = survivors.len();
        }

        // 2. top-p
        if params.top_p < 1.0 && after_top_k > 1 {
            let total = top_p_total.unwrap_or_else(|| survivors.iter().map(weight_of).sum());
            let mut prefix =
                smallest_prefix_with_mass(&mut survivors, sorted, &mut order, weight_of, total, params.top_p);
            if prefix.is_none() && floor.is_some() {
                // Rounding kept the floor's tokens short of the mass: all of them, as below.
                survivors = list(f64::NEG_INFINITY);
                prefix = smallest_prefix_with_mass(&mut survivors, 0, &mut order, weight_of, total, params.top_p);
            }
            let n = prefix.unwrap_or(survivors.len());
            survivors.truncate(n);
            sorted = n;
            in_id_order = false;
        }
        after_top_p = survivors.len();

        // 3. min-p: the most probable survivor is the argmax, whose weight is exp(0) = 1.
        if params.min_p > 0.0 {
            let threshold = params.min_p;
            survivors.retain(|item| weight_of(item) >= threshold);
            // The removed tokens are a suffix of the processed order, so a sorted prefix stays
            // a sorted prefix (not needed further; kept for clarity of the invariant).
            sorted = sorted.min(survivors.len());
        }
        after_min_p = survivors.len();
        let _ = sorted;

        // 4. typical-p
        if params.typical_p < 1.0 && survivors.len() > 1 {
            let total: f64 = survivors.iter().map(weight_of).sum();
            let log_total = ln(total);
            let weighted: f64 = survivors
                .iter()
                .filter(|item| weight_of(item) > 0.0)
                .map(|item| weight_of(item) * scaled(item.1))
                .sum();
            let survivor_entropy = log_total - weighted / total;
            // |-ln q_i - H| with ln q_i = x_i - ln(total).
            let mut by_deviation: Vec<(f64, u32)> = survivors
                .iter()
                .map(|item| (((log_total - scaled(item.1)) - survivor_entropy).abs(), item.1))
                .collect();
            let n = smallest_prefix_with_mass(
                &mut by_deviation,
                0,
                |a: &(f64, u32), b: &(f64, u32)| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)),
                weight_of,
                total,
                params.typical_p,
            )
            .unwrap_or(by_deviation.len());
            if n < by_deviation.len() {
                let mut kept: Vec<u32> = by_deviation[..n].iter().map(|item| item.1).collect();
                kept.sort_unstable();
                survivors = kept.iter().map(|&id| (values[id as usize], id)).collect();
                typical_kept = Some(kept);
                in_id_order = true;
            }
        }

        if !in_id_order {
            survivors.sort_unstable_by_key(|item| item.1);
        }
        let kept_weight: f64 = survivors.iter().map(weight_of).sum();
        (survivors.into_iter().map(|item| item.1).collect(), kept_weight)
    };
    let after_typical_p = kept.len();

    Ok(Distribution {
        temperature,
        argmax,
        vocab_size,
        weights,
        total_weight,
        entropy,
        counts: StageCounts { possible, after_top_k, after_top_p, after_min_p, after_typical_p },
        typical_kept,
        kept,
        kept_weight,
    })
}

impl Distribution {
    /// The temperature used (0 = greedy).
    pub fn temperature(&self) -> f64 {
        self.temperature
    }

    /// Whether this is a greedy (temperature 0) distribution.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// The most probable possible token (ties to the lowest id).
    pub fn argmax(&self) -> u32 {
        self.argmax
    }

    /// The vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Entropy in nats of the temperature distribution over the whole vocabulary (0 if greedy).
    pub fn entropy(&self) -> f64 {
        self.entropy
    }

    /// Survivor counts per stage.
    pub fn counts(&self) -> StageCounts {
        self.counts
    }

    /// The final survivors, ascending id.
    pub fn kept_ids(&self) -> &[u32] {
        &self.kept
    }

    /// Whether `id` survived every stage.
    pub fn is_kept(&self, id: u32) -> bool {
        self.kept.binary_search(&id).is_ok()
    }

    /// The ids kept by typical-p (ascending) when typical-p removed something.
    pub fn typical_kept(&self) -> Option<&[u32]> {
        self.typical_kept.as_deref()
    }

    /// Probability of `id` after temperature, over the whole vocabulary (before truncation).
    /// Greedy: 1 for the argmax, 0 otherwise.
    pub fn prob(&self, id: u32) -> f64 {
        if self.is_greedy() {
            return if id == self.argmax { 1.0 } else { 0.0 };
        }
        self.weights.get(id as usize).map_or(0.0, |w| w / self.total_weight)
    }

    /// Probability of `id` in the final distribution (after truncation and renormalisation).
    pub fn final_prob(&self, id: u32) -> f64 {
        if !self.is_kept(id) {
            return 0.0;
        }
        if self.is_greedy() {
            return 1.0;
        }
        self.weights[id as usize] / self.kept_weight
    }

    /// Natural log of [`Self::final_prob`] (-inf when removed).
    pub fn final_logprob(&self, id: u32) -> f64 {
        ln(self.final_prob(id))
    }

    /// The temperature-distribution mass of the final survivors (1 exactly when nothing was cut:
    /// their id-order sum and the whole row's total are summed in different orders).
    pub fn kept_mass(&self) -> f64 {
        if self.is_greedy() || self.kept.len() == self.counts.possible {
            1.0
        } else {
            self.kept_weight / self.total_weight
        }
    }

    /// The temperature distribution as a dense vector (one probability per token).
    pub fn probs(&self) -> Vec<f64> {
        (0..self.vocab_size as u32).map(|id| self.prob(id)).collect()
    }

    /// The final distribution as a dense vector (zeros for removed tokens).
    pub fn final_probs(&self) -> Vec<f64> {
        let mut probs = vec![0.0; self.vocab_size];
        for &id in &self.kept {
            probs[id as usize] = self.final_prob(id);
        }
        probs
    }

    /// Picks a token for a uniform `u` in `[0, 1)`: the first survivor, in id order, whose
    /// cumulative weight exceeds `u` times the survivors' total. Greedy returns the argmax.
    /// Deterministic and platform-independent.
    pub fn draw(&self, u: f64) -> u32 {
        if self.is_greedy() {
            return self.argmax;
        }
        let items = self.kept.iter().map(|&id| (id as usize, self.weights[id as usize]));
        draw_with_total(items, self.kept_weight, u).map_or(self.argmax, |i| i as u32)
    }

    /// Like [`Self::draw`], over the final distribution without `excluded` (renormalised): the
    /// residual a rejected point-mass draft is replaced from. `None` when nothing else survives.
    pub fn draw_excluding(&self, excluded: u32, u: f64) -> Option<u32> {
        if self.is_greedy() {
            return (self.argmax != excluded && self.is_kept(self.argmax)).then_some(self.argmax);
        }
        let items = self.kept.iter().filter(|&&id| id != excluded).map(|&id| (id as usize, self.weights[id as usize]));
        let total = self.kept_weight - if self.is_kept(excluded) { self.weights[excluded as usize] } else { 0.0 };
        if total <= 0.0 {
            return None;
        }
        draw_with_total(items, total, u).map(|i| i as u32)
    }

    /// Why `id` is not in the final distribution, or `None` if it is. `rank` is its 1-based
    /// position in the processed order (see [`mod@crate::explain`]).
    pub fn removed_by(&self, adjusted: &AdjustedLogits, id: u32, rank: usize) -> Option<RemovedBy> {
        if !adjusted.is_allowed(id) {
            return Some(RemovedBy::Mask);
        }
        if !adjusted.is_possible(id) {
            return Some(RemovedBy::Forbidden);
        }
        if self.is_greedy() {
            return (id != self.argmax).then_some(RemovedBy::Greedy);
        }
        if rank > self.counts.after_top_k {
            Some(RemovedBy::TopK)
        } else if rank > self.counts.after_top_p {
            Some(RemovedBy::TopP)
        } else if rank > self.counts.after_min_p {
            Some(RemovedBy::MinP)
        } else if self.typical_kept.as_ref().is_some_and(|kept| kept.binary_search(&id).is_err()) {
            Some(RemovedBy::TypicalP)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adjusted(values: &[f64]) -> AdjustedLogits {
        AdjustedLogits::new(values.to_vec(), None).unwrap()
    }

    fn kept(values: &[f64], params: SamplingParams) -> Vec<u32> {
        process(&adjusted(values), &params).unwrap().kept_ids().to_vec()
    }

    #[test]
    fn greedy_takes_the_lowest_id_among_ties() {
        let d = process(&adjusted(&[1.0, 3.0, 3.0]), &SamplingParams::greedy()).unwrap();
        assert_eq!(d.argmax(), 1);
        assert_eq!(d.draw(0.99), 1);
        assert_eq!(d.prob(1), 1.0);
        assert_eq!(d.prob(2), 0.0);
        assert_eq!(d.entropy(), 0.0);
    }

    #[test]
    fn top_k_keeps_exactly_k_with_ties_to_lower_ids() {
        let p = SamplingParams { top_k: 2, ..SamplingParams::default() };
        assert_eq!(kept(&[1.0, 2.0, 2.0, 2.0], p), vec![1, 2]);
    }

    #[test]
    fn filters_chain_on_renormalised_survivors() {
        // After top-k 2 of [0.5, 0.3, 0.2] the survivors are [0.625, 0.375]; top-p 0.6 then
        // keeps only the first (it would keep two on the full distribution).
        let logits = [0.5f64.ln(), 0.3f64.ln(), 0.2f64.ln()];
        let only_top_p = SamplingParams { top_p: 0.6, ..SamplingParams::default() };
        assert_eq!(kept(&logits, only_top_p.clone()), vec![0, 1]);
        let chained = SamplingParams { top_k: 2, ..only_top_p };
        assert_eq!(kept(&logits, chained), vec![0]);
    }

    #[test]
    fn typical_p_can_drop_the_most_probable_token() {
        // One token with p0 = 0.35 and 100 small ones: its surprisal is further from the
        // entropy than theirs ((1 - p0)·Δ > p0·Δ), so the typical set leaves it out.
        let mut logits = vec![0.0f64; 101];
        logits[0] = 4.0;
        let p = SamplingParams { typical_p: 0.2, ..SamplingParams::default() };
        let d = process(&adjusted(&logits), &p).unwrap();
        assert!(!d.is_kept(0));
        assert!(d.typical_kept().is_some());
        let total: f64 = d.final_probs().iter().sum();
        assert!((total - 1.0).abs() < 1e-12);
    }

    #[test]
    fn masked_and_forbidden_tokens_have_no_mass() {
        let set = crate::mask::TokenSet::from_ids(3, [0, 1]).unwrap();
        let a = AdjustedLogits::new(vec![0.0, f64::NEG_INFINITY, 9.0], Some(set)).unwrap();
        let d = process(&a, &SamplingParams::default()).unwrap();
        assert_eq!(d.kept_ids(), &[0]);
        assert_eq!(d.prob(2), 0.0);
        assert_eq!(d.removed_by(&a, 2, 3), Some(RemovedBy::Mask));
        assert_eq!(d.removed_by(&a, 1, 2), Some(RemovedBy::Forbidden));
        let all_out = AdjustedLogits::new(vec![0.0, 1.0], Some(crate::mask::TokenSet::empty(2))).unwrap();
        assert_eq!(process(&all_out, &SamplingParams::default()).unwrap_err(), SamplerError::AllTokensExcluded);
    }

    /// Top-p's survivors as its definition reads, over the whole vocabulary: every possible
    /// token in the processed order, the weights' total in id order, the cumulative in that order.
    fn top_p_by_definition(d: &Distribution, adjusted: &AdjustedLogits, top_p: f64) -> Vec<u32> {
        let values = adjusted.values();
        let mut order: Vec<u32> = (0..values.len() as u32).filter(|&id| adjusted.is_possible(id)).collect();
        order.sort_by(|&a, &b| values[b as usize].total_cmp(&values[a as usize]).then(a.cmp(&b)));
        let in_id_order = (0..values.len() as u32).filter(|&id| adjusted.is_possible(id));
        let total = in_id_order.fold(0.0, |sum, id| sum + d.weights[id as usize]);
        let mut cumulative = 0.0;
        let n = order
            .iter()
            .position(|&id| {
                cumulative += d.weights[id as usize];
                cumulative / total >= top_p
            })
            .map_or(order.len(), |at| at + 1);
        let mut kept = order[..n].to_vec();
        kept.sort_unstable();
        kept
    }

    #[test]
    fn top_p_over_its_floor_keeps_the_prefix_its_definition_keeps() {
        // Rows of 20,000 logits: spread like a model's, flat (one exponent holds the boundary's
        // many tokens), with ties, and with a mask; masses from a sliver to nearly all.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut uniform = move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let spread: Vec<f64> = (0..20_000).map(|_| (uniform() + uniform() + uniform() - 1.5) * 12.0).collect();
        let flat: Vec<f64> = (0..20_000).map(|_| uniform() * 0.01).collect();
        let tied: Vec<f64> = (0..20_000).map(|_| (uniform() * 8.0).floor()).collect();
        let mask = crate::mask::TokenSet::from_ids(20_000, (0..20_000).filter(|id| id % 3 != 0)).unwrap();
        let rows = [
            adjusted(&spread),
            adjusted(&flat),
            adjusted(&tied),
            AdjustedLogits::new(spread.clone(), Some(mask)).unwrap(),
        ];
        for (row, adjusted) in rows.iter().enumerate() {
            for temperature in [0.3, 0.7, 1.0, 1.5] {
                for top_p in [0.01, 0.5, 0.9, 0.95, 0.999_999] {
                    let params = SamplingParams { temperature, top_p, ..SamplingParams::default() };
                    let d = process(adjusted, &params).unwrap();
                    let expected = top_p_by_definition(&d, adjusted, top_p);
                    assert_eq!(d.kept_ids(), expected, "row {row}, T = {temperature}, top-p {top_p}");
                    assert_eq!(d.counts().after_top_p, expected.len(), "row {row}, T = {temperature}, top-p {top_p}");
                }
            }
        }
    }

    #[test]
    fn tiny_temperature_does_not_overflow() {
        let p = SamplingParams { temperature: 1e-300, ..SamplingParams::default() };
        let d = process(&adjusted(&[1.0, 2.0, 0.0]), &p).unwrap();
        assert_eq!(d.prob(1), 1.0);
        assert_eq!(d.prob(0), 0.0);
        assert_eq!(d.draw(0.999), 1);
        assert!(d.entropy().is_finite());
    }
}
