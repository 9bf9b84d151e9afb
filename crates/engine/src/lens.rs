//! The logit lens of one step: where the answer forms. The context the step saw (the prompt and
//! the tokens generated before it) runs once more, keeping the residual stream after every
//! block; the final norm and the output layer applied to each row say what the model would
//! predict if it stopped at that depth ([`nucleus_model::Model::logit_lens`]). What the KV cache
//! holds of the context is not run again, so inspecting a step of the run just made costs one
//! token's pass.

use nucleus_model::LogitLens;
use nucleus_sampler::log_softmax;
use serde::Serialize;

use crate::{Engine, EngineError, Prompt};

/// Most candidates (the heatmap's columns) a lens reports.
pub const MAX_LENS_CANDIDATES: usize = 64;
/// Default candidates of a lens.
pub const DEFAULT_LENS_CANDIDATES: usize = 10;

/// The step to look into: the prompt and the tokens generated before it.
#[derive(Debug, Clone, PartialEq)]
pub struct LensRequest {
    pub prompt: Prompt,
    /// The tokens generated before the step (a run's first `index` ids).
    pub generated: Vec<u32>,
    /// The candidates followed through the layers: the step's own top ones, 1..=64.
    pub candidates: usize,
}

/// A token of a lens, with its probability at one layer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LensToken {
    pub id: u32,
    pub text: String,
    /// Softmax over the whole vocabulary at T = 1.
    pub prob: f64,
}

/// One layer's row of the heatmap.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LensLayer {
    /// The block after which the residual was read, 1-based (the last is the model's output).
    pub layer: usize,
    /// Each of the report's candidates' probability at this depth, in their order.
    pub probs: Vec<f64>,
    /// This depth's own most probable token.
    pub top: LensToken,
}

/// What the model would predict after each block, for one step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LensReport {
    /// The step's top candidates by the last layer (the step's own logits), best first.
    pub candidates: Vec<LensToken>,
    /// One row per block, first to last.
    pub layers: Vec<LensLayer>,
    /// Tokens of the context, and those the KV cache already held (not run again).
    pub context_tokens: usize,
    pub cached_tokens: usize,
}

impl LensRequest {
    pub fn validate(&self, vocab_size: usize) -> Result<(), EngineError> {
        if !(1..=MAX_LENS_CANDIDATES).contains(&self.candidates) {
            return Err(EngineError::bad_option("candidates", format!("1..={MAX_LENS_CANDIDATES}"), self.candidates));
        }
        if let Some(&id) = self.generated.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(EngineError::bad_option("generated", format!("token ids below {vocab_size}"), id));
        }
        Ok(())
    }
}

impl Engine {
    /// The logit lens of the step after `request`'s context. Uses (and updates) the engine's KV
    /// cache like a generation: a generation in progress is then refused with `busy`.
    pub async fn logit_lens(&mut self, request: &LensRequest) -> Result<LensReport, EngineError> {
        request.validate(self.info.vocab_size)?;
        let context = [self.prompt_tokens(&request.prompt)?, request.generated.clone()].concat();
        if context.is_empty() {
            return Err(EngineError::bad_option("prompt", "text that makes at least one token", "\"\""));
        }
        if context.len() > self.cache.capacity() {
            return Err(EngineError::ContextOverflow {
                prompt_tokens: context.len(),
                context_length: self.cache.capacity(),
            });
        }
        let cached = self.reuse_cache_prefix(&context);
        let lens = self.model.logit_lens(&context[cached..], &mut self.cache).await?;
        self.cached_tokens.extend_from_slice(&context[cached..]);
        self.lens_report(&lens, request.candidates, context.len(), cached)
    }

    fn lens_report(
        &self,
        lens: &LogitLens,
        candidates: usize,
        context_tokens: usize,
        cached_tokens: usize,
    ) -> Result<LensReport, EngineError> {
        let probs: Vec<Vec<f64>> = lens
            .logits
            .iter()
            .map(|row| Ok(log_softmax(row)?.into_iter().map(f64::exp).collect()))
            .collect::<Result<_, EngineError>>()?;
        let token = |id: usize, row: &[f64]| LensToken {
            id: id as u32,
            text: self.tokenizer.token_text(id as u32),
            prob: row[id],
        };
        let last = probs.last().expect("a model has blocks");
        let mut order: Vec<usize> = (0..last.len()).collect();
        // Best first; ties to the lower id, as the sampler orders candidates.
        order.sort_by(|&a, &b| last[b].total_cmp(&last[a]).then(a.cmp(&b)));
        order.truncate(candidates);
        let layers = probs
            .iter()
            .enumerate()
            .map(|(index, row)| {
                let best = (0..row.len()).fold(0, |best, id| if row[id] > row[best] { id } else { best });
                LensLayer { layer: index + 1, probs: order.iter().map(|&id| row[id]).collect(), top: token(best, row) }
            })
            .collect();
        Ok(LensReport {
            candidates: order.iter().map(|&id| token(id, last)).collect(),
            layers,
            context_tokens,
            cached_tokens,
        })
    }
}
