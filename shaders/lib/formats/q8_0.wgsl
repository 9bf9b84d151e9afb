// q8_0.wgsl: unit reader of a Q8_0 weight binding {{W}}, blocks read in place as GGUF stores them.
// Block (34 bytes, 32 weights): d: f16, qs: [i8; 32]; weight j is qs[j]·d.
// Unit u of a row = block u / 4, weights 8·(u % 4) .. 8·(u % 4) + 7.
fn {{W}}_unit(row: u32, unit: u32, cols: u32) -> Unit8 {
    let block = unit >> 2u;
    let part = unit & 3u;
    let start = (row * (cols >> 5u) + block) * 34u;
    let d = {{W}}_f16(start);
    let q = {{W}}_u64(start + 2u + 8u * part);
    let col = block * 32u + part * 8u;
    return Unit8(signed_bytes(q.x) * d, signed_bytes(q.y) * d, col, col + 4u);
}
