// attn_qkv.wgsl: the start of a block's attention. RMSNorm of the residual stream, the query, key
// and value projections (with their biases, for families that have them), RoPE on queries and
// keys, and the new keys and values written into the KV cache: one dispatch
// (crates/kernels/src/layer.rs has the bindings and parameters; lib/qkv.wgsl the outputs, pairs
// and stores). Families with per-head Q/K norms use attn_qkv_norm.wgsl instead.
//
// Work: the RoPE pairs of [q | k | v] ((q_dim + 2·kv_dim) / 2 pairs; a pair never straddles two
// heads). A group of TPR lanes computes one pair for R rows of x; GROUPS groups per workgroup.
// Dispatch (ceil(pairs / GROUPS), ceil(rows / R), 1).
//
// Buffers:
//   step    uniform StepParams: `pos`, the position of x row 0; `rows`
//   params  uniform AttnQkvParams
//   x       array<vec4<f32>> [rows, dim]: the residual stream, read
//   norm    array<vec4<f32>>: the block's attention vectors (lib/qkv.wgsl), γ [dim] first
//   wq, wk, wv  [q_dim, dim], [kv_dim, dim], [kv_dim, dim] in their weight formats
//   rope    array<vec2<f32>> [positions, rope_dims / 2]: (cos, sin) of position · θ_j (the block's
//           RoPE base; Llama 3's frequency factors), computed in f64 on the host
//   q       array<f32> [rows, q_dim]: written, rotated
//   kv      array<f32> [positions, 2, kv_heads, head_dim]: per position its keys (rotated), then its
//           values; positions pos .. pos + rows − 1 are written, at row p mod params.ring in a
//           local block's ring (params.ring > 0)
//
// Semantics, per row s at position p = pos + s (reference.rs, `attn_qkv`):
//   h = x_s / sqrt(mean(x_s²) + eps) ∘ γ, computed as inv_rms · Σ_k W[o, k]·(x_s[k]·γ[k]);
//   each output plus its bias; queries and keys rotated pair by pair, (a, b) becoming
//   (a·cos − b·sin, a·sin + b·cos) with the angle of the pair at position p.

fn load_raw(row: u32, col4: u32) -> vec4<f32> {
    return x[row * (params.dim >> 2u) + col4];
}

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let first = wid.y * R;
    let last = step.rows - 1u;
    let factors = normalize_rows(first, last, params.dim, params.eps, lid);

    let half = params.head_dim >> 1u;
    let pairs = (params.q_dim + 2u * params.kv_dim) >> 1u;
    let pair = wid.x * GROUPS + lid / TPR;
    let lane = lid % TPR;
    let valid = pair < pairs;
    let outs = pair_outputs(pair / half, pair % half);
    var a = vec4<f32>(0.0);
    var b = vec4<f32>(0.0);
    if valid {
        a = qkv_sums(outs.x, first, last, lane);
        b = qkv_sums(outs.y, first, last, lane);
    }
    let a_sums = sum_over_group(a, lid);
    let b_sums = sum_over_group(b, lid);
    if !valid || lane != 0u {
        return;
    }
    let bias = vec2<f32>(qkv_bias(outs.x), qkv_bias(outs.y));
    for (var j = 0u; j < R; j++) {
        let row = first + j;
        if row > last {
            break;
        }
        store_pair(outs, row, a_sums[j] * factors[j] + bias.x, b_sums[j] * factors[j] + bias.y);
    }
}
