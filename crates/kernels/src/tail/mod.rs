//! The decode tail: the last step of a decode (logits → candidates) on the GPU, in our own
//! shaders, so each token reads back `16 + 8·K` bytes instead of the whole row (see the crate
//! documentation's "Decode tail" and ARCHITECTURE.md for the buffer layouts).
//!
//! Two routes run the same three shaders: [`fused::TailKernels`] records them into the fused
//! forward pass's own command encoder, so a decode step is one submission; with the `burn-ops`
//! feature, [`decode_tail`] and its siblings (`tensor.rs`) take a Burn tensor and launch them
//! through Burn's custom-kernel route (`burn_ops.rs`), for the Burn-op path.

pub mod adjust;
#[cfg(feature = "burn-ops")]
mod burn_ops;
#[cfg(feature = "gpu")]
pub mod fused;
pub(crate) mod layout;
#[cfg(feature = "burn-ops")]
mod tensor;

use crate::{KernelError, reference};

pub use self::layout::{
    BLOCK_LEN, CHUNK_LEN, FLAG_NAN, FLAG_NO_FINITE, FLAG_POSITIVE_INFINITY, HEADER_WORDS, MAX_K, MAX_VOCAB,
    WORKGROUP_SIZE, packed_words,
};
#[cfg(feature = "burn-ops")]
pub use self::tensor::{
    PendingTail, adjust_logits, decode_tail, decode_tail_enqueue, decode_tail_with_raw, softmax, softmax_stats, top_k,
};

/// What one decode tail computes.
#[derive(Debug, Clone, Copy)]
pub struct TailRequest<'a> {
    /// Applied to a copy of the row before the statistics (skipped when empty); the row itself
    /// stays the model's.
    pub adjustments: &'a adjust::LogitAdjustments,
    /// Temperature of the statistics (finite, > 0, 1/T finite).
    pub temperature: f32,
    /// Candidates, 1..=256.
    pub k: usize,
    /// `Some(n)`: also the raw row's statistics at temperature 1 and its top `n` (none when 0),
    /// recorded before the adjustments.
    pub raw_top_k: Option<usize>,
}

/// Softmax statistics of one row (see the crate docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SoftmaxStats {
    /// `m`: the largest finite adjusted logit (unscaled).
    pub max: f32,
    /// `S = Σ exp((x − m)/T)` over the finite logits; `1 ≤ S ≤ V`.
    pub sum_exp: f32,
    /// `ln S` (rounded from f64): the log-sum-exp of the scaled logits shifted by `m/T`.
    pub log_sum_exp: f32,
    /// The temperature `T`.
    pub temperature: f32,
    /// Bytes read back from the device for this result.
    pub bytes_read: usize,
}

impl SoftmaxStats {
    pub(crate) fn new(max: f32, sum_exp: f32, temperature: f32, bytes_read: usize) -> Self {
        Self { max, sum_exp, log_sum_exp: f64::from(sum_exp).ln() as f32, temperature, bytes_read }
    }

    /// `log p(logit) = (logit − m)·(1/T) − ln S`, the argument rounded to f32 as on the device.
    pub fn log_probability(&self, logit: f32) -> f64 {
        if logit == f32::NEG_INFINITY {
            return f64::NEG_INFINITY;
        }
        let inverse_temperature = 1.0 / self.temperature;
        f64::from(reference::scaled_argument(logit, self.max, inverse_temperature)) - f64::from(self.sum_exp).ln()
    }

    /// The full-vocabulary probability of a logit of this row.
    pub fn probability(&self, logit: f32) -> f64 {
        self.log_probability(logit).exp()
    }

    /// The unshifted log-sum-exp `ln Σ exp(x/T) = m/T + ln S`, in f64.
    pub fn scaled_log_sum_exp(&self) -> f64 {
        f64::from(self.max) / f64::from(self.temperature) + f64::from(self.sum_exp).ln()
    }
}

/// The probabilities of one row and their statistics ([`softmax`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SoftmaxOutput {
    /// The statistics (`bytes_read` counts the probabilities too).
    pub stats: SoftmaxStats,
    /// `p[id]`, one per vocabulary entry.
    pub probabilities: Vec<f32>,
}

/// The top-k of one row ([`top_k`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TopK {
    /// `min(K, V)` ids, best first.
    pub ids: Vec<u32>,
    /// Their logits, descending.
    pub logits: Vec<f32>,
    /// Bytes read back from the device for this result (0 for the CPU reference).
    pub bytes_read: usize,
}

/// The result of one decode tail ([`decode_tail`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TailOutput {
    /// `min(K, V)` candidate ids, best first (ties to the lower id).
    pub ids: Vec<u32>,
    /// Their adjusted logits (unscaled), descending.
    pub logits: Vec<f32>,
    /// `m`: the largest finite adjusted logit (`logits[0]`).
    pub max: f32,
    /// `ln S`, `S = Σ exp((x − m)/T)` over the whole row: see [`Self::log_probability`].
    pub log_sum_exp: f32,
    /// `S` as computed on the device.
    pub sum_exp: f32,
    /// The temperature `T`.
    pub temperature: f32,
    /// Bytes read back from the device: `16 + 8K`.
    pub bytes_read: usize,
}

impl TailOutput {
    /// The statistics part.
    pub fn stats(&self) -> SoftmaxStats {
        SoftmaxStats {
            max: self.max,
            sum_exp: self.sum_exp,
            log_sum_exp: self.log_sum_exp,
            temperature: self.temperature,
            bytes_read: self.bytes_read,
        }
    }

    /// The full-vocabulary log-probability of a logit of this row (e.g. `self.logits[i]`).
    pub fn log_probability(&self, logit: f32) -> f64 {
        self.stats().log_probability(logit)
    }

    /// The full-vocabulary probability of a logit of this row.
    pub fn probability(&self, logit: f32) -> f64 {
        self.stats().probability(logit)
    }
}

/// `1/T` in f32 for a finite `T > 0` whose reciprocal is finite.
pub fn inverse_temperature(temperature: f32) -> Result<f32, KernelError> {
    if !(temperature.is_finite() && temperature > 0.0) {
        return Err(KernelError::invalid("temperature", format!("must be finite and > 0, got {temperature}")));
    }
    let inverse = 1.0 / temperature;
    if !inverse.is_finite() {
        return Err(KernelError::invalid("temperature", format!("{temperature} is too small: 1/T overflows f32")));
    }
    Ok(inverse)
}

/// Checks `1 ≤ k ≤ 256`.
pub fn validate_k(k: usize) -> Result<(), KernelError> {
    if (1..=MAX_K).contains(&k) {
        Ok(())
    } else {
        Err(KernelError::invalid("k", format!("must be in 1..={MAX_K}, got {k}")))
    }
}

/// What [`decode_tail_with_raw`] reports about the row *before* the adjustments: the model's
/// raw distribution.
#[derive(Debug, Clone, PartialEq)]
pub struct RawRow {
    /// Statistics at temperature 1: `log p(x) = x − max − ln S` for any raw logit `x`.
    pub stats: SoftmaxStats,
    /// The raw top-k, when asked for (`raw_top_k > 0`).
    pub top: Option<TopK>,
}

/// A decode tail's result from its packed words (`4 + 2k`).
#[cfg(feature = "gpu")]
pub(crate) fn tail_output(words: &[u32], k: usize, temperature: f32) -> Result<TailOutput, KernelError> {
    let bytes_read = words.len() * 4;
    let packed = layout::unpack(words, k, true)?;
    let stats = SoftmaxStats::new(packed.max, packed.sum_exp, temperature, bytes_read);
    Ok(TailOutput {
        ids: packed.ids,
        logits: packed.logits,
        max: stats.max,
        log_sum_exp: stats.log_sum_exp,
        sum_exp: stats.sum_exp,
        temperature,
        bytes_read,
    })
}

/// The raw row's statistics at temperature 1 (and its top `raw_top_k`, when > 0) from its
/// packed words (`4`, or `4 + 2·raw_top_k`); the statistics count 16 bytes read, the top list
/// `top_bytes`.
pub fn raw_row(words: &[u32], raw_top_k: usize, top_bytes: usize) -> Result<RawRow, KernelError> {
    let packed = layout::unpack(words, raw_top_k, raw_top_k > 0)?;
    let stats = SoftmaxStats::new(packed.max, packed.sum_exp, 1.0, HEADER_WORDS * 4);
    let top = (raw_top_k > 0).then_some(TopK { ids: packed.ids, logits: packed.logits, bytes_read: top_bytes });
    Ok(RawRow { stats, top })
}
