// embed.wgsl: the token embedding. x[s] = row ids[s] of the embedding table, dequantized and
// multiplied by params.scale (√dim for Gemma, else 1; the table stays in its GGUF format; any
// format of formats/*.wgsl). First kernel of a forward pass on the fused path
// (crates/kernels/src/layer.rs, `embed`, has the bindings and parameters). A table larger than
// one binding is held in parts of consecutive rows, one dispatch each: this dispatch writes the
// rows of the ids in first .. first + count and leaves the others to the other parts.
//
// Dispatch (ceil(dim / 8 / WG), rows, 1): lane g of the grid's x dimension writes unit g (eight
// values) of row s = workgroup_id.y.
//
// Buffers:
//   step    uniform StepParams: `rows` rows this pass
//   ids     array<u32> [rows]: the token ids (< vocab, checked by the host)
//   table   rows first .. first + count of the embedding table [vocab, dim] in its weight format
//   x       array<vec4<f32>> [rows, dim]: written
// Semantics: exactly the dequantization of crates/gguf (crates/kernels/src/reference/layer.rs, `embed`).

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.y;
    let unit = gid.x;
    if row >= step.rows || unit >= (params.dim >> 3u) {
        return;
    }
    let id = ids[row];
    if id < params.first || id - params.first >= params.count {
        return;
    }
    let w = table_unit(id - params.first, unit, params.dim);
    let base = row * params.dim;
    x[(base + w.col_a) >> 2u] = w.a * params.scale;
    x[(base + w.col_b) >> 2u] = w.b * params.scale;
}
