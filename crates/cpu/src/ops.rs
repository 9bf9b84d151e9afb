//! The CPU engine's other operations: RMSNorm and attention over a KV cache held as f32 rows.
//! Small beside the products, but the attention grows with the context, so it is spread over
//! the threads too (one task per query row and head).

use crate::dot::strided_dots;
use crate::elementwise::exp;
use crate::threads::for_each_chunk;

/// `out = x / sqrt(mean(x²) + eps) ∘ γ`, row by row (`x`, `out`: `[rows, γ.len()]`); the mean in f64.
pub fn rms_norm(x: &[f32], gamma: &[f32], eps: f64, out: &mut [f32]) {
    let dim = gamma.len();
    for (row, normed) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
        let inv = inverse_rms(row, eps);
        for ((o, &v), &g) in normed.iter_mut().zip(row).zip(gamma) {
            *o = v * inv * g;
        }
    }
}

/// `1 / sqrt(mean(x²) + eps)`, the sum of squares in f64: in eight running sums (value `i` into
/// sum `i mod 8`, added pairwise at the end), which the compiler vectorises, where one sum was a
/// chain of dependent adds, four cycles each (a 640-wide row 2,560 cycles; the norms were 0.7–1 %
/// of a prefill on the calling thread).
pub fn inverse_rms(x: &[f32], eps: f64) -> f32 {
    let mut sums = [0f64; 8];
    let whole = x.chunks_exact(8);
    let rest = whole.remainder();
    for eight in whole {
        for (sum, &v) in sums.iter_mut().zip(eight) {
            *sum += f64::from(v) * f64::from(v);
        }
    }
    for (sum, &v) in sums.iter_mut().zip(rest) {
        *sum += f64::from(v) * f64::from(v);
    }
    let [a, b, c, d, e, f, g, h] = sums;
    let mean = (((a + e) + (c + g)) + ((b + f) + (d + h))) / x.len() as f64;
    (1.0 / (mean + eps).sqrt()) as f32
}

/// Multiply-adds of an attention below which it runs on the calling thread: about 20 µs of work,
/// the cost of handing tasks to the pool and waiting for them.
const PARALLEL_ATTENTION_WORK: usize = 1 << 16;

/// The shape of one attention.
#[derive(Debug, Clone, Copy)]
pub struct AttentionShape {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Scores are `q·k · scale`.
    pub scale: f32,
    /// A query sees its own position and the `window − 1` before it; `None`: every earlier one.
    pub window: Option<usize>,
}

/// Causal grouped-query attention: query row `s` (`q`: `[rows, heads·head_dim]`, at position
/// `pos + s`) of head `h` over the keys and values of kv head `h / (heads / kv_heads)` at positions
/// `0..=pos + s` (`keys`, `values`: `[positions, kv_heads·head_dim]`), within its window; `out`:
/// `[rows, heads·head_dim]`. Softmax with the maximum subtracted, f32.
pub fn attention(q: &[f32], keys: &[f32], values: &[f32], pos: usize, shape: AttentionShape, out: &mut [f32]) {
    let AttentionShape { heads, kv_heads, head_dim: hd, .. } = shape;
    let kv_width = kv_heads * hd;
    let group = heads / kv_heads;
    // One task per (row, head): its output is the head's slice of the row. Spread over the
    // threads only when there is enough of it to be worth the hand-over (a long context, a prompt).
    let rows = q.len() / (heads * hd);
    let work = rows * heads * (pos + rows) * hd;
    for_each_chunk(out, hd, work >= PARALLEL_ATTENTION_WORK, |task, out| {
        let (s, h) = (task / heads, task % heads);
        let kv_head = h / group;
        let (first, scores, total) = head_exponentials(&q[task * hd..(task + 1) * hd], keys, pos + s, kv_head, shape);
        let value = |t: usize| &values[t * kv_width + kv_head * hd..][..hd];
        out.fill(0.0);
        // Four values at a time: the output row is read and written once for the four (the
        // compiler vectorises the lanes; one key at a time it was a load and a store per value).
        let mut weights = scores.chunks_exact(4);
        for (t, w) in (first..).step_by(4).zip(&mut weights) {
            let (v0, v1, v2, v3) = (value(t), value(t + 1), value(t + 2), value(t + 3));
            for ((((o, a), b), c), d) in out.iter_mut().zip(v0).zip(v1).zip(v2).zip(v3) {
                *o += (w[0] * a + w[1] * b) + (w[2] * c + w[3] * d);
            }
        }
        let done = scores.len() / 4 * 4;
        for (t, &weight) in (first + done..).zip(weights.remainder()) {
            for (o, &v) in out.iter_mut().zip(value(t)) {
                *o += weight * v;
            }
        }
        for o in out.iter_mut() {
            *o /= total;
        }
    });
}

/// One query's `exp(score − max)` over the keys it sees (kv head `kv_head`'s keys `0..=position`,
/// from its window's first with one), and their sum: the first key, the exponentials, the total.
fn head_exponentials(
    query: &[f32],
    keys: &[f32],
    position: usize,
    kv_head: usize,
    shape: AttentionShape,
) -> (usize, Vec<f32>, f32) {
    let AttentionShape { kv_heads, head_dim: hd, scale, window, .. } = shape;
    let kv_width = kv_heads * hd;
    let seen = position + 1;
    let first = window.map_or(0, |w| seen.saturating_sub(w));
    let mut scores = vec![0.0; seen - first];
    strided_dots(query, &keys[first * kv_width + kv_head * hd..], kv_width, &mut scores);
    scores.iter_mut().for_each(|score| *score *= scale);
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    // The exponentials in one pass (vectorised), their sum in order in another.
    scores.iter_mut().for_each(|score| *score = exp(*score - max));
    let total = scores.iter().fold(0.0, |total, &score| total + score);
    (first, scores, total)
}

/// What [`attention`] weighs each key by, after the softmax, for the query rows `rows` of `q`
/// (row `s` at position `pos + s`): head `head`'s weights, or with `None` the mean over every
/// head. Each row holds `pos + s + 1` weights (keys `0..=pos + s`), zero before the window.
pub fn attention_weights(
    q: &[f32],
    keys: &[f32],
    pos: usize,
    shape: AttentionShape,
    rows: std::ops::Range<usize>,
    head: Option<usize>,
) -> Vec<Vec<f32>> {
    let AttentionShape { heads, kv_heads, head_dim: hd, .. } = shape;
    let chosen: Vec<usize> = head.map_or_else(|| (0..heads).collect(), |h| vec![h]);
    let share = 1.0 / chosen.len() as f32;
    rows.map(|s| {
        let mut row = vec![0.0; pos + s + 1];
        for &h in &chosen {
            let query = &q[(s * heads + h) * hd..][..hd];
            let (first, weights, total) = head_exponentials(query, keys, pos + s, h / (heads / kv_heads), shape);
            for (t, w) in (first..).zip(weights) {
                row[t] += w / total * share;
            }
        }
        row
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_scales_each_row() {
        let x = [3.0, 4.0, 0.0, 0.0, 1.0, 1.0];
        let mut out = [0.0; 6];
        rms_norm(&x, &[1.0, 2.0, 1.0], 0.0, &mut out);
        let inv = 1.0 / (25.0f64 / 3.0).sqrt();
        assert!((out[0] as f64 - 3.0 * inv).abs() < 1e-6 && (out[1] as f64 - 8.0 * inv).abs() < 1e-6);
        let inv = 1.0 / (2.0f64 / 3.0).sqrt();
        assert!((out[5] as f64 - inv).abs() < 1e-6);
    }

    /// The eight running sums against one, on widths that are not multiples of eight (the last
    /// few values in the sums too) and a row with a large value among small ones.
    #[test]
    fn inverse_rms_equals_the_f64_definition() {
        for width in [1, 7, 8, 13, 640, 1153] {
            for spike in [false, true] {
                let x: Vec<f32> = (0..width)
                    .map(|i| if spike && i == width / 2 { 300.0 } else { ((i * 37 % 101) as f32 - 50.0) / 17.0 })
                    .collect();
                let mean = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / width as f64;
                let want = 1.0 / (mean + 1e-6).sqrt();
                let got = f64::from(inverse_rms(&x, 1e-6));
                assert!((got - want).abs() <= 1e-7 * want, "width {width}, spike {spike}: {got} vs {want}");
            }
        }
    }
}
