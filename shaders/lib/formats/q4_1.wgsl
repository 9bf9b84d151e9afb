// q4_1.wgsl: unit reader of a Q4_1 weight binding {{W}}, blocks read in place as GGUF stores them.
// Block (20 bytes = 5 words, 32 weights): d: f16, m: f16 (word 0), qs: [u8; 16] (words 1..4);
// weight j is (low nibble of qs[j])·d + m, weight j + 16 is (high nibble of qs[j])·d + m.
// Unit u of a row = block u / 4, qs word u % 4 (columns 4w .. 4w + 3 and 16 + 4w .. 16 + 4w + 3).
fn {{W}}_unit(row: u32, unit: u32, cols: u32) -> Unit8 {
    let block = unit >> 2u;
    let word = unit & 3u;
    let start = (row * (cols >> 5u) + block) * 5u;
    let dm = unpack2x16float({{W}}[start]);
    let q = {{W}}[start + 1u + word];
    let col = block * 32u + word * 4u;
    return Unit8(low_nibbles(q) * dm.x + dm.y, high_nibbles(q) * dm.x + dm.y, col, col + 16u);
}
