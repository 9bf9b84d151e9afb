// ffn_gate_up.wgsl: the first half of a gated feed-forward: RMSNorm of the residual stream, the
// gate and up projections, and act(gate)·up, in one dispatch (crates/kernels/src/layer.rs); act is
// SiLU (SwiGLU: Llama, Qwen) or GELU in its tanh form (GeGLU: Gemma), by params.activation.
//
// Work: a group of TPR lanes computes hidden unit j (a row of w_gate and of w_up) for R rows of
// x; GROUPS groups per workgroup. Dispatch (ceil(hidden / GROUPS), ceil(rows / R), 1).
//
// Buffers:
//   step    uniform StepParams: `rows`
//   params  uniform FfnParams
//   x       array<vec4<f32>> [rows, dim]: the residual stream, read
//   norm    array<vec4<f32>> [dim]: the RMSNorm weight γ
//   w_gate, w_up  [hidden, dim] in their weight formats
//   h       array<f32> [rows, hidden]: written
//
// Semantics (reference.rs, `ffn_gate_up`): g, u = the two projections of RMSNorm(x)·γ (computed
// as in attn_qkv.wgsl); h = act(g)·u with
//   activation 0: silu(g) = g / (1 + exp(−g)) (exp's argument capped at 80: beyond it the
//                 quotient is 0 to f32 precision, and no infinity is made);
//   activation 1: gelu(g) = 0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³))), tanh written with exp of a
//                 negative argument, so that no infinity is made either.

const ACTIVATION_SILU: u32 = 0u;

fn act(g: f32) -> f32 {
    if params.activation == ACTIVATION_SILU {
        return g / (1.0 + exp(min(-g, 80.0)));
    }
    let inner = 0.7978845608028654 * (g + 0.044715 * g * g * g);
    let e = exp(-2.0 * abs(inner));
    let tanh_inner = sign(inner) * (1.0 - e) / (1.0 + e);
    return 0.5 * g * (1.0 + tanh_inner);
}

fn load_raw(row: u32, col4: u32) -> vec4<f32> {
    return x[row * (params.dim >> 2u) + col4];
}

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let first = wid.y * R;
    let last = step.rows - 1u;
    let factors = normalize_rows(first, last, params.dim, params.eps, lid);
    let unit = wid.x * GROUPS + lid / TPR;
    let lane = lid % TPR;
    let valid = unit < params.hidden;
    var gate = vec4<f32>(0.0);
    var up = vec4<f32>(0.0);
    if valid {
        gate = dot_w_gate(unit, params.dim, first, last, lane);
        up = dot_w_up(unit, params.dim, first, last, lane);
    }
    let gates = sum_over_group(gate, lid);
    let ups = sum_over_group(up, lid);
    if !valid || lane != 0u {
        return;
    }
    for (var j = 0u; j < R; j++) {
        let row = first + j;
        if row > last {
            break;
        }
        let g = gates[j] * factors[j];
        let u = ups[j] * factors[j];
        h[row * params.hidden + unit] = act(g) * u;
    }
}
