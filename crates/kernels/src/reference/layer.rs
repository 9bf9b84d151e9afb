//! References of the layer kernels, in f64 from f32 inputs: the parity tests compare the GPU's
//! f32 sums against these within the rounding bound of an f32 sum.
//!
//! Matrices are row-major `[rows, cols]`, as GGUF stores them (`W[o, k]` at `o·cols + k`) and as
//! `nucleus-gguf` dequantizes them.

/// `embed.wgsl`: rows `ids` of the dequantized `table` (`[vocab, dim]`).
pub fn embed(table: &[f32], dim: usize, ids: &[u32]) -> Vec<f32> {
    ids.iter().flat_map(|&id| table[id as usize * dim..(id as usize + 1) * dim].iter().copied()).collect()
}

/// `x / sqrt(mean(x²) + eps) ∘ γ` of each row of `x` (`[rows, dim]`).
fn rms_norm(x: &[f32], gamma: &[f32], eps: f64) -> Vec<f64> {
    let dim = gamma.len();
    x.chunks_exact(dim)
        .flat_map(|row| {
            let mean = row.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / dim as f64;
            let inv = 1.0 / (mean + eps).sqrt();
            row.iter().zip(gamma).map(move |(&v, &g)| f64::from(v) * inv * f64::from(g)).collect::<Vec<_>>()
        })
        .collect()
}

/// `a·wᵀ` for `a: [rows, inputs]` (f64) and `w: [outputs, inputs]`; `[rows, outputs]`.
fn product(a: &[f64], w: &[f32], inputs: usize) -> Vec<f64> {
    a.chunks_exact(inputs)
        .flat_map(|row| {
            w.chunks_exact(inputs).map(move |w_row| row.iter().zip(w_row).map(|(&x, &w)| x * f64::from(w)).sum::<f64>())
        })
        .collect()
}

/// `matvec_residual.wgsl` without the residual: `a·wᵀ`, `[rows, outputs]`.
pub fn matvec(a: &[f32], w: &[f32], inputs: usize) -> Vec<f64> {
    let a: Vec<f64> = a.iter().map(|&v| f64::from(v)).collect();
    product(&a, w, inputs)
}

/// `(cos, sin)` of `position · base^(−2i/head_dim)` for `i < head_dim / 2`, in f64.
pub fn rope_angles(position: usize, head_dim: usize, base: f64) -> Vec<(f64, f64)> {
    (0..head_dim / 2)
        .map(|i| {
            let angle = position as f64 * base.powf(-2.0 * i as f64 / head_dim as f64);
            (angle.cos(), angle.sin())
        })
        .collect()
}

/// Queries, keys and values of [`attn_qkv`], each `[rows, heads·head_dim]` (keys and values for
/// the KV heads).
#[derive(Debug, Clone)]
pub struct QkvRows {
    /// Rotated queries, `[rows, heads·head_dim]`.
    pub q: Vec<f64>,
    /// Rotated keys, `[rows, kv_heads·head_dim]`.
    pub k: Vec<f64>,
    /// Values, `[rows, kv_heads·head_dim]`.
    pub v: Vec<f64>,
}

/// `attn_qkv.wgsl`: RMSNorm of `x` (`[rows, dim]`), the three projections, and RoPE on adjacent
/// pairs of queries and keys, row `s` at position `pos + s`.
#[allow(clippy::too_many_arguments)]
pub fn attn_qkv(
    x: &[f32],
    gamma: &[f32],
    eps: f64,
    wq: &[f32],
    wk: &[f32],
    wv: &[f32],
    head_dim: usize,
    pos: usize,
    rope_base: f64,
) -> QkvRows {
    let dim = gamma.len();
    let h = rms_norm(x, gamma, eps);
    let rotate = |values: Vec<f64>, width: usize| -> Vec<f64> {
        let mut out = values;
        for (s, row) in out.chunks_exact_mut(width).enumerate() {
            let angles = rope_angles(pos + s, head_dim, rope_base);
            for (i, pair) in row.chunks_exact_mut(2).enumerate() {
                let (cos, sin) = angles[i % (head_dim / 2)];
                let (a, b) = (pair[0], pair[1]);
                pair[0] = a * cos - b * sin;
                pair[1] = a * sin + b * cos;
            }
        }
        out
    };
    let q_dim = wq.len() / dim;
    let kv_dim = wk.len() / dim;
    QkvRows { q: rotate(product(&h, wq, dim), q_dim), k: rotate(product(&h, wk, dim), kv_dim), v: product(&h, wv, dim) }
}

/// `attention.wgsl` + `attention_combine.wgsl`: causal grouped-query attention of `q`
/// (`[rows, heads·head_dim]`, row `s` at position `pos + s`) over `keys` and `values`
/// (`[positions, kv_heads·head_dim]`, at least `pos + rows` positions); `[rows, heads·head_dim]`.
pub fn attention(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    pos: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
) -> Vec<f64> {
    let rows = q.len() / (heads * head_dim);
    let kv_width = kv_heads * head_dim;
    let scale = 1.0 / (head_dim as f64).sqrt();
    let mut out = vec![0.0; q.len()];
    for s in 0..rows {
        for h in 0..heads {
            let kv_head = h / (heads / kv_heads);
            let query = &q[(s * heads + h) * head_dim..][..head_dim];
            let seen = pos + s + 1;
            let scores: Vec<f64> = (0..seen)
                .map(|t| {
                    let key = &keys[t * kv_width + kv_head * head_dim..][..head_dim];
                    query.iter().zip(key).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum::<f64>() * scale
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|&x| (x - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            for d in 0..head_dim {
                let value: f64 = weights
                    .iter()
                    .enumerate()
                    .map(|(t, &w)| w * f64::from(values[t * kv_width + kv_head * head_dim + d]))
                    .sum();
                out[(s * heads + h) * head_dim + d] = value / total;
            }
        }
    }
    out
}

/// `ffn_gate_up.wgsl`: `silu(g)·u` of the gate and up projections of RMSNorm(x)·γ; `[rows, hidden]`.
pub fn ffn_gate_up(x: &[f32], gamma: &[f32], eps: f64, w_gate: &[f32], w_up: &[f32]) -> Vec<f64> {
    let dim = gamma.len();
    let h = rms_norm(x, gamma, eps);
    let gate = product(&h, w_gate, dim);
    let up = product(&h, w_up, dim);
    gate.iter().zip(&up).map(|(&g, &u)| g / (1.0 + (-g).exp()) * u).collect()
}

/// `lm_head.wgsl`: the logits of each row of `x` (`[rows, dim]`): RMSNorm(x)·γ·wᵀ.
pub fn lm_head(x: &[f32], gamma: &[f32], eps: f64, w: &[f32]) -> Vec<f64> {
    let dim = gamma.len();
    product(&rms_norm(x, gamma, eps), w, dim)
}
