// logit_adjust.wgsl: sparse per-token adjustments and an optional allow-mask, applied in place
// to one row of logits. First kernel of the decode tail (crates/kernels).
//
// Workgroup size: 256 x 1 x 1. Dispatch: any number of workgroups in x (grid-stride loops);
// the host dispatches min(ceil(max(adjustment_count, mask_word_count) / 256), 1024).
//
// Bindings (group 0), index / declaration / layout / use:
//   0  logits       array<f32>  [vocab]   the row; read and written in place
//   1  params       array<u32>  [4]       read
//                     [0] vocab            number of logits
//                     [1] adjustment_count number of 5-word entries in `adjustments`
//                     [2] has_mask         1: `allow_mask` is applied; 0: it is ignored
//                     [3] reserved (0)
//   2  adjustments  array<u32>  [5 * max(adjustment_count, 1)]   read
//                     entry e, words 5e .. 5e+4:
//                     [+0] token id (u32, < vocab, each id at most once)
//                     [+1] bias               f32 bits, added first:      v1 = v + bias
//                     [+2] scale_positive     f32 bits, if v1 > 0:        v2 = v1 * scale_positive
//                     [+3] scale_non_positive f32 bits, otherwise:        v2 = v1 * scale_non_positive
//                     [+4] offset             f32 bits, added last:       v3 = v2 + offset
//   3  allow_mask   array<u32>  [ceil(vocab / 32)] (1 word when unused)   read
//                     bit (id % 32) of word (id / 32): 1 = allowed, 0 = the logit becomes -inf.
// All bindings are `var<storage, read_write>`, also those only read: the runtime may place
// several small buffers in one wgpu buffer, and a buffer cannot be bound both read-only and
// read-write in one dispatch.
//
// Semantics, identical to the CPU reference (crates/kernels/src/reference.rs):
// - Arithmetic is IEEE f32 with each operation rounded separately. Infinities and NaN follow IEEE
//   rules, implemented with bit tests so that a driver's finite-math assumptions cannot change
//   them: -inf stays -inf, -inf + +inf is NaN, NaN stays NaN. Scales are finite and > 0 (the host
//   validates them); bias and offset are finite or -inf.
// - A disallowed token becomes -inf, except when its value is NaN or +inf: those are kept so that
//   the softmax kernel reports them instead of the mask hiding a broken row.
// - A disallowed token's adjustment is skipped (its result would be replaced by -inf anyway), so
//   every logit is written by at most one invocation.

@group(0) @binding(0) var<storage, read_write> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> params: array<u32>;
@group(0) @binding(2) var<storage, read_write> adjustments: array<u32>;
@group(0) @binding(3) var<storage, read_write> allow_mask: array<u32>;

const WORKGROUP_SIZE: u32 = 256u;
const POS_INF_BITS: u32 = 0x7f800000u;
// -inf and NaN are made from their bits at run time, through private variables: WGSL forbids a
// constant expression whose value is not finite, and Tint (Chrome's WebGPU) enforces it on
// `bitcast<f32>(constant)`, where naga (native wgpu) lets it pass.
var<private> neg_inf_bits: u32 = 0xff800000u;
var<private> nan_bits: u32 = 0x7fc00000u;

fn is_nan_bits(bits: u32) -> bool {
    return (bits & 0x7fffffffu) > POS_INF_BITS;
}

fn is_inf_bits(bits: u32) -> bool {
    return (bits & 0x7fffffffu) == POS_INF_BITS;
}

// a + b with IEEE special values decided on the bits.
fn ieee_add(a: f32, b: f32) -> f32 {
    let a_bits = bitcast<u32>(a);
    let b_bits = bitcast<u32>(b);
    if is_nan_bits(a_bits) || is_nan_bits(b_bits) {
        return bitcast<f32>(nan_bits);
    }
    if is_inf_bits(a_bits) {
        if is_inf_bits(b_bits) && a_bits != b_bits {
            return bitcast<f32>(nan_bits);
        }
        return a;
    }
    if is_inf_bits(b_bits) {
        return b;
    }
    return a + b;
}

// a * scale for a finite scale > 0: infinities and NaN pass through unchanged.
fn ieee_scale(a: f32, scale: f32) -> f32 {
    let a_bits = bitcast<u32>(a);
    if is_nan_bits(a_bits) || is_inf_bits(a_bits) {
        return a;
    }
    return a * scale;
}

fn is_allowed(id: u32) -> bool {
    return ((allow_mask[id >> 5u] >> (id & 31u)) & 1u) != 0u;
}

@compute @workgroup_size(256, 1, 1)
fn main(
    @builtin(global_invocation_id) global_id: vec3<u32>,
    @builtin(num_workgroups) num_workgroups: vec3<u32>,
) {
    let vocab = params[0];
    let adjustment_count = params[1];
    let has_mask = params[2] != 0u;
    let stride = num_workgroups.x * WORKGROUP_SIZE;

    // Adjustments: one entry per invocation (grid-stride).
    for (var e = global_id.x; e < adjustment_count; e += stride) {
        let id = adjustments[5u * e];
        if id >= vocab || (has_mask && !is_allowed(id)) {
            continue;
        }
        let bias = bitcast<f32>(adjustments[5u * e + 1u]);
        let scale_positive = bitcast<f32>(adjustments[5u * e + 2u]);
        let scale_non_positive = bitcast<f32>(adjustments[5u * e + 3u]);
        let offset = bitcast<f32>(adjustments[5u * e + 4u]);

        let biased = ieee_add(logits[id], bias);
        var scale = scale_non_positive;
        if biased > 0.0 {
            scale = scale_positive;
        }
        let scaled = ieee_scale(biased, scale);
        logits[id] = ieee_add(scaled, offset);
    }

    // Mask: one 32-token word per invocation (grid-stride).
    if has_mask {
        let word_count = (vocab + 31u) / 32u;
        for (var w = global_id.x; w < word_count; w += stride) {
            let word = allow_mask[w];
            if word == 0xffffffffu {
                continue;
            }
            let first = w * 32u;
            let last = min(first + 32u, vocab);
            for (var id = first; id < last; id += 1u) {
                if ((word >> (id - first)) & 1u) == 0u {
                    let bits = bitcast<u32>(logits[id]);
                    if !is_nan_bits(bits) && bits != POS_INF_BITS {
                        logits[id] = bitcast<f32>(neg_inf_bits);
                    }
                }
            }
        }
    }
}
