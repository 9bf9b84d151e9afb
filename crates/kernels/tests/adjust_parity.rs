//! `logit_adjust.wgsl` against `reference::adjust_logits`: the adjusted row must be bit-identical.

mod common;

use common::*;
use nucleus_kernels::{KernelError, LogitAdjustment, LogitAdjustments, adjust_logits, reference};

fn assert_parity(logits: &[f32], adjustments: &LogitAdjustments, what: &str) {
    let gpu = read_row(adjust_logits(row(logits), adjustments).unwrap_or_else(|e| panic!("{what}: {e}")));
    let mut cpu = logits.to_vec();
    reference::adjust_logits(&mut cpu, adjustments).unwrap();
    let (gpu_bits, cpu_bits) = (bits(&gpu), bits(&cpu));
    if let Some(id) = (0..cpu.len()).find(|&i| gpu_bits[i] != cpu_bits[i]) {
        panic!("{what}: logit {id} is {} on the GPU, {} expected", gpu[id], cpu[id]);
    }
}

/// `count` distinct ids with random bias, penalties and offsets (some -inf).
fn random_adjustments(rng: &mut Rng, vocab: usize, count: usize) -> LogitAdjustments {
    let mut ids: Vec<u32> = (0..vocab as u32).collect();
    for i in 0..count.min(vocab) {
        let j = i + rng.below((vocab - i) as u64) as usize;
        ids.swap(i, j);
    }
    let mut adjustments = LogitAdjustments::new();
    for &id in &ids[..count.min(vocab)] {
        let mut entry = LogitAdjustment::new(id);
        match rng.below(6) {
            0 => entry = entry.with_bias((rng.normal() * 5.0) as f32),
            1 => entry = entry.with_repetition_penalty(1.0 + rng.unit()),
            2 => entry = entry.with_offset(-(rng.unit() * 3.0) as f32),
            3 => entry = entry.with_bias(f32::NEG_INFINITY),
            4 => entry = entry.with_scale(0.5 + rng.unit() as f32),
            _ => entry = entry.with_bias((rng.normal() * 2.0) as f32).with_repetition_penalty(1.3).with_offset(-0.75),
        }
        adjustments.push(entry);
    }
    adjustments
}

#[test]
fn random_adjustments_are_bit_exact() {
    let mut rng = Rng::new(31);
    for vocab in [49_152, 32_000, 151_936, 7] {
        let logits = random_logits(&mut rng, vocab, 4.0);
        for count in [1, 50, 3000] {
            let adjustments = random_adjustments(&mut rng, vocab, count);
            assert_parity(&logits, &adjustments, &format!("V={vocab}, {count} adjustments"));
        }
    }
}

#[test]
fn more_adjustments_than_one_dispatch_covers() {
    // 1024 workgroups x 256 invocations = 262,144 < 300,000: the grid-stride loop runs twice.
    let mut rng = Rng::new(32);
    let vocab = 300_000;
    let logits = random_logits(&mut rng, vocab, 2.0);
    let adjustments = random_adjustments(&mut rng, vocab, vocab);
    assert_parity(&logits, &adjustments, "every token adjusted");
}

#[test]
fn allow_mask() {
    let mut rng = Rng::new(33);
    for vocab in [49_152usize, 151_936, 7, 33] {
        let logits = random_logits(&mut rng, vocab, 3.0);
        let allowed = (0..vocab as u32).filter(|_| rng.below(3) == 0);
        let mask = LogitAdjustments::allow_mask_from_ids(vocab, allowed).unwrap();
        let adjustments = random_adjustments(&mut rng, vocab, 200).with_allow_mask(mask.clone());
        assert_parity(&logits, &adjustments, &format!("V={vocab}, mask and adjustments"));
        let only_mask = LogitAdjustments::new().with_allow_mask(mask);
        assert_parity(&logits, &only_mask, &format!("V={vocab}, mask only"));
    }
    // A masked NaN or +inf is kept (so the softmax reports it); a masked -inf stays -inf.
    let logits = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1.0, 2.0];
    let mask = LogitAdjustments::allow_mask_from_ids(5, [4]).unwrap();
    let adjusted = read_row(adjust_logits(row(&logits), &LogitAdjustments::new().with_allow_mask(mask)).unwrap());
    assert!(adjusted[0].is_nan());
    assert_eq!(&adjusted[1..], &[f32::INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY, 2.0]);
}

#[test]
fn special_values_follow_ieee() {
    let logits = [f32::NEG_INFINITY, f32::INFINITY, f32::NAN, f32::MAX, -f32::MAX, 0.0, -0.0, 3.0];
    let adjustments = LogitAdjustments::from_entries(vec![
        LogitAdjustment::new(0).with_bias(5.0).with_repetition_penalty(2.0).with_offset(-1.0),
        LogitAdjustment::new(1).with_bias(f32::NEG_INFINITY), // +inf + -inf = NaN
        LogitAdjustment::new(2).with_bias(1.0),
        LogitAdjustment::new(3).with_bias(f32::MAX), // overflows to +inf
        LogitAdjustment::new(4).with_scale(2.0),     // overflows to -inf
        LogitAdjustment::new(5).with_repetition_penalty(1.5),
        LogitAdjustment::new(6).with_offset(-0.0),
        LogitAdjustment::new(7).with_offset(f32::NEG_INFINITY),
    ]);
    assert_parity(&logits, &adjustments, "special values");
    let adjusted = read_row(adjust_logits(row(&logits), &adjustments).unwrap());
    assert_eq!(adjusted[0], f32::NEG_INFINITY);
    assert!(adjusted[1].is_nan());
    assert!(adjusted[2].is_nan());
    assert_eq!((adjusted[3], adjusted[4], adjusted[7]), (f32::INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY));
}

#[test]
fn sampler_style_penalties() {
    let mut rng = Rng::new(34);
    let logits = random_logits(&mut rng, 49_152, 3.0);
    let counts: Vec<(u32, u32)> = (0..300).map(|i| (i * 97 % 49_152, 1 + i % 4)).collect();
    let bias = [(5u32, 2.5), (97, -1.0), (48_000, f64::NEG_INFINITY)];
    let adjustments = sampler_adjustments(49_152, &bias, &counts, 1.3, 0.4, 0.25);
    assert_parity(&logits, &adjustments, "bias + repetition + presence/frequency");
    // Spot check against the sampler's formula (f64 there, f32 here).
    let mut adjusted = logits.clone();
    reference::adjust_logits(&mut adjusted, &adjustments).unwrap();
    let z = f64::from(logits[97]) - 1.0;
    let z = if z > 0.0 { z / 1.3 } else { z * 1.3 };
    let z = z - (2.0 * 0.25 + 0.4);
    assert!((f64::from(adjusted[97]) - z).abs() < 1e-5, "{} vs {z}", adjusted[97]);
}

#[test]
fn shared_logits_are_not_modified() {
    let mut rng = Rng::new(35);
    let logits = random_logits(&mut rng, 32_000, 1.0);
    let original = row(&logits);
    let keep = original.clone();
    let adjustments = LogitAdjustments::from_entries(vec![LogitAdjustment::new(3).with_bias(100.0)]);
    let adjusted = read_row(adjust_logits(original, &adjustments).unwrap());
    assert_eq!(adjusted[3], logits[3] + 100.0);
    assert_eq!(bits(&read_row(keep)), bits(&logits), "the clone must keep the unadjusted row");
}

#[test]
fn invalid_adjustments_name_the_parameter() {
    let cases: Vec<(LogitAdjustments, &str)> = vec![
        (LogitAdjustments::from_entries(vec![LogitAdjustment::new(7)]), "adjustments[0].id"),
        (LogitAdjustments::from_entries(vec![LogitAdjustment::new(1), LogitAdjustment::new(1)]), "adjustments[1].id"),
        (LogitAdjustments::from_entries(vec![LogitAdjustment::new(0).with_bias(f32::NAN)]), "adjustments[0].bias"),
        (
            LogitAdjustments::from_entries(vec![LogitAdjustment::new(0).with_offset(f32::INFINITY)]),
            "adjustments[0].offset",
        ),
        (
            LogitAdjustments::from_entries(vec![LogitAdjustment::new(0).with_scale(0.0)]),
            "adjustments[0].scale_positive",
        ),
        (
            LogitAdjustments::from_entries(vec![LogitAdjustment::new(2).with_repetition_penalty(-1.0)]),
            "adjustments[0].scale_positive",
        ),
        (LogitAdjustments::new().with_allow_mask(vec![0, 0]), "allow_mask"),
    ];
    for (adjustments, expected) in cases {
        let error = adjust_logits(row(&[0.0; 7]), &adjustments).unwrap_err();
        assert!(
            matches!(&error, KernelError::InvalidParameter { parameter, .. } if parameter == expected),
            "expected an error naming {expected}, got {error}"
        );
        let mut cpu = [0.0f32; 7];
        assert_eq!(reference::adjust_logits(&mut cpu, &adjustments), Err(error));
    }
    let error = LogitAdjustments::allow_mask_from_ids(7, [7]).unwrap_err();
    assert!(matches!(&error, KernelError::InvalidParameter { parameter, .. } if parameter == "allowed ids"));
}
