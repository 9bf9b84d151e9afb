//! The layer kernels against their CPU references (`reference::layer`), on lavapipe: every weight
//! format (weights made of random GGUF blocks, the reference dequantized by `nucleus-gguf`), both
//! tunings (one lane per row as on CPU adapters; 16 lanes per row with the group reduction, as on
//! GPUs), one-row and many-row variants, shapes that are not multiples of the workgroup, and
//! positions 0, 1 and at the end of the cache.

mod common;

use std::sync::OnceLock;

use burn::backend::wgpu::wgpu;
use common::{Rng, block_on};
use nucleus_gguf::{GgmlType, dequantize};
use nucleus_kernels::layer::{
    self, ACTIVATION_GELU_TANH, ACTIVATION_SILU, AttentionParams, AttentionWeightsParams, AttnQkvBuffers,
    AttnQkvParams, DeltaConvParams, DeltaRuleBuffers, DeltaRuleParams, EmbedParams, FfnBuffers, FfnParams,
    GatherParams, LmHeadParams, MatvecParams, NormResidualParams, ScoreParams, StepShape,
};
use nucleus_kernels::{Gpu, GpuBuffer, Recorder, Tuning, WeightFormat, WgslStruct, reference};

/// lavapipe, once per test binary (Burn's runtime starts once).
fn gpu() -> &'static Gpu {
    static GPU: OnceLock<Gpu> = OnceLock::new();
    GPU.get_or_init(|| nucleus_kernels::gpu::init().expect("wgpu (lavapipe: apt-get install mesa-vulkan-drivers)").1)
}

/// Every tuning on the same adapter: the parameters in uniforms with one lane per row and with
/// 16, and in storage (lavapipe's own).
fn tunings() -> [Gpu; 3] {
    [gpu().retuned(Tuning::CPU_ADAPTER), gpu().retuned(Tuning::GPU), gpu().retuned(Tuning::LAVAPIPE)]
}

fn storage(gpu: &Gpu, data: &[u8]) -> GpuBuffer {
    let buffer = gpu.storage("test", data.len() as u64);
    gpu.write(buffer.buffer(), 0, data);
    buffer
}

fn f32s(gpu: &Gpu, values: &[f32]) -> GpuBuffer {
    storage(gpu, bytemuck::cast_slice(values))
}

/// The step uniform and the ids, laid out as the model lays them out (ids 256 bytes in).
struct Step {
    buffer: GpuBuffer,
    shape: StepShape,
}

impl Step {
    fn new(gpu: &Gpu, shape: StepShape, ids: &[u32]) -> Self {
        use wgpu::BufferUsages as U;
        let buffer = gpu.buffer("step", 256 + 4 * ids.len().max(1) as u64, U::UNIFORM | U::STORAGE | U::COPY_DST);
        gpu.write(buffer.buffer(), 0, shape.params().bytes());
        if !ids.is_empty() {
            gpu.write(buffer.buffer(), 256, bytemuck::cast_slice(ids));
        }
        Self { buffer, shape }
    }

    fn view(&self) -> nucleus_kernels::BufferView {
        self.buffer.range(0, std::mem::size_of::<layer::StepParams>() as u64)
    }

    fn ids(&self) -> nucleus_kernels::BufferView {
        self.buffer.range(256, self.buffer.size() - 256)
    }
}

/// Records `bound` for `shape`, submits, and reads `buffer` back as f32.
fn run(gpu: &Gpu, bound: &[&layer::Bound], shape: &StepShape, buffer: &GpuBuffer) -> Vec<f32> {
    let mut recorder = Recorder::new(gpu);
    for kernel in bound {
        kernel.record(&mut recorder, shape);
    }
    let staging = gpu.buffer("readback", buffer.size(), wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
    recorder.copy(buffer.buffer(), 0, staging.buffer(), 0, buffer.size());
    gpu.submit([recorder.finish()]);
    bytemuck::cast_slice(&block_on(gpu.read(staging.buffer(), buffer.size())).expect("read back")).to_vec()
}

/// A random `[rows, cols]` weight in `format`: its bytes, and `nucleus-gguf`'s dequantization.
fn random_weight(rng: &mut Rng, format: WeightFormat, rows: usize, cols: usize) -> (Vec<u8>, Vec<f32>) {
    let count = rows * cols;
    let ggml = format.ggml_type();
    let (block, block_bytes) = ggml.block_layout();
    let blocks = count / block as usize;
    let mut bytes: Vec<u8> = (0..blocks * block_bytes as usize).map(|_| rng.below(256) as u8).collect();
    let f16 = |v: f64| half::f16::from_f64(v).to_le_bytes();
    let scale = |rng: &mut Rng| f16(0.01 + 0.09 * rng.unit());
    for b in bytes.chunks_exact_mut(block_bytes as usize) {
        match ggml {
            GgmlType::F32 => b.copy_from_slice(&((rng.unit() - 0.5) as f32).to_le_bytes()),
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => b[0..2].copy_from_slice(&scale(rng)),
            GgmlType::Q4_1 | GgmlType::Q5_1 => {
                b[0..2].copy_from_slice(&scale(rng));
                b[2..4].copy_from_slice(&f16(0.2 * (rng.unit() - 0.5)));
            }
            GgmlType::Q4K | GgmlType::Q5K => {
                b[0..2].copy_from_slice(&f16(0.002 + 0.002 * rng.unit()));
                b[2..4].copy_from_slice(&f16(0.002 * rng.unit()));
            }
            GgmlType::Q6K => b[208..210].copy_from_slice(&f16(0.0005 + 0.001 * rng.unit())),
            other => unreachable!("{other}"),
        }
    }
    let values = dequantize(ggml, &bytes, count).expect("dequantize");
    (bytes, values)
}

/// A local block's ring of `ring` rows (`width` values each) after positions `0..end` were
/// written into it: row `r` holds the last position `p` with `p mod ring = r`, taken from
/// `by_position` (a row per position).
fn ring_of(by_position: &[f32], width: usize, end: usize, ring: usize) -> Vec<f32> {
    let mut rows = vec![0.0; ring * width];
    for p in end.saturating_sub(ring)..end {
        let r = p % ring;
        rows[r * width..(r + 1) * width].copy_from_slice(&by_position[p * width..(p + 1) * width]);
    }
    rows
}

fn random_f32(rng: &mut Rng, n: usize, spread: f64) -> Vec<f32> {
    (0..n).map(|_| (rng.normal() * spread) as f32).collect()
}

/// Columns a format's rows can have in these tests: two sizes each, neither a power of two for
/// the 32-value blocks.
fn dims(format: WeightFormat) -> [usize; 2] {
    match format {
        WeightFormat::Q4K | WeightFormat::Q5K | WeightFormat::Q6K => [256, 512],
        _ => [96, 288],
    }
}

fn assert_close(gpu: &[f32], expected: &[f64], what: &str) {
    assert_eq!(gpu.len(), expected.len(), "{what}: length");
    let scale = expected.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    for (i, (&g, &e)) in gpu.iter().zip(expected).enumerate() {
        assert!(
            (f64::from(g) - e).abs() <= 2e-5 * scale + 1e-5,
            "{what}: [{i}] gpu {g}, reference {e} (scale {scale})"
        );
    }
}

/// The parity test of `shaders/lib/row_dot.wgsl`, the one inner loop of every matrix kernel
/// (and of `lib/rms.wgsl` when the kernel normalises): one and four x rows per lane group
/// (`R` = 1 for one row, 4 for 3, 5 and 6 rows, whose last group is partly past the end), one
/// and 32 lanes per output row, against `reference::matvec` in f64; the product added to the
/// residual, or (`accumulate` 0, a sub-layer output before its post-norm) written.
#[test]
fn matvec_residual_every_format_tuning_and_row_count() {
    let mut rng = Rng::new(1);
    for gpu in tunings() {
        for format in WeightFormat::ALL {
            for inputs in dims(format) {
                let outputs = 37;
                let (bytes, w) = random_weight(&mut rng, format, outputs, inputs);
                let weight = storage(&gpu, &bytes);
                for (rows, accumulate) in [(1usize, 1u32), (3, 1), (6, 1), (1, 0), (5, 0)] {
                    let a = random_f32(&mut rng, rows * inputs, 1.0);
                    let x0 = random_f32(&mut rng, rows * outputs, 1.0);
                    let (a_buf, x_buf) = (f32s(&gpu, &a), f32s(&gpu, &x0));
                    let step = Step::new(&gpu, StepShape::new(0, rows as u32, 1, 1, 4096), &[]);
                    let params = MatvecParams {
                        inputs: inputs as u32,
                        outputs: outputs as u32,
                        accumulate,
                        ..Default::default()
                    };
                    let bound = layer::matvec_residual(
                        &gpu,
                        format,
                        params,
                        &step.view(),
                        &a_buf.view(),
                        &weight.view(),
                        &x_buf.view(),
                    )
                    .unwrap();
                    let got = run(&gpu, &[&bound], &step.shape, &x_buf);
                    let product = reference::matvec(&a, &w, inputs);
                    let base = |x: f32| if accumulate == 1 { f64::from(x) } else { 0.0 };
                    let expected: Vec<f64> = x0.iter().zip(&product).map(|(&x, &p)| base(x) + p).collect();
                    let what =
                        format!("{format} {inputs} cols, {rows} rows, accumulate {accumulate}, {:?}", gpu.tuning());
                    assert_close(&got, &expected, &what);
                }
            }
        }
    }
}

/// The output layer whole, and in two parts of consecutive rows (a matrix larger than one
/// binding), each part's dispatch writing its own entries of the same logits.
#[test]
fn lm_head_last_row_and_all_rows_whole_and_in_parts() {
    let mut rng = Rng::new(2);
    for gpu in tunings() {
        for format in WeightFormat::ALL {
            let dim = dims(format)[0];
            let vocab = 101;
            let (bytes, w) = random_weight(&mut rng, format, vocab, dim);
            let row_bytes = bytes.len() / vocab;
            let gamma = random_f32(&mut rng, dim, 1.0);
            for (rows, logit_rows, split) in
                [(1usize, 1usize, vocab), (5, 1, vocab), (5, 5, vocab), (1, 1, 38), (5, 5, 70)]
            {
                let parts: Vec<(usize, usize, GpuBuffer)> = [(0, split), (split, vocab)]
                    .into_iter()
                    .filter(|(a, b)| a < b)
                    .map(|(a, b)| (a, b - a, storage(&gpu, &bytes[a * row_bytes..b * row_bytes])))
                    .collect();
                let x = random_f32(&mut rng, rows * dim, 2.0);
                let (x_buf, norm) = (f32s(&gpu, &x), f32s(&gpu, &gamma));
                let logits = gpu.storage("logits", (logit_rows * vocab * 4) as u64);
                let step = Step::new(&gpu, StepShape::new(0, rows as u32, logit_rows as u32, 1, 4096), &[]);
                let bound: Vec<layer::Bound> = parts
                    .iter()
                    .map(|(first, count, weight)| {
                        let params = LmHeadParams {
                            dim: dim as u32,
                            vocab: vocab as u32,
                            eps: 1e-5,
                            first: *first as u32,
                            count: *count as u32,
                            ..Default::default()
                        };
                        let buffers = layer::LmHeadBuffers {
                            step: &step.view(),
                            x: &x_buf.view(),
                            norm: &norm.view(),
                            w: &weight.view(),
                            logits: &logits.view(),
                        };
                        layer::lm_head(&gpu, format, params, buffers).unwrap()
                    })
                    .collect();
                let got = run(&gpu, &bound.iter().collect::<Vec<_>>(), &step.shape, &logits);
                let used = &x[(rows - logit_rows) * dim..];
                let expected = reference::lm_head(used, &gamma, 1e-5, &w);
                assert_close(
                    &got,
                    &expected,
                    &format!(
                        "{format}, {rows} rows, {logit_rows} logit rows, {} parts, {:?}",
                        parts.len(),
                        gpu.tuning()
                    ),
                );
            }
        }
    }
}

#[test]
fn ffn_gate_up_with_two_formats() {
    let mut rng = Rng::new(3);
    for gpu in tunings() {
        for (i, gate_format) in WeightFormat::ALL.into_iter().enumerate() {
            // The up projection in another format of the same block size.
            let up_format =
                WeightFormat::ALL.into_iter().cycle().skip(i + 1).find(|f| dims(*f) == dims(gate_format)).unwrap();
            let dim = dims(gate_format)[1];
            let hidden = 43;
            let (gate_bytes, wg) = random_weight(&mut rng, gate_format, hidden, dim);
            let (up_bytes, wu) = random_weight(&mut rng, up_format, hidden, dim);
            let (w_gate, w_up) = (storage(&gpu, &gate_bytes), storage(&gpu, &up_bytes));
            let gamma = random_f32(&mut rng, dim, 1.0);
            for (rows, activation) in
                [(1usize, ACTIVATION_SILU), (5, ACTIVATION_SILU), (1, ACTIVATION_GELU_TANH), (5, ACTIVATION_GELU_TANH)]
            {
                let x = random_f32(&mut rng, rows * dim, 2.0);
                let (x_buf, norm) = (f32s(&gpu, &x), f32s(&gpu, &gamma));
                let h = gpu.storage("h", (rows * hidden * 4) as u64);
                let step = Step::new(&gpu, StepShape::new(0, rows as u32, 1, 1, 4096), &[]);
                let params = FfnParams { dim: dim as u32, hidden: hidden as u32, eps: 1e-5, activation };
                let buffers = FfnBuffers {
                    step: &step.view(),
                    x: &x_buf.view(),
                    norm: &norm.view(),
                    w_gate: &w_gate.view(),
                    w_up: &w_up.view(),
                    h: &h.view(),
                };
                let bound = layer::ffn_gate_up(&gpu, [gate_format, up_format], params, buffers).unwrap();
                let got = run(&gpu, &[&bound], &step.shape, &h);
                let expected = reference::ffn_gate_up(&x, &gamma, 1e-5, &wg, &wu, activation == ACTIVATION_GELU_TANH);
                let what =
                    format!("{gate_format}+{up_format}, {rows} rows, activation {activation}, {:?}", gpu.tuning());
                assert_close(&got, &expected, &what);
            }
        }
    }
}

/// The rope table for `positions` (`dims` rotated dimensions per head), as the model uploads it.
fn rope_table(positions: usize, dims: usize, base: f64) -> Vec<f32> {
    (0..positions).flat_map(|p| reference::rope_angles(p, dims, base)).flat_map(|(c, s)| [c as f32, s as f32]).collect()
}

/// What a family adds to `attn_qkv`: RoPE on the halves of each head, Q/K/V biases, per-head
/// Q/K norms (`attn_qkv_norm.wgsl`), RoPE on part of each head and an output gate (Qwen3.5).
#[derive(Debug, Clone, Copy)]
struct QkvVariant {
    rope_halves: bool,
    bias: bool,
    qk_norm: bool,
    /// RoPE on half of each head, the rest passed through.
    partial: bool,
    gate: bool,
}

const QKV_VARIANTS: [QkvVariant; 6] = [
    // Llama.
    QkvVariant { rope_halves: false, bias: false, qk_norm: false, partial: false, gate: false },
    // Qwen2.
    QkvVariant { rope_halves: true, bias: true, qk_norm: false, partial: false, gate: false },
    // Qwen3, Gemma 3.
    QkvVariant { rope_halves: true, bias: false, qk_norm: true, partial: false, gate: false },
    // All at once.
    QkvVariant { rope_halves: false, bias: true, qk_norm: true, partial: false, gate: false },
    // Qwen3.5's attention.
    QkvVariant { rope_halves: true, bias: false, qk_norm: true, partial: true, gate: true },
    // Partial RoPE without the per-head norms.
    QkvVariant { rope_halves: true, bias: true, qk_norm: false, partial: true, gate: false },
];

/// `attn_qkv.wgsl` and `attn_qkv_norm.wgsl` against `reference::attn_qkv`: every format, both
/// tunings, every variant, heads that make up the embedding and heads wider than it (Gemma 3's
/// 4 × 256 over 640), at positions 0, 1 and the end of the cache, one and many rows.
#[test]
fn attn_qkv_and_attn_qkv_norm_at_positions_0_1_and_the_end() {
    let mut rng = Rng::new(4);
    let base = 10_000.0;
    for gpu in tunings() {
        for format in WeightFormat::ALL {
            // (heads, kv heads, head dim, dim): q_dim = dim, and q_dim > dim.
            let shapes = if dims(format)[0] == 256 {
                [(4, 2, 64, 256), (2, 1, 160, 256)]
            } else {
                [(3, 1, 32, 96), (2, 1, 64, 96)]
            };
            for (shape_index, (heads, kv_heads, head_dim, dim)) in shapes.into_iter().enumerate() {
                let (q_dim, kv_dim) = (heads * head_dim, kv_heads * head_dim);
                let value_format = if format == WeightFormat::Q6K { WeightFormat::Q4K } else { WeightFormat::Q8_0 };
                let (bq, wq) = random_weight(&mut rng, format, q_dim, dim);
                let (bq_gated, wq_gated) = random_weight(&mut rng, format, 2 * q_dim, dim);
                let (bk, wk) = random_weight(&mut rng, format, kv_dim, dim);
                let (bv, wv) = random_weight(&mut rng, value_format, kv_dim, dim);
                let (wq_buf, wk_buf, wv_buf) = (storage(&gpu, &bq), storage(&gpu, &bk), storage(&gpu, &bv));
                let wq_gated_buf = storage(&gpu, &bq_gated);
                let gamma = random_f32(&mut rng, dim, 1.0);
                let q_norm = random_f32(&mut rng, head_dim, 1.0);
                let k_norm = random_f32(&mut rng, head_dim, 1.0);
                let bias = random_f32(&mut rng, q_dim + 2 * kv_dim, 0.5);
                let capacity = 40;
                for variant in QKV_VARIANTS {
                    let rope_dims = if variant.partial { head_dim / 2 } else { head_dim };
                    let rope = f32s(&gpu, &rope_table(capacity, rope_dims, base));
                    // The attention vectors as the model packs them: γ, [Q/K norms], [biases].
                    let mut vectors = gamma.clone();
                    let mut params = AttnQkvParams::new(
                        dim as u32,
                        q_dim as u32,
                        kv_dim as u32,
                        head_dim as u32,
                        1e-5,
                        variant.rope_halves,
                    );
                    params.rope_dims = rope_dims as u32;
                    if variant.qk_norm {
                        params.qk_norm_at = vectors.len() as u32;
                        vectors.extend(&q_norm);
                        vectors.extend(&k_norm);
                    }
                    if variant.bias {
                        params.bias_at = vectors.len() as u32;
                        vectors.extend(&bias);
                    }
                    vectors.resize(vectors.len().next_multiple_of(4), 0.0);
                    let norm = f32s(&gpu, &vectors);
                    let spec = reference::QkvSpec {
                        head_dim,
                        pos: 0,
                        rope_base: base,
                        rope_halves: variant.rope_halves,
                        rope_dims,
                        gated: variant.gate,
                        eps: 1e-5,
                        bias: variant.bias.then_some(bias.as_slice()),
                        qk_norm: variant.qk_norm.then_some((q_norm.as_slice(), k_norm.as_slice())),
                    };
                    // Every position case for the first shape and variant; two for the others. The
                    // third: the rows of a local block's ring (0: none), positions 36..40 at 2..5.
                    let cases: &[(usize, usize, usize)] = if shape_index == 0 && !variant.rope_halves && !variant.bias {
                        &[(0, 1, 0), (1, 1, 0), (0, 6, 0), (36, 4, 0), (36, 4, 17)]
                    } else {
                        &[(1, 1, 0), (36, 4, 0), (36, 4, 17)]
                    };
                    for &(pos, rows, ring) in cases {
                        let x = random_f32(&mut rng, rows * dim, 2.0);
                        let x_buf = f32s(&gpu, &x);
                        // Queries, then (with a gate) the gates.
                        let q = gpu.storage("q", (2 * rows * q_dim * 4) as u64);
                        let params = AttnQkvParams {
                            gate_at: if variant.gate { (rows * q_dim) as u32 } else { 0 },
                            ring: ring as u32,
                            ..params
                        };
                        let (wq, wq_buf) = if variant.gate { (&wq_gated, &wq_gated_buf) } else { (&wq, &wq_buf) };
                        let kv = f32s(&gpu, &vec![0.0; capacity * 2 * kv_dim]);
                        let step = Step::new(&gpu, StepShape::new(pos as u32, rows as u32, 1, heads as u32, 4096), &[]);
                        let buffers = AttnQkvBuffers {
                            step: &step.view(),
                            x: &x_buf.view(),
                            norm: &norm.view(),
                            wq: &wq_buf.view(),
                            wk: &wk_buf.view(),
                            wv: &wv_buf.view(),
                            rope: &rope.view(),
                            q: &q.view(),
                            kv: &kv.view(),
                        };
                        let bound = layer::attn_qkv(&gpu, [format, format, value_format], params, buffers).unwrap();
                        let what = format!(
                            "{format}/{value_format}, {heads}x{head_dim} over {dim}, {variant:?}, pos {pos}, {rows} rows, ring {ring}, {:?}",
                            gpu.tuning()
                        );
                        let got_q = run(&gpu, &[&bound], &step.shape, &q);
                        let cache = run(&gpu, &[], &step.shape, &kv);
                        let expected =
                            reference::attn_qkv(&x, &gamma, wq, &wk, &wv, reference::QkvSpec { pos, ..spec });
                        assert_close(&got_q[..rows * q_dim], &expected.q, &format!("{what}: q"));
                        if variant.gate {
                            assert_close(&got_q[rows * q_dim..], &expected.gate, &format!("{what}: gate"));
                        }
                        // Position p of the cache: [keys (kv_dim), values (kv_dim)], at row p (or
                        // p mod ring).
                        let row_of = |p: usize| if ring > 0 { p % ring } else { p };
                        let written: Vec<usize> = (pos..pos + rows).map(row_of).collect();
                        for (s, &row) in written.iter().enumerate() {
                            let at = row * 2 * kv_dim;
                            assert_close(
                                &cache[at..at + kv_dim],
                                &expected.k[s * kv_dim..(s + 1) * kv_dim],
                                &format!("{what}: k row {s}"),
                            );
                            assert_close(
                                &cache[at + kv_dim..at + 2 * kv_dim],
                                &expected.v[s * kv_dim..(s + 1) * kv_dim],
                                &format!("{what}: v row {s}"),
                            );
                        }
                        let untouched =
                            cache.iter().enumerate().filter(|(i, _)| !written.contains(&(i / (2 * kv_dim))));
                        assert!(
                            untouched.into_iter().all(|(_, &v)| v == 0.0),
                            "{what}: only the new positions are written"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn attention_over_one_and_many_key_ranges() {
    let mut rng = Rng::new(5);
    let gpu = gpu();
    for (heads, kv_heads, head_dim) in [(6usize, 2usize, 48usize), (4, 4, 80), (9, 3, 64)] {
        let capacity = 300;
        let kv_width = kv_heads * head_dim;
        let keys = random_f32(&mut rng, capacity * kv_width, 1.0);
        let values = random_f32(&mut rng, capacity * kv_width, 1.0);
        // The cache layout: per position its keys, then its values.
        let cache: Vec<f32> = (0..capacity)
            .flat_map(|p| {
                keys[p * kv_width..(p + 1) * kv_width].iter().chain(&values[p * kv_width..(p + 1) * kv_width]).copied()
            })
            .collect();
        let every_row = f32s(gpu, &cache);
        // (pos, rows, record budget, window, output gate, ring): one range; several; a prefill
        // split into ranges; the end; then windows (Gemma 3's local blocks) that drop whole
        // ranges, part of one, or nothing, for one row and for rows whose windows differ; then
        // Qwen3.5's output gate (each output times the sigmoid of its gate, read after the
        // queries); then windows read from a ring of as few rows as they need, wrapped.
        for (pos, rows, budget, window, gated, ring) in [
            (0usize, 1usize, 4096u32, 0usize, false, 0usize),
            (1, 1, 4096, 0, false, 0),
            (150, 1, 4096, 0, false, 0),
            (130, 5, 60, 0, false, 0),
            (62, 3, 4096, 0, false, 0),
            (296, 4, 4096, 0, false, 0),
            (150, 1, 4096, 100, false, 0),
            (200, 6, 60, 70, false, 0),
            (296, 4, 4096, 64, false, 0),
            (5, 3, 4096, 100, false, 0),
            (70, 3, 4096, 0, true, 0),
            (1, 1, 4096, 0, true, 0),
            (150, 1, 4096, 100, false, 100),
            (200, 6, 60, 70, false, 75),
            (296, 4, 4096, 64, false, 79),
        ] {
            let ring_rows;
            let kv = if ring > 0 {
                ring_rows = f32s(gpu, &ring_of(&cache, 2 * kv_width, pos + rows, ring));
                &ring_rows
            } else {
                &every_row
            };
            let q = random_f32(&mut rng, rows * heads * head_dim, 1.0);
            let gate = if gated { random_f32(&mut rng, q.len(), 3.0) } else { Vec::new() };
            let q_buf = f32s(gpu, &[q.as_slice(), &gate].concat());
            let shape = StepShape::new(pos as u32, rows as u32, 1, heads as u32, budget);
            let records = (rows * heads) as u32 * shape.attn_chunks;
            let partials =
                gpu.storage("partials", u64::from(records * layer::attention_record_len(head_dim as u32)) * 4);
            let out = gpu.storage("out", (rows * heads * head_dim * 4) as u64);
            let step = Step::new(gpu, shape, &[]);
            let params = AttentionParams {
                heads: heads as u32,
                kv_heads: kv_heads as u32,
                head_dim: head_dim as u32,
                scale: (1.0 / (head_dim as f64).sqrt()) as f32,
                window: window as u32,
                gate_at: if gated { q.len() as u32 } else { 0 },
                ring: ring as u32,
                ..Default::default()
            };
            let split =
                layer::attention(gpu, params, &step.view(), &q_buf.view(), &kv.view(), &partials.view()).unwrap();
            let combine =
                layer::attention_combine(gpu, params, &step.view(), &partials.view(), &q_buf.view(), &out.view())
                    .unwrap();
            let got = run(gpu, &[&split, &combine], &shape, &out);
            let expected = reference::attention(
                &q,
                &keys,
                &values,
                pos,
                heads,
                kv_heads,
                head_dim,
                (window > 0).then_some(window),
            );
            let expected = if gated {
                reference::output_gate(&expected, &gate.iter().map(|&g| f64::from(g)).collect::<Vec<_>>())
            } else {
                expected
            };
            let what = format!(
                "{heads}/{kv_heads} heads of {head_dim}, pos {pos}, {rows} rows, window {window}, gate {gated}, ring {ring}, {} ranges",
                shape.attn_chunks
            );
            assert_close(&got, &expected, &what);
        }
    }
}

/// `delta_conv.wgsl` and `delta_rule.wgsl` (a Qwen3.5 Gated DeltaNet block between its
/// projections) against `reference::delta_conv` and `reference::delta_rule`: more value heads
/// than key heads (value head h reads key head h mod key_heads), a non-zero state carried over
/// passes of one and of several rows, both tunings, head widths below and above the workgroup.
#[test]
fn delta_conv_and_delta_rule_carry_their_state_over_passes() {
    let mut rng = Rng::new(13);
    for gpu in tunings() {
        for (key_heads, value_heads, head_dim) in [(2usize, 6usize, 32usize), (1, 2, 128)] {
            let (key_width, value_width) = (key_heads * head_dim, value_heads * head_dim);
            let channels = 2 * key_width + value_width;
            let kernel = 4;
            let taps = random_f32(&mut rng, channels * kernel, 0.5);
            let mut conv_state = random_f32(&mut rng, (kernel - 1) * channels, 1.0);
            let matrices = random_f32(&mut rng, value_heads * head_dim * head_dim, 0.1);
            let mut state: Vec<f64> = matrices.iter().map(|&v| f64::from(v)).collect();
            // dt_bias, a (negative), γ.
            let mut vectors = random_f32(&mut rng, value_heads, 1.0);
            vectors.extend((0..value_heads).map(|_| -(rng.unit() as f32 * 2.0 + 0.1)));
            vectors.extend(random_f32(&mut rng, head_dim, 1.0));
            let (taps_buf, vectors_buf) = (f32s(&gpu, &taps), f32s(&gpu, &vectors));
            let conv_buf = f32s(&gpu, &conv_state);
            let state_buf = f32s(&gpu, &matrices);
            let spec = reference::DeltaSpec { key_heads, value_heads, head_dim, eps: 1e-6 };
            // One row (a decode step), rows within a chunk, rows over several chunks (16 rows each).
            for rows in [1usize, 5, 37, 1] {
                let mixed = random_f32(&mut rng, rows * channels, 1.0);
                let z = random_f32(&mut rng, rows * value_width, 1.0);
                let beta = random_f32(&mut rng, rows * value_heads, 1.0);
                let alpha = random_f32(&mut rng, rows * value_heads, 1.0);
                let mixed_buf = f32s(&gpu, &mixed);
                let (z_buf, beta_buf, alpha_buf) = (f32s(&gpu, &z), f32s(&gpu, &beta), f32s(&gpu, &alpha));
                let out = gpu.storage("out", (rows * value_width * 4) as u64);
                let step = Step::new(&gpu, StepShape::new(9, rows as u32, 1, 1, 4096), &[]);
                let conv_params =
                    DeltaConvParams { channels: channels as u32, kernel: kernel as u32, ..Default::default() };
                let conv = layer::delta_conv(
                    &gpu,
                    conv_params,
                    &step.view(),
                    &taps_buf.view(),
                    &conv_buf.view(),
                    &mixed_buf.view(),
                )
                .unwrap();
                let rule_params = DeltaRuleParams {
                    key_heads: key_heads as u32,
                    value_heads: value_heads as u32,
                    head_dim: head_dim as u32,
                    eps: 1e-6,
                    scale: (1.0 / (head_dim as f64).sqrt()) as f32,
                    ..Default::default()
                };
                let buffers = DeltaRuleBuffers {
                    step: &step.view(),
                    mixed: &mixed_buf.view(),
                    z: &z_buf.view(),
                    beta: &beta_buf.view(),
                    alpha: &alpha_buf.view(),
                    vectors: &vectors_buf.view(),
                    state: &state_buf.view(),
                    out: &out.view(),
                };
                let rule = layer::delta_rule(&gpu, rule_params, buffers).unwrap();
                let what = format!("{key_heads}/{value_heads} heads of {head_dim}, {rows} rows, {:?}", gpu.tuning());
                let got_conv = run(&gpu, &[&conv], &step.shape, &mixed_buf);
                let (convolved, next_conv) = reference::delta_conv(&mixed, &taps, kernel, &conv_state);
                assert_close(&got_conv, &convolved, &format!("{what}: convolution"));
                let got_conv_state = run(&gpu, &[], &step.shape, &conv_buf);
                assert_eq!(got_conv_state, next_conv, "{what}: the convolution's state is the last inputs");
                conv_state = next_conv;
                // The rule from the GPU's convolution (its own rounding is checked above).
                let got = run(&gpu, &[&rule], &step.shape, &out);
                let expected = reference::delta_rule(&got_conv, &z, &beta, &alpha, &vectors, spec, &mut state);
                assert_close(&got, &expected, &format!("{what}: output"));
                let got_state = run(&gpu, &[], &step.shape, &state_buf);
                assert_close(&got_state, &state, &format!("{what}: state"));
                // Go on from the GPU's state, as the model does.
                state = got_state.iter().map(|&v| f64::from(v)).collect();
            }
        }
    }
}

/// Every format, scaled by √dim (Gemma 3) or not, the table whole and in two parts of
/// consecutive rows (each part's dispatch writing the rows of its own ids).
#[test]
fn embed_every_format_scaled_and_in_parts() {
    let mut rng = Rng::new(6);
    let gpu = gpu();
    for format in WeightFormat::ALL {
        let dim = dims(format)[1];
        let vocab = 50;
        let (bytes, table) = random_weight(&mut rng, format, vocab, dim);
        let row_bytes = bytes.len() / vocab;
        let ids = [0u32, 49, 7, 23];
        for (scale, split) in [(1.0f32, vocab), ((dim as f32).sqrt(), 23)] {
            let x = gpu.storage("x", (ids.len() * dim * 4) as u64);
            let step = Step::new(gpu, StepShape::new(0, ids.len() as u32, 1, 1, 4096), &ids);
            let parts: Vec<(usize, usize, GpuBuffer)> = [(0, split), (split, vocab)]
                .into_iter()
                .filter(|(a, b)| a < b)
                .map(|(a, b)| (a, b - a, storage(gpu, &bytes[a * row_bytes..b * row_bytes])))
                .collect();
            let bound: Vec<layer::Bound> = parts
                .iter()
                .map(|(first, count, part)| {
                    let params = EmbedParams { dim: dim as u32, scale, first: *first as u32, count: *count as u32 };
                    layer::embed(gpu, format, params, &step.view(), &step.ids(), &part.view(), &x.view()).unwrap()
                })
                .collect();
            let got = run(gpu, &bound.iter().collect::<Vec<_>>(), &step.shape, &x);
            let expected: Vec<f64> = reference::embed(&table, dim, &ids, scale).into_iter().map(f64::from).collect();
            assert_close(&got, &expected, &format!("{format}, scale {scale}, {} parts", parts.len()));
        }
    }
}

/// `norm_residual.wgsl` (Gemma 3's norms after its sub-layers) against `reference::norm_residual`:
/// one and several rows, widths that are and are not multiples of the workgroup, both tunings.
#[test]
fn norm_residual_adds_the_normalised_output() {
    let mut rng = Rng::new(7);
    for gpu in tunings() {
        for (dim, rows) in [(640usize, 1usize), (96, 5), (1028, 3)] {
            let x = random_f32(&mut rng, rows * dim, 1.0);
            let y = random_f32(&mut rng, rows * dim, 30.0);
            let gamma = random_f32(&mut rng, dim, 1.0);
            let (x_buf, y_buf, norm) = (f32s(&gpu, &x), f32s(&gpu, &y), f32s(&gpu, &gamma));
            let step = Step::new(&gpu, StepShape::new(0, rows as u32, 1, 1, 4096), &[]);
            let params = NormResidualParams { dim: dim as u32, eps: 1e-6, ..Default::default() };
            let bound =
                layer::norm_residual(&gpu, params, &step.view(), &y_buf.view(), &norm.view(), &x_buf.view()).unwrap();
            let got = run(&gpu, &[&bound], &step.shape, &x_buf);
            let expected = reference::norm_residual(&x, &y, &gamma, 1e-6);
            assert_close(&got, &expected, &format!("{dim} wide, {rows} rows, {:?}", gpu.tuning()));
            // Replacing: a Gated DeltaNet block's normalised input.
            let params = NormResidualParams { replace: 1, ..params };
            let bound =
                layer::norm_residual(&gpu, params, &step.view(), &y_buf.view(), &norm.view(), &x_buf.view()).unwrap();
            let got = run(&gpu, &[&bound], &step.shape, &x_buf);
            let expected = reference::rms_norm(&y, &gamma, 1e-6);
            assert_close(&got, &expected, &format!("{dim} wide, {rows} rows, replacing, {:?}", gpu.tuning()));
        }
    }
}

/// `gather.wgsl` (the logit lens's followed logits) against `reference::gather`: exact, ids
/// read from past a header as the lens reads them from a packed top-k result, counts that are
/// and are not multiples of the workgroup.
#[test]
fn gather_reads_the_chosen_entries() {
    let mut rng = Rng::new(8);
    for gpu in tunings() {
        for count in [1usize, 10, 64, 100] {
            let row = random_f32(&mut rng, 5000, 3.0);
            let ids: Vec<u32> = (0..count).map(|_| rng.below(5000) as u32).collect();
            let header = [7u32, 7, 7, 7];
            let words: Vec<u32> = header.iter().chain(&ids).copied().collect();
            let (ids_buf, row_buf) = (storage(&gpu, bytemuck::cast_slice(&words)), f32s(&gpu, &row));
            let out = gpu.storage("out", (count * 4) as u64);
            let step = Step::new(&gpu, StepShape::new(0, 1, 1, 1, 4096), &[]);
            let params = GatherParams { count: count as u32, ids_at: 4, ..Default::default() };
            let bound =
                layer::gather(&gpu, params, &step.view(), &ids_buf.view(), &row_buf.view(), &out.view()).unwrap();
            let got = run(&gpu, &[&bound], &step.shape, &out);
            assert_eq!(got, reference::gather(&row, &ids), "{count} entries, {:?}", gpu.tuning());
        }
    }
}

/// `score.wgsl` (scoring a text) against `reference::score_row`: rows with many ties (values on
/// a grid of quarters, and a top that one lane holds), vocabularies that are not multiples of the workgroup, top lists of 0, 1,
/// 5 and 20, a pass that starts after the text's first scored position, and a last position
/// no token follows. Ranks, the following token's logit and the top lists exact; the
/// log-sum-exp and the entropy within 1e-5 (f32 sums against f64).
#[test]
fn score_rates_each_row_like_the_reference() {
    let mut rng = Rng::new(9);
    for gpu in tunings() {
        for (vocab, rows, k) in [(1000usize, 3usize, 5usize), (5003, 2, 10), (3001, 1, 20), (777, 1, 1), (64, 2, 0)] {
            // The pass covers text positions 7..7 + rows; records start at position 5.
            let (pos, first) = (7u32, 5u32);
            let mut logits: Vec<f32> = (0..rows * vocab).map(|_| (rng.normal() * 8.0).round() as f32 / 4.0).collect();
            // Row 0: the top is a tie held by one lane (ids ≡ 0 mod 256), which must give its
            // lowest ids first.
            for id in (0..vocab).step_by(256) {
                logits[id] = 99.0;
            }
            let positions = (pos - first) as usize + rows;
            let mut targets: Vec<u32> = (0..positions).map(|_| rng.below(vocab as u64) as u32).collect();
            *targets.last_mut().unwrap() = nucleus_kernels::score::NO_TARGET;
            let words = nucleus_kernels::score_words(k);
            let out = gpu.storage("records", (positions * words * 4) as u64);
            let (targets_buf, logits_buf) = (storage(&gpu, bytemuck::cast_slice(&targets)), f32s(&gpu, &logits));
            let step = Step::new(&gpu, StepShape::new(pos, rows as u32, rows as u32, 1, 4096), &[]);
            let params = ScoreParams { vocab: vocab as u32, first, k: k as u32, ..Default::default() };
            let bound =
                layer::score(&gpu, params, &step.view(), &targets_buf.view(), &logits_buf.view(), &out.view()).unwrap();
            let got: Vec<u32> = run(&gpu, &[&bound], &step.shape, &out).into_iter().map(f32::to_bits).collect();
            for r in 0..rows {
                let at = (pos - first) as usize + r;
                let target = Some(targets[at]).filter(|&t| t != nucleus_kernels::score::NO_TARGET);
                let record = &got[at * words..(at + 1) * words];
                let got = nucleus_kernels::RowScore::from_words(record, target, k).unwrap();
                let expected = reference::score_row(&logits[r * vocab..(r + 1) * vocab], target, k);
                let context = format!("vocab {vocab}, row {r}, k {k}, {:?}", gpu.tuning());
                assert!((got.log_sum_exp - expected.log_sum_exp).abs() < 1e-5, "{context}: {got:?} {expected:?}");
                assert!((got.entropy - expected.entropy).abs() < 1e-5, "{context}: {got:?} {expected:?}");
                assert_eq!((got.target, &got.top), (expected.target, &expected.top), "{context}");
            }
        }
    }
}

/// `attention_weights.wgsl` against `reference::attention_weights`: one head and the mean of the
/// heads, grouped-query heads, a window that cuts the keys and none, a pass after earlier
/// positions of which only some rows are asked, keys in more than one round of the workgroup;
/// within 1e-5, every row summing to 1 and zero past its position.
#[test]
fn attention_weights_are_the_softmax_of_each_asked_row() {
    let mut rng = Rng::new(10);
    for gpu in tunings() {
        // The last: a window read from a ring of as few rows as the pass needs.
        for (heads, kv_heads, head_dim, window, head, ring) in [
            (4usize, 2usize, 16usize, 0u32, Some(3usize), 0usize),
            (4, 2, 16, 0, None, 0),
            (2, 1, 64, 70, None, 0),
            (6, 6, 8, 5, Some(0), 0),
            (2, 1, 64, 70, None, 73),
        ] {
            // The pass: rows at positions 290..294; rows 291 and 292 asked.
            let (pos, rows, first, count) = (290usize, 4usize, 291usize, 2usize);
            let positions = pos + rows;
            let q = random_f32(&mut rng, rows * heads * head_dim, 1.0);
            let keys = random_f32(&mut rng, positions * kv_heads * head_dim, 1.0);
            let values = random_f32(&mut rng, positions * kv_heads * head_dim, 1.0);
            let kv: Vec<f32> = keys
                .chunks_exact(kv_heads * head_dim)
                .zip(values.chunks_exact(kv_heads * head_dim))
                .flat_map(|(k, v)| k.iter().chain(v).copied())
                .collect();
            let keys_per_row = first + count + 3;
            let out = gpu.storage("weights", (count * keys_per_row * 4) as u64);
            let kv = if ring > 0 { ring_of(&kv, 2 * kv_heads * head_dim, positions, ring) } else { kv };
            let (q_buf, kv_buf) = (f32s(&gpu, &q), f32s(&gpu, &kv));
            let step = Step::new(&gpu, StepShape::new(pos as u32, rows as u32, 1, heads as u32, 4096), &[]);
            let params = AttentionWeightsParams {
                heads: heads as u32,
                kv_heads: kv_heads as u32,
                head_dim: head_dim as u32,
                scale: (1.0 / (head_dim as f64).sqrt()) as f32,
                window,
                head: head.map_or(layer::MEAN_OF_HEADS, |h| h as u32),
                first: first as u32,
                count: count as u32,
                keys: keys_per_row as u32,
                ring: ring as u32,
                ..Default::default()
            };
            let bound =
                layer::attention_weights(&gpu, params, &step.view(), &q_buf.view(), &kv_buf.view(), &out.view())
                    .unwrap();
            let got = run(&gpu, &[&bound], &step.shape, &out);
            let window = (window > 0).then_some(window as usize);
            let expected = reference::attention_weights(&q, &keys, pos, 1..3, heads, kv_heads, head_dim, window, head);
            for (i, expected) in expected.iter().enumerate() {
                let row = &got[i * keys_per_row..(i + 1) * keys_per_row];
                let context = format!(
                    "{heads}/{kv_heads} heads of {head_dim}, window {window:?}, head {head:?}, ring {ring}, row {i}, {:?}",
                    gpu.tuning()
                );
                assert_close(&row[..expected.len()], expected, &context);
                assert!(row[expected.len()..].iter().all(|&w| w == 0.0), "{context}: nothing past the position");
                let sum: f64 = row.iter().map(|&w| f64::from(w)).sum();
                assert!((sum - 1.0).abs() < 1e-5, "{context}: sums to {sum}");
            }
        }
    }
}

/// Each unit reader in `shaders/lib/formats/` (f32.wgsl, q4_0.wgsl, q4_1.wgsl, q5_0.wgsl,
/// q5_1.wgsl, q8_0.wgsl, q4_k.wgsl, q5_k.wgsl, q6_k.wgsl) against its CPU reference,
/// `nucleus-gguf`'s dequantization: every row of a matrix of random blocks read through the
/// reader (the `embed` kernel with the ids 0..rows).
#[test]
fn every_format_reader_dequantizes_like_gguf() {
    let readers = [
        (WeightFormat::F32, "f32.wgsl"),
        (WeightFormat::Q4_0, "q4_0.wgsl"),
        (WeightFormat::Q4_1, "q4_1.wgsl"),
        (WeightFormat::Q5_0, "q5_0.wgsl"),
        (WeightFormat::Q5_1, "q5_1.wgsl"),
        (WeightFormat::Q8_0, "q8_0.wgsl"),
        (WeightFormat::Q4K, "q4_k.wgsl"),
        (WeightFormat::Q5K, "q5_k.wgsl"),
        (WeightFormat::Q6K, "q6_k.wgsl"),
    ];
    let directory = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shaders/lib/formats");
    let mut files: Vec<String> =
        std::fs::read_dir(&directory).unwrap().map(|entry| entry.unwrap().file_name().into_string().unwrap()).collect();
    files.sort();
    let mut named: Vec<String> = readers.iter().map(|(_, file)| file.to_string()).collect();
    named.sort();
    assert_eq!(files, named, "every reader in {} has its case here", directory.display());
    assert_eq!(readers.len(), WeightFormat::ALL.len());

    let mut rng = Rng::new(12);
    let gpu = gpu();
    for (format, file) in readers {
        let cols = dims(format)[1];
        let rows = 9;
        let (bytes, values) = random_weight(&mut rng, format, rows, cols);
        let weights = storage(gpu, &bytes);
        let ids: Vec<u32> = (0..rows as u32).collect();
        let x = gpu.storage("x", (rows * cols * 4) as u64);
        let step = Step::new(gpu, StepShape::new(0, rows as u32, 1, 1, 4096), &ids);
        let bound = layer::embed(
            gpu,
            format,
            EmbedParams { dim: cols as u32, scale: 1.0, first: 0, count: rows as u32 },
            &step.view(),
            &step.ids(),
            &weights.view(),
            &x.view(),
        )
        .unwrap();
        let got = run(gpu, &[&bound], &step.shape, &x);
        let expected: Vec<f64> = values.iter().map(|&v| f64::from(v)).collect();
        assert_close(&got, &expected, file);
    }
}

#[test]
fn a_binding_beyond_the_device_limit_is_an_error_naming_it() {
    let gpu = gpu();
    let limit = gpu.limits().max_storage_buffer_binding_size;
    let step = Step::new(gpu, StepShape::new(0, 1, 1, 1, 4096), &[1]);
    let x = gpu.storage("x", 4096);
    // A view claiming more than one binding may hold (never bound: the check comes first).
    let huge = nucleus_kernels::BufferView { size: limit + 4, ..x.view() };
    let error = layer::embed(
        gpu,
        WeightFormat::F32,
        EmbedParams { dim: 8, scale: 1.0, first: 0, count: 1 },
        &step.view(),
        &step.ids(),
        &huge,
        &x.view(),
    )
    .err()
    .expect("refused");
    assert!(error.to_string().contains("binding 'table'"), "{error}");
}

/// Every module the layer kernels can be assembled into (each format, both tunings, one-row and
/// many-row, staged and not) passes wgpu's shader validation (naga); Chromium's compiler checks
/// the same modules in `tests/browser/shaders.test.mjs`.
#[test]
fn every_module_variant_compiles() {
    let gpu = gpu();
    let mut count = 0;
    for tuning in [Tuning::CPU_ADAPTER, Tuning::GPU, Tuning::LAVAPIPE] {
        for (label, source) in layer::module_variants(tuning) {
            let module = gpu.device().create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(&label),
                source: wgpu::ShaderSource::Wgsl(source.into()),
            });
            drop(module);
            count += 1;
        }
    }
    assert!(count > 100, "{count} modules");
}

/// The kernel times (`profile.rs`): with profiling on, every dispatch of a recording is timed
/// under its kernel's name, and the times are read once; off, nothing is timed.
#[test]
fn kernel_times_name_every_dispatch_of_a_profiled_recording() {
    let gpu = gpu().retuned(Tuning::GPU);
    assert!(gpu.can_profile(), "lavapipe has timestamp queries");
    let mut rng = Rng::new(10);
    let dim = 256;
    let (x, y, gamma) =
        (random_f32(&mut rng, dim, 1.0), random_f32(&mut rng, dim, 1.0), random_f32(&mut rng, dim, 1.0));
    let (x_buf, y_buf, norm) = (f32s(&gpu, &x), f32s(&gpu, &y), f32s(&gpu, &gamma));
    let step = Step::new(&gpu, StepShape::new(0, 1, 1, 1, 4096), &[]);
    let params = NormResidualParams { dim: dim as u32, eps: 1e-6, ..Default::default() };
    let norm_residual =
        layer::norm_residual(&gpu, params, &step.view(), &y_buf.view(), &norm.view(), &x_buf.view()).unwrap();
    let out = gpu.storage("out", 16);
    let ids = storage(&gpu, bytemuck::cast_slice(&[1u32, 2, 3, 4]));
    let gather = layer::gather(
        &gpu,
        GatherParams { count: 4, ids_at: 0, ..Default::default() },
        &step.view(),
        &ids.view(),
        &x_buf.view(),
        &out.view(),
    )
    .unwrap();

    gpu.set_profiling(true).unwrap();
    run(&gpu, &[&norm_residual, &gather, &norm_residual], &step.shape, &out);
    let mut times = block_on(gpu.kernel_times()).unwrap();
    times.sort_by_key(|t| t.kernel);
    let counts: Vec<(&str, u64)> = times.iter().map(|t| (t.kernel, t.dispatches)).collect();
    assert_eq!(counts, [("gather", 1), ("norm_residual", 2)]);
    assert!(times.iter().all(|t| t.ns >= 0.0) && times.iter().any(|t| t.ns > 0.0), "{times:?}");
    assert!(block_on(gpu.kernel_times()).unwrap().is_empty(), "times are read once");

    gpu.set_profiling(false).unwrap();
    run(&gpu, &[&norm_residual], &step.shape, &out);
    assert!(block_on(gpu.kernel_times()).unwrap().is_empty(), "nothing is timed with profiling off");
}
