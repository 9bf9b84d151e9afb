// q5_0.wgsl: unit reader of a Q5_0 weight binding {{W}}, blocks read in place as GGUF stores them.
// Block (22 bytes, 32 weights; blocks start on even bytes only): d: f16, qh: u32 (bytes 2..5),
// qs: [u8; 16] (bytes 6..21); weight j is (q − 16)·d with q = the low nibble of qs[j] plus 16 times
// bit j of qh, weight j + 16 the high nibble of qs[j] plus 16 times bit j + 16.
// Unit u of a row = block u / 4, qs bytes 4w .. 4w + 3 with w = u % 4 (columns 4w .. 4w + 3 and
// 16 + 4w .. 16 + 4w + 3).
fn {{W}}_unit(row: u32, unit: u32, cols: u32) -> Unit8 {
    let block = unit >> 2u;
    let word = unit & 3u;
    let start = (row * (cols >> 5u) + block) * 22u;
    let d = {{W}}_f16(start);
    let qh = vec4<u32>({{W}}_u32(start + 2u));
    let q = {{W}}_u32(start + 6u + 4u * word);
    let shifts = vec4<u32>(0u, 1u, 2u, 3u) + 4u * word;
    let fifth_low = vec4<f32>((qh >> shifts) & vec4<u32>(1u)) * 16.0;
    let fifth_high = vec4<f32>((qh >> (shifts + 16u)) & vec4<u32>(1u)) * 16.0;
    let col = block * 32u + word * 4u;
    return Unit8((low_nibbles(q) + fifth_low - 16.0) * d, (high_nibbles(q) + fifth_high - 16.0) * d, col, col + 16u);
}
