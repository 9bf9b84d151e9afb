//! What the CPU engine will hold in the process's memory (the browser's wasm memory), from a
//! file's header alone: known before the file is downloaded, so that a model that cannot fit is
//! refused before it is ([`HostPlan::check`]), naming the largest context that would fit.
//!
//! The file is in memory once and the matrices are read where they lie in it (see
//! `nucleus_gguf::SharedBytes`); beside it the engine holds the vectors as f32, the KV cache
//! (grown as positions are written, counted here at the whole context; a local block's is a ring
//! of its window, `window.rs`), the recurrent state and
//! its checkpoints and a pass's logits. Left out: the tokenizer's tables and the activations of a
//! pass (its RoPE rows among them), a few MiB.

use nucleus_gguf::GgufHeader;

use crate::architecture::Role;
use crate::{MAX_LOGIT_ROWS, ModelConfig, ModelError, weights};

/// The most a wasm32 memory can hold (65,536 pages of 64 KiB): the browser's CPU engine, and
/// the file's copy on every backend, live in it.
pub const WASM32_MEMORY_BYTES: u64 = 1 << 32;

/// The CPU engine's memory for one model at one context length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPlan {
    /// The whole file, matrices read in place.
    pub file: u64,
    /// Norms' and biases' vectors (and Qwen3.5's convolution taps) as f32.
    pub vectors: u64,
    /// Every attention block's keys and values (f32) at the whole context: every position of a
    /// global block, a local block's ring (and the window rows its checkpoints copy).
    pub kv_cache: u64,
    /// The recurrent blocks' state with its checkpoints.
    pub recurrent_state: u64,
    /// A pass's logits rows.
    pub logits: u64,
    /// Positions the plan is for.
    pub context_length: usize,
    /// Bytes each position adds (its keys and values in the global blocks).
    pub position_bytes: u64,
}

impl HostPlan {
    /// The plan for `header` (whose configuration is `config`) at `context_length` positions.
    pub fn new(header: &GgufHeader, config: &ModelConfig, context_length: usize) -> Result<Self, ModelError> {
        let vectors = weights::tensors(header, config)?
            .iter()
            .filter(|(role, _, info)| info.dims.len() == 1 || *role == Role::DeltaConv)
            .map(|(_, _, info)| info.element_count() * 4)
            .sum();
        // The state, its checkpoints and the one kept before a multi-token pass (state.rs).
        let copies = crate::state::MAX_CHECKPOINTS as u64 + 2;
        let (position_bytes, rings) = crate::cpu::planned_rows(config, context_length);
        Ok(Self {
            file: header.file_len,
            vectors,
            kv_cache: position_bytes * context_length as u64 + rings,
            recurrent_state: copies * config.recurrent_state_bytes(),
            logits: (MAX_LOGIT_ROWS * config.vocab_size * 4) as u64,
            context_length,
            position_bytes,
        })
    }

    /// Everything together.
    pub fn total_bytes(&self) -> u64 {
        self.file + self.vectors + self.kv_cache + self.recurrent_state + self.logits
    }

    /// What does not grow with the context (the rings counted as they are at this one).
    fn fixed_bytes(&self) -> u64 {
        self.total_bytes() - self.position_bytes * self.context_length as u64
    }

    /// The most positions that fit in `limit` bytes (0 when the rest alone does not).
    pub fn max_context_length(&self, limit: u64) -> usize {
        let positions = limit.saturating_sub(self.fixed_bytes()) / self.position_bytes.max(1);
        usize::try_from(positions).unwrap_or(usize::MAX)
    }

    /// Where the GPU's plan was refused: the CPU engine as the other backend, when it runs the
    /// same context within `limit` (`(bytes, whose)`; natively there is none): "the CPU engine
    /// would run it at 8192 positions (backend cpu, 412.0 MiB of this browser's WebAssembly
    /// memory)". `None` when it would not fit either.
    pub fn as_the_other_backend(&self, limit: Option<(u64, &str)>) -> Option<String> {
        let room = match limit {
            Some((bytes, whose)) => {
                self.check(bytes, whose).ok()?;
                format!("{} of {whose}", mib(self.total_bytes()))
            }
            None => format!("{} of memory", mib(self.total_bytes())),
        };
        Some(format!("the CPU engine would run it at {} positions (backend cpu, {room})", self.context_length))
    }

    /// Refuses the plan when it needs more than `limit` bytes (`limit_name` says whose):
    /// [`ModelError::OutOfMemory`] naming what takes what and the largest context that fits.
    pub fn check(&self, limit: u64, limit_name: &str) -> Result<(), ModelError> {
        if self.total_bytes() <= limit {
            return Ok(());
        }
        let fits = match self.max_context_length(limit) {
            0 => "no context length would fit".to_string(),
            n => format!("contextLength {n} or less would fit"),
        };
        Err(ModelError::OutOfMemory(format!(
            "the CPU engine needs {} ({} of file, {} of KV cache for {} positions, {} of state, \
             vectors and logits), more than {limit_name} ({}): {fits}",
            mib(self.total_bytes()),
            mib(self.file),
            mib(self.kv_cache),
            self.context_length,
            mib(self.recurrent_state + self.vectors + self.logits),
            mib(limit),
        )))
    }
}

/// Bytes as MiB with one decimal, as the memory errors write them.
pub(crate) fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}
