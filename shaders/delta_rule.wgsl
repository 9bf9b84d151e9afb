// delta_rule.wgsl: the rest of a Gated DeltaNet block (Qwen3.5) after its convolution: the L2
// norms of its queries and keys, its gates, the gated delta rule over the state of each value
// head, and the gated RMSNorm of the output (crates/kernels/src/layer.rs, `delta_rule`).
//
// Work: workgroup h computes value head h, which reads key head h mod key_heads. Row by row
// (the state carries from one row to the next): the lanes load the row's query and key into
// workgroup memory and add their squares; lane 0 makes the row's factors; then lane l updates
// the state's columns c ≡ l (mod WG), each a column of head_dim values read and written once, and
// writes the column's output; lane 0 adds the outputs' squares for the norm, and every lane
// finishes its columns. Barriers between the steps, none under a lane-dependent branch.
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
// Semantics (reference.rs, `delta_rule`), per row t and value head h (key head i):
//   q = q_i / sqrt(Σ q_i² + eps) · scale; k = k_i / sqrt(Σ k_i² + eps);
//   β = sigmoid(beta[t][h]); d = exp(a[h] · softplus(alpha[t][h] + dt_bias[h]));
//   S ← d·S; δ = β·(v − Sᵀk); S ← S + k δᵀ; o = Sᵀq;
//   out = o / sqrt(mean(o²) + eps) ∘ γ ∘ silu(z[t][h]).

var<workgroup> query_key: array<f32, 2 * MAX_HEAD_DIM>;
// The row's factors: the query's (with the scale) and the key's inverse norms, the decay, β;
// then the output's inverse RMS in x.
var<workgroup> factors: vec4<f32>;

fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        return x;
    }
    return log(1.0 + exp(x));
}

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let h = wid.x;
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
