// row_dot.wgsl: the matrix kernels' inner loop for the weight binding {{W}}. Instantiated once per
// weight binding; the kernel defines `load_x(row, col4)`, the vec4 of its (possibly normalised)
// input at x row `row`, columns 4·col4 .. 4·col4 + 3.
//
// Partial dot products of weight row `row` (`cols` columns) with the x rows first .. first+R-1
// (R is 1 or 4; rows past `last` read row `last`: their sums are computed and not used), over the
// units lane, lane + TPR, lane + 2·TPR, ... of the row; component j of the result is x row
// first + j's. sum_over_group adds the TPR lanes' parts. Each unit's eight products are summed as
// two f32 dot products, units in increasing order. The accumulators are one vec4 (not an array
// indexed in a loop), so that every driver keeps them in registers.
fn dot_{{W}}(row: u32, cols: u32, first: u32, last: u32, lane: u32) -> vec4<f32> {
    let r0 = min(first, last);
    let r1 = min(first + 1u, last);
    let r2 = min(first + 2u, last);
    let r3 = min(first + 3u, last);
    var sums = vec4<f32>(0.0);
    let units = cols >> 3u;
    for (var u = lane; u < units; u += TPR) {
        let w = {{W}}_unit(row, u, cols);
        let ca = w.col_a >> 2u;
        let cb = w.col_b >> 2u;
        if R == 1u {
            sums.x += dot(w.a, load_x(r0, ca)) + dot(w.b, load_x(r0, cb));
        } else {
            sums += vec4<f32>(
                dot(w.a, load_x(r0, ca)) + dot(w.b, load_x(r0, cb)),
                dot(w.a, load_x(r1, ca)) + dot(w.b, load_x(r1, cb)),
                dot(w.a, load_x(r2, ca)) + dot(w.b, load_x(r2, cb)),
                dot(w.a, load_x(r3, ca)) + dot(w.b, load_x(r3, cb)),
            );
        }
    }
    return sums;
}
