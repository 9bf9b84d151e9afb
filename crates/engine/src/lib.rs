//! The generation loop: model + tokenizer + sampler, step by step, the same natively and in wasm.
//!
//! [`Engine`] owns a loaded model, its tokenizer and one KV cache allocated for the whole context.
//! [`Engine::generate`] validates a [`GenerateRequest`] and returns a [`Generation`], a pull-based
//! stream: each [`Generation::next_step`] runs one forward pass (the prompt's prefill on the first
//! call, one decode after that), reads the logits asynchronously, samples, and returns a [`Step`]
//! with the streamed text delta, the model's top candidates and, if asked, the sampler's
//! explanation. Nothing here blocks on the device, so the browser can drive it from a future.
//!
//! Consecutive generations reuse the cache: when a new prompt starts with tokens already in the
//! cache (a chat that goes on, the same prompt sampled again), only the new suffix is prefilled.

mod beam;
mod error;
mod timing;

use nucleus_gguf::GgufFile;
use nucleus_kernels::tail::fused::TailRequest;
use nucleus_kernels::{LogitAdjustment, LogitAdjustments, RawRow};
use nucleus_model::{DeviceLogits, KvCache, Llama, LlamaConfig, LoadProgress, Logits};
use nucleus_sampler::{
    Candidate, CandidateSet, Chosen, Explanation, FinishReason, SampleStep, SamplingParams, Sampler, StopConditions,
    StopTracker, log_softmax, top_k_ids,
};
use nucleus_tokenizer::{ChatMessage, Tokenizer};
use serde::Serialize;

pub use beam::{BeamHypothesis, BeamOutput, BeamRequest};
pub use error::EngineError;
pub use nucleus_model::{LinearKernel, ModelDevice, Path};
pub use timing::Stopwatch;

/// Most candidates a step can report (`top_logprobs`, explanation size).
pub const MAX_TOP_LOGPROBS: usize = 256;

/// Candidates the GPU decode tail selects when the request asks for fewer: enough for top-k,
/// top-p and min-p to settle inside them in the common case.
pub const DECODE_TAIL_CANDIDATES: usize = 64;

/// What to generate from.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// Raw text, tokenized as is (control tokens written in it are parsed as special tokens).
    Text(String),
    /// Messages rendered with the model's chat template, ending with the assistant's turn opened.
    Chat(Vec<ChatMessage>),
}

/// One generation's settings. [`GenerateRequest::validate`] checks every field.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateRequest {
    pub prompt: Prompt,
    /// Most tokens to generate, >= 1.
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Stop strings (non-empty), matched on the decoded text; never part of the output.
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Candidates by raw logit reported with each step, 0..=256.
    pub top_logprobs: usize,
    /// Candidates in the sampler's explanation of each step; 0 = no explanation. 0..=256.
    pub explain_top_n: usize,
    /// Hand each step the whole raw logits row ([`Step::logits`]): the step reads the row back
    /// (`4·vocab` bytes) instead of ending on the GPU decode tail.
    pub return_logits: bool,
}

impl GenerateRequest {
    pub fn new(prompt: Prompt) -> Self {
        Self {
            prompt,
            max_tokens: 128,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            ignore_eos: false,
            top_logprobs: 20,
            explain_top_n: 0,
            return_logits: false,
        }
    }

    /// Checks every parameter; the error names it and its allowed range.
    pub fn validate(&self, vocab_size: usize) -> Result<(), EngineError> {
        if self.max_tokens == 0 {
            return Err(EngineError::bad_option("max_tokens", ">= 1", self.max_tokens));
        }
        if self.top_logprobs > MAX_TOP_LOGPROBS {
            return Err(EngineError::bad_option("top_logprobs", "0..=256", self.top_logprobs));
        }
        if self.explain_top_n > MAX_TOP_LOGPROBS {
            return Err(EngineError::bad_option("explain_top_n", "0..=256", self.explain_top_n));
        }
        if self.stop.iter().any(String::is_empty) {
            return Err(EngineError::bad_option("stop", "non-empty strings", "\"\""));
        }
        match &self.prompt {
            Prompt::Text(text) if text.is_empty() => return Err(EngineError::bad_option("prompt", "non-empty text", "\"\"")),
            Prompt::Chat(messages) if messages.is_empty() => {
                return Err(EngineError::bad_option("messages", "at least one message", "[]"));
            }
            _ => {}
        }
        self.sampling.validate(vocab_size)?;
        Ok(())
    }
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
    pub chosen: Chosen,
}

impl StepExplanation {
    fn new(explanation: Explanation, tokenizer: &Tokenizer) -> Self {
        let Explanation { candidates, entropy, mass_outside, kept_count, kept_mass, temperature, chosen } = explanation;
        let candidates = candidates
            .into_iter()
            .map(|candidate| ExplainedCandidate { text: tokenizer.token_text(candidate.id), candidate })
            .collect();
        Self { candidates, entropy, mass_outside, kept_count, kept_mass, temperature, chosen }
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
    /// The whole raw logits row, when the request asked for it.
    #[serde(skip)]
    pub logits: Option<Vec<f32>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
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
    /// Bytes read back from the device over all steps.
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
}

/// Facts about the loaded model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelInfo {
    pub name: String,
    pub architecture: String,
    pub vocab_size: usize,
    pub context_length: usize,
    pub parameters: usize,
    pub file_bytes: usize,
    /// The forward pass's path: `fused`, `burn-matmul` or `burn-wgsl`.
    pub path: &'static str,
    /// Bytes of the weights on the device.
    pub weight_bytes: u64,
}

/// How to load a model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// KV-cache positions (default and maximum: the model's context length).
    pub context_length: Option<usize>,
    /// The forward pass's path (default: [`Path::default_for`] the device and model).
    pub path: Option<Path>,
}

/// A loaded model, ready to generate.
pub struct Engine {
    model: Llama,
    tokenizer: Tokenizer,
    cache: KvCache,
    /// The tokens whose keys and values are in `cache`, in order.
    cached_tokens: Vec<u32>,
    info: ModelInfo,
    /// Whether decode steps may end on the GPU (the WGSL decode tail; wgpu devices only).
    decode_tail: bool,
}

impl Engine {
    /// Parses GGUF `bytes`, builds the tokenizer, uploads the weights to `device`, and makes a
    /// KV cache for the context asked for (default and maximum: the model's).
    pub fn load(bytes: &[u8], device: &ModelDevice, options: LoadOptions) -> Result<Self, EngineError> {
        Self::load_with_progress(bytes, device, options, |_| {})
    }

    pub fn load_with_progress(
        bytes: &[u8],
        device: &ModelDevice,
        options: LoadOptions,
        progress: impl FnMut(LoadProgress),
    ) -> Result<Self, EngineError> {
        let file = GgufFile::parse(bytes)?;
        let config = LlamaConfig::from_gguf(&file)?;
        let capacity = match options.context_length {
            None => config.context_length,
            Some(n) if (1..=config.context_length).contains(&n) => n,
            Some(n) => return Err(EngineError::bad_option("context_length", format!("1..={}", config.context_length), n)),
        };
        let tokenizer = Tokenizer::from_gguf(&file)?;
        if tokenizer.vocab_size() != config.vocab_size {
            return Err(EngineError::Model(nucleus_model::ModelError::Invalid(format!(
                "the tokenizer has {} tokens but the model {}",
                tokenizer.vocab_size(),
                config.vocab_size
            ))));
        }
        let path = options.path.unwrap_or_else(|| Path::default_for(device, &config));
        let model = Llama::load_parsed(&file, config, device, path, progress)?;
        let cache = model.new_cache(capacity)?;
        let config = model.config();
        let info = ModelInfo {
            name: file.get_str("general.name").unwrap_or("unnamed").to_string(),
            architecture: config.architecture.clone(),
            vocab_size: config.vocab_size,
            context_length: capacity,
            parameters: config.parameter_count(model.tied_output()),
            file_bytes: bytes.len(),
            path: path.as_str(),
            weight_bytes: model.memory().weight_bytes,
        };
        let decode_tail = nucleus_kernels::supports_device(device.burn());
        Ok(Self { model, tokenizer, cache, cached_tokens: Vec::new(), info, decode_tail })
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn model(&self) -> &Llama {
        &self.model
    }

    /// The KV cache.
    pub fn cache(&self) -> &KvCache {
        &self.cache
    }

    /// Whether decode steps end on the GPU when they can (default: on for wgpu devices).
    pub fn decode_tail(&self) -> bool {
        self.decode_tail
    }

    /// Turns the GPU decode tail on or off (it stays off on devices that cannot run it).
    pub fn set_decode_tail(&mut self, enabled: bool) {
        self.decode_tail = enabled && nucleus_kernels::supports_device(self.model.device().burn());
    }

    /// Empties the KV cache, so the next generation prefills its whole prompt.
    pub fn clear_cache(&mut self) {
        self.cache.clear();
        self.cached_tokens.clear();
    }

    /// The token ids `prompt` stands for.
    pub fn prompt_tokens(&self, prompt: &Prompt) -> Result<Vec<u32>, EngineError> {
        let text = match prompt {
            Prompt::Text(text) => text.clone(),
            Prompt::Chat(messages) => self.tokenizer.render_chat(messages)?,
        };
        Ok(self.tokenizer.encode(&text)?)
    }

    /// Starts a generation. Validates the request and the prompt's length; runs nothing yet.
    pub fn generate(&mut self, request: GenerateRequest) -> Result<Generation<'_>, EngineError> {
        let state = self.start(request)?;
        Ok(Generation { engine: self, state })
    }

    /// Like [`Engine::generate`], but the generation's state is owned by the caller and stepped
    /// with [`Engine::step`]: for callers that cannot hold a borrow of the engine across steps
    /// (the browser's worker, which keeps both behind one handle).
    pub fn start(&mut self, request: GenerateRequest) -> Result<GenerationState, EngineError> {
        request.validate(self.info.vocab_size)?;
        let prompt_tokens = self.prompt_tokens(&request.prompt)?;
        if prompt_tokens.is_empty() {
            return Err(EngineError::bad_option("prompt", "text that makes at least one token", "\"\""));
        }
        // The prompt plus the first generated token must fit; decoding then stops at the context.
        if prompt_tokens.len() >= self.cache.capacity() {
            return Err(EngineError::ContextOverflow { prompt_tokens: prompt_tokens.len(), context_length: self.cache.capacity() });
        }
        let mut sampler = Sampler::new(request.sampling.clone(), self.info.vocab_size)?;
        sampler.set_prompt(&prompt_tokens)?;
        let stops = StopTracker::new(StopConditions {
            eos_token_ids: self.tokenizer.end_of_generation_ids().to_vec(),
            ignore_eos: request.ignore_eos,
            max_tokens: Some(request.max_tokens),
            stop_strings: request.stop.clone(),
        });
        Ok(GenerationState {
            request,
            prompt_tokens,
            sampler,
            stops,
            pending: None,
            generated: Vec::new(),
            text: String::new(),
            finish_reason: None,
            stopped: false,
            cached_prompt_tokens: 0,
            prefill_ms: 0.0,
            decode_ms: 0.0,
            transfer: Transfer::default(),
        })
    }

    /// Makes the cache hold `tokens` minus at least the last one, keeping the longest prefix it
    /// already holds; returns how many tokens were kept (the caller runs the rest).
    fn reuse_cache_prefix(&mut self, tokens: &[u32]) -> usize {
        let common = self.cached_tokens.iter().zip(tokens).take_while(|(a, b)| a == b).count();
        let keep = common.min(tokens.len() - 1);
        self.cache.truncate(keep);
        self.cached_tokens.truncate(keep);
        keep
    }

    /// Runs `tokens` after what the cache holds and returns the last position's logits, still on
    /// the device.
    fn forward_last(&mut self, tokens: &[u32]) -> Result<DeviceLogits, EngineError> {
        let logits = self.model.forward(tokens, &mut self.cache, Logits::Last)?;
        self.cached_tokens.extend_from_slice(tokens);
        Ok(logits)
    }
}

/// A generation in progress, borrowing its engine; see the crate documentation.
pub struct Generation<'e> {
    engine: &'e mut Engine,
    state: GenerationState,
}

impl Generation<'_> {
    pub fn prompt_tokens(&self) -> &[u32] {
        self.state.prompt_tokens()
    }

    pub fn generated_tokens(&self) -> &[u32] {
        self.state.generated_tokens()
    }

    /// Finished by itself or stopped.
    pub fn is_finished(&self) -> bool {
        self.state.is_finished()
    }

    /// Runs one step and returns its token, or `None` once the generation has finished.
    pub async fn next_step(&mut self) -> Result<Option<Step>, EngineError> {
        self.engine.step(&mut self.state).await
    }

    /// See [`GenerationState::stop`].
    pub fn stop(&mut self) -> String {
        self.state.stop()
    }

    /// The outcome so far.
    pub fn result(&self) -> GenerationResult {
        self.state.result()
    }
}

impl Engine {
    /// Runs one step of `state` (a generation started on this engine by [`Engine::start`]) and
    /// returns its token, or `None` once the generation has finished.
    ///
    /// The KV cache holds one generation's tokens at a time: a step of a generation whose
    /// tokens another one has replaced since its last step fails with `busy`
    /// ([`EngineError::Interleaved`]).
    pub async fn step(&mut self, state: &mut GenerationState) -> Result<Option<Step>, EngineError> {
        state.next_step(self).await
    }
}

/// The state of a generation, owned by its caller; stepped by [`Engine::step`].
pub struct GenerationState {
    request: GenerateRequest,
    prompt_tokens: Vec<u32>,
    sampler: Sampler,
    stops: StopTracker,
    /// The last chosen token, not yet run through the model.
    pending: Option<u32>,
    generated: Vec<u32>,
    text: String,
    finish_reason: Option<FinishReason>,
    /// Ended by [`Generation::stop`] before it finished.
    stopped: bool,
    cached_prompt_tokens: usize,
    prefill_ms: f64,
    decode_ms: f64,
    transfer: Transfer,
}

impl GenerationState {
    pub fn prompt_tokens(&self) -> &[u32] {
        &self.prompt_tokens
    }

    pub fn generated_tokens(&self) -> &[u32] {
        &self.generated
    }

    /// Finished by itself or stopped.
    pub fn is_finished(&self) -> bool {
        self.finish_reason.is_some() || self.stopped
    }

    async fn next_step(&mut self, engine: &mut Engine) -> Result<Option<Step>, EngineError> {
        if self.finish_reason.is_some() || self.stopped {
            return Ok(None);
        }
        let step_clock = Stopwatch::start();
        let first = self.pending.is_none();
        let logits = match self.pending.take() {
            None => {
                let kept = engine.reuse_cache_prefix(&self.prompt_tokens);
                self.cached_prompt_tokens = kept;
                engine.forward_last(&self.prompt_tokens[kept..])?
            }
            Some(token) => {
                if !self.owns_cache(engine) {
                    self.pending = Some(token);
                    return Err(EngineError::Interleaved);
                }
                engine.forward_last(&[token])?
            }
        };
        let Choice { sampled, top, logprob, row } = self.choose(engine, logits).await?;
        if first {
            self.prefill_ms = step_clock.elapsed_ms();
        } else {
            self.decode_ms += step_clock.elapsed_ms();
        }
        let id = sampled.id;
        self.sampler.accept(id)?;
        self.generated.push(id);
        let tokenizer = &engine.tokenizer;
        let output = self.stops.push_token(id, tokenizer.token_bytes(id));
        let mut finish = output.finish;
        if finish.is_none() && engine.cached_tokens.len() + 1 > engine.cache.capacity() {
            // No room to run this token: the context is full.
            finish = Some(FinishReason::Length);
        }
        let mut text = output.text;
        if finish == Some(FinishReason::Length) {
            text.push_str(&self.stops.flush());
        }
        self.text.push_str(&text);
        if finish.is_none() {
            self.pending = Some(id);
        }
        self.finish_reason = finish.clone();
        Ok(Some(Step {
            index: self.generated.len() - 1,
            id,
            token: tokenizer.token_text(id),
            text,
            logprob,
            top,
            explain: sampled.explanation.map(|e| StepExplanation::new(e, tokenizer)),
            finish_reason: finish,
            logits: row,
        }))
    }

    /// Whether the engine's cache still holds exactly this generation's tokens (the prompt and
    /// every generated token but the pending one): no other generation ran since the last step.
    fn owns_cache(&self, engine: &Engine) -> bool {
        let (prompt, generated) = engine.cached_tokens.split_at(self.prompt_tokens.len().min(engine.cached_tokens.len()));
        prompt == self.prompt_tokens && generated == &self.generated[..self.generated.len().saturating_sub(1)]
    }

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
    async fn choose(&mut self, engine: &Engine, logits: DeviceLogits) -> Result<Choice, EngineError> {
        let tokenizer = &engine.tokenizer;
        if let Some(temperature) = self.decode_tail_temperature(engine) {
            let adjustments = LogitAdjustments::from_entries(
                self.sampler
                    .gpu_adjustments()?
                    .into_iter()
                    .map(|a| LogitAdjustment {
                        id: a.id,
                        bias: a.bias,
                        scale_positive: a.scale_positive,
                        scale_non_positive: a.scale_non_positive,
                        offset: a.offset,
                    })
                    .collect(),
            );
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
                    .collect();
                let chosen = tail.ids.iter().position(|&c| c == sampled.id).expect("the kept tokens are candidates");
                let raw_logit = match adjustments.entries().iter().find(|a| a.id == sampled.id) {
                    Some(adjustment) => unadjust(adjustment, tail.logits[chosen]),
                    None => tail.logits[chosen],
                };
                let logprob = raw.stats.log_probability(raw_logit);
                return Ok(Choice { sampled, top, logprob, row: None });
            }
        }
        let row = logits.read().await?.pop().expect("one row");
        self.transfer.readback_bytes += row.len() * std::mem::size_of::<f32>();
        self.transfer.full_read_steps += 1;
        let sampled = self.sampler.sample(&row, None, self.request.explain_top_n)?;
        let raw_logprobs = log_softmax(&row)?;
        let top = top_k_ids(&row, self.request.top_logprobs)
            .into_iter()
            .map(|c| TopCandidate {
                id: c,
                text: tokenizer.token_text(c),
                logit: row[c as usize],
                logprob: raw_logprobs[c as usize],
            })
            .collect();
        let logprob = raw_logprobs[sampled.id as usize];
        let row = self.request.return_logits.then_some(row);
        Ok(Choice { sampled, top, logprob, row })
    }

    /// Ends the generation now (an abort): releases the text held back for stop strings and
    /// returns it. Later steps return `None`, and the result's
    /// finish reason stays `None`.
    pub fn stop(&mut self) -> String {
        if self.finish_reason.is_some() || self.stopped {
            return String::new();
        }
        self.stopped = true;
        self.pending = None;
        let text = self.stops.flush();
        self.text.push_str(&text);
        text
    }

    /// The outcome so far.
    pub fn result(&self) -> GenerationResult {
        let prompt_run = (self.prompt_tokens.len() - self.cached_prompt_tokens) as f64;
        let decode_steps = self.generated.len().saturating_sub(1) as f64;
        let per_s = |n: f64, ms: f64| if ms > 0.0 { n * 1000.0 / ms } else { 0.0 };
        GenerationResult {
            text: self.text.clone(),
            finish_reason: self.finish_reason.clone(),
            usage: Usage {
                prompt_tokens: self.prompt_tokens.len(),
                completion_tokens: self.generated.len(),
                cached_prompt_tokens: self.cached_prompt_tokens,
            },
            transfer: self.transfer,
            timing: Timing {
                prefill_ms: self.prefill_ms,
                prefill_tokens_per_s: per_s(prompt_run, self.prefill_ms),
                ttft_ms: self.prefill_ms,
                decode_ms: self.decode_ms,
                decode_tokens_per_s: per_s(decode_steps, self.decode_ms),
            },
        }
    }
}

/// The outcome of sampling one step.
struct Choice {
    sampled: SampleStep,
    top: Vec<TopCandidate>,
    /// The chosen token's log-probability under the raw model distribution.
    logprob: f64,
    /// The whole raw row, when the request asked for it.
    row: Option<Vec<f32>>,
}

/// The raw logit an adjusted one came from: the inverse of `((v + bias) · scale) + offset`, the
/// scale chosen by the sign of `v + bias` (a positive scale keeps the sign). Rounded in f32 like
/// the forward map, so within an ulp or two; only for tokens that can be chosen (finite bias).
fn unadjust(adjustment: &LogitAdjustment, adjusted: f32) -> f32 {
    let scaled = adjusted - adjustment.offset;
    let scale = if scaled > 0.0 { adjustment.scale_positive } else { adjustment.scale_non_positive };
    scaled / scale - adjustment.bias
}
