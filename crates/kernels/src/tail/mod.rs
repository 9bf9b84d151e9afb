//! The decode tail: the last step of a decode (logits → candidates) on the GPU, in our own
//! shaders, so each token reads back `16 + 8·K` bytes instead of the whole row (see the crate
//! documentation's "Decode tail" and ARCHITECTURE.md for the buffer layouts).
//!
//! Two routes run the same three shaders: [`decode_tail`] and its siblings take a Burn tensor
//! (`burn_ops`: Burn's custom-kernel route, used on the Burn-op path), and [`fused::TailKernels`]
//! records them into the fused forward pass's own command encoder, so a decode step is one
//! submission.

pub mod adjust;
mod burn_ops;
pub mod fused;
pub(crate) mod layout;

use burn::backend::{Dispatch, DispatchDevice};
use burn::tensor::{DType, Tensor, TensorData, Transaction};

use self::adjust::LogitAdjustments;
use self::burn_ops::DecodeTailOps;
use crate::{KernelError, reference};

pub use self::layout::{
    BLOCK_LEN, CHUNK_LEN, FLAG_NAN, FLAG_NO_FINITE, FLAG_POSITIVE_INFINITY, HEADER_WORDS, MAX_K, MAX_VOCAB,
    WORKGROUP_SIZE, packed_words,
};

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

/// Checks that `logits` is a `[1, V]` f32 tensor on a wgpu device with `1 ≤ V ≤ 2^24`; returns V.
fn validate_row(logits: &Tensor<2>) -> Result<usize, KernelError> {
    let [rows, vocab] = logits.dims();
    if rows != 1 {
        return Err(KernelError::invalid("logits", format!("must have shape [1, vocab], got [{rows}, {vocab}]")));
    }
    if vocab == 0 || vocab > MAX_VOCAB {
        return Err(KernelError::invalid("logits", format!("vocabulary size must be in 1..={MAX_VOCAB}, got {vocab}")));
    }
    if logits.dtype() != DType::F32 {
        return Err(KernelError::UnsupportedInput(format!("the kernels read f32 logits, got {:?}", logits.dtype())));
    }
    match logits.device().as_dispatch() {
        DispatchDevice::Cube(burn::cubecl::Device::Wgpu(_)) => Ok(vocab),
        other => {
            Err(KernelError::UnsupportedInput(format!("the WGSL kernels run on wgpu devices only, got {other:?}")))
        }
    }
}

async fn read_words<const D: usize>(tensor: Tensor<D>) -> Result<(Vec<u32>, usize), KernelError> {
    let data: TensorData = tensor.into_data_async().await.map_err(|e| KernelError::Device(format!("{e:?}")))?;
    let bytes = data.as_bytes();
    Ok((layout::words_of(bytes), bytes.len()))
}

/// Applies `adjustments` to the row on the device (in place when its buffer is not shared);
/// nothing is read back. Validates the adjustments against the vocabulary first.
pub fn adjust_logits(logits: Tensor<2>, adjustments: &LogitAdjustments) -> Result<Tensor<2>, KernelError> {
    let vocab = validate_row(&logits)?;
    let plan = adjustments.plan(vocab)?;
    if plan.is_empty() {
        return Ok(logits);
    }
    Ok(Tensor::from_dispatch(Dispatch::logit_adjust(logits.into_dispatch(), plan)))
}

/// Softmax statistics of the row at temperature `T`; reads back 16 bytes.
pub async fn softmax_stats(logits: Tensor<2>, temperature: f32) -> Result<SoftmaxStats, KernelError> {
    validate_row(&logits)?;
    let inverse_temperature = inverse_temperature(temperature)?;
    let stats: Tensor<1> = Tensor::from_dispatch(Dispatch::softmax_stats(logits.into_dispatch(), inverse_temperature));
    let (words, bytes_read) = read_words(stats).await?;
    let packed = layout::unpack(&words, 0, false)?;
    Ok(SoftmaxStats::new(packed.max, packed.sum_exp, temperature, bytes_read))
}

/// The probabilities of the row at temperature `T` and their statistics; reads back the whole
/// row (for inspection and tests; the decode loop uses [`decode_tail`]).
pub async fn softmax(logits: Tensor<2>, temperature: f32) -> Result<SoftmaxOutput, KernelError> {
    validate_row(&logits)?;
    let inverse_temperature = inverse_temperature(temperature)?;
    let (stats, probabilities) = Dispatch::softmax(logits.into_dispatch(), inverse_temperature);
    let stats: Tensor<1> = Tensor::from_dispatch(stats);
    let probabilities: Tensor<2> = Tensor::from_dispatch(probabilities);
    let (words, stats_bytes) = read_words(stats).await?;
    let packed = layout::unpack(&words, 0, false)?;
    let (probability_words, probability_bytes) = read_words(probabilities).await?;
    Ok(SoftmaxOutput {
        stats: SoftmaxStats::new(packed.max, packed.sum_exp, temperature, stats_bytes + probability_bytes),
        probabilities: probability_words.into_iter().map(f32::from_bits).collect(),
    })
}

/// The `min(k, V)` largest logits of the row with their ids; reads back `16 + 8k` bytes.
pub async fn top_k(logits: Tensor<2>, k: usize) -> Result<TopK, KernelError> {
    validate_k(k)?;
    validate_row(&logits)?;
    let packed: Tensor<1> = Tensor::from_dispatch(Dispatch::top_k(logits.into_dispatch(), k));
    let (words, bytes_read) = read_words(packed).await?;
    let packed = layout::unpack(&words, k, true)?;
    Ok(TopK { ids: packed.ids, logits: packed.logits, bytes_read })
}

/// A decode tail recorded on the device, not read yet ([`decode_tail_enqueue`]).
#[derive(Debug, Clone)]
pub struct PendingTail {
    /// The packed result, `4 + 2k` words (see the crate docs).
    pub packed: Tensor<1>,
    /// The K it was recorded with.
    pub k: usize,
    /// The temperature it was recorded with.
    pub temperature: f32,
}

impl PendingTail {
    /// Reads the packed result (one `into_data_async`) and decodes it.
    pub async fn read(self) -> Result<TailOutput, KernelError> {
        let (words, _) = read_words(self.packed).await?;
        tail_output(&words, self.k, self.temperature)
    }
}

/// Validates the parameters and records the decode tail (adjust → softmax statistics → top-k)
/// without reading anything back.
pub fn decode_tail_enqueue(
    logits: Tensor<2>,
    adjustments: &LogitAdjustments,
    temperature: f32,
    k: usize,
) -> Result<PendingTail, KernelError> {
    validate_k(k)?;
    let vocab = validate_row(&logits)?;
    let inverse_temperature = inverse_temperature(temperature)?;
    let plan = adjustments.plan(vocab)?;
    let packed = Tensor::from_dispatch(Dispatch::decode_tail(logits.into_dispatch(), plan, inverse_temperature, k));
    Ok(PendingTail { packed, k, temperature })
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

/// The decode tail at temperature `T` (as [`decode_tail`]) together with the statistics of the
/// row *before* the adjustments at temperature 1 and, if `raw_top_k > 0`, its top `raw_top_k`:
/// all recorded before the tail adjusts anything and read back in one transaction
/// (`16 + 8K` + 16 + `16 + 8·raw_top_k` bytes). With them the caller reports the model's raw
/// candidates and log-probabilities while sampling from the adjusted ones.
pub async fn decode_tail_with_raw(
    logits: Tensor<2>,
    adjustments: &LogitAdjustments,
    temperature: f32,
    k: usize,
    raw_top_k: usize,
) -> Result<(TailOutput, RawRow), KernelError> {
    validate_row(&logits)?;
    if raw_top_k > 0 {
        validate_k(raw_top_k)?;
    }
    let raw_stats: Tensor<1> = Tensor::from_dispatch(Dispatch::softmax_stats(logits.clone().into_dispatch(), 1.0));
    let raw_top: Option<Tensor<1>> =
        (raw_top_k > 0).then(|| Tensor::from_dispatch(Dispatch::top_k(logits.clone().into_dispatch(), raw_top_k)));
    // The tail adjusts a buffer the raw reads still share: it is copied first, the raw row stays.
    let pending = decode_tail_enqueue(logits, adjustments, temperature, k)?;
    let mut transaction = Transaction::default().register(pending.packed).register(raw_stats);
    if let Some(raw_top) = raw_top {
        transaction = transaction.register(raw_top);
    }
    let mut data = transaction.execute_async().await.map_err(|e| KernelError::Device(format!("{e:?}")))?.into_iter();
    let mut next =
        || data.next().ok_or_else(|| KernelError::MalformedResult("a read is missing from the transaction".into()));
    let tail = tail_output(&layout::words_of(next()?.as_bytes()), pending.k, temperature)?;
    let mut raw_words = layout::words_of(next()?.as_bytes());
    if raw_top_k > 0 {
        // The top-k result's words 3.. behind the statistics' words 0..2, as one packed result.
        let top = layout::words_of(next()?.as_bytes());
        raw_words.truncate(3);
        raw_words.extend_from_slice(&top[3..]);
        raw_words[0] |= top[0];
    }
    // Bytes as read: the statistics (16), and the top list's own packed result.
    let top_bytes = if raw_top_k > 0 { packed_words(raw_top_k) * 4 } else { 0 };
    Ok((tail, raw_row(&raw_words, raw_top_k, top_bytes)?))
}

/// A decode tail's result from its packed words (`4 + 2k`).
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
pub(crate) fn raw_row(words: &[u32], raw_top_k: usize, top_bytes: usize) -> Result<RawRow, KernelError> {
    let packed = layout::unpack(words, raw_top_k, raw_top_k > 0)?;
    let stats = SoftmaxStats::new(packed.max, packed.sum_exp, 1.0, HEADER_WORDS * 4);
    let top = (raw_top_k > 0).then_some(TopK { ids: packed.ids, logits: packed.logits, bytes_read: top_bytes });
    Ok(RawRow { stats, top })
}

/// The decode tail: applies `adjustments`, takes the softmax statistics at temperature `T` and
/// the top-`k`, and reads the `16 + 8k`-byte result with one `into_data_async`.
pub async fn decode_tail(
    logits: Tensor<2>,
    adjustments: &LogitAdjustments,
    temperature: f32,
    k: usize,
) -> Result<TailOutput, KernelError> {
    decode_tail_enqueue(logits, adjustments, temperature, k)?.read().await
}
