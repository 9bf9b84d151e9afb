//! The Gated DeltaNet's own operations (Qwen3.5's recurrent blocks), between its projections:
//! the short causal convolution over a state of the last inputs, the L2 norm of queries and
//! keys, the gated delta rule over a `head_dim × head_dim` state per value head, and the gated
//! RMSNorm of its output. The formulas are `ARCHITECTURE.md`'s ("Qwen3.5: a state that is not
//! rows").
//!
//! The delta rule has two forms that compute the same thing:
//! - [`delta_rule_recurrent`]: a token at a time, `S ← exp(g)·S; δ = β(v − Sᵀk); S ← S + kδᵀ;
//!   o = Sᵀq` (a decode step);
//! - [`delta_rule_chunked`]: a prompt in chunks of [`CHUNK`] tokens, each one triangular solve
//!   and a few products over the whole chunk (the WY form of transformers'
//!   `torch_chunk_gated_delta_rule`), so a prefill does not walk its tokens one at a time through
//!   the state: the state is read and written once per chunk, not once per token.
//!
//! Both run the value heads in parallel on the engine's threads. f32 throughout, with the
//! state in f32 (a lower-precision state visibly corrupts the output, as the peers found).

use crate::elementwise::{exp, silu};
use crate::threads::for_each_task;

/// Tokens per chunk of [`delta_rule_chunked`] (transformers' and llama.cpp's choice).
pub const CHUNK: usize = 64;

/// The shape of a Gated DeltaNet's heads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaShape {
    /// Query and key heads.
    pub key_heads: usize,
    /// Value heads, a multiple of `key_heads`: value head `j` reads key head `j mod key_heads`
    /// (the order llama.cpp's converter writes).
    pub value_heads: usize,
    /// Values per head (keys and values alike).
    pub head_dim: usize,
}

impl DeltaShape {
    /// f32 values of the state: a `head_dim × head_dim` matrix per value head, `S[i][c]` at
    /// `(j · head_dim + i) · head_dim + c` for key dimension `i` and value dimension `c`.
    pub fn state_len(&self) -> usize {
        self.value_heads * self.head_dim * self.head_dim
    }
}

/// The causal depthwise convolution and SiLU over `seq` rows of `channels` inputs `u`, after
/// the `kernel − 1` earlier rows held in `state` (`[(kernel − 1), channels]`, oldest first,
/// zeros at a sequence's start): `out[t][ch] = silu(Σ_j taps[j][ch] · u[t − kernel + 1 + j][ch])`,
/// `taps`: `[kernel, channels]` (the file's `[channels, kernel]` turned at load, so that a row of
/// outputs is `kernel` rows of inputs times rows of taps, which the compiler vectorises over the
/// channels). `state` becomes the last `kernel − 1` rows of inputs.
pub fn conv_silu(u: &[f32], taps: &[f32], kernel: usize, state: &mut [f32], out: &mut [f32]) {
    let channels = taps.len() / kernel;
    let history = kernel - 1;
    debug_assert_eq!(state.len(), history * channels);
    let seq = u.len() / channels;
    // The earlier inputs, then these: row r of `window` is input t = r − history.
    let mut window = Vec::with_capacity((history + seq) * channels);
    window.extend_from_slice(state);
    window.extend_from_slice(u);
    for (t, row) in out.chunks_exact_mut(channels).enumerate().take(seq) {
        row.fill(0.0);
        for (j, taps) in taps.chunks_exact(channels).enumerate() {
            let inputs = &window[(t + j) * channels..][..channels];
            row.iter_mut().zip(taps).zip(inputs).for_each(|((o, &w), &x)| *o += w * x);
        }
        row.iter_mut().for_each(|o| *o = silu(*o));
    }
    state.copy_from_slice(&window[seq * channels..]);
}

/// A convolution's weights as the file holds them, `[channels, kernel]`, turned into the taps
/// [`conv_silu`] reads, `[kernel, channels]`.
pub fn conv_taps(weights: &[f32], kernel: usize) -> Vec<f32> {
    let channels = weights.len() / kernel;
    (0..kernel).flat_map(|j| (0..channels).map(move |ch| weights[ch * kernel + j])).collect()
}

/// `x / sqrt(Σ x² + eps)` over each run of `width` values.
pub fn l2_normalize(x: &mut [f32], width: usize, eps: f64) {
    for head in x.chunks_exact_mut(width) {
        let sum: f64 = head.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        let inv = (1.0 / (sum + eps).sqrt()) as f32;
        head.iter_mut().for_each(|v| *v *= inv);
    }
}

/// One token's or a chunk's inputs to the delta rule, rows of `seq` positions: `q`, `k`:
/// `[seq, key_heads · head_dim]` (L2-normalised, `q` scaled by `1/√head_dim`), `v`:
/// `[seq, value_heads · head_dim]`, `g` (the log of each step's decay, ≤ 0) and `beta`:
/// `[seq, value_heads]`.
#[derive(Debug, Clone, Copy)]
pub struct DeltaInputs<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub g: &'a [f32],
    pub beta: &'a [f32],
}

/// Per value head, its state and its output rows `[seq, head_dim]`, for the threads.
fn per_head<'a>(
    shape: DeltaShape,
    state: &'a mut [f32],
    head_out: &'a mut [f32],
) -> Vec<(usize, &'a mut [f32], &'a mut [f32])> {
    let matrix = shape.head_dim * shape.head_dim;
    let rows = head_out.len() / shape.value_heads;
    state
        .chunks_exact_mut(matrix)
        .zip(head_out.chunks_exact_mut(rows))
        .enumerate()
        .map(|(j, (s, o))| (j, s, o))
        .collect()
}

/// Head-major `[value_heads, seq, head_dim]` back to position-major `out`: `[seq, value_heads · head_dim]`.
fn interleave(head_out: &[f32], shape: DeltaShape, out: &mut [f32]) {
    let (hd, heads) = (shape.head_dim, shape.value_heads);
    let seq = out.len() / (heads * hd);
    for j in 0..heads {
        for t in 0..seq {
            out[(t * heads + j) * hd..][..hd].copy_from_slice(&head_out[(j * seq + t) * hd..][..hd]);
        }
    }
}

/// The gated delta rule a token at a time, from `state` on (updated); `out`:
/// `[seq, value_heads · head_dim]`.
pub fn delta_rule_recurrent(inputs: DeltaInputs, shape: DeltaShape, state: &mut [f32], out: &mut [f32]) {
    let DeltaShape { key_heads, value_heads, head_dim: hd } = shape;
    let seq = inputs.g.len() / value_heads;
    let mut head_out = vec![0.0; out.len()];
    for_each_task(per_head(shape, state, &mut head_out), |(j, s, o)| {
        let i = j % key_heads;
        let mut memory = vec![0.0f32; hd];
        for t in 0..seq {
            let q = &inputs.q[(t * key_heads + i) * hd..][..hd];
            let k = &inputs.k[(t * key_heads + i) * hd..][..hd];
            let v = &inputs.v[(t * value_heads + j) * hd..][..hd];
            let (decay, beta) = (exp(inputs.g[t * value_heads + j]), inputs.beta[t * value_heads + j]);
            s.iter_mut().for_each(|x| *x *= decay);
            // Sᵀk: what the state recalls for this key.
            memory.fill(0.0);
            for (row, &ki) in s.chunks_exact(hd).zip(k) {
                memory.iter_mut().zip(row).for_each(|(m, &x)| *m += x * ki);
            }
            // δ = β(v − Sᵀk), written as the outer product kδᵀ.
            let delta: Vec<f32> = v.iter().zip(&memory).map(|(&v, &m)| beta * (v - m)).collect();
            for (row, &ki) in s.chunks_exact_mut(hd).zip(k) {
                row.iter_mut().zip(&delta).for_each(|(x, &d)| *x += ki * d);
            }
            let o = &mut o[t * hd..(t + 1) * hd];
            o.fill(0.0);
            for (row, &qi) in s.chunks_exact(hd).zip(q) {
                o.iter_mut().zip(row).for_each(|(o, &x)| *o += x * qi);
            }
        }
    });
    interleave(&head_out, shape, out);
}

/// The gated delta rule in chunks of [`CHUNK`] tokens, from `state` on (updated), equal to
/// [`delta_rule_recurrent`] up to rounding. Within a chunk with cumulative log-decays
/// `G_t = Σ_{s≤t} g_s`, state `S₀` before it and `A[t][s] = β_t·e^{G_t−G_s}·(k_t·k_s)` (s < t):
///
/// - `δ_t = β_t·(v_t − e^{G_t}·S₀ᵀk_t) − Σ_{s<t} A[t][s]·δ_s` (a triangular solve, forward);
/// - `o_t = e^{G_t}·S₀ᵀq_t + Σ_{s≤t} e^{G_t−G_s}·(q_t·k_s)·δ_s`;
/// - `S ← e^{G_L}·S₀ + Σ_s e^{G_L−G_s}·k_s·δ_sᵀ`.
pub fn delta_rule_chunked(inputs: DeltaInputs, shape: DeltaShape, state: &mut [f32], out: &mut [f32]) {
    let mut head_out = vec![0.0; out.len()];
    for_each_task(per_head(shape, state, &mut head_out), |(j, s, o)| {
        #[cfg(target_arch = "x86_64")]
        if crate::matmul::has_avx2() {
            // SAFETY: the CPU has AVX2 and FMA (checked).
            unsafe { chunked_head_avx2(&inputs, shape, j, s, o) };
            return;
        }
        chunked_head(&inputs, shape, j, s, o);
    });
    interleave(&head_out, shape, out);
}

/// [`chunked_head`] compiled for AVX2 with FMA: the head's loops are plain Rust, which the
/// baseline build runs four lanes wide without FMA (natively they were 12 % of a 512-token
/// prefill of Qwen3.5-0.8B's shape).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn chunked_head_avx2(inputs: &DeltaInputs, shape: DeltaShape, j: usize, s: &mut [f32], o: &mut [f32]) {
    chunked_head(inputs, shape, j, s, o);
}

/// Value head `j` of [`delta_rule_chunked`]: its state `s` (updated) and its output rows `o`.
#[inline(always)]
fn chunked_head(inputs: &DeltaInputs, shape: DeltaShape, j: usize, s: &mut [f32], o: &mut [f32]) {
    let DeltaShape { key_heads, value_heads, head_dim: hd } = shape;
    let seq = inputs.g.len() / value_heads;
    let i = j % key_heads;
    let key = |t: usize| &inputs.k[(t * key_heads + i) * hd..][..hd];
    let query = |t: usize| &inputs.q[(t * key_heads + i) * hd..][..hd];
    // `x` against the keys of tokens `begin..begin + out.len()` (rows `key_heads · hd` apart), four
    // at a time in the products' lanes (`dot::strided_dots`).
    let dots_with_keys = |x: &[f32], begin: usize, out: &mut [f32]| {
        crate::dot::strided_dots(x, hd, &inputs.k[(begin * key_heads + i) * hd..], key_heads * hd, out);
    };
    let mut dots = [0f32; CHUNK];
    // `e^(G_t − G_u)` for the earlier tokens `u` of the chunk, a row at a time (vectorised).
    let mut decays = [0f32; CHUNK];
    let decays_to = |t: usize, cumulative: &[f32], decays: &mut [f32]| {
        decays.iter_mut().zip(cumulative).for_each(|(d, &c)| *d = exp(cumulative[t] - c));
    };
    // S₀ᵀx for each of the chunk's key-sized xs: as many rows of value dimensions. A row of
    // S₀ serves every token before the next is read: S₀ (64 KiB at a head dimension of 128)
    // leaves L1, and a token at a time read it from L2 per token.
    let recall_all = |s: &[f32], xs: &[&[f32]], into: &mut [f32]| {
        into[..xs.len() * hd].fill(0.0);
        for (i, row) in s.chunks_exact(hd).enumerate() {
            for (x, into) in xs.iter().zip(into.chunks_exact_mut(hd)) {
                let xi = x[i];
                into.iter_mut().zip(row).for_each(|(o, &v)| *o += v * xi);
            }
        }
    };
    let mut delta = vec![0.0f32; CHUNK * hd];
    // S₀ᵀk for the chunk's keys, then S₀ᵀq for its queries: one pass over S₀ for both (the
    // state changes only after the chunk's outputs).
    let mut recalled = vec![0.0f32; 2 * CHUNK * hd];
    for begin in (0..seq).step_by(CHUNK) {
        let len = CHUNK.min(seq - begin);
        let mut cumulative = Vec::with_capacity(len);
        let mut total = 0.0f32;
        for t in begin..begin + len {
            total += inputs.g[t * value_heads + j];
            cumulative.push(total);
        }
        // The triangular solve for the chunk's δ, row by row.
        let keys: Vec<&[f32]> = (begin..begin + len).map(key).collect();
        let keys_and_queries: Vec<&[f32]> = keys.iter().copied().chain((begin..begin + len).map(query)).collect();
        recall_all(s, &keys_and_queries, &mut recalled);
        let (recalled_keys, recalled_queries) = recalled.split_at(len * hd);
        for t in 0..len {
            let beta = inputs.beta[(begin + t) * value_heads + j];
            let decay = exp(cumulative[t]);
            let v = &inputs.v[((begin + t) * value_heads + j) * hd..][..hd];
            let (done, rest) = delta.split_at_mut(t * hd);
            let row = &mut rest[..hd];
            for ((d, &v), &m) in row.iter_mut().zip(v).zip(&recalled_keys[t * hd..][..hd]) {
                *d = beta * (v - decay * m);
            }
            dots_with_keys(key(begin + t), begin, &mut dots[..t]);
            decays_to(t, &cumulative, &mut decays[..t]);
            for u in 0..t {
                let a = beta * decays[u] * dots[u];
                row.iter_mut().zip(&done[u * hd..(u + 1) * hd]).for_each(|(d, &x)| *d -= a * x);
            }
        }
        // The outputs, from the state before the chunk and the chunk's own writes.
        for t in 0..len {
            let q = query(begin + t);
            let decay = exp(cumulative[t]);
            let row = &mut o[(begin + t) * hd..][..hd];
            row.iter_mut().zip(&recalled_queries[t * hd..][..hd]).for_each(|(o, &m)| *o = decay * m);
            dots_with_keys(q, begin, &mut dots[..=t]);
            decays_to(t, &cumulative, &mut decays[..=t]);
            for u in 0..=t {
                let weight = decays[u] * dots[u];
                row.iter_mut().zip(&delta[u * hd..(u + 1) * hd]).for_each(|(o, &d)| *o += weight * d);
            }
        }
        // The state after the chunk.
        let last = cumulative[len - 1];
        let decay = exp(last);
        s.iter_mut().for_each(|x| *x *= decay);
        // A row of S at a time, every token's write into it before the next row (as above).
        let weights: Vec<f32> = cumulative.iter().map(|&c| exp(last - c)).collect();
        for (i, row) in s.chunks_exact_mut(hd).enumerate() {
            for (u, d) in delta.chunks_exact(hd).take(len).enumerate() {
                let scale = weights[u] * keys[u][i];
                row.iter_mut().zip(d).for_each(|(x, &d)| *x += scale * d);
            }
        }
    }
}

/// The gated RMSNorm of the delta rule's output, per head of `width` values:
/// `x / sqrt(mean(x²) + eps) · γ · silu(z)`.
pub fn gated_rms_norm(x: &mut [f32], z: &[f32], gamma: &[f32], eps: f64) {
    let width = gamma.len();
    for (head, gate) in x.chunks_exact_mut(width).zip(z.chunks_exact(width)) {
        let inv = crate::ops::inverse_rms(head, eps);
        for ((v, &g), &z) in head.iter_mut().zip(gamma).zip(gate) {
            *v = *v * inv * g * silu(z);
        }
    }
}

/// `ln(1 + eˣ)`, without overflow for large `x` (as PyTorch's, linear above 20).
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [-1, 1).
    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.5) - 1.0).collect()
    }

    /// A sequence's inputs to the delta rule, owned.
    struct Sequence {
        q: Vec<f32>,
        k: Vec<f32>,
        v: Vec<f32>,
        g: Vec<f32>,
        beta: Vec<f32>,
    }

    impl Sequence {
        fn new(seq: usize, shape: DeltaShape) -> Self {
            let DeltaShape { key_heads, value_heads, head_dim } = shape;
            let mut q = values(seq * key_heads * head_dim, 1);
            let mut k = values(seq * key_heads * head_dim, 2);
            l2_normalize(&mut q, head_dim, 1e-6);
            l2_normalize(&mut k, head_dim, 1e-6);
            let scale = 1.0 / (head_dim as f32).sqrt();
            q.iter_mut().for_each(|x| *x *= scale);
            let v = values(seq * value_heads * head_dim, 3);
            // Decays from strong (g = −3) to none, and write strengths across (0, 1).
            let g = values(seq * value_heads, 4).iter().map(|x| -1.5 * (x + 1.0)).collect();
            let beta = values(seq * value_heads, 5).iter().map(|x| 0.5 + 0.49 * x).collect();
            Self { q, k, v, g, beta }
        }

        /// Positions `range` of it.
        fn slice(&self, range: std::ops::Range<usize>, shape: DeltaShape) -> Self {
            let part = |x: &[f32], width: usize| x[range.start * width..range.end * width].to_vec();
            let (keys, values) = (shape.key_heads * shape.head_dim, shape.value_heads * shape.head_dim);
            Self {
                q: part(&self.q, keys),
                k: part(&self.k, keys),
                v: part(&self.v, values),
                g: part(&self.g, shape.value_heads),
                beta: part(&self.beta, shape.value_heads),
            }
        }

        fn inputs(&self) -> DeltaInputs<'_> {
            DeltaInputs { q: &self.q, k: &self.k, v: &self.v, g: &self.g, beta: &self.beta }
        }
    }

    /// A plain f64 delta rule, token by token, as the note on the forward pass writes it.
    fn reference(data: &Sequence, shape: DeltaShape, state: &mut [f64]) -> Vec<f64> {
        let DeltaShape { key_heads: nk, value_heads: nv, head_dim: hd } = shape;
        let Sequence { q, k, v, g, beta } = data;
        let seq = g.len() / nv;
        let mut out = vec![0.0; seq * nv * hd];
        for t in 0..seq {
            for j in 0..nv {
                let i = j % nk;
                let s = &mut state[j * hd * hd..(j + 1) * hd * hd];
                let decay = f64::from(g[t * nv + j]).exp();
                s.iter_mut().for_each(|x| *x *= decay);
                let kk = |a: usize| f64::from(k[(t * nk + i) * hd + a]);
                for c in 0..hd {
                    let memory: f64 = (0..hd).map(|a| s[a * hd + c] * kk(a)).sum();
                    let delta = f64::from(beta[t * nv + j]) * (f64::from(v[(t * nv + j) * hd + c]) - memory);
                    for a in 0..hd {
                        s[a * hd + c] += kk(a) * delta;
                    }
                }
                for c in 0..hd {
                    out[(t * nv + j) * hd + c] =
                        (0..hd).map(|a| s[a * hd + c] * f64::from(q[(t * nk + i) * hd + a])).sum();
                }
            }
        }
        out
    }

    fn worst(ours: &[f32], expected: &[f64]) -> f64 {
        ours.iter().zip(expected).map(|(&a, &b)| (f64::from(a) - b).abs()).fold(0.0, f64::max)
    }

    /// Both forms against the f64 reference and each other: more value heads than key heads,
    /// a prompt over two chunk boundaries, from a state that is not zero, then one more token.
    #[test]
    fn the_chunked_and_the_recurrent_forms_agree_with_a_plain_f64_rule() {
        let shape = DeltaShape { key_heads: 2, value_heads: 6, head_dim: 16 };
        let seq = 2 * CHUNK + 23;
        let data = Sequence::new(seq, shape);
        let start: Vec<f32> = values(shape.state_len(), 6).iter().map(|x| 0.3 * x).collect();
        let mut expected_state: Vec<f64> = start.iter().map(|&x| f64::from(x)).collect();
        let expected = reference(&data, shape, &mut expected_state);
        let width = shape.value_heads * shape.head_dim;
        type Form = fn(DeltaInputs, DeltaShape, &mut [f32], &mut [f32]);
        for (name, form) in [("recurrent", delta_rule_recurrent as Form), ("chunked", delta_rule_chunked)] {
            let mut state = start.clone();
            let mut out = vec![0.0; seq * width];
            form(data.inputs(), shape, &mut state, &mut out);
            assert!(worst(&out, &expected) < 2e-5, "{name}: outputs off by {}", worst(&out, &expected));
            assert!(worst(&state, &expected_state) < 2e-5, "{name}: state off by {}", worst(&state, &expected_state));
        }
        // A prompt through the chunked form, then a decode step through the recurrent one: the
        // same as the whole sequence a token at a time.
        let split = seq - 1;
        let mut state = start.clone();
        let mut out = vec![0.0; split * width];
        delta_rule_chunked(data.slice(0..split, shape).inputs(), shape, &mut state, &mut out);
        let mut last = vec![0.0; width];
        delta_rule_recurrent(data.slice(split..seq, shape).inputs(), shape, &mut state, &mut last);
        let off = worst(&last, &expected[split * width..]);
        assert!(off < 2e-5, "prefill then decode off by {off}");
    }

    /// The convolution with its state: a sequence in one call equals it in two, and both equal
    /// a plain sum over the zero-padded inputs.
    #[test]
    fn the_convolution_carries_its_last_inputs_across_calls() {
        let (channels, kernel, seq) = (5, 4, 9);
        let u = values(seq * channels, 7);
        let w = values(channels * kernel, 8);
        let taps = conv_taps(&w, kernel);
        let mut state = vec![0.0; (kernel - 1) * channels];
        let mut whole = vec![0.0; seq * channels];
        conv_silu(&u, &taps, kernel, &mut state, &mut whole);
        for t in 0..seq {
            for ch in 0..channels {
                let sum: f32 = (0..kernel)
                    .filter(|&j| t + j >= kernel - 1)
                    .map(|j| w[ch * kernel + j] * u[(t + j + 1 - kernel) * channels + ch])
                    .sum();
                assert!((whole[t * channels + ch] - silu(sum)).abs() < 1e-6, "t {t} ch {ch}");
            }
        }
        let mut split_state = vec![0.0; (kernel - 1) * channels];
        let mut split = vec![0.0; seq * channels];
        let (a, b) = split.split_at_mut(2 * channels);
        conv_silu(&u[..2 * channels], &taps, kernel, &mut split_state, a);
        conv_silu(&u[2 * channels..], &taps, kernel, &mut split_state, b);
        assert_eq!(split, whole);
        assert_eq!(split_state, state);
        assert_eq!(state, u[(seq - kernel + 1) * channels..]);
    }

    #[test]
    fn softplus_and_the_norms() {
        assert!((softplus(0.0) - std::f32::consts::LN_2).abs() < 1e-7);
        assert_eq!(softplus(50.0), 50.0);
        assert!(softplus(-30.0) > 0.0);
        let mut x = vec![3.0, 4.0];
        l2_normalize(&mut x, 2, 0.0);
        assert_eq!(x, [0.6, 0.8]);
        let mut x = vec![3.0, 4.0];
        gated_rms_norm(&mut x, &[0.0, 100.0], &[1.0, 2.0], 0.0);
        let inv = 1.0 / 12.5f32.sqrt();
        assert!(x[0].abs() < 1e-7 && (x[1] - 4.0 * inv * 2.0 * 100.0).abs() < 1e-3);
    }
}
