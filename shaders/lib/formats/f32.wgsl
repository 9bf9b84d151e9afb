// f32.wgsl: unit reader of an F32 weight binding {{W}} (F16 and BF16 tensors are converted to F32
// when they are uploaded). Row `row` of a [rows, cols] matrix, unit u = columns 8u .. 8u + 7.
fn {{W}}_unit(row: u32, unit: u32, cols: u32) -> Unit8 {
    let base = row * cols + unit * 8u;
    let a = vec4<u32>({{W}}[base], {{W}}[base + 1u], {{W}}[base + 2u], {{W}}[base + 3u]);
    let b = vec4<u32>({{W}}[base + 4u], {{W}}[base + 5u], {{W}}[base + 6u], {{W}}[base + 7u]);
    return Unit8(bitcast<vec4<f32>>(a), bitcast<vec4<f32>>(b), unit * 8u, unit * 8u + 4u);
}
