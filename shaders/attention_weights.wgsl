// attention_weights.wgsl: what a block's attention weighs each earlier position by, after the
// softmax, for chosen query rows: one head's weights, or the mean of every head's
// (crates/kernels/src/layer.rs, `attention_weights`). Recorded only when a page asks to see
// attention, right after the block's attn_qkv in that pass: the decode step never runs it.
//
// Work: workgroup r takes the pass's row r (position p = step.pos + r) if p is among the rows
// asked (params.first .. params.first + params.count − 1), else returns. Per head: the lanes
// load its query, score the keys j ≡ lane (mod WG) twice (the maximum, then Σ exp) with a
// workgroup reduction after each, and add weight · share to the row (share = 1 / heads averaged).
// A lane keeps the same keys for every head, so the row needs no atomics. Dispatch (rows, 1, 1);
// WG is a power of two.
//
// Buffers:
//   step    uniform StepParams: `pos`
//   params  uniform AttentionWeightsParams
//   q       array<f32> [rows, heads, head_dim]: the pass's rotated queries (attn_qkv.wgsl)
//   kv      array<f32> [positions, 2, kv_heads, head_dim]: the block's cache (keys, then values,
//           of each position), positions 0 .. p filled; a local block's ring (params.ring > 0)
//           holds position t at row t mod ring
//   out     array<f32> [count, keys]: row p − first written whole: the weights of keys 0 ..= p,
//           0 before the window's first key and after p
//
// Semantics (reference.rs, `attention_weights`): as attention.wgsl, head h reads kv head
// h / (heads / kv_heads), score = (q·k)·scale over keys first ..= p (first = p − window + 1 with
// a window, else 0), softmax with the maximum subtracted.

const NO_HEAD: u32 = 0xffffffffu;
// A score below every real one; finite, so that no driver's fast-math can turn it into a NaN.
const LOWEST_SCORE: f32 = -3.0e38;

var<workgroup> query: array<f32, MAX_HEAD_DIM>;

fn score(t: u32, kv_head: u32) -> f32 {
    let hd = params.head_dim;
    let key = cache_row(t, params.ring) * 2u * params.kv_heads * hd + kv_head * hd;
    var dot = 0.0;
    for (var d = 0u; d < hd; d++) {
        dot += query[d] * kv[key + d];
    }
    return dot * params.scale;
}

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.x;
    let position = step.pos + row;
    if position < params.first || position >= params.first + params.count {
        return;
    }
    let out_row = (position - params.first) * params.keys;
    let first_key = select(0u, position + 1u - params.window, params.window > 0u && position + 1u > params.window);
    for (var j = lid; j < params.keys; j += WG) {
        out[out_row + j] = 0.0;
    }
    let every = params.head == NO_HEAD;
    let first_head = select(params.head, 0u, every);
    let end_head = select(params.head + 1u, params.heads, every);
    let share = 1.0 / f32(end_head - first_head);
    for (var h = first_head; h < end_head; h++) {
        let kv_head = h / (params.heads / params.kv_heads);
        workgroupBarrier();
        for (var d = lid; d < params.head_dim; d += WG) {
            query[d] = q[(row * params.heads + h) * params.head_dim + d];
        }
        workgroupBarrier();
        var m = LOWEST_SCORE;
        for (var t = first_key + lid; t <= position; t += WG) {
            m = max(m, score(t, kv_head));
        }
        let top = workgroup_max(lid, m);
        var sum = 0.0;
        for (var t = first_key + lid; t <= position; t += WG) {
            sum += exp(score(t, kv_head) - top);
        }
        let total = workgroup_sum(lid, sum);
        for (var t = first_key + lid; t <= position; t += WG) {
            out[out_row + t] += exp(score(t, kv_head) - top) / total * share;
        }
    }
}
