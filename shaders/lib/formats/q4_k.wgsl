// q4_k.wgsl: unit reader of a Q4_K weight binding {{W}}, blocks read in place as GGUF stores them.
// Block (144 bytes = 36 words, 256 weights): d: f16, dmin: f16 (word 0), scales: [u8; 12]
// (words 1..3: eight 6-bit scales and mins, packed as in llama.cpp's get_scale_min_k4),
// qs: [u8; 128] (words 4..35). Group g (64 weights) uses qs bytes 32g .. 32g + 31: weight
// 64g + l is d·sc[2g]·(low nibble of byte l) − dmin·mn[2g], weight 64g + 32 + l is
// d·sc[2g+1]·(high nibble) − dmin·mn[2g+1]. Unit u of a row = block u / 32, group (u % 32) / 8,
// qs word w = u % 8 of the group (columns 64g + 4w .. + 3 and 64g + 32 + 4w .. + 3). The scales
// and mins are read by lib/k_scales.wgsl.

fn {{W}}_unit(row: u32, unit: u32, cols: u32) -> Unit8 {
    let block = unit >> 5u;
    let group = (unit >> 3u) & 3u;
    let word = unit & 7u;
    let start = (row * (cols >> 8u) + block) * 36u;
    let dd = unpack2x16float({{W}}[start]);
    let q = {{W}}[start + 4u + 8u * group + word];
    let lo = {{W}}_scale_min(4u * start, 2u * group);
    let hi = {{W}}_scale_min(4u * start, 2u * group + 1u);
    let col = block * 256u + group * 64u + word * 4u;
    return Unit8(
        (dd.x * lo.x) * low_nibbles(q) - dd.y * lo.y,
        (dd.x * hi.x) * high_nibbles(q) - dd.y * hi.y,
        col,
        col + 32u,
    );
}
