//! The step decision: sample the next token on the GPU decode tail when it settles the step,
//! else from the whole logits row read back, and report the model's raw candidates either way.

use nucleus_kernels::TailRequest;
use nucleus_kernels::{LogitAdjustments, RawRow};
use nucleus_model::DeviceLogits;
use nucleus_sampler::{CandidateSet, LogSoftmax, SampleStep, TokenMask, TokenSet, top_k_ids};
use nucleus_tokenizer::Tokenizer;

use super::GenerationState;
use crate::{DECODE_TAIL_CANDIDATES, Engine, EngineError, MAX_TOP_LOGPROBS, MaskReport, TopCandidate};

impl GenerationState {
    /// Whether this step can end on the GPU: a wgpu device, no explanation and no logits asked
    /// for (both need the whole row) and no DRY (it has no per-token form). Bias and penalties
    /// are applied by the tail.
    ///
    /// Returns the temperature for the tail's statistics, `None` when the step cannot use it.
    fn decode_tail_temperature(&self, engine: &Engine) -> Option<f32> {
        let usable = engine.decode_tail
            && self.request.explain_top_n == 0
            && !self.request.return_logits
            && self.sampler.gpu_path_available();
        let temperature = self.sampler.params().temperature;
        let single = temperature as f32;
        if !usable {
            None
        } else if temperature == 0.0 {
            // Greedy ignores the statistics: take them at 1, where they give the raw log-probabilities.
            Some(1.0)
        } else if single.is_normal() && (1.0 / single).is_finite() {
            Some(single)
        } else {
            // The kernels need 1/T finite in f32: an extreme temperature reads the whole row.
            None
        }
    }

    /// Samples the next token from `logits` (still on the device): on the GPU decode tail when it
    /// settles the step, else from the whole row read back.
    pub(super) async fn choose(
        &mut self,
        engine: &Engine,
        logits: DeviceLogits,
        allowed: Option<&TokenSet>,
    ) -> Result<Choice, EngineError> {
        let tokenizer = &engine.tokenizer;
        if let Some(temperature) = self.decode_tail_temperature(engine) {
            let mut adjustments = LogitAdjustments::from_entries(self.sampler.gpu_adjustments()?);
            if let Some(allowed) = allowed {
                adjustments = adjustments.with_allow_mask(allowed.to_u32_words());
            }
            let k = self.request.top_logprobs.clamp(DECODE_TAIL_CANDIDATES, MAX_TOP_LOGPROBS);
            // Reported candidates and log-probabilities are the model's raw ones (temperature 1, no
            // bias or penalties). At temperature 1 with nothing to adjust, the tail's own are; else
            // the raw row's statistics (and its top list, if adjusted) come in the same read.
            let raw_top_k = if temperature == 1.0 && adjustments.is_empty() {
                None
            } else if adjustments.is_empty() {
                Some(0)
            } else {
                Some(self.request.top_logprobs)
            };
            let request = TailRequest { adjustments: &adjustments, temperature, k, raw_top_k };
            let (tail, raw) = logits.decode_tail(&request).await?;
            let raw = match raw {
                Some(raw) => {
                    self.transfer.readback_bytes += raw.stats.bytes_read + raw.top.as_ref().map_or(0, |t| t.bytes_read);
                    raw
                }
                None => RawRow { stats: tail.stats(), top: None },
            };
            self.transfer.readback_bytes += tail.bytes_read;
            let set = CandidateSet {
                ids: &tail.ids,
                adjusted_logits: &tail.logits,
                max: tail.max,
                sum_exp: tail.sum_exp,
                vocab_size: engine.info.vocab_size,
            };
            if let Some(sampled) = self.sampler.sample_candidates(&set)? {
                self.transfer.tail_steps += 1;
                let (top_ids, top_logits) = match &raw.top {
                    Some(raw_top) => (&raw_top.ids, &raw_top.logits),
                    None => (&tail.ids, &tail.logits),
                };
                let top = top_ids
                    .iter()
                    .zip(top_logits.iter())
                    .take(self.request.top_logprobs)
                    .map(|(&id, &logit)| TopCandidate {
                        id,
                        text: tokenizer.token_text(id),
                        logit,
                        logprob: raw.stats.log_probability(logit),
                    })
                    .collect::<Vec<_>>();
                let chosen = tail.ids.iter().position(|&c| c == sampled.id).expect("the kept tokens are candidates");
                let raw_logit = match adjustments.entries().iter().find(|a| a.id == sampled.id) {
                    Some(adjustment) => adjustment.invert(tail.logits[chosen]),
                    None => tail.logits[chosen],
                };
                let logprob = raw.stats.log_probability(raw_logit);
                // With the mask the only adjustment at temperature 1, the tail's statistics are
                // the masked row's and `raw`'s the whole row's: the kept mass is their ratio.
                let removed_mass = (temperature == 1.0 && adjustments.entries().is_empty())
                    .then(|| 1.0 - (tail.stats().scaled_log_sum_exp() - raw.stats.scaled_log_sum_exp()).exp());
                let constraint = allowed.map(|allowed| MaskReport::new(allowed, &top, removed_mass, false));
                return Ok(Choice { sampled, top, logprob, row: None, constraint });
            }
        }
        let in_memory = logits.in_memory();
        let row = logits.into_rows().await?.pop().expect("one row");
        if !in_memory {
            self.transfer.readback_bytes += row.len() * std::mem::size_of::<f32>();
        }
        self.transfer.full_read_steps += 1;
        let mask = allowed.map(|allowed| allowed as &dyn TokenMask);
        // The draw and the row's normaliser (every exponential of the row, for the log-probabilities
        // the step reports) at once, on two of the CPU engine's threads where it has them.
        let explain_top_n = self.request.explain_top_n;
        let (sampled, norm) =
            nucleus_cpu::alongside(|| self.sampler.sample(&row, mask, explain_top_n), || LogSoftmax::of(&row));
        self.whole_row_choice(sampled?, row, norm?, allowed, tokenizer)
    }

    /// The step's [`Choice`] of `sampled` from the whole raw `row` and its normaliser `norm`
    /// (`LogSoftmax::of(&row)`): its top candidates, the chosen token's raw log-probability, and
    /// what the constraint (`allowed`) removed.
    pub(super) fn whole_row_choice(
        &self,
        sampled: SampleStep,
        row: Vec<f32>,
        norm: LogSoftmax,
        allowed: Option<&TokenSet>,
        tokenizer: &Tokenizer,
    ) -> Result<Choice, EngineError> {
        // The few log-probabilities a step reports, from the row's normaliser: the whole row of
        // them (2 MB a step for Gemma 3's 262,144) only where a constraint's removed mass is
        // summed, from the same normaliser.
        let top = top_k_ids(&row, self.request.top_logprobs)
            .into_iter()
            .map(|c| TopCandidate {
                id: c,
                text: tokenizer.token_text(c),
                logit: row[c as usize],
                logprob: norm.at(row[c as usize]),
            })
            .collect::<Vec<_>>();
        let constraint = match allowed {
            Some(allowed) => {
                let raw_logprobs: Vec<f64> = row.iter().map(|&z| norm.at(z)).collect();
                let removed_mass = MaskReport::removed_from_row(allowed, &raw_logprobs);
                Some(MaskReport::new(allowed, &top, Some(removed_mass), self.request.return_logits))
            }
            None => None,
        };
        let logprob = norm.at(row[sampled.id as usize]);
        let row = self.request.return_logits.then_some(row);
        Ok(Choice { sampled, top, logprob, row, constraint })
    }
}

/// The outcome of sampling one step.
pub(super) struct Choice {
    pub(super) sampled: SampleStep,
    pub(super) top: Vec<TopCandidate>,
    /// The chosen token's log-probability under the raw model distribution.
    pub(super) logprob: f64,
    /// The whole raw row, when the request asked for it.
    pub(super) row: Option<Vec<f32>>,
    /// What the response format's constraint allowed, when there is one.
    pub(super) constraint: Option<MaskReport>,
}
