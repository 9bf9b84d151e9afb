//! Speculative decoding's acceptance rule (Leviathan et al. 2023; Chen et al. 2023).
//!
//! A draft proposed tokens `x_1..x_n`, each drawn from a draft distribution `p_i`; the target
//! model gave distributions `q_1..q_{n+1}` at those positions (the last one after all drafts).
//! Position by position, `x_i` is accepted with probability `min(1, q_i(x_i) / p_i(x_i))`. At
//! the first rejection a replacement is drawn from `normalise(max(0, q_i - p_i))` and the rest
//! of the draft is discarded; if all are accepted, a bonus token is drawn from `q_{n+1}`. The
//! output tokens are then distributed exactly as if drawn from the target one by one.
//!
//! A deterministic draft (prompt-lookup, n-gram drafting) is the point mass
//! [`DraftProbs::PointMass`]: `p_i(x_i) = 1`, so acceptance has probability `q_i(x_i)` and the
//! replacement comes from `q_i` without `x_i`.
//!
//! [`judge_point_draft`] is the same rule for one token of a deterministic draft against the
//! target's processed [`Distribution`], for a decoder that verifies position by position (the
//! history, and so the penalties, of each position include the drafts accepted before it).
//!
//! Distributions are probabilities (for example [`crate::Distribution::final_probs`] of the
//! target's processed distribution), normalised here by their sums. Random numbers come from a
//! [`SamplerRng`]: one per examined position, then one for the replacement or bonus token.

use serde::Serialize;

use crate::distribution::Distribution;
use crate::error::SamplerError;
use crate::math::draw_categorical;
use crate::rng::SamplerRng;

/// The draft's distribution at one position.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DraftProbs<'a> {
    /// Probabilities over the vocabulary (normalised by their sum).
    Distribution(&'a [f64]),
    /// A deterministic draft: all mass on the drafted token.
    PointMass,
}

/// One drafted token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DraftToken<'a> {
    /// The drafted token id.
    pub id: u32,
    /// The distribution it was drawn from.
    pub probs: DraftProbs<'a>,
}

/// What happened to a drafted token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Accepted.
    Accepted,
    /// Rejected; a replacement was drawn.
    Rejected,
    /// After a rejection: not examined.
    NotReached,
}

/// The ledger line of one drafted token.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LedgerEntry {
    /// Position in the draft (0-based).
    pub position: usize,
    /// The drafted token.
    pub token: u32,
    /// `p(x)` under the draft.
    pub draft_prob: f64,
    /// `q(x)` under the target.
    pub target_prob: f64,
    /// `min(1, q(x) / p(x))`.
    pub acceptance_prob: f64,
    /// The uniform number compared with it (`None` when not reached).
    pub uniform: Option<f64>,
    /// The outcome.
    pub verdict: Verdict,
}

/// The result of one verification.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ledger {
    /// One entry per drafted token.
    pub entries: Vec<LedgerEntry>,
    /// Number of drafted tokens accepted (a prefix of the draft).
    pub accepted: usize,
    /// The replacement drawn at the first rejection.
    pub correction: Option<u32>,
    /// The bonus token drawn when every drafted token was accepted.
    pub bonus: Option<u32>,
    /// The tokens to append: the accepted drafts, then the correction or the bonus token.
    pub tokens: Vec<u32>,
}

/// Checks a probability vector and returns its sum.
fn check_distribution(probs: &[f64], vocab_size: usize, what: String) -> Result<f64, SamplerError> {
    if probs.len() != vocab_size {
        return Err(SamplerError::InvalidDistribution {
            what,
            reason: format!("expected {vocab_size} entries, got {}", probs.len()),
        });
    }
    if let Some(i) = probs.iter().position(|p| !(p.is_finite() && *p >= 0.0)) {
        return Err(SamplerError::InvalidDistribution { what, reason: format!("entry {i} is {}", probs[i]) });
    }
    let total: f64 = probs.iter().sum();
    if !(total > 0.0 && total.is_finite()) {
        return Err(SamplerError::InvalidDistribution { what, reason: format!("entries sum to {total}") });
    }
    Ok(total)
}

/// Applies the acceptance rule to `draft` given the target distributions `target`
/// (`draft.len() + 1` of them, all the same length); see the module doc.
pub fn speculative_accept(
    draft: &[DraftToken<'_>],
    target: &[&[f64]],
    rng: &mut SamplerRng,
) -> Result<Ledger, SamplerError> {
    if target.len() != draft.len() + 1 {
        return Err(SamplerError::LengthMismatch {
            what: "target distributions (one per drafted token, plus one for the bonus)",
            expected: draft.len() + 1,
            got: target.len(),
        });
    }
    let vocab_size = target[0].len();
    let mut target_totals = Vec::with_capacity(target.len());
    for (i, q) in target.iter().enumerate() {
        target_totals.push(check_distribution(q, vocab_size, format!("target distribution {i}"))?);
    }
    let mut entries = Vec::with_capacity(draft.len());
    let mut draft_totals = Vec::with_capacity(draft.len());
    for (position, token) in draft.iter().enumerate() {
        if token.id as usize >= vocab_size {
            return Err(SamplerError::TokenOutOfVocabulary { id: token.id, vocab_size });
        }
        let draft_total = match token.probs {
            DraftProbs::Distribution(p) => check_distribution(p, vocab_size, format!("draft distribution {position}"))?,
            DraftProbs::PointMass => 1.0,
        };
        draft_totals.push(draft_total);
        let draft_prob = match token.probs {
            DraftProbs::Distribution(p) => p[token.id as usize] / draft_total,
            DraftProbs::PointMass => 1.0,
        };
        if draft_prob <= 0.0 {
            return Err(SamplerError::ImpossibleDraft { position, id: token.id });
        }
        let target_prob = target[position][token.id as usize] / target_totals[position];
        entries.push(LedgerEntry {
            position,
            token: token.id,
            draft_prob,
            target_prob,
            acceptance_prob: (target_prob / draft_prob).min(1.0),
            uniform: None,
            verdict: Verdict::NotReached,
        });
    }

    let mut tokens = Vec::with_capacity(draft.len() + 1);
    for (position, token) in draft.iter().enumerate() {
        let u = rng.next_f64();
        let entry = &mut entries[position];
        entry.uniform = Some(u);
        if u < entry.acceptance_prob {
            entry.verdict = Verdict::Accepted;
            tokens.push(token.id);
            continue;
        }
        entry.verdict = Verdict::Rejected;
        let q = target[position];
        let q_total = target_totals[position];
        let residual: Vec<f64> = (0..vocab_size)
            .map(|j| {
                let p_j = match token.probs {
                    DraftProbs::Distribution(p) => p[j] / draft_totals[position],
                    DraftProbs::PointMass => f64::from(u8::from(j == token.id as usize)),
                };
                (q[j] / q_total - p_j).max(0.0)
            })
            .collect();
        let u = rng.next_f64();
        // An all-zero residual only arises through rounding (q == p would always accept).
        let replacement = draw_categorical(&residual, u).or_else(|| draw_categorical(q, u)).unwrap_or(0) as u32;
        tokens.push(replacement);
        let accepted = position;
        return Ok(Ledger { entries, accepted, correction: Some(replacement), bonus: None, tokens });
    }
    let u = rng.next_f64();
    let bonus = draw_categorical(target[draft.len()], u).unwrap_or(0) as u32;
    tokens.push(bonus);
    Ok(Ledger { accepted: draft.len(), entries, correction: None, bonus: Some(bonus), tokens })
}

/// Judges token `id`, drafted deterministically at `position`, against the target's processed
/// distribution there: accepted with probability `target.final_prob(id)`, else replaced by a
/// draw from the target without `id`. Draws one uniform number, and one more on rejection (the
/// order [`speculative_accept`] draws in). Returns the ledger entry and the replacement.
///
/// Greedy targets are deterministic: the draft is accepted exactly when it is the argmax, and
/// replaced by the argmax otherwise.
pub fn judge_point_draft(
    position: usize,
    id: u32,
    target: &Distribution,
    rng: &mut SamplerRng,
) -> (LedgerEntry, Option<u32>) {
    let target_prob = target.final_prob(id);
    let u = rng.next_f64();
    let accepted = u < target_prob;
    let entry = LedgerEntry {
        position,
        token: id,
        draft_prob: 1.0,
        target_prob,
        acceptance_prob: target_prob.min(1.0),
        uniform: Some(u),
        verdict: if accepted { Verdict::Accepted } else { Verdict::Rejected },
    };
    if accepted {
        return (entry, None);
    }
    let u = rng.next_f64();
    // Something else survives whenever `id` was rejected (its probability was below 1); the
    // argmax is the fallback for rounding.
    let replacement = target.draw_excluding(id, u).unwrap_or_else(|| target.argmax());
    (entry, Some(replacement))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SamplingParams, adjust_logits, process};

    fn distribution(logits: &[f32], params: &SamplingParams) -> Distribution {
        let adjusted =
            adjust_logits(logits, params, crate::PenaltyHistory { prompt: &[], generated: &[] }, None).unwrap();
        process(&adjusted, params).unwrap()
    }

    #[test]
    fn judging_a_point_draft_is_the_acceptance_rule() {
        let logits = [1.0, 2.5, 0.3, 2.4, -1.0, 0.9];
        let params = SamplingParams { temperature: 0.8, top_k: 4, ..SamplingParams::default() };
        let target = distribution(&logits, &params);
        let q = target.final_probs();
        for id in 0..logits.len() as u32 {
            for seed in 0..40 {
                let (entry, replacement) = judge_point_draft(0, id, &target, &mut SamplerRng::from_seed(seed));
                let draft = [DraftToken { id, probs: DraftProbs::PointMass }];
                let ledger = speculative_accept(&draft, &[&q, &q], &mut SamplerRng::from_seed(seed)).unwrap();
                assert_eq!(entry.verdict, ledger.entries[0].verdict, "id {id} seed {seed}");
                assert!((entry.target_prob - ledger.entries[0].target_prob).abs() < 1e-12);
                assert_eq!(replacement, ledger.correction, "id {id} seed {seed}");
                if let Some(r) = replacement {
                    assert_ne!(r, id);
                    assert!(target.is_kept(r), "a replacement survives the sampler's cuts");
                }
            }
        }
    }

    #[test]
    fn a_greedy_target_accepts_exactly_its_argmax() {
        let logits = [1.0, 2.5, 0.3, 2.4];
        let target = distribution(&logits, &SamplingParams { temperature: 0.0, ..SamplingParams::default() });
        let mut rng = SamplerRng::from_seed(9);
        for _ in 0..20 {
            assert_eq!(judge_point_draft(0, 1, &target, &mut rng).0.verdict, Verdict::Accepted);
            let (entry, replacement) = judge_point_draft(1, 3, &target, &mut rng);
            assert_eq!((entry.verdict, replacement), (Verdict::Rejected, Some(1)));
        }
    }

    #[test]
    fn identical_draft_and_target_always_accept() {
        let p = [0.2, 0.3, 0.5];
        let mut rng = SamplerRng::from_seed(3);
        let draft = [
            DraftToken { id: 1, probs: DraftProbs::Distribution(&p) },
            DraftToken { id: 2, probs: DraftProbs::Distribution(&p) },
        ];
        let ledger = speculative_accept(&draft, &[&p, &p, &p], &mut rng).unwrap();
        assert_eq!(ledger.accepted, 2);
        assert_eq!(ledger.tokens.len(), 3);
        assert_eq!(&ledger.tokens[..2], &[1, 2]);
        assert!(ledger.bonus.is_some() && ledger.correction.is_none());
        assert!(ledger.entries.iter().all(|e| e.verdict == Verdict::Accepted));
    }

    #[test]
    fn a_token_the_target_forbids_is_always_replaced() {
        let q = [0.0, 0.5, 0.5];
        let mut rng = SamplerRng::from_seed(0);
        let draft =
            [DraftToken { id: 0, probs: DraftProbs::PointMass }, DraftToken { id: 1, probs: DraftProbs::PointMass }];
        for _ in 0..50 {
            let ledger = speculative_accept(&draft, &[&q, &q, &q], &mut rng).unwrap();
            assert_eq!(ledger.accepted, 0);
            assert_eq!(ledger.entries[0].verdict, Verdict::Rejected);
            assert_eq!(ledger.entries[0].acceptance_prob, 0.0);
            assert_eq!(ledger.entries[1].verdict, Verdict::NotReached);
            assert_eq!(ledger.entries[1].uniform, None);
            assert_ne!(ledger.correction, Some(0));
            assert_eq!(ledger.tokens, vec![ledger.correction.unwrap()]);
        }
    }

    #[test]
    fn rejects_malformed_input() {
        let q = [0.5, 0.5];
        let mut rng = SamplerRng::from_seed(0);
        let draft = [DraftToken { id: 0, probs: DraftProbs::PointMass }];
        assert!(speculative_accept(&draft, &[&q], &mut rng).is_err());
        let bad = [0.5, -0.5];
        assert!(speculative_accept(&draft, &[&bad, &q], &mut rng).is_err());
        let zero_draft = [0.0, 1.0];
        let draft = [DraftToken { id: 0, probs: DraftProbs::Distribution(&zero_draft) }];
        assert_eq!(
            speculative_accept(&draft, &[&q, &q], &mut rng).unwrap_err(),
            SamplerError::ImpossibleDraft { position: 0, id: 0 }
        );
        let ledger = speculative_accept(&[], &[&q], &mut rng).unwrap();
        assert_eq!(ledger.tokens.len(), 1);
        assert!(ledger.bonus.is_some());
    }
}
