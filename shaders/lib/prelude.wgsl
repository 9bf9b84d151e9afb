// prelude.wgsl: helpers shared by the layer kernels (crates/kernels/src/wgsl). The shader
// builder puts in front of this file the constants of the adapter's tuning (`WG` lanes per
// workgroup, `TPR` lanes per output row, `R` x-rows per lane group) and the parameter structs,
// all generated from their Rust definitions; after it, the weight readers of each weight binding
// and the kernel itself.

// Lane groups per workgroup: each group of TPR lanes computes one output row.
const GROUPS: u32 = WG / TPR;

// Eight weights of one row, dequantized: `a` holds the weights of columns col_a .. col_a + 3,
// `b` those of col_b .. col_b + 3 (both multiples of 4). Every weight format hands its rows out in
// such units (see formats/*.wgsl), so the matrix kernels are written once for all formats.
struct Unit8 {
    a: vec4<f32>,
    b: vec4<f32>,
    col_a: u32,
    col_b: u32,
}

// The 4 low / high nibbles of the 4 bytes of `word`, byte 0 first.
fn low_nibbles(word: u32) -> vec4<f32> {
    return vec4<f32>(vec4<u32>(word, word >> 8u, word >> 16u, word >> 24u) & vec4<u32>(15u));
}

fn high_nibbles(word: u32) -> vec4<f32> {
    return vec4<f32>(vec4<u32>(word >> 4u, word >> 12u, word >> 20u, word >> 28u) & vec4<u32>(15u));
}

// The 4 bytes of `word` as signed 8-bit integers, byte 0 first.
fn signed_bytes(word: u32) -> vec4<f32> {
    let shifted = vec4<u32>(word) << vec4<u32>(24u, 16u, 8u, 0u);
    return vec4<f32>(bitcast<vec4<i32>>(shifted) >> vec4<u32>(24u));
}

// Per-lane partial sums of the (up to 4) rows, combined across the TPR lanes of each group.
var<workgroup> group_partials: array<vec4<f32>, WG>;

// The sums of `sums` (component j: x row first + j) over the TPR lanes of the calling lane's
// group, valid in the group's first lane (lane % TPR == 0). Every lane of the workgroup must call
// it (it holds barriers when TPR > 1). Lanes are added in order, so the result does not depend
// on timing.
fn sum_over_group(sums: vec4<f32>, lid: u32) -> vec4<f32> {
    if TPR == 1u {
        return sums;
    }
    group_partials[lid] = sums;
    workgroupBarrier();
    var total = vec4<f32>(0.0);
    if lid % TPR == 0u {
        for (var t = 0u; t < TPR; t++) {
            total += group_partials[lid + t];
        }
    }
    workgroupBarrier();
    return total;
}

// The row of the KV cache that holds position `position`: a local block's ring of `ring` rows
// keeps it at `position mod ring` (crates/model/src/window.rs), every other block at `position`.
fn cache_row(position: u32, ring: u32) -> u32 {
    return select(position, position % ring, ring > 0u);
}
