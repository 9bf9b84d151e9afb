// topk.wgsl: the K largest logits of one row with their ids, sorted descending, ties to the
// lower id. Last kernel of the decode tail (crates/kernels).
//
// Two-pass design: the first pass is pass 0 of softmax_stats.wgsl, which writes, per block of
// 16 ids, the block's largest order key (a per-workgroup partial selection without barriers).
// This kernel is the merge, in one workgroup:
//   1. t = the K-th largest block maximum, by radix select. At least K logits are >= t, so the
//      top K are all >= t. (With fewer than K non-empty blocks, t = 0: every logit.)
//   2. One scan of the blocks whose maximum is >= t: the logits above t ("above") and equal to
//      t ("tied") are counted and kept in workgroup memory (up to 768 and 256 of them).
//   3. The top n = min(K, vocab) is then
//      A. (everything needed is in memory) a radix select over the kept entries by
//         (key descending, id ascending); or
//      B. (too many ties to keep, e.g. a masked row full of -inf or a row of equal values, but
//         fewer than n above t) every "above" entry, plus the n - above lowest tied ids: the
//         chunks of 4096 ids are scanned in order, taking all their ties until the chunk where
//         the count is reached, and a radix select on the id inside that chunk; or
//      C. (more than 768 logits above t) a radix select that re-reads the candidates from
//         the row each round.
//   4. The n selected entries are ranked by counting (one per invocation) and written.
//
// Workgroup size: 256 x 1 x 1. Dispatch: (1, 1, 1).
// Limits: 1 <= K <= 256; ids < 2^24 (vocab <= 16,777,216).
// Barriers, typical row: 1 + 2 per radix round (step 1: <= 4 rounds, step 3A: <= 7) + 3.
//
// Bindings (group 0), index / declaration / layout / use:
//   0  logits       array<u32>  [vocab]   read: the row, as f32 bits
//   1  params       array<u32>  [8]       read
//                     [0] vocab  [1] K  [2] block_count = 256 * ceil(vocab / 4096)  [3..7] reserved (0)
//   2  blocks       array<u32>  [4 * block_count]   read: the block records of softmax_stats.wgsl
//                     pass 0 (word 4b = block b's largest order key, word 4b + 3 = its flags,
//                     bit 0: a NaN logit). Block b = 256 c + l holds ids 4096 c + l + 256 j,
//                     j = 0..15, below vocab.
//   3  destination  array<u32>  [4 + 2K]  the packed result:
//                     [0] flags: |= bit 0 when a logit is NaN (the other bits and words 1..2
//                         belong to softmax_stats.wgsl pass 1, which may share this buffer)
//                     [3] n = min(K, vocab), the number of results
//                     [4 + r]     id of rank r, r < n
//                     [4 + K + r] f32 bits of the logit of rank r (-0.0 comes back as +0.0)
// All bindings are `var<storage, read_write>`, also those only read: the runtime may place
// several small buffers in one wgpu buffer, and a buffer cannot be bound both read-only and
// read-write in one dispatch.
//
// Order: by the order key (a u32 that sorts like the float: -inf < ... < -0 = +0 < ... < +inf;
// NaN sorts outside that range and is flagged), then by id ascending. Every (key, id) is
// distinct, so the result is unique. The radix selects go 8 bits per round, most significant
// first, and stop as soon as the current bin holds exactly the entries still needed.

@group(0) @binding(0) var<storage, read_write> logits: array<u32>;
@group(0) @binding(1) var<storage, read_write> params: array<u32>;
@group(0) @binding(2) var<storage, read_write> blocks: array<u32>;
@group(0) @binding(3) var<storage, read_write> destination: array<u32>;

const WORKGROUP_SIZE: u32 = 256u;
const CHUNK: u32 = 4096u;
const BLOCK_LEN: u32 = 16u;
const MAX_K: u32 = 256u;
const ABOVE_CAPACITY: u32 = 768u;
const TIED_CAPACITY: u32 = 256u;
const HEADER_WORDS: u32 = 4u;
const ID_MASK: u32 = 0xffffffu;
const FLAG_NAN: u32 = 1u;

// Where the entries of a radix select come from.
const SOURCE_MEMORY: u32 = 0u;        // the kept "above" entries, then the kept "tied" ones
const SOURCE_ROW: u32 = 1u;           // the row: logits >= t in blocks whose maximum is >= t
const SOURCE_TIED_IN_CHUNK: u32 = 2u; // the row: logits == t in one chunk of 4096 ids

// Values every invocation needs, made uniform through workgroupUniformLoad.
struct Shared {
    vocab: u32,
    k: u32,
    block_count: u32,
    above: u32,
    tied: u32,
    chunk_tied: u32,
}

struct Selection {
    // Order-key bits fixed so far (the lower, unknown bits are 0).
    key_prefix: u32,
    // Inverted-id bits fixed so far (inverted id = ID_MASK - id).
    inverted_id_prefix: u32,
    // Entries still to select among those matching both prefixes.
    remaining: u32,
    // Digits fixed: 0..4 cover the key, 5..7 the inverted id.
    known_digits: u32,
    // 1 once every entry matching the prefixes is selected.
    done: u32,
}

var<workgroup> shared_values: Shared;
var<workgroup> histograms: array<array<atomic<u32>, 256>, 2>;
var<workgroup> selection: Selection;
var<workgroup> above_count: atomic<u32>;
var<workgroup> tied_count: atomic<u32>;
var<workgroup> above_keys: array<u32, ABOVE_CAPACITY>;
var<workgroup> above_ids: array<u32, ABOVE_CAPACITY>;
var<workgroup> tied_ids: array<u32, TIED_CAPACITY>;
var<workgroup> selected_count: atomic<u32>;
var<workgroup> selected_keys: array<u32, MAX_K>;
var<workgroup> selected_ids: array<u32, MAX_K>;
var<workgroup> nan_seen: atomic<u32>;

// Per-invocation copies of uniform values, for the helper functions.
var<private> vocab: u32;
var<private> block_count: u32;
var<private> threshold: u32;
var<private> kept_above: u32;
var<private> kept_tied: u32;
var<private> tied_chunk: u32;

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

fn key_to_bits(key: u32) -> u32 {
    if (key & 0x80000000u) != 0u {
        return key & 0x7fffffffu;
    }
    return ~key;
}

// Mask of the order-key bits fixed by the first `known_digits` digits.
fn key_mask(known_digits: u32) -> u32 {
    let bits = min(known_digits, 4u) * 8u;
    if bits == 0u {
        return 0u;
    }
    return 0xffffffffu << (32u - bits);
}

// Mask of the inverted-id bits fixed by the first `known_digits` digits.
fn id_mask(known_digits: u32) -> u32 {
    if known_digits <= 4u {
        return 0u;
    }
    let bits = (known_digits - 4u) * 8u;
    return (ID_MASK << (24u - bits)) & ID_MASK;
}

// Digit `d` (0 = most significant) of the composite (key, inverted id).
fn digit(key: u32, inverted_id: u32, d: u32) -> u32 {
    if d < 4u {
        return (key >> (24u - 8u * d)) & 255u;
    }
    return (inverted_id >> (16u - 8u * (d - 4u))) & 255u;
}

// First id of block `b`; its ids are first + 256 j, j < 16.
fn block_first_id(b: u32) -> u32 {
    return (b / WORKGROUP_SIZE) * CHUNK + b % WORKGROUP_SIZE;
}

// Whether the composite matches the digits fixed by `sel` so far.
fn matches_prefix(sel: Selection, key: u32, inverted_id: u32) -> bool {
    return (key & key_mask(sel.known_digits)) == sel.key_prefix
        && (inverted_id & id_mask(sel.known_digits)) == sel.inverted_id_prefix;
}

// Whether the composite is selected once `sel` is done: >= the prefix on the known digits.
fn is_selected(sel: Selection, key: u32, inverted_id: u32) -> bool {
    let key_part = key & key_mask(sel.known_digits);
    let id_part = inverted_id & id_mask(sel.known_digits);
    return key_part > sel.key_prefix
        || (key_part == sel.key_prefix && id_part >= sel.inverted_id_prefix);
}

// Invocation 0, once the histogram of round `d` is complete: the bin where the `remaining`
// largest entries end, and the updated selection.
fn choose_bin(sel: Selection, histogram: u32, d: u32, last_round: u32) -> Selection {
    var above = 0u;
    var bin = 255u;
    loop {
        let count = atomicLoad(&histograms[histogram][bin]);
        if above + count >= sel.remaining || bin == 0u {
            break;
        }
        above += count;
        bin -= 1u;
    }
    let in_bin = atomicLoad(&histograms[histogram][bin]);
    var next = sel;
    if d < 4u {
        next.key_prefix |= bin << (24u - 8u * d);
    } else {
        next.inverted_id_prefix |= bin << (16u - 8u * (d - 4u));
    }
    next.remaining = sel.remaining - above;
    next.known_digits = d + 1u;
    if in_bin == next.remaining || d == last_round {
        next.done = 1u;
    }
    return next;
}

// Adds this invocation's entries of `source` that match `sel` to histogram `h` (round `d`),
// or, with `gather`, appends those selected by `sel` to the selected list.
fn visit(source: u32, sel: Selection, d: u32, h: u32, gather: bool, lid: u32) {
    if source == SOURCE_MEMORY {
        for (var i = lid; i < kept_above + kept_tied; i += WORKGROUP_SIZE) {
            var key = threshold;
            var id = 0u;
            if i < kept_above {
                key = above_keys[i];
                id = above_ids[i];
            } else {
                id = tied_ids[i - kept_above];
            }
            visit_entry(sel, d, h, gather, key, id);
        }
    } else if source == SOURCE_ROW {
        for (var b = lid; b < block_count; b += WORKGROUP_SIZE) {
            if blocks[4u * b] >= threshold {
                let first = block_first_id(b);
                for (var j = 0u; j < BLOCK_LEN; j += 1u) {
                    let id = first + j * WORKGROUP_SIZE;
                    if id >= vocab {
                        break;
                    }
                    let key = order_key(logits[id]);
                    if key >= threshold {
                        visit_entry(sel, d, h, gather, key, id);
                    }
                }
            }
        }
    } else {
        for (var j = 0u; j < BLOCK_LEN; j += 1u) {
            let id = tied_chunk * CHUNK + j * WORKGROUP_SIZE + lid;
            if id < vocab && order_key(logits[id]) == threshold {
                visit_entry(sel, d, h, gather, threshold, id);
            }
        }
    }
}

fn visit_entry(sel: Selection, d: u32, h: u32, gather: bool, key: u32, id: u32) {
    let inverted_id = ID_MASK - id;
    if gather {
        if is_selected(sel, key, inverted_id) {
            append_selected(key, id);
        }
    } else if matches_prefix(sel, key, inverted_id) {
        atomicAdd(&histograms[h][digit(key, inverted_id, d)], 1u);
    }
}

fn append_selected(key: u32, id: u32) {
    let slot = atomicAdd(&selected_count, 1u);
    if slot < MAX_K {
        selected_keys[slot] = key;
        selected_ids[slot] = id;
    }
}

// Radix select of the `wanted` largest entries of `source`, starting at digit `first_digit`
// (4 when the key is already fixed to `threshold`), then appends them to the selected list.
// Called with uniform arguments by every invocation.
fn radix_select(source: u32, wanted: u32, first_digit: u32, lid: u32) {
    var sel = Selection(0u, 0u, wanted, first_digit, 0u);
    if first_digit == 4u {
        sel.key_prefix = threshold;
    }
    for (var d = first_digit; d < 7u; d += 1u) {
        let current = d & 1u;
        // Its last reader (invocation 0) finished before the previous uniform load.
        atomicStore(&histograms[1u - current][lid], 0u);
        visit(source, sel, d, current, false, lid);
        workgroupBarrier();
        if lid == 0u {
            selection = choose_bin(sel, current, d, 6u);
        }
        sel = workgroupUniformLoad(&selection);
        if sel.done != 0u {
            break;
        }
    }
    visit(source, sel, 0u, 0u, true, lid);
}

@compute @workgroup_size(256, 1, 1)
fn main(@builtin(local_invocation_index) lid: u32) {
    if lid == 0u {
        shared_values = Shared(params[0], params[1], params[2], 0u, 0u, 0u);
        atomicStore(&above_count, 0u);
        atomicStore(&tied_count, 0u);
        atomicStore(&selected_count, 0u);
        atomicStore(&nan_seen, 0u);
    }
    atomicStore(&histograms[0][lid], 0u);
    atomicStore(&histograms[1][lid], 0u);
    let uniforms = workgroupUniformLoad(&shared_values);
    vocab = uniforms.vocab;
    block_count = uniforms.block_count;
    let k = uniforms.k;
    // From the uniform load, not the private copies: WGSL's uniformity analysis counts every read
    // of a private variable as non-uniform, and these bound loops that hold barriers.
    let wanted = min(k, uniforms.vocab);

    // Step 1: t = the K-th largest block maximum (keys only, 4 rounds at most).
    var sel = Selection(0u, 0u, k, 0u, 0u);
    for (var d = 0u; d < 4u; d += 1u) {
        let current = d & 1u;
        atomicStore(&histograms[1u - current][lid], 0u);
        for (var b = lid; b < block_count; b += WORKGROUP_SIZE) {
            let key = blocks[4u * b];
            if d == 0u && (blocks[4u * b + 3u] & FLAG_NAN) != 0u {
                atomicOr(&nan_seen, FLAG_NAN);
            }
            if matches_prefix(sel, key, 0u) {
                atomicAdd(&histograms[current][digit(key, 0u, d)], 1u);
            }
        }
        workgroupBarrier();
        if lid == 0u {
            selection = choose_bin(sel, current, d, 3u);
        }
        sel = workgroupUniformLoad(&selection);
        if sel.done != 0u {
            break;
        }
    }
    // With unknown low bits at 0 the prefix is <= the K-th largest block maximum: still a bound.
    threshold = sel.key_prefix;

    // Step 2: count and keep the entries above and at t. (Both histograms are free again: their
    // last reader finished before the uniform load above; step 3 starts from zero.)
    atomicStore(&histograms[0][lid], 0u);
    atomicStore(&histograms[1][lid], 0u);
    for (var b = lid; b < block_count; b += WORKGROUP_SIZE) {
        if blocks[4u * b] >= threshold {
            let first = block_first_id(b);
            for (var j = 0u; j < BLOCK_LEN; j += 1u) {
                let id = first + j * WORKGROUP_SIZE;
                if id >= vocab {
                    break;
                }
                let key = order_key(logits[id]);
                if key > threshold {
                    let slot = atomicAdd(&above_count, 1u);
                    if slot < ABOVE_CAPACITY {
                        above_keys[slot] = key;
                        above_ids[slot] = id;
                    }
                } else if key == threshold {
                    let slot = atomicAdd(&tied_count, 1u);
                    if slot < TIED_CAPACITY {
                        tied_ids[slot] = id;
                    }
                }
            }
        }
    }
    workgroupBarrier();
    if lid == 0u {
        shared_values.above = atomicLoad(&above_count);
        shared_values.tied = atomicLoad(&tied_count);
    }
    let counts = workgroupUniformLoad(&shared_values);
    let above = counts.above;
    let tied = counts.tied;

    // Step 3.
    if above <= ABOVE_CAPACITY && (above >= wanted || tied <= TIED_CAPACITY) {
        // A: in memory. The tied entries matter only when the above ones are too few.
        kept_above = above;
        kept_tied = select(0u, tied, above < wanted);
        radix_select(SOURCE_MEMORY, wanted, 0u, lid);
    } else if above <= ABOVE_CAPACITY {
        // B: all the above entries, then the lowest tied ids, chunk by chunk.
        for (var i = lid; i < above; i += WORKGROUP_SIZE) {
            append_selected(above_keys[i], above_ids[i]);
        }
        var still_wanted = wanted - above;
        let chunk_count = (uniforms.vocab + CHUNK - 1u) / CHUNK;
        for (var chunk = 0u; chunk < chunk_count; chunk += 1u) {
            tied_chunk = chunk;
            for (var j = 0u; j < BLOCK_LEN; j += 1u) {
                let id = chunk * CHUNK + j * WORKGROUP_SIZE + lid;
                if id < vocab && order_key(logits[id]) == threshold {
                    atomicAdd(&tied_count, 1u);
                }
            }
            // tied_count was last read before the previous uniform load: reset it first.
            workgroupBarrier();
            if lid == 0u {
                shared_values.chunk_tied = atomicLoad(&tied_count) - tied;
                atomicStore(&tied_count, tied);
            }
            let in_chunk = workgroupUniformLoad(&shared_values).chunk_tied;
            if in_chunk < still_wanted {
                visit(SOURCE_TIED_IN_CHUNK, Selection(0u, 0u, 0u, 0u, 1u), 0u, 0u, true, lid);
                still_wanted -= in_chunk;
            } else {
                radix_select(SOURCE_TIED_IN_CHUNK, still_wanted, 4u, lid);
                break;
            }
        }
    } else {
        // C: more above entries than fit: read the candidates from the row every round.
        radix_select(SOURCE_ROW, wanted, 0u, lid);
    }
    workgroupBarrier();

    // Step 4: rank by counting; entry `lid` goes after every entry with a larger key, or an
    // equal key and a lower id.
    if lid < wanted {
        let key = selected_keys[lid];
        let id = selected_ids[lid];
        var rank = 0u;
        for (var j = 0u; j < wanted; j += 1u) {
            let other_key = selected_keys[j];
            if other_key > key || (other_key == key && selected_ids[j] < id) {
                rank += 1u;
            }
        }
        destination[HEADER_WORDS + rank] = id;
        destination[HEADER_WORDS + k + rank] = key_to_bits(key);
    }
    if lid == 0u {
        destination[0] = destination[0] | atomicLoad(&nan_seen);
        destination[3] = wanted;
    }
}
