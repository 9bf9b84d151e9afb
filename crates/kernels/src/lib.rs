//! # nucleus-kernels: the decode tail in WGSL
//!
//! The last step of a decode (logits → candidates) runs on the GPU in our own shaders
//! (`shaders/*.wgsl`), so each token reads back `16 + 8·K` bytes (176 bytes for K = 20) instead
//! of the whole row (196,608 bytes for a 49,152-token vocabulary).
//!
//! ```text
//! logits [1, V] f32 (on the device)
//!   │
//!   ├─► logit_adjust.wgsl ─────────── in place: bias, penalties, allow-mask (skipped when there are none)
//!   │
//!   ├─► softmax_stats.wgsl pass 0 ─── ⌈V/4096⌉ workgroups, no barriers: one record per block of 16 ids
//!   │                                 (largest order key, block max, block Σexp, flags)
//!   ├─► softmax_stats.wgsl pass 1 ─── 1 workgroup: flags, m, S       ──► packed words 0..2
//!   └─► topk.wgsl ─────────────────── 1 workgroup: threshold from the block maxima, candidates,
//!                                     radix select, rank              ──► packed words 3..
//!                                                      one `into_data_async` of 4 + 2K words
//! ```
//!
//! [`decode_tail`] runs these dispatches and reads the packed result once, asynchronously
//! (`into_data_async`, the only kind of read the browser allows). [`adjust_logits`],
//! [`softmax_stats`], [`softmax`] (adds pass 2, the probabilities) and [`top_k`] run the kernels
//! on their own. [`reference`](mod@reference) holds the CPU reference of each kernel; the tests compare them.
//!
//! ## Semantics
//!
//! - **Adjustment** ([`LogitAdjustment`]): `v = ((v + bias) · scale) + offset`, the scale
//!   being `scale_positive` when `v + bias > 0`, else `scale_non_positive`; IEEE f32, each step
//!   rounded. Bias, CTRL repetition penalty and presence/frequency penalties map onto it
//!   ([`LogitAdjustments::from_penalties`]). Then the optional allow-mask sets disallowed tokens
//!   to `-inf` (a NaN or `+inf` is kept, so that it is reported).
//! - **Softmax with temperature** `T` (finite, `> 0`): `m` = largest finite adjusted logit,
//!   `S = Σ exp((x − m)·(1/T))` over the finite logits (`1/T` rounded to f32 once),
//!   `log_sum_exp = ln S`, so `log p(x) = (x − m)·(1/T) − ln S` for any logit `x` of the row
//!   ([`TailOutput::log_probability`]). `-inf` logits have probability 0. A row holding NaN, or
//!   `+inf`, or no finite logit is an error ([`KernelError::NanLogits`],
//!   [`KernelError::PositiveInfiniteLogits`], [`KernelError::NoFiniteLogits`]), never a NaN.
//!   Accuracy against the f64 reference: `m` exact, `S` within 1e-6 relative (measured ~1e-7),
//!   probabilities within the `exp` bound of WebGPU/Vulkan (`3 + 2|x|` ulp of the argument `x`).
//! - **Top-k** (`1 ≤ K ≤ 256`): the `min(K, V)` largest adjusted logits (unscaled) with their
//!   ids, descending; `-0.0 == +0.0` (reported as `+0.0`); ties go to the lower id, so the result
//!   is unique and deterministic. NaN is an error. `-inf` logits are ordinary values here: with
//!   fewer than K finite logits the rest of the list is `-inf`, lowest ids first.
//!
//! ## Buffer layouts
//!
//! All shaders: workgroup size 256 × 1 × 1, bind group 0, entry point `main`, f32 only (no
//! `shader-f16`). Every binding is a `var<storage, read_write>` (the runtime may sub-allocate
//! several small buffers from one wgpu buffer, which cannot be bound read-only and read-write in
//! one dispatch); "reads"/"writes" below is what the kernel does. Words are little-endian u32;
//! "f32 bits" = `f32::to_bits`. Each `.wgsl` file starts with the same tables.
//!
//! `logit_adjust.wgsl`, dispatch `(min(⌈max(n, ⌈V/32⌉ if masked) / 256⌉, 1024), 1, 1)`,
//! grid-stride loops:
//!
//! | binding | array | use | layout |
//! |---|---|---|---|
//! | 0 | `f32` | reads, writes | logits `[V]`, modified in place |
//! | 1 | `u32` | reads | `[V, n, has_mask, 0]` |
//! | 2 | `u32` | reads | `n` entries of 5 words: `id, bias, scale_positive, scale_non_positive, offset` (f32 bits) |
//! | 3 | `u32` | reads | allow-mask, `⌈V/32⌉` words, bit `id % 32` of word `id / 32` = allowed (1 word when unused) |
//!
//! `softmax_stats.wgsl`, the pass is the dispatch's `z` size minus 1 (a uniform builtin, so the
//! barriers of pass 1 pass WGSL's uniformity analysis); only workgroups with `z = 0` work.
//! Pass 0 `(⌈V/4096⌉, 1, 1)`, pass 1 `(1, 1, 2)`, pass 2 `(min(⌈V/256⌉, 64), 1, 3)`.
//! Block `b = 256c + l` (chunk `c`, lane `l`) holds ids `4096c + l + 256j`, `j < 16`, below `V`;
//! `B = 256·⌈V/4096⌉` blocks.
//!
//! | binding | array | use | layout |
//! |---|---|---|---|
//! | 0 | `f32` | reads (0, 2) | logits `[V]` |
//! | 1 | `u32` | reads | `[0, V, 1/T (f32 bits), B, 0, 0, 0, 0]` |
//! | 2 | `u32` | writes (0), reads (1) | `4B` words, record `b`: largest order key of its non-NaN logits (0 if none), block max `m_b` (f32 bits), `s_b = Σ exp((x − m_b)/T)` (f32 bits), flags (bit 0 NaN, bit 1 `+inf`, bit 3 has a finite logit) |
//! | 3 | `u32` | writes (1), reads (2) | words 0..2 of the packed result |
//! | 4 | `f32` | writes (2) | probabilities `[V]`, only with no flag (1 word when unused) |
//!
//! `topk.wgsl`, dispatch `(1, 1, 1)`:
//!
//! | binding | array | use | layout |
//! |---|---|---|---|
//! | 0 | `u32` | reads | logits `[V]` (f32 bits) |
//! | 1 | `u32` | reads | `[V, K, B, 0, 0, 0, 0, 0]` |
//! | 2 | `u32` | reads | the block records of `softmax_stats.wgsl` pass 0 (words 0 and 3 of each) |
//! | 3 | `u32` | reads, writes | the packed result: word 0 `|=` NaN, words 3.. |
//!
//! The **packed result** (`4 + 2K` words, read back once):
//!
//! | words | content | written by |
//! |---|---|---|
//! | 0 | flags: bit 0 NaN, bit 1 `+inf`, bit 2 no finite logit | softmax pass 1 (`=`), top-k (`|=` NaN) |
//! | 1 | `m`, the largest finite adjusted logit (f32 bits; `-0.0` as `+0.0`) | softmax pass 1 |
//! | 2 | `S = Σ exp((x − m)/T)` (f32 bits) | softmax pass 1 |
//! | 3 | `n = min(K, V)` | top-k |
//! | 4 .. 4+K | ids, rank 0 first (first `n` valid) | top-k |
//! | 4+K .. 4+2K | adjusted logits (f32 bits), same order | top-k |
//!
//! The standalone [`softmax_stats`] reads words 0..3 only; the standalone [`top_k`] runs
//! softmax pass 0 (for the block records) and `topk.wgsl` on a zeroed buffer.
//!
//! The order key of a logit is its f32 bits made monotonic: `bits | 0x8000_0000` for a
//! non-negative value, `!bits` for a negative one, with `-0.0` first mapped to `+0.0`
//! ([`reference::order_key`]); NaN and infinities are recognised from the bits, never by float
//! comparisons (drivers may assume finite math).
//!
//! ## Linear layers
//!
//! [`linear`] computes `y = x Wᵀ` with `linear.wgsl`, a kernel without workgroup barriers for
//! adapters that run on the CPU, where Burn's matmul is several times slower
//! ([`LinearKernel::for_adapter`] decides; the model calls it for every linear layer when
//! chosen). Workgroup size 64 × 1 × 1, dispatch `(⌈outputs/64⌉, ⌈rows/4⌉, 1)`: each invocation
//! computes up to 4 rows of one output column.
//!
//! | binding | array | use | layout |
//! |---|---|---|---|
//! | 0 | `f32` | reads | `x`, `[rows, inputs]` |
//! | 1 | `f32` | reads | `W`, `[outputs, inputs]` ([`WeightLayout::OutputsByInputs`], layout 0) or `[inputs, outputs]` (layout 1) |
//! | 2 | `f32` | writes | `y`, `[rows, outputs]` |
//! | 3 | `u32` | reads | `[rows, inputs, outputs, layout]`, uploaded once per device and shape |
//!
//! `examples/linear_bench.rs` times it against Burn's matmul; ARCHITECTURE.md has the figures.
//!
//! ## Burn integration
//!
//! The kernels are Burn `KernelSource`s (`lang() = "wgsl"`, entry point `main`, the files'
//! text used as is: no `{{ }}` template placeholders) wrapped in `SourceKernel` and launched with
//! `client.launch` on `CubeBackend`, through a `#[backend_extension(Cube, Fusion)]` trait called
//! from `Tensor` with `into_dispatch`/`Tensor::from_dispatch`. What that implies:
//!
//! - Under fusion each public call is one opaque operation (its output metadata is declared up
//!   front with `#[fusion(dtype = .., shape = ..)]`): the fused graph that produced the logits
//!   runs first, then our dispatches, when the stream is flushed by the read.
//! - The logits are adjusted in place when their buffer is not shared (the public functions take
//!   the tensor by value); a shared buffer (the caller kept a clone) is copied first. A view with
//!   a byte offset is copied too (the shaders index from 0).
//! - A WGSL passthrough module gets wgpu's automatic bind-group layout: every binding is
//!   statically used by `main`, and a pass that does not need one still binds a 1-word buffer.
//!   Parameters travel in small storage buffers (`client.create_from_slice`). Those that repeat
//!   from step to step (shapes, temperature, K) are uploaded once per device and content and
//!   reused: cubecl submits the recorded work before every queue write, so each fresh upload
//!   costs a queue submission.
//! - Only wgpu devices are accepted (a WGSL source cannot run on the CPU, CUDA or Flex runtimes);
//!   another device is a [`KernelError::UnsupportedInput`], not a panic. Burn's `vulkan` feature
//!   (SPIR-V compiler) would refuse WGSL sources; the workspace uses `wgpu`.
//!
//! ## Design notes and measurements
//!
//! The first design was the textbook two-pass top-k: pass 0 radix-selected the top K of every
//! 4096-id group (1 + 2 barriers per round in each of ⌈V/4096⌉ workgroups), pass 1 merged the
//! G·K candidates, and the softmax ran as one 256-invocation workgroup over the row. At
//! V = 49,152 it took 4.0 ms (K = 20) / 4.2 ms (K = 256) per tail on lavapipe and 7.5 / 11.9 ms
//! on SwiftShader (the Vulkan implementation under Chromium's WebGPU, run natively with
//! `VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json`; barriers are costly there),
//! and rows of ties needed all 7 radix rounds over the whole row (up to 15 ms on SwiftShader).
//! The present design moves all per-element work into one barrier-free pass (the block
//! summaries, shared by the softmax and the top-k) and keeps the barriers in two
//! single-workgroup passes over small data: 1.4–2.3 ms per tail on lavapipe and 3.7–7 ms on
//! SwiftShader for K = 20…256 (medians on this 2-core machine, under varying load), with rows of
//! ties (all equal; a mask leaving fewer than K tokens) at most ~1.5× a random row.
//!
//! On these CPU-emulated devices, reading the whole row and selecting on the CPU is about as
//! fast or faster (1.0–1.2 ms on lavapipe and 1.1–1.5 ms natively on SwiftShader at V = 49,152;
//! par at V = 151,936 on lavapipe), because a "device read" is a memcpy there; the tail pays off
//! where reads are expensive (a discrete GPU, the browser's `mapAsync`), which this machine cannot
//! measure. `examples/tail_bench.rs` prints the comparison.

#![warn(missing_docs)]

mod adjust;
mod backend;
mod layout;
mod linear;
pub mod reference;

pub use adjust::{LogitAdjustment, LogitAdjustments};
pub use linear::{LinearKernel, WeightLayout, linear};
pub use layout::{
    BLOCK_LEN, CHUNK_LEN, FLAG_NAN, FLAG_NO_FINITE, FLAG_POSITIVE_INFINITY, HEADER_WORDS, MAX_K,
    MAX_VOCAB, WORKGROUP_SIZE, packed_words,
};

use backend::DecodeTailOps;
use burn::backend::{Dispatch, DispatchDevice};
use burn::tensor::{DType, Tensor, TensorData, Transaction};

/// What can go wrong; parameter errors name the parameter.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KernelError {
    /// A parameter is out of range (`parameter` names it, e.g. `k`, `temperature`,
    /// `adjustments[3].bias`).
    #[error("invalid {parameter}: {reason}")]
    InvalidParameter {
        /// The parameter's name.
        parameter: String,
        /// What is wrong with its value.
        reason: String,
    },
    /// The logits tensor is not a `[1, vocab]` f32 row on a wgpu device.
    #[error("unsupported logits: {0}")]
    UnsupportedInput(String),
    /// A logit (after adjustment) is NaN.
    #[error("the logits contain NaN")]
    NanLogits,
    /// A logit (after adjustment) is `+inf`.
    #[error("the logits contain +inf")]
    PositiveInfiniteLogits,
    /// Every logit (after adjustment and mask) is `-inf`: there is nothing to sample.
    #[error("every logit is -inf")]
    NoFiniteLogits,
    /// The device failed to run the kernels or to read the result.
    #[error("device: {0}")]
    Device(String),
    /// The buffer read back does not have the documented layout.
    #[error("malformed result: {0}")]
    MalformedResult(String),
}

impl KernelError {
    pub(crate) fn invalid(parameter: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidParameter {
            parameter: parameter.into(),
            reason: reason.into(),
        }
    }
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
    fn new(max: f32, sum_exp: f32, temperature: f32, bytes_read: usize) -> Self {
        Self {
            max,
            sum_exp,
            log_sum_exp: f64::from(sum_exp).ln() as f32,
            temperature,
            bytes_read,
        }
    }

    /// `log p(logit) = (logit − m)·(1/T) − ln S`, the argument rounded to f32 as on the device.
    pub fn log_probability(&self, logit: f32) -> f64 {
        if logit == f32::NEG_INFINITY {
            return f64::NEG_INFINITY;
        }
        let inverse_temperature = 1.0 / self.temperature;
        f64::from(reference::scaled_argument(
            logit,
            self.max,
            inverse_temperature,
        )) - f64::from(self.sum_exp).ln()
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
        return Err(KernelError::invalid(
            "temperature",
            format!("must be finite and > 0, got {temperature}"),
        ));
    }
    let inverse = 1.0 / temperature;
    if !inverse.is_finite() {
        return Err(KernelError::invalid(
            "temperature",
            format!("{temperature} is too small: 1/T overflows f32"),
        ));
    }
    Ok(inverse)
}

/// Checks `1 ≤ k ≤ 256`.
pub fn validate_k(k: usize) -> Result<(), KernelError> {
    if (1..=MAX_K).contains(&k) {
        Ok(())
    } else {
        Err(KernelError::invalid(
            "k",
            format!("must be in 1..={MAX_K}, got {k}"),
        ))
    }
}

/// Checks that `logits` is a `[1, V]` f32 tensor on a wgpu device with `1 ≤ V ≤ 2^24`; returns V.
fn validate_row(logits: &Tensor<2>) -> Result<usize, KernelError> {
    let [rows, vocab] = logits.dims();
    if rows != 1 {
        return Err(KernelError::invalid(
            "logits",
            format!("must have shape [1, vocab], got [{rows}, {vocab}]"),
        ));
    }
    if vocab == 0 || vocab > MAX_VOCAB {
        return Err(KernelError::invalid(
            "logits",
            format!("vocabulary size must be in 1..={MAX_VOCAB}, got {vocab}"),
        ));
    }
    if logits.dtype() != DType::F32 {
        return Err(KernelError::UnsupportedInput(format!(
            "the kernels read f32 logits, got {:?}",
            logits.dtype()
        )));
    }
    match logits.device().as_dispatch() {
        DispatchDevice::Cube(burn::cubecl::Device::Wgpu(_)) => Ok(vocab),
        other => Err(KernelError::UnsupportedInput(format!(
            "the WGSL kernels run on wgpu devices only, got {other:?}"
        ))),
    }
}

async fn read_words<const D: usize>(tensor: Tensor<D>) -> Result<(Vec<u32>, usize), KernelError> {
    let data: TensorData = tensor
        .into_data_async()
        .await
        .map_err(|e| KernelError::Device(format!("{e:?}")))?;
    let bytes = data.as_bytes();
    Ok((layout::words_of(bytes), bytes.len()))
}

/// Applies `adjustments` to the row on the device (in place when its buffer is not shared);
/// nothing is read back. Validates the adjustments against the vocabulary first.
pub fn adjust_logits(
    logits: Tensor<2>,
    adjustments: &LogitAdjustments,
) -> Result<Tensor<2>, KernelError> {
    let vocab = validate_row(&logits)?;
    let plan = adjustments.plan(vocab)?;
    if plan.is_empty() {
        return Ok(logits);
    }
    Ok(Tensor::from_dispatch(Dispatch::logit_adjust(
        logits.into_dispatch(),
        plan,
    )))
}

/// Softmax statistics of the row at temperature `T`; reads back 16 bytes.
pub async fn softmax_stats(
    logits: Tensor<2>,
    temperature: f32,
) -> Result<SoftmaxStats, KernelError> {
    validate_row(&logits)?;
    let inverse_temperature = inverse_temperature(temperature)?;
    let stats: Tensor<1> = Tensor::from_dispatch(Dispatch::softmax_stats(
        logits.into_dispatch(),
        inverse_temperature,
    ));
    let (words, bytes_read) = read_words(stats).await?;
    let packed = layout::unpack(&words, 0, false)?;
    Ok(SoftmaxStats::new(
        packed.max,
        packed.sum_exp,
        temperature,
        bytes_read,
    ))
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
        stats: SoftmaxStats::new(
            packed.max,
            packed.sum_exp,
            temperature,
            stats_bytes + probability_bytes,
        ),
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
    Ok(TopK {
        ids: packed.ids,
        logits: packed.logits,
        bytes_read,
    })
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
        let (words, bytes_read) = read_words(self.packed).await?;
        let packed = layout::unpack(&words, self.k, true)?;
        let stats = SoftmaxStats::new(packed.max, packed.sum_exp, self.temperature, bytes_read);
        Ok(TailOutput {
            ids: packed.ids,
            logits: packed.logits,
            max: stats.max,
            log_sum_exp: stats.log_sum_exp,
            sum_exp: stats.sum_exp,
            temperature: self.temperature,
            bytes_read,
        })
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
    let packed = Tensor::from_dispatch(Dispatch::decode_tail(
        logits.into_dispatch(),
        plan,
        inverse_temperature,
        k,
    ));
    Ok(PendingTail {
        packed,
        k,
        temperature,
    })
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
    let mut data = transaction
        .execute_async()
        .await
        .map_err(|e| KernelError::Device(format!("{e:?}")))?
        .into_iter();
    let mut next = || data.next().ok_or_else(|| KernelError::MalformedResult("a read is missing from the transaction".into()));
    let packed_data = next()?;
    let packed = layout::unpack(&layout::words_of(packed_data.as_bytes()), pending.k, true)?;
    let stats = SoftmaxStats::new(packed.max, packed.sum_exp, temperature, packed_data.as_bytes().len());
    let tail = TailOutput {
        ids: packed.ids,
        logits: packed.logits,
        max: stats.max,
        log_sum_exp: stats.log_sum_exp,
        sum_exp: stats.sum_exp,
        temperature,
        bytes_read: packed_data.as_bytes().len(),
    };
    let raw_stats_data = next()?;
    let raw_packed = layout::unpack(&layout::words_of(raw_stats_data.as_bytes()), 0, false)?;
    let raw_stats = SoftmaxStats::new(raw_packed.max, raw_packed.sum_exp, 1.0, raw_stats_data.as_bytes().len());
    let top = if raw_top_k > 0 {
        let raw_top_data = next()?;
        let raw_top = layout::unpack(&layout::words_of(raw_top_data.as_bytes()), raw_top_k, true)?;
        Some(TopK { ids: raw_top.ids, logits: raw_top.logits, bytes_read: raw_top_data.as_bytes().len() })
    } else {
        None
    };
    Ok((tail, RawRow { stats: raw_stats, top }))
}

/// Whether the kernels can run on `device` (a wgpu device: Vulkan, Metal, DX12 or WebGPU).
pub fn supports_device(device: &burn::tensor::Device) -> bool {
    matches!(device.as_dispatch(), DispatchDevice::Cube(burn::cubecl::Device::Wgpu(_)))
}

/// The decode tail: applies `adjustments`, takes the softmax statistics at temperature `T` and
/// the top-`k`, and reads the `16 + 8k`-byte result with one `into_data_async`.
pub async fn decode_tail(
    logits: Tensor<2>,
    adjustments: &LogitAdjustments,
    temperature: f32,
    k: usize,
) -> Result<TailOutput, KernelError> {
    decode_tail_enqueue(logits, adjustments, temperature, k)?
        .read()
        .await
}
