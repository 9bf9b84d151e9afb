//! Times each layer kernel alone at SmolLM2-135M's shapes (Q4_1 projections, Q8_0 embedding and
//! output layer), one and 32 rows, on the local wgpu adapter:
//!
//! ```sh
//! cargo run --release -p nucleus-kernels --example layer_bench
//! ```
//!
//! Each figure is the median of 7 timed submissions (after 2 warm-ups) of the dispatch repeated
//! `REPEAT` times in one submission, divided by `REPEAT`: the kernel's own cost, without the
//! submit-and-wait of a single dispatch. ARCHITECTURE.md has the figures.
//!
//! A second table weighs the two ways of running a prefill pass (128 rows) on quantized weights:
//! the fused kernels (`R` = 4 rows per lane group, dequantizing in the inner loop) against
//! dequantizing each weight into a scratch f32 buffer (the `embed` kernel over every row of the
//! matrix) followed by Burn's matmul. A third times a Gated DeltaNet block's own kernels at
//! Qwen3.5-0.8B's shapes, for one row and a prefill pass (alone: `-- delta`).

use burn::backend::wgpu::wgpu;
use burn::tensor::{DType, Distribution, Tensor};
use nucleus_kernels::layer::{
    self, AttentionParams, AttnQkvBuffers, AttnQkvParams, Bound, EmbedParams, FfnBuffers, FfnParams, LmHeadParams,
    MatvecParams, StepShape,
};
use nucleus_kernels::{Gpu, GpuBuffer, Recorder, WeightFormat, WgslStruct};

const REPEAT: usize = 5;
const DIM: usize = 576;
const HIDDEN: usize = 1536;
const HEADS: usize = 9;
const KV_HEADS: usize = 3;
const HEAD_DIM: usize = 64;
const VOCAB: usize = 49_152;

fn main() {
    let (device, gpu) = nucleus_kernels::gpu::init().expect("a wgpu adapter");
    println!(
        "adapter {:?}, tuning {:?}; ms per dispatch (median of 7, each of {REPEAT} dispatches in one submission)",
        gpu.adapter_info().name,
        gpu.tuning()
    );
    if std::env::args().any(|arg| arg == "delta") {
        return delta_net(&gpu);
    }
    let mut seed = 7u64;
    let mut bytes = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (seed >> 33) as u8
            })
            .collect()
    };
    let weight =
        |gpu: &Gpu, format: WeightFormat, rows: usize, cols: usize, bytes: &mut dyn FnMut(usize) -> Vec<u8>| {
            let mut data = bytes(rows * format.row_bytes(cols as u64) as usize);
            // Sane f16 scales (0.03) in every block header.
            let (_, block) = format.block_layout();
            for chunk in data.chunks_exact_mut(block as usize) {
                chunk[0..2].copy_from_slice(&half::f16::from_f32(0.03).to_le_bytes());
            }
            filled(gpu, &data)
        };
    let q4 = WeightFormat::Q4_1;
    let (wq, wk, wv) = (
        weight(&gpu, q4, DIM, DIM, &mut bytes),
        weight(&gpu, q4, KV_HEADS * HEAD_DIM, DIM, &mut bytes),
        weight(&gpu, q4, KV_HEADS * HEAD_DIM, DIM, &mut bytes),
    );
    let (wo, gate, up, down) = (
        weight(&gpu, q4, DIM, DIM, &mut bytes),
        weight(&gpu, q4, HIDDEN, DIM, &mut bytes),
        weight(&gpu, q4, HIDDEN, DIM, &mut bytes),
        weight(&gpu, q4, DIM, HIDDEN, &mut bytes),
    );
    let embedding = weight(&gpu, WeightFormat::Q8_0, VOCAB, DIM, &mut bytes);
    let norm = filled(&gpu, bytemuck::cast_slice(&vec![1.0f32; DIM]));
    let rope = filled(&gpu, bytemuck::cast_slice(&vec![0.5f32; 4096 * HEAD_DIM]));
    let rows = 32;
    let x = filled(&gpu, bytemuck::cast_slice(&vec![0.1f32; rows * DIM]));
    let q = gpu.storage("q", (rows * DIM * 4) as u64);
    let kv = filled(&gpu, bytemuck::cast_slice(&vec![0.01f32; 4096 * 2 * KV_HEADS * HEAD_DIM]));
    let partials = gpu.storage("partials", 4096 * 66 * 4);
    let out = gpu.storage("out", (rows * DIM * 4) as u64);
    let h = gpu.storage("h", (rows * HIDDEN * 4) as u64);
    let logits = gpu.storage("logits", (VOCAB * 4) as u64);
    use wgpu::BufferUsages as U;
    let step = gpu.buffer("step", 256 + 4 * rows as u64, U::UNIFORM | U::STORAGE | U::COPY_DST);
    gpu.write(step.buffer(), 256, bytemuck::cast_slice(&vec![17u32; rows]));
    let step_view = step.range(0, 32);
    let ids = step.range(256, 4 * rows as u64);
    let attention = AttentionParams {
        heads: HEADS as u32,
        kv_heads: KV_HEADS as u32,
        head_dim: HEAD_DIM as u32,
        scale: 0.125,
        ..Default::default()
    };

    let kernels: Vec<(&str, Bound)> = vec![
        (
            "embed (Q8_0 table)",
            layer::embed(
                &gpu,
                WeightFormat::Q8_0,
                EmbedParams { dim: DIM as u32, scale: 1.0, first: 0, count: VOCAB as u32 },
                &step_view,
                &ids,
                &embedding.view(),
                &x.view(),
            )
            .unwrap(),
        ),
        (
            "attn_qkv (Q4_1, 576 -> 576+192+192)",
            layer::attn_qkv(
                &gpu,
                [q4; 3],
                AttnQkvParams::new(DIM as u32, DIM as u32, 192, HEAD_DIM as u32, 1e-5, false),
                AttnQkvBuffers {
                    step: &step_view,
                    x: &x.view(),
                    norm: &norm.view(),
                    wq: &wq.view(),
                    wk: &wk.view(),
                    wv: &wv.view(),
                    rope: &rope.view(),
                    q: &q.view(),
                    kv: &kv.view(),
                },
            )
            .unwrap(),
        ),
        (
            "attention (split)",
            layer::attention(&gpu, attention, &step_view, &q.view(), &kv.view(), &partials.view()).unwrap(),
        ),
        (
            "attention_combine",
            layer::attention_combine(&gpu, attention, &step_view, &partials.view(), &q.view(), &out.view()).unwrap(),
        ),
        (
            "matvec_residual (Q4_1, 576 -> 576)",
            layer::matvec_residual(
                &gpu,
                q4,
                MatvecParams { inputs: DIM as u32, outputs: DIM as u32, accumulate: 1, ..Default::default() },
                &step_view,
                &out.view(),
                &wo.view(),
                &x.view(),
            )
            .unwrap(),
        ),
        (
            "ffn_gate_up (Q4_1, 576 -> 2 x 1536)",
            layer::ffn_gate_up(
                &gpu,
                [q4; 2],
                FfnParams { dim: DIM as u32, hidden: HIDDEN as u32, eps: 1e-5, ..Default::default() },
                FfnBuffers {
                    step: &step_view,
                    x: &x.view(),
                    norm: &norm.view(),
                    w_gate: &gate.view(),
                    w_up: &up.view(),
                    h: &h.view(),
                },
            )
            .unwrap(),
        ),
        (
            "matvec_residual (Q4_1, 1536 -> 576)",
            layer::matvec_residual(
                &gpu,
                q4,
                MatvecParams { inputs: HIDDEN as u32, outputs: DIM as u32, accumulate: 1, ..Default::default() },
                &step_view,
                &h.view(),
                &down.view(),
                &x.view(),
            )
            .unwrap(),
        ),
        (
            "lm_head (Q8_0, 576 -> 49152)",
            layer::lm_head(
                &gpu,
                WeightFormat::Q8_0,
                LmHeadParams {
                    dim: DIM as u32,
                    vocab: VOCAB as u32,
                    eps: 1e-5,
                    first: 0,
                    count: VOCAB as u32,
                    ..Default::default()
                },
                layer::LmHeadBuffers {
                    step: &step_view,
                    x: &x.view(),
                    norm: &norm.view(),
                    w: &embedding.view(),
                    logits: &logits.view(),
                },
            )
            .unwrap(),
        ),
    ];
    let shapes = [
        ("1 row at position 100", StepShape::new(100, 1, 1, HEADS as u32, 4096)),
        ("1 row at position 2000", StepShape::new(2000, 1, 1, HEADS as u32, 4096)),
        ("32 rows at position 0", StepShape::new(0, rows as u32, 1, HEADS as u32, 4096)),
    ];
    print!("{:<40}", "kernel");
    for (name, _) in &shapes {
        print!(" {name:>24}");
    }
    println!();
    for (name, kernel) in &kernels {
        print!("{name:<40}");
        for (_, shape) in &shapes {
            gpu.write(step.buffer(), 0, shape.params().bytes());
            print!(" {:>24.3}", time(&gpu, kernel, shape));
        }
        println!();
    }

    // Prefill: one pass of PREFILL_ROWS rows through the block's projections, both ways.
    let x = filled(&gpu, bytemuck::cast_slice(&vec![0.1f32; PREFILL_ROWS * HIDDEN]));
    let out = gpu.storage("out", (PREFILL_ROWS * HIDDEN * 4) as u64);
    let h = gpu.storage("h", (PREFILL_ROWS * HIDDEN * 4) as u64);
    let prefill = StepShape::new(0, PREFILL_ROWS as u32, 1, HEADS as u32, 4096);
    let prefill_step = gpu.buffer("prefill step", 256 + 4 * PREFILL_ROWS as u64, U::UNIFORM | U::STORAGE | U::COPY_DST);
    gpu.write(prefill_step.buffer(), 0, prefill.params().bytes());
    let prefill_step_view = prefill_step.range(0, 32);
    // (label, kernels, weights read: (buffer, offset, bytes))
    type Case<'a> = (&'a str, Vec<Bound>, Vec<(&'a GpuBuffer, usize, usize)>);
    let fused: Vec<Case> = vec![
        (
            "576 -> 576 (output projection)",
            vec![
                layer::matvec_residual(
                    &gpu,
                    q4,
                    MatvecParams { inputs: DIM as u32, outputs: DIM as u32, accumulate: 1, ..Default::default() },
                    &prefill_step_view,
                    &out.view(),
                    &wo.view(),
                    &x.view(),
                )
                .unwrap(),
            ],
            vec![(&wo, DIM, DIM)],
        ),
        (
            "576 -> 2 x 1536 (gate, up)",
            vec![
                layer::ffn_gate_up(
                    &gpu,
                    [q4; 2],
                    FfnParams { dim: DIM as u32, hidden: HIDDEN as u32, eps: 1e-5, ..Default::default() },
                    FfnBuffers {
                        step: &prefill_step_view,
                        x: &x.view(),
                        norm: &norm.view(),
                        w_gate: &gate.view(),
                        w_up: &up.view(),
                        h: &h.view(),
                    },
                )
                .unwrap(),
            ],
            vec![(&gate, HIDDEN, DIM), (&up, HIDDEN, DIM)],
        ),
        (
            "1536 -> 576 (down projection)",
            vec![
                layer::matvec_residual(
                    &gpu,
                    q4,
                    MatvecParams { inputs: HIDDEN as u32, outputs: DIM as u32, accumulate: 1, ..Default::default() },
                    &prefill_step_view,
                    &h.view(),
                    &down.view(),
                    &x.view(),
                )
                .unwrap(),
            ],
            vec![(&down, DIM, HIDDEN)],
        ),
    ];
    println!();
    println!("prefill, {PREFILL_ROWS} rows, Q4_1 weights: ms per projection (median of 7)");
    println!(
        "{:<40} {:>14} {:>14} {:>14} {:>14}",
        "projection", "fused", "dequantize", "Burn matmul", "dequant+matmul"
    );
    for (name, kernels, weights) in &fused {
        let fused_ms: f64 = kernels.iter().map(|kernel| time(&gpu, kernel, &prefill)).sum();
        let mut dequantize_ms = 0.0;
        let mut matmul_ms = 0.0;
        for &(weight, outputs, inputs) in weights {
            // The scratch f32 matrix [outputs, inputs]: embed's rows, with the ids 0..outputs.
            let scratch = gpu.storage("scratch", (outputs * inputs * 4) as u64);
            let all_rows = gpu.buffer("all rows", 256 + 4 * outputs as u64, U::UNIFORM | U::STORAGE | U::COPY_DST);
            let shape = StepShape::new(0, outputs as u32, 1, HEADS as u32, 4096);
            gpu.write(all_rows.buffer(), 0, shape.params().bytes());
            gpu.write(all_rows.buffer(), 256, bytemuck::cast_slice(&(0..outputs as u32).collect::<Vec<_>>()));
            let dequantize = layer::embed(
                &gpu,
                q4,
                EmbedParams { dim: inputs as u32, scale: 1.0, first: 0, count: outputs as u32 },
                &all_rows.range(0, 32),
                &all_rows.range(256, 4 * outputs as u64),
                &weight.view(),
                &scratch.view(),
            )
            .unwrap();
            dequantize_ms += time(&gpu, &dequantize, &shape);
            let w = Tensor::<2>::random([outputs, inputs], Distribution::Default, (&device, DType::F32));
            let a = Tensor::<2>::random([PREFILL_ROWS, inputs], Distribution::Default, (&device, DType::F32));
            matmul_ms += burn_ms(&device, || a.clone().matmul(w.clone().transpose()));
        }
        println!(
            "{name:<40} {fused_ms:>14.3} {dequantize_ms:>14.3} {matmul_ms:>14.3} {:>14.3}",
            dequantize_ms + matmul_ms
        );
    }

    delta_net(&gpu);
}

/// The third table: a Gated DeltaNet block's own kernels at Qwen3.5-0.8B's shapes (16 key and 16
/// value heads of 128, 4 taps), for a decode step and a prefill pass.
fn delta_net(gpu: &Gpu) {
    use wgpu::BufferUsages as U;
    let (heads, hd, kernel) = (16usize, 128usize, 4usize);
    let channels = 3 * heads * hd;
    let values = |n: usize, v: f32| filled(gpu, bytemuck::cast_slice(&vec![v; n]));
    let mixed = values(PREFILL_ROWS * channels, 0.1);
    let (z, beta, alpha) =
        (values(PREFILL_ROWS * heads * hd, 0.5), values(PREFILL_ROWS * heads, 0.5), values(PREFILL_ROWS * heads, -1.0));
    let vectors = values(2 * heads + hd, -0.5);
    let (taps, conv_state, state) =
        (values(channels * kernel, 0.2), values(3 * channels, 0.0), values(heads * hd * hd, 0.0));
    let out = gpu.storage("out", (PREFILL_ROWS * heads * hd * 4) as u64);
    let step = gpu.buffer("step", 256, U::UNIFORM | U::STORAGE | U::COPY_DST);
    let step_view = step.range(0, 32);
    let conv = layer::delta_conv(
        gpu,
        layer::DeltaConvParams { channels: channels as u32, kernel: kernel as u32, ..Default::default() },
        &step_view,
        &taps.view(),
        &conv_state.view(),
        &mixed.view(),
    )
    .unwrap();
    let params = layer::DeltaRuleParams {
        key_heads: heads as u32,
        value_heads: heads as u32,
        head_dim: hd as u32,
        eps: 1e-6,
        scale: (1.0 / (hd as f64).sqrt()) as f32,
        ..Default::default()
    };
    let buffers = layer::DeltaRuleBuffers {
        step: &step_view,
        mixed: &mixed.view(),
        z: &z.view(),
        beta: &beta.view(),
        alpha: &alpha.view(),
        vectors: &vectors.view(),
        state: &state.view(),
        out: &out.view(),
    };
    let rule = layer::delta_rule(gpu, params, buffers).unwrap();
    println!();
    println!("Qwen3.5-0.8B's Gated DeltaNet kernels (16/16 heads of 128): ms per dispatch (median of 7)");
    println!("{:<40} {:>14} {:>14}", "kernel", "1 row", format!("{PREFILL_ROWS} rows"));
    for (name, kernel) in [("delta_conv (6144 channels, 4 taps)", &conv), ("delta_rule", &rule)] {
        print!("{name:<40}");
        for rows in [1, PREFILL_ROWS as u32] {
            let shape = StepShape::new(0, rows, 1, heads as u32, 4096);
            gpu.write(step.buffer(), 0, shape.params().bytes());
            print!(" {:>14.3}", time(gpu, kernel, &shape));
        }
        println!();
    }
}

/// The rows of one prefill pass (the model's `MAX_ROWS`).
const PREFILL_ROWS: usize = 128;

/// Median ms per call of a Burn operation: REPEAT calls, then one wait for the device.
fn burn_ms(device: &burn::tensor::Device, f: impl Fn() -> Tensor<2>) -> f64 {
    let mut samples = Vec::new();
    let mut keep = Vec::new();
    for i in 0..9 {
        let clock = std::time::Instant::now();
        for _ in 0..REPEAT {
            keep.push(f());
        }
        device.sync().unwrap();
        if i >= 2 {
            samples.push(clock.elapsed().as_secs_f64() * 1000.0 / REPEAT as f64);
        }
        keep.clear();
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn filled(gpu: &Gpu, data: &[u8]) -> GpuBuffer {
    let buffer = gpu.storage("bench", data.len() as u64);
    gpu.write(buffer.buffer(), 0, data);
    buffer
}

fn time(gpu: &Gpu, kernel: &Bound, shape: &StepShape) -> f64 {
    let mut samples = Vec::new();
    for i in 0..9 {
        let mut recorder = Recorder::new(gpu);
        for _ in 0..REPEAT {
            kernel.record(&mut recorder, shape);
        }
        let clock = std::time::Instant::now();
        let index = gpu.submit([recorder.finish()]);
        gpu.device().poll(wgpu::PollType::Wait { submission_index: Some(index), timeout: None }).unwrap();
        if i >= 2 {
            samples.push(clock.elapsed().as_secs_f64() * 1000.0 / REPEAT as f64);
        }
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}
