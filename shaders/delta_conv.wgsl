// delta_conv.wgsl: the short causal convolution of a Gated DeltaNet block (Qwen3.5) and its
// SiLU, over the pass's rows in order, from and into the block's convolution state
// (crates/kernels/src/layer.rs, `delta_conv`).
//
// Work: lane c owns channel c; it keeps the channel's last kernel − 1 inputs in registers and
// walks the rows (the work per row is kernel multiply-adds: the rows are few and cheap next to the
// projections around it). No barriers.
// Dispatch (ceil(channels / WG), 1, 1).
//
// Buffers:
//   step     uniform StepParams: `rows`
//   params   uniform DeltaConvParams
//   weights  array<f32> [channels, kernel]: each channel's taps, oldest input first
//   state    array<f32> [kernel − 1, channels]: the inputs before the pass, oldest first (zeros
//            at a sequence's start); read, then replaced by the pass's last kernel − 1 inputs
//   mixed    array<f32> [rows, channels]: the input projection's outputs, replaced by the outputs
//
// Semantics (reference.rs, `delta_conv`), with u_t the input at row t (u_{−1}, … from the state):
//   mixed[t][c] = silu(Σ_j weights[c][j] · u_{t − kernel + 1 + j}[c]), silu(s) = s / (1 + e^−s).

const MAX_CONV_KERNEL: u32 = 8u;

@compute @workgroup_size(WG, 1, 1)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let c = wid.x * WG + lid;
    if c >= params.channels {
        return;
    }
    let channels = params.channels;
    let history = params.kernel - 1u;
    let taps = c * params.kernel;
    // window[j]: the input j + 1 − kernel rows before the current one.
    var window: array<f32, MAX_CONV_KERNEL>;
    for (var j = 0u; j < history; j++) {
        window[j] = state[j * channels + c];
    }
    for (var t = 0u; t < step.rows; t++) {
        let u = mixed[t * channels + c];
        var sum = 0.0;
        for (var j = 0u; j < history; j++) {
            sum += weights[taps + j] * window[j];
        }
        sum += weights[taps + history] * u;
        for (var j = 0u; j + 1u < history; j++) {
            window[j] = window[j + 1u];
        }
        if history > 0u {
            window[history - 1u] = u;
        }
        mixed[t * channels + c] = sum / (1.0 + exp(-sum));
    }
    for (var j = 0u; j < history; j++) {
        state[j * channels + c] = window[j];
    }
}
