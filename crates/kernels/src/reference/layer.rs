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

/// `x / sqrt(mean(x²) + eps) ∘ γ` of each row of `x` (`[rows, dim]`): `norm_residual.wgsl`
/// without the residual (`accumulate` 0).
pub fn rms_norm(x: &[f32], gamma: &[f32], eps: f64) -> Vec<f64> {
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

/// `(cos, sin)` of `position · base^(−2i/dims)` for `i < dims / 2` (`dims`: the rotated
/// dimensions of a head), in f64.
pub fn rope_angles(position: usize, dims: usize, base: f64) -> Vec<(f64, f64)> {
    (0..dims / 2)
        .map(|i| {
            let angle = position as f64 * base.powf(-2.0 * i as f64 / dims as f64);
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
    /// The output gate's values, `[rows, heads·head_dim]` (empty without a gate).
    pub gate: Vec<f64>,
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
    /// Dimensions RoPE rotates, the first of each head (halves of those: `(i, i + rope_dims/2)`);
    /// the rest pass through.
    pub rope_dims: usize,
    /// `wq` is `[2·q_dim, dim]`: each head's query rows, then its output gate's.
    pub gated: bool,
    /// RMSNorm epsilon (the input's and the per-head norms').
    pub eps: f64,
    /// Biases of `[q | k | v]`.
    pub bias: Option<&'a [f32]>,
    /// Per-head RMSNorm weights of queries and keys (`head_dim` each).
    pub qk_norm: Option<(&'a [f32], &'a [f32])>,
}

/// `attn_qkv.wgsl` and `attn_qkv_norm.wgsl`: RMSNorm of `x` (`[rows, dim]`), the three
/// projections plus their biases, each query and key head normalised (with `qk_norm`), and RoPE
/// on queries and keys, row `s` at position `pos + s`; with a gate, its rows of `wq` apart.
pub fn attn_qkv(x: &[f32], gamma: &[f32], wq: &[f32], wk: &[f32], wv: &[f32], spec: QkvSpec) -> QkvRows {
    let dim = gamma.len();
    let hd = spec.head_dim;
    let h = rms_norm(x, gamma, spec.eps);
    let (wq, wgate): (Vec<f32>, Vec<f32>) = if spec.gated {
        let heads = wq.chunks_exact(2 * hd * dim);
        (
            heads.clone().flat_map(|h| &h[..hd * dim]).copied().collect(),
            heads.flat_map(|h| &h[hd * dim..]).copied().collect(),
        )
    } else {
        (wq.to_vec(), Vec::new())
    };
    let wq = wq.as_slice();
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
            let angles = rope_angles(spec.pos + s, spec.rope_dims, spec.rope_base);
            for head in row.chunks_exact_mut(hd) {
                if let Some(gamma) = norm {
                    let mean = head.iter().map(|v| v * v).sum::<f64>() / hd as f64;
                    let inv = 1.0 / (mean + spec.eps).sqrt();
                    head.iter_mut().zip(gamma).for_each(|(v, &g)| *v *= inv * f64::from(g));
                }
                for (i, &(cos, sin)) in angles.iter().enumerate() {
                    let (ia, ib) = if spec.rope_halves { (i, i + spec.rope_dims / 2) } else { (2 * i, 2 * i + 1) };
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
        gate: product(&h, &wgate, dim),
    }
}

/// `attention_combine.wgsl`'s output gate: `out · sigmoid(gate)`.
pub fn output_gate(out: &[f64], gate: &[f64]) -> Vec<f64> {
    out.iter().zip(gate).map(|(&o, &g)| o / (1.0 + (-g).exp())).collect()
}

/// `delta_conv.wgsl`: the causal convolution and SiLU of `mixed` (`[rows, channels]`) after the
/// inputs in `state` (`[kernel − 1, channels]`, oldest first); `weights`: `[channels, kernel]`.
/// The outputs, and the state after (the last `kernel − 1` inputs).
pub fn delta_conv(mixed: &[f32], weights: &[f32], kernel: usize, state: &[f32]) -> (Vec<f64>, Vec<f32>) {
    let channels = weights.len() / kernel;
    let history = kernel - 1;
    let inputs: Vec<f32> = state.iter().chain(mixed).copied().collect();
    let rows = mixed.len() / channels;
    let out = (0..rows * channels)
        .map(|at| {
            let (t, c) = (at / channels, at % channels);
            let sum: f64 = (0..kernel)
                .map(|j| f64::from(weights[c * kernel + j]) * f64::from(inputs[(t + j) * channels + c]))
                .sum();
            sum / (1.0 + (-sum).exp())
        })
        .collect();
    (out, inputs[rows * channels..][..history * channels].to_vec())
}

/// The shape of [`delta_rule`]'s heads and its epsilon.
#[derive(Debug, Clone, Copy)]
pub struct DeltaSpec {
    /// Query and key heads.
    pub key_heads: usize,
    /// Value heads (a multiple of `key_heads`).
    pub value_heads: usize,
    /// Values per head.
    pub head_dim: usize,
    /// Epsilon of the L2 norms and the gated RMSNorm.
    pub eps: f64,
}

/// `delta_rule.wgsl`, in f64: per row and value head `h` (key head `h mod key_heads`) the L2
/// norms of q and k (q times 1/√head_dim), `β = sigmoid(beta)`, the decay
/// `exp(a·softplus(alpha + dt_bias))`, the delta rule `S ← d·S; S ← S + k(β(v − Sᵀk))ᵀ; o = Sᵀq`
/// over `state` (`[value_heads, head_dim, head_dim]`, `S[i][c]`, updated), and the gated RMSNorm
/// `o / rms(o) ∘ γ ∘ silu(z)`. `mixed`: `[rows, q | k | v]`; `vectors`: `dt_bias | a | γ`.
pub fn delta_rule(
    mixed: &[f32],
    z: &[f32],
    beta: &[f32],
    alpha: &[f32],
    vectors: &[f32],
    spec: DeltaSpec,
    state: &mut [f64],
) -> Vec<f64> {
    let DeltaSpec { key_heads, value_heads, head_dim: hd, eps } = spec;
    let (key_width, value_width) = (key_heads * hd, value_heads * hd);
    let channels = 2 * key_width + value_width;
    let rows = mixed.len() / channels;
    let f = |x: f32| f64::from(x);
    let mut out = vec![0.0; rows * value_width];
    for t in 0..rows {
        let row = &mixed[t * channels..(t + 1) * channels];
        for h in 0..value_heads {
            let i = h % key_heads;
            let normalised = |x: &[f32], scale: f64| -> Vec<f64> {
                let inv = 1.0 / (x.iter().map(|&v| f(v) * f(v)).sum::<f64>() + eps).sqrt();
                x.iter().map(|&v| f(v) * inv * scale).collect()
            };
            let q = normalised(&row[i * hd..][..hd], 1.0 / (hd as f64).sqrt());
            let k = normalised(&row[key_width + i * hd..][..hd], 1.0);
            let v = &row[2 * key_width + h * hd..][..hd];
            let gates = t * value_heads + h;
            let x = f(alpha[gates]) + f(vectors[h]);
            let softplus = if x > 20.0 { x } else { x.exp().ln_1p() };
            let decay = (f(vectors[value_heads + h]) * softplus).exp();
            let b = 1.0 / (1.0 + (-f(beta[gates])).exp());
            let s = &mut state[h * hd * hd..(h + 1) * hd * hd];
            s.iter_mut().for_each(|x| *x *= decay);
            let o = &mut out[t * value_width + h * hd..][..hd];
            for c in 0..hd {
                let recalled: f64 = (0..hd).map(|i| s[i * hd + c] * k[i]).sum();
                let delta = b * (f(v[c]) - recalled);
                (0..hd).for_each(|i| s[i * hd + c] += k[i] * delta);
                o[c] = (0..hd).map(|i| s[i * hd + c] * q[i]).sum();
            }
            let inv = 1.0 / (o.iter().map(|v| v * v).sum::<f64>() / hd as f64 + eps).sqrt();
            for (c, o) in o.iter_mut().enumerate() {
                let gate = f(z[t * value_width + h * hd + c]);
                *o *= inv * f(vectors[2 * value_heads + c]) * gate / (1.0 + (-gate).exp());
            }
        }
    }
    out
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
    let mut out = vec![0.0; q.len()];
    for s in 0..rows {
        for h in 0..heads {
            let kv_head = h / (heads / kv_heads);
            let (first, weights) = head_weights(q, keys, pos + s, s * heads + h, kv_head, kv_heads, head_dim, window);
            for d in 0..head_dim {
                let value: f64 = weights
                    .iter()
                    .zip(first..)
                    .map(|(&w, t)| w * f64::from(values[t * kv_width + kv_head * head_dim + d]))
                    .sum();
                out[(s * heads + h) * head_dim + d] = value;
            }
        }
    }
    out
}

/// The softmax of one query's scores over the keys it sees: the query at `q`'s head slot `slot`
/// (position `position`) against kv head `kv_head`'s keys `0..=position` (from its window's
/// first with a `window`), scale `1/√head_dim`. Returns the first key seen and the weights.
#[allow(clippy::too_many_arguments)]
fn head_weights(
    q: &[f32],
    keys: &[f32],
    position: usize,
    slot: usize,
    kv_head: usize,
    kv_heads: usize,
    head_dim: usize,
    window: Option<usize>,
) -> (usize, Vec<f64>) {
    let scale = 1.0 / (head_dim as f64).sqrt();
    let query = &q[slot * head_dim..][..head_dim];
    let seen = position + 1;
    let first = window.map_or(0, |w| seen.saturating_sub(w));
    let scores: Vec<f64> = (first..seen)
        .map(|t| {
            let key = &keys[(t * kv_heads + kv_head) * head_dim..][..head_dim];
            query.iter().zip(key).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum::<f64>() * scale
        })
        .collect();
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = scores.iter().map(|&x| (x - max).exp()).collect();
    let total: f64 = weights.iter().sum();
    (first, weights.into_iter().map(|w| w / total).collect())
}

/// `attention_weights.wgsl`: what [`attention`] weighs each key by, after the softmax, for the
/// query rows `rows` of `q` (row `s` at position `pos + s`): head `head`'s weights, or with
/// `None` the mean over every head. Each row holds `pos + s + 1` weights (keys `0..=pos + s`),
/// zero before the window's first key.
#[allow(clippy::too_many_arguments)]
pub fn attention_weights(
    q: &[f32],
    keys: &[f32],
    pos: usize,
    rows: std::ops::Range<usize>,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    window: Option<usize>,
    head: Option<usize>,
) -> Vec<Vec<f64>> {
    let chosen: Vec<usize> = head.map_or_else(|| (0..heads).collect(), |h| vec![h]);
    rows.map(|s| {
        let mut row = vec![0.0; pos + s + 1];
        for &h in &chosen {
            let kv_head = h / (heads / kv_heads);
            let (first, weights) = head_weights(q, keys, pos + s, s * heads + h, kv_head, kv_heads, head_dim, window);
            for (t, w) in (first..).zip(weights) {
                row[t] += w / chosen.len() as f64;
            }
        }
        row
    })
    .collect()
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
