//! The layer kernels of the fused forward pass (`shaders/embed.wgsl`, `attn_qkv.wgsl`,
//! `attn_qkv_norm.wgsl`, `attention.wgsl`, `attention_combine.wgsl`, `matvec_residual.wgsl`,
//! `norm_residual.wgsl`, `ffn_gate_up.wgsl`, `lm_head.wgsl`, `delta_conv.wgsl`, `delta_rule.wgsl`,
//! and after them `gather.wgsl` (the logit lens), `score.wgsl` (scoring a text) and
//! `attention_weights.wgsl` (what a block attends to)):
//! one typed constructor per kernel, each with its parameter struct and its buffers by name. A
//! constructor compiles the kernel's pipelines (cached per GPU); `bind` builds its bind group and
//! parameter buffer once; [`Bound::record`] adds one dispatch to a [`Recorder`], its grid computed
//! from the pass's [`StepShape`]. Nothing is created per step.
//!
//! A Llama, Qwen2 or Qwen3 block is six dispatches (`attn_qkv` or `attn_qkv_norm`, `attention`,
//! `attention_combine`, `matvec_residual` twice, `ffn_gate_up`); a Gemma 3 block eight (its two
//! norms after the sub-layers are `norm_residual`, each fused with the residual addition). A
//! Qwen3.5 Gated DeltaNet block is ten: `norm_residual` (the normalised input), four
//! `matvec_residual` (its projections), `delta_conv`, `delta_rule`, `matvec_residual` (its output
//! projection into the residual), and the feed-forward's two.
//! ARCHITECTURE.md has the buffer layouts.

use burn::backend::wgpu::wgpu;

use crate::KernelError;
use crate::format::WeightFormat;
use crate::gpu::{BufferView, Gpu, GpuBuffer};
use crate::kernel::{Kernel, KernelSpec, Recorder, Slot};
use crate::wgsl::{ATTENTION_LANES, MAX_HEAD_DIM, WgslStruct, wgsl_struct};

/// x-rows per lane group in the many-row (prefill) variant of the matrix kernels: each weight
/// read serves this many rows (the 4 components of `lib/row_dot.wgsl`'s accumulator).
pub const PREFILL_ROWS_PER_GROUP: u32 = 4;

wgsl_struct! {
    /// Per-pass values every layer kernel reads: one uniform buffer, written once per submission.
    pub struct StepParams {
        /// Position of the pass's first row (tokens already in the KV cache).
        pub pos: u32,
        /// Rows (tokens) in this pass.
        pub rows: u32,
        /// First row whose logits `lm_head.wgsl` computes.
        pub logit_row: u32,
        /// Rows whose logits it computes.
        pub logit_rows: u32,
        /// Key ranges per query and head in `attention.wgsl`.
        pub attn_chunks: u32,
        /// Keys per range (a multiple of [`ATTENTION_LANES`]).
        pub attn_chunk_len: u32,
        /// Padding (uniform structs are read in 16-byte rows).
        pub _pad0: u32,
        /// Padding (uniform structs are read in 16-byte rows).
        pub _pad1: u32,
    }
}

/// How one forward pass is cut up: its rows, which of them make logits, and the key ranges of
/// the attention. [`StepShape::new`] is the one place that chooses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepShape {
    /// Position of the pass's first row.
    pub pos: u32,
    /// Rows in the pass.
    pub rows: u32,
    /// First row whose logits are computed.
    pub logit_row: u32,
    /// Rows whose logits are computed (the last ones).
    pub logit_rows: u32,
    /// Key ranges of the attention, per query and head.
    pub attn_chunks: u32,
    /// Keys per range.
    pub attn_chunk_len: u32,
}

/// Most key ranges one query of one head is split into.
pub const MAX_ATTENTION_CHUNKS: u32 = 64;

impl StepShape {
    /// A pass of `rows` rows after `pos` positions, with logits for the last `logit_rows` rows.
    /// The attention's keys (at most `pos + rows`) are split into as many ranges of whole
    /// [`ATTENTION_LANES`]-key rounds as keep every range non-empty, up to
    /// [`MAX_ATTENTION_CHUNKS`] and to `record_budget` records (`rows · heads · chunks`).
    pub fn new(pos: u32, rows: u32, logit_rows: u32, heads: u32, record_budget: u32) -> Self {
        assert!(rows > 0 && (1..=rows).contains(&logit_rows), "rows {rows}, logit rows {logit_rows}");
        let rounds = (pos + rows).div_ceil(ATTENTION_LANES);
        let by_budget = (record_budget / (rows * heads)).max(1);
        let chunks = rounds.min(MAX_ATTENTION_CHUNKS).min(by_budget).max(1);
        let chunk_len = rounds.div_ceil(chunks) * ATTENTION_LANES;
        // Fewer ranges when rounding up left the last ones empty.
        let chunks = (pos + rows).div_ceil(chunk_len);
        Self { pos, rows, logit_row: rows - logit_rows, logit_rows, attn_chunks: chunks, attn_chunk_len: chunk_len }
    }

    /// The uniform the kernels read.
    pub fn params(&self) -> StepParams {
        StepParams {
            pos: self.pos,
            rows: self.rows,
            logit_row: self.logit_row,
            logit_rows: self.logit_rows,
            attn_chunks: self.attn_chunks,
            attn_chunk_len: self.attn_chunk_len,
            ..Default::default()
        }
    }
}

/// How a bound kernel's grid follows from the pass.
#[derive(Debug, Clone, Copy)]
enum Grid {
    /// `(⌈outputs / rows_per_workgroup⌉, ⌈x_rows / R⌉, 1)`; the x rows are the pass's rows, or its
    /// logit rows.
    Matrix { outputs: u32, logit_rows: bool },
    /// `(⌈units / WG⌉, rows, 1)`.
    Embed { units: u32 },
    /// `(heads, ⌈x_rows / R⌉, 1)`: one workgroup per head of the outputs.
    Heads { heads: u32 },
    /// `(attn_chunks, heads, rows)`.
    Attention { heads: u32 },
    /// `(heads, rows, 1)`.
    Combine { heads: u32 },
    /// `(rows, 1, 1)`.
    Rows,
    /// `(logit_rows, 1, 1)`: one workgroup per row of logits.
    LogitRows,
    /// `(⌈count / WG⌉, 1, 1)`: one lane per entry.
    Entries { count: u32 },
    /// `(count, 1, 1)`: one workgroup per head, whatever the rows; the many-row pipeline for a
    /// pass of several rows (`delta_rule`'s chunked form), the one-row pipeline for one.
    Workgroups { count: u32 },
}

/// A kernel with its bind group and parameters, ready to record.
pub struct Bound {
    gpu: Gpu,
    /// The kernel's name (its `.wgsl` file), for the kernel times.
    name: &'static str,
    group: wgpu::BindGroup,
    /// The one-row pipeline and, for matrix kernels, the many-row one.
    single: wgpu::ComputePipeline,
    many: Option<wgpu::ComputePipeline>,
    grid: Grid,
    _params: GpuBuffer,
}

impl Bound {
    /// Adds this kernel's dispatch for the pass `shape` to `recorder`.
    pub fn record(&self, recorder: &mut Recorder, shape: &StepShape) {
        let tuning = self.gpu.tuning();
        let many_rows = |rows: u32| match (&self.many, rows) {
            (Some(many), 2..) => (many, rows.div_ceil(PREFILL_ROWS_PER_GROUP)),
            _ => (&self.single, rows),
        };
        let (pipeline, grid) = match self.grid {
            Grid::Matrix { outputs, logit_rows } => {
                let (pipeline, groups) = many_rows(if logit_rows { shape.logit_rows } else { shape.rows });
                (pipeline, [outputs.div_ceil(tuning.rows_per_workgroup()), groups, 1])
            }
            Grid::Heads { heads } => {
                let (pipeline, groups) = many_rows(shape.rows);
                (pipeline, [heads, groups, 1])
            }
            Grid::Embed { units } => (&self.single, [units.div_ceil(tuning.workgroup), shape.rows, 1]),
            Grid::Attention { heads } => (&self.single, [shape.attn_chunks, heads, shape.rows]),
            Grid::Combine { heads } => (&self.single, [heads, shape.rows, 1]),
            Grid::Rows => (&self.single, [shape.rows, 1, 1]),
            Grid::LogitRows => (&self.single, [shape.logit_rows, 1, 1]),
            Grid::Entries { count } => (&self.single, [count.div_ceil(tuning.workgroup), 1, 1]),
            Grid::Workgroups { count } => (many_rows(shape.rows).0, [count, 1, 1]),
        };
        recorder.dispatch(self.name, pipeline, &self.group, grid);
    }
}

/// Compiles `spec`'s pipelines and binds `buffers` (the parameter uniform is made here and goes
/// in the binding named `params`). `input_cols`: the width of the input a normalising kernel
/// stages (0 for the others).
fn bind<P: WgslStruct>(
    gpu: &Gpu,
    spec: &'static KernelSpec,
    formats: &[WeightFormat],
    params: P,
    buffers: &[&BufferView],
    grid: Grid,
    input_cols: u32,
) -> Result<Bound, KernelError> {
    let kernel = Kernel::new(gpu, spec, formats)?;
    let usage = wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
    let uniform = gpu.buffer(P::NAME, params.bytes().len() as u64, usage);
    gpu.write(uniform.buffer(), 0, params.bytes());
    let params_view = uniform.view();
    let mut views = Vec::with_capacity(spec.slots.len());
    let mut given = buffers.iter();
    for slot in spec.slots {
        match slot {
            Slot::Uniform("params", _) => views.push(&params_view),
            _ => views.push(
                given.next().ok_or_else(|| KernelError::invalid("buffers", format!("too few for {}", spec.name)))?,
            ),
        }
    }
    let group = kernel.bind(&views)?;
    let many = matches!(grid, Grid::Matrix { .. } | Grid::Heads { .. } | Grid::Workgroups { .. })
        .then(|| kernel.pipeline(PREFILL_ROWS_PER_GROUP, input_cols));
    Ok(Bound {
        gpu: gpu.clone(),
        name: spec.name,
        group,
        single: kernel.pipeline(1, input_cols),
        many,
        grid,
        _params: uniform,
    })
}

const STEP: Slot = Slot::Uniform("step", StepParams::NAME);

// ---------------------------------------------------------------------------------------------
// embed.wgsl

wgsl_struct! {
    /// `embed.wgsl`'s parameters.
    pub struct EmbedParams {
        /// Values per row (the embedding length).
        pub dim: u32,
        /// What every value is multiplied by (√dim for Gemma, else 1).
        pub scale: f32,
        /// The vocabulary row the bound table (part) starts at.
        pub first: u32,
        /// Rows in the bound table (part).
        pub count: u32,
    }
}

static EMBED: KernelSpec = KernelSpec {
    name: "embed",
    source: include_str!("../../../shaders/embed.wgsl"),
    structs: &[StepParams::WGSL, EmbedParams::WGSL],
    rms: false,
    lib: &[],
    workgroup_bytes: 0,
    declared: false,
    slots: &[
        STEP,
        Slot::Uniform("params", EmbedParams::NAME),
        Slot::Read("ids", "array<u32>"),
        Slot::Weights("table", false),
        Slot::ReadWrite("x", "array<vec4<f32>>"),
    ],
};

/// `embed.wgsl`: `x[s] = table[ids[s] − first] · scale`, dequantized, for the ids in
/// `first .. first + count` (the rows the bound table holds). `ids` holds at least `rows` token ids.
pub fn embed(
    gpu: &Gpu,
    format: WeightFormat,
    params: EmbedParams,
    step: &BufferView,
    ids: &BufferView,
    table: &BufferView,
    x: &BufferView,
) -> Result<Bound, KernelError> {
    let grid = Grid::Embed { units: params.dim / 8 };
    bind(gpu, &EMBED, &[format], params, &[step, ids, table, x], grid, 0)
}

// ---------------------------------------------------------------------------------------------
// attn_qkv.wgsl

wgsl_struct! {
    /// `attn_qkv.wgsl`'s parameters.
    pub struct AttnQkvParams {
        /// Embedding length (columns of the projections).
        pub dim: u32,
        /// Rows of `wq` (heads · head_dim).
        pub q_dim: u32,
        /// Rows of `wk` and `wv` (kv_heads · head_dim).
        pub kv_dim: u32,
        /// Values per head (even).
        pub head_dim: u32,
        /// RMSNorm epsilon (of the input's norm and of the per-head norms).
        pub eps: f32,
        /// 1: RoPE rotates the halves of each head; 0: adjacent pairs.
        pub rope_halves: u32,
        /// f32 offset of the biases of `[q | k | v]` in the attention vectors, or [`NONE`].
        pub bias_at: u32,
        /// f32 offset of the query norm's γ (the key norm's follows) in the attention vectors,
        /// or [`NONE`] (`attn_qkv_norm` needs them; `attn_qkv` has none).
        pub qk_norm_at: u32,
        /// Dimensions of each head RoPE rotates (the first ones; `head_dim` but in Qwen3.5, whose
        /// RoPE turns a quarter of the head, on halves only).
        pub rope_dims: u32,
        /// f32 offset in `q` of the output gate's values `[rows, q_dim]` (a model whose `wq` is
        /// `[2·q_dim, dim]`, each head's query rows then its gate's: Qwen3.5), or 0 without a
        /// gate (the gates follow the queries, so they are never at 0).
        pub gate_at: u32,
        /// Rows of a local block's ring (`nucleus_model::WindowRing`): position `p`'s keys and
        /// values go to row `p mod ring`; 0: to row `p`.
        pub ring: u32,
        /// Padding (uniform structs are read in 16-byte rows).
        pub _pad1: u32,
    }
}

/// An absent vector in [`AttnQkvParams`].
pub const NONE: u32 = u32::MAX;

impl AttnQkvParams {
    /// The parameters of a block without biases or per-head norms (set them after).
    pub fn new(dim: u32, q_dim: u32, kv_dim: u32, head_dim: u32, eps: f32, rope_halves: bool) -> Self {
        Self {
            dim,
            q_dim,
            kv_dim,
            head_dim,
            eps,
            rope_halves: rope_halves.into(),
            bias_at: NONE,
            qk_norm_at: NONE,
            rope_dims: head_dim,
            ..Default::default()
        }
    }
}

const QKV_LIB: &str = include_str!("../../../shaders/lib/qkv.wgsl");

const ATTN_QKV_SLOTS: &[Slot] = &[
    STEP,
    Slot::Uniform("params", AttnQkvParams::NAME),
    Slot::Read("x", "array<vec4<f32>>"),
    Slot::Read("norm", "array<vec4<f32>>"),
    Slot::Weights("wq", true),
    Slot::Weights("wk", true),
    Slot::Weights("wv", true),
    Slot::Read("rope", "array<vec2<f32>>"),
    Slot::ReadWrite("q", "array<f32>"),
    Slot::ReadWrite("kv", "array<f32>"),
];

static ATTN_QKV: KernelSpec = KernelSpec {
    name: "attn_qkv",
    source: include_str!("../../../shaders/attn_qkv.wgsl"),
    structs: &[StepParams::WGSL, AttnQkvParams::WGSL],
    rms: true,
    lib: &[QKV_LIB],
    workgroup_bytes: 0,
    declared: false,
    slots: ATTN_QKV_SLOTS,
};

static ATTN_QKV_NORM: KernelSpec = KernelSpec {
    name: "attn_qkv_norm",
    source: include_str!("../../../shaders/attn_qkv_norm.wgsl"),
    structs: &[StepParams::WGSL, AttnQkvParams::WGSL],
    rms: true,
    lib: &[QKV_LIB],
    // `head_values` (a vec4 per head dimension) and `head_factors`.
    workgroup_bytes: 16 * (MAX_HEAD_DIM + 1),
    declared: false,
    slots: ATTN_QKV_SLOTS,
};

/// The buffers of [`attn_qkv`].
#[allow(missing_docs)] // The bindings of `attn_qkv.wgsl`, by their names there.
pub struct AttnQkvBuffers<'a> {
    pub step: &'a BufferView,
    pub x: &'a BufferView,
    /// The block's attention vectors: the RMSNorm weight γ, then the biases and per-head norms
    /// at the offsets in [`AttnQkvParams`] (`shaders/lib/qkv.wgsl`).
    pub norm: &'a BufferView,
    pub wq: &'a BufferView,
    pub wk: &'a BufferView,
    pub wv: &'a BufferView,
    pub rope: &'a BufferView,
    pub q: &'a BufferView,
    pub kv: &'a BufferView,
}

/// The start of a block's attention: RMSNorm, Q/K/V with their biases, RoPE and the KV-cache
/// write; with per-head Q/K norms (`params.qk_norm_at` set) `attn_qkv_norm.wgsl`, a workgroup per
/// head, else `attn_qkv.wgsl`, a lane group per RoPE pair. `formats`: of wq, wk, wv. An output
/// gate (`params.gate_at`) needs the per-head norms; partial RoPE (`params.rope_dims`) RoPE on
/// halves.
pub fn attn_qkv(
    gpu: &Gpu,
    formats: [WeightFormat; 3],
    params: AttnQkvParams,
    b: AttnQkvBuffers,
) -> Result<Bound, KernelError> {
    let hd = params.head_dim;
    let whole_heads = hd > 0 && params.q_dim.is_multiple_of(hd) && params.kv_dim.is_multiple_of(hd);
    if !hd.is_multiple_of(2) || !params.dim.is_multiple_of(8) || !whole_heads || hd > MAX_HEAD_DIM {
        return Err(KernelError::invalid(
            "head_dim",
            format!(
                "needs an even head dimension of at most {MAX_HEAD_DIM}, whole heads and dim % 8 == 0, got {params:?}"
            ),
        ));
    }
    let partial_ok = params.rope_dims == hd || (params.rope_halves != 0 && params.rope_dims.is_multiple_of(2));
    if params.rope_dims == 0 || params.rope_dims > hd || !partial_ok {
        return Err(KernelError::invalid(
            "rope_dims",
            format!("RoPE over an even part of the head, on its halves, got {params:?}"),
        ));
    }
    if params.gate_at != 0 && params.qk_norm_at == NONE {
        return Err(KernelError::invalid("gate_at", "an output gate needs the per-head norms' kernel"));
    }
    let gate_heads = if params.gate_at == 0 { 0 } else { params.q_dim / hd };
    let (spec, grid) = if params.qk_norm_at == NONE {
        (&ATTN_QKV, Grid::Matrix { outputs: (params.q_dim + 2 * params.kv_dim) / 2, logit_rows: false })
    } else {
        (&ATTN_QKV_NORM, Grid::Heads { heads: (params.q_dim + 2 * params.kv_dim) / hd + gate_heads })
    };
    bind(gpu, spec, &formats, params, &[b.step, b.x, b.norm, b.wq, b.wk, b.wv, b.rope, b.q, b.kv], grid, params.dim)
}

// ---------------------------------------------------------------------------------------------
// attention.wgsl and attention_combine.wgsl

wgsl_struct! {
    /// The parameters of `attention.wgsl` and `attention_combine.wgsl`.
    pub struct AttentionParams {
        /// Query heads.
        pub heads: u32,
        /// Key/value heads (dividing `heads`).
        pub kv_heads: u32,
        /// Values per head.
        pub head_dim: u32,
        /// Scores are `q·k · scale` (1/√head_dim).
        pub scale: f32,
        /// Keys a query sees (its own position and the `window − 1` before it); 0: all earlier.
        pub window: u32,
        /// f32 offset in `q` of the output gate's values (`attention_combine` multiplies each
        /// output by their sigmoid), or 0 without a gate (as in [`AttnQkvParams::gate_at`]).
        pub gate_at: u32,
        /// Rows of the block's ring (position `p` at row `p mod ring`), or 0: row `p`
        /// ([`AttnQkvParams::ring`]).
        pub ring: u32,
        /// Padding (uniform structs are read in 16-byte rows).
        pub _pad2: u32,
    }
}

static ATTENTION: KernelSpec = KernelSpec {
    name: "attention",
    source: include_str!("../../../shaders/attention.wgsl"),
    structs: &[StepParams::WGSL, AttentionParams::WGSL],
    rms: false,
    lib: &[],
    workgroup_bytes: 0,
    declared: false,
    slots: &[
        STEP,
        Slot::Uniform("params", AttentionParams::NAME),
        Slot::Read("q", "array<f32>"),
        Slot::Read("kv", "array<f32>"),
        Slot::ReadWrite("partials", "array<f32>"),
    ],
};

static ATTENTION_COMBINE: KernelSpec = KernelSpec {
    name: "attention_combine",
    source: include_str!("../../../shaders/attention_combine.wgsl"),
    structs: &[StepParams::WGSL, AttentionParams::WGSL],
    rms: false,
    lib: &[],
    workgroup_bytes: 0,
    declared: false,
    slots: &[
        STEP,
        Slot::Uniform("params", AttentionParams::NAME),
        Slot::Read("partials", "array<f32>"),
        Slot::Read("q", "array<f32>"),
        Slot::ReadWrite("out", "array<f32>"),
    ],
};

fn check_attention(params: &AttentionParams) -> Result<(), KernelError> {
    let ok = params.heads > 0
        && params.kv_heads > 0
        && params.heads.is_multiple_of(params.kv_heads)
        && params.head_dim > 0
        && params.head_dim <= MAX_HEAD_DIM;
    if ok {
        Ok(())
    } else {
        Err(KernelError::invalid(
            "attention",
            format!("heads divisible by kv_heads and head_dim ≤ {MAX_HEAD_DIM}, got {params:?}"),
        ))
    }
}

/// `attention.wgsl`: the partial records of each key range.
pub fn attention(
    gpu: &Gpu,
    params: AttentionParams,
    step: &BufferView,
    q: &BufferView,
    kv: &BufferView,
    partials: &BufferView,
) -> Result<Bound, KernelError> {
    check_attention(&params)?;
    bind(gpu, &ATTENTION, &[], params, &[step, q, kv, partials], Grid::Attention { heads: params.heads }, 0)
}

/// `attention_combine.wgsl`: each head's output from its records, times the sigmoid of its
/// gate in `q` where `params.gate_at` is set.
pub fn attention_combine(
    gpu: &Gpu,
    params: AttentionParams,
    step: &BufferView,
    partials: &BufferView,
    q: &BufferView,
    out: &BufferView,
) -> Result<Bound, KernelError> {
    check_attention(&params)?;
    bind(gpu, &ATTENTION_COMBINE, &[], params, &[step, partials, q, out], Grid::Combine { heads: params.heads }, 0)
}

/// Floats of one record of `attention.wgsl` (m, l, then the head's values).
pub fn attention_record_len(head_dim: u32) -> u32 {
    head_dim + 2
}

// ---------------------------------------------------------------------------------------------
// matvec_residual.wgsl

wgsl_struct! {
    /// `matvec_residual.wgsl`'s parameters.
    pub struct MatvecParams {
        /// Columns of `w` (and of `a`).
        pub inputs: u32,
        /// Rows of `w` (and columns of `x`).
        pub outputs: u32,
        /// 1: `x += a·wᵀ` (the residual addition); 0: `x = a·wᵀ` (a sub-layer's output that a
        /// post-norm will normalise first).
        pub accumulate: u32,
        /// Padding (uniform structs are read in 16-byte rows).
        pub _pad0: u32,
    }
}

static MATVEC_RESIDUAL: KernelSpec = KernelSpec {
    name: "matvec_residual",
    source: include_str!("../../../shaders/matvec_residual.wgsl"),
    structs: &[StepParams::WGSL, MatvecParams::WGSL],
    rms: false,
    lib: &[],
    workgroup_bytes: 0,
    declared: false,
    slots: &[
        STEP,
        Slot::Uniform("params", MatvecParams::NAME),
        Slot::Read("a", "array<vec4<f32>>"),
        Slot::Weights("w", true),
        Slot::ReadWrite("x", "array<f32>"),
    ],
};

/// `matvec_residual.wgsl`: `x += a·wᵀ`, or `x = a·wᵀ` when `params.accumulate` is 0.
pub fn matvec_residual(
    gpu: &Gpu,
    format: WeightFormat,
    params: MatvecParams,
    step: &BufferView,
    a: &BufferView,
    w: &BufferView,
    x: &BufferView,
) -> Result<Bound, KernelError> {
    let grid = Grid::Matrix { outputs: params.outputs, logit_rows: false };
    bind(gpu, &MATVEC_RESIDUAL, &[format], params, &[step, a, w, x], grid, 0)
}

// ---------------------------------------------------------------------------------------------
// ffn_gate_up.wgsl

wgsl_struct! {
    /// `ffn_gate_up.wgsl`'s parameters.
    pub struct FfnParams {
        /// Embedding length.
        pub dim: u32,
        /// Hidden units (rows of the gate and up projections).
        pub hidden: u32,
        /// RMSNorm epsilon.
        pub eps: f32,
        /// The gate's activation: [`ACTIVATION_SILU`] or [`ACTIVATION_GELU_TANH`].
        pub activation: u32,
    }
}

/// `FfnParams::activation` of SwiGLU.
pub const ACTIVATION_SILU: u32 = 0;
/// `FfnParams::activation` of GeGLU with GELU's tanh form.
pub const ACTIVATION_GELU_TANH: u32 = 1;

static FFN_GATE_UP: KernelSpec = KernelSpec {
    name: "ffn_gate_up",
    source: include_str!("../../../shaders/ffn_gate_up.wgsl"),
    structs: &[StepParams::WGSL, FfnParams::WGSL],
    rms: true,
    lib: &[],
    workgroup_bytes: 0,
    declared: false,
    slots: &[
        STEP,
        Slot::Uniform("params", FfnParams::NAME),
        Slot::Read("x", "array<vec4<f32>>"),
        Slot::Read("norm", "array<vec4<f32>>"),
        Slot::Weights("w_gate", true),
        Slot::Weights("w_up", true),
        Slot::ReadWrite("h", "array<f32>"),
    ],
};

/// The buffers of [`ffn_gate_up`].
#[allow(missing_docs)] // The bindings of `ffn_gate_up.wgsl`, by their names there.
pub struct FfnBuffers<'a> {
    pub step: &'a BufferView,
    pub x: &'a BufferView,
    pub norm: &'a BufferView,
    pub w_gate: &'a BufferView,
    pub w_up: &'a BufferView,
    pub h: &'a BufferView,
}

/// `ffn_gate_up.wgsl`: RMSNorm, gate and up, act(gate)·up. `formats`: of w_gate, w_up.
pub fn ffn_gate_up(
    gpu: &Gpu,
    formats: [WeightFormat; 2],
    params: FfnParams,
    b: FfnBuffers,
) -> Result<Bound, KernelError> {
    let grid = Grid::Matrix { outputs: params.hidden, logit_rows: false };
    bind(gpu, &FFN_GATE_UP, &formats, params, &[b.step, b.x, b.norm, b.w_gate, b.w_up, b.h], grid, params.dim)
}

// ---------------------------------------------------------------------------------------------
// lm_head.wgsl

wgsl_struct! {
    /// `lm_head.wgsl`'s parameters.
    pub struct LmHeadParams {
        /// Embedding length.
        pub dim: u32,
        /// Vocabulary entries (the logits' row length).
        pub vocab: u32,
        /// RMSNorm epsilon.
        pub eps: f32,
        /// The vocabulary entry the bound output layer (part) starts at.
        pub first: u32,
        /// Entries (rows of `w`) in the bound part.
        pub count: u32,
        /// Padding (uniform structs are read in 16-byte rows).
        pub _pad0: u32,
        /// Padding (uniform structs are read in 16-byte rows).
        pub _pad1: u32,
        /// Padding (uniform structs are read in 16-byte rows).
        pub _pad2: u32,
    }
}

static LM_HEAD: KernelSpec = KernelSpec {
    name: "lm_head",
    source: include_str!("../../../shaders/lm_head.wgsl"),
    structs: &[StepParams::WGSL, LmHeadParams::WGSL],
    rms: true,
    lib: &[],
    workgroup_bytes: 0,
    declared: false,
    slots: &[
        STEP,
        Slot::Uniform("params", LmHeadParams::NAME),
        Slot::Read("x", "array<vec4<f32>>"),
        Slot::Read("norm", "array<vec4<f32>>"),
        Slot::Weights("w", true),
        Slot::ReadWrite("logits", "array<f32>"),
    ],
};

/// The buffers of [`lm_head`].
#[allow(missing_docs)] // The bindings of `lm_head.wgsl`, by their names there.
pub struct LmHeadBuffers<'a> {
    pub step: &'a BufferView,
    pub x: &'a BufferView,
    pub norm: &'a BufferView,
    pub w: &'a BufferView,
    pub logits: &'a BufferView,
}

/// `lm_head.wgsl`: the final RMSNorm and the output layer, into `logits` `[logit_rows, vocab]`:
/// the entries `first .. first + count` that the bound part of the output layer holds.
pub fn lm_head(gpu: &Gpu, format: WeightFormat, params: LmHeadParams, b: LmHeadBuffers) -> Result<Bound, KernelError> {
    if params.first.checked_add(params.count).is_none_or(|end| end > params.vocab) {
        return Err(KernelError::invalid("count", format!("entries past the vocabulary, got {params:?}")));
    }
    let grid = Grid::Matrix { outputs: params.count, logit_rows: true };
    bind(gpu, &LM_HEAD, &[format], params, &[b.step, b.x, b.norm, b.w, b.logits], grid, params.dim)
}

// ---------------------------------------------------------------------------------------------
// norm_residual.wgsl

wgsl_struct! {
    /// `norm_residual.wgsl`'s parameters.
    pub struct NormResidualParams {
        /// Values per row.
        pub dim: u32,
        /// RMSNorm epsilon.
        pub eps: f32,
        /// 0: `x += RMSNorm(y)·γ`; 1: `x = RMSNorm(y)·γ` (a Gated DeltaNet block's normalised input).
        pub replace: u32,
        /// Padding (uniform structs are read in 16-byte rows).
        pub _pad1: u32,
    }
}

static NORM_RESIDUAL: KernelSpec = KernelSpec {
    name: "norm_residual",
    source: include_str!("../../../shaders/norm_residual.wgsl"),
    structs: &[StepParams::WGSL, NormResidualParams::WGSL],
    rms: false,
    lib: &[],
    // `inv_rms`.
    workgroup_bytes: 4,
    declared: false,
    slots: &[
        STEP,
        Slot::Uniform("params", NormResidualParams::NAME),
        Slot::Read("y", "array<vec4<f32>>"),
        Slot::Read("norm", "array<vec4<f32>>"),
        Slot::ReadWrite("x", "array<vec4<f32>>"),
    ],
};

/// `norm_residual.wgsl`: `x += RMSNorm(y)·γ` row by row (a sub-layer's output through the norm
/// after it, into the residual stream); `x = RMSNorm(y)·γ` when `params.replace` is 1.
pub fn norm_residual(
    gpu: &Gpu,
    params: NormResidualParams,
    step: &BufferView,
    y: &BufferView,
    norm: &BufferView,
    x: &BufferView,
) -> Result<Bound, KernelError> {
    if !params.dim.is_multiple_of(4) {
        return Err(KernelError::invalid("dim", format!("a multiple of 4, got {}", params.dim)));
    }
    bind(gpu, &NORM_RESIDUAL, &[], params, &[step, y, norm, x], Grid::Rows, 0)
}

// ---------------------------------------------------------------------------------------------
// delta_conv.wgsl and delta_rule.wgsl: a Gated DeltaNet block (Qwen3.5) between its projections

wgsl_struct! {
    /// `delta_conv.wgsl`'s parameters.
    pub struct DeltaConvParams {
        /// Channels (queries, keys and values of every head: `2·key_heads·head_dim + value_heads·head_dim`).
        pub channels: u32,
        /// Taps per channel (the state holds `kernel − 1` inputs).
        pub kernel: u32,
        /// Padding (uniform structs are read in 16-byte rows).
        pub _pad0: u32,
        /// Padding (uniform structs are read in 16-byte rows).
        pub _pad1: u32,
    }
}

/// Most taps [`delta_conv`] takes (`MAX_CONV_KERNEL` in `delta_conv.wgsl`; Qwen3.5 has 4).
pub const MAX_CONV_KERNEL: u32 = 8;

static DELTA_CONV: KernelSpec = KernelSpec {
    name: "delta_conv",
    source: include_str!("../../../shaders/delta_conv.wgsl"),
    structs: &[StepParams::WGSL, DeltaConvParams::WGSL],
    rms: false,
    lib: &[],
    workgroup_bytes: 0,
    declared: false,
    slots: &[
        STEP,
        Slot::Uniform("params", DeltaConvParams::NAME),
        Slot::Read("weights", "array<f32>"),
        Slot::ReadWrite("state", "array<f32>"),
        Slot::ReadWrite("mixed", "array<f32>"),
    ],
};

/// `delta_conv.wgsl`: the causal convolution and SiLU of `mixed` (`[rows, channels]`, in place)
/// after the inputs in `state` (`[kernel − 1, channels]`, updated); `weights`: `[channels, kernel]` f32.
pub fn delta_conv(
    gpu: &Gpu,
    params: DeltaConvParams,
    step: &BufferView,
    weights: &BufferView,
    state: &BufferView,
    mixed: &BufferView,
) -> Result<Bound, KernelError> {
    let (channels, kernel) = (u64::from(params.channels), u64::from(params.kernel));
    let fits = weights.size >= channels * kernel * 4 && state.size >= (kernel - 1).max(1) * channels * 4;
    if params.kernel == 0 || params.kernel > MAX_CONV_KERNEL || params.channels == 0 || !fits {
        return Err(KernelError::invalid(
            "delta_conv",
            format!("1 to {MAX_CONV_KERNEL} taps and buffers that hold them, got {params:?}"),
        ));
    }
    let grid = Grid::Entries { count: params.channels };
    bind(gpu, &DELTA_CONV, &[], params, &[step, weights, state, mixed], grid, 0)
}

wgsl_struct! {
    /// `delta_rule.wgsl`'s parameters.
    pub struct DeltaRuleParams {
        /// Query and key heads.
        pub key_heads: u32,
        /// Value heads (a multiple of `key_heads`; value head `h` reads key head `h mod key_heads`).
        pub value_heads: u32,
        /// Values per head (keys and values alike).
        pub head_dim: u32,
        /// Epsilon of the L2 norms and of the gated RMSNorm.
        pub eps: f32,
        /// What the normalised query is multiplied by (1/√head_dim).
        pub scale: f32,
        /// Padding (uniform structs are read in 16-byte rows).
        pub _pad0: u32,
        /// Padding (uniform structs are read in 16-byte rows).
        pub _pad1: u32,
        /// Padding (uniform structs are read in 16-byte rows).
        pub _pad2: u32,
    }
}

/// The one owner of `delta_rule.wgsl`'s chunk length (a macro, so the WGSL constant is made
/// from the same literal).
macro_rules! delta_rule_chunk {
    () => {
        16
    };
}

/// Rows `delta_rule.wgsl` takes through the state at once (the chunked form's chunk: the state is
/// read and written once per chunk). 16 keeps its per-lane arrays (four of `CHUNK` values) and
/// its workgroup memory small on every adapter.
pub const DELTA_RULE_CHUNK: u32 = delta_rule_chunk!();

static DELTA_RULE: KernelSpec = KernelSpec {
    name: "delta_rule",
    source: include_str!("../../../shaders/delta_rule.wgsl"),
    structs: &[StepParams::WGSL, DeltaRuleParams::WGSL],
    rms: false,
    lib: &[concat!("const CHUNK: u32 = ", delta_rule_chunk!(), "u;\n")],
    // The chunked form's four arrays of CHUNK, two of CHUNK² and a vec4; the row form's query and
    // key and a vec4.
    workgroup_bytes: 4 * (4 * DELTA_RULE_CHUNK + 2 * DELTA_RULE_CHUNK * DELTA_RULE_CHUNK) + 16 + 8 * MAX_HEAD_DIM + 16,
    declared: false,
    slots: &[
        STEP,
        Slot::Uniform("params", DeltaRuleParams::NAME),
        Slot::Read("mixed", "array<f32>"),
        Slot::Read("z", "array<f32>"),
        Slot::Read("beta", "array<f32>"),
        Slot::Read("alpha", "array<f32>"),
        Slot::Read("vectors", "array<f32>"),
        Slot::ReadWrite("state", "array<f32>"),
        Slot::ReadWrite("out", "array<f32>"),
    ],
};

/// The buffers of [`delta_rule`].
#[allow(missing_docs)] // The bindings of `delta_rule.wgsl`, by their names there.
pub struct DeltaRuleBuffers<'a> {
    pub step: &'a BufferView,
    /// `delta_conv`'s output `[rows, channels]`: queries, keys, values.
    pub mixed: &'a BufferView,
    pub z: &'a BufferView,
    pub beta: &'a BufferView,
    pub alpha: &'a BufferView,
    /// `dt_bias [value_heads] | a [value_heads] | γ [head_dim]`.
    pub vectors: &'a BufferView,
    /// `[value_heads, head_dim, head_dim]`.
    pub state: &'a BufferView,
    pub out: &'a BufferView,
}

/// `delta_rule.wgsl`: the L2 norms, the gates, the gated delta rule over `state` (updated), and
/// the gated RMSNorm, into `out` `[rows, value_heads · head_dim]`; a pass of several rows in
/// chunks of [`DELTA_RULE_CHUNK`] rows (the chunked form, its many-row pipeline), a decode step
/// in the row form (its one-row pipeline).
pub fn delta_rule(gpu: &Gpu, params: DeltaRuleParams, b: DeltaRuleBuffers) -> Result<Bound, KernelError> {
    let DeltaRuleParams { key_heads, value_heads, head_dim, .. } = params;
    let state_bytes = u64::from(value_heads) * u64::from(head_dim) * u64::from(head_dim) * 4;
    let ok = key_heads > 0
        && value_heads.is_multiple_of(key_heads)
        && (1..=MAX_HEAD_DIM).contains(&head_dim)
        && b.state.size >= state_bytes
        && b.vectors.size >= u64::from(2 * value_heads + head_dim) * 4
        // A lane per row for each of the three per-row tasks.
        && gpu.tuning().workgroup >= 3 * DELTA_RULE_CHUNK;
    if !ok {
        return Err(KernelError::invalid(
            "delta_rule",
            format!(
                "value heads a multiple of key heads, heads of at most {MAX_HEAD_DIM}, a whole state, got {params:?}"
            ),
        ));
    }
    let buffers = [b.step, b.mixed, b.z, b.beta, b.alpha, b.vectors, b.state, b.out];
    bind(gpu, &DELTA_RULE, &[], params, &buffers, Grid::Workgroups { count: value_heads }, 0)
}

// ---------------------------------------------------------------------------------------------
// gather.wgsl

wgsl_struct! {
    /// `gather.wgsl`'s parameters.
    pub struct GatherParams {
        /// Entries gathered.
        pub count: u32,
        /// The word of `ids` the first id is at.
        pub ids_at: u32,
        /// Padding (uniform structs are read in 16-byte rows).
        pub _pad0: u32,
        /// Padding (uniform structs are read in 16-byte rows).
        pub _pad1: u32,
    }
}

static GATHER: KernelSpec = KernelSpec {
    name: "gather",
    source: include_str!("../../../shaders/gather.wgsl"),
    structs: &[StepParams::WGSL, GatherParams::WGSL],
    rms: false,
    lib: &[],
    workgroup_bytes: 0,
    declared: false,
    slots: &[
        STEP,
        Slot::Uniform("params", GatherParams::NAME),
        Slot::Read("ids", "array<u32>"),
        Slot::Read("row", "array<f32>"),
        Slot::ReadWrite("out", "array<f32>"),
    ],
};

/// `gather.wgsl`: `out[i] = row[ids[ids_at + i]]` for `i < count`, in one dispatch.
pub fn gather(
    gpu: &Gpu,
    params: GatherParams,
    step: &BufferView,
    ids: &BufferView,
    row: &BufferView,
    out: &BufferView,
) -> Result<Bound, KernelError> {
    if u64::from(params.ids_at + params.count) * 4 > ids.size || u64::from(params.count) * 4 > out.size {
        return Err(KernelError::invalid("count", format!("{params:?} past the ids or the output")));
    }
    bind(gpu, &GATHER, &[], params, &[step, ids, row, out], Grid::Entries { count: params.count }, 0)
}

// ---------------------------------------------------------------------------------------------
// attention_weights.wgsl

/// Workgroup reductions (`shaders/lib/reduce.wgsl`) for the kernels that give a workgroup a row.
const REDUCE_LIB: &str = include_str!("../../../shaders/lib/reduce.wgsl");

/// [`AttentionWeightsParams::head`] for the mean over every head.
pub const MEAN_OF_HEADS: u32 = u32::MAX;

wgsl_struct! {
    /// `attention_weights.wgsl`'s parameters.
    pub struct AttentionWeightsParams {
        /// Query heads.
        pub heads: u32,
        /// Key/value heads (`heads` is a multiple).
        pub kv_heads: u32,
        /// Values per head.
        pub head_dim: u32,
        /// Scores are `q·k · scale`.
        pub scale: f32,
        /// A local block's window (0: none).
        pub window: u32,
        /// The head shown, or [`MEAN_OF_HEADS`].
        pub head: u32,
        /// The position of `out`'s first row.
        pub first: u32,
        /// Rows of `out` (positions `first .. first + count`).
        pub count: u32,
        /// Values per row of `out` (at least `first + count`: a row holds keys `0..=position`).
        pub keys: u32,
        /// Rows of the block's ring (position `p` at row `p mod ring`), or 0: row `p`
        /// ([`AttnQkvParams::ring`]).
        pub ring: u32,
        /// Padding (uniform structs are read in 16-byte rows).
        pub _pad1: u32,
        /// Padding (uniform structs are read in 16-byte rows).
        pub _pad2: u32,
    }
}

static ATTENTION_WEIGHTS: KernelSpec = KernelSpec {
    name: "attention_weights",
    source: include_str!("../../../shaders/attention_weights.wgsl"),
    structs: &[StepParams::WGSL, AttentionWeightsParams::WGSL],
    rms: false,
    lib: &[REDUCE_LIB],
    // The query and `lib/reduce.wgsl`'s array of WG words (at most 256 lanes).
    workgroup_bytes: 4 * MAX_HEAD_DIM + 4 * 256,
    declared: false,
    slots: &[
        STEP,
        Slot::Uniform("params", AttentionWeightsParams::NAME),
        Slot::Read("q", "array<f32>"),
        Slot::Read("kv", "array<f32>"),
        Slot::ReadWrite("out", "array<f32>"),
    ],
};

/// `attention_weights.wgsl`: for each row of the pass at a position in `first .. first + count`,
/// the softmax weights of one head (or the mean of every head) over its keys, into row
/// `position − first` of `out` `[count, keys]`. One dispatch, after the block's `attn_qkv`.
pub fn attention_weights(
    gpu: &Gpu,
    params: AttentionWeightsParams,
    step: &BufferView,
    q: &BufferView,
    kv: &BufferView,
    out: &BufferView,
) -> Result<Bound, KernelError> {
    let AttentionWeightsParams { heads, kv_heads, head_dim, head, first, count, keys, .. } = params;
    let ok = kv_heads > 0
        && heads.is_multiple_of(kv_heads)
        && (1..=MAX_HEAD_DIM).contains(&head_dim)
        && (head < heads || head == MEAN_OF_HEADS)
        && keys >= first + count
        && out.size >= u64::from(count) * u64::from(keys) * 4
        && gpu.tuning().workgroup.is_power_of_two()
        && gpu.tuning().workgroup <= 256;
    if !ok {
        return Err(KernelError::invalid(
            "attention_weights",
            format!("{params:?} with an output of {} bytes", out.size),
        ));
    }
    bind(gpu, &ATTENTION_WEIGHTS, &[], params, &[step, q, kv, out], Grid::Rows, 0)
}

// ---------------------------------------------------------------------------------------------
// score.wgsl

wgsl_struct! {
    /// `score.wgsl`'s parameters.
    pub struct ScoreParams {
        /// Entries per logit row.
        pub vocab: u32,
        /// The text position of the first record (and of the first word of `targets`).
        pub first: u32,
        /// Top entries per record (`0..=`[`crate::MAX_SCORE_TOP_K`]).
        pub k: u32,
        /// Padding (uniform structs are read in 16-byte rows).
        pub _pad0: u32,
    }
}

static SCORE: KernelSpec = KernelSpec {
    name: "score",
    source: include_str!("../../../shaders/score.wgsl"),
    structs: &[StepParams::WGSL, ScoreParams::WGSL],
    rms: false,
    lib: &[concat!("const MAX_K: u32 = ", crate::score::max_score_top_k!(), "u;\n"), REDUCE_LIB],
    // `lib/reduce.wgsl`'s array and the merge's two, of WG words (at most 256 lanes).
    workgroup_bytes: 3 * 4 * 256,
    declared: false,
    slots: &[
        STEP,
        Slot::Uniform("params", ScoreParams::NAME),
        Slot::Read("targets", "array<u32>"),
        Slot::Read("logits", "array<f32>"),
        Slot::ReadWrite("out", "array<u32>"),
    ],
};

/// `score.wgsl`: per logit row of the pass (text position `p`), the record of
/// [`crate::score`] at `out[(p − first) · score_words(k)]`, for the token `targets[p − first]`.
/// `targets` and `out` cover the text's positions from `first`.
pub fn score(
    gpu: &Gpu,
    params: ScoreParams,
    step: &BufferView,
    targets: &BufferView,
    logits: &BufferView,
    out: &BufferView,
) -> Result<Bound, KernelError> {
    crate::validate_score_k(params.k as usize)?;
    let positions = targets.size / 4;
    let ok = params.vocab >= params.k.max(1)
        && logits.size >= u64::from(params.vocab) * 4
        && out.size >= positions * crate::score_words(params.k as usize) as u64 * 4
        && gpu.tuning().workgroup.is_power_of_two()
        && gpu.tuning().workgroup <= 256;
    if !ok {
        let reason = format!("{params:?} with {positions} targets, a whole row and record per position");
        return Err(KernelError::invalid("score", reason));
    }
    bind(gpu, &SCORE, &[], params, &[step, targets, logits, out], Grid::LogitRows, 0)
}

/// Every layer kernel's module for every weight format (each weight binding in each format,
/// the kernel's other bindings in the first), one-row and many-row variants, for `tuning`, with
/// and without a staged input: `(label, WGSL)`. For validating every variant on a driver
/// (`tests/layer_parity.rs`) and in a browser's compiler (`examples/shader_modules.rs`).
pub fn module_variants(tuning: crate::Tuning) -> Vec<(String, String)> {
    let kernels = [
        &EMBED,
        &ATTN_QKV,
        &ATTN_QKV_NORM,
        &ATTENTION,
        &ATTENTION_COMBINE,
        &MATVEC_RESIDUAL,
        &NORM_RESIDUAL,
        &FFN_GATE_UP,
        &LM_HEAD,
        &GATHER,
        &SCORE,
        &ATTENTION_WEIGHTS,
        &DELTA_CONV,
        &DELTA_RULE,
    ];
    let mut modules = Vec::new();
    for spec in kernels {
        let weights = spec.slots.iter().filter(|slot| matches!(slot, Slot::Weights(..))).count();
        let format_sets: Vec<Vec<WeightFormat>> = if weights == 0 {
            vec![Vec::new()]
        } else {
            WeightFormat::ALL.into_iter().map(|format| vec![format; weights]).collect()
        };
        for formats in &format_sets {
            for rows in [1, PREFILL_ROWS_PER_GROUP] {
                for stage_cols4 in if spec.rms { vec![0, 144] } else { vec![0] } {
                    let label = format!(
                        "{}-{:?}-r{rows}-s{stage_cols4}-{}x{}-{:?}",
                        spec.name, formats, tuning.workgroup, tuning.lanes_per_row, tuning.params
                    );
                    modules.push((label, spec.module_source(tuning, rows, stage_cols4, formats)));
                }
            }
        }
    }
    modules
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_context_is_one_range_and_a_long_one_many() {
        let shape = StepShape::new(99, 1, 1, 9, 4096);
        assert_eq!((shape.attn_chunks, shape.attn_chunk_len), (2, 64));
        let shape = StepShape::new(1999, 1, 1, 9, 4096);
        assert_eq!((shape.attn_chunks, shape.attn_chunk_len), (32, 64));
        // 126 rounds of 64 keys over at most 64 ranges: ranges of 2 rounds, 63 of them.
        let shape = StepShape::new(8000, 1, 1, 9, 4096);
        assert_eq!((shape.attn_chunks, shape.attn_chunk_len), (63, 128));
        // A long prefill keeps to the record budget.
        let shape = StepShape::new(0, 256, 1, 9, 4096);
        assert_eq!((shape.attn_chunks, shape.attn_chunk_len, shape.logit_row), (1, 256, 255));
    }

    #[test]
    fn every_range_holds_a_key() {
        for pos in [0, 1, 63, 64, 65, 200, 4095, 5000] {
            for rows in [1, 3, 64] {
                let shape = StepShape::new(pos, rows, 1, 9, 4096);
                assert!((shape.attn_chunks - 1) * shape.attn_chunk_len < pos + rows, "{shape:?}");
                assert!(shape.attn_chunks * shape.attn_chunk_len >= pos + rows, "{shape:?}");
                assert!(shape.attn_chunks * rows * 9 <= 4096 || shape.attn_chunks == 1);
            }
        }
    }
}
