//! The forward pass in our own WGSL kernels over the quantized weights, on Burn's wgpu device.
//!
//! The weights stay in their GGUF blocks, each uploaded once into a buffer of its own
//! ([`upload_format`] says in which form); a vocabulary-sized matrix larger than one storage
//! binding (Gemma 3's embedding on a 128 MiB device) in several, of consecutive rows, each with
//! its own `embed` and `lm_head` dispatch. A block's small attention vectors (the input norm's γ,
//! the per-head Q/K norms, the Q/K/V biases) are packed into one buffer, so `attn_qkv` binds no
//! more than the eight storage buffers every WebGPU device allows. Everything else is built once:
//! the activations (sized for [`MAX_ROWS`] rows), the bind groups and parameters of every kernel
//! of every block (those that touch the KV cache once per cache, and again when it grows), the
//! decode tail. A pass of up to `MAX_ROWS` tokens is one command buffer: the step parameters and
//! token ids in one queue write, then `embed`, six dispatches per block (eight with norms after
//! the sub-layers), `lm_head` (only for the rows whose logits are asked for), and, when the
//! caller reads, the decode tail and the copy of its result, submitted together. Longer prompts
//! run in passes of `MAX_ROWS` rows.

use std::sync::{Arc, Mutex, MutexGuard};

use burn::backend::wgpu::wgpu;
use nucleus_gguf::{GgufError, GgufFile, GgufHeader, Piece, TensorInfo, Wanted};
use nucleus_kernels::TailRequest;
use nucleus_kernels::layer::{
    self, ACTIVATION_GELU_TANH, ACTIVATION_SILU, AttentionParams, AttnQkvBuffers, AttnQkvParams, Bound,
    DeltaConvParams, DeltaRuleBuffers, DeltaRuleParams, EmbedParams, FfnBuffers, FfnParams, GatherParams,
    LmHeadBuffers, LmHeadParams, MatvecParams, NormResidualParams, ScoreParams, StepShape,
};
use nucleus_kernels::tail::fused::{TailKernels, TailSizes};
use nucleus_kernels::{
    BufferView, Gpu, GpuBuffer, KernelError, RawRow, Recorder, RowScore, TailOutput, WeightFormat, WgslStruct,
};

use crate::architecture::{FeedForward, Mixer, Norm, Role, Rope};
use crate::memory::PlannedBuffer;
use crate::part_writer::PartWriter;
use crate::rope::RopeTables;
use crate::state::{Checkpoints, Snapshot};
use crate::weights::{self, MixerWeights, ModelWeights, WeightSet};
use crate::window::{RING_SLACK, WindowRing};
use crate::{LensLogits, LoadProgress, LogitLens, Logits, MAX_LOGIT_ROWS, ModelConfig, ModelError};

/// Most rows (tokens) one pass runs; a longer prompt runs in several passes.
pub const MAX_ROWS: usize = 128;
/// KV-cache positions allocated at first; the cache doubles as positions are used, up to its
/// capacity.
const INITIAL_CACHE_POSITIONS: usize = 256;
/// Records of `attention.wgsl` the partials buffer holds (rows · heads · chunks).
const ATTENTION_RECORD_BUDGET: usize = 4096;

/// Consecutive rows of a weight in one buffer.
struct WeightPart {
    buffer: GpuBuffer,
    /// The bytes, not the padding: a binding's size is what the kernels may read.
    view: BufferView,
    first_row: u32,
    rows: u32,
}

/// A weight on the GPU: its bytes in one part (or, for a vocabulary-sized matrix larger than a
/// binding, several), and how to read them.
struct GpuWeight {
    parts: Vec<WeightPart>,
    format: WeightFormat,
}

impl GpuWeight {
    /// The binding of a weight held whole.
    fn view(&self) -> &BufferView {
        debug_assert_eq!(self.parts.len(), 1, "only the vocabulary matrices are held in parts");
        &self.parts[0].view
    }

    fn bytes(&self) -> u64 {
        self.parts.iter().map(|p| p.buffer.size()).sum()
    }
}

/// A tensor as the fused path holds it: in a buffer of its own, or (the small vectors `attn_qkv`
/// reads) on the host until its block's attention vectors are packed from them.
enum Loaded {
    Gpu(GpuWeight),
    Host(Vec<f32>),
}

impl Loaded {
    fn gpu(&self) -> &GpuWeight {
        match self {
            Loaded::Gpu(weight) => weight,
            Loaded::Host(_) => unreachable!("only the attention vectors stay on the host"),
        }
    }

    fn host(&self) -> &[f32] {
        match self {
            Loaded::Host(values) => values,
            Loaded::Gpu(_) => unreachable!("the attention vectors are read on the host"),
        }
    }

    /// Bytes on the GPU (a host vector's are in its block's attention vectors).
    fn bytes(&self) -> u64 {
        match self {
            Loaded::Gpu(weight) => weight.bytes(),
            Loaded::Host(_) => 0,
        }
    }
}

/// The small vectors packed into a block's [`BlockVectors`], not uploaded on their own.
fn packed(role: Role) -> bool {
    matches!(
        role,
        Role::AttentionNorm
            | Role::QueryBias
            | Role::KeyBias
            | Role::ValueBias
            | Role::QueryNorm
            | Role::KeyNorm
            | Role::DeltaDtBias
            | Role::DeltaA
            | Role::DeltaNorm
    )
}

/// A block's small vectors on the GPU, packed so no kernel binds more than the eight storage
/// buffers every WebGPU device allows. An attention block's *attention vectors*: `[γ (dim) |
/// query norm, key norm (head_dim each) | biases of q, k, v]`, the optional parts present when
/// the family has them, padded to whole vec4s, and the offsets `attn_qkv` reads them at
/// ([`layer::NONE`] when absent). A Gated DeltaNet block's: its input norm's γ alone, and
/// `delta_rule`'s vectors `[dt_bias | a (value_heads each) | γ of the gated norm (head_dim)]`.
struct BlockVectors {
    buffer: GpuBuffer,
    qk_norm_at: u32,
    bias_at: u32,
    delta: Option<GpuBuffer>,
}

impl BlockVectors {
    fn upload(gpu: &Gpu, block: &weights::BlockWeights<Loaded>) -> Self {
        let mut values = block.attention_norm.host().to_vec();
        let mut qk_norm_at = layer::NONE;
        let mut bias_at = layer::NONE;
        let mut delta = None;
        match &block.mixer {
            MixerWeights::Attention(block) => {
                if let (Some(q), Some(k)) = (&block.query_norm, &block.key_norm) {
                    qk_norm_at = values.len() as u32;
                    values.extend(q.host().iter().chain(k.host()));
                }
                if let (Some(q), Some(k), Some(v)) = (&block.query_bias, &block.key_bias, &block.value_bias) {
                    bias_at = values.len() as u32;
                    values.extend(q.host().iter().chain(k.host()).chain(v.host()));
                }
            }
            MixerWeights::GatedDeltaNet(block) => {
                let mut vectors: Vec<f32> =
                    block.dt_bias.host().iter().chain(block.a.host()).chain(block.norm.host()).copied().collect();
                vectors.resize(vectors.len().next_multiple_of(4), 0.0);
                delta = Some(gpu.upload("delta vectors", bytemuck::cast_slice(&vectors)));
            }
        }
        values.resize(values.len().next_multiple_of(4), 0.0);
        Self { buffer: gpu.upload("attention vectors", bytemuck::cast_slice(&values)), qk_norm_at, bias_at, delta }
    }

    /// Bytes of block `block`'s buffers, from the configuration alone (the memory plan's).
    fn bytes(config: &ModelConfig, block: usize) -> u64 {
        let spec = config.architecture().block;
        let mut len = config.embedding_length;
        let mut delta = 0;
        match (config.mixer(block), &config.delta_net) {
            (Mixer::GatedDeltaNet, Some(shape)) => delta = (2 * shape.value_heads + shape.head_dim).next_multiple_of(4),
            _ => {
                if spec.qk_norm {
                    len += 2 * config.head_dim;
                }
                if spec.qkv_bias {
                    len += config.q_dim() + 2 * config.kv_dim();
                }
            }
        }
        (len.next_multiple_of(4) + delta) as u64 * 4
    }

    fn size(&self) -> u64 {
        self.buffer.size() + self.delta.as_ref().map_or(0, GpuBuffer::size)
    }
}

/// The model on the GPU; shared by its caches and its pending logits.
pub(crate) struct FusedModel {
    shared: Arc<Shared>,
}

struct Shared {
    gpu: Gpu,
    config: ModelConfig,
    weights: ModelWeights<Loaded>,
    /// Each block's small vectors.
    vectors: Vec<BlockVectors>,
    /// `[context, hd/2]` pairs (cos, sin), one table per RoPE base, computed in f64.
    rope: Vec<GpuBuffer>,
    rope_of_block: Vec<usize>,
    /// The step uniform at offset 0 and the token ids at `ids_offset`: one write per pass.
    step: GpuBuffer,
    ids_offset: u64,
    // The activations of a pass (the kernels hold bindings of them; the model keeps them alive).
    x: GpuBuffer,
    q: GpuBuffer,
    attention_out: GpuBuffer,
    _hidden: GpuBuffer,
    /// A sub-layer's output before its norm (families with norms after the sub-layers).
    _sublayer_out: Option<GpuBuffer>,
    /// The Gated DeltaNet blocks' activations (models that have them).
    delta: Option<DeltaActivations>,
    partials: GpuBuffer,
    logits: GpuBuffer,
    /// Kernels that do not touch the KV cache, bound once; `embed` and `lm_head` once per part
    /// of their matrix.
    embed: Vec<Bound>,
    blocks_bound: Vec<BlockKernels>,
    lm_head: Vec<Bound>,
    state: Mutex<State>,
    weight_bytes: u64,
}

/// The activations of the Gated DeltaNet blocks' pass, `[MAX_ROWS, ..]` each.
struct DeltaActivations {
    /// The block's input, normalised (`[dim]` per row).
    normed: GpuBuffer,
    /// Queries, keys and values (`[channels]`): the projection's, then the convolution's.
    mixed: GpuBuffer,
    /// The output gate's projection (`[value_dim]`).
    z: GpuBuffer,
    /// β's and α's projections (`[value_heads]` each).
    beta: GpuBuffer,
    alpha: GpuBuffer,
}

/// A block's kernels bound at load (those bound to a cache are in [`FusedCache`]).
struct BlockKernels {
    mixer: MixerKernels,
    /// `norm_residual` of the attention's output (families with norms after the sub-layers).
    post_attention: Option<Bound>,
    gate_up: Bound,
    down: Bound,
    /// `norm_residual` of the feed-forward's output.
    post_feed_forward: Option<Bound>,
}

/// The kernels of a block's mixer bound at load.
enum MixerKernels {
    /// `attention_combine` and the output projection (`attn_qkv` and `attention` bind the cache).
    Attention { combine: Bound, output: Bound },
    /// The normalised input, the four input projections (to the channels, z, β, α) and the
    /// output projection (`delta_conv` and `delta_rule` bind the cache's state).
    GatedDeltaNet { norm: Bound, projections: Box<[Bound; 4]>, output: Bound },
}

struct State {
    tail: TailKernels,
    /// The last pass, recorded and not yet submitted: it is submitted with what reads its logits.
    pending: Option<(u64, wgpu::CommandBuffer)>,
    /// The number of the last pass recorded; its logits are the ones in the logits buffer.
    passes: u64,
    /// Full rows read back through here: allocated at load at its planned size
    /// ([`ScratchSizes`]), taken while a read is in flight.
    staging: Option<GpuBuffer>,
}

/// Bytes of the fused path's scratch buffers for a configuration (besides the RoPE tables, which
/// grow with the context like the cache): what [`FusedModel::load`] allocates, and what
/// [`crate::MemoryPlan`] counts.
pub(crate) struct ScratchSizes {
    step: u64,
    x: u64,
    q: u64,
    attention_out: u64,
    hidden: u64,
    sublayer_out: u64,
    /// The Gated DeltaNet blocks' normalised input, channels, z, β and α.
    delta: [u64; 5],
    partials: u64,
    logits: u64,
    readback: u64,
    tail: TailSizes,
}

impl ScratchSizes {
    pub(crate) fn new(c: &ModelConfig) -> Self {
        let f32s = |n: usize| n as u64 * 4;
        let (d, hd) = (c.embedding_length, c.head_dim);
        let records = ATTENTION_RECORD_BUDGET.max(MAX_ROWS * c.head_count);
        Self {
            // The parameters at an offset of at most 256 bytes (WebGPU's largest alignment), then the ids.
            step: 256 + f32s(MAX_ROWS),
            x: f32s(MAX_ROWS * d),
            // The queries, then (with an output gate) the gates from `MAX_ROWS · q_dim` on.
            q: f32s(MAX_ROWS * c.query_projection_dim()),
            // Each head's output (an attention block's, or a Gated DeltaNet block's value heads').
            attention_out: f32s(MAX_ROWS * c.q_dim().max(c.delta_net.as_ref().map_or(0, |d| d.value_dim()))),
            hidden: f32s(MAX_ROWS * c.feed_forward_length),
            sublayer_out: if c.architecture().block.post_norms { f32s(MAX_ROWS * d) } else { 0 },
            delta: c.delta_net.as_ref().map_or([0; 5], |delta| {
                [d, delta.channels(), delta.value_dim(), delta.value_heads, delta.value_heads]
                    .map(|n| f32s(MAX_ROWS * n))
            }),
            partials: f32s(records * layer::attention_record_len(hd as u32) as usize),
            logits: f32s(MAX_LOGIT_ROWS * c.vocab_size),
            // A whole read of the logits (explain, returnLogits, beams) lands here.
            readback: f32s(MAX_LOGIT_ROWS * c.vocab_size),
            tail: TailSizes::new(c.vocab_size as u32),
        }
    }

    pub(crate) fn named(&self) -> impl Iterator<Item = (&'static str, u64)> {
        [
            ("the step parameters", self.step),
            ("the activations (x)", self.x),
            ("the queries", self.q),
            ("the attention output", self.attention_out),
            ("the activations (hidden)", self.hidden),
            ("the sub-layer output", self.sublayer_out),
            ("the Gated DeltaNet input (normalised)", self.delta[0]),
            ("the Gated DeltaNet channels", self.delta[1]),
            ("the Gated DeltaNet output gate", self.delta[2]),
            ("the Gated DeltaNet write strengths", self.delta[3]),
            ("the Gated DeltaNet decays", self.delta[4]),
            ("the attention records", self.partials),
            ("the logits", self.logits),
            ("the logits readback", self.readback),
        ]
        .into_iter()
        .filter(|&(_, bytes)| bytes > 0)
        .chain(self.tail.named())
    }
}

/// Every weight buffer the fused path uploads for `file`, in the order it uploads them: each
/// tensor in its [`upload_format`] (a vocabulary-sized one marked as divisible into rows), and
/// per block its attention vectors. What the memory plan counts; the load checks the same list.
pub(crate) fn planned_weights(file: &GgufHeader, config: &ModelConfig) -> Result<Vec<PlannedBuffer>, ModelError> {
    let mut planned = Vec::new();
    for (role, block, info) in weights::tensors(file, config)? {
        if role == Role::AttentionNorm {
            planned.push(PlannedBuffer {
                what: format!("the small vectors of block {block}"),
                bytes: BlockVectors::bytes(config, block),
                row_bytes: None,
            });
        }
        if packed(role) {
            continue;
        }
        let (format, as_stored) = upload_format(info)?;
        let (rows, cols) = info.matrix_shape();
        // `delta_conv` reads its taps as f32, whole (rows of `kernel` values).
        let taps = role == Role::DeltaConv;
        if taps && format != WeightFormat::F32 {
            return Err(ModelError::Unsupported(format!("tensor '{}': convolution taps in {format}", info.name)));
        }
        if !taps && !format.fits_row(cols as u64) {
            return Err(ModelError::Unsupported(format!("tensor '{}': rows of {cols} {format} values", info.name)));
        }
        let row_bytes = if as_stored { format.row_bytes(cols as u64) } else { cols as u64 * 4 };
        let vocabulary = matches!(role, Role::TokenEmbedding | Role::Output);
        planned.push(PlannedBuffer {
            what: format!("tensor '{}'", info.name),
            bytes: (rows as u64 * row_bytes).next_multiple_of(4),
            row_bytes: vocabulary.then_some(row_bytes),
        });
    }
    Ok(planned)
}

/// The fused path's weights loaded a tensor at a time, in any order: each matrix uploaded in its
/// [`upload_format`] as its bytes are given, the small vectors (packed per block at the end) and
/// Llama 3's RoPE factors kept on the host. The one route of both loads: a whole file's tensors
/// ([`FusedModel::load`]) and a streamed file's as they arrive ([`crate::ModelStream`]: the
/// browser's WebGPU load, which never holds the whole file).
pub(crate) struct FusedUpload {
    weights: WeightSet<Loaded>,
    rope_factors: Option<Vec<f32>>,
    /// The weight being received in pieces ([`Self::take`]): its buffers, and where its next
    /// bytes go.
    receiving: Option<(GpuWeight, PartWriter)>,
    gpu: Gpu,
    /// The most bytes one buffer may bind.
    limit: u64,
}

impl FusedUpload {
    /// Checks every tensor's type and shape, before anything is uploaded.
    pub(crate) fn new(file: &GgufHeader, config: &ModelConfig, gpu: &Gpu) -> Result<Self, ModelError> {
        let spec = config.architecture().block;
        // The kernels implement exactly these; a new variant must be implemented here first.
        let (Norm::Rms, Rope::AdjacentPairs | Rope::Halves, FeedForward::SwiGlu | FeedForward::GeGluTanh) =
            (spec.norm, spec.rope, spec.feed_forward);
        check_dims(config)?;
        planned_weights(file, config)?;
        let limits = gpu.limits();
        let limit = limits.max_storage_buffer_binding_size.min(limits.max_buffer_size);
        let weights = WeightSet::new(file, config)?;
        Ok(Self { weights, rope_factors: None, receiving: None, gpu: gpu.clone(), limit })
    }

    /// Whether and how the model reads the tensor `info`: a weight the GPU reads as the file
    /// stores it in pieces, written to its buffers as they arrive; one it converts or keeps on
    /// the host (the packed vectors), and the RoPE factors, whole.
    pub(crate) fn wants(&self, info: &TensorInfo) -> Wanted {
        wanted(&self.weights, info)
    }

    /// Takes a piece of the tensor `info` (the whole of it, or a piece of one [`Self::wants`]
    /// in pieces; a tensor's pieces in order).
    pub(crate) fn take(&mut self, info: &TensorInfo, piece: Piece<'_>) -> Result<(), ModelError> {
        if piece.at == 0 && piece.last {
            return self.put(info, piece.bytes);
        }
        let Some((role, block)) = self.weights.role(&info.name) else { return Ok(()) };
        let Self { receiving, gpu, limit, weights, .. } = self;
        if piece.at == 0 {
            let (weight, writer, _) = weight_buffers(role, info, gpu, *limit)?;
            *receiving = Some((weight, writer));
        }
        let (weight, writer) = receiving.as_mut().expect("a tensor's pieces come in order, from its first");
        writer.write(piece.bytes, |part, at, bytes| gpu.write(weight.parts[part].buffer.buffer(), at, bytes));
        if piece.last {
            debug_assert!(writer.done());
            let (weight, _) = receiving.take().expect("received above");
            weights.insert(role, block, Loaded::Gpu(weight));
        }
        Ok(())
    }

    /// Whether `info` is one of the model's weights (what load progress counts).
    pub(crate) fn is_weight(&self, info: &TensorInfo) -> bool {
        self.weights.role(&info.name).is_some()
    }

    /// Takes the tensor `info`, whose bytes in the file are `bytes`.
    pub(crate) fn put(&mut self, info: &TensorInfo, bytes: &[u8]) -> Result<(), ModelError> {
        if info.name == Role::RopeFrequencies.tensor_name(0) {
            self.rope_factors = Some(dequantized(info, bytes)?);
            return Ok(());
        }
        let Some((role, block)) = self.weights.role(&info.name) else { return Ok(()) };
        let weight = if packed(role) {
            Loaded::Host(dequantized(info, bytes)?)
        } else {
            Loaded::Gpu(upload(bytes, role, info, &self.gpu, self.limit)?)
        };
        self.weights.insert(role, block, weight);
        Ok(())
    }

    /// The model, once every tensor is in (`MissingTensor` names one that is not).
    pub(crate) fn finish(self, file: &GgufHeader, config: &ModelConfig) -> Result<FusedModel, ModelError> {
        let tables = RopeTables::with_factors(file, config, self.rope_factors)?;
        FusedModel::assemble(self.weights.finish(config)?, tables, config, &self.gpu)
    }
}

/// Positions of the RoPE tables computed and written at a time: the tables' rows in memory stay
/// a few MiB whatever the context (Gemma 3's two tables at 32,768 positions are 64 MiB, which a
/// load in the browser would otherwise hold, twice, in a WebAssembly memory that never shrinks).
const ROPE_POSITIONS_PER_WRITE: usize = 4096;

/// Every RoPE table of the context as `(cos, sin)` f32 pairs, position-major, a buffer each,
/// filled [`ROPE_POSITIONS_PER_WRITE`] positions at a time.
fn upload_rope_tables(tables: &RopeTables, config: &ModelConfig, gpu: &Gpu) -> Vec<GpuBuffer> {
    use wgpu::BufferUsages as U;
    let position_bytes = RopeTables::position_bytes(config);
    let bytes = config.context_length as u64 * position_bytes;
    let buffers: Vec<GpuBuffer> =
        (0..RopeTables::count(config)).map(|_| gpu.buffer("rope", bytes, U::STORAGE | U::COPY_DST)).collect();
    for start in (0..config.context_length).step_by(ROPE_POSITIONS_PER_WRITE) {
        let positions = start..(start + ROPE_POSITIONS_PER_WRITE).min(config.context_length);
        for (buffer, table) in buffers.iter().zip(tables.every_table(positions)) {
            let pairs: Vec<f32> = table.iter().flat_map(|&(cos, sin)| [cos, sin]).collect();
            gpu.write(buffer.buffer(), start as u64 * position_bytes, bytemuck::cast_slice(&pairs));
        }
    }
    buffers
}

/// How a streamed load takes the tensor `info` of a model of `weights` ([`FusedUpload::wants`]).
fn wanted<T>(weights: &WeightSet<T>, info: &TensorInfo) -> Wanted {
    match weights.role(&info.name) {
        Some((role, _)) if !packed(role) && upload_format(info).is_ok_and(|(_, as_stored)| as_stored) => {
            Wanted::InPieces
        }
        Some(_) => Wanted::Whole,
        None if info.name == Role::RopeFrequencies.tensor_name(0) => Wanted::Whole,
        None => Wanted::No,
    }
}

/// The most bytes of its file a streamed load of `file` ([`Model::stream`](crate::Model::stream))
/// holds at once: the largest tensor it takes whole (a weight it converts to f32, the packed
/// vectors, the RoPE factors); every other weight goes to the GPU piece by piece.
pub fn streamed_staging_bytes(file: &GgufHeader, config: &ModelConfig) -> Result<u64, ModelError> {
    let weights = WeightSet::<()>::new(file, config)?;
    let whole = file.tensors.iter().filter(|info| wanted(&weights, info) == Wanted::Whole);
    Ok(whole.map(TensorInfo::byte_len).max().unwrap_or(0))
}

/// A tensor's values as f32, from its bytes in the file.
fn dequantized(info: &TensorInfo, bytes: &[u8]) -> Result<Vec<f32>, ModelError> {
    nucleus_gguf::dequantize(info.ggml_type, bytes, info.element_count() as usize).ok_or_else(|| {
        GgufError::UnsupportedDequantization { name: info.name.clone(), ggml_type: info.ggml_type }.into()
    })
}

impl FusedModel {
    pub(crate) fn load(
        file: &GgufFile,
        config: &ModelConfig,
        gpu: &Gpu,
        mut progress: impl FnMut(LoadProgress),
    ) -> Result<Self, ModelError> {
        let mut upload = FusedUpload::new(file, config, gpu)?;
        let infos = weights::tensors(file, config)?;
        let mut status = LoadProgress::of(infos.iter().map(|(_, _, info)| *info));
        for (_, _, info) in infos {
            upload.put(info, file.tensor_bytes(info))?;
            status.add(info);
            progress(status);
        }
        if let Some(info) = file.tensor(&Role::RopeFrequencies.tensor_name(0)) {
            upload.put(info, file.tensor_bytes(info))?;
        }
        upload.finish(file, config)
    }

    /// The model from its weights, every one in: the blocks' vectors, the RoPE tables, the
    /// activations and every kernel bound.
    fn assemble(
        weights: ModelWeights<Loaded>,
        tables: RopeTables,
        config: &ModelConfig,
        gpu: &Gpu,
    ) -> Result<Self, ModelError> {
        let spec = config.architecture().block;
        let limits = gpu.limits();
        let limit = limits.max_storage_buffer_binding_size.min(limits.max_buffer_size);
        let vectors: Vec<BlockVectors> = weights.blocks.iter().map(|b| BlockVectors::upload(gpu, b)).collect();
        let weight_bytes =
            weights.all().map(Loaded::bytes).sum::<u64>() + vectors.iter().map(BlockVectors::size).sum::<u64>();

        let c = config;
        let d = c.embedding_length;
        let sizes = ScratchSizes::new(c);
        let rope = upload_rope_tables(&tables, c, gpu);
        debug_assert_eq!(
            rope.iter().map(GpuBuffer::size).sum::<u64>(),
            (RopeTables::count(c) * c.context_length) as u64 * RopeTables::position_bytes(c)
        );

        let alignment =
            u64::from(limits.min_storage_buffer_offset_alignment.max(limits.min_uniform_buffer_offset_alignment));
        let step_bytes = std::mem::size_of::<layer::StepParams>() as u64;
        let ids_offset = step_bytes.next_multiple_of(alignment);
        use wgpu::BufferUsages as U;
        let step = gpu.buffer("step", ids_offset + MAX_ROWS as u64 * 4, U::UNIFORM | U::STORAGE | U::COPY_DST);
        let x = gpu.storage("x", sizes.x);
        let q = gpu.storage("q", sizes.q);
        let attention_out = gpu.storage("attention out", sizes.attention_out);
        let hidden = gpu.storage("hidden", sizes.hidden);
        let sublayer_out = spec.post_norms.then(|| gpu.storage("sub-layer out", sizes.sublayer_out));
        let delta = c.delta_net.as_ref().map(|_| {
            let [normed, mixed, z, beta, alpha] = sizes.delta;
            DeltaActivations {
                normed: gpu.storage("delta normed", normed),
                mixed: gpu.storage("delta channels", mixed),
                z: gpu.storage("delta z", z),
                beta: gpu.storage("delta beta", beta),
                alpha: gpu.storage("delta alpha", alpha),
            }
        });
        let partials = gpu.storage("attention partials", sizes.partials);
        let logits = gpu.storage("logits", sizes.logits);
        let readback = gpu.buffer("logits readback", sizes.readback, U::MAP_READ | U::COPY_DST);
        for (what, buffer) in
            [("the logits", &logits), ("the activations", &hidden), ("the attention records", &partials)]
        {
            if buffer.size() > limit {
                return Err(KernelError::TooLarge { what: what.into(), bytes: buffer.size(), limit }.into());
            }
        }

        let step_view = step.range(0, step_bytes);
        let ids_view = step.range(ids_offset, MAX_ROWS as u64 * 4);
        let u = |n: usize| n as u32;
        let token_embedding = weights.token_embedding.gpu();
        let embed = token_embedding
            .parts
            .iter()
            .map(|part| {
                let params =
                    EmbedParams { dim: u(d), scale: c.embedding_scale(), first: part.first_row, count: part.rows };
                layer::embed(gpu, token_embedding.format, params, &step_view, &ids_view, &part.view, &x.view())
            })
            .collect::<Result<Vec<_>, KernelError>>()?;
        let eps = c.rms_norm_eps as f32;
        // With norms after the sub-layers, a projection writes the sub-layer's output and
        // `norm_residual` adds it; without, the projection adds itself to the residual stream.
        let (projection_out, accumulate) = match &sublayer_out {
            Some(out) => (out.view(), 0),
            None => (x.view(), 1),
        };
        let post_norm = |norm: &Option<Loaded>| {
            norm.as_ref()
                .map(|norm| {
                    let norm = norm.gpu();
                    let params = NormResidualParams { dim: u(d), eps, ..Default::default() };
                    layer::norm_residual(gpu, params, &step_view, &projection_out, norm.view(), &x.view())
                })
                .transpose()
        };
        let activation = match spec.feed_forward {
            FeedForward::SwiGlu => ACTIVATION_SILU,
            FeedForward::GeGluTanh => ACTIVATION_GELU_TANH,
        };
        let blocks_bound = weights
            .blocks
            .iter()
            .zip(&vectors)
            .enumerate()
            .map(|(index, (b, vectors))| {
                let mixer = match &b.mixer {
                    MixerWeights::Attention(attention) => {
                        let output = attention.output.gpu();
                        MixerKernels::Attention {
                            combine: layer::attention_combine(
                                gpu,
                                attention_params(c, index),
                                &step_view,
                                &partials.view(),
                                &q.view(),
                                &attention_out.view(),
                            )?,
                            output: layer::matvec_residual(
                                gpu,
                                output.format,
                                MatvecParams { inputs: u(c.q_dim()), outputs: u(d), accumulate, ..Default::default() },
                                &step_view,
                                &attention_out.view(),
                                output.view(),
                                &projection_out,
                            )?,
                        }
                    }
                    MixerWeights::GatedDeltaNet(weights) => {
                        let (shape, act) = c.delta_net.as_ref().zip(delta.as_ref()).expect("a Gated DeltaNet model");
                        let params = NormResidualParams { dim: u(d), eps, replace: 1, ..Default::default() };
                        let project = |weight: &Loaded, outputs: usize, into: &GpuBuffer| {
                            let weight = weight.gpu();
                            let params =
                                MatvecParams { inputs: u(d), outputs: u(outputs), accumulate: 0, ..Default::default() };
                            layer::matvec_residual(
                                gpu,
                                weight.format,
                                params,
                                &step_view,
                                &act.normed.view(),
                                weight.view(),
                                &into.view(),
                            )
                        };
                        let output = weights.output.gpu();
                        MixerKernels::GatedDeltaNet {
                            norm: layer::norm_residual(
                                gpu,
                                params,
                                &step_view,
                                &x.view(),
                                &vectors.buffer.view(),
                                &act.normed.view(),
                            )?,
                            projections: Box::new([
                                project(&weights.qkv, shape.channels(), &act.mixed)?,
                                project(&weights.gate, shape.value_dim(), &act.z)?,
                                project(&weights.beta, shape.value_heads, &act.beta)?,
                                project(&weights.alpha, shape.value_heads, &act.alpha)?,
                            ]),
                            output: layer::matvec_residual(
                                gpu,
                                output.format,
                                MatvecParams {
                                    inputs: u(shape.value_dim()),
                                    outputs: u(d),
                                    accumulate,
                                    ..Default::default()
                                },
                                &step_view,
                                &attention_out.view(),
                                output.view(),
                                &projection_out,
                            )?,
                        }
                    }
                };
                let (gate, up, down) = (b.gate.gpu(), b.up.gpu(), b.down.gpu());
                Ok(BlockKernels {
                    mixer,
                    post_attention: post_norm(&b.post_attention_norm)?,
                    gate_up: layer::ffn_gate_up(
                        gpu,
                        [gate.format, up.format],
                        FfnParams { dim: u(d), hidden: u(c.feed_forward_length), eps, activation },
                        FfnBuffers {
                            step: &step_view,
                            x: &x.view(),
                            norm: b.feed_forward_norm.gpu().view(),
                            w_gate: gate.view(),
                            w_up: up.view(),
                            h: &hidden.view(),
                        },
                    )?,
                    down: layer::matvec_residual(
                        gpu,
                        down.format,
                        MatvecParams {
                            inputs: u(c.feed_forward_length),
                            outputs: u(d),
                            accumulate,
                            ..Default::default()
                        },
                        &step_view,
                        &hidden.view(),
                        down.view(),
                        &projection_out,
                    )?,
                    post_feed_forward: post_norm(&b.post_feed_forward_norm)?,
                })
            })
            .collect::<Result<Vec<_>, KernelError>>()?;
        let output_layer = weights.output().gpu();
        let lm_head = output_layer
            .parts
            .iter()
            .map(|part| {
                let params = LmHeadParams {
                    dim: u(d),
                    vocab: u(c.vocab_size),
                    eps,
                    first: part.first_row,
                    count: part.rows,
                    ..Default::default()
                };
                let buffers = LmHeadBuffers {
                    step: &step_view,
                    x: &x.view(),
                    norm: weights.output_norm.gpu().view(),
                    w: &part.view,
                    logits: &logits.view(),
                };
                layer::lm_head(gpu, output_layer.format, params, buffers)
            })
            .collect::<Result<Vec<_>, KernelError>>()?;
        let tail = TailKernels::new(gpu, &logits.range(0, c.vocab_size as u64 * 4), c.vocab_size)?;
        Ok(Self {
            shared: Arc::new(Shared {
                gpu: gpu.clone(),
                config: config.clone(),
                weights,
                vectors,
                rope,
                rope_of_block: tables.block_table,
                step,
                ids_offset,
                x,
                q,
                attention_out,
                _hidden: hidden,
                _sublayer_out: sublayer_out,
                delta,
                partials,
                logits,
                embed,
                blocks_bound,
                lm_head,
                state: Mutex::new(State { tail, pending: None, passes: 0, staging: Some(readback) }),
                weight_bytes,
            }),
        })
    }

    /// Bytes of the weights on the GPU.
    pub(crate) fn weight_bytes(&self) -> u64 {
        self.shared.weight_bytes
    }

    /// A cache for up to `capacity` positions; its memory grows with the positions used.
    pub(crate) fn new_cache(&self, capacity: usize) -> Result<FusedCache, ModelError> {
        let recurrent = StateLayout::new(&self.shared.config)
            .map(|layout| RecurrentStates { live: self.shared.gpu.storage("recurrent state", layout.bytes()), layout });
        let mut cache = FusedCache {
            shared: self.shared.clone(),
            capacity,
            allocated: 0,
            blocks: Vec::new(),
            recurrent,
            ring: self.shared.config.window_ring(),
            checkpoints: Checkpoints::default(),
        };
        cache.allocate(INITIAL_CACHE_POSITIONS.min(capacity), None)?;
        Ok(cache)
    }

    /// Records a forward pass of `tokens` after the `start` positions `cache` holds; the caller
    /// has checked the tokens, the room, and `Logits::All` against [`MAX_LOGIT_ROWS`]. Every
    /// pass but the last is submitted here; the last waits for the read of its logits.
    pub(crate) fn forward(
        &self,
        tokens: &[u32],
        cache: &mut FusedCache,
        start: usize,
        logits: Logits,
    ) -> Result<FusedLogits, ModelError> {
        self.record(tokens, cache, start, logits, Taps::default())
    }

    /// The logit lens of the last of `tokens` (run as [`Self::forward`] runs them, in the same
    /// command buffer), reading only what the lens shows: the residual after every block, and
    /// per block the statistics of what the output norm and layer make of it, its own top
    /// `candidates`, and its logits of the last block's top `candidates`. After each block a copy
    /// keeps the last row of `x`; after the last, each kept row goes back into that row for the
    /// `lm_head` dispatches, the decode tail's statistics and top-k at T = 1, and a `gather` of
    /// the followed ids, each result copied out (the last block's first: its top-k are the ids
    /// followed). Reads `blocks · (embedding + 4·(4 + 3·candidates))` bytes: 59 KB for Gemma 3
    /// at 10 candidates, where the whole rows would be 19 MB.
    pub(crate) async fn logit_lens(
        &self,
        tokens: &[u32],
        cache: &mut FusedCache,
        start: usize,
        candidates: usize,
    ) -> Result<LogitLens, ModelError> {
        use wgpu::BufferUsages as U;
        let (gpu, c) = (&self.shared.gpu, &self.shared.config);
        nucleus_kernels::validate_k(candidates)?;
        let hidden_bytes = (c.block_count * c.embedding_length * 4) as u64;
        let record_words = lens_record_words(candidates);
        let records_bytes = (c.block_count * record_words * 4) as u64;
        let packed_bytes = nucleus_kernels::packed_words(candidates) as u64 * 4;
        let followed = gpu.storage("lens followed ids", packed_bytes);
        let gathered = gpu.storage("lens gathered logits", candidates as u64 * 4);
        let step_view = self.shared.step.range(0, std::mem::size_of::<layer::StepParams>() as u64);
        let params = GatherParams {
            count: candidates as u32,
            ids_at: nucleus_kernels::HEADER_WORDS as u32,
            ..Default::default()
        };
        let gather =
            layer::gather(gpu, params, &step_view, &followed.view(), &self.shared.logits.view(), &gathered.view())?;
        let lens = LensBuffers {
            hidden: gpu.storage("lens residuals", hidden_bytes),
            hidden_read: gpu.buffer("lens residuals readback", hidden_bytes, U::MAP_READ | U::COPY_DST),
            records_read: gpu.buffer("lens records readback", records_bytes, U::MAP_READ | U::COPY_DST),
            candidates,
            followed,
            gathered,
            gather,
        };
        let taps = Taps { lens: Some(&lens), ..Taps::default() };
        self.record(tokens, cache, start, Logits::Last, taps)?.wait().await?;
        let hidden: Vec<f32> = bytemuck::cast_slice(&gpu.read(lens.hidden_read.buffer(), hidden_bytes).await?).to_vec();
        let records = gpu.read(lens.records_read.buffer(), records_bytes).await?;
        let words: &[u32] = bytemuck::cast_slice(&records);
        let packed_words = nucleus_kernels::packed_words(candidates);
        let layers = words
            .chunks_exact(record_words)
            .map(|record| {
                let raw = nucleus_kernels::tail::raw_row(&record[..packed_words], candidates, 0)?;
                let top = raw.top.expect("a top list was asked for");
                Ok(LensLogits {
                    log_sum_exp: f64::from(raw.stats.max) + f64::from(raw.stats.sum_exp).ln(),
                    top: top.ids.into_iter().zip(top.logits).collect(),
                    tracked: record[packed_words..].iter().map(|&w| f32::from_bits(w)).collect(),
                })
            })
            .collect::<Result<Vec<_>, KernelError>>()?;
        Ok(LogitLens {
            hidden: hidden.chunks_exact(c.embedding_length).map(<[f32]>::to_vec).collect(),
            layers,
            bytes_read: hidden_bytes + records_bytes,
        })
    }

    /// Runs `tokens` after the `start` positions `cache` holds, in passes of [`MAX_LOGIT_ROWS`]
    /// rows with every row's logits, and rates each row with `score.wgsl` in the pass's
    /// submission: row `i` rates `tokens[i + 1]` (the last rates none), with a top list of
    /// `top_k`. The records of every pass land in one buffer, read once at the end: `n ·
    /// (16 + 8·top_k)` bytes, never a row. Returns the rows' scores and the bytes read.
    pub(crate) async fn score(
        &self,
        tokens: &[u32],
        cache: &mut FusedCache,
        start: usize,
        top_k: usize,
    ) -> Result<(Vec<RowScore>, u64), ModelError> {
        use nucleus_kernels::score::{NO_TARGET, score_words};
        use wgpu::BufferUsages as U;
        let (shared, gpu) = (&self.shared, &self.shared.gpu);
        let words = score_words(top_k);
        let next: Vec<u32> = tokens[1..].iter().copied().chain([NO_TARGET]).collect();
        let targets = gpu.storage("score targets", next.len() as u64 * 4);
        gpu.write(targets.buffer(), 0, bytemuck::cast_slice(&next));
        let records_bytes = (tokens.len() * words * 4) as u64;
        let records = gpu.storage("score records", records_bytes);
        let read = gpu.buffer("score readback", records_bytes, U::MAP_READ | U::COPY_DST);
        let params = ScoreParams {
            vocab: shared.config.vocab_size as u32,
            first: start as u32,
            k: top_k as u32,
            ..Default::default()
        };
        let step = shared.step.range(0, std::mem::size_of::<layer::StepParams>() as u64);
        let kernel = layer::score(gpu, params, &step, &targets.view(), &shared.logits.view(), &records.view())?;
        let passes = tokens.len().div_ceil(MAX_LOGIT_ROWS);
        for (index, chunk) in tokens.chunks(MAX_LOGIT_ROWS).enumerate() {
            let pos = start + index * MAX_LOGIT_ROWS;
            let logits = self.record(chunk, cache, pos, Logits::All, Taps::default())?;
            let rows = chunk.len() as u32;
            // The grid reads the logit rows only; the kernel reads the pass's step parameters.
            let shape = StepShape::new(pos as u32, rows, rows, 1, rows);
            let mut recorder = Recorder::new(gpu);
            kernel.record(&mut recorder, &shape);
            if index + 1 == passes {
                recorder.copy(records.buffer(), 0, read.buffer(), 0, records_bytes);
            }
            shared.submit_after_pending(recorder);
            drop(logits);
        }
        let words_read: Vec<u32> = bytemuck::cast_slice(&gpu.read(read.buffer(), records_bytes).await?).to_vec();
        let scores = words_read
            .chunks_exact(words)
            .zip(&next)
            .map(|(record, &next)| RowScore::from_words(record, Some(next).filter(|&t| t != NO_TARGET), top_k))
            .collect::<Result<Vec<_>, KernelError>>()?;
        Ok((scores, records_bytes))
    }

    /// Runs `tokens` after the `start` positions `cache` holds, as [`Self::forward`] does, and
    /// reads what block `block`'s attention weighs each key by for the query positions `rows`
    /// (within the pass): head `head`'s weights or the mean of every head's
    /// (`attention_weights.wgsl`, recorded after the block's `attn_qkv` in each pass). Reads
    /// back only those rows. Returns them (row `i`: the `rows.start + i + 1` weights of keys
    /// `0..=rows.start + i`) and the bytes read.
    pub(crate) async fn attention(
        &self,
        tokens: &[u32],
        cache: &mut FusedCache,
        start: usize,
        block: usize,
        head: Option<usize>,
        rows: std::ops::Range<usize>,
    ) -> Result<(Vec<Vec<f32>>, u64), ModelError> {
        use wgpu::BufferUsages as U;
        let (shared, gpu) = (&self.shared, &self.shared.gpu);
        let c = &shared.config;
        // The cache's buffers for the whole pass first: the tap binds the block's keys where
        // the pass will write them.
        let mut recorder = Recorder::new(gpu);
        cache.reserve(start + tokens.len(), &mut recorder)?;
        shared.submit_after_pending(recorder);
        let CachedBlock::Attention { kv, .. } = &cache.blocks[block] else {
            return Err(ModelError::Invalid(format!("block {block} does not attend")));
        };
        let keys = rows.end;
        let out_bytes = (rows.len() * keys * 4) as u64;
        let out = gpu.storage("attention weights", out_bytes);
        let read = gpu.buffer("attention weights readback", out_bytes, U::MAP_READ | U::COPY_DST);
        let attention = attention_params(c, block);
        let params = layer::AttentionWeightsParams {
            heads: attention.heads,
            kv_heads: attention.kv_heads,
            head_dim: attention.head_dim,
            scale: attention.scale,
            window: attention.window,
            head: head.map_or(layer::MEAN_OF_HEADS, |h| h as u32),
            first: rows.start as u32,
            count: rows.len() as u32,
            keys: keys as u32,
            ring: attention.ring,
            ..Default::default()
        };
        let step = shared.step.range(0, std::mem::size_of::<layer::StepParams>() as u64);
        let kernel = layer::attention_weights(gpu, params, &step, &shared.q.view(), &kv.view(), &out.view())?;
        let tap = AttentionTap { block, kernel };
        let logits =
            self.record(tokens, cache, start, Logits::Last, Taps { attention: Some(&tap), ..Taps::default() })?;
        let mut copy = Recorder::new(gpu);
        copy.copy(out.buffer(), 0, read.buffer(), 0, out_bytes);
        shared.submit_after_pending(copy);
        drop(logits);
        let values: Vec<f32> = bytemuck::cast_slice(&gpu.read(read.buffer(), out_bytes).await?).to_vec();
        let weights = values.chunks_exact(keys).zip(rows).map(|(row, position)| row[..=position].to_vec()).collect();
        Ok((weights, out_bytes))
    }

    /// [`Self::forward`], with the logit lens's copies and dispatches, or an attention read's,
    /// when `taps` asks for them.
    fn record(
        &self,
        tokens: &[u32],
        cache: &mut FusedCache,
        start: usize,
        logits: Logits,
        taps: Taps<'_>,
    ) -> Result<FusedLogits, ModelError> {
        let lens = taps.lens;
        let clock = web_time::Instant::now();
        let shared = &self.shared;
        if !Arc::ptr_eq(shared, &cache.shared) {
            return Err(ModelError::Invalid("the cache was made for another model".into()));
        }
        let mut state = shared.state();
        if let Some((_, commands)) = state.pending.take() {
            shared.gpu.submit([commands]);
        }
        let mut recorder = Recorder::new(&shared.gpu);
        cache.reserve(start + tokens.len(), &mut recorder)?;
        if tokens.len() > 1 {
            // A pass of several tokens (a prompt's chunk, a draft's verification) may be gone back
            // on: keep the state before it.
            cache.record_rollback(start, &mut recorder);
        }
        let chunks: Vec<&[u32]> = tokens.chunks(MAX_ROWS).collect();
        let mut rows = 0;
        for (index, chunk) in chunks.iter().enumerate() {
            let last = index + 1 == chunks.len();
            let pos = start + index * MAX_ROWS;
            let logit_rows = match (last, logits) {
                (false, _) => 0,
                (true, Logits::Last) => 1,
                (true, Logits::All) => chunk.len(),
            };
            let shape = StepShape::new(
                pos as u32,
                chunk.len() as u32,
                logit_rows.max(1) as u32,
                shared.config.head_count as u32,
                ATTENTION_RECORD_BUDGET.max(MAX_ROWS * shared.config.head_count) as u32,
            );
            // One write: the step parameters, then the ids.
            let mut bytes = vec![0u8; shared.ids_offset as usize + chunk.len() * 4];
            bytes[..std::mem::size_of::<layer::StepParams>()].copy_from_slice(shape.params().bytes());
            bytes[shared.ids_offset as usize..].copy_from_slice(bytemuck::cast_slice(chunk));
            shared.gpu.write(shared.step.buffer(), 0, &bytes);

            for part in &shared.embed {
                part.record(&mut recorder, &shape);
            }
            // The last row of `x` (the lens's position) and a row's bytes.
            let row_bytes = (shared.config.embedding_length * 4) as u64;
            let last_row = (chunk.len() as u64 - 1) * row_bytes;
            let lens = lens.filter(|_| last);
            for (block, (kernels, cached)) in shared.blocks_bound.iter().zip(&cache.blocks).enumerate() {
                match (&kernels.mixer, cached) {
                    (MixerKernels::Attention { combine, output }, CachedBlock::Attention { qkv, attention, .. }) => {
                        qkv.record(&mut recorder, &shape);
                        if let Some(tap) = taps.attention.filter(|tap| tap.block == block) {
                            tap.kernel.record(&mut recorder, &shape);
                        }
                        for kernel in [attention, combine, output] {
                            kernel.record(&mut recorder, &shape);
                        }
                    }
                    (
                        MixerKernels::GatedDeltaNet { norm, projections, output },
                        CachedBlock::GatedDeltaNet { conv, rule },
                    ) => {
                        let kernels = std::iter::once(norm).chain(projections.iter()).chain([conv, rule, output]);
                        kernels.for_each(|kernel| kernel.record(&mut recorder, &shape));
                    }
                    _ => unreachable!("a cache's blocks are the model's"),
                }
                if let Some(post) = &kernels.post_attention {
                    post.record(&mut recorder, &shape);
                }
                kernels.gate_up.record(&mut recorder, &shape);
                kernels.down.record(&mut recorder, &shape);
                if let Some(post) = &kernels.post_feed_forward {
                    post.record(&mut recorder, &shape);
                }
                if let Some(lens) = lens {
                    let to = block as u64 * row_bytes;
                    recorder.copy(shared.x.buffer(), last_row, lens.hidden.buffer(), to, row_bytes);
                }
            }
            if let Some(lens) = lens {
                let record_bytes = (lens_record_words(lens.candidates) * 4) as u64;
                let packed_bytes = nucleus_kernels::packed_words(lens.candidates) as u64 * 4;
                let blocks = shared.blocks_bound.len() as u64;
                // The last block first: its top candidates are the ids every block is read at.
                for block in std::iter::once(blocks - 1).chain(0..blocks - 1) {
                    recorder.copy(lens.hidden.buffer(), block * row_bytes, shared.x.buffer(), last_row, row_bytes);
                    for part in &shared.lm_head {
                        part.record(&mut recorder, &shape);
                    }
                    let packed = state.tail.record_raw_stats(&mut recorder, lens.candidates)?;
                    recorder.copy(packed.buffer(), 0, lens.records_read.buffer(), block * record_bytes, packed_bytes);
                    if block == blocks - 1 {
                        recorder.copy(packed.buffer(), 0, lens.followed.buffer(), 0, packed_bytes);
                    }
                    lens.gather.record(&mut recorder, &shape);
                    let to = block * record_bytes + packed_bytes;
                    recorder.copy(lens.gathered.buffer(), 0, lens.records_read.buffer(), to, lens.gathered.size());
                }
                let all = lens.hidden.size().min(lens.hidden_read.size());
                recorder.copy(lens.hidden.buffer(), 0, lens.hidden_read.buffer(), 0, all);
            }
            if last {
                if lens.is_none() {
                    for part in &shared.lm_head {
                        part.record(&mut recorder, &shape);
                    }
                }
                rows = logit_rows;
            } else {
                // The next pass's step write must land after this pass: submit it now.
                shared.gpu.submit([std::mem::replace(&mut recorder, Recorder::new(&shared.gpu)).finish()]);
            }
        }
        if let Some(ring) = &mut cache.ring {
            ring.wrote_up_to(start + tokens.len());
        }
        state.passes += 1;
        state.pending = Some((state.passes, recorder.finish()));
        shared.gpu.add_record_time(clock.elapsed());
        Ok(FusedLogits { shared: shared.clone(), pass: state.passes, rows })
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Submits the pending pass (if any), then `recorder`'s commands: a copy that must see the
    /// pass's writes.
    fn submit_after_pending(&self, recorder: Recorder) {
        let mut state = self.state();
        let mut commands: Vec<_> = state.pending.take().map(|(_, c)| c).into_iter().collect();
        commands.push(recorder.finish());
        self.gpu.submit(commands);
    }
}

/// The attention's parameters in block `block` (its window, for a local block).
fn attention_params(c: &ModelConfig, block: usize) -> AttentionParams {
    AttentionParams {
        heads: c.head_count as u32,
        kv_heads: c.head_count_kv as u32,
        head_dim: c.head_dim as u32,
        scale: (1.0 / (c.head_dim as f64).sqrt()) as f32,
        window: c.block_attention(block).window.map_or(0, |w| w as u32),
        gate_at: gate_at(c),
        ring: ring_rows(c, block).map_or(0, |rows| rows as u32),
        ..Default::default()
    }
}

/// The rows of block `block`'s ring (`window.rs`), for a local block; `None`: a row per position.
fn ring_rows(c: &ModelConfig, block: usize) -> Option<usize> {
    c.block_ring(block).map(|ring| ring.slots())
}

// A pass writes its rows before its queries read their windows: it must be within a ring's slack.
const _: () = assert!(MAX_ROWS <= RING_SLACK);

/// Shapes the kernels read in whole units of 8 values.
pub(crate) fn check_dims(c: &ModelConfig) -> Result<(), ModelError> {
    if c.rope_dims != c.head_dim && c.architecture().block.rope != Rope::Halves {
        return Err(ModelError::Unsupported(format!(
            "the fused kernels rotate part of a head ({} of {} dimensions) only with RoPE on halves",
            c.rope_dims, c.head_dim
        )));
    }
    if let Some(delta) = &c.delta_net {
        let ok = delta.head_dim as u32 <= nucleus_kernels::MAX_HEAD_DIM
            && (2..=layer::MAX_CONV_KERNEL as usize).contains(&delta.conv_kernel);
        if !ok {
            return Err(ModelError::Unsupported(format!(
                "the fused kernels need Gated DeltaNet heads of at most {} values and 2 to {} convolution taps (heads of {}, {} taps)",
                nucleus_kernels::MAX_HEAD_DIM,
                layer::MAX_CONV_KERNEL,
                delta.head_dim,
                delta.conv_kernel
            )));
        }
    }
    let ok = c.embedding_length.is_multiple_of(8)
        && c.feed_forward_length.is_multiple_of(8)
        && c.q_dim().is_multiple_of(8)
        && c.head_dim.is_multiple_of(2)
        && c.head_dim as u32 <= nucleus_kernels::MAX_HEAD_DIM;
    if ok {
        Ok(())
    } else {
        Err(ModelError::Unsupported(format!(
            "the fused kernels need dimensions that are multiples of 8 and a head dimension of at most {} (embedding {}, feed-forward {}, head {})",
            nucleus_kernels::MAX_HEAD_DIM,
            c.embedding_length,
            c.feed_forward_length,
            c.head_dim
        )))
    }
}

/// The form the fused path uploads a tensor in: the format its kernels read it as, and whether
/// that is the file's own bytes (`true`: its GGUF blocks) or f32 converted on the host (F16,
/// BF16). The one owner of that rule: the upload and the memory plan both ask it.
pub(crate) fn upload_format(info: &TensorInfo) -> Result<(WeightFormat, bool), KernelError> {
    let format = WeightFormat::for_ggml(info.ggml_type)
        .ok_or_else(|| KernelError::UnsupportedFormat { name: info.name.clone(), ggml_type: info.ggml_type })?;
    Ok((format, format.ggml_type() == info.ggml_type))
}

/// The buffers of one tensor in its [`upload_format`], still empty: one, or (a vocabulary-sized
/// matrix larger than `limit`) parts of consecutive rows, each its own buffer; the writer of
/// their bytes, and whether they are the file's (else its values as f32).
fn weight_buffers(
    role: Role,
    info: &TensorInfo,
    gpu: &Gpu,
    limit: u64,
) -> Result<(GpuWeight, PartWriter, bool), ModelError> {
    use wgpu::BufferUsages as U;
    let (format, as_stored) = upload_format(info)?;
    let (rows, _) = info.matrix_shape();
    let bytes = if as_stored { info.byte_len() } else { info.element_count() * 4 };
    let row_bytes = bytes / rows as u64;
    let ranges = match role {
        Role::TokenEmbedding | Role::Output => weights::vocabulary_parts(rows, row_bytes, limit)?,
        _ if bytes > limit => {
            let what = format!("tensor '{}'", info.name);
            return Err(KernelError::TooLarge { what, bytes, limit }.into());
        }
        _ => std::iter::once(0..rows).collect(),
    };
    let writer = PartWriter::new(ranges.iter().map(|range| range.len() as u64 * row_bytes));
    let parts = ranges
        .into_iter()
        .map(|range| {
            let len = range.len() as u64 * row_bytes;
            let buffer = gpu.buffer(&info.name, len, U::STORAGE | U::COPY_DST);
            let view = buffer.range(0, len.next_multiple_of(4));
            WeightPart { buffer, view, first_row: range.start as u32, rows: range.len() as u32 }
        })
        .collect();
    Ok((GpuWeight { parts, format }, writer, as_stored))
}

/// Uploads one tensor whose bytes in the file are `stored` ([`weight_buffers`]).
fn upload(stored: &[u8], role: Role, info: &TensorInfo, gpu: &Gpu, limit: u64) -> Result<GpuWeight, ModelError> {
    let (weight, mut writer, as_stored) = weight_buffers(role, info, gpu, limit)?;
    let converted;
    let bytes = if as_stored {
        stored
    } else {
        converted = dequantized(info, stored)?;
        bytemuck::cast_slice(&converted)
    };
    writer.write(bytes, |part, at, bytes| gpu.write(weight.parts[part].buffer.buffer(), at, bytes));
    Ok(weight)
}

/// What a pass records besides the forward pass itself.
#[derive(Clone, Copy, Default)]
struct Taps<'a> {
    /// The logit lens's copies and dispatches after every block.
    lens: Option<&'a LensBuffers>,
    /// An attention read, after its block's `attn_qkv`.
    attention: Option<&'a AttentionTap>,
}

/// `attention_weights.wgsl` bound for one read ([`FusedModel::attention`]).
struct AttentionTap {
    block: usize,
    kernel: Bound,
}

/// The buffers of one logit-lens pass ([`FusedModel::logit_lens`]).
struct LensBuffers {
    /// `[blocks, embedding]`: the kept residual rows.
    hidden: GpuBuffer,
    hidden_read: GpuBuffer,
    /// `[blocks]` records of [`lens_record_words`]: the packed statistics and top list of the
    /// block's logits, then the gathered logits of the followed ids.
    records_read: GpuBuffer,
    candidates: usize,
    /// The last block's packed result: its top ids, the ones followed.
    followed: GpuBuffer,
    gathered: GpuBuffer,
    gather: Bound,
}

/// Words of one block's lens record: a packed tail result (`4 + 2k`), then `k` gathered logits.
fn lens_record_words(candidates: usize) -> usize {
    nucleus_kernels::packed_words(candidates) + candidates
}

/// A cache of the fused path: per attention block its KV buffer `[positions, 2, kv_heads,
/// head_dim]` f32 (keys, then values, of each position; a local block's ring holds position `p`
/// at row `p mod slots`, `window.rs`), the Gated DeltaNet blocks' state, the checkpoints of what
/// cannot go back, and the blocks' kernels bound to them.
pub(crate) struct FusedCache {
    shared: Arc<Shared>,
    capacity: usize,
    allocated: usize,
    blocks: Vec<CachedBlock>,
    /// The Gated DeltaNet blocks' state (models that have such blocks).
    recurrent: Option<RecurrentStates>,
    /// The local blocks' ring (families with a sliding window).
    ring: Option<WindowRing>,
    /// Copies of the recurrent state and of each local block's window rows (`snapshot`).
    checkpoints: Checkpoints<GpuBuffer>,
}

enum CachedBlock {
    Attention { kv: GpuBuffer, qkv: Bound, attention: Bound },
    GatedDeltaNet { conv: Bound, rule: Bound },
}

/// Every Gated DeltaNet block's state in one buffer, so a snapshot is one buffer copy: the
/// `r`-th recurrent block's at `r · stride`, its convolution's last inputs `[kernel − 1,
/// channels]` first and its matrices `[value_heads, head_dim, head_dim]` (`S[i][c]` at
/// `(h · head_dim + i) · head_dim + c`) at `conv_bytes`, f32, each part starting on a
/// [`STATE_ALIGNMENT`] boundary. Zeros at a sequence's start (a new buffer is zeros).
struct RecurrentStates {
    live: GpuBuffer,
    layout: StateLayout,
}

/// The offset alignment of the state's bindings: WebGPU's largest `minStorageBufferOffsetAlignment`.
const STATE_ALIGNMENT: u64 = 256;

/// Where each recurrent block's state lies in [`RecurrentStates::live`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct StateLayout {
    conv_bytes: u64,
    stride: u64,
    blocks: u64,
}

impl StateLayout {
    pub(crate) fn new(config: &ModelConfig) -> Option<Self> {
        let shape = config.delta_net.as_ref()?;
        let conv_bytes = (shape.conv_state_len().max(1) as u64 * 4).next_multiple_of(STATE_ALIGNMENT);
        let matrices = (shape.delta_state_len() as u64 * 4).next_multiple_of(STATE_ALIGNMENT);
        let blocks = (config.block_count - config.attention_blocks()) as u64;
        Some(Self { conv_bytes, stride: conv_bytes + matrices, blocks })
    }

    /// Bytes of one copy of every block's state.
    pub(crate) fn bytes(&self) -> u64 {
        self.blocks * self.stride
    }
}

impl Snapshot for GpuBuffer {
    fn bytes(&self) -> u64 {
        self.size()
    }
}

/// Bytes of one window's rows in a checkpoint of the local blocks (`window − 1` positions).
pub(crate) fn window_checkpoint_bytes(config: &ModelConfig) -> u64 {
    config.window_ring().map_or(0, |ring| ring.window_before(usize::MAX).len() as u64 * config.kv_position_bytes())
}

impl FusedCache {
    /// Bytes the cache holds on the GPU now: the KV rows, the recurrent state and the checkpoints.
    pub(crate) fn bytes(&self) -> u64 {
        let rows: u64 = self
            .blocks
            .iter()
            .map(|b| match b {
                CachedBlock::Attention { kv, .. } => kv.size(),
                CachedBlock::GatedDeltaNet { .. } => 0,
            })
            .sum();
        rows + self.recurrent.as_ref().map_or(0, |r| r.live.size()) + self.checkpoints.bytes()
    }

    fn position_bytes(&self) -> u64 {
        self.shared.config.kv_position_bytes()
    }

    pub(crate) fn is_recurrent(&self) -> bool {
        self.recurrent.is_some()
    }

    /// Whether going back may need a checkpoint: a recurrent state, or a ring that drops rows.
    pub(crate) fn needs_checkpoints(&self) -> bool {
        self.is_recurrent() || self.ring.is_some()
    }

    /// Bytes of the recurrent blocks' live state (without the alignment between its parts).
    pub(crate) fn state_bytes(&self) -> u64 {
        self.shared.config.recurrent_state_bytes()
    }

    /// The kept checkpoints' positions (oldest first, then the rollback one's) and their bytes.
    pub(crate) fn checkpoints(&self) -> (Vec<usize>, u64) {
        (self.checkpoints.positions(), self.checkpoints.bytes())
    }

    /// Records a copy of the state as it is before the pass being recorded into `recorder`, the
    /// rollback checkpoint at `position` (a recurrent cache only: a ring goes back within its
    /// slack).
    fn record_rollback(&mut self, position: usize, recorder: &mut Recorder) {
        if self.is_recurrent() {
            let mut checkpoints = std::mem::take(&mut self.checkpoints);
            checkpoints.record_rollback(position, |old| self.snapshot(position, old, recorder));
            self.checkpoints = checkpoints;
        }
    }

    /// Keeps a copy of what cannot go back as it is at `position` (after the pending pass).
    pub(crate) fn checkpoint(&mut self, position: usize) {
        if self.needs_checkpoints() {
            let mut recorder = Recorder::new(&self.shared.gpu);
            let mut checkpoints = std::mem::take(&mut self.checkpoints);
            checkpoints.record(position, |old| self.snapshot(position, old, &mut recorder));
            self.checkpoints = checkpoints;
            self.shared.submit_after_pending(recorder);
        }
    }

    /// Goes back to `len` of the `filled` positions: rows of every position forget the rest, and
    /// so does a ring that still holds the window before `len`; else the recurrent state and
    /// the rings are put back to their latest checkpoint at or before `len` (zeros, the start,
    /// if none), whose position is returned (`state.rs`).
    pub(crate) fn go_back(&mut self, len: usize, filled: usize) -> usize {
        if len >= filled {
            return filled;
        }
        if !self.is_recurrent() && self.ring.is_none_or(|ring| ring.holds_window_before(len)) {
            // A checkpoint after `len` holds rows of the tokens being forgotten.
            self.checkpoints.forget_after(len);
            return len;
        }
        let mut recorder = Recorder::new(&self.shared.gpu);
        let mut checkpoints = std::mem::take(&mut self.checkpoints);
        let position = match checkpoints.restore(len) {
            Some((position, saved)) => {
                self.put_back(position, saved, &mut recorder);
                position
            }
            None => {
                self.zero(&mut recorder);
                0
            }
        };
        self.checkpoints = checkpoints;
        if let Some(ring) = &mut self.ring {
            ring.restored_at(position);
        }
        self.shared.submit_after_pending(recorder);
        position
    }

    /// Forgets everything: a zero state, no checkpoints (rows need nothing: positions are
    /// written before they are read).
    pub(crate) fn clear(&mut self) {
        self.checkpoints.clear();
        if let Some(ring) = &mut self.ring {
            ring.clear();
        }
        if self.is_recurrent() {
            let mut recorder = Recorder::new(&self.shared.gpu);
            self.zero(&mut recorder);
            self.shared.submit_after_pending(recorder);
        }
    }

    /// The recurrent state back to zeros (a sequence's start).
    fn zero(&self, recorder: &mut Recorder) {
        if let Some(states) = &self.recurrent {
            recorder.clear(states.live.buffer());
        }
    }

    /// The local blocks' buffers with the parts of a checkpoint that are their window's rows:
    /// `(kv buffer, offset in the checkpoint)`, block order, after the recurrent state.
    fn windows(&self) -> impl Iterator<Item = (&GpuBuffer, u64)> {
        let c = &self.shared.config;
        let first = self.recurrent.as_ref().map_or(0, |states| states.live.size());
        let window = window_checkpoint_bytes(c);
        self.blocks
            .iter()
            .enumerate()
            .filter_map(move |(index, block)| match block {
                CachedBlock::Attention { kv, .. } if ring_rows(c, index).is_some() => Some(kv),
                _ => None,
            })
            .enumerate()
            .map(move |(i, kv)| (kv, first + i as u64 * window))
    }

    /// A copy of what cannot go back at `position`, recorded into `recorder` (into `reuse` when
    /// there is one): the recurrent state, then each local block's rows of the window before
    /// `position` ([`window_checkpoint_bytes`] each, the positions in order from the part's start).
    fn snapshot(&self, position: usize, reuse: Option<GpuBuffer>, recorder: &mut Recorder) -> GpuBuffer {
        let bytes = self.recurrent.as_ref().map_or(0, |states| states.live.size())
            + self.windows().count() as u64 * window_checkpoint_bytes(&self.shared.config);
        let to = reuse.unwrap_or_else(|| self.shared.gpu.storage("cache checkpoint", bytes));
        if let Some(states) = &self.recurrent {
            recorder.copy(states.live.buffer(), 0, to.buffer(), 0, states.live.size());
        }
        for (kv, in_kv, in_checkpoint, length) in self.window_spans(position) {
            recorder.copy(kv.buffer(), in_kv, to.buffer(), in_checkpoint, length);
        }
        to
    }

    /// Puts back a checkpoint made at `position` ([`Self::snapshot`]).
    fn put_back(&self, position: usize, saved: &GpuBuffer, recorder: &mut Recorder) {
        if let Some(states) = &self.recurrent {
            recorder.copy(saved.buffer(), 0, states.live.buffer(), 0, states.live.size());
        }
        for (kv, in_kv, in_checkpoint, length) in self.window_spans(position) {
            recorder.copy(saved.buffer(), in_checkpoint, kv.buffer(), in_kv, length);
        }
    }

    /// Where each local block's rows of the window before `position` lie in its ring and in a
    /// checkpoint: `(kv buffer, offset there, offset in the checkpoint, bytes)`, one or two spans
    /// a block (the ring's end splits a window). What [`Self::snapshot`] and [`Self::put_back`]
    /// copy, one way and the other.
    fn window_spans(&self, position: usize) -> Vec<(&GpuBuffer, u64, u64, u64)> {
        let Some(ring) = self.ring else { return Vec::new() };
        let row = self.position_bytes();
        let mut spans = Vec::new();
        for (kv, at) in self.windows() {
            let mut done = 0;
            for rows in ring.rows(ring.window_before(position)) {
                let length = rows.len() as u64 * row;
                spans.push((kv, rows.start as u64 * row, at + done, length));
                done += length;
            }
        }
        spans
    }

    /// Makes room for `positions`, doubling the allocation (the filled positions are copied).
    fn reserve(&mut self, positions: usize, recorder: &mut Recorder) -> Result<(), ModelError> {
        if positions <= self.allocated {
            return Ok(());
        }
        let mut size = self.allocated.max(1);
        while size < positions {
            size *= 2;
        }
        self.allocate(size.min(self.capacity), Some(recorder))
    }

    /// (Re)allocates every attention block's buffer for `positions` and binds every block's
    /// kernels; with a recorder, the old buffers' contents are copied over first.
    fn allocate(&mut self, positions: usize, copy: Option<&mut Recorder>) -> Result<(), ModelError> {
        let shared = &self.shared;
        let c = &shared.config;
        let gpu = &shared.gpu;
        let limit = gpu.limits().max_storage_buffer_binding_size;
        let bytes = positions as u64 * self.position_bytes();
        if bytes > limit {
            return Err(KernelError::TooLarge {
                what: format!("the KV cache of one block ({positions} positions)"),
                bytes,
                limit,
            }
            .into());
        }
        let step_bytes = std::mem::size_of::<layer::StepParams>() as u64;
        let step_view = shared.step.range(0, step_bytes);
        let spec = c.architecture().block;
        let mut blocks = Vec::with_capacity(c.block_count);
        let mut recurrent_blocks = 0;
        for (index, (weights, vectors)) in shared.weights.blocks.iter().zip(&shared.vectors).enumerate() {
            let block = match &weights.mixer {
                MixerWeights::Attention(weights) => {
                    let rows = ring_rows(c, index).map_or(positions, |slots| positions.min(slots));
                    let kv = gpu.storage("kv cache", rows as u64 * self.position_bytes());
                    let (wq, wk, wv) = (weights.query.gpu(), weights.key.gpu(), weights.value.gpu());
                    let params = AttnQkvParams {
                        qk_norm_at: vectors.qk_norm_at,
                        bias_at: vectors.bias_at,
                        rope_dims: c.rope_dims as u32,
                        gate_at: gate_at(c),
                        ring: ring_rows(c, index).map_or(0, |rows| rows as u32),
                        ..AttnQkvParams::new(
                            c.embedding_length as u32,
                            c.q_dim() as u32,
                            c.kv_dim() as u32,
                            c.head_dim as u32,
                            c.rms_norm_eps as f32,
                            spec.rope == Rope::Halves,
                        )
                    };
                    let qkv = layer::attn_qkv(
                        gpu,
                        [wq.format, wk.format, wv.format],
                        params,
                        AttnQkvBuffers {
                            step: &step_view,
                            x: &shared.x.view(),
                            norm: &vectors.buffer.view(),
                            wq: wq.view(),
                            wk: wk.view(),
                            wv: wv.view(),
                            rope: &shared.rope[shared.rope_of_block[index]].view(),
                            q: &shared.q.view(),
                            kv: &kv.view(),
                        },
                    )?;
                    let attention = layer::attention(
                        gpu,
                        attention_params(c, index),
                        &step_view,
                        &shared.q.view(),
                        &kv.view(),
                        &shared.partials.view(),
                    )?;
                    CachedBlock::Attention { kv, qkv, attention }
                }
                MixerWeights::GatedDeltaNet(weights) => {
                    let (shape, act) = c.delta_net.as_ref().zip(shared.delta.as_ref()).expect("a Gated DeltaNet model");
                    let states = self.recurrent.as_ref().expect("a cache of a Gated DeltaNet model has its state");
                    let base = recurrent_blocks * states.layout.stride;
                    recurrent_blocks += 1;
                    let conv_state = states.live.range(base, shape.conv_state_len().max(1) as u64 * 4);
                    let matrices =
                        states.live.range(base + states.layout.conv_bytes, shape.delta_state_len() as u64 * 4);
                    let conv = layer::delta_conv(
                        gpu,
                        DeltaConvParams {
                            channels: shape.channels() as u32,
                            kernel: shape.conv_kernel as u32,
                            ..Default::default()
                        },
                        &step_view,
                        weights.conv.gpu().view(),
                        &conv_state,
                        &act.mixed.view(),
                    )?;
                    let params = DeltaRuleParams {
                        key_heads: shape.key_heads as u32,
                        value_heads: shape.value_heads as u32,
                        head_dim: shape.head_dim as u32,
                        eps: c.rms_norm_eps as f32,
                        scale: (1.0 / (shape.head_dim as f64).sqrt()) as f32,
                        ..Default::default()
                    };
                    let delta_vectors = vectors.delta.as_ref().expect("a Gated DeltaNet block has its vectors");
                    let rule = layer::delta_rule(
                        gpu,
                        params,
                        DeltaRuleBuffers {
                            step: &step_view,
                            mixed: &act.mixed.view(),
                            z: &act.z.view(),
                            beta: &act.beta.view(),
                            alpha: &act.alpha.view(),
                            vectors: &delta_vectors.view(),
                            state: &matrices,
                            out: &shared.attention_out.view(),
                        },
                    )?;
                    CachedBlock::GatedDeltaNet { conv, rule }
                }
            };
            blocks.push(block);
        }
        if let Some(recorder) = copy {
            // A ring's rows are where they were: until it is full, position p at row p.
            for (old, new) in self.blocks.iter().zip(&blocks) {
                if let (CachedBlock::Attention { kv: old, .. }, CachedBlock::Attention { kv: new, .. }) = (old, new) {
                    recorder.copy(old.buffer(), 0, new.buffer(), 0, old.size().min(new.size()));
                }
            }
        }
        self.blocks = blocks;
        self.allocated = positions;
        Ok(())
    }

    /// An independent copy holding the first `len` positions and the live recurrent state, not
    /// its checkpoints (beam search keeps one per beam; a copy goes on from here).
    pub(crate) fn duplicate(&self, len: usize) -> Result<FusedCache, ModelError> {
        let mut copy = FusedCache {
            shared: self.shared.clone(),
            capacity: self.capacity,
            allocated: 0,
            blocks: Vec::new(),
            recurrent: self.recurrent.as_ref().map(|states| RecurrentStates {
                live: self.shared.gpu.storage("recurrent state", states.live.size()),
                layout: states.layout,
            }),
            ring: self.ring,
            checkpoints: Checkpoints::default(),
        };
        let mut recorder = Recorder::new(&self.shared.gpu);
        copy.allocate(self.allocated, None)?;
        for (from, to) in self.blocks.iter().zip(&copy.blocks) {
            if let (CachedBlock::Attention { kv: from, .. }, CachedBlock::Attention { kv: to, .. }) = (from, to) {
                // The first `len` positions' rows, or a ring's every row.
                let used = (len as u64 * self.position_bytes()).min(from.size());
                if used > 0 {
                    recorder.copy(from.buffer(), 0, to.buffer(), 0, used);
                }
            }
        }
        if let (Some(from), Some(to)) = (&self.recurrent, &copy.recurrent) {
            recorder.copy(from.live.buffer(), 0, to.live.buffer(), 0, from.live.size());
        }
        // After the pending pass, whose keys, values and state may be among those copied.
        self.shared.submit_after_pending(recorder);
        Ok(copy)
    }
}

/// Where `attn_qkv_norm` writes the output gate's values in `q` (after the queries of
/// [`MAX_ROWS`] rows), or 0 for a family without one.
fn gate_at(c: &ModelConfig) -> u32 {
    if c.architecture().block.output_gate { (MAX_ROWS * c.q_dim()) as u32 } else { 0 }
}

/// The logits of a fused pass, still on the GPU: rows of the logits buffer, valid until the next
/// pass is recorded.
pub struct FusedLogits {
    shared: Arc<Shared>,
    pass: u64,
    rows: usize,
}

impl FusedLogits {
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// The pass's commands (if not submitted yet) followed by `more`, or an error when a later
    /// pass has overwritten these logits.
    fn commands(&self, state: &mut State, more: wgpu::CommandBuffer) -> Result<Vec<wgpu::CommandBuffer>, ModelError> {
        if state.passes != self.pass {
            return Err(ModelError::Invalid(
                "these logits were overwritten by a later forward pass; read logits before the next pass".into(),
            ));
        }
        let mut commands: Vec<_> = state.pending.take().map(|(_, c)| c).into_iter().collect();
        commands.push(more);
        Ok(commands)
    }

    /// The decode tail on the last row, submitted with the pass: one submission, one read.
    pub(crate) async fn decode_tail(
        &self,
        request: &TailRequest<'_>,
    ) -> Result<(TailOutput, Option<RawRow>), ModelError> {
        let clock = web_time::Instant::now();
        let shared = &self.shared;
        let (recorded, commands) = {
            let mut state = shared.state();
            let mut recorder = Recorder::new(&shared.gpu);
            if self.rows != 1 {
                return Err(ModelError::Invalid(format!(
                    "the decode tail reads one row of logits, this pass has {}",
                    self.rows
                )));
            }
            let recorded = state.tail.record(&mut recorder, request)?;
            let commands = self.commands(&mut state, recorder.finish())?;
            shared.gpu.add_record_time(clock.elapsed());
            (recorded, commands)
        };
        shared.gpu.submit(commands);
        Ok(recorded.read().await?)
    }

    /// Submits the pass (if it is still pending) and waits until the GPU has run it.
    pub(crate) async fn wait(&self) -> Result<(), ModelError> {
        {
            let mut state = self.shared.state();
            if state.passes == self.pass
                && let Some((_, commands)) = state.pending.take()
            {
                self.shared.gpu.submit([commands]);
            }
        }
        Ok(self.shared.gpu.done().await?)
    }

    /// Every row, read back whole (`rows · vocab · 4` bytes).
    pub(crate) async fn read(&self) -> Result<Vec<Vec<f32>>, ModelError> {
        let shared = &self.shared;
        let vocab = shared.config.vocab_size;
        let bytes = (self.rows * vocab * 4) as u64;
        let staging = {
            let mut state = shared.state();
            let staging = state.staging.take().filter(|s| s.size() >= bytes).unwrap_or_else(|| {
                shared.gpu.buffer("logits readback", bytes, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST)
            });
            let mut recorder = Recorder::new(&shared.gpu);
            recorder.copy(shared.logits.buffer(), 0, staging.buffer(), 0, bytes);
            let commands = self.commands(&mut state, recorder.finish())?;
            shared.gpu.submit(commands);
            staging
        };
        let data = shared.gpu.read(staging.buffer(), bytes).await;
        shared.state().staging = Some(staging);
        let values: Vec<f32> = bytemuck::cast_slice(&data?).to_vec();
        Ok(values.chunks_exact(vocab).map(<[f32]>::to_vec).collect())
    }
}

impl Drop for FusedLogits {
    /// Logits dropped unread still leave their pass's keys and values in the cache.
    fn drop(&mut self) {
        let mut state = self.shared.state();
        if state.passes == self.pass
            && let Some((_, commands)) = state.pending.take()
        {
            self.shared.gpu.submit([commands]);
        }
    }
}
