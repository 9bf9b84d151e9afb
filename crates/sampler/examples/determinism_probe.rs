//! The sampler's portability probe: the same seeded generations, natively and in wasm32.
//!
//! Built for `wasm32-unknown-unknown` (a `cdylib`), it exports `probe_len()` and
//! `probe(out_ptr)`, which `tests/wasm/sampler-determinism.mjs` runs in Node and compares with
//! `tests/fixtures/sampler-determinism.json`; natively, the sampler's `portability` test includes
//! this file and compares with the same fixture. So any platform difference in the maths or the
//! generator fails a test.

use std::collections::{BTreeMap, BTreeSet};

use nucleus_sampler::{Sampler, SamplingParams};

const VOCAB: usize = 4096;
const STEPS: usize = 48;

/// Logits from a fixed linear congruential sequence, in [-8, 12), with a few -inf.
fn logits() -> Vec<f32> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..VOCAB)
        .map(|i| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            if i % 997 == 0 { f32::NEG_INFINITY } else { ((state >> 40) as f32 / (1u64 << 24) as f32) * 20.0 - 8.0 }
        })
        .collect()
}

fn parameter_sets() -> Vec<SamplingParams> {
    let base = SamplingParams::default();
    vec![
        SamplingParams { seed: 1, ..base.clone() },
        SamplingParams { seed: 2, temperature: 0.7, top_p: 0.9, ..base.clone() },
        SamplingParams { seed: 3, temperature: 1.3, top_k: 40, min_p: 0.05, ..base.clone() },
        SamplingParams {
            seed: 4,
            temperature: 0.9,
            typical_p: 0.8,
            repetition_penalty: 1.2,
            presence_penalty: 0.3,
            frequency_penalty: 0.2,
            ..base.clone()
        },
        SamplingParams {
            seed: 5,
            temperature: 1.0,
            dry_multiplier: 0.8,
            dry_breaker_ids: BTreeSet::from([7, 8]),
            logit_bias: BTreeMap::from([(10, 5.0), (11, f64::NEG_INFINITY)]),
            ..base
        },
    ]
}

/// Every parameter set's generation, concatenated (each token is fed back as history).
pub fn probe_ids() -> Vec<u32> {
    let logits = logits();
    let mut ids = Vec::new();
    for params in parameter_sets() {
        let mut sampler = Sampler::new(params, VOCAB).expect("valid parameters");
        sampler.set_prompt(&[1, 2, 3, 2, 1]).expect("prompt in vocabulary");
        for _ in 0..STEPS {
            let step = sampler.sample(&logits, None, 0).expect("sampling works");
            sampler.accept(step.id).expect("id in vocabulary");
            ids.push(step.id);
        }
    }
    ids
}

#[unsafe(no_mangle)]
pub extern "C" fn probe_len() -> usize {
    parameter_sets().len() * STEPS
}

/// Writes `probe_len()` ids at `out`.
///
/// # Safety
/// `out` must point to `probe_len()` writable `u32`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn probe(out: *mut u32) {
    let ids = probe_ids();
    // SAFETY: the caller provides room for probe_len() == ids.len() values.
    unsafe { std::ptr::copy_nonoverlapping(ids.as_ptr(), out, ids.len()) };
}
