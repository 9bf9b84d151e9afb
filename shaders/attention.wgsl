// attention.wgsl: attention of the new queries over the KV cache, split across workgroups by
// ranges of keys (flash-decoding): each workgroup reduces one (row, head, chunk) to a partial
// record; attention_combine.wgsl merges the chunks. Long contexts are spread over up to
// several workgroups per head instead of one (crates/kernels/src/layer/attention.rs).
//
// Dispatch (step.attn_chunks, heads, rows). Workgroup of ATTENTION_LANES lanes: keys are scored
// ATTENTION_LANES at a time (one per lane); the running maximum m, the sum l and the weighted sum
// of values o (lane i holds dimensions i, i + ATTENTION_LANES, ...) are rescaled as each round
// raises m (the online softmax). Two barriers per round.
//
// Buffers:
//   step      uniform StepParams: `pos`; `attn_chunks` chunks of `attn_chunk_len` keys (a multiple
//             of ATTENTION_LANES) each, chosen by the host
//   params    uniform AttentionParams
//   q         array<f32> [rows, heads, head_dim]: the rotated queries (attn_qkv.wgsl)
//   kv        array<f32> [positions, 2, kv_heads, head_dim]: the cache (keys, then values, of each
//             position), positions 0 .. pos + rows − 1 filled; a local block's ring
//             (params.ring > 0) holds position t at row t mod ring, the window's rows filled
//   partials  array<f32> [rows, heads, attn_chunks, head_dim + 2]: written; record (s, h, c) =
//             m, l, o[0 .. head_dim]: m the largest score of the chunk, l = Σ exp(score − m),
//             o = Σ exp(score − m)·v. An empty chunk (all its keys after the query) gets
//             m = LOWEST_SCORE, l = 0, o = 0.
//
// Semantics: query row s (position p = pos + s) of head h sees the keys 0 ..= p of kv head
// h / (heads / kv_heads) (causal; grouped-query attention), or with a window (params.window > 0,
// a local block of Gemma 3) only the keys p − window + 1 ..= p; score = (q·k)·scale with
// scale = 1/sqrt(head_dim) (reference.rs, `attention`). Chunks wholly before the window are empty.

// A score below every real one; finite, so that no driver's fast-math can turn it into a NaN.
const LOWEST_SCORE: f32 = -3.0e38;

var<workgroup> query: array<f32, MAX_HEAD_DIM>;
var<workgroup> scores: array<f32, ATTENTION_LANES>;
var<workgroup> weights: array<f32, ATTENTION_LANES>;

@compute @workgroup_size(ATTENTION_LANES, 1, 1)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let chunk = wid.x;
    let head = wid.y;
    let row = wid.z;
    let hd = params.head_dim;
    let position = step.pos + row;
    // The first key the query sees: 0, or the start of its window.
    let first_key = select(0u, position + 1u - params.window, params.window > 0u && position + 1u > params.window);
    let begin = max(chunk * step.attn_chunk_len, first_key);
    let end = min(chunk * step.attn_chunk_len + step.attn_chunk_len, position + 1u);
    let record = ((row * params.heads + head) * step.attn_chunks + chunk) * (hd + 2u);
    if begin >= end {
        if lid == 0u {
            partials[record] = LOWEST_SCORE;
            partials[record + 1u] = 0.0;
        }
        for (var d = lid; d < hd; d += ATTENTION_LANES) {
            partials[record + 2u + d] = 0.0;
        }
        return;
    }

    let kv_head = head / (params.heads / params.kv_heads);
    // Position t's key of this kv head is at keys + t·stride, its value at values + t·stride.
    let stride = 2u * params.kv_heads * hd;
    let keys = kv_head * hd;
    let values = (params.kv_heads + kv_head) * hd;
    for (var d = lid; d < hd; d += ATTENTION_LANES) {
        query[d] = q[(row * params.heads + head) * hd + d];
    }
    workgroupBarrier();

    var m = LOWEST_SCORE;
    var l = 0.0;
    var o: array<f32, MAX_HEAD_DIM / ATTENTION_LANES>;
    for (var t0 = begin; t0 < end; t0 += ATTENTION_LANES) {
        let t = t0 + lid;
        var score = LOWEST_SCORE;
        if t < end {
            var s = 0.0;
            let key = keys + cache_row(t, params.ring) * stride;
            for (var d = 0u; d < hd; d++) {
                s += query[d] * kv[key + d];
            }
            score = s * params.scale;
        }
        scores[lid] = score;
        workgroupBarrier();
        var m_new = m;
        for (var i = 0u; i < ATTENTION_LANES; i++) {
            m_new = max(m_new, scores[i]);
        }
        weights[lid] = select(0.0, exp(score - m_new), t < end);
        workgroupBarrier();
        let rescale = exp(m - m_new);
        l *= rescale;
        for (var k = 0u; k < MAX_HEAD_DIM / ATTENTION_LANES; k++) {
            o[k] *= rescale;
        }
        let count = min(ATTENTION_LANES, end - t0);
        for (var i = 0u; i < count; i++) {
            let p = weights[i];
            l += p;
            let value = values + cache_row(t0 + i, params.ring) * stride;
            for (var k = 0u; k < MAX_HEAD_DIM / ATTENTION_LANES; k++) {
                let d = lid + k * ATTENTION_LANES;
                if d < hd {
                    o[k] += p * kv[value + d];
                }
            }
        }
        m = m_new;
    }
    if lid == 0u {
        partials[record] = m;
        partials[record + 1u] = l;
    }
    for (var k = 0u; k < MAX_HEAD_DIM / ATTENTION_LANES; k++) {
        let d = lid + k * ATTENTION_LANES;
        if d < hd {
            partials[record + 2u + d] = o[k];
        }
    }
}
