// q5_1.wgsl: unit reader of a Q5_1 weight binding {{W}}, blocks read in place as GGUF stores them.
// Block (24 bytes = 6 words, 32 weights): d: f16, m: f16 (word 0), qh: u32 (word 1), qs: [u8; 16]
// (words 2..5); weight j is q·d + m with q = the low nibble of qs[j] plus 16 times bit j of qh,
// weight j + 16 the high nibble plus 16 times bit j + 16.
// Unit u of a row = block u / 4, qs word w = u % 4 (columns 4w .. 4w + 3 and 16 + 4w .. 16 + 4w + 3).
fn {{W}}_unit(row: u32, unit: u32, cols: u32) -> Unit8 {
    let block = unit >> 2u;
    let word = unit & 3u;
    let start = (row * (cols >> 5u) + block) * 6u;
    let dm = unpack2x16float({{W}}[start]);
    let qh = vec4<u32>({{W}}[start + 1u]);
    let q = {{W}}[start + 2u + word];
    let shifts = vec4<u32>(0u, 1u, 2u, 3u) + 4u * word;
    let fifth_low = vec4<f32>((qh >> shifts) & vec4<u32>(1u)) * 16.0;
    let fifth_high = vec4<f32>((qh >> (shifts + 16u)) & vec4<u32>(1u)) * 16.0;
    let col = block * 32u + word * 4u;
    return Unit8((low_nibbles(q) + fifth_low) * dm.x + dm.y, (high_nibbles(q) + fifth_high) * dm.x + dm.y, col, col + 16u);
}
