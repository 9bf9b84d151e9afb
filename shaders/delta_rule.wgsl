// delta_rule.wgsl: the rest of a Gated DeltaNet block (Qwen3.5) after its convolution: the L2
// norms of its queries and keys, its gates, the gated delta rule over the state of each value
// head, and the gated RMSNorm of the output (crates/kernels/src/layer.rs, `delta_rule`).
//
// Two forms of the rule, one per pipeline. The many-row pipeline (a prompt's pass, R > 1) takes
// the pass's rows through the state in chunks of CHUNK rows, in the chunked (WY) form (as
// transformers' `torch_chunk_gated_delta_rule` and the CPU engine's `delta_rule_chunked`): the
// state is read and written once per chunk, not once per row, and within a chunk the rows are
// one triangular solve. The one-row pipeline (a decode step) takes the row form, where a chunk
// of one would only add work (2.3x slower on lavapipe and SwiftShader, `layer_bench delta`).
//
// Work: workgroup h computes value head h, which reads key head h mod key_heads.
// The row form: the lanes load the row's query and key into workgroup memory and add their
// squares; lane 0 makes the row's factors; then lane l updates the state's columns c ≡ l
// (mod WG), each read and written once, and writes the column's output; the gated RMSNorm after
// a workgroup reduction.
// The chunked form, per chunk:
// lanes t, CHUNK + t and 2·CHUNK + t make row t's query norm, key norm and gates; lane 0 adds
// the log-decays up; the lanes make the chunk's key·key and query·key products; then lane l,
// for each of its columns c ≡ l (mod WG) of the state: reads the column once (what it recalls
// for every row's key and query), solves for the rows' δ, writes the rows' outputs, and writes
// the column back once; last, the gated RMSNorm of the chunk's rows, four rows per workgroup
// reduction. Barriers only where the whole workgroup is (the chunk loop's bounds are uniform).
// Dispatch (value_heads, 1, 1).
//
// Buffers:
//   step     uniform StepParams: `rows`
//   params   uniform DeltaRuleParams
//   mixed    array<f32> [rows, channels]: delta_conv's output per row: queries
//            [key_heads · head_dim], keys [key_heads · head_dim], values [value_heads · head_dim]
//   z        array<f32> [rows, value_heads · head_dim]: the output gate's projection
//   beta     array<f32> [rows, value_heads]: the write strength's projection (before its sigmoid)
//   alpha    array<f32> [rows, value_heads]: the decay's projection
//   vectors  array<f32>: dt_bias [value_heads], a [value_heads] (−exp(A_log), as the file
//            stores it), the output norm's γ [head_dim]
//   state    array<f32> [value_heads, head_dim, head_dim]: S[i][c] of head h at
//            (h · head_dim + i) · head_dim + c (key dimension i, value dimension c); read and
//            written
//   out      array<f32> [rows, value_heads · head_dim]: written
//
// Semantics (reference.rs, `delta_rule`, the rule a row at a time), per row t and value head h
// (key head i):
//   q = q_i / sqrt(Σ q_i² + eps) · scale; k = k_i / sqrt(Σ k_i² + eps);
//   β = sigmoid(beta[t][h]); g = a[h] · softplus(alpha[t][h] + dt_bias[h]) (the log of the decay);
//   S ← e^g·S; δ = β·(v − Sᵀk); S ← S + k δᵀ; o = Sᵀq;
//   out = o / sqrt(mean(o²) + eps) ∘ γ ∘ silu(z[t][h]).
// Computed by chunks: with G_t the sum of g over the chunk's rows up to t and S₀ the state before
// it, δ_t = β_t(v_t − e^{G_t}S₀ᵀk_t) − Σ_{s<t} β_t e^{G_t−G_s}(k_t·k_s) δ_s;
// o_t = e^{G_t}S₀ᵀq_t + Σ_{s≤t} e^{G_t−G_s}(q_t·k_s) δ_s; S ← e^{G_L}S₀ + Σ_s e^{G_L−G_s} k_s δ_sᵀ.
// Every exponent is ≤ 0 (g ≤ 0), so nothing overflows.

// The chunked form's row t of the chunk: the inverse norms of its query (times the scale) and its key, its
// cumulative log-decay G_t and its β.
var<workgroup> query_norms: array<f32, CHUNK>;
var<workgroup> key_norms: array<f32, CHUNK>;
var<workgroup> log_decays: array<f32, CHUNK>;
var<workgroup> betas: array<f32, CHUNK>;
// [t · CHUNK + s] for s ≤ t: k_t·k_s and q_t·k_s, of the normalised rows.
var<workgroup> key_dots: array<f32, CHUNK * CHUNK>;
var<workgroup> query_dots: array<f32, CHUNK * CHUNK>;
// The inverse RMS of four output rows.
var<workgroup> output_norms: vec4<f32>;

// The row form's query and key, and its factors: the query's (with the scale) and the key's
// inverse norms, the decay, β; then the output's inverse RMS in x.
var<workgroup> query_key: array<f32, 2 * MAX_HEAD_DIM>;
var<workgroup> factors: vec4<f32>;

fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        return x;
    }
    return log(1.0 + exp(x));
}

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    if R == 1u {
        row_form(lid, wid.x);
    } else {
        chunk_form(lid, wid.x);
    }
}

// A decode step's row (the one-row pipeline): all lanes add the squares, one row at a time.
fn row_form(lid: u32, h: u32) {
    let hd = params.head_dim;
    let key_width = params.key_heads * hd;
    let value_width = params.value_heads * hd;
    let channels = 2u * key_width + value_width;
    let key_head = h % params.key_heads;
    let matrix = h * hd * hd;
    for (var t = 0u; t < step.rows; t++) {
        let row = t * channels;
        var squares = vec4<f32>(0.0);
        for (var d = lid; d < hd; d += WG) {
            let q = mixed[row + key_head * hd + d];
            let k = mixed[row + key_width + key_head * hd + d];
            query_key[d] = q;
            query_key[MAX_HEAD_DIM + d] = k;
            squares += vec4<f32>(q * q, k * k, 0.0, 0.0);
        }
        group_partials[lid] = squares;
        workgroupBarrier();
        if lid == 0u {
            var total = vec4<f32>(0.0);
            for (var l = 0u; l < WG; l++) {
                total += group_partials[l];
            }
            let gates = t * params.value_heads + h;
            let decay = exp(vectors[params.value_heads + h] * softplus(alpha[gates] + vectors[h]));
            factors = vec4<f32>(
                params.scale / sqrt(total.x + params.eps),
                1.0 / sqrt(total.y + params.eps),
                decay,
                1.0 / (1.0 + exp(-beta[gates])),
            );
        }
        workgroupBarrier();
        let f = factors;
        var out_squares = 0.0;
        for (var c = lid; c < hd; c += WG) {
            // What the decayed state recalls for the key.
            var recalled = 0.0;
            for (var i = 0u; i < hd; i++) {
                recalled += state[matrix + i * hd + c] * query_key[MAX_HEAD_DIM + i];
            }
            recalled *= f.y * f.z;
            let delta = f.w * (mixed[row + 2u * key_width + h * hd + c] - recalled);
            var o = 0.0;
            for (var i = 0u; i < hd; i++) {
                let at = matrix + i * hd + c;
                let s = state[at] * f.z + query_key[MAX_HEAD_DIM + i] * f.y * delta;
                state[at] = s;
                o += s * query_key[i];
            }
            o *= f.x;
            out[t * value_width + h * hd + c] = o;
            out_squares += o * o;
        }
        workgroupBarrier();
        group_partials[lid] = vec4<f32>(out_squares, 0.0, 0.0, 0.0);
        workgroupBarrier();
        if lid == 0u {
            var total = 0.0;
            for (var l = 0u; l < WG; l++) {
                total += group_partials[l].x;
            }
            factors.x = 1.0 / sqrt(total / f32(hd) + params.eps);
        }
        workgroupBarrier();
        let inv = factors.x;
        let gamma_at = 2u * params.value_heads;
        for (var c = lid; c < hd; c += WG) {
            let at = t * value_width + h * hd + c;
            let gate = z[at];
            out[at] = out[at] * inv * vectors[gamma_at + c] * gate / (1.0 + exp(-gate));
        }
        workgroupBarrier();
    }
}

// A pass of several rows (the many-row pipeline): the chunked form.
fn chunk_form(lid: u32, h: u32) {
    let hd = params.head_dim;
    let key_width = params.key_heads * hd;
    let value_width = params.value_heads * hd;
    let channels = 2u * key_width + value_width;
    let query_at = (h % params.key_heads) * hd;
    let key_at = key_width + query_at;
    let value_at = 2u * key_width + h * hd;
    let matrix = h * hd * hd;
    for (var first = 0u; first < step.rows; first += CHUNK) {
        let len = min(CHUNK, step.rows - first);

        // Each row's norms and gates, a lane each.
        let t = lid % CHUNK;
        let task = lid / CHUNK;
        if task < 3u && t < len {
            let row = (first + t) * channels;
            if task < 2u {
                let at = row + select(query_at, key_at, task == 1u);
                var sum = 0.0;
                for (var i = 0u; i < hd; i++) {
                    let x = mixed[at + i];
                    sum += x * x;
                }
                let inv = 1.0 / sqrt(sum + params.eps);
                if task == 0u {
                    query_norms[t] = inv * params.scale;
                } else {
                    key_norms[t] = inv;
                }
            } else {
                let gates = (first + t) * params.value_heads + h;
                log_decays[t] = vectors[params.value_heads + h] * softplus(alpha[gates] + vectors[h]);
                betas[t] = 1.0 / (1.0 + exp(-beta[gates]));
            }
        }
        workgroupBarrier();
        if lid == 0u {
            for (var r = 1u; r < len; r++) {
                log_decays[r] += log_decays[r - 1u];
            }
        }
        // The chunk's key·key and query·key products.
        for (var e = lid; e < CHUNK * CHUNK; e += WG) {
            let r = e / CHUNK;
            let s = e % CHUNK;
            if r < len && s <= r {
                let row = (first + r) * channels;
                let other = (first + s) * channels + key_at;
                var kk = 0.0;
                var qk = 0.0;
                for (var i = 0u; i < hd; i++) {
                    let k = mixed[other + i];
                    kk += mixed[row + key_at + i] * k;
                    qk += mixed[row + query_at + i] * k;
                }
                key_dots[e] = kk * key_norms[r] * key_norms[s];
                query_dots[e] = qk * query_norms[r] * key_norms[s];
            }
        }
        workgroupBarrier();

        let last_decay = log_decays[len - 1u];
        for (var c = lid; c < hd; c += WG) {
            // S₀ᵀk_t and S₀ᵀq_t for every row, the state's column read once. (Each array is
            // zeroed by an explicit initializer: in Chromium a declaration without one, inside
            // the loop, kept the previous chunk's sums, and the tiny model's 122-token prompt
            // was off by 7.6 while lavapipe and SwiftShader under naga were right.)
            var recalled = array<f32, CHUNK>();
            var read = array<f32, CHUNK>();
            for (var i = 0u; i < hd; i++) {
                let s = state[matrix + i * hd + c];
                for (var r = 0u; r < len; r++) {
                    let row = (first + r) * channels;
                    recalled[r] += s * mixed[row + key_at + i];
                    read[r] += s * mixed[row + query_at + i];
                }
            }
            // The rows' δ, a forward substitution.
            var delta = array<f32, CHUNK>();
            for (var r = 0u; r < len; r++) {
                let decay = log_decays[r];
                let v = mixed[(first + r) * channels + value_at + c];
                var d = v - exp(decay) * recalled[r] * key_norms[r];
                for (var s = 0u; s < r; s++) {
                    d -= exp(decay - log_decays[s]) * key_dots[r * CHUNK + s] * delta[s];
                }
                delta[r] = betas[r] * d;
            }
            // The rows' outputs.
            var weights = array<f32, CHUNK>();
            for (var r = 0u; r < len; r++) {
                let decay = log_decays[r];
                var o = exp(decay) * read[r] * query_norms[r];
                for (var s = 0u; s <= r; s++) {
                    o += exp(decay - log_decays[s]) * query_dots[r * CHUNK + s] * delta[s];
                }
                out[(first + r) * value_width + h * hd + c] = o;
                weights[r] = exp(last_decay - decay) * key_norms[r] * delta[r];
            }
            // The column after the chunk, written once.
            let kept = exp(last_decay);
            for (var i = 0u; i < hd; i++) {
                let at = matrix + i * hd + c;
                var s = state[at] * kept;
                for (var r = 0u; r < len; r++) {
                    s += mixed[(first + r) * channels + key_at + i] * weights[r];
                }
                state[at] = s;
            }
        }

        // The gated RMSNorm of the chunk's rows, four at a time; each lane reads back only the
        // columns it wrote.
        let gamma_at = 2u * params.value_heads;
        for (var r4 = 0u; r4 < len; r4 += 4u) {
            var squares = vec4<f32>(0.0);
            for (var c = lid; c < hd; c += WG) {
                for (var j = 0u; j < 4u; j++) {
                    if r4 + j < len {
                        let o = out[(first + r4 + j) * value_width + h * hd + c];
                        squares[j] += o * o;
                    }
                }
            }
            group_partials[lid] = squares;
            workgroupBarrier();
            if lid == 0u {
                var total = vec4<f32>(0.0);
                for (var l = 0u; l < WG; l++) {
                    total += group_partials[l];
                }
                output_norms = 1.0 / sqrt(total / f32(hd) + params.eps);
            }
            workgroupBarrier();
            let inv = output_norms;
            for (var c = lid; c < hd; c += WG) {
                for (var j = 0u; j < 4u; j++) {
                    if r4 + j < len {
                        let at = (first + r4 + j) * value_width + h * hd + c;
                        let gate = z[at];
                        out[at] = out[at] * inv[j] * vectors[gamma_at + c] * gate / (1.0 + exp(-gate));
                    }
                }
            }
            workgroupBarrier();
        }
    }
}
