// norm_residual.wgsl: a sub-layer's output joining the residual stream through its own RMSNorm,
// x += RMSNorm(y)·γ: Gemma 3's norms after the attention and after the feed-forward, each fused
// with the residual addition it precedes (crates/kernels/src/layer.rs, `norm_residual`). With
// params.replace 1, x = RMSNorm(y)·γ: the normalised input of a Gated DeltaNet block, whose
// four projections read it.
//
// Dispatch (rows, 1, 1): workgroup s does row s. Every lane adds a strided part of the row's
// squares; lane 0 adds the parts in lane order (deterministic); then every lane updates a strided
// part of the row.
//
// Buffers:
//   step    uniform StepParams: `rows`
//   params  uniform NormResidualParams
//   y       array<vec4<f32>> [rows, dim]: the sub-layer's output, read
//   norm    array<vec4<f32>> [dim]: the RMSNorm weight γ
//   x       array<vec4<f32>> [rows, dim]: the residual stream, read and written (written only,
//           with replace)
//
// Semantics (reference.rs, `norm_residual`): x_s += y_s / sqrt(mean(y_s²) + eps) ∘ γ.

var<workgroup> inv_rms: f32;

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.x;
    if row >= step.rows {
        return;
    }
    let cols4 = params.dim >> 2u;
    let base = row * cols4;
    var sum = 0.0;
    for (var c = lid; c < cols4; c += WG) {
        let v = y[base + c];
        sum += dot(v, v);
    }
    group_partials[lid] = vec4<f32>(sum, 0.0, 0.0, 0.0);
    workgroupBarrier();
    if lid == 0u {
        var total = 0.0;
        for (var t = 0u; t < WG; t++) {
            total += group_partials[t].x;
        }
        inv_rms = 1.0 / sqrt(total / f32(params.dim) + params.eps);
    }
    workgroupBarrier();
    let inv = inv_rms;
    for (var c = lid; c < cols4; c += WG) {
        let normed = y[base + c] * inv * norm[c];
        if params.replace != 0u {
            x[base + c] = normed;
        } else {
            x[base + c] += normed;
        }
    }
}
