// lm_head.wgsl: the end of a forward pass: RMSNorm of the residual stream and the output layer,
// into the logits (crates/kernels/src/layer/lm_head.rs). The decode tail (logit_adjust.wgsl,
// softmax_stats.wgsl, topk.wgsl) then reads the logits where this kernel leaves them.
//
// Work: a group of TPR lanes computes one vocabulary entry v for R rows of x; GROUPS groups per
// workgroup. Only the rows step.logit_row .. step.logit_row + step.logit_rows − 1 of x (usually
// the last one) make logits. An output layer larger than one binding is held in parts of
// consecutive rows, one dispatch each: this one computes the entries first .. first + count.
// Dispatch (ceil(count / GROUPS), ceil(logit_rows / R), 1).
//
// Buffers:
//   step    uniform StepParams: `logit_row`, `logit_rows`
//   params  uniform LmHeadParams
//   x       array<vec4<f32>> [rows, dim]: the residual stream, read
//   norm    array<vec4<f32>> [dim]: the final RMSNorm weight γ
//   w       rows first .. first + count of the output layer [vocab, dim] in its weight format (the
//           token embedding when the model ties them)
//   logits  array<f32> [logit_rows, vocab]: written; row r is x row logit_row + r
//
// Semantics: reference.rs, `lm_head` (RMSNorm computed as in attn_qkv.wgsl).

fn load_raw(row: u32, col4: u32) -> vec4<f32> {
    return x[row * (params.dim >> 2u) + col4];
}

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let first = step.logit_row + wid.y * R;
    let last = step.logit_row + step.logit_rows - 1u;
    let factors = normalize_rows(first, last, params.dim, params.eps, lid);
    let entry = wid.x * GROUPS + lid / TPR;
    let lane = lid % TPR;
    let valid = entry < params.count;
    var sums = vec4<f32>(0.0);
    if valid {
        sums = dot_w(entry, params.dim, first, last, lane);
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
        logits[(row - step.logit_row) * params.vocab + params.first + entry] = totals[j] * factors[j];
    }
}
