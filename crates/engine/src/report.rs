//! What a generation reports: each step, and the outcome.

use nucleus_sampler::{Candidate, Chosen, Explanation, FinishReason, StageCounts};
use nucleus_tokenizer::Tokenizer;
use serde::Serialize;

use crate::speculative::{DraftReport, SpeculationStats};

/// How far a generation's first step has run its prompt: reported after each chunk of the
/// prefill has run on the device (see [`crate::Engine::step_reporting`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PrefillProgress {
    /// Tokens of the prefill in the KV cache: those it already held, then each chunk's (on the
    /// CPU engine, whose prompt runs in one pass, the pass's tokens times the share of its blocks
    /// done).
    pub done: usize,
    /// The prefill's tokens: the prompt's, then the request's forced tokens.
    pub total: usize,
    /// Of those, the tokens the cache already held (not run again).
    pub cached: usize,
}

/// One candidate token of a step, by the model's raw logit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopCandidate {
    pub id: u32,
    pub text: String,
    /// The model's raw logit.
    pub logit: f32,
    /// Its log-probability under the model's raw distribution (softmax of the raw logits).
    pub logprob: f64,
}

/// A candidate of the sampler's explanation, with its text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExplainedCandidate {
    pub text: String,
    #[serde(flatten)]
    pub candidate: Candidate,
}

/// The sampler's [`Explanation`] of a step, candidates with their text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepExplanation {
    pub candidates: Vec<ExplainedCandidate>,
    pub entropy: f64,
    pub mass_outside: f64,
    pub kept_count: usize,
    pub kept_mass: f64,
    pub temperature: f64,
    pub stages: StageCounts,
    pub chosen: Chosen,
}

impl StepExplanation {
    pub(crate) fn new(explanation: Explanation, tokenizer: &Tokenizer) -> Self {
        let Explanation { candidates, entropy, mass_outside, kept_count, kept_mass, temperature, stages, chosen } =
            explanation;
        let candidates = candidates
            .into_iter()
            .map(|candidate| ExplainedCandidate { text: tokenizer.token_text(candidate.id), candidate })
            .collect();
        Self { candidates, entropy, mass_outside, kept_count, kept_mass, temperature, stages, chosen }
    }
}

/// One generated token.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    pub index: usize,
    pub id: u32,
    /// The token's own text (its bytes, lossily decoded: a token that holds part of a UTF-8
    /// character shows U+FFFD). For display of token boundaries; `text` is what to print.
    pub token: String,
    /// Text released by this token: stop-safe (text that could begin a stop string is held back)
    /// and UTF-8-safe (a partial character waits for the next token). May be empty.
    pub text: String,
    /// The chosen token's log-probability under the model's raw distribution.
    pub logprob: f64,
    /// The `top_logprobs` best candidates by raw logit, best first (ties to the lower id).
    pub top: Vec<TopCandidate>,
    /// The sampler's account of the step, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<StepExplanation>,
    /// Set on the last step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// Set on the first step of a speculative verification pass: the draft it judged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draft: Option<DraftReport>,
    /// Set when the request has a response format: what its constraint did at this step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constraint: Option<MaskReport>,
    /// The whole raw logits row, when the request asked for it.
    #[serde(skip)]
    pub logits: Option<Vec<f32>>,
}

/// What a step's constraint allowed. `top` (the model's own candidates) is left as the model
/// gave it: `forbidden` says which of them the constraint removed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MaskReport {
    /// Ids of the step's `top` candidates the constraint forbade, in `top`'s order.
    pub forbidden: Vec<u32>,
    /// Tokens the constraint allowed at this step.
    pub allowed: usize,
    /// The model's raw probability on the tokens the constraint forbade (the mass it removed):
    /// exact when the step read its whole row, or on the GPU decode tail when the mask was the
    /// step's only adjustment at temperature 1 (the masked row's statistics against the raw
    /// row's); `None` otherwise.
    pub removed_mass: Option<f64>,
    /// The allowed set, one bit per token (`TokenSet::to_u32_words`), when the step returns its
    /// whole row (`return_logits`): with it a what-if re-applies the mask exactly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_words: Option<Vec<u32>>,
}

impl MaskReport {
    /// The report of `allowed` for a step whose raw candidates are `top`; the set itself goes
    /// with it when `with_set` (the step returns its row).
    pub(crate) fn new(
        allowed: &nucleus_sampler::TokenSet,
        top: &[TopCandidate],
        removed_mass: Option<f64>,
        with_set: bool,
    ) -> Self {
        Self {
            forbidden: top.iter().filter(|c| !allowed.contains(c.id)).map(|c| c.id).collect(),
            allowed: allowed.count(),
            removed_mass: removed_mass.map(|mass| mass.clamp(0.0, 1.0)),
            allowed_words: with_set.then(|| allowed.to_u32_words()),
        }
    }

    /// The raw probability outside `allowed`, from the whole row's raw log-probabilities.
    pub(crate) fn removed_from_row(allowed: &nucleus_sampler::TokenSet, raw_logprobs: &[f64]) -> f64 {
        1.0 - allowed.iter().map(|id| raw_logprobs[id as usize].exp()).sum::<f64>()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Output tokens, forced ones included.
    pub completion_tokens: usize,
    /// Prompt tokens found in the cache from an earlier generation and not run again.
    pub cached_prompt_tokens: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Timing {
    pub prefill_ms: f64,
    pub prefill_tokens_per_s: f64,
    /// From the start of the generation to the first token.
    pub ttft_ms: f64,
    pub decode_ms: f64,
    /// Decode steps per second (tokens after the first).
    pub decode_tokens_per_s: f64,
}

/// What the decode steps read back from the device.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Transfer {
    /// Bytes read back from the device over all steps (none on the CPU engine, whose rows are in memory).
    pub readback_bytes: usize,
    /// Steps finished on the GPU decode tail (candidates only).
    pub tail_steps: usize,
    /// Steps that read the whole logits row.
    pub full_read_steps: usize,
}

impl Transfer {
    /// Bytes read back per generated token.
    pub fn bytes_per_token(&self) -> f64 {
        let steps = self.tail_steps + self.full_read_steps;
        if steps == 0 { 0.0 } else { self.readback_bytes as f64 / steps as f64 }
    }
}

/// How a generation ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GenerationResult {
    pub text: String,
    /// `None` while running, or when [`Generation::stop`] ended it early (an abort).
    pub finish_reason: Option<FinishReason>,
    pub usage: Usage,
    pub timing: Timing,
    pub transfer: Transfer,
    /// Forward passes after the prefill and what speculative decoding did in them.
    pub speculation: SpeculationStats,
}
