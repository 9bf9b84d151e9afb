// q4_0.wgsl: unit reader of a Q4_0 weight binding {{W}}, blocks read in place as GGUF stores them.
// Block (18 bytes, 32 weights): d: f16, qs: [u8; 16]; weight j is (low nibble of qs[j] − 8)·d,
// weight j + 16 is (high nibble of qs[j] − 8)·d. Unit u of a row = block u / 4, qs word u % 4:
// its low nibbles are columns 4w .. 4w + 3 of the block, its high nibbles 16 + 4w .. 16 + 4w + 3.
fn {{W}}_unit(row: u32, unit: u32, cols: u32) -> Unit8 {
    let block = unit >> 2u;
    let word = unit & 3u;
    let start = (row * (cols >> 5u) + block) * 18u;
    let d = {{W}}_f16(start);
    let q = {{W}}_u32(start + 2u + 4u * word);
    let col = block * 32u + word * 4u;
    return Unit8((low_nibbles(q) - 8.0) * d, (high_nibbles(q) - 8.0) * d, col, col + 16u);
}
