// q5_k.wgsl: unit reader of a Q5_K weight binding {{W}}, blocks read in place as GGUF stores them.
// Block (176 bytes = 44 words, 256 weights): d: f16, dmin: f16 (word 0), scales: [u8; 12] (words
// 1..3, read by lib/k_scales.wgsl), qh: [u8; 32] (words 4..11), qs: [u8; 128] (words 12..43).
// Group g (64 weights) uses qs bytes 32g .. 32g + 31: weight 64g + l is
// d·sc[2g]·q − dmin·mn[2g] with q = the low nibble of qs byte l plus 16 times bit 2g of qh[l],
// weight 64g + 32 + l is d·sc[2g+1]·q − dmin·mn[2g+1] with the high nibble and bit 2g + 1.
// Unit u of a row = block u / 32, group (u % 32) / 8, qs and qh word w = u % 8 of the group
// (columns 64g + 4w .. + 3 and 64g + 32 + 4w .. + 3).
fn {{W}}_unit(row: u32, unit: u32, cols: u32) -> Unit8 {
    let block = unit >> 5u;
    let group = (unit >> 3u) & 3u;
    let word = unit & 7u;
    let start = (row * (cols >> 8u) + block) * 44u;
    let dd = unpack2x16float({{W}}[start]);
    let qh = vec4<u32>({{W}}[start + 4u + word]);
    let q = {{W}}[start + 12u + 8u * group + word];
    let lo = {{W}}_scale_min(4u * start, 2u * group);
    let hi = {{W}}_scale_min(4u * start, 2u * group + 1u);
    let shifts = vec4<u32>(0u, 8u, 16u, 24u) + 2u * group;
    let fifth_low = vec4<f32>((qh >> shifts) & vec4<u32>(1u)) * 16.0;
    let fifth_high = vec4<f32>((qh >> (shifts + 1u)) & vec4<u32>(1u)) * 16.0;
    let col = block * 256u + group * 64u + word * 4u;
    return Unit8(
        (dd.x * lo.x) * (low_nibbles(q) + fifth_low) - dd.y * lo.y,
        (dd.x * hi.x) * (high_nibbles(q) + fifth_high) - dd.y * hi.y,
        col,
        col + 32u,
    );
}
