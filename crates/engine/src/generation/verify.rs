//! A speculative decode step: draft by prompt lookup, run the pending token and the draft in
//! one pass, judge each drafted token against the sampler's distribution at its position, keep
//! the accepted prefix and one more token, and roll the KV cache back past the rest.
//!
//! Position `i` of the pass predicts the token after the pending one and the first `i` drafted
//! ones; it is judged with the sampler's history holding exactly those, so penalties see the
//! sequence plain decoding would have seen. The pass reads every row back whole.

use nucleus_sampler::{LogSoftmax, SampleStep, TokenMask, TokenSet, Verdict, explain, judge_point_draft};

use super::GenerationState;
use crate::{DraftReport, DraftedToken, Engine, EngineError, SpeculationStats, Step};

impl GenerationState {
    /// The draft for the next pass (empty: decode one token): prompt lookup over the context,
    /// no longer than the tokens still to generate after the pass's own one and the room in the
    /// context.
    pub(super) fn draft(&self, engine: &Engine) -> Vec<u32> {
        let Some(lookup) = self.request.speculative else {
            return Vec::new();
        };
        let context = [self.prompt_tokens.as_slice(), &self.generated].concat();
        // The pass runs the pending token and the draft; the last token it yields runs next.
        let room = engine.cache.capacity().saturating_sub(context.len() + 1);
        let remaining = self.request.max_tokens.saturating_sub(self.generated.len() + 1);
        lookup.draft(&context, room.min(remaining))
    }

    /// Runs `pending` and `draft` in one pass and returns the steps it yields (at least one);
    /// the first carries the pass's [`DraftReport`].
    pub(super) async fn verify(
        &mut self,
        engine: &mut Engine,
        pending: u32,
        draft: &[u32],
        mut allowed: Option<TokenSet>,
    ) -> Result<Vec<Step>, EngineError> {
        let start = engine.cached_tokens.len();
        let logits = engine.forward_all(&[&[pending], draft].concat())?;
        let in_memory = logits.in_memory();
        let rows = logits.into_rows().await?;
        if !in_memory {
            self.transfer.readback_bytes += rows.iter().map(|row| row.len() * size_of::<f32>()).sum::<usize>();
        }
        self.speculation.verify_passes += 1;
        self.speculation.drafted_tokens += draft.len();

        let mut judged = Vec::with_capacity(draft.len());
        let mut steps = Vec::with_capacity(rows.len());
        for (position, row) in rows.into_iter().enumerate() {
            // The constraint's mask here: the pass's first is known; each later one follows the
            // drafts accepted before it (a completed constraint ends the pass).
            if position > 0 {
                allowed = self.allowed_tokens()?;
                if self.finish_reason.is_some() {
                    break;
                }
            }
            let mask = allowed.as_ref().map(|allowed| allowed as &dyn TokenMask);
            // The distribution and the row's normaliser at once, as a decode step's (`choose`).
            let (distribution, norm) =
                nucleus_cpu::alongside(|| self.sampler.distribution(&row, mask), || LogSoftmax::of(&row));
            let (adjusted, dist) = distribution?;
            let (id, uniform, accepted) = match draft.get(position) {
                Some(&drafted) => {
                    let (entry, replacement) = judge_point_draft(position, drafted, &dist, self.sampler.rng_mut());
                    let uniform = entry.uniform.unwrap_or_default();
                    judged.push(entry);
                    (replacement.unwrap_or(drafted), uniform, replacement.is_none())
                }
                // Every drafted token was accepted: the last position gives one more token.
                None => {
                    let uniform = self.sampler.rng_mut().next_f64();
                    (dist.draw(uniform), uniform, false)
                }
            };
            let explanation = match self.request.explain_top_n {
                0 => None,
                n => Some(explain(&row, &adjusted, &dist, id, n)?),
            };
            let sampled = SampleStep { id, logprob: dist.final_logprob(id), uniform, explanation };
            let choice = self.whole_row_choice(sampled, row, norm?, allowed.as_ref(), &engine.tokenizer)?;
            self.transfer.full_read_steps += 1;
            steps.push(self.emit(engine, choice)?);
            if accepted {
                self.speculation.accepted_tokens += 1;
            }
            if !accepted || self.finish_reason.is_some() {
                break;
            }
        }
        let accepted = judged.iter().take_while(|entry| entry.verdict == Verdict::Accepted).count();
        // The pending token and the accepted drafts keep their keys and values.
        engine.rollback_cache(start + 1 + accepted)?;

        let tokens = draft
            .iter()
            .enumerate()
            .map(|(position, &id)| {
                let entry = judged.get(position);
                DraftedToken {
                    id,
                    text: engine.tokenizer.token_text(id),
                    target_prob: entry.map_or(0.0, |e| e.target_prob),
                    verdict: entry.map_or(Verdict::NotReached, |e| e.verdict),
                }
            })
            .collect();
        if let Some(first) = steps.first_mut() {
            first.draft = Some(DraftReport { tokens, accepted });
        }
        Ok(steps)
    }

    /// The generation's [`SpeculationStats`], with its rates over `decode_tokens`.
    pub(super) fn speculation_stats(&self, decode_tokens: f64) -> SpeculationStats {
        let stats = self.speculation;
        let ratio = |n: f64, d: usize| if d == 0 { 0.0 } else { n / d as f64 };
        SpeculationStats {
            acceptance_rate: ratio(stats.accepted_tokens as f64, stats.drafted_tokens),
            tokens_per_pass: ratio(decode_tokens, stats.decode_passes),
            ..stats
        }
    }
}
