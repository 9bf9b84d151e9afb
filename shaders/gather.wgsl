// gather.wgsl: the values of chosen entries of a row: out[i] = row[ids[ids_at + i]] for
// i < count. The logit lens reads, at every depth, the logits of the tokens it follows (the last
// block's top candidates, which the decode tail's top-k left in `ids`), instead of whole rows
// (crates/kernels/src/layer.rs, `gather`).
//
// Dispatch (ceil(count / WG), 1, 1); one lane per entry.
//
// Buffers:
//   step    uniform StepParams (unused; every layer kernel binds it first)
//   params  uniform GatherParams: `count`, `ids_at`
//   ids     array<u32>: the ids at words ids_at .. ids_at + count (each below the row's length)
//   row     array<f32>: the row
//   out     array<f32> [count]: written
//
// Semantics: reference.rs, `gather`.

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if i >= params.count {
        return;
    }
    out[i] = row[ids[params.ids_at + i]];
}
