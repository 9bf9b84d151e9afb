// score.wgsl: what a text's logits say about each of its tokens (crates/kernels/src/score.rs):
// per row of logits, the log-sum-exp, the logit and rank of the token that follows the row's
// position in the text, and the row's top k. Scoring a text reads back these records, never
// the rows (crates/kernels/src/layer.rs, `score`).
//
// Work: workgroup r takes logit row r (text position step.pos + step.logit_row + r). Lane l
// reads the entries j ≡ l (mod WG) twice: first for the row's maximum and its own top k (a
// sorted list in private memory, ids ascending along its walk, so an equal value never
// displaces an earlier one), then for Σ exp(x − max), Σ exp(x − max)·(x − max) (the entropy's)
// and the count of entries ranked above the following token. Workgroup reductions make the totals; k rounds of an arg-max over the lanes'
// list heads merge the lists (each round's winner moves its lane's head on). Lane 0 writes.
// Dispatch (logit_rows, 1, 1). WG is a power of two.
//
// Buffers:
//   step     uniform StepParams: `pos`, `logit_row`, `logit_rows`
//   params   uniform ScoreParams: `vocab`, `first` (the text position of record 0), `k`
//   targets  array<u32>: per text position from `first`, the token after it (0xffffffff: none)
//   logits   array<f32> [logit_rows, vocab]: read
//   out      array<u32> [positions, 4 + 2k]: per position from `first`, written:
//            [log_sum_exp (f32 bits), the following token's logit (f32 bits), its rank (0: no
//            following token), the row's entropy (f32 bits)], then k pairs (id, logit bits),
//            best first
//
// Semantics (reference.rs, `score_row`): log_sum_exp = m + ln Σ exp(x − m); the rank of token t
// is 1 + #{j : x_j > x_t or (x_j = x_t and j < t)}; the top list is the k largest, ties to the
// lower id; the entropy (nats) of the softmax is ln S − (Σ e·(x − m)) / S with e = exp(x − m),
// S = Σ e (a -inf logit adds nothing).

const NO_ID: u32 = 0xffffffffu;

// -inf made at run time from its bits (a constant bitcast is refused by some compilers).
var<private> neg_inf_bits: u32 = 0xff800000u;

// The top k's merge: each lane's list head (value, id), reduced to the best.
var<workgroup> reduce_values: array<f32, WG>;
var<workgroup> reduce_ids: array<u32, WG>;

// Whether (a, a_id) comes before (b, b_id): the larger value, ties to the lower id.
fn before(a: f32, a_id: u32, b: f32, b_id: u32) -> bool {
    return a > b || (a == b && a_id < b_id);
}

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let neg_inf = bitcast<f32>(neg_inf_bits);
    let row = wid.x;
    let base = row * params.vocab;
    let at = step.pos + step.logit_row + row - params.first;
    let next = targets[at];
    let k = params.k;

    // Pass 1: the lane's maximum and its own top k.
    var top_values = array<f32, MAX_K>();
    var top_ids = array<u32, MAX_K>();
    for (var i = 0u; i < MAX_K; i++) {
        top_values[i] = neg_inf;
        top_ids[i] = NO_ID;
    }
    var lane_max = neg_inf;
    for (var j = lid; j < params.vocab; j += WG) {
        let x = logits[base + j];
        lane_max = max(lane_max, x);
        if k > 0u && x > top_values[k - 1u] {
            var p = k - 1u;
            while p > 0u && top_values[p - 1u] < x {
                top_values[p] = top_values[p - 1u];
                top_ids[p] = top_ids[p - 1u];
                p -= 1u;
            }
            top_values[p] = x;
            top_ids[p] = j;
        }
    }
    let m = workgroup_max(lid, lane_max);

    // Pass 2: Σ exp(x − m) and the entries ranked above the following token.
    var next_logit = 0.0;
    if next != NO_ID {
        next_logit = logits[base + next];
    }
    var sum = 0.0;
    var weighted = 0.0;
    var above = 0u;
    for (var j = lid; j < params.vocab; j += WG) {
        let x = logits[base + j];
        let e = exp(x - m);
        sum += e;
        if e > 0.0 {
            weighted += e * (x - m);
        }
        if next != NO_ID && (x > next_logit || (x == next_logit && j < next)) {
            above += 1u;
        }
    }
    let total = workgroup_sum(lid, sum);
    let total_weighted = workgroup_sum(lid, weighted);
    // Counts below 2^24 (every vocabulary here) are exact in f32.
    let total_above = u32(workgroup_sum(lid, f32(above)));
    let record = at * (4u + 2u * k);
    if lid == 0u {
        out[record] = bitcast<u32>(m + log(total));
        out[record + 1u] = bitcast<u32>(next_logit);
        out[record + 2u] = select(0u, total_above + 1u, next != NO_ID);
        out[record + 3u] = bitcast<u32>(log(total) - total_weighted / total);
    }

    // The top k: k rounds of an arg-max over the lanes' list heads.
    var head = 0u;
    for (var round = 0u; round < k; round++) {
        var value = neg_inf;
        var id = NO_ID;
        if head < k {
            value = top_values[head];
            id = top_ids[head];
        }
        reduce_values[lid] = value;
        reduce_ids[lid] = id;
        workgroupBarrier();
        for (var s = WG / 2u; s > 0u; s >>= 1u) {
            if lid < s && before(reduce_values[lid + s], reduce_ids[lid + s], reduce_values[lid], reduce_ids[lid]) {
                reduce_values[lid] = reduce_values[lid + s];
                reduce_ids[lid] = reduce_ids[lid + s];
            }
            workgroupBarrier();
        }
        let winner = reduce_ids[0];
        if lid == 0u {
            out[record + 4u + 2u * round] = winner;
            out[record + 5u + 2u * round] = bitcast<u32>(reduce_values[0]);
        }
        if id == winner && id != NO_ID {
            head += 1u;
        }
        workgroupBarrier();
    }
}
