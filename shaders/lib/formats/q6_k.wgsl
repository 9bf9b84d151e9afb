// q6_k.wgsl: unit reader of a Q6_K weight binding {{W}}, blocks read in place as GGUF stores them.
// Block (210 bytes, 256 weights): ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16 (at 208).
// Half h (128 weights) uses ql[64h ..], qh[32h ..], scales[8h ..]; its weight 32q + l (quarter
// q < 4, l < 32) is d·scales[8h + l/16 + 2q]·(q6 − 32), with q6 = the low (q < 2) or high (q ≥ 2)
// nibble of ql[64h + 32·(q % 2) + l] and bits 2q, 2q+1 of qh[32h + l] above it.
// Unit u of a row = block u / 32, half ((u % 32) / 16), quarter ((u / 4) % 4), and run u % 4:
// l = 8·run .. 8·run + 7, eight consecutive columns.
fn {{W}}_unit(row: u32, unit: u32, cols: u32) -> Unit8 {
    let block = unit >> 5u;
    let half = (unit >> 4u) & 1u;
    let quarter = (unit >> 2u) & 3u;
    let run = unit & 3u;
    let start = (row * (cols >> 8u) + block) * 210u;
    let ql = start + 64u * half + 32u * (quarter & 1u) + 8u * run;
    let qh = start + 128u + 32u * half + 8u * run;
    let low_shift = 4u * (quarter >> 1u);
    let high_shift = 2u * quarter;
    let low = {{W}}_u64(ql);
    let high = {{W}}_u64(qh);
    let q0 = ((low.x >> low_shift) & 0x0f0f0f0fu) | (((high.x >> high_shift) & 0x03030303u) << 4u);
    let q1 = ((low.y >> low_shift) & 0x0f0f0f0fu) | (((high.y >> high_shift) & 0x03030303u) << 4u);
    let scale = f32(extractBits(bitcast<i32>({{W}}_u8(start + 192u + 8u * half + (run >> 1u) + 2u * quarter)), 0u, 8u));
    let ds = {{W}}_f16(start + 208u) * scale;
    let col = block * 256u + 128u * half + 32u * quarter + 8u * run;
    let bytes0 = vec4<u32>(q0, q0 >> 8u, q0 >> 16u, q0 >> 24u) & vec4<u32>(255u);
    let bytes1 = vec4<u32>(q1, q1 >> 8u, q1 >> 16u, q1 >> 24u) & vec4<u32>(255u);
    return Unit8(ds * (vec4<f32>(bytes0) - 32.0), ds * (vec4<f32>(bytes1) - 32.0), col, col + 4u);
}
