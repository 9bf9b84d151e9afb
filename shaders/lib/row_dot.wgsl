// row_dot.wgsl: the matrix kernels' inner loop for the weight binding {{W}}. Instantiated once per
// weight binding; the kernel defines `load_x(row, col4)`, the vec4 of its (possibly normalised)
// input at x row `row`, columns 4·col4 .. 4·col4 + 3.
//
// Partial dot products of weight row `row` (`cols` columns) with the x rows first .. first+R-1
// (rows past `last` read row `last`: their sums are computed and not used), over the units
// lane, lane + TPR, lane + 2·TPR, ... of the row; sum_over_group adds the TPR lanes' parts.
// Each unit's eight products are summed as two f32 dot products, units in increasing order.
fn dot_{{W}}(row: u32, cols: u32, first: u32, last: u32, lane: u32) -> array<f32, R> {
    var rows: array<u32, R>;
    for (var j = 0u; j < R; j++) {
        rows[j] = min(first + j, last);
    }
    var sums: array<f32, R>;
    let units = cols >> 3u;
    for (var u = lane; u < units; u += TPR) {
        let w = {{W}}_unit(row, u, cols);
        let ca = w.col_a >> 2u;
        let cb = w.col_b >> 2u;
        for (var j = 0u; j < R; j++) {
            sums[j] += dot(w.a, load_x(rows[j], ca)) + dot(w.b, load_x(rows[j], cb));
        }
    }
    return sums;
}
