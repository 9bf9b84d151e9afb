//! Finishing a step from the GPU's top-K candidates instead of the full logits.
//!
//! # The contract
//!
//! When the decode tail runs on the GPU (crates/kernels), the device applies stages 1–3 in
//! place (the sparse [`LogitAdjustment`]s of [`Sampler::gpu_adjustments`] and the mask, which
//! turns a disallowed logit into `-inf`), computes the softmax statistics at temperature `T`
//! and selects the `K <= 256` largest adjusted logits. The CPU reads back only a
//! [`CandidateSet`]:
//!
//! * `ids` / `adjusted_logits`: `min(K, vocab_size)` pairs sorted in the processed order
//!   (adjusted logit descending, ties to the lower id, `-0.0` equal to `+0.0`). `-inf` entries
//!   may appear only at the end, and only when fewer than `K` finite logits exist: **a `-inf`
//!   candidate is taken to mean that every finite token of the row is listed**;
//! * `max`: the largest finite adjusted logit (equal to the first candidate's);
//! * `sum_exp`: `S = Σ exp((x − max)/T)` over the whole vocabulary, in f32 (read only when
//!   `T > 0` and the set does not cover every possible token);
//! * `vocab_size`.
//!
//! [`decide_from_candidates`] returns `Some(`[`CandidateDistribution`]`)` only when the final
//! kept set of [`crate::process`] on the full adjusted logits is provably made of candidates,
//! and then [`CandidateDistribution::draw`] returns, for every uniform `u`, the id that
//! [`crate::Distribution::draw`] would return: same survivors, same weights
//! `exp((a − a_max)/T)` computed with the crate's [`crate::math::exp`], same id-order walk,
//! same total (the survivors' weights summed in id order; the draw never involves the
//! full-vocabulary normaliser, so no `S` enters it). Otherwise it returns `None` and the caller
//! samples from the full logits ([`Sampler::sample`]).
//!
//! # How it stays exact
//!
//! Once the survivors of some stage are known to be exactly the first `n` candidates, the rest
//! of the pipeline is re-run by [`crate::process`] itself on a *compact* row: the candidates,
//! renumbered `0..c` in increasing id order (a monotone renumbering, so every tie-break and
//! every id-order sum is unchanged), optionally followed by a *sentinel* token that sorts after
//! every candidate (same value as the last candidate, higher id). With the sentinel present,
//! `top_k = n` cuts the compact row to the first `n` candidates *in the processed order*, which
//! is the state the full pipeline is in after a top-k or top-p cut; without it, no stage has cut
//! and the survivors are in id order, the state after an untouched top-k. The two states differ
//! in the order later sums (top-p's and typical-p's totals) are taken in, and so in their last
//! bits; when the full path's state is ambiguous, both are run and must agree.
//!
//! # Decidability rules
//!
//! Let `c` be the number of finite candidates. The set is **complete** when it holds a `-inf`
//! candidate (see the contract) or `ids.len() == vocab_size`: every possible token is listed.
//!
//! 1. **Greedy** (`T = 0`): always decidable, the first candidate ([`CandidateRule::Greedy`]).
//! 2. **Complete** (`T > 0`): always decidable, the compact row *is* the row of possible
//!    tokens and `process` runs on it with the parameters unchanged ([`CandidateRule::Complete`]).
//!
//! Otherwise (`T > 0`, some tokens unseen; every unseen token comes after the candidates in the
//! processed order, so its weight is at most the last candidate's):
//!
//! 3. **top-k cuts inside**: `1 <= top_k <= c` ([`CandidateRule::TopK`]): the survivors are the
//!    first `top_k` candidates and every later stage works on them only. When `top_k == c`,
//!    the full path may have cut (more than `c` possible tokens: processed order) or not
//!    (exactly `c`: id order); both are run and must keep the same set.
//! 4. **top-p** (`top_p < 1`, top-k off or `top_k > c`): the full path keeps the smallest
//!    prefix whose cumulative weight `C_n` (summed in the processed order, bit-identical here)
//!    satisfies `C_n / total >= top_p`, where `total` (the weight top-k lets through) is unknown
//!    but bounded. With `U` the number of unseen tokens top-k can let through
//!    (`vocab_size − c` when top-k is off, `top_k − c` otherwise), `w_c` the last candidate's
//!    weight (every unseen token weighs at most that), the row's total `Z` in
//!    `S·[1 − δ, 1 + δ]` (`δ` = [`SUM_EXP_RELATIVE_TOLERANCE`]) and `C_c` the candidates' total:
//!    `total_hi = C_c + min(S·(1 + δ) − C_c, U·w_c)` and
//!    `total_lo = C_c + max(0, S·(1 − δ) − C_c)·U/(vocab_size − c)` (the heaviest `U` unseen
//!    tokens carry at least their share of the unseen mass), each widened by 1e-9 relative for
//!    summation order. The cut is decided when the smallest `n` with
//!    `C_n / total_hi >= top_p` (reached whatever the true total) is also the smallest `n` with
//!    `C_n / total_lo >= top_p` (no earlier prefix can have reached it)
//!    ([`CandidateRule::TopP`]). Both sides of the boundary are guarded, so the true total may
//!    lie anywhere in the interval. Min-p and typical-p then run on those survivors. If
//!    `C_c > S·(1 + δ)` the statistics are inconsistent and the answer is `None`.
//! 5. **min-p** (`min_p > 0`, not decided above): with `m` the number of candidates whose
//!    weight is `>= min_p` (a prefix), decidable when the last candidate's weight is below
//!    `min_p` (with a relative margin of 1e-12 for `exp`'s rounding, so every unseen token is
//!    below too) and top-p, if on, is known to keep at least `m` tokens (the `total_lo` bound
//!    above) ([`CandidateRule::MinP`]). Typical-p then runs on the `m` survivors, in the
//!    processed order if top-p ran, in id order if top-k is off, and both ways (which must
//!    agree) when `top_k > c`.
//! 6. Anything else is **undecidable** (`None`): typical-p without an earlier cut inside the
//!    candidates, no truncation at all (the draw needs every token), or a top-p / min-p
//!    boundary that may lie outside the candidates.
//!
//! # Precision and caveats
//!
//! * `δ` = [`SUM_EXP_RELATIVE_TOLERANCE`] = 5e-5 bounds the relative error of the GPU's f32
//!   `S` against the full path's f64 total. The kernel (softmax_stats.wgsl) sums at most 16
//!   terms per block, up to `vocab/4096` blocks per lane and 256 lanes in a fixed order: the
//!   worst-case f32 bound for those sums is about `(16 + vocab/4096 + 256)·2^-24 ≈ 2e-5` for a
//!   150k vocabulary, plus a few ulps of WGSL `exp` per term; 5e-5 covers that with room. A
//!   top-p boundary that lies within about `δ·top_p` of a cumulative mass is answered `None`.
//! * The weights are computed from the adjusted logits *as reported* (f32). The full path
//!   computes bias and penalties in f64 from the raw f32 logits, so for a token the GPU adjusted
//!   the two values can differ in the last f32 bit; the guarantee "same id for every `u`" holds
//!   exactly when the reported adjusted logits equal the full path's (always true for tokens
//!   without adjustment), and up to that rounding otherwise.
//! * [`SampleStep::explanation`] is always `None` in this path: an explanation needs the raw and
//!   adjusted logits of the whole vocabulary.

use std::collections::BTreeMap;

use crate::adjustment::LogitAdjustment;
use crate::distribution::{Distribution, process};
use crate::error::{SamplerError, out_of_range};
use crate::math::{exp, ln, top_k_ids, validate_logits};
use crate::params::SamplingParams;
use crate::penalties::{AdjustedLogits, token_counts};
use crate::sampler::{SampleStep, Sampler};

/// Assumed bound on the relative error of [`CandidateSet::sum_exp`] (the GPU's f32 `S`)
/// against the full path's f64 normaliser; see the module doc.
pub const SUM_EXP_RELATIVE_TOLERANCE: f64 = 5e-5;

/// Relative slack between f64 sums of the same positive weights taken in different orders (or
/// of a subset against a superset): far above `len · 2^-53` for any vocabulary.
const SUM_ORDER_SLACK: f64 = 1e-9;

/// Relative slack for the monotonicity of [`crate::math::exp`] (within 1 ulp of the true
/// function, so `x' <= x` implies `exp(x') <= exp(x)·(1 + 3·2^-52)`).
const EXP_MONOTONICITY_SLACK: f64 = 1e-12;

/// What the GPU reads back for one step (see the module doc for the contract), borrowed from
/// the caller's read-back buffer. [`OwnedCandidateSet`] is the owning version.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CandidateSet<'a> {
    /// Candidate token ids, in the processed order (adjusted logit descending, ties to the
    /// lower id).
    pub ids: &'a [u32],
    /// Their adjusted logits (after bias, penalties and mask), same length as `ids`.
    pub adjusted_logits: &'a [f32],
    /// The largest finite adjusted logit of the row (= `adjusted_logits[0]` when finite).
    pub max: f32,
    /// `S = Σ exp((x − max)/T)` over the whole row, f32; used only when `T > 0`.
    pub sum_exp: f32,
    /// The vocabulary size.
    pub vocab_size: usize,
}

impl CandidateSet<'_> {
    /// The number of candidates.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether there are no candidates.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// An owning [`CandidateSet`]; [`Self::reference`] builds one on the CPU exactly as the GPU
/// contract describes (for tests and as a reference for the kernels).
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedCandidateSet {
    /// See [`CandidateSet::ids`].
    pub ids: Vec<u32>,
    /// See [`CandidateSet::adjusted_logits`].
    pub adjusted_logits: Vec<f32>,
    /// See [`CandidateSet::max`].
    pub max: f32,
    /// See [`CandidateSet::sum_exp`].
    pub sum_exp: f32,
    /// See [`CandidateSet::vocab_size`].
    pub vocab_size: usize,
}

impl OwnedCandidateSet {
    /// The candidate set of an adjusted row (finite or -inf, one per token): the first
    /// `min(k, len)` tokens of the processed order, `max`, and `S` accumulated in f32 in id
    /// order from `exp((x − max)/T)` computed in f64 and rounded to f32 (`S = 1` when `T = 0`).
    /// `-0.0` comes back as `+0.0`, as from the GPU.
    pub fn reference(adjusted: &[f32], k: usize, temperature: f64) -> Result<Self, SamplerError> {
        validate_logits(adjusted)?;
        if k == 0 {
            return Err(out_of_range("k", ">= 1", 0));
        }
        if !(temperature.is_finite() && temperature >= 0.0) {
            return Err(out_of_range("temperature", "finite and >= 0", temperature));
        }
        let ids = top_k_ids(adjusted, k.min(adjusted.len()));
        let adjusted_logits: Vec<f32> = ids.iter().map(|&id| adjusted[id as usize] + 0.0).collect();
        let max = adjusted_logits[0];
        let sum_exp = if max == f32::NEG_INFINITY {
            0.0
        } else if temperature == 0.0 {
            1.0
        } else {
            let max = f64::from(max);
            adjusted
                .iter()
                .filter(|&&x| x > f32::NEG_INFINITY)
                .map(|&x| exp((f64::from(x) - max) / temperature) as f32)
                .sum()
        };
        Ok(Self { ids, adjusted_logits, max, sum_exp, vocab_size: adjusted.len() })
    }

    /// The borrowed view.
    pub fn as_set(&self) -> CandidateSet<'_> {
        CandidateSet {
            ids: &self.ids,
            adjusted_logits: &self.adjusted_logits,
            max: self.max,
            sum_exp: self.sum_exp,
            vocab_size: self.vocab_size,
        }
    }
}

/// Which rule of the module doc made a candidate set decidable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CandidateRule {
    /// `T = 0`: the first candidate.
    Greedy,
    /// The candidates are every possible token.
    Complete,
    /// top-k cut inside the candidates.
    TopK,
    /// top-p's cut was located inside the candidates.
    TopP,
    /// min-p removed every token from some candidate on (and every unseen token).
    MinP,
}

/// The final distribution of a step, decided from the candidates alone
/// ([`decide_from_candidates`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateDistribution {
    rule: CandidateRule,
    /// Real ids of the compact row, ascending (compact id `i` is `ids[i]`); no sentinel.
    ids: Vec<u32>,
    /// Their adjusted values (f64), aligned with `ids`.
    values: Vec<f64>,
    /// The compact row's distribution (possibly with a sentinel after `ids`).
    dist: Distribution,
    /// Final survivors, real ids, ascending.
    kept: Vec<u32>,
    /// The largest adjusted logit.
    max: f64,
    /// `S` as f64 when the candidates are not complete (and `T > 0`).
    sum_exp: Option<f64>,
    vocab_size: usize,
}

impl CandidateDistribution {
    /// The rule that decided it.
    pub fn rule(&self) -> CandidateRule {
        self.rule
    }

    /// Whether this is greedy (`T = 0`).
    pub fn is_greedy(&self) -> bool {
        self.dist.is_greedy()
    }

    /// The temperature.
    pub fn temperature(&self) -> f64 {
        self.dist.temperature()
    }

    /// The most probable token (the first candidate).
    pub fn argmax(&self) -> u32 {
        self.ids[self.dist.argmax() as usize]
    }

    /// The final survivors, ascending id: equal to the full path's
    /// [`crate::Distribution::kept_ids`].
    pub fn kept_ids(&self) -> &[u32] {
        &self.kept
    }

    /// Whether `id` survived every stage.
    pub fn is_kept(&self, id: u32) -> bool {
        self.kept.binary_search(&id).is_ok()
    }

    fn compact_index(&self, id: u32) -> Option<u32> {
        self.ids.binary_search(&id).ok().map(|i| i as u32)
    }

    /// The token for a uniform `u` in `[0, 1)`: the same id as the full path's
    /// [`crate::Distribution::draw`] (same survivors, weights, order and total).
    pub fn draw(&self, u: f64) -> u32 {
        self.ids[self.dist.draw(u) as usize]
    }

    /// Probability of `id` in the final distribution (0 when removed); bit-identical to the full
    /// path's [`crate::Distribution::final_prob`].
    pub fn final_prob(&self, id: u32) -> f64 {
        if !self.is_kept(id) {
            return 0.0;
        }
        self.compact_index(id).map_or(0.0, |index| self.dist.final_prob(index))
    }

    /// Natural log of [`Self::final_prob`] (-inf when removed); bit-identical to the full path's
    /// [`crate::Distribution::final_logprob`].
    pub fn final_logprob(&self, id: u32) -> f64 {
        ln(self.final_prob(id))
    }

    /// Probability of `id` after temperature over the whole vocabulary (before truncation),
    /// when it is known: greedy, 1 for the argmax and 0 otherwise; complete sets, exactly the
    /// full path's [`crate::Distribution::prob`] (0 for tokens not listed or `-inf`);
    /// otherwise `exp((a − max)/T) / S` with the GPU's `S` for a candidate (relative error
    /// about [`SUM_EXP_RELATIVE_TOLERANCE`] at worst) and `None` for a token not listed.
    pub fn temperature_prob(&self, id: u32) -> Option<f64> {
        if self.is_greedy() {
            return Some(if id == self.argmax() { 1.0 } else { 0.0 });
        }
        let index = self.compact_index(id);
        match (self.sum_exp, index) {
            (None, Some(index)) => Some(self.dist.prob(index)),
            (None, None) => Some(0.0),
            (Some(s), Some(index)) => {
                let x = (self.values[index as usize] - self.max) / self.temperature();
                Some(exp(x) / s)
            }
            (Some(_), None) => (id as usize >= self.vocab_size).then_some(0.0),
        }
    }
}

/// The parameters `process` reads (temperature and truncation), without the bias map.
fn processing(params: &SamplingParams) -> SamplingParams {
    SamplingParams {
        temperature: params.temperature,
        top_k: params.top_k,
        top_p: params.top_p,
        min_p: params.min_p,
        typical_p: params.typical_p,
        ..SamplingParams::default()
    }
}

/// `process` on the compact row (see the module doc).
struct Compact {
    ids: Vec<u32>,
    values: Vec<f64>,
    dist: Distribution,
}

impl Compact {
    /// `finite`: candidates in the processed order, all finite, non-empty.
    fn run(finite: &[(f32, u32)], sentinel: bool, params: &SamplingParams) -> Result<Self, SamplerError> {
        let mut by_id: Vec<(u32, f64)> = finite.iter().map(|&(value, id)| (id, f64::from(value) + 0.0)).collect();
        by_id.sort_unstable_by_key(|entry| entry.0);
        let ids: Vec<u32> = by_id.iter().map(|entry| entry.0).collect();
        let values: Vec<f64> = by_id.iter().map(|entry| entry.1).collect();
        let mut row = values.clone();
        if sentinel {
            // Same value as the last candidate, highest compact id: after every candidate.
            row.push(f64::from(finite[finite.len() - 1].0) + 0.0);
        }
        let dist = process(&AdjustedLogits::new(row, None)?, params)?;
        Ok(Self { ids, values, dist })
    }

    /// The kept real ids, or `None` if the sentinel survived (cannot happen when the caller
    /// cut inside the candidates; checked anyway).
    fn kept(&self) -> Option<Vec<u32>> {
        self.dist.kept_ids().iter().map(|&index| self.ids.get(index as usize).copied()).collect()
    }
}

/// The finite candidates (processed order) and whether a `-inf` one was listed, after checking
/// the set's shape.
fn validate_set(set: &CandidateSet) -> Result<(Vec<(f32, u32)>, bool), SamplerError> {
    let invalid = |reason: String| SamplerError::InvalidCandidates { reason };
    if set.vocab_size == 0 {
        return Err(SamplerError::EmptyVocabulary);
    }
    if set.ids.len() != set.adjusted_logits.len() {
        return Err(SamplerError::LengthMismatch {
            what: "candidate logits",
            expected: set.ids.len(),
            got: set.adjusted_logits.len(),
        });
    }
    if set.ids.len() > set.vocab_size {
        return Err(invalid(format!("{} candidates for a vocabulary of {}", set.ids.len(), set.vocab_size)));
    }
    let mut finite = Vec::with_capacity(set.ids.len());
    let mut has_neg_inf = false;
    let mut previous: Option<(f32, u32)> = None;
    for (&id, &value) in set.ids.iter().zip(set.adjusted_logits) {
        if id as usize >= set.vocab_size {
            return Err(SamplerError::TokenOutOfVocabulary { id, vocab_size: set.vocab_size });
        }
        if value.is_nan() || value == f32::INFINITY {
            return Err(SamplerError::InvalidLogit { id, value: f64::from(value) });
        }
        if let Some((prev_value, prev_id)) = previous
            && !(prev_value > value || (prev_value == value && prev_id < id))
        {
            return Err(invalid(format!(
                "not in the processed order: ({prev_id}, {prev_value}) before ({id}, {value})"
            )));
        }
        previous = Some((value, id));
        if value == f32::NEG_INFINITY {
            has_neg_inf = true;
        } else {
            finite.push((value, id));
        }
    }
    // Sorted by (value desc, id asc) strictly, so equal ids could only hide under different
    // values: check them.
    let mut sorted_ids = set.ids.to_vec();
    sorted_ids.sort_unstable();
    if let Some(pair) = sorted_ids.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(invalid(format!("token {} listed twice", pair[0])));
    }
    if let Some(&(first, _)) = finite.first()
        && set.max != first
    {
        return Err(invalid(format!("max {} is not the first candidate's logit {first}", set.max)));
    }
    Ok((finite, has_neg_inf))
}

/// In which order the survivors of a decided prefix sit when the remaining stages run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SurvivorOrder {
    /// After a top-k or top-p cut.
    Processed,
    /// No stage has cut yet.
    Id,
    /// Either, depending on tokens not listed.
    Either,
}

/// Decides the step from the GPU's candidates: `Some` exactly when the final kept set is
/// provably made of candidates (the rules are in the module doc), `None` when the full logits
/// are needed.
///
/// Errors on invalid processing parameters, on a malformed set
/// ([`SamplerError::InvalidCandidates`], [`SamplerError::InvalidLogit`], ...) and, for a
/// complete set with no finite logit, [`SamplerError::AllTokensExcluded`].
pub fn decide_from_candidates(
    set: &CandidateSet,
    params: &SamplingParams,
) -> Result<Option<CandidateDistribution>, SamplerError> {
    decide_from_candidates_with_tolerance(set, params, SUM_EXP_RELATIVE_TOLERANCE)
}

/// [`decide_from_candidates`] with another bound on the relative error of `sum_exp` than
/// [`SUM_EXP_RELATIVE_TOLERANCE`] (for a kernel with a known, tighter bound). A bound that is
/// too small makes the answer wrong near a top-p boundary; `tolerance` must be in `[0, 0.5]`.
pub fn decide_from_candidates_with_tolerance(
    set: &CandidateSet,
    params: &SamplingParams,
    tolerance: f64,
) -> Result<Option<CandidateDistribution>, SamplerError> {
    params.validate_processing()?;
    if !(0.0..=0.5).contains(&tolerance) {
        return Err(out_of_range("sum_exp tolerance", "in [0, 0.5]", tolerance));
    }
    let (finite, has_neg_inf) = validate_set(set)?;
    let complete = has_neg_inf || set.ids.len() == set.vocab_size;
    if finite.is_empty() {
        return if complete { Err(SamplerError::AllTokensExcluded) } else { Ok(None) };
    }
    let base = processing(params);
    let finish = |compact: Compact, rule: CandidateRule, sum_exp: Option<f64>| {
        let kept = compact.kept();
        Ok(kept.map(|kept| CandidateDistribution {
            rule,
            ids: compact.ids,
            values: compact.values,
            dist: compact.dist,
            kept,
            max: f64::from(finite[0].0),
            sum_exp,
            vocab_size: set.vocab_size,
        }))
    };

    if params.is_greedy() {
        return finish(Compact::run(&finite, false, &base)?, CandidateRule::Greedy, None);
    }
    if complete {
        return finish(Compact::run(&finite, false, &base)?, CandidateRule::Complete, None);
    }

    // Incomplete, T > 0: every candidate is finite and more tokens may be possible.
    let c = finite.len();
    let s = f64::from(set.sum_exp);
    if !(s.is_finite() && s > 0.0) {
        return Err(SamplerError::InvalidCandidates {
            reason: format!("sum_exp must be finite and > 0, got {}", set.sum_exp),
        });
    }

    // Rule 3: top-k cuts inside the candidates.
    if params.top_k > 0 && params.top_k <= c {
        let cut = Compact::run(&finite, true, &base)?;
        if params.top_k == c {
            // Exactly c possible tokens would leave them uncut, in id order.
            let uncut = Compact::run(&finite, false, &base)?;
            if uncut.kept() != cut.kept() {
                return Ok(None);
            }
        }
        return finish(cut, CandidateRule::TopK, Some(s));
    }

    // top-k is off or keeps every candidate (and maybe more).
    let temperature = params.temperature;
    let max = f64::from(finite[0].0);
    let weights: Vec<f64> =
        finite.iter().map(|&(value, _)| exp(((f64::from(value) + 0.0) - max) / temperature)).collect();

    let mut decided: Option<(usize, SurvivorOrder, CandidateRule)> = None;
    // A lower bound on the number of survivors before min-p (they may extend past the list).
    let mut survivors_lower = c;

    // Rule 4: top-p, whose total is bounded (module doc).
    if params.top_p < 1.0 {
        let candidate_total: f64 = weights.iter().sum();
        let s_hi = s * (1.0 + tolerance);
        let s_lo = s * (1.0 - tolerance);
        if candidate_total > s_hi * (1.0 + SUM_ORDER_SLACK) {
            return Ok(None);
        }
        // Each unseen token weighs at most the last candidate's weight; top-k (if on) keeps at
        // most `top_k - c` of them, and those carry at least their share of the unseen mass.
        let unseen_count = (set.vocab_size - c) as f64;
        let unseen_kept = if params.top_k == 0 { unseen_count } else { (params.top_k - c) as f64 };
        let unseen_weight_max = weights[c - 1] * (1.0 + EXP_MONOTONICITY_SLACK);
        let unseen_hi = (s_hi - candidate_total).min(unseen_kept * unseen_weight_max).max(0.0);
        let unseen_lo = (s_lo - candidate_total).max(0.0) * (unseen_kept / unseen_count).min(1.0);
        let total_hi = (candidate_total + unseen_hi) * (1.0 + SUM_ORDER_SLACK);
        let total_lo = (candidate_total + unseen_lo) * (1.0 - SUM_ORDER_SLACK);
        let mut cumulative = 0.0;
        let mut first_possible = None;
        let mut first_certain = None;
        for (i, &w) in weights.iter().enumerate() {
            cumulative += w;
            if first_possible.is_none() && cumulative / total_lo >= params.top_p {
                first_possible = Some(i + 1);
            }
            if cumulative / total_hi >= params.top_p {
                first_certain = Some(i + 1);
                break;
            }
        }
        match (first_possible, first_certain) {
            (Some(lo), Some(hi)) if lo == hi => {
                decided = Some((hi, SurvivorOrder::Processed, CandidateRule::TopP));
            }
            _ => survivors_lower = first_possible.unwrap_or(c),
        }
    }

    // Rule 5: min-p.
    if decided.is_none() && params.min_p > 0.0 {
        let threshold = params.min_p;
        let m = weights.iter().take_while(|&&w| w >= threshold).count();
        let rest_below = weights[m..].iter().all(|&w| w < threshold);
        let unseen_below = weights[c - 1] * (1.0 + EXP_MONOTONICITY_SLACK) < threshold;
        if rest_below && unseen_below && survivors_lower >= m {
            let order = if params.top_p < 1.0 {
                SurvivorOrder::Processed
            } else if params.top_k == 0 {
                SurvivorOrder::Id
            } else {
                SurvivorOrder::Either
            };
            decided = Some((m, order, CandidateRule::MinP));
        }
    }

    let Some((n, order, rule)) = decided else {
        return Ok(None);
    };
    let in_processed_order = || {
        let params = SamplingParams { top_k: n, top_p: 1.0, ..base.clone() };
        Compact::run(&finite, true, &params)
    };
    let in_id_order = || {
        let params = SamplingParams { top_k: 0, top_p: 1.0, min_p: 0.0, ..base.clone() };
        Compact::run(&finite[..n], false, &params)
    };
    let compact = match order {
        SurvivorOrder::Processed => in_processed_order()?,
        SurvivorOrder::Id => in_id_order()?,
        SurvivorOrder::Either if params.typical_p < 1.0 => {
            let processed = in_processed_order()?;
            if in_id_order()?.kept() != processed.kept() {
                return Ok(None);
            }
            processed
        }
        // Without typical-p the order changes no sum that matters (the draw's total is always
        // taken in id order).
        SurvivorOrder::Either => in_processed_order()?,
    };
    finish(compact, rule, Some(s))
}

impl Sampler {
    /// Whether the GPU decode tail can reproduce stages 1–2 of these parameters: false when DRY
    /// is enabled (its penalty depends on n-gram matches, not on a per-token formula).
    pub fn gpu_path_available(&self) -> bool {
        !self.params().dry_enabled()
    }

    /// The sparse stage 1–2 adjustments of the next step, ascending by id, one entry per token
    /// with a logit bias or in the penalty window (the window of [`Sampler::sample`]: the last
    /// `penalty_last_n` tokens of the generated tokens, preceded by the prompt when
    /// `penalize_prompt`); identity entries are left out. The mask is not included (the caller
    /// passes its own allow-mask to the GPU).
    ///
    /// Errors with [`SamplerError::GpuPathUnavailable`] when DRY is enabled.
    pub fn gpu_adjustments(&self) -> Result<Vec<LogitAdjustment>, SamplerError> {
        if !self.gpu_path_available() {
            return Err(SamplerError::GpuPathUnavailable { reason: "DRY is enabled and has no per-token form" });
        }
        let params = self.params();
        let mut entries: BTreeMap<u32, LogitAdjustment> = BTreeMap::new();
        for (&id, &bias) in &params.logit_bias {
            entries.insert(id, LogitAdjustment::new(id).with_bias(bias as f32));
        }
        let penalised =
            params.repetition_penalty != 1.0 || params.presence_penalty != 0.0 || params.frequency_penalty != 0.0;
        if penalised {
            let window = self.history().window(params.penalize_prompt, params.penalty_last_n);
            let theta = params.repetition_penalty;
            for (id, count) in token_counts(&window) {
                let entry = entries.entry(id).or_insert_with(|| LogitAdjustment::new(id));
                if theta != 1.0 {
                    *entry = entry.with_repetition_penalty(theta);
                }
                if params.presence_penalty != 0.0 || params.frequency_penalty != 0.0 {
                    // In f64, rounded once.
                    let offset = -(f64::from(count) * params.frequency_penalty + params.presence_penalty);
                    *entry = entry.with_offset(offset as f32);
                }
            }
        }
        Ok(entries.into_values().filter(|e| !e.is_identity()).collect())
    }

    /// Finishes a step from the GPU's candidates: `Some` with the token [`Sampler::sample`]
    /// would choose from the full logits for the same random number, or `None` when the
    /// candidates cannot decide it (see [`decide_from_candidates`]); then call `sample` with
    /// the full raw logits.
    ///
    /// Consumes one random number only when it returns `Some`, so a fallback to `sample` after
    /// `None` keeps the generator where a run without candidates would have it. The step's
    /// `explanation` is always `None` (it needs the full logits). The candidates must come
    /// from logits adjusted with [`Sampler::gpu_adjustments`] (and the mask) of this sampler's
    /// current history. Errors with [`SamplerError::GpuPathUnavailable`] when DRY is enabled.
    pub fn sample_candidates(&mut self, set: &CandidateSet) -> Result<Option<SampleStep>, SamplerError> {
        if !self.gpu_path_available() {
            return Err(SamplerError::GpuPathUnavailable { reason: "DRY is enabled and has no per-token form" });
        }
        if set.vocab_size != self.vocab_size() {
            return Err(SamplerError::LengthMismatch {
                what: "candidate set vocabulary size",
                expected: self.vocab_size(),
                got: set.vocab_size,
            });
        }
        let Some(dist) = decide_from_candidates(set, self.params())? else {
            return Ok(None);
        };
        let uniform = self.rng_mut().next_f64();
        let id = dist.draw(uniform);
        Ok(Some(SampleStep { id, logprob: dist.final_logprob(id), uniform, explanation: None }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f64) -> SamplingParams {
        SamplingParams { temperature, ..SamplingParams::default() }
    }

    #[test]
    fn malformed_sets_are_rejected() {
        let ok = |ids: &[u32], logits: &[f32], max: f32| {
            decide_from_candidates(
                &CandidateSet { ids, adjusted_logits: logits, max, sum_exp: 2.0, vocab_size: 10 },
                &params(1.0),
            )
        };
        assert!(matches!(ok(&[1, 2], &[2.0, 3.0], 2.0), Err(SamplerError::InvalidCandidates { .. })));
        assert!(matches!(ok(&[2, 1], &[3.0, 3.0], 3.0), Err(SamplerError::InvalidCandidates { .. })));
        assert!(matches!(ok(&[1, 1], &[3.0, 2.0], 3.0), Err(SamplerError::InvalidCandidates { .. })));
        assert!(matches!(ok(&[1, 2], &[3.0, 2.0], 4.0), Err(SamplerError::InvalidCandidates { .. })));
        assert!(matches!(ok(&[1, 12], &[3.0, 2.0], 3.0), Err(SamplerError::TokenOutOfVocabulary { id: 12, .. })));
        assert!(matches!(ok(&[1], &[3.0, 2.0], 3.0), Err(SamplerError::LengthMismatch { .. })));
        assert!(matches!(
            ok(&[1, 2], &[f32::NEG_INFINITY, f32::NEG_INFINITY], 0.0),
            Err(SamplerError::AllTokensExcluded)
        ));
        // Well formed but no truncation: undecidable.
        assert_eq!(ok(&[1, 2], &[3.0, 2.0], 3.0), Ok(None));
    }

    #[test]
    fn sentinel_and_both_orders_agree_with_process_on_small_rows() {
        // Exactly c = K finite tokens, the rest -inf but not listed (ambiguous completeness).
        let row = [1.0f32, 3.0, 2.0, f32::NEG_INFINITY];
        let set = CandidateSet {
            ids: &[1, 2, 0],
            adjusted_logits: &[3.0, 2.0, 1.0],
            max: 3.0,
            sum_exp: (1.0 + (-1.0f32).exp() + (-2.0f32).exp()),
            vocab_size: 4,
        };
        let full = process(
            &AdjustedLogits::new(row.iter().map(|&x| f64::from(x)).collect(), None).unwrap(),
            &SamplingParams { top_k: 3, top_p: 0.7, ..params(1.0) },
        )
        .unwrap();
        let decided =
            decide_from_candidates(&set, &SamplingParams { top_k: 3, top_p: 0.7, ..params(1.0) }).unwrap().unwrap();
        assert_eq!(decided.kept_ids(), full.kept_ids());
        assert_eq!(decided.rule(), CandidateRule::TopK);
        for i in 0..100 {
            let u = f64::from(i) / 100.0;
            assert_eq!(decided.draw(u), full.draw(u));
        }
    }
}
