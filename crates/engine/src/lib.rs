//! The generation loop: model + tokenizer + sampler, step by step, the same natively and in wasm.
//!
//! [`Engine`] owns a loaded model, its tokenizer and one KV cache allocated for the whole context.
//! [`Engine::generate`] validates a [`GenerateRequest`] and returns a [`Generation`], a pull-based
//! stream: each [`Generation::next_step`] runs one forward pass (the prompt's prefill on the first
//! call, one decode after that), reads the logits asynchronously, samples, and returns a [`Step`]
//! with the streamed text delta, the model's top candidates and, if asked, the sampler's
//! explanation. Nothing here blocks on the device, so the browser can drive it from a future.
//!
//! The modules: `request` (what to generate, validated), `report` (each step and the outcome),
//! `generation` (a generation's state and its step; the choice of the next token in
//! `generation::step`, the verification of a draft in `generation::verify`), `speculative`
//! (prompt-lookup drafting and what it reports), `constraint` (constrained decoding with
//! llguidance), `beam` (beam search), `lens` (the logit lens of
//! one step), `score` (a text rated token by token), `attention` (what a layer attends to), `error` (typed errors and their codes).
//!
//! Consecutive generations reuse the cache: when a new prompt starts with tokens already in the
//! cache (a chat that goes on, the same prompt sampled again), only the new suffix is prefilled.

mod attention;
mod beam;
mod constraint;
mod error;
mod generation;
mod lens;
mod plan;
mod report;
mod request;
mod score;
mod speculative;
mod timing;
mod wire;

use nucleus_gguf::GgufFile;
use nucleus_model::{DeviceLogits, KvCache, LoadProgress, Logits, Model, ModelConfig};
use nucleus_sampler::{Sampler, StopConditions, StopTracker};
use nucleus_tokenizer::Tokenizer;
use serde::Serialize;

use constraint::ConstraintCompiler;

pub use attention::{AttentionReport, AttentionRequest, AttentionRow, AttentionToken};
pub use beam::{
    BeamHypothesis, BeamOutput, BeamRequest, DEFAULT_BEAM_TOKENS, DEFAULT_BEAMS, MAX_BEAM_TOKENS, MAX_BEAMS,
};
pub use constraint::ResponseFormat;
pub use error::EngineError;
pub use generation::GenerationState;
pub use lens::{DEFAULT_LENS_CANDIDATES, LensLayer, LensReport, LensRequest, LensToken, MAX_LENS_CANDIDATES};
pub use nucleus_gguf::{GgufError, GgufHeader, SharedBytes};
pub use nucleus_model::{KvWindow, LinearKernel, MAX_ATTENTION_ROWS, ModelDevice, Path};
pub use nucleus_sampler::json::{OptionError, camel_case};
pub use plan::{HostLimit, LoadPlan, plan};
pub use report::{
    ExplainedCandidate, GenerationResult, MaskReport, PrefillProgress, Step, StepExplanation, Timing, TopCandidate,
    Transfer, Usage,
};
pub use request::{
    DECODE_TAIL_CANDIDATES, DEFAULT_MAX_TOKENS, DEFAULT_TOP_LOGPROBS, GenerateRequest, MAX_TOP_LOGPROBS, Prompt,
};
pub use score::{DEFAULT_SCORE_TOP_K, MAX_SCORE_TOP_K, ScoreReport, ScoreRequest, ScoredToken};
pub use speculative::{
    DEFAULT_LOOKUP_NGRAM, DEFAULT_MAX_DRAFT, DraftReport, DraftedToken, MAX_DRAFT, MAX_LOOKUP_NGRAM, PromptLookup,
    SpeculationStats,
};
pub use timing::Stopwatch;
pub use wire::{js_name, js_option_error};

/// Facts about the loaded model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelInfo {
    /// `general.name`: often a training-run label ("Smollm2 135M 8k Lc100K Mix1 Ep2"); people are
    /// shown [`ModelInfo::title`].
    pub name: String,
    /// `general.basename` and `general.size_label` ("SmolLM2", "135M"), when the file has them.
    pub basename: Option<String>,
    pub size_label: Option<String>,
    /// The quantization the file was made with (`general.file_type`: `Q4_K_M`, `Q4_1`, …), else
    /// the type that holds most of the weights' bytes.
    pub quantization: String,
    pub architecture: String,
    pub vocab_size: usize,
    /// Whether the file has a chat template (`tokenizer.chat_template`): without one the model
    /// continues raw text only (a base model).
    pub chat_template: bool,
    pub context_length: usize,
    pub parameters: usize,
    pub file_bytes: usize,
    /// The forward pass's path: `fused`, `cpu`, `burn-matmul` or `burn-wgsl`.
    pub path: &'static str,
    /// Bytes of the weights on the device.
    pub weight_bytes: u64,
    /// Bytes each token of the context takes in the KV cache (keys and values of every
    /// attention block) while it is held whole: see `kv_window` for the part a ring stops.
    pub kv_bytes_per_token: u64,
    /// A sliding-window model's local blocks on this path: they keep a ring of `rows` positions
    /// (`bytes_per_token` of `kv_bytes_per_token`), so from there on only the other blocks grow.
    pub kv_window: Option<KvWindow>,
    /// Bytes of the recurrent blocks' state (Qwen3.5's Gated DeltaNet blocks): fixed, whatever
    /// the context; 0 for a model whose every block attends.
    pub state_bytes: u64,
    /// Blocks of the file not run: its multi-token-prediction blocks (a drafting head).
    pub skipped_blocks: usize,
}

impl ModelInfo {
    /// Bytes the KV cache's rows take once `tokens` positions are in it: every attention block's
    /// rows, a local block's no more than its ring holds. (The page's time line says the same.)
    pub fn kv_bytes(&self, tokens: usize) -> u64 {
        let stopped =
            self.kv_window.map_or(0, |window| tokens.saturating_sub(window.rows) as u64 * window.bytes_per_token);
        tokens as u64 * self.kv_bytes_per_token - stopped
    }

    /// The model as a person names it: "SmolLM2-135M-Instruct · llama · Q4_1 · 98 MB · 49,152
    /// tokens". The name is the file's (`file_name`: a path or URL; its last segment without
    /// `.gguf` and without a suffix naming the quantization), else `general.basename` and
    /// `general.size_label`, else `general.name`.
    pub fn title(&self, file_name: Option<&str>) -> String {
        let from_file = file_name.and_then(|name| {
            let last = name.split(['?', '#']).next()?.rsplit(['/', '\\']).next()?;
            let stem = last.strip_suffix(".gguf").or_else(|| last.strip_suffix(".GGUF")).unwrap_or(last);
            let quant = self.quantization.to_ascii_lowercase();
            let cut = stem.len().checked_sub(quant.len() + 1).filter(|&at| {
                stem.is_char_boundary(at)
                    && matches!(stem.as_bytes()[at], b'.' | b'-' | b'_')
                    && stem[at + 1..].to_ascii_lowercase() == quant
            });
            let stem = cut.map_or(stem, |at| &stem[..at]);
            (!stem.is_empty()).then(|| stem.to_string())
        });
        let from_metadata = || match (&self.basename, &self.size_label) {
            (Some(base), Some(size)) => format!("{base}-{size}"),
            (Some(base), None) => base.clone(),
            _ => self.name.clone(),
        };
        let name = from_file.unwrap_or_else(from_metadata);
        format!(
            "{name} · {} · {} · {:.0} MB · {} tokens",
            self.architecture,
            self.quantization,
            self.file_bytes as f64 / 1e6,
            thousands(self.vocab_size)
        )
    }
}

/// `262144` as `262,144`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The quantization the file names (`general.file_type`), else the type of the largest share of
/// the tensor bytes.
/// What a load settles from the file's header before it reads a weight: the configuration it
/// runs (the trained one at the context asked), the tokenizer, the path, every check of the plan.
struct Prepared {
    config: ModelConfig,
    capacity: usize,
    tokenizer: Tokenizer,
    path: Path,
}

impl Prepared {
    fn new(
        file: &GgufHeader,
        device: &ModelDevice,
        options: &LoadOptions,
        host_limit: Option<HostLimit<'_>>,
    ) -> Result<Self, EngineError> {
        let trained = ModelConfig::from_gguf(file)?;
        let capacity = plan::context_length(&trained, options)?;
        // The model runs the positions asked for: its RoPE tables and KV cache are sized by them.
        let config = ModelConfig { context_length: capacity, ..trained.clone() };
        let tokenizer = Tokenizer::from_gguf(file)?;
        if tokenizer.vocab_size() != config.vocab_size {
            return Err(EngineError::Model(nucleus_model::ModelError::Invalid(format!(
                "the tokenizer has {} tokens but the model {}",
                tokenizer.vocab_size(),
                config.vocab_size
            ))));
        }
        let path = options.path.unwrap_or_else(|| Path::default_for(device, &config));
        // Everything the model will hold, checked before anything is uploaded.
        plan::checked(file, &config, device, options, host_limit, trained.context_length)?;
        Ok(Self { config, capacity, tokenizer, path })
    }

    /// The engine of the loaded `model`, its file's header `file` (`file_bytes` long).
    fn engine(self, file: &GgufHeader, file_bytes: usize, model: Model) -> Result<Engine, EngineError> {
        let Self { capacity, tokenizer, path, .. } = self;
        let cache = model.new_cache(capacity)?;
        let config = model.config();
        let info = ModelInfo {
            name: file.get_str("general.name").unwrap_or("unnamed").to_string(),
            basename: file.get_str("general.basename").ok().map(str::to_string),
            size_label: file.get_str("general.size_label").ok().map(str::to_string),
            quantization: quantization(file),
            architecture: config.architecture.clone(),
            vocab_size: config.vocab_size,
            chat_template: tokenizer.chat_template().is_some(),
            context_length: capacity,
            parameters: nucleus_model::parameter_count(file, config)? as usize,
            file_bytes,
            path: path.as_str(),
            weight_bytes: model.memory().weight_bytes,
            kv_bytes_per_token: config.kv_token_bytes(),
            kv_window: model.kv_window(),
            state_bytes: config.recurrent_state_bytes(),
            skipped_blocks: config.skipped_mtp_blocks,
        };
        let decode_tail = model.supports_decode_tail();
        Ok(Engine { model, tokenizer, cache, cached_tokens: Vec::new(), info, decode_tail, constraints: None })
    }
}

/// A load fed its file's bytes as they arrive ([`Engine::stream`]): each tensor is uploaded as
/// its last byte comes in, and [`EngineStream::finish`] makes the engine once all have.
#[cfg(feature = "gpu")]
pub struct EngineStream {
    load: Prepared,
    model: nucleus_model::ModelStream,
}

#[cfg(feature = "gpu")]
impl EngineStream {
    /// Reads `chunk`, the file's bytes from `offset` (bytes read before are skipped: a download
    /// that starts again from its first byte).
    pub fn read(&mut self, offset: u64, chunk: &[u8]) -> Result<(), EngineError> {
        Ok(self.model.read(offset, chunk)?)
    }

    /// The tensors uploaded so far, and their bytes in the file.
    pub fn progress(&self) -> LoadProgress {
        self.model.progress()
    }

    /// The most bytes the load holds of the file at once: the largest tensor it takes whole.
    pub fn staging_bytes(&self) -> u64 {
        self.model.staging_bytes()
    }

    /// The engine, once the whole file has been read (else `Truncated`).
    pub fn finish(self) -> Result<Engine, EngineError> {
        let Self { load, model } = self;
        let (model, header) = model.finish(load.config.clone())?;
        load.engine(&header, header.file_len as usize, model)
    }
}

fn quantization(file: &GgufHeader) -> String {
    if let Some(name) = file.get("general.file_type").and_then(|v| v.as_u64()).and_then(nucleus_gguf::file_type_name) {
        return name.to_string();
    }
    let mut bytes: Vec<(nucleus_gguf::GgmlType, u64)> = Vec::new();
    for tensor in &file.tensors {
        match bytes.iter_mut().find(|(kind, _)| *kind == tensor.ggml_type) {
            Some((_, total)) => *total += tensor.byte_len(),
            None => bytes.push((tensor.ggml_type, tensor.byte_len())),
        }
    }
    bytes.into_iter().max_by_key(|&(_, total)| total).map_or_else(|| "none".to_string(), |(kind, _)| kind.to_string())
}

/// How to load a model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// KV-cache positions (default and maximum: the model's context length).
    pub context_length: Option<usize>,
    /// The forward pass's path (default: [`Path::default_for`] the device and model).
    pub path: Option<Path>,
    /// The most bytes the model may take on the device, all buffers together (default: no
    /// budget; each buffer is still checked against the device's limits).
    pub memory_budget: Option<u64>,
}

/// A loaded model, ready to generate.
pub struct Engine {
    model: Model,
    tokenizer: Tokenizer,
    cache: KvCache,
    /// The tokens whose keys and values are in `cache`, in order.
    cached_tokens: Vec<u32>,
    info: ModelInfo,
    /// Whether decode steps may end on the GPU (the WGSL decode tail; wgpu devices only).
    decode_tail: bool,
    /// Compiles response formats; built on the first constrained request.
    constraints: Option<ConstraintCompiler>,
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
        Self::load_parsed(&GgufFile::parse(bytes)?, bytes.len(), device, options, progress)
    }

    /// As [`Engine::load_with_progress`], from shared bytes (a memory map, the downloaded file in
    /// wasm memory): the CPU engine then keeps its matrices where they lie in them instead of
    /// copying them, and the bytes live as long as the engine.
    pub fn load_shared(
        bytes: &SharedBytes,
        device: &ModelDevice,
        options: LoadOptions,
        progress: impl FnMut(LoadProgress),
    ) -> Result<Self, EngineError> {
        Self::load_parsed(&GgufFile::parse_shared(bytes)?, bytes.len(), device, options, progress)
    }

    fn load_parsed(
        file: &GgufFile,
        file_bytes: usize,
        device: &ModelDevice,
        options: LoadOptions,
        progress: impl FnMut(LoadProgress),
    ) -> Result<Self, EngineError> {
        let load = Prepared::new(file, device, &options, None)?;
        let model = Model::load_parsed(file, load.config.clone(), device, load.path, progress)?;
        load.engine(file, file_bytes, model)
    }

    /// Starts a load of the model whose file's header is `header` (parsed from its first bytes)
    /// that takes each tensor as its bytes arrive ([`EngineStream::read`]), so that the file is
    /// never whole in memory: on the fused path (a wgpu device) only. `None`: the load would run
    /// on another path, which reads the whole file ([`Engine::load_shared`]). `host_limit`: the
    /// memory the process has (the browser's wasm memory), checked as [`plan`] checks it, so the
    /// load refuses what the plan refuses, in the same words.
    #[cfg(feature = "gpu")]
    pub fn stream(
        header: GgufHeader,
        device: &ModelDevice,
        options: LoadOptions,
        host_limit: Option<HostLimit<'_>>,
    ) -> Result<Option<EngineStream>, EngineError> {
        let load = Prepared::new(&header, device, &options, host_limit)?;
        if load.path != Path::Fused {
            return Ok(None);
        }
        let model = Model::stream(header, &load.config, device)?;
        Ok(Some(EngineStream { load, model }))
    }
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn model(&self) -> &Model {
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
        self.decode_tail = enabled && self.model.supports_decode_tail();
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

    /// The tokens of a context an inspection runs whole (the logit lens, scoring, attention): the
    /// prompt's, then `generated` ids after them; refused when there are none, when an id is
    /// not in the vocabulary, or when they do not fit the cache.
    fn context_tokens(&self, prompt: &Prompt, generated: &[u32]) -> Result<Vec<u32>, EngineError> {
        let vocab = self.info.vocab_size;
        if let Some(&id) = generated.iter().find(|&&id| id as usize >= vocab) {
            return Err(EngineError::bad_option("generated", format!("token ids below {vocab}"), id));
        }
        let tokens = [self.prompt_tokens(prompt)?, generated.to_vec()].concat();
        if tokens.is_empty() {
            return Err(EngineError::bad_option("prompt", "text that makes at least one token", "\"\""));
        }
        if tokens.len() > self.cache.capacity() {
            return Err(EngineError::ContextOverflow {
                prompt_tokens: tokens.len(),
                context_length: self.cache.capacity(),
            });
        }
        Ok(tokens)
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
        // The prompt (with any forced tokens) plus the first sampled token must fit; decoding
        // then stops at the context.
        let context = prompt_tokens.len() + request.forced_tokens.len();
        if context >= self.cache.capacity() {
            return Err(EngineError::ContextOverflow { prompt_tokens: context, context_length: self.cache.capacity() });
        }
        let mut sampling = request.sampling.clone();
        if sampling.dry_enabled() {
            let breakers: Vec<&str> = sampling.dry_sequence_breakers.iter().map(String::as_str).collect();
            sampling.dry_breaker_ids = self.tokenizer.tokens_containing(&breakers).into_iter().collect();
        }
        let mut sampler = Sampler::new(sampling, self.info.vocab_size)?;
        sampler.set_prompt(&prompt_tokens)?;
        let constraint = match &request.response_format {
            Some(format) => {
                if self.constraints.is_none() {
                    self.constraints = Some(ConstraintCompiler::new(&self.tokenizer)?);
                }
                Some(self.constraints.as_ref().expect("built above").compile(format)?)
            }
            None => None,
        };
        let stops = StopTracker::new(StopConditions {
            eos_token_ids: self.tokenizer.end_of_generation_ids().to_vec(),
            ignore_eos: request.ignore_eos,
            max_tokens: Some(request.max_tokens),
            stop_strings: request.stop.clone(),
        });
        let checkpoints = self.state_checkpoints(&request.prompt, &prompt_tokens);
        let mut state = GenerationState::new(request, prompt_tokens, sampler, stops, constraint, &self.tokenizer)?;
        state.keep_state_at(checkpoints);
        Ok(state)
    }

    /// Makes the cache hold `tokens` minus at least the last one, keeping the longest prefix it
    /// already holds; returns how many tokens were kept (the caller runs the rest). A recurrent
    /// cache may keep fewer than the common prefix (it goes back to a checkpoint): the tokens
    /// after it are run again, counted as prefilled, not cached.
    fn reuse_cache_prefix(&mut self, tokens: &[u32]) -> usize {
        let common = self.cached_tokens.iter().zip(tokens).take_while(|(a, b)| a == b).count();
        let keep = self.cache.truncate(common.min(tokens.len() - 1));
        self.cached_tokens.truncate(keep);
        keep
    }

    /// Runs `tokens` after what the cache holds, then keeps the recurrent state there (a
    /// checkpoint: [`KvCache::checkpoint`]); `after_block` as [`Model::advance`] calls it.
    fn advance_to_checkpoint(&mut self, tokens: &[u32], after_block: &mut dyn FnMut(usize)) -> Result<(), EngineError> {
        self.model.advance(tokens, &mut self.cache, after_block)?;
        self.cached_tokens.extend_from_slice(tokens);
        self.cache.checkpoint();
        Ok(())
    }

    /// Where a prefill of `prompt` (its tokens `prompt_tokens`) keeps the recurrent state besides
    /// before the context's last token (which the prefill always keeps: prefix reuse runs that
    /// token again), for a cache that goes back through checkpoints (recurrent blocks, a
    /// window's ring: [`KvCache::needs_checkpoints`]; none otherwise): for a chat, where the
    /// conversation so far ends, before the template's generation prompt (a next turn renders
    /// that part again the same way, and changes what follows). Each costs a copy of the state
    /// and splits the prefill's pass there. A template that cannot render without the
    /// generation prompt gives none.
    fn state_checkpoints(&self, prompt: &Prompt, prompt_tokens: &[u32]) -> Vec<usize> {
        let Prompt::Chat(messages) = prompt else { return Vec::new() };
        if !self.cache.needs_checkpoints() {
            return Vec::new();
        }
        let so_far =
            self.tokenizer.render_chat_so_far(messages).ok().and_then(|text| self.tokenizer.encode(&text).ok());
        match so_far {
            Some(so_far) if so_far.len() < prompt_tokens.len() && prompt_tokens.starts_with(&so_far) => {
                vec![so_far.len()]
            }
            _ => Vec::new(),
        }
    }

    /// Runs `tokens` after what the cache holds and returns the last position's logits, still on
    /// the device.
    fn forward_last(&mut self, tokens: &[u32]) -> Result<DeviceLogits, EngineError> {
        self.forward_last_observed(tokens, &mut |_| {})
    }

    /// [`Engine::forward_last`], calling `after_block(n)` as the pass's first `n` blocks are
    /// done (on the CPU engine: [`Model::forward_observed`]).
    fn forward_last_observed(
        &mut self,
        tokens: &[u32],
        after_block: &mut dyn FnMut(usize),
    ) -> Result<DeviceLogits, EngineError> {
        let logits = self.model.forward_observed(tokens, &mut self.cache, Logits::Last, after_block)?;
        self.cached_tokens.extend_from_slice(tokens);
        Ok(logits)
    }

    /// Runs `tokens` after what the cache holds and returns every position's logits (a draft's
    /// verification), still on the device.
    fn forward_all(&mut self, tokens: &[u32]) -> Result<DeviceLogits, EngineError> {
        let logits = self.model.forward(tokens, &mut self.cache, Logits::All)?;
        self.cached_tokens.extend_from_slice(tokens);
        Ok(logits)
    }

    /// Forgets cached positions from `len` on (the rejected part of a draft). A recurrent cache
    /// goes back to the checkpoint taken before the verification pass, and the tokens from
    /// there to `len` run again (the rejected tokens' writes to the state are gone with it).
    fn rollback_cache(&mut self, len: usize) -> Result<(), EngineError> {
        let kept = self.cache.truncate(len);
        if kept < len {
            let replay = self.cached_tokens[kept..len].to_vec();
            self.cached_tokens.truncate(kept);
            self.forward_last(&replay)?;
        }
        self.cached_tokens.truncate(len);
        Ok(())
    }
}

/// Fewest tokens in a reported prefill chunk (on a GPU path; the CPU engine reports its blocks
/// within one pass instead): below this a chunk costs about as much as a decode step, since a
/// forward pass is dispatch-bound.
pub const PREFILL_CHUNK_MIN: usize = 16;
/// Most chunks (reports) in one reported prefill.
pub const PREFILL_CHUNKS_MAX: usize = 16;

/// Tokens per chunk of a reported prefill of `tokens` tokens: at least [`PREFILL_CHUNK_MIN`],
/// and at most [`PREFILL_CHUNKS_MAX`] chunks.
pub fn prefill_chunk_len(tokens: usize) -> usize {
    tokens.div_ceil(PREFILL_CHUNKS_MAX).max(PREFILL_CHUNK_MIN)
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

    /// See [`Engine::step_reporting`].
    pub async fn next_step_reporting(
        &mut self,
        on_prefill: &mut dyn FnMut(PrefillProgress),
    ) -> Result<Option<Step>, EngineError> {
        self.engine.step_reporting(&mut self.state, on_prefill).await
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
        state.next_step(self, None).await
    }

    /// Like [`Engine::step`], but a first step runs its prompt in chunks (see
    /// [`prefill_chunk_len`]), waits for each to run on the device, and reports the tokens done
    /// after each to `on_prefill`, the last when the first token is known. Costs one wait per
    /// chunk; for a page that shows a progress bar.
    pub async fn step_reporting(
        &mut self,
        state: &mut GenerationState,
        on_prefill: &mut dyn FnMut(PrefillProgress),
    ) -> Result<Option<Step>, EngineError> {
        state.next_step(self, Some(on_prefill)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(basename: Option<&str>, size_label: Option<&str>) -> ModelInfo {
        ModelInfo {
            name: "Smollm2 135M 8k Lc100K Mix1 Ep2".into(),
            basename: basename.map(Into::into),
            size_label: size_label.map(Into::into),
            quantization: "Q4_1".into(),
            architecture: "llama".into(),
            vocab_size: 49_152,
            chat_template: true,
            context_length: 8192,
            parameters: 134_515_008,
            file_bytes: 98_160_000,
            path: "fused",
            weight_bytes: 0,
            kv_bytes_per_token: 30 * 2 * 192 * 4,
            kv_window: None,
            state_bytes: 0,
            skipped_blocks: 0,
        }
    }

    #[test]
    fn a_model_is_titled_by_its_file_name_else_its_basename_else_its_name() {
        let with_basename = info(Some("SmolLM2"), Some("135M"));
        for file in [
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "models/SmolLM2-135M-Instruct-q4_1.gguf",
            "https://example.org/m/SmolLM2-135M-Instruct.Q4_1.gguf?download=1",
            "C:\\models\\SmolLM2-135M-Instruct.gguf",
        ] {
            let title = with_basename.title(Some(file));
            assert_eq!(title, "SmolLM2-135M-Instruct · llama · Q4_1 · 98 MB · 49,152 tokens", "{file}");
        }
        assert_eq!(with_basename.title(None), "SmolLM2-135M · llama · Q4_1 · 98 MB · 49,152 tokens");
        let unnamed = info(None, None).title(Some(""));
        assert_eq!(unnamed, "Smollm2 135M 8k Lc100K Mix1 Ep2 · llama · Q4_1 · 98 MB · 49,152 tokens");
        let gemma = ModelInfo {
            quantization: "Q4_K_M".into(),
            architecture: "gemma3".into(),
            vocab_size: 262_144,
            file_bytes: 253_113_024,
            ..info(Some("gemma-3"), Some("270M"))
        };
        assert_eq!(
            gemma.title(Some("gemma-3-270m-q4_k_m.gguf")),
            "gemma-3-270m · gemma3 · Q4_K_M · 253 MB · 262,144 tokens"
        );
    }
}
