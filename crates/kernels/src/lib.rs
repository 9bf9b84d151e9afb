//! # nucleus-kernels: our WGSL kernels on Burn's wgpu device
//!
//! Two families of kernels, one file each in `shaders/`, each with a CPU reference in
//! [`reference`](mod@reference) and a parity test on lavapipe (`tests/`):
//!
//! - **The layer kernels** ([`layer`]): a whole forward pass of a Llama block in six dispatches,
//!   reading the weights in their GGUF blocks ([`WeightFormat`]; dequantized in the inner loop,
//!   accumulated in f32): `embed`, `attn_qkv` (RMSNorm, Q/K/V, RoPE, KV-cache write),
//!   `attention` + `attention_combine` (one query over the cache, split by key ranges),
//!   `matvec_residual` (output and down projections added to the residual), `ffn_gate_up`
//!   (RMSNorm, gate and up, SiLU·mul), `lm_head` (final RMSNorm and output layer).
//! - **The decode tail** ([`tail`]): logits → candidates (`logit_adjust`, `softmax_stats`,
//!   `topk`), so a decode step reads back `16 + 8K` bytes instead of the whole row.
//!
//! Plus `linear.wgsl` (`linear`), the barrier-free linear layer of the Burn-op path on CPU
//! adapters.
//!
//! ## Two ways to launch
//!
//! - **Recorded on the device directly** (the fused path): [`Gpu`] holds the wgpu device and
//!   queue Burn's backend was created on ([`gpu::init`]). Each kernel has one typed constructor
//!   (`layer::attn_qkv`, ...) taking its parameter struct and its buffers by name; pipelines are
//!   compiled once per GPU, tuning, row count and weight formats and cached; bind groups and
//!   parameter buffers are built once by the caller and recorded per step into one
//!   [`Recorder`]: a decode step is one queue submission. The weights are buffers of our own
//!   ([`Gpu::upload`]), like every other buffer of the path.
//! - **Through Burn's custom-kernel route** (the Burn-op path, the `burn-ops` feature):
//!   `decode_tail` and `linear` take Burn tensors (`burn_launch`).
//!
//! ## The `burn-ops` feature
//!
//! Everything that takes a Burn tensor (the decode tail on tensors, `linear`) and the Burn
//! features it needs (fusion, the custom-kernel route, the CPU backend) are behind `burn-ops`.
//! The CLI and the tests turn it on; the browser build leaves it off, so the wasm module carries
//! no Burn tensor operation: only Burn's wgpu device, which the fused path records on
//! (ARCHITECTURE.md, "The wasm module's size").
//!
//! ## How the layer kernels are written
//!
//! A kernel's module is assembled from `shaders/lib/` (`wgsl.rs`): constants and parameter
//! structs generated from their Rust definitions (one owner: `wgsl_struct!`), binding
//! declarations generated from the kernel's slot list (the same list makes the bind-group
//! layout), the prelude, and per weight binding a `{{W}}` template instantiated with the
//! binding's name: its format's unit reader (eight weights of a row, dequantized) and the dot
//! product over a row. So each matrix kernel is written once for every format, and the formats
//! are written once for every kernel.
//!
//! The matrix kernels give each output row to a group of `TPR` lanes ([`Tuning`]): 1 on CPU
//! adapters (no barrier in the inner loop: CPU drivers emulate barriers at great cost), 16 on
//! GPUs (even a 576-row projection then keeps thousands of lanes busy; the group's partial sums
//! are added in workgroup memory). The kernels' parameter structs are uniforms, but on lavapipe
//! read-only storage ([`ParamSpace`]): lavapipe compiles a variant per set of uniform values.
//! RMSNorm is fused into the product after it:
//! `RMSNorm(x)·γ·W = inv_rms(x)·((x∘γ)·W)`, `inv_rms` computed once per workgroup.
//!
//! ## Semantics
//!
//! - **Adjustment** ([`LogitAdjustment`]): `v = ((v + bias) · scale) + offset`, the scale
//!   being `scale_positive` when `v + bias > 0`, else `scale_non_positive`; IEEE f32, each step
//!   rounded. Bias, CTRL repetition penalty and presence/frequency penalties map onto it (the
//!   sampler makes them: `Sampler::gpu_adjustments`). Then the optional allow-mask sets disallowed tokens
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
//! The buffer layouts of every kernel are in ARCHITECTURE.md ("The fused forward pass", "The
//! decode tail") and at the head of each `.wgsl` file; measurements are in ARCHITECTURE.md.

#![warn(missing_docs)]

#[cfg(feature = "burn-ops")]
mod burn_launch;
pub mod format;
#[cfg(feature = "gpu")]
pub mod gpu;
#[cfg(feature = "gpu")]
mod kernel;
#[cfg(feature = "gpu")]
pub mod layer;
mod linear;
#[cfg(feature = "gpu")]
pub mod profile;
pub mod reference;
pub mod score;
pub mod tail;
#[cfg(feature = "gpu")]
mod wgsl;

pub use format::WeightFormat;
#[cfg(feature = "gpu")]
pub use gpu::{BufferView, Gpu, GpuBuffer, GpuCounters, ParamSpace, Tuning, WGPU_TASKS_PER_SUBMISSION};
#[cfg(feature = "gpu")]
pub use kernel::Recorder;
#[cfg(feature = "burn-ops")]
pub use linear::linear;
pub use linear::{LinearKernel, WeightLayout};
pub use score::{MAX_SCORE_TOP_K, RowScore, TargetScore, score_words, validate_score_k};
pub use tail::adjust::{LogitAdjustment, LogitAdjustments};
pub use tail::{
    BLOCK_LEN, CHUNK_LEN, FLAG_NAN, FLAG_NO_FINITE, FLAG_POSITIVE_INFINITY, HEADER_WORDS, MAX_K, MAX_VOCAB, RawRow,
    SoftmaxOutput, SoftmaxStats, TailOutput, TailRequest, TopK, WORKGROUP_SIZE, inverse_temperature, packed_words,
    validate_k,
};
#[cfg(feature = "burn-ops")]
pub use tail::{
    PendingTail, adjust_logits, decode_tail, decode_tail_enqueue, decode_tail_with_raw, softmax, softmax_stats, top_k,
};
#[cfg(feature = "gpu")]
pub use wgsl::{ATTENTION_LANES, MAX_HEAD_DIM, WgslStruct};

#[cfg(feature = "gpu")]
use burn::backend::DispatchDevice;

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
    /// A buffer is larger than the device lets one binding (or one buffer) be.
    #[error("{what} needs {bytes} bytes, more than the {limit} this GPU allows")]
    TooLarge {
        /// What the buffer holds.
        what: String,
        /// Its size.
        bytes: u64,
        /// The device's limit.
        limit: u64,
    },
    /// A weight's type has no reader in the kernels.
    #[error("tensor '{name}' has type {ggml_type}, which the fused kernels cannot read")]
    UnsupportedFormat {
        /// The tensor.
        name: String,
        /// Its GGUF type.
        ggml_type: nucleus_gguf::GgmlType,
    },
}

impl KernelError {
    pub(crate) fn invalid(parameter: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidParameter { parameter: parameter.into(), reason: reason.into() }
    }
}

/// Whether the kernels can run on `device` (a wgpu device: Vulkan, Metal, DX12 or WebGPU).
#[cfg(feature = "gpu")]
pub fn supports_device(device: &burn::tensor::Device) -> bool {
    matches!(device.as_dispatch(), DispatchDevice::Cube(burn::cubecl::Device::Wgpu(_)))
}
