//! The stateful [`Sampler`]: parameters, token history and the seeded generator.

use crate::distribution::{Distribution, process};
use crate::error::SamplerError;
use crate::explain::{Explanation, explain};
use crate::mask::TokenMask;
use crate::params::SamplingParams;
use crate::penalties::{AdjustedLogits, PenaltyHistory, adjust_logits};
use crate::rng::SamplerRng;

/// The result of one [`Sampler::sample`] call.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleStep {
    /// The chosen token id.
    pub id: u32,
    /// Natural log of the chosen token's probability in the final (truncated, renormalised)
    /// distribution it was drawn from; 0 for greedy.
    pub logprob: f64,
    /// The uniform number in `[0, 1)` the draw used (the visualiser's "dart").
    pub uniform: f64,
    /// The explanation, when `explain_top_n > 0`.
    pub explanation: Option<Explanation>,
}

/// A seeded sampler with the token history its penalties need.
///
/// ```
/// use nucleus_sampler::{Sampler, SamplingParams};
///
/// let params = SamplingParams { temperature: 0.8, top_p: 0.95, seed: 7, ..Default::default() };
/// let mut sampler = Sampler::new(params, 4)?;
/// sampler.set_prompt(&[1, 2])?;
/// let step = sampler.sample(&[1.0, 2.0, 0.5, -1.0], None, 3)?;
/// sampler.accept(step.id)?; // record it for the penalties
/// assert!(step.explanation.is_some());
/// # Ok::<(), nucleus_sampler::SamplerError>(())
/// ```
///
/// `sample` does not record the chosen token: call [`Sampler::accept`] with the token that is
/// actually appended to the sequence (this keeps speculative decoding and beam search, which
/// choose tokens elsewhere, in charge of the history).
///
/// Every `sample` call consumes exactly one 64-bit value from the generator, greedy or not, so
/// the n-th token always uses the n-th random number.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    vocab_size: usize,
    rng: SamplerRng,
    prompt: Vec<u32>,
    generated: Vec<u32>,
}

impl Sampler {
    /// A sampler over a vocabulary of `vocab_size` tokens; validates `params`.
    pub fn new(params: SamplingParams, vocab_size: usize) -> Result<Self, SamplerError> {
        params.validate(vocab_size)?;
        let rng = SamplerRng::from_seed(params.seed);
        Ok(Self { params, vocab_size, rng, prompt: Vec::new(), generated: Vec::new() })
    }

    /// The parameters.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Replaces the parameters (validated) without touching the history or the generator.
    pub fn set_params(&mut self, params: SamplingParams) -> Result<(), SamplerError> {
        params.validate(self.vocab_size)?;
        self.params = params;
        Ok(())
    }

    /// Sets the prompt and clears the generated history.
    pub fn set_prompt(&mut self, prompt: &[u32]) -> Result<(), SamplerError> {
        self.check_ids(prompt)?;
        self.prompt = prompt.to_vec();
        self.generated.clear();
        Ok(())
    }

    /// Records a token appended to the sequence (used by the penalties).
    pub fn accept(&mut self, id: u32) -> Result<(), SamplerError> {
        self.check_ids(&[id])?;
        self.generated.push(id);
        Ok(())
    }

    /// The prompt.
    pub fn prompt(&self) -> &[u32] {
        &self.prompt
    }

    /// The accepted tokens, oldest first.
    pub fn generated(&self) -> &[u32] {
        &self.generated
    }

    /// The history as the penalty functions see it.
    pub fn history(&self) -> PenaltyHistory<'_> {
        PenaltyHistory { prompt: &self.prompt, generated: &self.generated }
    }

    /// Clears prompt and history and restarts the generator from the seed.
    pub fn reset(&mut self) {
        self.prompt.clear();
        self.generated.clear();
        self.rng = SamplerRng::from_seed(self.params.seed);
    }

    /// The generator (for speculative decoding, which draws with the same stream).
    pub fn rng_mut(&mut self) -> &mut SamplerRng {
        &mut self.rng
    }

    /// Stages 1–5 without drawing: the adjusted logits and the processed distribution for
    /// `logits` under the current history. Consumes no random number.
    pub fn distribution(
        &self,
        logits: &[f32],
        mask: Option<&dyn TokenMask>,
    ) -> Result<(AdjustedLogits, Distribution), SamplerError> {
        if logits.len() != self.vocab_size {
            if logits.is_empty() {
                return Err(SamplerError::EmptyLogits);
            }
            return Err(SamplerError::LogitsLength { expected: self.vocab_size, got: logits.len() });
        }
        let adjusted = adjust_logits(logits, &self.params, self.history(), mask)?;
        let dist = process(&adjusted, &self.params)?;
        Ok((adjusted, dist))
    }

    /// Chooses the next token from `logits` (one per vocabulary entry, finite or -inf),
    /// optionally constrained by `mask`, and explains the step when `explain_top_n > 0`
    /// (clamped to [`crate::explain::MAX_EXPLAIN_TOP_N`]).
    pub fn sample(
        &mut self,
        logits: &[f32],
        mask: Option<&dyn TokenMask>,
        explain_top_n: usize,
    ) -> Result<SampleStep, SamplerError> {
        let (adjusted, dist) = self.distribution(logits, mask)?;
        let uniform = self.rng.next_f64();
        let id = dist.draw(uniform);
        let explanation =
            if explain_top_n > 0 { Some(explain(logits, &adjusted, &dist, id, explain_top_n)?) } else { None };
        Ok(SampleStep { id, logprob: dist.final_logprob(id), uniform, explanation })
    }

    fn check_ids(&self, ids: &[u32]) -> Result<(), SamplerError> {
        match ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            Some(&id) => Err(SamplerError::TokenOutOfVocabulary { id, vocab_size: self.vocab_size }),
            None => Ok(()),
        }
    }
}
