//! Stages 1–3 of the pipeline: logit bias, history penalties, and the constraint mask.
//!
//! [`adjust_logits`] turns raw `f32` logits into [`AdjustedLogits`] (f64 values after bias and
//! penalties, plus the set of tokens the mask allows). Each stage is also available on its own.

use crate::error::SamplerError;
use crate::mask::{TokenMask, TokenSet};
use crate::math::{first_not_below, powi_portable, validate_logits};
use crate::params::SamplingParams;
use std::collections::BTreeMap;

/// The longest match DRY extends backwards (as in the reference implementation; it also bounds
/// the exponent of the penalty).
pub const DRY_MAX_MATCH_LENGTH: usize = 50;

/// The token history the penalties look at: the prompt and the tokens generated so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PenaltyHistory<'a> {
    /// The prompt's token ids.
    pub prompt: &'a [u32],
    /// The generated token ids, oldest first.
    pub generated: &'a [u32],
}

impl PenaltyHistory<'_> {
    /// The last `last_n` tokens (0 = all) of the generated tokens, preceded by the prompt when
    /// `include_prompt`; oldest first.
    pub fn window(&self, include_prompt: bool, last_n: usize) -> Vec<u32> {
        let prompt: &[u32] = if include_prompt { self.prompt } else { &[] };
        let total = prompt.len() + self.generated.len();
        let skip = if last_n == 0 { 0 } else { total.saturating_sub(last_n) };
        prompt.iter().chain(self.generated).skip(skip).copied().collect()
    }
}

/// Logits after bias and penalties (f64), with the mask's verdict.
///
/// This is the input of the temperature and truncation stages ([`crate::process`]). The
/// visualiser can keep it from a step and re-run those stages with other parameters
/// ("what if") without the model or the random generator.
#[derive(Debug, Clone, PartialEq)]
pub struct AdjustedLogits {
    values: Vec<f64>,
    allowed: Option<TokenSet>,
}

impl AdjustedLogits {
    /// Builds adjusted logits from values (finite or -inf) and an optional allowed set of the
    /// same vocabulary size.
    pub fn new(values: Vec<f64>, allowed: Option<TokenSet>) -> Result<Self, SamplerError> {
        if values.is_empty() {
            return Err(SamplerError::EmptyLogits);
        }
        if let Some(id) = first_not_below(&values, f64::INFINITY) {
            return Err(SamplerError::InvalidLogit { id: id as u32, value: values[id] });
        }
        // -0.0 becomes +0.0, so that ordering by value treats them as the tie they are.
        let values: Vec<f64> = values.into_iter().map(|v| v + 0.0).collect();
        if let Some(set) = &allowed
            && set.vocab_size() != values.len()
        {
            return Err(SamplerError::LengthMismatch {
                what: "mask vocabulary size",
                expected: values.len(),
                got: set.vocab_size(),
            });
        }
        Ok(Self { values, allowed })
    }

    /// The values after bias and penalties (before the mask), one per token.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// The mask's allowed set, `None` when there was no mask.
    pub fn allowed(&self) -> Option<&TokenSet> {
        self.allowed.as_ref()
    }

    /// Whether the mask allows `id` (true without a mask).
    pub fn is_allowed(&self, id: u32) -> bool {
        self.allowed.as_ref().is_none_or(|set| set.contains(id))
    }

    /// Whether `id` can still be sampled: inside the vocabulary, allowed by the mask, not -inf.
    pub fn is_possible(&self, id: u32) -> bool {
        self.values.get(id as usize).is_some_and(|&v| v > f64::NEG_INFINITY) && self.is_allowed(id)
    }

    /// Number of tokens (the vocabulary size).
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Always false (adjusted logits are never empty); for API symmetry.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// Stages 1–3: validates `logits` (finite or -inf, one per vocabulary entry) and `params`, then
/// applies, in this order, the logit bias, the repetition penalty, the presence and frequency
/// penalties, DRY, and records the mask.
pub fn adjust_logits(
    logits: &[f32],
    params: &SamplingParams,
    history: PenaltyHistory<'_>,
    mask: Option<&dyn TokenMask>,
) -> Result<AdjustedLogits, SamplerError> {
    validate_logits(logits)?;
    params.validate(logits.len())?;
    let mut values: Vec<f64> = logits.iter().map(|&z| f64::from(z)).collect();

    apply_logit_bias(&mut values, &params.logit_bias);

    let penalised =
        params.repetition_penalty != 1.0 || params.presence_penalty != 0.0 || params.frequency_penalty != 0.0;
    if penalised {
        let window = history.window(params.penalize_prompt, params.penalty_last_n);
        let counts = token_counts(&window);
        apply_repetition_penalty(&mut values, &counts, params.repetition_penalty);
        apply_presence_frequency_penalty(&mut values, &counts, params.presence_penalty, params.frequency_penalty);
    }
    if params.dry_enabled() {
        let context = history.window(params.dry_include_prompt, params.dry_penalty_last_n);
        apply_dry(&mut values, &context, params);
    }

    let allowed = mask.map(|m| m.allowed_set(values.len()));
    AdjustedLogits::new(values, allowed)
}

/// Adds `bias[id]` to `values[id]`; ids outside `values` are ignored (validation rejects them
/// earlier). A -inf bias forbids the token.
pub fn apply_logit_bias(values: &mut [f64], bias: &BTreeMap<u32, f64>) {
    for (&id, &b) in bias {
        if let Some(v) = values.get_mut(id as usize) {
            *v += b;
        }
    }
}

/// `(token id, occurrences)` for each distinct token of `window`, ascending by id.
pub fn token_counts(window: &[u32]) -> Vec<(u32, u32)> {
    let mut sorted = window.to_vec();
    sorted.sort_unstable();
    let mut counts: Vec<(u32, u32)> = Vec::new();
    for id in sorted {
        match counts.last_mut() {
            Some((last, n)) if *last == id => *n += 1,
            _ => counts.push((id, 1)),
        }
    }
    counts
}

/// CTRL / Hugging Face repetition penalty: every token that occurs in the window has its value
/// divided by `penalty` if positive, multiplied by it otherwise (once, whatever the count).
pub fn apply_repetition_penalty(values: &mut [f64], counts: &[(u32, u32)], penalty: f64) {
    if penalty == 1.0 {
        return;
    }
    for &(id, _) in counts {
        if let Some(v) = values.get_mut(id as usize) {
            *v = if *v > 0.0 { *v / penalty } else { *v * penalty };
        }
    }
}

/// OpenAI presence and frequency penalties: `z - count·frequency - [count > 0]·presence`.
pub fn apply_presence_frequency_penalty(values: &mut [f64], counts: &[(u32, u32)], presence: f64, frequency: f64) {
    if presence == 0.0 && frequency == 0.0 {
        return;
    }
    for &(id, count) in counts {
        if let Some(v) = values.get_mut(id as usize) {
            *v -= f64::from(count) * frequency + presence;
        }
    }
}

/// The DRY penalty of every token that would extend a repeated sequence of `context`
/// (oldest first), ascending by id.
///
/// The algorithm of the reference description:
/// 1. if the last token is a sequence breaker, nothing is penalised;
/// 2. for every earlier occurrence `i` of the last token whose follower `context[i+1]` is not a
///    breaker, extend the match backwards while `context[i-n] == context[len-1-n]`, the token is
///    not a breaker, and the match is shorter than [`DRY_MAX_MATCH_LENGTH`]; the follower gets
///    the longest match length found for it;
/// 3. a follower whose match length `n >= dry_allowed_length` is penalised by
///    `dry_multiplier · dry_base^(n - dry_allowed_length)`.
///
/// Breakers are `dry.dry_breaker_ids`; the other fields of `dry` play no part.
pub fn dry_penalties(context: &[u32], dry: &SamplingParams) -> Vec<(u32, f64)> {
    let Some((&last, earlier)) = context.split_last() else {
        return Vec::new();
    };
    if !dry.dry_enabled() || dry.dry_breaker_ids.contains(&last) {
        return Vec::new();
    }
    let is_breaker = |id: u32| dry.dry_breaker_ids.contains(&id);
    let n = context.len();
    let mut longest: BTreeMap<u32, usize> = BTreeMap::new();
    for (i, _) in earlier.iter().enumerate().filter(|&(_, &t)| t == last) {
        let follower = context[i + 1];
        if is_breaker(follower) {
            continue;
        }
        let mut length = 1;
        while length < DRY_MAX_MATCH_LENGTH {
            let Some(j) = i.checked_sub(length) else {
                break;
            };
            let previous = context[n - 1 - length];
            if context[j] != previous || is_breaker(previous) {
                break;
            }
            length += 1;
        }
        let entry = longest.entry(follower).or_insert(0);
        *entry = (*entry).max(length);
    }
    longest
        .into_iter()
        .filter(|&(_, length)| length >= dry.dry_allowed_length)
        .map(|(id, length)| {
            let exponent = (length - dry.dry_allowed_length) as u32;
            (id, dry.dry_multiplier * powi_portable(dry.dry_base, exponent))
        })
        .collect()
}

/// Subtracts the [`dry_penalties`] of `context` from `values`.
pub fn apply_dry(values: &mut [f64], context: &[u32], dry: &SamplingParams) {
    for (id, penalty) in dry_penalties(context, dry) {
        if let Some(v) = values.get_mut(id as usize) {
            *v -= penalty;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dry(multiplier: f64, base: f64, allowed_length: usize, breakers: &[u32]) -> SamplingParams {
        SamplingParams {
            dry_multiplier: multiplier,
            dry_base: base,
            dry_allowed_length: allowed_length,
            dry_breaker_ids: breakers.iter().copied().collect(),
            ..SamplingParams::default()
        }
    }

    #[test]
    fn history_window_respects_prompt_flag_and_last_n() {
        let h = PenaltyHistory { prompt: &[1, 2, 3], generated: &[4, 5] };
        assert_eq!(h.window(false, 0), vec![4, 5]);
        assert_eq!(h.window(true, 0), vec![1, 2, 3, 4, 5]);
        assert_eq!(h.window(true, 3), vec![3, 4, 5]);
        assert_eq!(h.window(false, 1), vec![5]);
        assert_eq!(h.window(false, 10), vec![4, 5]);
    }

    #[test]
    fn repetition_penalty_divides_positive_and_multiplies_negative() {
        let mut v = vec![6.0, -2.0, 3.0];
        apply_repetition_penalty(&mut v, &token_counts(&[0, 1, 1]), 1.25);
        assert_eq!(v, vec![4.8, -2.5, 3.0]);
    }

    #[test]
    fn presence_and_frequency_follow_openai() {
        let mut v = vec![1.0, 1.0, 1.0];
        apply_presence_frequency_penalty(&mut v, &token_counts(&[0, 0, 0, 1]), 0.5, 0.25);
        // token 0: 3 occurrences: 1 - 3*0.25 - 0.5; token 1: 1 - 0.25 - 0.5; token 2 unseen.
        assert_eq!(v, vec![-0.25, 0.25, 1.0]);
    }

    #[test]
    fn dry_penalises_the_token_that_extends_a_repeat() {
        // a b c a b: the suffix "a b" occurred before, followed by c. Match length 2.
        let d = dry(1.0, 2.0, 2, &[]);
        assert_eq!(dry_penalties(&[0, 1, 2, 0, 1], &d), vec![(2, 1.0)]);
        // a b c d a b c: suffix "a b c" (length 3) followed by d: 1 * 2^(3-2) = 2.
        assert_eq!(dry_penalties(&[0, 1, 2, 3, 0, 1, 2], &d), vec![(3, 2.0)]);
        // Length 1 ("b" then c) is below allowed_length 2: nothing.
        assert!(dry_penalties(&[5, 1, 2, 0, 1], &d).is_empty());
        // The longest match per follower wins.
        let ctx = [7, 1, 9, 0, 1, 9, 8, 0, 1];
        assert_eq!(dry_penalties(&ctx, &d), vec![(9, 1.0)]);
    }

    #[test]
    fn dry_stops_at_sequence_breakers() {
        // Same as above but "a" (0) is a breaker: the match cannot extend over it.
        let d = dry(1.0, 2.0, 2, &[0]);
        assert!(dry_penalties(&[0, 1, 2, 0, 1], &d).is_empty());
        // Last token a breaker: nothing.
        let d = dry(1.0, 2.0, 1, &[1]);
        assert!(dry_penalties(&[0, 1, 2, 0, 1], &d).is_empty());
        // Follower a breaker: skipped.
        let d = dry(1.0, 2.0, 1, &[2]);
        assert!(dry_penalties(&[0, 1, 2, 0, 1], &d).is_empty());
    }

    #[test]
    fn dry_caps_the_match_length() {
        // A long run of one token: the match length is capped at 50.
        let ctx = vec![3u32; 200];
        let d = dry(1.0, 1.0, 2, &[]);
        assert_eq!(dry_penalties(&ctx, &d), vec![(3, 1.0)]);
        let d = dry(0.5, 1.75, 2, &[]);
        let expected = 0.5 * powi_portable(1.75, 48);
        assert_eq!(dry_penalties(&ctx, &d), vec![(3, expected)]);
    }

    #[test]
    fn adjust_applies_bias_penalties_and_mask() {
        let params = SamplingParams {
            logit_bias: [(0, 1.0), (3, f64::NEG_INFINITY)].into(),
            repetition_penalty: 2.0,
            ..SamplingParams::default()
        };
        let history = PenaltyHistory { prompt: &[1], generated: &[0] };
        let mask = |id: u32| id != 2;
        let adjusted = adjust_logits(&[1.0, 4.0, 2.0, 5.0], &params, history, Some(&mask)).unwrap();
        // token 0: (1 + 1) / 2; token 1 is only in the prompt (not penalised by default).
        assert_eq!(adjusted.values(), &[1.0, 4.0, 2.0, f64::NEG_INFINITY]);
        assert!(!adjusted.is_allowed(2) && adjusted.is_allowed(1));
        assert!(!adjusted.is_possible(3) && !adjusted.is_possible(2) && adjusted.is_possible(0));

        let with_prompt = SamplingParams { penalize_prompt: true, ..params };
        let adjusted = adjust_logits(&[1.0, 4.0, 2.0, 5.0], &with_prompt, history, None).unwrap();
        assert_eq!(adjusted.values()[1], 2.0);
    }

    #[test]
    fn adjust_rejects_bad_logits() {
        let p = SamplingParams::default();
        let h = PenaltyHistory::default();
        assert_eq!(adjust_logits(&[], &p, h, None).unwrap_err(), SamplerError::EmptyLogits);
        assert_eq!(
            adjust_logits(&[0.0, f32::NAN], &p, h, None).unwrap_err().to_string(),
            "logit at id 1 is NaN; logits must be finite or -inf"
        );
        assert_eq!(
            adjust_logits(&[f32::INFINITY], &p, h, None).unwrap_err().to_string(),
            "logit at id 0 is inf; logits must be finite or -inf"
        );
        assert!(adjust_logits(&[f32::NEG_INFINITY, 0.0], &p, h, None).is_ok());
    }
}
