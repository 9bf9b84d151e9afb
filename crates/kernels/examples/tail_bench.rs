//! Milliseconds per decode tail on the local wgpu device (lavapipe here), vocabulary 49,152 by
//! default: the WGSL tail (one read of `16 + 8K` bytes) against reading the whole row and
//! selecting on the CPU, and against Burn's own `topk_with_indices`. Numbers, not a test.
//!
//! `cargo run --release -p nucleus-kernels --example tail_bench [iterations] [vocab]`
//!
//! On SwiftShader (the Vulkan implementation behind Chromium's WebGPU), natively:
//! `VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json` before the command.
//!
//! Every variant first derives a fresh logits row on the device (`base + step·1e-6`, one fused
//! element-wise kernel), as a model's LM head would, so no variant can reuse a previous result.

use std::time::Instant;

use burn::tensor::{Device, Int, Tensor, TensorData};
use nucleus_kernels::{LogitAdjustments, decode_tail};

const TEMPERATURE: f32 = 0.8;

fn logits_row(seed: u64, vocab: usize) -> Vec<f32> {
    let mut state = seed;
    (0..vocab)
        .map(|_| {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            // Sum of two uniforms in [-4, 4): a bell-ish spread like an LM head's.
            let a = (state >> 40) as f32 / (1u64 << 24) as f32;
            let b = (state & 0xff_ffff) as f32 / (1u64 << 24) as f32;
            (a + b - 1.0) * 4.0
        })
        .collect()
}

/// The CPU side of the "read everything" baseline: max, Σexp and a partial top-k selection.
fn cpu_tail(row: &[f32], k: usize) -> (Vec<u32>, f32, f64) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let inverse_temperature = 1.0 / TEMPERATURE;
    let sum: f64 = row.iter().map(|&x| f64::from((x - max) * inverse_temperature).exp()).sum();
    let mut ids: Vec<u32> = (0..row.len() as u32).collect();
    let order = |a: &u32, b: &u32| row[*b as usize].total_cmp(&row[*a as usize]).then(a.cmp(b));
    ids.select_nth_unstable_by(k - 1, order);
    ids.truncate(k);
    ids.sort_unstable_by(order);
    (ids, max, sum)
}

fn main() {
    let iterations: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(30);
    let vocab: usize = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(49_152);
    let device = Device::wgpu_options().init().expect("initialise wgpu");
    let base = Tensor::<2>::from_data(TensorData::new(logits_row(1, vocab), [1, vocab]), &device);
    let fresh = |step: usize| base.clone() + (step as f32) * 1e-6;
    let penalties = {
        let counts: Vec<(u32, u32)> = (0..64u32).map(|i| (i * 701 % vocab as u32, 1 + i % 3)).collect();
        // What the sampler sends for a bias and penalties over the prompt.
        let params = nucleus_sampler::SamplingParams {
            logit_bias: [(5u32, 2.0)].into(),
            repetition_penalty: 1.1,
            presence_penalty: 0.3,
            frequency_penalty: 0.2,
            penalize_prompt: true,
            ..Default::default()
        };
        let mut sampler = nucleus_sampler::Sampler::new(params, vocab).expect("valid parameters");
        let prompt: Vec<u32> = counts.iter().flat_map(|&(id, n)| std::iter::repeat_n(id, n as usize)).collect();
        sampler.set_prompt(&prompt).expect("ids inside the vocabulary");
        LogitAdjustments::from_entries(sampler.gpu_adjustments().expect("no DRY")).with_allow_mask(vec![
            u32::MAX;
            vocab.div_ceil(
                32
            )
        ])
    };

    println!("device: {:?}", device);
    println!("vocab {vocab}, {iterations} iterations after 3 warm-up calls; ms per decode tail (median, min)\n");
    println!("{:<58} {:>8} {:>8} {:>10}", "variant", "median", "min", "bytes read");

    // Cost of producing a fresh row alone (included in every line below).
    let (median, min) = time(iterations, |step| {
        let row: Tensor<2> = fresh(step);
        let _ = pollster::block_on(row.slice([0..1, 0..1]).into_data_async()).unwrap();
    });
    println!("{:<58} {:>8.2} {:>8.2} {:>10}", "fresh row + 4-byte read (floor)", median, min, 4);

    for k in [20usize, 64, 256] {
        let none = LogitAdjustments::new();
        let mut bytes = 0;
        let (median, min) = time(iterations, |step| {
            let out = pollster::block_on(decode_tail(fresh(step), &none, TEMPERATURE, k)).unwrap();
            bytes = out.bytes_read;
        });
        println!("{:<58} {:>8.2} {:>8.2} {:>10}", format!("WGSL decode tail, K={k}"), median, min, bytes);

        let (median, min) = time(iterations, |step| {
            let out = pollster::block_on(decode_tail(fresh(step), &penalties, TEMPERATURE, k)).unwrap();
            bytes = out.bytes_read;
        });
        println!(
            "{:<58} {:>8.2} {:>8.2} {:>10}",
            format!("WGSL decode tail + 65 adjustments + mask, K={k}"),
            median,
            min,
            bytes
        );

        let mut read_ms = 0.0;
        let mut cpu_ms = 0.0;
        let (median, min) = time(iterations, |step| {
            let start = Instant::now();
            let data = pollster::block_on(fresh(step).into_data_async()).unwrap();
            let row = data.as_slice::<f32>().unwrap();
            read_ms += start.elapsed().as_secs_f64() * 1e3;
            let start = Instant::now();
            std::hint::black_box(cpu_tail(row, k));
            cpu_ms += start.elapsed().as_secs_f64() * 1e3;
        });
        let n = (iterations + 3) as f64;
        println!(
            "{:<58} {:>8.2} {:>8.2} {:>10}",
            format!("read all logits + CPU select, K={k} (read {:.2} + cpu {:.2})", read_ms / n, cpu_ms / n),
            median,
            min,
            vocab * 4
        );

        let (median, min) = time(iterations, |step| {
            let (values, ids): (Tensor<2>, Tensor<2, Int>) = fresh(step).topk_with_indices(k, 1);
            let values = pollster::block_on(values.into_data_async()).unwrap();
            let ids = pollster::block_on(ids.into_data_async()).unwrap();
            bytes = values.as_bytes().len() + ids.as_bytes().len();
        });
        println!(
            "{:<58} {:>8.2} {:>8.2} {:>10}",
            format!("Burn topk_with_indices (no softmax stats), K={k}"),
            median,
            min,
            bytes
        );
        println!();
    }
}

/// Runs `f` 3 times to warm up, then `iterations` times; returns (median, min) milliseconds.
fn time(iterations: usize, mut f: impl FnMut(usize)) -> (f64, f64) {
    for step in 0..3 {
        f(step);
    }
    let mut samples: Vec<f64> = (0..iterations.max(1))
        .map(|step| {
            let start = Instant::now();
            f(step + 3);
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    (samples[samples.len() / 2], samples[0])
}
