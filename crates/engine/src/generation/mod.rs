//! The state of one generation and its step: run the model on the pending token (or the
//! prompt), choose the next token ([`step`]), stream its text through the stop strings. With
//! speculation, a decode step runs the pending token and a draft in one pass and judges the
//! draft ([`verify`]); the tokens it yields are queued and returned one step at a time.

mod step;
mod verify;

use std::collections::VecDeque;

use nucleus_model::DeviceLogits;
use nucleus_sampler::{FinishReason, Sampler, StopTracker, TokenSet};
use nucleus_tokenizer::Tokenizer;

use crate::constraint::Constraint;
use crate::{
    Engine, EngineError, GenerateRequest, GenerationResult, PrefillProgress, SpeculationStats, Step, StepExplanation,
    Stopwatch, Timing, Transfer, Usage, prefill_chunk_len,
};
use step::Choice;

/// The state of a generation, owned by its caller; stepped by [`Engine::step`].
pub struct GenerationState {
    request: GenerateRequest,
    prompt_tokens: Vec<u32>,
    sampler: Sampler,
    stops: StopTracker,
    /// The response format's grammar, advanced by every output token.
    constraint: Option<Constraint>,
    /// The last chosen (or forced) token, not yet run through the model.
    pending: Option<u32>,
    /// The first step (the prefill) has run.
    started: bool,
    generated: Vec<u32>,
    text: String,
    finish_reason: Option<FinishReason>,
    /// Ended by [`GenerationState::stop`] before it finished.
    stopped: bool,
    /// Tokens of the prefill's context (the prompt, then any forced tokens) the cache held.
    cached_context_tokens: usize,
    prefill_ms: f64,
    decode_ms: f64,
    transfer: Transfer,
    /// Steps a verification pass produced that were not returned yet.
    queued: VecDeque<Step>,
    /// Decode passes and drafts (the rates are filled in by [`GenerationState::result`]).
    speculation: SpeculationStats,
    /// Positions of the context where the prefill keeps the recurrent state (a model with
    /// recurrent blocks; `Engine::state_checkpoints`), besides before its last token.
    state_checkpoints: Vec<usize>,
}

impl GenerationState {
    /// A generation of `request` from `prompt_tokens` (checked by the caller), nothing run yet;
    /// the request's forced tokens are taken as generated (they may finish it already).
    pub(crate) fn new(
        request: GenerateRequest,
        prompt_tokens: Vec<u32>,
        sampler: Sampler,
        stops: StopTracker,
        constraint: Option<Constraint>,
        tokenizer: &Tokenizer,
    ) -> Result<Self, EngineError> {
        let forced = request.forced_tokens.clone();
        let mut state = Self {
            request,
            prompt_tokens,
            sampler,
            stops,
            constraint,
            pending: None,
            started: false,
            generated: Vec::new(),
            text: String::new(),
            finish_reason: None,
            stopped: false,
            cached_context_tokens: 0,
            prefill_ms: 0.0,
            decode_ms: 0.0,
            transfer: Transfer::default(),
            queued: VecDeque::new(),
            speculation: SpeculationStats::default(),
            state_checkpoints: Vec::new(),
        };
        for id in forced {
            if state.finish_reason.is_some() {
                break;
            }
            if let Some(allowed) = state.allowed_tokens()?
                && !allowed.contains(id)
            {
                return Err(EngineError::bad_option("forced_tokens", "tokens the response format allows", id));
            }
            state.take_token(id, tokenizer)?;
        }
        Ok(state)
    }

    /// Makes the prefill keep the recurrent state at `positions` of the context.
    pub(crate) fn keep_state_at(&mut self, positions: Vec<usize>) {
        self.state_checkpoints = positions;
    }

    /// Takes `id` as the next output token: the sampler's history, the stop conditions, the
    /// text; returns the text it releases. Sets the finish reason if it ends the generation,
    /// else makes it the pending token.
    fn take_token(&mut self, id: u32, tokenizer: &Tokenizer) -> Result<String, EngineError> {
        self.sampler.accept(id)?;
        let mut complete = false;
        if let Some(constraint) = &mut self.constraint {
            constraint.accept(id)?;
            complete = constraint.is_complete();
        }
        self.generated.push(id);
        let output = self.stops.push_token(id, tokenizer.token_bytes(id));
        let mut text = output.text;
        self.finish_reason = match output.finish {
            // The constraint ended the output (an end token it allowed, or nothing may follow).
            None | Some(FinishReason::Eos) if complete => Some(FinishReason::Complete),
            finish => finish,
        };
        if matches!(self.finish_reason, Some(FinishReason::Length | FinishReason::Complete)) {
            text.push_str(&self.stops.flush());
        }
        self.text.push_str(&text);
        self.pending = self.finish_reason.is_none().then_some(id);
        Ok(text)
    }

    /// The tokens the response format allows next (`None` without one). A constraint that allows
    /// nothing more is complete: the generation finishes with [`FinishReason::Complete`] and
    /// this returns the empty set.
    fn allowed_tokens(&mut self) -> Result<Option<TokenSet>, EngineError> {
        let Some(constraint) = &mut self.constraint else { return Ok(None) };
        match constraint.allowed()? {
            Some(allowed) => Ok(Some(allowed)),
            None => {
                self.finish_reason = Some(FinishReason::Complete);
                self.pending = None;
                let rest = self.stops.flush();
                self.text.push_str(&rest);
                Ok(Some(TokenSet::empty(self.sampler.vocab_size())))
            }
        }
    }

    pub fn prompt_tokens(&self) -> &[u32] {
        &self.prompt_tokens
    }

    pub fn generated_tokens(&self) -> &[u32] {
        &self.generated
    }

    /// Finished by itself or stopped, and every step returned.
    pub fn is_finished(&self) -> bool {
        (self.finish_reason.is_some() || self.stopped) && self.queued.is_empty()
    }

    /// Runs one step; a first step reports its prefill to `on_prefill` when there is one.
    pub(crate) async fn next_step(
        &mut self,
        engine: &mut Engine,
        mut on_prefill: Option<&mut dyn FnMut(PrefillProgress)>,
    ) -> Result<Option<Step>, EngineError> {
        if let Some(step) = self.queued.pop_front() {
            return Ok(Some(step));
        }
        if self.finish_reason.is_some() || self.stopped {
            return Ok(None);
        }
        // The constraint's mask is known before the pass runs (and may end the generation).
        let allowed = self.allowed_tokens()?;
        if self.finish_reason.is_some() {
            return Ok(None);
        }
        let step_clock = Stopwatch::start();
        let first = !self.started;
        let logits = match self.pending.take() {
            Some(token) if !first => {
                if !self.owns_cache(engine) {
                    self.pending = Some(token);
                    return Err(EngineError::Interleaved);
                }
                self.speculation.decode_passes += 1;
                let draft = self.draft(engine);
                if !draft.is_empty() {
                    let steps = self.verify(engine, token, &draft, allowed).await?;
                    self.decode_ms += step_clock.elapsed_ms();
                    self.queued.extend(steps);
                    return Ok(self.queued.pop_front());
                }
                engine.forward_last(&[token])?
            }
            _ => self.prefill(engine, &mut on_prefill).await?,
        };
        self.started = true;
        let choice = self.choose(engine, logits, allowed.as_ref()).await?;
        if first {
            if let Some(report) = on_prefill {
                let total = self.prompt_tokens.len() + self.generated.len();
                report(PrefillProgress { done: total, total, cached: self.cached_context_tokens });
            }
            self.prefill_ms = step_clock.elapsed_ms();
        } else {
            self.decode_ms += step_clock.elapsed_ms();
        }
        self.emit(engine, choice).map(Some)
    }

    /// Takes the chosen token ([`Self::take_token`]), ends the generation when the context has no
    /// room to run it, and reports it as a step.
    fn emit(&mut self, engine: &Engine, choice: Choice) -> Result<Step, EngineError> {
        let Choice { sampled, top, logprob, row, constraint } = choice;
        let id = sampled.id;
        let tokenizer = &engine.tokenizer;
        let mut text = self.take_token(id, tokenizer)?;
        if self.finish_reason.is_none() && self.prompt_tokens.len() + self.generated.len() > engine.cache.capacity() {
            // No room to run this token: the context is full.
            self.finish_reason = Some(FinishReason::Length);
            self.pending = None;
            let rest = self.stops.flush();
            self.text.push_str(&rest);
            text.push_str(&rest);
        }
        Ok(Step {
            index: self.generated.len() - 1,
            id,
            token: tokenizer.token_text(id),
            text,
            logprob,
            top,
            explain: sampled.explanation.map(|e| StepExplanation::new(e, tokenizer)),
            finish_reason: self.finish_reason.clone(),
            draft: None,
            constraint,
            logits: row,
        })
    }

    /// Runs what the cache does not hold of the context (the prompt, then any forced tokens) and
    /// returns the last position's logits, still on the device. With `on_prefill`: where the
    /// model reports its blocks as a pass goes (`Model::observes_blocks`: the CPU engine), in
    /// one pass reported after each block (the tokens done counted as the share of the blocks
    /// done); elsewhere in chunks of [`prefill_chunk_len`], each but the last waited for and
    /// reported. The caller reports the end once the logits are read.
    async fn prefill(
        &mut self,
        engine: &mut Engine,
        on_prefill: &mut Option<&mut dyn FnMut(PrefillProgress)>,
    ) -> Result<DeviceLogits, EngineError> {
        let context = [self.prompt_tokens.as_slice(), &self.generated].concat();
        let total = context.len();
        let cached = engine.reuse_cache_prefix(&context);
        self.cached_context_tokens = cached;
        let within_pass = on_prefill.is_some() && engine.model.observes_blocks();
        let chunk = if on_prefill.is_some() && !within_pass { prefill_chunk_len(total - cached) } else { total };
        let blocks = engine.model.config().block_count;
        // A recurrent state (or a ring's window) is kept where a later prompt is likely to go
        // back to: before the context's last token, and where the conversation so far ends.
        let mut keep: Vec<usize> = self.state_checkpoints.clone();
        if engine.cache.needs_checkpoints() {
            keep.push(total - 1);
        }
        keep.sort_unstable();
        let mut done = cached;
        loop {
            let end = (done + chunk).min(total);
            let progress = |from: usize, to: usize| PassProgress { from, to, total, cached, blocks };
            for &at in &keep {
                if done < at && at < end {
                    let report = on_prefill.as_deref_mut().filter(|_| within_pass);
                    engine.advance_to_checkpoint(&context[done..at], &mut progress(done, at).reporter(report))?;
                    done = at;
                }
            }
            let report = on_prefill.as_deref_mut().filter(|_| within_pass);
            let logits =
                engine.forward_last_observed(&context[done..end], &mut progress(done, end).reporter(report))?;
            done = end;
            if keep.contains(&done) {
                // A chunk ended where a checkpoint goes.
                engine.cache.checkpoint();
            }
            if done == total {
                return Ok(logits);
            }
            if let Some(report) = on_prefill.as_mut().filter(|_| !within_pass) {
                logits.wait().await?;
                report(PrefillProgress { done, total, cached });
            }
        }
    }

    /// Whether the engine's cache still holds exactly this generation's tokens (the prompt and
    /// every generated token but the pending one): no other generation ran since the last step.
    fn owns_cache(&self, engine: &Engine) -> bool {
        let (prompt, generated) =
            engine.cached_tokens.split_at(self.prompt_tokens.len().min(engine.cached_tokens.len()));
        prompt == self.prompt_tokens && generated == &self.generated[..self.generated.len().saturating_sub(1)]
    }

    /// Ends the generation now (an abort): releases the text held back for stop strings and
    /// returns it. Later steps return `None`, and the result's
    /// finish reason stays `None`.
    pub fn stop(&mut self) -> String {
        // Tokens a verification pass yielded but no step returned yet: their text is released now.
        let mut text: String = self.queued.drain(..).map(|step| step.text).collect();
        if self.finish_reason.is_some() || self.stopped {
            return text;
        }
        self.stopped = true;
        self.pending = None;
        let rest = self.stops.flush();
        self.text.push_str(&rest);
        text.push_str(&rest);
        text
    }

    /// The outcome so far.
    pub fn result(&self) -> GenerationResult {
        let forced = self.request.forced_tokens.len().min(self.generated.len());
        let context_run = (self.prompt_tokens.len() + forced).saturating_sub(self.cached_context_tokens) as f64;
        let decode_steps = (self.generated.len() - forced).saturating_sub(1) as f64;
        let per_s = |n: f64, ms: f64| if ms > 0.0 { n * 1000.0 / ms } else { 0.0 };
        GenerationResult {
            text: self.text.clone(),
            finish_reason: self.finish_reason.clone(),
            usage: Usage {
                prompt_tokens: self.prompt_tokens.len(),
                completion_tokens: self.generated.len(),
                cached_prompt_tokens: self.cached_context_tokens.min(self.prompt_tokens.len()),
            },
            transfer: self.transfer,
            timing: Timing {
                prefill_ms: self.prefill_ms,
                prefill_tokens_per_s: per_s(context_run, self.prefill_ms),
                ttft_ms: self.prefill_ms,
                decode_ms: self.decode_ms,
                decode_tokens_per_s: per_s(decode_steps, self.decode_ms),
            },
            speculation: self.speculation_stats(decode_steps),
        }
    }
}

/// A pass over the context's `from..to`, in a prefill of `total` tokens of which `cached` were
/// held, on a model that reports its `blocks` as they are done.
#[derive(Clone, Copy)]
struct PassProgress {
    from: usize,
    to: usize,
    total: usize,
    cached: usize,
    blocks: usize,
}

impl PassProgress {
    /// What reports the pass after each block to `report` (the tokens done counted as the share
    /// of its blocks done) where that count has grown, short of the prefill's end: the caller
    /// reports that once the logits are read.
    fn reporter<'r, 'f: 'r>(
        self,
        mut report: Option<&'r mut (dyn FnMut(PrefillProgress) + 'f)>,
    ) -> impl FnMut(usize) + 'r {
        let mut last = self.from;
        move |block| {
            let done = self.from + (self.to - self.from) * block / self.blocks;
            if let Some(report) = report.as_deref_mut().filter(|_| last < done && done < self.total) {
                report(PrefillProgress { done, total: self.total, cached: self.cached });
                last = done;
            }
        }
    }
}
