//! The plain reference of the kernels: the matrix dequantized whole (`nucleus_gguf::dequantize`),
//! the products summed in f64; attention one key at a time in f64. The parity tests compare
//! [`crate::matmul`] and [`crate::ops::attention`] with it.

use crate::Matrix;
use crate::ops::AttentionShape;

/// `x · Wᵀ` in f64 for `x`: `[n, w.cols]`; `[n, w.rows]`.
pub fn matmul(w: &Matrix, x: &[f32]) -> Vec<f64> {
    let values = nucleus_gguf::dequantize(w.ggml_type, w.bytes, w.rows * w.cols).expect("a readable type");
    x.chunks_exact(w.cols)
        .flat_map(|row| {
            values
                .chunks_exact(w.cols)
                .map(|weights| row.iter().zip(weights).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum::<f64>())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// [`crate::ops::attention`]'s output in f64: each query row and head's scores one key at a time,
/// the softmax with the maximum subtracted, the weighted values summed in order.
pub fn attention(q: &[f32], keys: &[f32], values: &[f32], pos: usize, shape: AttentionShape) -> Vec<f64> {
    let AttentionShape { heads, kv_heads, head_dim: hd, scale, window } = shape;
    let at = |rows: &[f32], t: usize, kv_head: usize, d: usize| f64::from(rows[(t * kv_heads + kv_head) * hd + d]);
    let rows = q.len() / (heads * hd);
    let mut out = Vec::with_capacity(q.len());
    for s in 0..rows {
        for h in 0..heads {
            let kv_head = h / (heads / kv_heads);
            let seen = pos + s + 1;
            let first = window.map_or(0, |w| seen.saturating_sub(w));
            let query = |d: usize| f64::from(q[(s * heads + h) * hd + d]);
            let scores: Vec<f64> = (first..seen)
                .map(|t| (0..hd).map(|d| query(d) * at(keys, t, kv_head, d)).sum::<f64>() * f64::from(scale))
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            out.extend(
                (0..hd).map(|d| {
                    (first..seen).zip(&weights).map(|(t, w)| w * at(values, t, kv_head, d)).sum::<f64>() / total
                }),
            );
        }
    }
    out
}
