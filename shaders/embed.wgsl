// embed.wgsl: the token embedding. x[s] = row ids[s] of the embedding table, dequantized (the
// table stays in its GGUF format; any format of formats/*.wgsl). First kernel of a forward pass
// on the fused path (crates/kernels/src/layer.rs, `embed`, has the bindings and parameters).
//
// Dispatch (ceil(dim / 8 / WG), rows, 1): lane g of the grid's x dimension writes unit g (eight
// values) of row s = workgroup_id.y.
//
// Buffers:
//   step    uniform StepParams: `rows` rows this pass
//   ids     array<u32> [rows]: the token ids (< vocab, checked by the host)
//   table   the embedding table [vocab, dim] in its weight format
//   x       array<vec4<f32>> [rows, dim]: written
// Semantics: exactly the dequantization of crates/gguf (crates/kernels/src/reference/layer.rs, `embed`).

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.y;
    let unit = gid.x;
    if row >= step.rows || unit >= (params.dim >> 3u) {
        return;
    }
    let w = table_unit(ids[row], unit, params.dim);
    let base = row * params.dim;
    x[(base + w.col_a) >> 2u] = w.a;
    x[(base + w.col_b) >> 2u] = w.b;
}
