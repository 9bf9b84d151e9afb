//! References of the layer kernels, in f64 from f32 inputs: the parity tests compare the GPU's
//! f32 sums against these within the rounding bound of an f32 sum.
//!
//! Matrices are row-major `[rows, cols]`, as GGUF stores them (`W[o, k]` at `o·cols + k`) and as
//! `nucleus-gguf` dequantizes them.

/// `embed.wgsl`: rows `ids` of the dequantized `table` (`[vocab, dim]`), times `scale` (in f32).
pub fn embed(table: &[f32], dim: usize, ids: &[u32], scale: f32) -> Vec<f32> {
    ids.iter()
        .flat_map(|&id| table[id as usize * dim..(id as usize + 1) * dim].iter().map(move |&v| v * scale))
        .collect()
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

/// What [`attn_qkv`] computes besides the projections.
#[derive(Debug, Clone, Copy)]
pub struct QkvSpec<'a> {
    /// Values per head.
    pub head_dim: usize,
    /// Position of the first row.
    pub pos: usize,
    /// RoPE base.
    pub rope_base: f64,
    /// RoPE on the halves of each head (else on adjacent pairs).
    pub rope_halves: bool,
    /// RMSNorm epsilon (the input's and the per-head norms').
    pub eps: f64,
    /// Biases of `[q | k | v]`.
    pub bias: Option<&'a [f32]>,
    /// Per-head RMSNorm weights of queries and keys (`head_dim` each).
    pub qk_norm: Option<(&'a [f32], &'a [f32])>,
}

/// `attn_qkv.wgsl` and `attn_qkv_norm.wgsl`: RMSNorm of `x` (`[rows, dim]`), the three
/// projections plus their biases, each query and key head normalised (with `qk_norm`), and RoPE
/// on queries and keys, row `s` at position `pos + s`.
pub fn attn_qkv(x: &[f32], gamma: &[f32], wq: &[f32], wk: &[f32], wv: &[f32], spec: QkvSpec) -> QkvRows {
    let dim = gamma.len();
    let hd = spec.head_dim;
    let h = rms_norm(x, gamma, spec.eps);
    let (q_dim, kv_dim) = (wq.len() / dim, wk.len() / dim);
    let bias = |offset: usize, width: usize| -> Vec<f64> {
        spec.bias.map_or(vec![0.0; width], |b| b[offset..offset + width].iter().map(|&v| f64::from(v)).collect())
    };
    let project = |w: &[f32], bias: Vec<f64>| -> Vec<f64> {
        let width = bias.len();
        let mut out = product(&h, w, dim);
        for row in out.chunks_exact_mut(width) {
            row.iter_mut().zip(&bias).for_each(|(v, b)| *v += b);
        }
        out
    };
    let finish = |values: Vec<f64>, norm: Option<&[f32]>| -> Vec<f64> {
        let mut out = values;
        let width = out.len() / (x.len() / dim);
        for (s, row) in out.chunks_exact_mut(width).enumerate() {
            let angles = rope_angles(spec.pos + s, hd, spec.rope_base);
            for head in row.chunks_exact_mut(hd) {
                if let Some(gamma) = norm {
                    let mean = head.iter().map(|v| v * v).sum::<f64>() / hd as f64;
                    let inv = 1.0 / (mean + spec.eps).sqrt();
                    head.iter_mut().zip(gamma).for_each(|(v, &g)| *v *= inv * f64::from(g));
                }
                for (i, &(cos, sin)) in angles.iter().enumerate() {
                    let (ia, ib) = if spec.rope_halves { (i, i + hd / 2) } else { (2 * i, 2 * i + 1) };
                    let (a, b) = (head[ia], head[ib]);
                    head[ia] = a * cos - b * sin;
                    head[ib] = a * sin + b * cos;
                }
            }
        }
        out
    };
    QkvRows {
        q: finish(project(wq, bias(0, q_dim)), spec.qk_norm.map(|(q, _)| q)),
        k: finish(project(wk, bias(q_dim, kv_dim)), spec.qk_norm.map(|(_, k)| k)),
        v: project(wv, bias(q_dim + kv_dim, kv_dim)),
    }
}

/// `attention.wgsl` + `attention_combine.wgsl`: causal grouped-query attention of `q`
/// (`[rows, heads·head_dim]`, row `s` at position `pos + s`) over `keys` and `values`
/// (`[positions, kv_heads·head_dim]`, at least `pos + rows` positions); with a `window`, a query
/// sees only its own position and the `window − 1` before it. `[rows, heads·head_dim]`.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    pos: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    window: Option<usize>,
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
            let first = window.map_or(0, |w| seen.saturating_sub(w));
            let scores: Vec<f64> = (first..seen)
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
                    .zip(first..)
                    .map(|(&w, t)| w * f64::from(values[t * kv_width + kv_head * head_dim + d]))
                    .sum();
                out[(s * heads + h) * head_dim + d] = value / total;
            }
        }
    }
    out
}

/// `ffn_gate_up.wgsl`: `act(g)·u` of the gate and up projections of RMSNorm(x)·γ, `act` SiLU or
/// (`gelu`) GELU's tanh form; `[rows, hidden]`.
pub fn ffn_gate_up(x: &[f32], gamma: &[f32], eps: f64, w_gate: &[f32], w_up: &[f32], gelu: bool) -> Vec<f64> {
    let dim = gamma.len();
    let h = rms_norm(x, gamma, eps);
    let gate = product(&h, w_gate, dim);
    let up = product(&h, w_up, dim);
    let act = |g: f64| {
        if gelu {
            0.5 * g * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (g + 0.044715 * g * g * g)).tanh())
        } else {
            g / (1.0 + (-g).exp())
        }
    };
    gate.iter().zip(&up).map(|(&g, &u)| act(g) * u).collect()
}

/// `norm_residual.wgsl`: `x + RMSNorm(y)·γ` row by row (`[rows, dim]` each).
pub fn norm_residual(x: &[f32], y: &[f32], gamma: &[f32], eps: f64) -> Vec<f64> {
    x.iter().zip(rms_norm(y, gamma, eps)).map(|(&x, n)| f64::from(x) + n).collect()
}

/// `lm_head.wgsl`: the logits of each row of `x` (`[rows, dim]`): RMSNorm(x)·γ·wᵀ.
pub fn lm_head(x: &[f32], gamma: &[f32], eps: f64, w: &[f32]) -> Vec<f64> {
    let dim = gamma.len();
    product(&rms_norm(x, gamma, eps), w, dim)
}

/// `gather.wgsl`: `row[ids[i]]` for each id.
pub fn gather(row: &[f32], ids: &[u32]) -> Vec<f32> {
    ids.iter().map(|&id| row[id as usize]).collect()
}
