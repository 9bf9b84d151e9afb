// linear.wgsl: y = x Wᵀ, the model's linear layers, for wgpu adapters that run on the CPU
// (SwiftShader in the browser, lavapipe natively; crates/kernels, `linear`).
//
// No workgroup memory and no barriers (CPU drivers emulate barriers at great cost): each
// invocation computes up to 4 rows of one output column, reading that column of W once for the
// 4 rows. Lanes of a workgroup take adjacent columns.
//
// Workgroup size: 64 x 1 x 1. Dispatch: (ceil(outputs / 64), ceil(rows / 4), 1).
//
// Bindings (group 0), index / declaration / layout / use:
//   0  x       array<f32>  [rows, inputs], row-major        read
//   1  weight  array<f32>  layout 0: [outputs, inputs]      read
//                          layout 1: [inputs, outputs]      (both row-major)
//   2  y       array<f32>  [rows, outputs], row-major       written
//   3  params  array<u32>  [4]                              read
//                [0] rows  [1] inputs  [2] outputs  [3] layout (0 or 1)
// Bindings 0, 1 and 3 are `read_write` though only read: the runtime may place small buffers in
// one wgpu buffer, which cannot be bound both read-only and read-write in one dispatch.
//
// Semantics: y[r, o] = Σ_i x[r, i] · W[o, i], summed in f32 in order of increasing i (a driver
// may fuse each multiply-add). The CPU reference (crates/kernels/src/reference.rs, `linear`) sums
// in f64; the parity test allows the rounding bound of an f32 sum.

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> weight: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read_write> params: array<u32>;

const ROWS_PER_INVOCATION: u32 = 4u;

@compute @workgroup_size(64, 1, 1)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let rows = params[0];
    let inputs = params[1];
    let outputs = params[2];
    let column = id.x;
    let first_row = id.y * ROWS_PER_INVOCATION;
    if (column >= outputs || first_row >= rows) {
        return;
    }
    // W[column, i] is at weight_start + i * weight_stride.
    var weight_start = column * inputs;
    var weight_stride = 1u;
    if (params[3] == 1u) {
        weight_start = column;
        weight_stride = outputs;
    }
    let row_count = min(ROWS_PER_INVOCATION, rows - first_row);
    if (row_count == 1u) {
        let x_start = first_row * inputs;
        var sum = 0.0;
        for (var i = 0u; i < inputs; i++) {
            sum = sum + x[x_start + i] * weight[weight_start + i * weight_stride];
        }
        y[first_row * outputs + column] = sum;
        return;
    }
    // Rows past the last are clamped to it: their sums are computed and not written, which keeps
    // the loop free of branches.
    let last_row = rows - 1u;
    let x0 = first_row * inputs;
    let x1 = min(first_row + 1u, last_row) * inputs;
    let x2 = min(first_row + 2u, last_row) * inputs;
    let x3 = min(first_row + 3u, last_row) * inputs;
    var sums = vec4<f32>(0.0);
    for (var i = 0u; i < inputs; i++) {
        let w = weight[weight_start + i * weight_stride];
        sums = sums + vec4<f32>(x[x0 + i], x[x1 + i], x[x2 + i], x[x3 + i]) * w;
    }
    for (var r = 0u; r < row_count; r++) {
        y[(first_row + r) * outputs + column] = sums[r];
    }
}
