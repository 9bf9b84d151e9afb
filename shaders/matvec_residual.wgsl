// matvec_residual.wgsl: a projection added to the residual stream, x += a·Wᵀ: the attention's
// output projection and the feed-forward's down projection (crates/kernels/src/layer.rs). With
// params.accumulate = 0 it writes x = a·Wᵀ instead: the sub-layer's output, which a family with
// norms after its sub-layers (Gemma 3) normalises before adding it (norm_residual.wgsl).
//
// Work: a group of TPR lanes computes one output o for R rows of a; GROUPS groups per workgroup.
// Dispatch (ceil(outputs / GROUPS), ceil(rows / R), 1).
//
// Buffers:
//   step    uniform StepParams: `rows`
//   params  uniform MatvecParams
//   a       array<vec4<f32>> [rows, inputs]: read
//   w       [outputs, inputs] in its weight format
//   x       array<f32> [rows, outputs]: x[s, o] += Σ_k w[o, k]·a[s, k] (or = with accumulate 0)
//
// Semantics: reference.rs, `matvec_residual`.

fn load_x(row: u32, col4: u32) -> vec4<f32> {
    return a[row * (params.inputs >> 2u) + col4];
}

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let first = wid.y * R;
    let last = step.rows - 1u;
    let out = wid.x * GROUPS + lid / TPR;
    let lane = lid % TPR;
    let valid = out < params.outputs;
    var sums = vec4<f32>(0.0);
    if valid {
        sums = dot_w(out, params.inputs, first, last, lane);
    }
    let totals = sum_over_group(sums, lid);
    if !valid || lane != 0u {
        return;
    }
    for (var j = 0u; j < R; j++) {
        let row = first + j;
        if row > last {
            break;
        }
        if params.accumulate != 0u {
            x[row * params.outputs + out] += totals[j];
        } else {
            x[row * params.outputs + out] = totals[j];
        }
    }
}
