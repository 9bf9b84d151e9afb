//! `topk.wgsl` (both passes) against `reference::top_k`: ids and values must be identical.

mod common;

use common::*;
use nucleus_kernels::{KernelError, reference, top_k};

const KS: [usize; 4] = [1, 20, 64, 256];

/// GPU and reference agree exactly (ids, value bits) and the result is sorted as documented.
fn assert_parity(logits: &[f32], k: usize, what: &str) {
    let gpu = block_on(top_k(row(logits), k)).unwrap_or_else(|e| panic!("{what}, k={k}: {e}"));
    let cpu = reference::top_k(logits, k).unwrap();
    assert_eq!(gpu.ids, cpu.ids, "{what}, k={k}: ids");
    let gpu_bits: Vec<u32> = gpu.logits.iter().map(|v| v.to_bits()).collect();
    let cpu_bits: Vec<u32> = cpu.logits.iter().map(|v| v.to_bits()).collect();
    assert_eq!(gpu_bits, cpu_bits, "{what}, k={k}: values");
    assert_eq!(gpu.ids.len(), k.min(logits.len()), "{what}, k={k}: count");
    assert_eq!(gpu.bytes_read, 16 + 8 * k, "{what}, k={k}: bytes read");
    // Independent of the reference: descending, ties by ascending id, values match the row.
    for (rank, (&id, &value)) in gpu.ids.iter().zip(&gpu.logits).enumerate() {
        assert_eq!(value, logits[id as usize], "{what}: value of id {id}");
        if rank > 0 {
            let (prev_id, prev) = (gpu.ids[rank - 1], gpu.logits[rank - 1]);
            assert!(prev > value || (prev == value && prev_id < id), "{what}: order at rank {rank}");
        }
    }
}

#[test]
fn random_rows_at_model_vocab_sizes() {
    let mut rng = Rng::new(11);
    for vocab in [49_152, 32_000, 151_936, 7] {
        let logits = random_logits(&mut rng, vocab, 3.0);
        for k in KS {
            assert_parity(&logits, k, &format!("random V={vocab}"));
        }
    }
}

#[test]
fn k_larger_than_the_vocabulary() {
    let mut rng = Rng::new(12);
    for vocab in [1, 2, 7, 255, 257] {
        let logits = random_logits(&mut rng, vocab, 1.0);
        for k in [vocab + 1, 20, 256] {
            if k <= 256 {
                assert_parity(&logits, k, &format!("K > V, V={vocab}"));
            }
        }
    }
}

#[test]
fn ties_go_to_the_lower_id() {
    let mut rng = Rng::new(13);
    // Few distinct values: long runs of ties across the 4096-id groups.
    let logits: Vec<f32> = (0..49_152).map(|_| rng.below(5) as f32).collect();
    for k in KS {
        assert_parity(&logits, k, "five distinct values");
    }
    // All equal: the answer is ids 0..k.
    let equal = vec![0.25f32; 32_000];
    for k in KS {
        assert_parity(&equal, k, "all equal");
        let gpu = block_on(top_k(row(&equal), k)).unwrap();
        assert_eq!(gpu.ids, (0..k as u32).collect::<Vec<_>>());
    }
    // -0.0 and +0.0 are the same value: ties by id, reported as +0.0.
    let zeros: Vec<f32> = (0..10_000).map(|i| if i % 3 == 0 { -0.0 } else { 0.0 }).collect();
    for k in KS {
        assert_parity(&zeros, k, "signed zeros");
    }
    // A tie straddling the K boundary, with the tied ids in the last group.
    let mut straddle = random_logits(&mut rng, 151_936, 1.0);
    for id in (151_000..151_936).step_by(7) {
        straddle[id] = 50.0;
    }
    for k in KS {
        assert_parity(&straddle, k, "tie at the boundary");
    }
}

#[test]
fn negative_infinity_entries() {
    let mut rng = Rng::new(14);
    // Mostly -inf, fewer finite values than K.
    let mut logits = vec![f32::NEG_INFINITY; 49_152];
    for _ in 0..100 {
        logits[rng.below(49_152) as usize] = rng.normal() as f32;
    }
    for k in KS {
        assert_parity(&logits, k, "mostly -inf");
    }
    let all = vec![f32::NEG_INFINITY; 7];
    assert_parity(&all, 20, "all -inf (top-k alone does not reject it)");
}

#[test]
fn extreme_values() {
    let mut rng = Rng::new(15);
    let specials = [
        f32::MAX,
        f32::MIN,
        -1e30,
        1e30,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        1e-45,
        -1e-45,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
    ];
    let logits: Vec<f32> = (0..32_000)
        .map(|_| {
            if rng.below(4) == 0 {
                specials[rng.below(specials.len() as u64) as usize]
            } else {
                (rng.normal() * 1e3) as f32
            }
        })
        .collect();
    for k in KS {
        assert_parity(&logits, k, "extreme values");
    }
    let very_negative: Vec<f32> = (0..49_152).map(|i| -1e30 - (i % 1000) as f32 * 1e25).collect();
    for k in KS {
        assert_parity(&very_negative, k, "very negative");
    }
}

#[test]
fn adversarial_orders() {
    // Ascending: the whole top-k lies in the last group; descending: in the first.
    let ascending: Vec<f32> = (0..151_936).map(|i| i as f32 * 1e-3).collect();
    let descending: Vec<f32> = ascending.iter().rev().copied().collect();
    // Values one ulp apart: every radix round is needed.
    let ulps: Vec<f32> = (0..49_152u32).map(|i| f32::from_bits(0x3f80_0000 + (i * 7919) % 49_152)).collect();
    for k in KS {
        assert_parity(&ascending, k, "ascending");
        assert_parity(&descending, k, "descending");
        assert_parity(&ulps, k, "one ulp apart");
    }
}

#[test]
fn clustered_large_values() {
    // The 2048 largest logits share the first 4096 ids: most blocks there hold several of the
    // top K, so more than the workgroup memory keeps lie above the K-th block maximum.
    let mut rng = Rng::new(16);
    let mut logits = random_logits(&mut rng, 49_152, 1.0);
    for value in &mut logits[..2048] {
        *value += 20.0;
    }
    for k in KS {
        assert_parity(&logits, k, "clustered");
    }
}

#[test]
fn nan_is_rejected() {
    let mut logits = vec![1.0f32; 49_152];
    logits[40_000] = f32::NAN;
    assert_eq!(block_on(top_k(row(&logits), 20)), Err(KernelError::NanLogits));
    logits[40_000] = -f32::NAN;
    assert_eq!(block_on(top_k(row(&logits), 20)), Err(KernelError::NanLogits));
    assert_eq!(reference::top_k(&logits, 20), Err(KernelError::NanLogits));
}

#[test]
fn k_out_of_range_names_the_parameter() {
    for k in [0, 257] {
        let error = block_on(top_k(row(&[1.0, 2.0]), k)).unwrap_err();
        assert!(matches!(&error, KernelError::InvalidParameter { parameter, .. } if parameter == "k"), "{error}");
    }
}
