// attn_qkv_norm.wgsl: attn_qkv.wgsl for families with a per-head RMSNorm of queries and keys
// before RoPE (Qwen3, Gemma 3): the norm needs a whole head, so a workgroup computes whole heads.
// RMSNorm of the residual stream, the three projections (with their biases, if any), each query
// and key head normalised and multiplied by its γ, RoPE, and the cache write: one dispatch
// (crates/kernels/src/layer.rs; lib/qkv.wgsl has the outputs, pairs and stores).
//
// Work: workgroup (h, g) computes head h of [q | k | v] for x rows g·R .. g·R + R − 1: its
// GROUPS lane groups (TPR lanes each) take its pairs GROUPS at a time into workgroup memory; then,
// for a query or key head, the workgroup adds its squares (lane parts, added in lane order) and
// every lane normalises, rotates and writes a strided part of the pairs.
// Dispatch (heads + 2·kv_heads, ceil(rows / R), 1), and heads more with an output gate (its
// heads come last and are neither normalised nor rotated).
//
// Buffers: as attn_qkv.wgsl; params.qk_norm_at is the offset of the query norm's γ in the
// attention vectors (the key norm's follows it). With a gate (params.gate_at set), wq is
// [2·q_dim, dim] (each head's query rows, then its gate's) and q holds the gates
// [rows, q_dim] from f32 offset params.gate_at.
//
// Semantics, per row s at position p = pos + s (reference.rs, `attn_qkv`): as attn_qkv.wgsl, with
// each query and key head, after its bias, replaced by head / sqrt(mean(head²) + eps) ∘ γ_head
// before the rotation.

var<workgroup> head_values: array<vec4<f32>, MAX_HEAD_DIM>;
var<workgroup> head_factors: vec4<f32>;

fn load_raw(row: u32, col4: u32) -> vec4<f32> {
    return x[row * (params.dim >> 2u) + col4];
}

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let first = wid.y * R;
    let last = step.rows - 1u;
    let factors = normalize_rows(first, last, params.dim, params.eps, lid);

    let head = wid.x;
    let hd = params.head_dim;
    let half = hd >> 1u;
    let lane = lid % TPR;
    for (var p0 = 0u; p0 < half; p0 += GROUPS) {
        let j = p0 + lid / TPR;
        let valid = j < half;
        let outs = pair_outputs(head, min(j, half - 1u));
        var a = vec4<f32>(0.0);
        var b = vec4<f32>(0.0);
        if valid {
            a = qkv_sums(outs.x, first, last, lane);
            b = qkv_sums(outs.y, first, last, lane);
        }
        let a_sums = sum_over_group(a, lid);
        let b_sums = sum_over_group(b, lid);
        if valid && lane == 0u {
            head_values[outs.x % hd] = a_sums * factors + qkv_bias(outs.x);
            head_values[outs.y % hd] = b_sums * factors + qkv_bias(outs.y);
        }
    }
    workgroupBarrier();

    // The head's norm: queries and keys only (heads before the value heads).
    let normed = head * hd < params.q_dim + params.kv_dim;
    var inv = vec4<f32>(1.0);
    if normed {
        var part = vec4<f32>(0.0);
        for (var d = lid; d < hd; d += WG) {
            let v = head_values[d];
            part += v * v;
        }
        group_partials[lid] = part;
        workgroupBarrier();
        if lid == 0u {
            var total = vec4<f32>(0.0);
            for (var t = 0u; t < WG; t++) {
                total += group_partials[t];
            }
            head_factors = 1.0 / sqrt(total / f32(hd) + params.eps);
        }
        workgroupBarrier();
        inv = head_factors;
    }
    // γ of this head's norm: the query norm's for query heads, the key norm's for key heads.
    let gamma_at = params.qk_norm_at + select(0u, hd, head * hd >= params.q_dim);
    for (var j = lid; j < half; j += WG) {
        let outs = pair_outputs(head, j);
        let da = outs.x % hd;
        let db = outs.y % hd;
        var gamma = vec2<f32>(1.0);
        if normed {
            gamma = vec2<f32>(vector_at(gamma_at + da), vector_at(gamma_at + db));
        }
        for (var r = 0u; r < R; r++) {
            let row = first + r;
            if row > last {
                break;
            }
            store_pair(outs, row, head_values[da][r] * inv[r] * gamma.x, head_values[db][r] * inv[r] * gamma.y);
        }
    }
}
