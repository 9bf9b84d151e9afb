// qkv.wgsl: what attn_qkv.wgsl and attn_qkv_norm.wgsl share: the outputs [q | k | v] of a block's
// three projections, their biases, RoPE's pairs, and where each output is written.
//
// Outputs are numbered over [q | k | v] (q_dim + 2·kv_dim of them), so head h of that list is
// query head h (h < heads), key head h − heads, then value head h − heads − kv_heads. RoPE
// rotates the outputs (a, b) of pair j < head_dim / 2 of a head together: the adjacent
// (2j, 2j + 1) (Llama: GGUF stores its Q and K permuted for it) or the halves' (j, j + head_dim/2)
// (params.rope_halves: Qwen, Gemma). The kernel binds `norm` to the block's attention vectors:
// the RMSNorm weight γ [dim] first, then, at the f32 offsets params.bias_at (the biases of
// [q | k | v]) and params.qk_norm_at (the query norm's γ [head_dim], then the key norm's), those
// of the family's that has them; NONE marks an absent one.
//
// Partial RoPE (Qwen3.5: params.rope_dims < head_dim, halves only): pairs j < rope_dims / 2
// rotate (j, j + rope_dims / 2); the others pair the unrotated dimensions rope_dims .. head_dim
// and pass them through. An output gate (Qwen3.5's attention: params.gate_at, 0 without one) comes from
// the same projection as the queries, each query head's rows followed by its gate head's in wq;
// its heads are numbered after the value heads and written, unrotated, into q at params.gate_at.

const NONE: u32 = 0xffffffffu;

// The f32 at index i of the attention vectors.
fn vector_at(i: u32) -> f32 {
    return norm[i >> 2u][i & 3u];
}

// The outputs (a, b) of pair j of head `head`.
fn pair_outputs(head: u32, j: u32) -> vec2<u32> {
    let base = head * params.head_dim;
    if params.rope_halves != 0u {
        let rotated = params.rope_dims >> 1u;
        if j < rotated {
            return vec2<u32>(base + j, base + j + rotated);
        }
        return vec2<u32>(base + j + rotated, base + j + (params.head_dim >> 1u));
    }
    return vec2<u32>(base + 2u * j, base + 2u * j + 1u);
}

// The first output of the gate heads (after [q | k | v]).
fn gates_from() -> u32 {
    return params.q_dim + 2u * params.kv_dim;
}

// The row of wq that makes query output o (o < q_dim), or gate output o − gates_from(): with a
// gate, each head's hd query rows are followed by its hd gate rows.
fn wq_row(o: u32, gate: bool) -> u32 {
    if params.gate_at == 0u {
        return o;
    }
    let hd = params.head_dim;
    return (o / hd) * 2u * hd + select(0u, hd, gate) + o % hd;
}

// Partial sums (component r: x row first + r) of output o, over this lane's units.
fn qkv_sums(o: u32, first: u32, last: u32, lane: u32) -> vec4<f32> {
    if o < params.q_dim {
        return dot_wq(wq_row(o, false), params.dim, first, last, lane);
    }
    if o < params.q_dim + params.kv_dim {
        return dot_wk(o - params.q_dim, params.dim, first, last, lane);
    }
    if o >= gates_from() {
        return dot_wq(wq_row(o - gates_from(), true), params.dim, first, last, lane);
    }
    return dot_wv(o - params.q_dim - params.kv_dim, params.dim, first, last, lane);
}

// The bias of output o (0 without biases; gates have none).
fn qkv_bias(o: u32) -> f32 {
    if params.bias_at == NONE || o >= gates_from() {
        return 0.0;
    }
    return vector_at(params.bias_at + o);
}

// Writes the pair (a, b) of outputs `outs` for x row `row`: queries into q and keys into the
// cache rotated by the angle of the pair at the row's position, values into the cache as they are.
fn store_pair(outs: vec2<u32>, row: u32, a: f32, b: f32) {
    let hd = params.head_dim;
    let position = step.pos + row;
    if outs.x >= gates_from() {
        q[params.gate_at + row * params.q_dim + outs.x - gates_from()] = a;
        q[params.gate_at + row * params.q_dim + outs.y - gates_from()] = b;
        return;
    }
    if outs.x >= params.q_dim + params.kv_dim {
        let row = cache_row(position, params.ring);
        let at = (2u * row + 1u) * params.kv_dim + outs.x - params.q_dim - params.kv_dim;
        let bt = (2u * row + 1u) * params.kv_dim + outs.y - params.q_dim - params.kv_dim;
        kv[at] = a;
        kv[bt] = b;
        return;
    }
    let j = select((outs.x % hd) >> 1u, outs.x % hd, params.rope_halves != 0u);
    let rotated = params.rope_dims >> 1u;
    var ra = a;
    var rb = b;
    if j < rotated {
        let angle = rope[position * rotated + j];
        ra = a * angle.x - b * angle.y;
        rb = a * angle.y + b * angle.x;
    }
    if outs.x < params.q_dim {
        q[row * params.q_dim + outs.x] = ra;
        q[row * params.q_dim + outs.y] = rb;
    } else {
        let row = cache_row(position, params.ring);
        kv[2u * row * params.kv_dim + outs.x - params.q_dim] = ra;
        kv[2u * row * params.kv_dim + outs.y - params.q_dim] = rb;
    }
}
