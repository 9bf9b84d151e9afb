// attn_qkv.wgsl: the start of a block's attention. RMSNorm of the residual stream, the query, key
// and value projections, RoPE on queries and keys, and the new keys and values written into the
// KV cache: one dispatch (crates/kernels/src/layer/attn_qkv.rs has the bindings and parameters).
//
// Work: output pairs (2i, 2i + 1) of [q | k | v] (q_dim + 2·kv_dim outputs; head dimensions are
// even, so a pair never straddles two matrices). A group of TPR lanes computes one pair for R
// rows of x; GROUPS groups per workgroup.
// Dispatch (ceil(pairs / GROUPS), ceil(rows / R), 1).
//
// Buffers:
//   step    uniform StepParams: `pos`, the position of x row 0; `rows`
//   params  uniform AttnQkvParams
//   x       array<vec4<f32>> [rows, dim]: the residual stream, read
//   norm    array<vec4<f32>> [dim]: the RMSNorm weight γ
//   wq, wk, wv  [q_dim, dim], [kv_dim, dim], [kv_dim, dim] in their weight formats
//   rope    array<vec2<f32>> [positions, head_dim / 2]: (cos, sin) of position · base^(−2i/head_dim),
//           computed in f64 on the host
//   q       array<f32> [rows, q_dim]: written, rotated
//   kv      array<f32> [positions, 2, kv_heads, head_dim]: per position its keys (rotated), then its
//           values; positions pos .. pos + rows − 1 are written
//
// Semantics, per row s at position p = pos + s (reference.rs, `attn_qkv`):
//   h = x_s / sqrt(mean(x_s²) + eps) ∘ γ, computed as inv_rms · Σ_k W[o, k]·(x_s[k]·γ[k]);
//   (a, b) = the pair's outputs; queries and keys become (a·cos − b·sin, a·sin + b·cos) with the
//   angle of pair i = (o mod head_dim) / 2 at position p.

fn load_raw(row: u32, col4: u32) -> vec4<f32> {
    return x[row * (params.dim >> 2u) + col4];
}

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let first = wid.y * R;
    let last = step.rows - 1u;
    let factors = normalize_rows(first, last, params.dim, params.eps, lid);

    let pairs = (params.q_dim + 2u * params.kv_dim) / 2u;
    let pair = wid.x * GROUPS + lid / TPR;
    let lane = lid % TPR;
    let valid = pair < pairs;
    let out = 2u * pair;
    var even = vec4<f32>(0.0);
    var odd = vec4<f32>(0.0);
    if valid {
        if out < params.q_dim {
            even = dot_wq(out, params.dim, first, last, lane);
            odd = dot_wq(out + 1u, params.dim, first, last, lane);
        } else if out < params.q_dim + params.kv_dim {
            even = dot_wk(out - params.q_dim, params.dim, first, last, lane);
            odd = dot_wk(out - params.q_dim + 1u, params.dim, first, last, lane);
        } else {
            even = dot_wv(out - params.q_dim - params.kv_dim, params.dim, first, last, lane);
            odd = dot_wv(out - params.q_dim - params.kv_dim + 1u, params.dim, first, last, lane);
        }
    }
    let even_sums = sum_over_group(even, lid);
    let odd_sums = sum_over_group(odd, lid);
    if !valid || lane != 0u {
        return;
    }

    let hd = params.head_dim;
    let kv_heads = params.kv_dim / hd;
    for (var j = 0u; j < R; j++) {
        let row = first + j;
        if row > last {
            break;
        }
        let position = step.pos + row;
        let a = even_sums[j] * factors[j];
        let b = odd_sums[j] * factors[j];
        if out < params.q_dim {
            let angle = rope[position * (hd >> 1u) + ((out % hd) >> 1u)];
            q[row * params.q_dim + out] = a * angle.x - b * angle.y;
            q[row * params.q_dim + out + 1u] = a * angle.y + b * angle.x;
        } else if out < params.q_dim + params.kv_dim {
            let o = out - params.q_dim;
            let angle = rope[position * (hd >> 1u) + ((o % hd) >> 1u)];
            let at = (position * 2u * kv_heads + o / hd) * hd + o % hd;
            kv[at] = a * angle.x - b * angle.y;
            kv[at + 1u] = a * angle.y + b * angle.x;
        } else {
            let o = out - params.q_dim - params.kv_dim;
            let at = ((position * 2u + 1u) * kv_heads + o / hd) * hd + o % hd;
            kv[at] = a;
            kv[at + 1u] = b;
        }
    }
}
