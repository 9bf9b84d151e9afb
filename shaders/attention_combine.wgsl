// attention_combine.wgsl: merges the chunk records of attention.wgsl into each head's output
// (crates/kernels/src/layer/attention.rs).
//
// Dispatch (heads, rows, 1); workgroup of ATTENTION_LANES lanes, lane i writes dimensions
// i, i + ATTENTION_LANES, ... No barriers.
//
// Buffers:
//   step      uniform StepParams: `attn_chunks`
//   params    uniform AttentionParams
//   partials  array<f32> [rows, heads, attn_chunks, head_dim + 2]: the records, read
//   q         array<f32>: attn_qkv_norm's output, read for its gates [rows, heads · head_dim] at
//             f32 offset params.gate_at (unread when 0: no gate; the gates
//             follow the queries, so never at 0)
//   out       array<f32> [rows, heads · head_dim]: written
//
// Semantics: M = max_c m_c; out = Σ_c exp(m_c − M)·o_c / Σ_c exp(m_c − M)·l_c, chunks in order;
// with an output gate g (Qwen3.5), out · sigmoid(g).
// An empty chunk (m = LOWEST_SCORE, l = 0, o = 0) adds nothing; the chunk holding the query's own
// position is never empty.

@compute @workgroup_size(ATTENTION_LANES, 1, 1)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let head = wid.x;
    let row = wid.y;
    let hd = params.head_dim;
    let stride = hd + 2u;
    let base = (row * params.heads + head) * step.attn_chunks * stride;
    var m = partials[base];
    for (var c = 1u; c < step.attn_chunks; c++) {
        m = max(m, partials[base + c * stride]);
    }
    var l = 0.0;
    for (var c = 0u; c < step.attn_chunks; c++) {
        l += exp(partials[base + c * stride] - m) * partials[base + c * stride + 1u];
    }
    for (var d = lid; d < hd; d += ATTENTION_LANES) {
        var o = 0.0;
        for (var c = 0u; c < step.attn_chunks; c++) {
            o += exp(partials[base + c * stride] - m) * partials[base + c * stride + 2u + d];
        }
        let at = (row * params.heads + head) * hd + d;
        var gate = 1.0;
        if params.gate_at != 0u {
            gate = 1.0 / (1.0 + exp(-q[params.gate_at + at]));
        }
        out[at] = o / l * gate;
    }
}
