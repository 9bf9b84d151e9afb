//! Shared by the parity tests: one wgpu device per process, a seeded generator, row helpers.
#![allow(dead_code)]

use std::sync::OnceLock;

use burn::tensor::{Device, Tensor, TensorData};

/// The wgpu device (lavapipe here), initialised once per test binary: a second init errors.
pub fn device() -> Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE
        .get_or_init(|| {
            Device::wgpu_options().init().expect("initialise wgpu (is a Vulkan driver such as lavapipe installed?)")
        })
        .clone()
}

/// A `[1, V]` row on the device.
pub fn row(values: &[f32]) -> Tensor<2> {
    Tensor::from_data(TensorData::new(values.to_vec(), [1, values.len()]), &device())
}

/// SplitMix64: small, seeded, the same everywhere.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Approximately normal (sum of 4 uniforms, centred, unit variance).
    pub fn normal(&mut self) -> f64 {
        ((0..4).map(|_| self.unit()).sum::<f64>() - 2.0) * 3f64.sqrt()
    }
}

/// `vocab` logits like a language model's: normal with spread `scale`, rounded to f32.
pub fn random_logits(rng: &mut Rng, vocab: usize, scale: f64) -> Vec<f32> {
    (0..vocab).map(|_| (rng.normal() * scale) as f32).collect()
}

pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    pollster::block_on(future)
}

/// |a - b| <= rel * |b| + abs.
pub fn close(a: f64, b: f64, rel: f64, abs: f64) -> bool {
    (a - b).abs() <= rel * b.abs() + abs
}

/// Reads a `[1, V]` row back (tests only: the decode path never reads the row).
pub fn read_row(tensor: Tensor<2>) -> Vec<f32> {
    block_on(tensor.into_data_async()).expect("read the row").as_slice::<f32>().expect("f32 row").to_vec()
}

/// Bit patterns, with every NaN mapped to one pattern (payloads are not part of the contract).
pub fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| if v.is_nan() { 0x7fc0_0000 } else { v.to_bits() }).collect()
}

/// The sampler's stage 1–2 adjustments (what the engine sends the decode tail) for `bias` and
/// the penalties over a prompt holding each `(id, count)` `count` times.
pub fn sampler_adjustments(
    vocab: usize,
    bias: &[(u32, f64)],
    counts: &[(u32, u32)],
    repetition_penalty: f64,
    presence_penalty: f64,
    frequency_penalty: f64,
) -> nucleus_kernels::LogitAdjustments {
    use nucleus_sampler::{Sampler, SamplingParams};
    let params = SamplingParams {
        logit_bias: bias.iter().copied().collect(),
        repetition_penalty,
        presence_penalty,
        frequency_penalty,
        penalize_prompt: true,
        ..SamplingParams::default()
    };
    let mut sampler = Sampler::new(params, vocab).expect("valid sampling parameters");
    let prompt: Vec<u32> = counts.iter().flat_map(|&(id, count)| std::iter::repeat_n(id, count as usize)).collect();
    sampler.set_prompt(&prompt).expect("prompt ids inside the vocabulary");
    nucleus_kernels::LogitAdjustments::from_entries(sampler.gpu_adjustments().expect("no DRY"))
}
