// rms.wgsl: the RMSNorm of the input rows, for the kernels that fuse RMSNorm into the matrix
// product after it. The kernel names its input `x` (read through its `load_raw(row, col4)`, the
// vec4 of raw input at row `row`, columns 4·col4 .. 4·col4 + 3) and the RMSNorm weight `norm`.
//
// `normalize_rows` computes inv_rms(x) = 1 / sqrt(mean(x²) + eps) of the workgroup's R rows once
// (component j for x row first + j): every lane adds a strided part of each row, then lane 0 adds
// the parts in lane order (deterministic). Then, when STAGE_COLS4 > 0 (the shader builder's choice: the rows fit in
// workgroup memory), the rows are normalised there once, h = x · inv_rms · γ as in the reference,
// and `load_x` reads them from workgroup memory; otherwise `load_x` reads x and γ from their
// buffers and returns x · γ, and the caller multiplies each finished sum by inv_rms
// (RMSNorm(x)·γ·W = inv_rms · (x∘γ)·W). Every lane must call `normalize_rows` (barriers).

var<workgroup> rms_factors: vec4<f32>;
var<workgroup> staged: array<vec4<f32>, STAGE_LEN>;
// The first x row of the workgroup's R rows (staged row j is x row staged_first + j).
var<private> staged_first: u32;

// The factors to multiply each row's finished sums by: inv_rms, or 1 when the rows are staged
// (already normalised).
fn normalize_rows(first: u32, last: u32, cols: u32, eps: f32, lid: u32) -> vec4<f32> {
    let cols4 = cols >> 2u;
    var sums = vec4<f32>(0.0);
    for (var j = 0u; j < R; j++) {
        let row = min(first + j, last);
        var sum = 0.0;
        for (var c = lid; c < cols4; c += WG) {
            let v = load_raw(row, c);
            sum += dot(v, v);
        }
        sums[j] = sum;
    }
    group_partials[lid] = sums;
    workgroupBarrier();
    if lid == 0u {
        var total = vec4<f32>(0.0);
        for (var t = 0u; t < WG; t++) {
            total += group_partials[t];
        }
        rms_factors = 1.0 / sqrt(total / f32(cols) + eps);
    }
    workgroupBarrier();
    if STAGE_COLS4 == 0u {
        return rms_factors;
    }
    staged_first = first;
    for (var j = 0u; j < R; j++) {
        let row = min(first + j, last);
        let inv = rms_factors[j];
        for (var c = lid; c < cols4; c += WG) {
            staged[j * STAGE_COLS4 + c] = load_raw(row, c) * inv * norm[c];
        }
    }
    workgroupBarrier();
    return vec4<f32>(1.0);
}

fn load_x(row: u32, col4: u32) -> vec4<f32> {
    if STAGE_COLS4 > 0u {
        return staged[(row - staged_first) * STAGE_COLS4 + col4];
    }
    return load_raw(row, col4) * norm[col4];
}
