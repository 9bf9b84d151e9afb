//! Beam search over the real model: one KV cache per live beam (clones share memory until written).

use std::collections::HashMap;

use nucleus_model::{DeviceLogits, KvCache, Logits};
use nucleus_sampler::{BeamSearch, BeamSearchParams, BeamTrace, FinishReason, log_softmax};
use serde::Serialize;

use crate::{Engine, EngineError, Prompt};

/// A beam search request.
#[derive(Debug, Clone, PartialEq)]
pub struct BeamRequest {
    pub prompt: Prompt,
    /// Beams kept at each step (B), >= 1.
    pub beams: usize,
    /// Length penalty α: hypotheses are ranked by `logprob / len^α`.
    pub length_penalty: f64,
    /// Longest hypothesis, >= 1.
    pub max_tokens: usize,
    pub ignore_eos: bool,
}

/// Most beams a request may keep.
pub const MAX_BEAMS: usize = 8;
/// Default beams of `lm.beamSearch`.
pub const DEFAULT_BEAMS: usize = 3;
/// Most tokens a beam search may make, and the default of `lm.beamSearch`.
pub const MAX_BEAM_TOKENS: usize = 64;
pub const DEFAULT_BEAM_TOKENS: usize = 8;

impl BeamRequest {
    /// Checks every parameter; the error names it and its allowed range.
    pub fn validate(&self) -> Result<(), EngineError> {
        if !(1..=MAX_BEAMS).contains(&self.beams) {
            return Err(EngineError::bad_option("beams", format!("1..={MAX_BEAMS}"), self.beams));
        }
        if !(1..=MAX_BEAM_TOKENS).contains(&self.max_tokens) {
            return Err(EngineError::bad_option("max_tokens", format!("1..={MAX_BEAM_TOKENS}"), self.max_tokens));
        }
        if !self.length_penalty.is_finite() {
            return Err(EngineError::bad_option("length_penalty", "a finite number", self.length_penalty));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BeamHypothesis {
    pub tokens: Vec<u32>,
    pub text: String,
    /// Summed log-probability under the model.
    pub logprob: f64,
    /// `logprob / len^α`.
    pub score: f64,
    pub finish_reason: FinishReason,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BeamOutput {
    /// Best first.
    pub hypotheses: Vec<BeamHypothesis>,
    /// Every sequence considered and what became of it, step by step.
    pub trace: BeamTrace,
    pub prompt_tokens: usize,
}

impl Engine {
    /// Deterministic beam search. Each live beam has its own cache sized for the prompt and
    /// `max_tokens`; the engine's own cache is left as it was.
    pub async fn beam_search(&mut self, request: &BeamRequest) -> Result<BeamOutput, EngineError> {
        request.validate()?;
        let prompt = self.prompt_tokens(&request.prompt)?;
        if prompt.is_empty() {
            return Err(EngineError::bad_option("prompt", "text that makes at least one token", "\"\""));
        }
        let capacity = prompt.len() + request.max_tokens;
        if capacity > self.info.context_length {
            return Err(EngineError::ContextOverflow {
                prompt_tokens: prompt.len(),
                context_length: self.info.context_length,
            });
        }
        let eos_token_ids =
            if request.ignore_eos { Vec::new() } else { self.tokenizer.end_of_generation_ids().to_vec() };
        let mut search = BeamSearch::new(BeamSearchParams {
            beam_width: request.beams,
            length_penalty: request.length_penalty,
            max_new_tokens: request.max_tokens,
            eos_token_ids,
        })?;

        // Cache holding prompt + beam tokens, keyed by the beam tokens, for the live beams only.
        let mut prompt_cache = self.model.new_cache(capacity)?;
        let logits = self.model.forward(&prompt, &mut prompt_cache, Logits::Last)?;
        let first_row = log_softmax_row(logits).await?;
        let mut caches: HashMap<Vec<u32>, KvCache> = HashMap::from([(Vec::new(), prompt_cache)]);
        let mut rows_by_tokens: HashMap<Vec<u32>, Vec<f32>> = HashMap::from([(Vec::new(), first_row)]);

        while !search.is_done() {
            let rows: Vec<Vec<f32>> = search
                .live_beams()
                .iter()
                .map(|beam| rows_by_tokens.remove(&beam.tokens).expect("a row for every live beam"))
                .collect();
            search.step(&rows)?;
            if search.is_done() {
                break;
            }
            let mut next_caches = HashMap::new();
            for beam in search.live_beams() {
                let (last, parent) = beam.tokens.split_last().expect("live beams after a step have tokens");
                let mut cache = caches.get(parent).expect("parent cache").try_clone()?;
                let logits = self.model.forward(&[*last], &mut cache, Logits::Last)?;
                rows_by_tokens.insert(beam.tokens.clone(), log_softmax_row(logits).await?);
                next_caches.insert(beam.tokens.clone(), cache);
            }
            caches = next_caches;
        }

        let result = search.finish();
        let hypotheses = result
            .hypotheses
            .into_iter()
            .map(|h| {
                let shown: Vec<u32> = h
                    .tokens
                    .iter()
                    .copied()
                    .filter(|&t| !(h.finish_reason == FinishReason::Eos && self.tokenizer.is_end_of_generation(t)))
                    .collect();
                BeamHypothesis {
                    text: self.tokenizer.decode(&shown),
                    tokens: h.tokens,
                    logprob: h.logprob,
                    score: h.score,
                    finish_reason: h.finish_reason,
                }
            })
            .collect();
        Ok(BeamOutput { hypotheses, trace: result.trace, prompt_tokens: prompt.len() })
    }
}

async fn log_softmax_row(logits: DeviceLogits) -> Result<Vec<f32>, EngineError> {
    let row = logits.into_rows().await?.pop().expect("one row");
    Ok(log_softmax(&row)?.into_iter().map(|v| v as f32).collect())
}
