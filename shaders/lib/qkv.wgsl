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

const NONE: u32 = 0xffffffffu;

// The f32 at index i of the attention vectors.
fn vector_at(i: u32) -> f32 {
    return norm[i >> 2u][i & 3u];
}

// The outputs (a, b) of pair j of head `head`.
fn pair_outputs(head: u32, j: u32) -> vec2<u32> {
    let base = head * params.head_dim;
    if params.rope_halves != 0u {
        return vec2<u32>(base + j, base + j + (params.head_dim >> 1u));
    }
    return vec2<u32>(base + 2u * j, base + 2u * j + 1u);
}

// Partial sums (component r: x row first + r) of output o, over this lane's units.
fn qkv_sums(o: u32, first: u32, last: u32, lane: u32) -> vec4<f32> {
    if o < params.q_dim {
        return dot_wq(o, params.dim, first, last, lane);
    }
    if o < params.q_dim + params.kv_dim {
        return dot_wk(o - params.q_dim, params.dim, first, last, lane);
    }
    return dot_wv(o - params.q_dim - params.kv_dim, params.dim, first, last, lane);
}

// The bias of output o (0 without biases).
fn qkv_bias(o: u32) -> f32 {
    if params.bias_at == NONE {
        return 0.0;
    }
    return vector_at(params.bias_at + o);
}

// Writes the pair (a, b) of outputs `outs` for x row `row`: queries into q and keys into the
// cache rotated by the angle of the pair at the row's position, values into the cache as they are.
fn store_pair(outs: vec2<u32>, row: u32, a: f32, b: f32) {
    let hd = params.head_dim;
    let position = step.pos + row;
    if outs.x >= params.q_dim + params.kv_dim {
        let at = (2u * position + 1u) * params.kv_dim + outs.x - params.q_dim - params.kv_dim;
        let bt = (2u * position + 1u) * params.kv_dim + outs.y - params.q_dim - params.kv_dim;
        kv[at] = a;
        kv[bt] = b;
        return;
    }
    let j = select((outs.x % hd) >> 1u, outs.x % hd, params.rope_halves != 0u);
    let angle = rope[position * (hd >> 1u) + j];
    let ra = a * angle.x - b * angle.y;
    let rb = a * angle.y + b * angle.x;
    if outs.x < params.q_dim {
        q[row * params.q_dim + outs.x] = ra;
        q[row * params.q_dim + outs.y] = rb;
    } else {
        kv[2u * position * params.kv_dim + outs.x - params.q_dim] = ra;
        kv[2u * position * params.kv_dim + outs.y - params.q_dim] = rb;
    }
}
