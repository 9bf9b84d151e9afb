//! The logit lens of one step: where the answer forms. The context the step saw (the prompt and
//! the tokens generated before it) runs once more, keeping the residual stream after every
//! block; the final norm and the output layer applied to each row say what the model would
//! predict if it stopped at that depth ([`nucleus_model::Model::logit_lens`], which on the fused
//! path reads back only each depth's statistics, its top token and the followed candidates'
//! logits, never the blocks × vocabulary rows). What the KV cache holds of the context is not run
//! again, so inspecting a step of the run just made costs one token's pass.

use nucleus_model::LogitLens;
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
    /// What the block remembers of earlier positions: `"kv-rows"` (attention: keys and values,
    /// a row per position) or `"state"` (a Gated DeltaNet block: a fixed-size state).
    pub memory: &'static str,
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
    /// Bytes read back from the device (on the fused path, each block's few candidates and
    /// statistics, never its whole row).
    pub bytes_read: u64,
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
        let context = self.context_tokens(&request.prompt, &request.generated)?;
        let cached = self.reuse_cache_prefix(&context);
        let lens = self.model.logit_lens(&context[cached..], &mut self.cache, request.candidates).await?;
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
        let token = |id: u32, logit: f32, log_sum_exp: f64| LensToken {
            id,
            text: self.tokenizer.token_text(id),
            prob: (f64::from(logit) - log_sum_exp).exp(),
        };
        let last = lens.layers.last().expect("a model has blocks");
        let layers = lens
            .layers
            .iter()
            .enumerate()
            .map(|(index, layer)| LensLayer {
                memory: crate::attention::memory_of(self.model.config().mixer(index)),
                layer: index + 1,
                probs: layer.tracked.iter().map(|&logit| (f64::from(logit) - layer.log_sum_exp).exp()).collect(),
                top: token(layer.top[0].0, layer.top[0].1, layer.log_sum_exp),
            })
            .collect();
        Ok(LensReport {
            candidates: last
                .top
                .iter()
                .take(candidates)
                .map(|&(id, logit)| token(id, logit, last.log_sum_exp))
                .collect(),
            layers,
            context_tokens,
            cached_tokens,
            bytes_read: lens.bytes_read,
        })
    }
}
