//! Plain-Rust reference of every kernel, with the exact semantics the shaders implement. The
//! parity tests compare the GPU against these.
//!
//! - [`adjust_logits`] is bit-exact with `logit_adjust.wgsl` (IEEE f32, same operation order).
//! - [`top_k`] is exact: same order (value descending, `-0.0 == +0.0`, ties to the lower id),
//!   same values (`-0.0` reported as `+0.0`).
//! - [`softmax_stats`] / [`softmax`] compute the same quantities in f64 from the same f32
//!   arguments `(x - m) * (1/T)`: the GPU differs only by its `exp` and its f32 summation.

use crate::score::{RowScore, TargetScore};
use crate::{KernelError, LogitAdjustments, TopK, WeightLayout};

/// The statistics of [`crate::softmax_stats`], computed in f64.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReferenceStats {
    /// Largest finite logit (unscaled).
    pub max: f32,
    /// `sum over finite x of exp((x - max) * (1/T))`, in f64.
    pub sum_exp: f64,
    /// `ln(sum_exp)`.
    pub log_sum_exp: f64,
}

/// Applies `adjustments` in place, exactly as `logit_adjust.wgsl` does. Validates them first.
pub fn adjust_logits(logits: &mut [f32], adjustments: &LogitAdjustments) -> Result<(), KernelError> {
    adjustments.validate(logits.len())?;
    let mask = adjustments.allow_mask();
    let allowed = |id: usize| mask.is_none_or(|words| (words[id / 32] >> (id % 32)) & 1 == 1);
    for entry in adjustments.entries() {
        let id = entry.id as usize;
        if !allowed(id) {
            continue;
        }
        // Rust's f32 operations are IEEE: -inf + finite = -inf, +inf + -inf = NaN, and a scale
        // is finite and > 0, so infinities keep their sign.
        let biased = logits[id] + entry.bias;
        let scale = if biased > 0.0 { entry.scale_positive } else { entry.scale_non_positive };
        let scaled = if biased.is_finite() { biased * scale } else { biased };
        logits[id] = scaled + entry.offset;
    }
    if mask.is_some() {
        for (id, value) in logits.iter_mut().enumerate() {
            // NaN and +inf stay, so that the softmax reports them.
            let kept = value.is_nan() || *value == f32::INFINITY;
            if !allowed(id) && !kept {
                *value = f32::NEG_INFINITY;
            }
        }
    }
    Ok(())
}

/// Checks the row the way `softmax_stats.wgsl` flags it (NaN first, then `+inf`, then no
/// finite value) and returns its largest finite value (`+0.0` for a largest value of `-0.0`).
pub fn check_row(logits: &[f32]) -> Result<f32, KernelError> {
    if logits.iter().any(|x| x.is_nan()) {
        return Err(KernelError::NanLogits);
    }
    if logits.contains(&f32::INFINITY) {
        return Err(KernelError::PositiveInfiniteLogits);
    }
    logits
        .iter()
        .copied()
        .filter(|x| x.is_finite())
        .reduce(f32::max)
        .map(|max| max + 0.0) // -0.0 is reported as +0.0, as on the device
        .ok_or(KernelError::NoFiniteLogits)
}

/// The scaled, shifted argument of `exp`, rounded to f32 exactly as the shader computes it.
pub fn scaled_argument(logit: f32, max: f32, inverse_temperature: f32) -> f32 {
    (logit - max) * inverse_temperature
}

/// Softmax statistics with temperature (see [`ReferenceStats`]).
pub fn softmax_stats(logits: &[f32], temperature: f32) -> Result<ReferenceStats, KernelError> {
    let inverse_temperature = crate::inverse_temperature(temperature)?;
    if logits.is_empty() {
        return Err(KernelError::invalid("logits", "the row is empty"));
    }
    let max = check_row(logits)?;
    let sum_exp: f64 = logits
        .iter()
        .filter(|x| **x != f32::NEG_INFINITY)
        .map(|&x| f64::from(scaled_argument(x, max, inverse_temperature)).exp())
        .sum();
    Ok(ReferenceStats { max, sum_exp, log_sum_exp: sum_exp.ln() })
}

/// The probabilities `exp((x - max) / T) / sum_exp`, in f64, with the statistics.
pub fn softmax(logits: &[f32], temperature: f32) -> Result<(ReferenceStats, Vec<f64>), KernelError> {
    let stats = softmax_stats(logits, temperature)?;
    let inverse_temperature = crate::inverse_temperature(temperature)?;
    let probabilities = logits
        .iter()
        .map(|&x| {
            if x == f32::NEG_INFINITY {
                0.0
            } else {
                f64::from(scaled_argument(x, stats.max, inverse_temperature)).exp() / stats.sum_exp
            }
        })
        .collect();
    Ok((stats, probabilities))
}

/// The sort key of `topk.wgsl`: a u32 ordered like the float, with `-0.0` mapped to `+0.0`.
pub fn order_key(value: f32) -> u32 {
    let bits = if value == 0.0 { 0 } else { value.to_bits() };
    if bits & 0x8000_0000 != 0 { !bits } else { bits | 0x8000_0000 }
}

/// The `min(k, len)` largest logits with their ids, descending, ties to the lower id; NaN is an
/// error. `k` must be in `1..=256`.
pub fn top_k(logits: &[f32], k: usize) -> Result<TopK, KernelError> {
    crate::validate_k(k)?;
    if logits.is_empty() {
        return Err(KernelError::invalid("logits", "the row is empty"));
    }
    if logits.iter().any(|x| x.is_nan()) {
        return Err(KernelError::NanLogits);
    }
    let mut order: Vec<u32> = (0..logits.len() as u32).collect();
    // Key descending, then id ascending: a total order, so the result is unique.
    order.sort_unstable_by_key(|&id| (std::cmp::Reverse(order_key(logits[id as usize])), id));
    order.truncate(k);
    let values = order
        .iter()
        .map(|&id| logits[id as usize] + 0.0) // -0.0 + 0.0 = +0.0
        .collect();
    Ok(TopK { ids: order, logits: values, bytes_read: 0 })
}

/// `score.wgsl` on one row (see [`crate::score`]): its log-sum-exp and entropy in f64, the logit
/// and rank of `target`, the top `k` (0..=20) as [`top_k`] orders them. The row holds no NaN (a
/// model's logits).
pub fn score_row(row: &[f32], target: Option<u32>, k: usize) -> RowScore {
    let max = f64::from(row.iter().copied().fold(f32::NEG_INFINITY, f32::max));
    let (mut sum, mut weighted) = (0.0f64, 0.0f64);
    for &x in row {
        let e = (f64::from(x) - max).exp();
        sum += e;
        if e > 0.0 {
            weighted += e * (f64::from(x) - max);
        }
    }
    let target = target.map(|id| {
        let logit = row[id as usize];
        let above = row.iter().enumerate().filter(|&(j, &x)| x > logit || (x == logit && (j as u32) < id)).count();
        TargetScore { id, logit, rank: above as u32 + 1 }
    });
    // One walk keeping the best k so far, sorted: a value enters only when it is above the k-th
    // (the walk's ids ascend, so an equal value never displaces an earlier one), as `top_k`
    // orders the whole row (a test checks they agree) without sorting it.
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
    for (id, &x) in row.iter().enumerate() {
        if top.len() < k || top.last().is_some_and(|&(_, last)| x > last) {
            let at = top.partition_point(|&(_, kept)| kept >= x);
            top.insert(at, (id as u32, x + 0.0)); // -0.0 is reported as +0.0, as `top_k` does
            top.truncate(k);
        }
    }
    RowScore { log_sum_exp: max + sum.ln(), entropy: sum.ln() - weighted / sum, target, top }
}

/// The decode tail on the CPU: adjust a copy of `logits`, check it, take the softmax statistics
/// and the top-k. Returns the adjusted row too.
pub fn decode_tail(
    logits: &[f32],
    adjustments: &LogitAdjustments,
    temperature: f32,
    k: usize,
) -> Result<(Vec<f32>, ReferenceStats, TopK), KernelError> {
    crate::validate_k(k)?;
    let mut adjusted = logits.to_vec();
    adjust_logits(&mut adjusted, adjustments)?;
    let stats = softmax_stats(&adjusted, temperature)?;
    let top = top_k(&adjusted, k)?;
    Ok((adjusted, stats, top))
}

/// `y = x Wᵀ` as `linear.wgsl` computes it: `x` is `rows × inputs`, `weight` is stored as
/// `layout` says, `y` is `rows × outputs`, each sum in f64 (the shader sums in f32, in order of
/// increasing input index).
pub fn linear(x: &[f32], weight: &[f32], rows: usize, inputs: usize, layout: WeightLayout) -> Vec<f32> {
    assert_eq!(x.len(), rows * inputs, "x is rows × inputs");
    assert_eq!(weight.len() % inputs, 0, "weight holds whole columns");
    let outputs = weight.len() / inputs;
    let w = |output: usize, input: usize| match layout {
        WeightLayout::OutputsByInputs => weight[output * inputs + input],
        WeightLayout::InputsByOutputs => weight[input * outputs + output],
    };
    let mut y = Vec::with_capacity(rows * outputs);
    for row in 0..rows {
        for output in 0..outputs {
            let sum: f64 = (0..inputs).map(|i| x[row * inputs + i] as f64 * w(output, i) as f64).sum();
            y.push(sum as f32);
        }
    }
    y
}

mod layer;
pub use layer::{
    DeltaSpec, QkvRows, QkvSpec, attention, attention_weights, attn_qkv, delta_conv, delta_rule, embed, ffn_gate_up,
    gather, lm_head, matvec, norm_residual, output_gate, rms_norm, rope_angles,
};
