//! Setup shared by the sampler's integration tests.

use nucleus_sampler::AdjustedLogits;

/// `logits` as stage 1–3 output with nothing adjusted or masked.
pub fn adjusted(logits: &[f32]) -> AdjustedLogits {
    AdjustedLogits::new(logits.iter().map(|&z| f64::from(z)).collect(), None).unwrap()
}

/// Token ids in the processed order: logit descending, ties (-0 and +0 included, as the sampler
/// and the GPU see them) to the lower id.
pub fn processed_order(logits: &[f32]) -> Vec<u32> {
    let key = |id: u32| logits[id as usize] + 0.0;
    let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
    ids.sort_by(|&a, &b| key(b).total_cmp(&key(a)).then(a.cmp(&b)));
    ids
}
