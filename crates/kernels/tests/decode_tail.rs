//! The whole tail (adjust → softmax statistics → top-k, one read) against `reference::decode_tail`.

mod common;

use burn::tensor::{Device, Tensor, TensorData};
use common::*;
use nucleus_kernels::{KernelError, LogitAdjustment, LogitAdjustments, decode_tail, decode_tail_enqueue, reference};

fn assert_parity(logits: &[f32], adjustments: &LogitAdjustments, temperature: f32, k: usize, what: &str) {
    let gpu = block_on(decode_tail(row(logits), adjustments, temperature, k)).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (adjusted, stats, top) = reference::decode_tail(logits, adjustments, temperature, k).unwrap();
    assert_eq!(gpu.ids, top.ids, "{what}: ids");
    assert_eq!(bits(&gpu.logits), bits(&top.logits), "{what}: logits");
    assert_eq!(gpu.max.to_bits(), stats.max.to_bits(), "{what}: max");
    assert_eq!(gpu.max, gpu.logits[0], "{what}: the max is the best candidate");
    assert!(close(f64::from(gpu.sum_exp), stats.sum_exp, 1e-6, 0.0), "{what}: sum_exp");
    assert!(close(f64::from(gpu.log_sum_exp), stats.log_sum_exp, 0.0, 1e-5), "{what}: log_sum_exp");
    assert_eq!(gpu.bytes_read, 16 + 8 * k, "{what}: one small read");
    // Candidate probabilities from (max, S) against the full-row reference softmax.
    let (_, probabilities) = reference::softmax(&adjusted, temperature).unwrap();
    for (&id, &logit) in gpu.ids.iter().zip(&gpu.logits).take(5) {
        let expected = probabilities[id as usize];
        assert!(close(gpu.probability(logit), expected, 2e-6, 1e-30), "{what}: p({id})");
    }
}

#[test]
fn plain_rows() {
    let mut rng = Rng::new(41);
    for vocab in [49_152, 32_000, 151_936, 7] {
        let logits = random_logits(&mut rng, vocab, 3.0);
        for (k, temperature) in [(1, 1.0), (20, 0.7), (64, 1.3), (256, 0.2)] {
            assert_parity(&logits, &LogitAdjustments::new(), temperature, k, &format!("V={vocab}, k={k}"));
        }
    }
}

#[test]
fn with_adjustments_and_mask() {
    let mut rng = Rng::new(42);
    for vocab in [49_152usize, 151_936, 7] {
        let logits = random_logits(&mut rng, vocab, 3.0);
        let counts: Vec<(u32, u32)> = (0..64u32).map(|i| ((i * 7919) % vocab as u32, 1 + i % 3)).collect();
        let mut counts_sorted = counts.clone();
        counts_sorted.sort_unstable();
        counts_sorted.dedup_by_key(|c| c.0);
        let bias = [(0u32, 1.5), ((vocab - 1) as u32, 30.0)];
        let adjustments = sampler_adjustments(vocab, &bias, &counts_sorted, 1.2, 0.5, 0.1);
        for k in [1, 20, 64, 256] {
            assert_parity(&logits, &adjustments, 0.8, k, &format!("V={vocab} penalties"));
        }
        let allowed = (0..vocab as u32).filter(|id| id % 5 != 1);
        let mask = LogitAdjustments::allow_mask_from_ids(vocab, allowed).unwrap();
        let masked = adjustments.clone().with_allow_mask(mask);
        for k in [1, 20, 256] {
            assert_parity(&logits, &masked, 1.0, k, &format!("V={vocab} penalties + mask"));
        }
    }
    // A mask with fewer allowed tokens than K: the rest of the top-k is -inf, lowest ids first.
    let logits = random_logits(&mut rng, 32_000, 1.0);
    let mask = LogitAdjustments::allow_mask_from_ids(32_000, [31_999, 7, 12_345]).unwrap();
    let adjustments = LogitAdjustments::new().with_allow_mask(mask);
    assert_parity(&logits, &adjustments, 1.0, 20, "three allowed tokens");
    let out = block_on(decode_tail(row(&logits), &adjustments, 1.0, 20)).unwrap();
    assert!(out.logits[3..].iter().all(|&v| v == f32::NEG_INFINITY));
    assert_eq!(&out.ids[3..6], &[0, 1, 2]);
    assert_eq!(out.probability(out.logits[5]), 0.0);
}

#[test]
fn the_packed_result_can_be_read_later() {
    let mut rng = Rng::new(43);
    let logits = random_logits(&mut rng, 49_152, 3.0);
    let pending = decode_tail_enqueue(row(&logits), &LogitAdjustments::new(), 1.0, 20).unwrap();
    assert_eq!(pending.packed.dims(), [4 + 2 * 20]);
    let out = block_on(pending.read()).unwrap();
    assert_eq!(out.ids, reference::top_k(&logits, 20).unwrap().ids);
}

#[test]
fn broken_rows_are_errors_not_nan() {
    let mut logits = vec![0.0f32; 49_152];
    logits[123] = f32::NAN;
    let none = LogitAdjustments::new();
    assert_eq!(block_on(decode_tail(row(&logits), &none, 1.0, 20)), Err(KernelError::NanLogits));
    logits[123] = f32::INFINITY;
    assert_eq!(block_on(decode_tail(row(&logits), &none, 1.0, 20)), Err(KernelError::PositiveInfiniteLogits));
    // Everything masked out.
    let mask = LogitAdjustments::new().with_allow_mask(vec![0; 49_152 / 32]);
    assert_eq!(block_on(decode_tail(row(&vec![1.0; 49_152]), &mask, 1.0, 20)), Err(KernelError::NoFiniteLogits));
    // A -inf bias on the only finite token.
    let mut single = vec![f32::NEG_INFINITY; 7];
    single[4] = 2.0;
    let forbid = LogitAdjustments::from_entries(vec![LogitAdjustment::new(4).with_bias(f32::NEG_INFINITY)]);
    assert_eq!(block_on(decode_tail(row(&single), &forbid, 1.0, 3)), Err(KernelError::NoFiniteLogits));
}

fn parameter_of(error: KernelError) -> String {
    match error {
        KernelError::InvalidParameter { parameter, .. } => parameter,
        other => panic!("expected a parameter error, got {other}"),
    }
}

#[test]
fn parameters_are_validated_before_any_work() {
    let none = LogitAdjustments::new();
    let tail = |k, temperature| block_on(decode_tail(row(&[1.0; 7]), &none, temperature, k));
    assert_eq!(parameter_of(tail(0, 1.0).unwrap_err()), "k");
    assert_eq!(parameter_of(tail(257, 1.0).unwrap_err()), "k");
    assert_eq!(parameter_of(tail(5, 0.0).unwrap_err()), "temperature");
    assert_eq!(parameter_of(tail(5, f32::NAN).unwrap_err()), "temperature");
    let bad = LogitAdjustments::from_entries(vec![LogitAdjustment::new(9)]);
    assert_eq!(parameter_of(block_on(decode_tail(row(&[1.0; 7]), &bad, 1.0, 5)).unwrap_err()), "adjustments[0].id");
    let two_rows = Tensor::<2>::from_data(TensorData::new(vec![0.0f32; 14], [2, 7]), &device());
    assert_eq!(parameter_of(block_on(decode_tail(two_rows, &none, 1.0, 5)).unwrap_err()), "logits");
    let empty = Tensor::<2>::from_data(TensorData::new(Vec::<f32>::new(), [1, 0]), &device());
    assert_eq!(parameter_of(block_on(decode_tail(empty, &none, 1.0, 5)).unwrap_err()), "logits");
}

#[test]
fn other_backends_are_refused_not_panicking() {
    let flex = Tensor::<2>::from_data(TensorData::new(vec![0.0f32; 7], [1, 7]), &Device::flex());
    let error = block_on(decode_tail(flex, &LogitAdjustments::new(), 1.0, 5)).unwrap_err();
    assert!(matches!(error, KernelError::UnsupportedInput(_)), "{error}");
}

#[test]
fn tail_with_the_raw_row_reads_everything_in_one_transaction() {
    let mut rng = Rng::new(77);
    let logits = random_logits(&mut rng, 49_152, 3.0);
    let best = reference::top_k(&logits, 1).unwrap().ids[0];
    // Forbid the raw best token and lift another: the adjusted and raw top lists differ.
    let adjustments = LogitAdjustments::from_entries(vec![
        LogitAdjustment::new(5).with_bias(40.0),
        LogitAdjustment::new(best).with_bias(f32::NEG_INFINITY),
    ]);
    for (temperature, k, raw_top_k) in [(0.8, 64, 20), (1.5, 20, 0)] {
        let (tail, raw) =
            block_on(nucleus_kernels::decode_tail_with_raw(row(&logits), &adjustments, temperature, k, raw_top_k))
                .unwrap();
        // The tail is the adjusted row at T; the raw part is the unadjusted row at 1.
        let (_, stats, top) = reference::decode_tail(&logits, &adjustments, temperature, k).unwrap();
        assert_eq!(tail.ids, top.ids);
        assert_eq!(tail.ids[0], 5);
        assert!(close(f64::from(tail.sum_exp), stats.sum_exp, 1e-6, 0.0));
        let raw_reference = reference::softmax_stats(&logits, 1.0).unwrap();
        assert_eq!(raw.stats.max.to_bits(), raw_reference.max.to_bits());
        assert!(close(f64::from(raw.stats.sum_exp), raw_reference.sum_exp, 1e-6, 0.0));
        assert_eq!((tail.bytes_read, raw.stats.bytes_read), (16 + 8 * k, 16));
        match raw.top {
            Some(raw_top) => {
                let expected = reference::top_k(&logits, raw_top_k).unwrap();
                assert_eq!(raw_top.ids, expected.ids);
                assert_eq!(raw_top.ids[0], best, "the raw row is read before the adjustments");
                assert_eq!(raw_top.bytes_read, 16 + 8 * raw_top_k);
            }
            None => assert_eq!(raw_top_k, 0),
        }
    }
}
