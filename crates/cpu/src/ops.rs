//! The CPU engine's other operations: RMSNorm and attention over a KV cache held as f32 rows.
//! Small beside the products, but the attention grows with the context, so it is spread over
//! the threads too (a prompt's rows a row and KV head at a time, a decode step's keys a KV head
//! and chunk of keys at a time).

use crate::dot::{strided_dots, weighted_rows};
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

/// `1 / sqrt(mean(x²) + eps)`, the sum of squares in f64, in [`in_lanes`]' eight running sums
/// (in one, the norms were 0.7–1 % of a prefill on the calling thread).
pub fn inverse_rms(x: &[f32], eps: f64) -> f32 {
    let squares = in_lanes(x, 0.0, |sum, v| sum + f64::from(v) * f64::from(v), |a, b| a + b);
    let mean = squares / x.len() as f64;
    (1.0 / (mean + eps).sqrt()) as f32
}

/// `values` folded by `step` in eight running lanes (value `i` into lane `i mod 8`), the lanes
/// joined by `join` pairwise, `((l₀·l₄)·(l₂·l₆))·((l₁·l₅)·(l₃·l₇))`: a loop the compiler vectorises,
/// where one running value waits on each step, four cycles each (a 640-wide row's sum of squares
/// took 2,560 cycles; a sum of 256 exponentials as long as their 16,384 scores).
#[inline(always)]
fn in_lanes<T: Copy, A: Copy>(values: &[T], start: A, step: impl Fn(A, T) -> A, join: impl Fn(A, A) -> A) -> A {
    let mut lanes = [start; 8];
    let whole = values.chunks_exact(8);
    let rest = whole.remainder();
    for eight in whole {
        for (lane, &v) in lanes.iter_mut().zip(eight) {
            *lane = step(*lane, v);
        }
    }
    for (lane, &v) in lanes.iter_mut().zip(rest) {
        *lane = step(*lane, v);
    }
    let [a, b, c, d, e, f, g, h] = lanes;
    join(join(join(a, e), join(c, g)), join(join(b, f), join(d, h)))
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

/// One block's keys and values as [`attention`] reads them: KV head `h`'s row at position `p` is
/// `keys[h][p · stride..][..head_dim]`, and the same of `values`. The CPU engine's cache keeps each
/// head's rows together (`stride` the head's width), so that a head's keys come from memory as one
/// stream; rows of `[positions, kv_heads · head_dim]` hold the heads side by side
/// ([`KvRows::interleaved`]). ARCHITECTURE.md, "Each KV head's rows together".
#[derive(Debug, Clone)]
pub struct KvRows<'a> {
    pub keys: Vec<&'a [f32]>,
    pub values: Vec<&'a [f32]>,
    /// Values from one position's row of a head to the next position's.
    pub stride: usize,
}

impl<'a> KvRows<'a> {
    /// Rows of `[positions, kv_heads · head_dim]`: each position's heads side by side.
    pub fn interleaved(keys: &'a [f32], values: &'a [f32], kv_heads: usize, head_dim: usize) -> Self {
        let heads = |rows: &'a [f32]| (0..kv_heads).map(|h| rows.get(h * head_dim..).unwrap_or_default()).collect();
        Self { keys: heads(keys), values: heads(values), stride: kv_heads * head_dim }
    }
}

/// Causal grouped-query attention: query row `s` (`q`: `[rows, heads·head_dim]`, at position
/// `pos + s`) of head `h` over the keys and values of kv head `h / (heads / kv_heads)` at positions
/// `0..=pos + s` (`kv`), within its window; `out`: `[rows, heads·head_dim]`. Softmax with the
/// maximum subtracted, f32.
///
/// The keys go in chunks of [`keys_per_chunk`] (at fixed positions), each met by every query
/// head of its KV head at once (each key and value read once for all of them): a chunk's scores,
/// their maxima, the exponentials' totals and the values they weigh, then the chunks' results
/// joined in order (rescaled to the larger maximum), then divided by the total. A prompt's rows go to the threads
/// a row and KV head at a time; a decode step's one row a KV head and chunk at a time, joined
/// after in the same order, so a row's outputs are the same bits either way, on any number of
/// threads. Each query head once read its KV head's keys and values on its own, from memory at a
/// long context: ARCHITECTURE.md, "Attention a chunk of keys at a time".
pub fn attention(q: &[f32], kv: &KvRows<'_>, pos: usize, shape: AttentionShape, out: &mut [f32]) {
    let AttentionShape { heads, kv_heads, head_dim: hd, .. } = shape;
    let group = heads / kv_heads;
    let rows = q.len() / (heads * hd);
    // Spread over the threads only when there is enough work to be worth the hand-over (a long
    // context, a prompt).
    let parallel = rows * heads * (pos + rows) * hd >= PARALLEL_ATTENTION_WORK;
    let slot = group * (hd + 2);
    let queries = |s: usize, kv_head: usize| &q[(s * heads + kv_head * group) * hd..][..group * hd];
    if rows == 1 {
        let chunks = key_chunks(pos, shape);
        let mut slots = vec![0.0; kv_heads * chunks.len() * slot];
        for_each_chunk(&mut slots, slot, parallel, |task, slot| {
            let (kv_head, chunk) = (task / chunks.len(), task % chunks.len());
            let chunk = chunks[chunk].clone();
            weigh_chunk(Chunk::new(queries(0, kv_head), kv, kv_head, chunk, shape), slot);
        });
        // Each KV head's chunks joined into its first, in order.
        for (slots, out) in slots.chunks_exact_mut(chunks.len() * slot).zip(out.chunks_exact_mut(group * hd)) {
            let (running, rest) = slots.split_at_mut(slot);
            for next in rest.chunks_exact(slot) {
                join(running, next, group, hd);
            }
            divide(running, group, hd, out);
        }
        return;
    }
    for_each_chunk(out, group * hd, parallel, |task, out| {
        let (s, kv_head) = (task / kv_heads, task % kv_heads);
        let (mut running, mut next) = (vec![0.0; slot], vec![0.0; slot]);
        for (c, chunk) in key_chunks(pos + s, shape).into_iter().enumerate() {
            let into = if c == 0 { &mut running } else { &mut next };
            weigh_chunk(Chunk::new(queries(s, kv_head), kv, kv_head, chunk, shape), into);
            if c > 0 {
                join(&mut running, &next, group, hd);
            }
        }
        divide(&running, group, hd, out);
    });
}

/// Keys [`attention`] weighs at a time: 64 KiB of them (and as many bytes of values), which stay
/// in a core's cache while every query head of their KV head reads them. Set by the head width
/// alone, never by the machine or the threads, so that every build and thread count sums alike.
fn keys_per_chunk(head_dim: usize) -> usize {
    ((1 << 14) / head_dim.max(1)).max(16)
}

/// The chunks of keys a query at `position` sees (`0..=position`, within its window), each within
/// one of the fixed spans of [`keys_per_chunk`] keys.
fn key_chunks(position: usize, shape: AttentionShape) -> Vec<std::ops::Range<usize>> {
    let seen = position + 1;
    let first = shape.window.map_or(0, |w| seen.saturating_sub(w));
    let span = keys_per_chunk(shape.head_dim);
    (first / span..seen.div_ceil(span)).map(|c| (c * span).max(first)..((c + 1) * span).min(seen)).collect()
}

/// One task of an [`attention`]: the query heads `queries` (`[group, hd]`) of a KV head over its
/// keys `chunk` (`keys`, `values`: that head's rows, `stride` apart).
struct Chunk<'a> {
    queries: &'a [f32],
    keys: &'a [f32],
    values: &'a [f32],
    stride: usize,
    chunk: std::ops::Range<usize>,
    shape: AttentionShape,
}

impl<'a> Chunk<'a> {
    fn new(
        queries: &'a [f32],
        kv: &KvRows<'a>,
        kv_head: usize,
        chunk: std::ops::Range<usize>,
        shape: AttentionShape,
    ) -> Self {
        Self { queries, keys: kv.keys[kv_head], values: kv.values[kv_head], stride: kv.stride, chunk, shape }
    }
}

/// `task`'s query heads over its keys, all at once: into `slot`, `[group · hd]` values weighed by
/// `exp(score − max)`, then the `group` maxima, then the `group` totals of the exponentials. Built
/// for the widest vectors the CPU has.
fn weigh_chunk(task: Chunk<'_>, slot: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::matmul::has_avx2() {
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            return unsafe { weigh_chunk_avx2(task, slot) };
        }
    }
    #[allow(unreachable_code)]
    weigh_chunk_with(task, slot)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn weigh_chunk_avx2(task: Chunk<'_>, slot: &mut [f32]) {
    weigh_chunk_with(task, slot);
}

/// [`weigh_chunk`]'s one body, compiled into each build.
#[inline(always)]
fn weigh_chunk_with(Chunk { queries, keys, values, stride, chunk, shape }: Chunk<'_>, slot: &mut [f32]) {
    let AttentionShape { head_dim: hd, scale, .. } = shape;
    let group = queries.len() / hd;
    let at = chunk.start * stride;
    let (outs, states) = slot.split_at_mut(group * hd);
    let (maxima, totals) = states.split_at_mut(group);
    // Every query head's scores at once, then every head's weighed values at once: each key and
    // value comes from memory once for all of them.
    let mut scores = vec![0.0; group * chunk.len()];
    strided_dots(queries, hd, &keys[at..], stride, &mut scores);
    for (g, scores) in scores.chunks_exact_mut(chunk.len()).enumerate() {
        scores.iter_mut().for_each(|score| *score *= scale);
        let max = in_lanes(scores, f32::NEG_INFINITY, f32::max, f32::max);
        scores.iter_mut().for_each(|score| *score = exp(*score - max));
        totals[g] = in_lanes(scores, 0.0, |total, score| total + score, |a, b| a + b);
        maxima[g] = max;
    }
    outs.fill(0.0);
    weighted_rows(&scores, &values[at..], stride, hd, outs);
}

/// `running` ([`weigh_chunk`]'s layout) joined with the next chunk's `next`: each query's values
/// and total rescaled to the larger of the two maxima and added.
fn join(running: &mut [f32], next: &[f32], group: usize, hd: usize) {
    let (outs, states) = running.split_at_mut(group * hd);
    let (next_outs, next_states) = next.split_at(group * hd);
    let (maxima, totals) = states.split_at_mut(group);
    for g in 0..group {
        let (max, next_max) = (maxima[g], next_states[g]);
        let larger = max.max(next_max);
        let (a, b) = (exp(max - larger), exp(next_max - larger));
        totals[g] = totals[g] * a + next_states[group + g] * b;
        maxima[g] = larger;
        let out = &mut outs[g * hd..(g + 1) * hd];
        for (o, &n) in out.iter_mut().zip(&next_outs[g * hd..(g + 1) * hd]) {
            *o = *o * a + n * b;
        }
    }
}

/// Each query's weighed values in `running` ([`weigh_chunk`]'s layout) divided by its total, into
/// `out` (`[group, hd]`).
fn divide(running: &[f32], group: usize, hd: usize, out: &mut [f32]) {
    let (outs, states) = running.split_at(group * hd);
    for ((out, values), &total) in out.chunks_exact_mut(hd).zip(outs.chunks_exact(hd)).zip(&states[group..]) {
        for (o, &v) in out.iter_mut().zip(values) {
            *o = v / total;
        }
    }
}

/// One query's `exp(score − max)` over the keys it sees (its KV head's `keys`, `stride` apart, at
/// positions `0..=position`, from its window's first with one), and their sum: the first key, the
/// exponentials, the total.
fn head_exponentials(
    query: &[f32],
    keys: &[f32],
    stride: usize,
    position: usize,
    shape: AttentionShape,
) -> (usize, Vec<f32>, f32) {
    let AttentionShape { head_dim: hd, scale, window, .. } = shape;
    let seen = position + 1;
    let first = window.map_or(0, |w| seen.saturating_sub(w));
    let mut scores = vec![0.0; seen - first];
    strided_dots(query, hd, &keys[first * stride..], stride, &mut scores);
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
    kv: &KvRows<'_>,
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
            let keys = kv.keys[h / (heads / kv_heads)];
            let (first, weights, total) = head_exponentials(query, keys, kv.stride, pos + s, shape);
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

    /// A row's attention is the same bits as a prompt's last row (a KV head's keys in one task,
    /// chunk after chunk) and as a decode step's one row (its chunks in tasks of their own, joined
    /// after): over one chunk of keys and several, with and without a window across a chunk's end.
    #[test]
    fn a_decode_step_attends_as_a_prompts_last_row() {
        let (heads, kv_heads, hd) = (6, 2, 64);
        let value = |i: usize| ((i * 37 % 101) as f32 / 50.0) - 1.0;
        for (pos, window) in [(40, None), (700, None), (700, Some(300)), (513, Some(2))] {
            let rows = 3;
            let keys: Vec<f32> = (0..(pos + rows) * kv_heads * hd).map(value).collect();
            let values: Vec<f32> = (0..(pos + rows) * kv_heads * hd).map(|i| value(i + 5)).collect();
            let q: Vec<f32> = (0..rows * heads * hd).map(|i| value(i + 3)).collect();
            let shape = AttentionShape { heads, kv_heads, head_dim: hd, scale: 0.125, window };
            let mut prompt = vec![0.0; q.len()];
            let kv = KvRows::interleaved(&keys, &values, kv_heads, hd);
            attention(&q, &kv, pos, shape, &mut prompt);
            let last = (rows - 1) * heads * hd;
            let mut step = vec![0.0; heads * hd];
            attention(&q[last..], &kv, pos + rows - 1, shape, &mut step);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&prompt[last..]), bits(&step), "position {pos}, window {window:?}");
        }
    }

    /// The cache's layout, each KV head's rows together, attends as the heads side by side, bit
    /// for bit: the same sums over the same rows, read from other places.
    #[test]
    fn each_heads_rows_together_attend_as_side_by_side() {
        let (heads, kv_heads, hd, pos, rows) = (6, 3, 40, 300, 2);
        let value = |i: usize| ((i * 37 % 101) as f32 / 50.0) - 1.0;
        let keys: Vec<f32> = (0..(pos + rows) * kv_heads * hd).map(value).collect();
        let values: Vec<f32> = (0..(pos + rows) * kv_heads * hd).map(|i| value(i + 5)).collect();
        let q: Vec<f32> = (0..rows * heads * hd).map(|i| value(i + 3)).collect();
        let by_head = |rows: &[f32]| -> Vec<Vec<f32>> {
            (0..kv_heads)
                .map(|h| rows.chunks_exact(kv_heads * hd).flat_map(|row| &row[h * hd..][..hd]).copied().collect())
                .collect()
        };
        let (head_keys, head_values) = (by_head(&keys), by_head(&values));
        let together = KvRows {
            keys: head_keys.iter().map(Vec::as_slice).collect(),
            values: head_values.iter().map(Vec::as_slice).collect(),
            stride: hd,
        };
        let side_by_side = KvRows::interleaved(&keys, &values, kv_heads, hd);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for window in [None, Some(7)] {
            let shape = AttentionShape { heads, kv_heads, head_dim: hd, scale: 0.125, window };
            let (mut a, mut b) = (vec![0.0; q.len()], vec![0.0; q.len()]);
            attention(&q, &together, pos, shape, &mut a);
            attention(&q, &side_by_side, pos, shape, &mut b);
            assert_eq!(bits(&a), bits(&b), "window {window:?}");
            let weights = |kv: &KvRows<'_>| attention_weights(&q, kv, pos, shape, 0..rows, None);
            assert_eq!(weights(&together), weights(&side_by_side), "window {window:?}");
        }
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
