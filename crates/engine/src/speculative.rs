//! Speculative decoding by prompt lookup: no draft model. The draft for the next tokens is what
//! followed the latest earlier occurrence of the context's last n-gram (code, a quoted passage, a
//! list that repeats a pattern: the context often says what comes next). The engine runs the
//! pending token and the draft in one pass ([`nucleus_model::Logits::All`]), judges each drafted
//! token with the sampler's acceptance rule ([`nucleus_sampler::judge_point_draft`]) and rolls the
//! KV cache back past the first rejected one; see `generation::verify`.
//!
//! The output is the target's exactly: identical tokens for greedy decoding, the same
//! distribution for sampling (the acceptance rule's guarantee). What speculation changes is the
//! number of passes: a pass that accepts `a` drafted tokens yields `a + 1`.

use nucleus_model::MAX_LOGIT_ROWS;
use nucleus_sampler::Verdict;
use serde::{Deserialize, Serialize};

use crate::EngineError;

/// Default most tokens drafted per pass.
pub const DEFAULT_MAX_DRAFT: usize = 4;
/// Most tokens drafted per pass: the pass computes logits for the pending token and each drafted
/// one, at most [`MAX_LOGIT_ROWS`] rows.
pub const MAX_DRAFT: usize = MAX_LOGIT_ROWS - 1;
/// Default longest n-gram looked up.
pub const DEFAULT_LOOKUP_NGRAM: usize = 3;
/// Longest n-gram a request may ask to look up.
pub const MAX_LOOKUP_NGRAM: usize = 16;

/// Prompt-lookup drafting's settings (JS `speculative: { lookup: { maxDraft, ngram } }`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct PromptLookup {
    /// Most tokens drafted per pass, 1..=[`MAX_DRAFT`].
    pub max_draft: usize,
    /// Longest n-gram matched, 1..=[`MAX_LOOKUP_NGRAM`]; shorter ones are tried when it is not
    /// found, down to one token.
    pub ngram: usize,
}

impl Default for PromptLookup {
    fn default() -> Self {
        Self { max_draft: DEFAULT_MAX_DRAFT, ngram: DEFAULT_LOOKUP_NGRAM }
    }
}

impl PromptLookup {
    /// Checks both settings against their ranges.
    pub fn validate(&self) -> Result<(), EngineError> {
        if !(1..=MAX_DRAFT).contains(&self.max_draft) {
            return Err(EngineError::bad_option(
                "speculative.lookup.max_draft",
                format!("1..={MAX_DRAFT}"),
                self.max_draft,
            ));
        }
        if !(1..=MAX_LOOKUP_NGRAM).contains(&self.ngram) {
            return Err(EngineError::bad_option(
                "speculative.lookup.ngram",
                format!("1..={MAX_LOOKUP_NGRAM}"),
                self.ngram,
            ));
        }
        Ok(())
    }

    /// The draft after `context`: for n from `ngram` down to 1, the latest earlier occurrence of
    /// the context's last n tokens, and up to `limit` (at most `max_draft`) tokens that followed
    /// it. Empty when no n-gram recurs.
    pub fn draft(&self, context: &[u32], limit: usize) -> Vec<u32> {
        let limit = limit.min(self.max_draft);
        if limit == 0 {
            return Vec::new();
        }
        for n in (1..=self.ngram.min(context.len().saturating_sub(1))).rev() {
            let tail = &context[context.len() - n..];
            // Occurrences that start before the tail and have a token after them.
            if let Some(start) = (0..context.len() - n).rev().find(|&i| &context[i..i + n] == tail) {
                let from = start + n;
                return context[from..(from + limit).min(context.len())].to_vec();
            }
        }
        Vec::new()
    }
}

/// One drafted token as a verification pass judged it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DraftedToken {
    pub id: u32,
    pub text: String,
    /// Its probability under the sampler's final distribution at its position (the acceptance
    /// probability of a deterministic draft).
    pub target_prob: f64,
    pub verdict: Verdict,
}

/// A verification pass: what was drafted and what became of it. Reported with the first step
/// the pass produced; the pass's steps are its accepted tokens, then the replacement of the
/// first rejected one or, when all were accepted, one more token from the last position.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DraftReport {
    pub tokens: Vec<DraftedToken>,
    /// How many drafted tokens were accepted (a prefix).
    pub accepted: usize,
}

/// What speculation did over a generation's decode steps.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct SpeculationStats {
    /// Forward passes after the prefill, verification passes included.
    pub decode_passes: usize,
    /// Of those, passes that verified a draft.
    pub verify_passes: usize,
    pub drafted_tokens: usize,
    pub accepted_tokens: usize,
    /// `accepted_tokens / drafted_tokens` (0 without drafts).
    pub acceptance_rate: f64,
    /// Tokens decoded per forward pass after the prefill (1 without speculation).
    pub tokens_per_pass: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_draft_follows_the_latest_longest_match() {
        let lookup = PromptLookup { max_draft: 3, ngram: 2 };
        // "7 8" recurs at 1 and 5: the latest (5) is followed by 1 2.
        let context = [0, 7, 8, 9, 4, 7, 8, 1, 2, 3, 7, 8];
        assert_eq!(lookup.draft(&context, 10), vec![1, 2, 3]);
        assert_eq!(lookup.draft(&context, 2), vec![1, 2]);
        // No bigram "5 8" before: falls back to the unigram "8" (latest at 6).
        let context = [8, 3, 4, 8, 6, 5, 8];
        assert_eq!(lookup.draft(&context, 4), vec![6, 5, 8]);
        // A draft may run to the end of the context.
        assert_eq!(PromptLookup { max_draft: 4, ngram: 1 }.draft(&[1, 2, 1], 4), vec![2, 1]);
        // Nothing recurs.
        assert!(lookup.draft(&[1, 2, 3], 4).is_empty());
        assert!(lookup.draft(&[1], 4).is_empty());
        assert!(lookup.draft(&[1, 1], 0).is_empty());
    }

    #[test]
    fn settings_are_checked() {
        assert!(PromptLookup::default().validate().is_ok());
        assert!(PromptLookup { max_draft: 0, ..PromptLookup::default() }.validate().is_err());
        assert!(PromptLookup { max_draft: MAX_DRAFT + 1, ..PromptLookup::default() }.validate().is_err());
        assert!(PromptLookup { ngram: 0, ..PromptLookup::default() }.validate().is_err());
    }
}
