//! `softmax_stats.wgsl` against `reference::softmax`: the max exactly, the sum of exponentials
//! within 1e-6 relative, ln S within 1e-5, probabilities within the `exp` accuracy bound.

mod common;

use common::*;
use nucleus_kernels::{KernelError, reference, softmax, softmax_stats};

const TEMPERATURES: [f32; 4] = [0.05, 0.7, 1.0, 2.0];

/// Relative tolerance of one probability: the f32 `exp` of Vulkan/WebGPU is accurate to
/// `3 + 2|x|` ulp, plus the error of S.
fn probability_tolerance(argument: f32) -> f64 {
    1e-6 + (3.0 + 2.0 * f64::from(argument.abs())) * f64::from(f32::EPSILON)
}

fn assert_stats_parity(logits: &[f32], temperature: f32, what: &str) {
    let gpu =
        block_on(softmax_stats(row(logits), temperature)).unwrap_or_else(|e| panic!("{what}, T={temperature}: {e}"));
    let cpu = reference::softmax_stats(logits, temperature).unwrap();
    assert_eq!(gpu.max.to_bits(), cpu.max.to_bits(), "{what}, T={temperature}: max");
    assert!(
        close(f64::from(gpu.sum_exp), cpu.sum_exp, 1e-6, 0.0),
        "{what}, T={temperature}: sum_exp {} vs {}",
        gpu.sum_exp,
        cpu.sum_exp
    );
    assert!(
        close(f64::from(gpu.log_sum_exp), cpu.log_sum_exp, 0.0, 1e-5),
        "{what}, T={temperature}: log_sum_exp {} vs {}",
        gpu.log_sum_exp,
        cpu.log_sum_exp
    );
    assert_eq!(gpu.bytes_read, 16, "{what}: bytes read");
}

fn assert_probability_parity(logits: &[f32], temperature: f32, what: &str) {
    let gpu = block_on(softmax(row(logits), temperature)).unwrap_or_else(|e| panic!("{what}, T={temperature}: {e}"));
    let (stats, probabilities) = reference::softmax(logits, temperature).unwrap();
    assert_eq!(gpu.stats.max.to_bits(), stats.max.to_bits(), "{what}: max");
    assert!(close(f64::from(gpu.stats.sum_exp), stats.sum_exp, 1e-6, 0.0), "{what}: sum_exp");
    let inverse_temperature = 1.0 / temperature;
    let mut total = 0.0f64;
    for (id, (&p, &expected)) in gpu.probabilities.iter().zip(&probabilities).enumerate() {
        let argument = reference::scaled_argument(logits[id], stats.max, inverse_temperature);
        if argument == f32::NEG_INFINITY {
            assert_eq!(p, 0.0, "{what}, T={temperature}: p[{id}] of an underflowed argument");
            continue;
        }
        assert!(
            // GPUs may flush subnormal results to zero.
            close(f64::from(p), expected, probability_tolerance(argument), f64::from(f32::MIN_POSITIVE)),
            "{what}, T={temperature}: p[{id}] = {p} vs {expected}"
        );
        total += f64::from(p);
    }
    assert!((total - 1.0).abs() < 1e-5, "{what}: probabilities sum to {total}");
}

#[test]
fn statistics_of_random_rows() {
    let mut rng = Rng::new(21);
    for vocab in [49_152, 32_000, 151_936, 7] {
        for (scale, temperature) in [3.0, 1.0, 10.0, 0.01].into_iter().zip(TEMPERATURES) {
            let logits = random_logits(&mut rng, vocab, scale);
            assert_stats_parity(&logits, temperature, &format!("V={vocab} scale={scale}"));
        }
    }
}

#[test]
fn probabilities_of_random_rows() {
    let mut rng = Rng::new(22);
    for vocab in [49_152, 7] {
        for temperature in TEMPERATURES {
            let logits = random_logits(&mut rng, vocab, 3.0);
            assert_probability_parity(&logits, temperature, &format!("V={vocab}"));
        }
    }
}

#[test]
fn negative_infinity_entries_have_probability_zero() {
    let mut rng = Rng::new(23);
    let mut logits = random_logits(&mut rng, 32_000, 2.0);
    for id in (0..32_000).step_by(3) {
        logits[id] = f32::NEG_INFINITY;
    }
    assert_stats_parity(&logits, 0.8, "every third -inf");
    assert_probability_parity(&logits, 0.8, "every third -inf");
    let gpu = block_on(softmax(row(&logits), 0.8)).unwrap();
    assert!((0..32_000).step_by(3).all(|id| gpu.probabilities[id] == 0.0));
    // A single finite logit: S = 1, p = 1.
    let mut single = vec![f32::NEG_INFINITY; 151_936];
    single[151_935] = -3.5;
    let gpu = block_on(softmax(row(&single), 1.0)).unwrap();
    assert_eq!((gpu.stats.max, gpu.stats.sum_exp, gpu.stats.log_sum_exp), (-3.5, 1.0, 0.0));
    assert_eq!(gpu.probabilities[151_935], 1.0);
}

#[test]
fn very_large_and_very_negative_logits() {
    let mut rng = Rng::new(24);
    // Huge spread: (x - m) overflows to -inf for the most negative ones; exp gives 0.
    let mut logits = random_logits(&mut rng, 49_152, 1e37);
    logits[5] = f32::MAX;
    logits[6] = f32::MIN;
    for temperature in TEMPERATURES {
        assert_stats_parity(&logits, temperature, "spread 1e37");
    }
    assert_probability_parity(&logits, 1.0, "spread 1e37");
    // Everything very negative: the max shift keeps it exact.
    let negative: Vec<f32> = random_logits(&mut rng, 151_936, 3.0).iter().map(|x| x - 1e6).collect();
    assert_stats_parity(&negative, 0.7, "around -1e6");
    let large: Vec<f32> = random_logits(&mut rng, 32_000, 3.0).iter().map(|x| x + 1e30).collect();
    assert_stats_parity(&large, 1.0, "around 1e30");
}

#[test]
fn all_equal_rows() {
    for vocab in [7usize, 49_152, 151_936] {
        let logits = vec![-2.75f32; vocab];
        let gpu = block_on(softmax_stats(row(&logits), 0.7)).unwrap();
        assert_eq!(gpu.max, -2.75);
        assert_eq!(gpu.sum_exp, vocab as f32, "V={vocab}: S = V exactly");
        assert_stats_parity(&logits, 0.7, "all equal");
    }
}

#[test]
fn candidate_probabilities_from_the_statistics() {
    // What the decode tail relies on: p(x) from (m, S) alone equals the full softmax.
    let mut rng = Rng::new(25);
    let logits = random_logits(&mut rng, 49_152, 3.0);
    let gpu = block_on(softmax(row(&logits), 0.9)).unwrap();
    let (_, expected) = reference::softmax(&logits, 0.9).unwrap();
    for id in [0usize, 17, 49_151] {
        assert!(close(gpu.stats.probability(logits[id]), expected[id], 2e-5, 0.0));
    }
}

#[test]
fn broken_rows_are_errors() {
    let mut logits = vec![0.5f32; 49_152];
    logits[49_151] = f32::NAN;
    assert_eq!(block_on(softmax_stats(row(&logits), 1.0)), Err(KernelError::NanLogits));
    assert_eq!(block_on(softmax(row(&logits), 1.0)).unwrap_err(), KernelError::NanLogits);
    logits[49_151] = f32::INFINITY;
    assert_eq!(block_on(softmax_stats(row(&logits), 1.0)), Err(KernelError::PositiveInfiniteLogits));
    let all_negative_infinity = vec![f32::NEG_INFINITY; 32_000];
    assert_eq!(block_on(softmax_stats(row(&all_negative_infinity), 1.0)), Err(KernelError::NoFiniteLogits));
    // NaN wins over the other flags, as in the reference.
    let mut mixed = vec![f32::NEG_INFINITY; 7];
    mixed[2] = f32::INFINITY;
    mixed[3] = f32::NAN;
    assert_eq!(block_on(softmax_stats(row(&mixed), 1.0)), Err(KernelError::NanLogits));
    assert_eq!(reference::softmax_stats(&mixed, 1.0), Err(KernelError::NanLogits));
}

#[test]
fn temperature_is_validated() {
    for temperature in [0.0, -1.0, f32::NAN, f32::INFINITY, 1e-40] {
        let error = block_on(softmax_stats(row(&[1.0, 2.0]), temperature)).unwrap_err();
        assert!(
            matches!(&error, KernelError::InvalidParameter { parameter, .. } if parameter == "temperature"),
            "T={temperature}: {error}"
        );
    }
}
