//! The decode tail on Burn tensors (the Burn-op path): each function validates its row and
//! parameters, launches the shaders through Burn's custom-kernel route (`burn_ops.rs`) and reads
//! the packed result asynchronously.

use burn::backend::{Dispatch, DispatchDevice};
use burn::tensor::{DType, Tensor, TensorData, Transaction};

use super::adjust::LogitAdjustments;
use super::burn_ops::DecodeTailOps;
use super::layout::{self, MAX_VOCAB, packed_words};
use super::{
    RawRow, SoftmaxOutput, SoftmaxStats, TailOutput, TopK, inverse_temperature, raw_row, tail_output, validate_k,
};
use crate::KernelError;

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
