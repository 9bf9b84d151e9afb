// reduce.wgsl: workgroup reductions for the kernels that give a workgroup one row (score.wgsl,
// attention_weights.wgsl): a tree over the WG lanes (WG a power of two, at most 256), in a fixed
// order, so the result does not depend on timing. Every lane must call them with its own value
// (they hold barriers) and every lane gets the total.

var<workgroup> reduce_scratch: array<f32, WG>;

fn workgroup_max(lid: u32, value: f32) -> f32 {
    reduce_scratch[lid] = value;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if lid < s {
            reduce_scratch[lid] = max(reduce_scratch[lid], reduce_scratch[lid + s]);
        }
        workgroupBarrier();
    }
    let total = reduce_scratch[0];
    workgroupBarrier();
    return total;
}

fn workgroup_sum(lid: u32, value: f32) -> f32 {
    reduce_scratch[lid] = value;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if lid < s {
            reduce_scratch[lid] += reduce_scratch[lid + s];
        }
        workgroupBarrier();
    }
    let total = reduce_scratch[0];
    workgroupBarrier();
    return total;
}
