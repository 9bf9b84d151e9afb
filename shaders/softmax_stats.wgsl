// softmax_stats.wgsl: numerically stable softmax statistics with temperature over one row of
// logits, and optionally the probabilities. Second kernel of the decode tail (crates/kernels).
//
// One entry point, three passes selected by the dispatch's z size: pass = z - 1. (The pass must
// be uniform for the barriers of pass 1, and the uniformity analysis accepts a builtin but not a
// value read from a read_write buffer.) Only the workgroups with workgroup_id.z = 0 work; the
// others return at once.
//   pass 0 (block summaries): every invocation summarises one block of 16 ids (see "Blocks")
//                             into a 4-word record. No barriers. Dispatch (ceil(vocab / 4096), 1, 1).
//   pass 1 (combine):         one workgroup combines the records into the row's flags, max and
//                             sum of exponentials. 2 barriers. Dispatch (1, 1, 2).
//   pass 2 (probabilities):   p[i] = exp((x_i - m) * inv_T) / S, one id per invocation
//                             (grid-stride). No barriers. Dispatch (min(ceil(vocab / 256), 64), 1, 3).
// The decode tail runs passes 0 and 1; topk.wgsl reuses the block records of pass 0.
//
// Workgroup size: 256 x 1 x 1 in every pass.
//
// Blocks: the row is cut into chunks of 4096 ids; block b = 256 c + l (chunk c, lane l) holds
// the ids 4096 c + l + 256 j, j = 0..15, that are < vocab (the last chunk's blocks may hold
// fewer, or none). block_count = 256 * ceil(vocab / 4096). Invocation l of workgroup c of pass 0
// owns block 256 c + l, so its loads are coalesced across the workgroup.
//
// Bindings (group 0), index / declaration / layout / use:
//   0  logits         array<f32>  [vocab]                 read (passes 0, 2)
//   1  params         array<u32>  [8]                     read
//                       [0] reserved (0)   [1] vocab (> 0)
//                       [2] inv_temperature: f32 bits of 1 / T (finite, > 0)
//                       [3] block_count = 256 * ceil(vocab / 4096)   [4..7] reserved (0)
//   2  blocks         array<u32>  [4 * block_count]       written by pass 0, read by pass 1
//                       record b, words 4b .. 4b+3:
//                       [+0] max_key: largest order key of the block's non-NaN logits (see
//                            topk.wgsl), 0 when the block is empty or all NaN
//                       [+1] m_b: largest finite logit of the block (f32 bits; 0 if none)
//                       [+2] s_b: sum over the block's finite x of exp((x - m_b) * inv_T) (f32 bits)
//                       [+3] flags: bit 0 NaN, bit 1 +inf, bit 3 the block has a finite logit
//   3  stats          array<u32>  [>= 3]                  words 0..2 written by pass 1 (invocation
//                                                         0), read by pass 2
//                       [0] flags: bit 0 = a logit is NaN, bit 1 = a logit is +inf,
//                           bit 2 = no logit is finite (all -inf). 0 = valid row.
//                       [1] m: the largest finite logit (unscaled), f32 bits (-0.0 as +0.0)
//                       [2] S: sum over finite logits x of exp((x - m) * inv_T), f32 bits
//                       (word 3 and beyond belong to the caller: the decode tail packs the top-k
//                       result behind these words in the same buffer, see topk.wgsl)
//   4  probabilities  array<f32>  [vocab] (1 word when unused)   written by pass 2 when flags = 0
// All bindings are `var<storage, read_write>`, also those only read: the runtime may place
// several small buffers in one wgpu buffer, and a buffer cannot be bound both read-only and
// read-write in one dispatch.
//
// With these, log p(x) = (x - m) * inv_T - ln S for any logit x of the row: the host turns a
// top-k candidate into its exact full-vocabulary probability without reading the row. S is
// combined as sum_b s_b * exp((m_b - m) * inv_T), all in f32: s_b over at most 16 terms, each
// invocation's ceil(block_count / 256) blocks in order, then the 256 partial sums in groups of
// 16. A fixed order, so the result is deterministic; relative error ~1e-7 (tests: < 1e-6).
// Special values are decided on the bits (a driver may assume finite math): -inf contributes 0,
// NaN and +inf set a flag, and -0.0 is an ordinary zero.

@group(0) @binding(0) var<storage, read_write> logits: array<f32>;
@group(0) @binding(1) var<storage, read_write> params: array<u32>;
@group(0) @binding(2) var<storage, read_write> blocks: array<u32>;
@group(0) @binding(3) var<storage, read_write> stats: array<u32>;
@group(0) @binding(4) var<storage, read_write> probabilities: array<f32>;

const WORKGROUP_SIZE: u32 = 256u;
const CHUNK: u32 = 4096u;
const BLOCK_LEN: u32 = 16u;
const NEG_INF_BITS: u32 = 0xff800000u;
const POS_INF_BITS: u32 = 0x7f800000u;

const FLAG_NAN: u32 = 1u;
const FLAG_POS_INF: u32 = 2u;
const FLAG_NO_FINITE: u32 = 4u;
const SEEN_FINITE: u32 = 8u;

struct RowState {
    flags: u32,
    max: f32,
    sum: f32,
}

var<workgroup> partial_max: array<f32, WORKGROUP_SIZE>;
var<workgroup> partial_flags: array<u32, WORKGROUP_SIZE>;
var<workgroup> partial_sum: array<f32, WORKGROUP_SIZE>;
var<workgroup> row_state: RowState;

fn is_nan_bits(bits: u32) -> bool {
    return (bits & 0x7fffffffu) > POS_INF_BITS;
}

// The order key of topk.wgsl: a u32 that sorts like the float, -0.0 mapped to +0.0.
fn order_key(bits: u32) -> u32 {
    var b = bits;
    if b == 0x80000000u {
        b = 0u;
    }
    if (b & 0x80000000u) != 0u {
        return ~b;
    }
    return b | 0x80000000u;
}

// exp((x - m) * inv_T) of a logit given by its bits; 0 for -inf.
fn shifted_exp(bits: u32, m: f32, inv_temperature: f32) -> f32 {
    if bits == NEG_INF_BITS {
        return 0.0;
    }
    return exp((bitcast<f32>(bits) - m) * inv_temperature);
}

fn key_to_f32(key: u32) -> f32 {
    if (key & 0x80000000u) != 0u {
        return bitcast<f32>(key & 0x7fffffffu);
    }
    return bitcast<f32>(~key);
}

// Pass 0 for one block. Straight-line over 16 registers (no data-dependent branches): the
// largest finite value is found as the largest order key of the finite values, so no float
// comparison meets an infinity.
fn summarise_block(block: u32, vocab: u32, inv_temperature: f32) {
    let first = (block / WORKGROUP_SIZE) * CHUNK + block % WORKGROUP_SIZE;
    var values: array<u32, BLOCK_LEN>;
    var count = 0u;
    if first < vocab {
        count = min(BLOCK_LEN, (vocab - first + WORKGROUP_SIZE - 1u) / WORKGROUP_SIZE);
    }
    for (var j = 0u; j < BLOCK_LEN; j += 1u) {
        // Missing ids read as -inf, which changes neither the sum nor a non-empty block's keys.
        values[j] = NEG_INF_BITS;
        if j < count {
            values[j] = bitcast<u32>(logits[first + j * WORKGROUP_SIZE]);
        }
    }
    var flags = 0u;
    var max_key = 0u;
    var finite_max_key = 0u;
    for (var j = 0u; j < BLOCK_LEN; j += 1u) {
        let bits = values[j];
        let nan = is_nan_bits(bits);
        let key = order_key(bits);
        let finite = !nan && (bits & 0x7fffffffu) != POS_INF_BITS;
        flags |= select(0u, FLAG_NAN, nan) | select(0u, FLAG_POS_INF, bits == POS_INF_BITS);
        max_key = max(max_key, select(key, 0u, nan));
        finite_max_key = max(finite_max_key, select(0u, key, finite));
    }
    var block_max = 0.0;
    var block_sum = 0.0;
    if finite_max_key != 0u {
        flags |= SEEN_FINITE;
        block_max = key_to_f32(finite_max_key);
        for (var j = 0u; j < BLOCK_LEN; j += 1u) {
            let bits = values[j];
            let finite = (bits & 0x7fffffffu) < POS_INF_BITS;
            let term = exp((bitcast<f32>(bits) - block_max) * inv_temperature);
            block_sum += select(0.0, term, finite);
        }
    }
    if count == 0u {
        max_key = 0u;
    }
    blocks[4u * block] = max_key;
    blocks[4u * block + 1u] = bitcast<u32>(block_max);
    blocks[4u * block + 2u] = bitcast<u32>(block_sum);
    blocks[4u * block + 3u] = flags;
}

@compute @workgroup_size(256, 1, 1)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(global_invocation_id) global_id: vec3<u32>,
    @builtin(num_workgroups) num_workgroups: vec3<u32>,
    @builtin(workgroup_id) workgroup_id: vec3<u32>,
) {
    if workgroup_id.z != 0u {
        return;
    }
    let pass_index = num_workgroups.z - 1u;
    let vocab = params[1];
    let inv_temperature = bitcast<f32>(params[2]);
    let block_count = params[3];

    if pass_index == 0u {
        if global_id.x < block_count {
            summarise_block(global_id.x, vocab, inv_temperature);
        }
        return;
    }

    if pass_index == 2u {
        // No early return on a value read from storage: WGSL's uniformity analysis would then
        // count everything after this pass as non-uniform, barriers included (Tint rejects it).
        if stats[0] == 0u {
            let m = bitcast<f32>(stats[1]);
            let sum = bitcast<f32>(stats[2]);
            let stride = num_workgroups.x * WORKGROUP_SIZE;
            for (var i = global_id.x; i < vocab; i += stride) {
                probabilities[i] = shifted_exp(bitcast<u32>(logits[i]), m, inv_temperature) / sum;
            }
        }
        return;
    }

    // Pass 1 (one workgroup; every invocation reaches here, so the barriers are uniform).
    var flags = 0u;
    var local_max = 0.0;
    for (var b = lid; b < block_count; b += WORKGROUP_SIZE) {
        let block_flags = blocks[4u * b + 3u];
        if (block_flags & SEEN_FINITE) != 0u {
            let block_max = bitcast<f32>(blocks[4u * b + 1u]);
            if (flags & SEEN_FINITE) == 0u {
                local_max = block_max;
            } else {
                local_max = max(local_max, block_max);
            }
        }
        flags |= block_flags;
    }
    partial_max[lid] = local_max;
    partial_flags[lid] = flags;
    workgroupBarrier();

    if lid == 0u {
        var row_flags = 0u;
        var row_max = 0.0;
        for (var t = 0u; t < WORKGROUP_SIZE; t += 1u) {
            let f = partial_flags[t];
            if (f & SEEN_FINITE) != 0u {
                if (row_flags & SEEN_FINITE) == 0u {
                    row_max = partial_max[t];
                } else {
                    row_max = max(row_max, partial_max[t]);
                }
            }
            row_flags |= f;
        }
        if (row_flags & SEEN_FINITE) == 0u {
            row_flags |= FLAG_NO_FINITE;
        }
        row_state.flags = row_flags & ~SEEN_FINITE;
        row_state.max = row_max;
        row_state.sum = 0.0;
    }
    let state = workgroupUniformLoad(&row_state);
    if state.flags != 0u {
        if lid == 0u {
            stats[0] = state.flags;
            stats[1] = bitcast<u32>(state.max);
            stats[2] = 0u;
        }
        return;
    }

    var local_sum = 0.0;
    for (var b = lid; b < block_count; b += WORKGROUP_SIZE) {
        if (blocks[4u * b + 3u] & SEEN_FINITE) != 0u {
            let block_max = bitcast<f32>(blocks[4u * b + 1u]);
            let block_sum = bitcast<f32>(blocks[4u * b + 2u]);
            local_sum += block_sum * exp((block_max - state.max) * inv_temperature);
        }
    }
    partial_sum[lid] = local_sum;
    workgroupBarrier();

    if lid == 0u {
        var total = 0.0;
        for (var t = 0u; t < WORKGROUP_SIZE; t += 16u) {
            var sixteen = 0.0;
            for (var u = t; u < t + 16u; u += 1u) {
                sixteen += partial_sum[u];
            }
            total += sixteen;
        }
        stats[0] = 0u;
        stats[1] = bitcast<u32>(state.max);
        stats[2] = bitcast<u32>(total);
    }
}
