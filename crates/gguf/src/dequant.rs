//! Dequantization of GGML blocks to f32, following the definitions in llama.cpp's `ggml-quants.c`.
//!
//! Block layouts (all little-endian; `f16` is IEEE half precision):
//!
//! | type | elements | bytes | layout | value |
//! |---|---|---|---|---|
//! | Q4_0 | 32 | 18 | d: f16, qs: [u8; 16] | `(nibble - 8) * d` |
//! | Q4_1 | 32 | 20 | d: f16, m: f16, qs: [u8; 16] | `nibble * d + m` |
//! | Q5_0 | 32 | 22 | d: f16, qh: u32, qs: [u8; 16] | `(nibble + 16·bit - 16) * d` |
//! | Q5_1 | 32 | 24 | d: f16, m: f16, qh: u32, qs: [u8; 16] | `(nibble + 16·bit) * d + m` |
//! | Q8_0 | 32 | 34 | d: f16, qs: [i8; 32] | `q * d` |
//! | Q4_K | 256 | 144 | d: f16, dmin: f16, scales: [u8; 12], qs: [u8; 128] | `d*sc * nibble - dmin*mn` per 32 |
//! | Q5_K | 256 | 176 | d: f16, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128] | `d*sc * q5 - dmin*mn` per 32 |
//! | Q6_K | 256 | 210 | ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16 | `d*sc * (q6 - 32)` per 16 |
//!
//! In the 4-bit types, element `j` of a 32-element group is the low nibble of byte `j` and element
//! `j + 16` the high nibble (for Q4_K, the groups are 64 elements: low nibbles of 32 bytes, then high).
//! The 5-bit types add a fifth bit from `qh`: in Q5_0 and Q5_1 bit `j` of the little-endian u32 for
//! element `j` (0..32); in Q5_K, for the 64-element group `g`, bit `2g` of `qh[l]` for element
//! `64g + l` (low nibble) and bit `2g + 1` for element `64g + 32 + l` (high nibble).

use crate::GgmlType;
use half::bf16;

/// Runs `$body` with `$b: &[u8; $bytes]` and `$o: &mut [f32; $n]` for each block of `$bytes` in
/// `$from` and its `$n` values in `$to`: a plain loop over fixed-size arrays, no call and no bounds
/// check (a macro, not a function taking a closure: the closure's call would not be inlined).
macro_rules! each_block {
    ($from:expr, $to:expr, $bytes:literal, $n:literal, |$b:ident, $o:ident| $body:expr) => {
        for (block, values) in $from.chunks_exact($bytes).zip($to.chunks_exact_mut($n)) {
            let $b: &[u8; $bytes] = block.try_into().unwrap();
            let $o: &mut [f32; $n] = values.try_into().unwrap();
            $body
        }
    };
}

/// Whether [`dequantize`] reads `ggml_type`.
pub fn can_dequantize(ggml_type: GgmlType) -> bool {
    use GgmlType::*;
    matches!(ggml_type, F32 | F16 | Bf16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q4K | Q5K | Q6K)
}

/// Dequantizes `count` elements of type `ggml_type` from `bytes`.
/// Returns `None` for a type this crate does not dequantize. `bytes` must hold exactly
/// the blocks of `count` elements (as [`crate::GgufFile`] guarantees).
pub fn dequantize(ggml_type: GgmlType, bytes: &[u8], count: usize) -> Option<Vec<f32>> {
    let mut out = vec![0f32; count];
    dequantize_into(ggml_type, bytes, &mut out).then_some(out)
}

/// Dequantizes the blocks in `bytes` into `out` (as many elements as they hold), without
/// allocating: the CPU engine's kernels read weights through it, a tile at a time. Returns false
/// for a type this crate does not dequantize.
///
/// # Panics
/// When `bytes` is not whole blocks of `ggml_type` or `out` is not as long as they are.
#[inline(always)]
pub fn dequantize_into(ggml_type: GgmlType, bytes: &[u8], out: &mut [f32]) -> bool {
    if !can_dequantize(ggml_type) {
        return false;
    }
    let (block, block_bytes) = ggml_type.block_layout();
    let (block, block_bytes) = (block as usize, block_bytes as usize);
    let count = out.len();
    assert_eq!(count % block, 0, "{count} elements are not whole {ggml_type} blocks");
    assert_eq!(bytes.len(), count / block * block_bytes, "byte length does not match {count} {ggml_type} elements");
    // Plain loops over fixed-size blocks, everything inlined: the CPU engine compiles this into
    // its vectorised kernels (AVX2, simd128), where a call per block would cost more than the block.
    match ggml_type {
        GgmlType::F32 => {
            for (b, o) in bytes.chunks_exact(4).zip(out.iter_mut()) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        GgmlType::F16 => {
            for (b, o) in bytes.chunks_exact(2).zip(out.iter_mut()) {
                *o = f16_at(b, 0);
            }
        }
        GgmlType::Bf16 => {
            for (b, o) in bytes.chunks_exact(2).zip(out.iter_mut()) {
                *o = bf16::from_le_bytes([b[0], b[1]]).to_f32_const();
            }
        }
        GgmlType::Q4_0 => each_block!(bytes, out, 18, 32, |b, o| dequantize_q4_0(b, o)),
        GgmlType::Q4_1 => each_block!(bytes, out, 20, 32, |b, o| dequantize_q4_1(b, o)),
        GgmlType::Q5_0 => each_block!(bytes, out, 22, 32, |b, o| {
            let d = f16_at(b, 0);
            dequantize_q5(b[6..22].try_into().unwrap(), u32_at(b, 2), o, |q| (q as i32 - 16) as f32 * d)
        }),
        GgmlType::Q5_1 => each_block!(bytes, out, 24, 32, |b, o| {
            let (d, m) = (f16_at(b, 0), f16_at(b, 2));
            dequantize_q5(b[8..24].try_into().unwrap(), u32_at(b, 4), o, |q| q as f32 * d + m)
        }),
        GgmlType::Q8_0 => each_block!(bytes, out, 34, 32, |b, o| dequantize_q8_0(b, o)),
        GgmlType::Q4K => each_block!(bytes, out, 144, 256, |b, o| dequantize_q4_k(b, o)),
        GgmlType::Q5K => each_block!(bytes, out, 176, 256, |b, o| dequantize_q5_k(b, o)),
        GgmlType::Q6K => each_block!(bytes, out, 210, 256, |b, o| dequantize_q6_k(b, o)),
        other => unreachable!("{other} is not in can_dequantize"),
    }
    true
}

/// The f16 at `at`.
#[inline(always)]
fn f16_at(bytes: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([bytes[at], bytes[at + 1]]))
}

/// An IEEE half as f32, exactly, in a few integer operations and no branch the data decides often
/// (a block's scales are read per 32 values, inside the CPU engine's vectorised loops: `half`'s
/// `to_f32` asks the CPU for F16C on every call, and its software path branches on the exponent).
/// The exponent is rebiased by adding `(127 − 15) << 23`; infinities and NaNs get the rest of the
/// way to 255; subnormals are normalised by one float subtraction.
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    const EXPONENT: u32 = 0x7c00 << 13;
    let magnitude = u32::from(h & 0x7fff) << 13;
    let exponent = magnitude & EXPONENT;
    let mut bits = magnitude + ((127 - 15) << 23);
    if exponent == EXPONENT {
        bits += (128 - 16) << 23;
    } else if exponent == 0 {
        // 2^-14 · mantissa / 2^10: the mantissa as a float with exponent 2^-14, minus 2^-14.
        bits = (f32::from_bits(bits + (1 << 23)) - f32::from_bits(113 << 23)).to_bits();
    }
    f32::from_bits(bits | (u32::from(h & 0x8000) << 16))
}

#[inline(always)]
fn dequantize_q4_0(block: &[u8; 18], out: &mut [f32; 32]) {
    let d = f16_at(block, 0);
    let qs = &block[2..18];
    for j in 0..16 {
        out[j] = ((qs[j] & 0x0F) as i32 - 8) as f32 * d;
        out[j + 16] = ((qs[j] >> 4) as i32 - 8) as f32 * d;
    }
}

#[inline(always)]
fn dequantize_q4_1(block: &[u8; 20], out: &mut [f32; 32]) {
    let d = f16_at(block, 0);
    let m = f16_at(block, 2);
    let qs = &block[4..20];
    for j in 0..16 {
        out[j] = (qs[j] & 0x0F) as f32 * d + m;
        out[j + 16] = (qs[j] >> 4) as f32 * d + m;
    }
}

#[inline(always)]
fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// A Q5_0 or Q5_1 block: element `j` is `value(q)` with `q` the low (`j < 16`) or high nibble of
/// `qs[j % 16]` plus 16 times bit `j` of `qh`.
#[inline(always)]
fn dequantize_q5(qs: &[u8; 16], qh: u32, out: &mut [f32; 32], value: impl Fn(u32) -> f32) {
    for j in 0..16 {
        out[j] = value((qs[j] & 0x0F) as u32 | (((qh >> j) & 1) << 4));
        out[j + 16] = value((qs[j] >> 4) as u32 | (((qh >> (j + 16)) & 1) << 4));
    }
}

#[inline(always)]
fn dequantize_q8_0(block: &[u8; 34], out: &mut [f32; 32]) {
    let d = f16_at(block, 0);
    for j in 0..32 {
        out[j] = block[2 + j] as i8 as f32 * d;
    }
}

/// The 6-bit scale and min of sub-block `j` (0..8) of a Q4_K or Q5_K block, packed in its 12
/// scale bytes (`scales`): the one reader of that packing (the CPU engine's integer products
/// read it too).
#[inline(always)]
pub fn k_scale_min(j: usize, scales: &[u8]) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        ((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4), (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))
    }
}

/// `(d·scale, dmin·min)` of the low and the high half of 64-element group `group` of a Q4_K or
/// Q5_K block.
#[inline(always)]
fn k_group_factors(d: f32, dmin: f32, scales: &[u8], group: usize) -> [(f32, f32); 2] {
    [2 * group, 2 * group + 1].map(|sub| {
        let (sc, mn) = k_scale_min(sub, scales);
        (d * sc as f32, dmin * mn as f32)
    })
}

#[inline(always)]
fn dequantize_q4_k(block: &[u8; 144], out: &mut [f32; 256]) {
    let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
    let scales = &block[4..16];
    let qs = &block[16..144];
    for (group, (q, o)) in qs.chunks_exact(32).zip(out.chunks_exact_mut(64)).enumerate() {
        let [(d_lo, min_lo), (d_hi, min_hi)] = k_group_factors(d, dmin, scales, group);
        for l in 0..32 {
            o[l] = d_lo * (q[l] & 0x0F) as f32 - min_lo;
            o[l + 32] = d_hi * (q[l] >> 4) as f32 - min_hi;
        }
    }
}

#[inline(always)]
fn dequantize_q5_k(block: &[u8; 176], out: &mut [f32; 256]) {
    let (d, dmin) = (f16_at(block, 0), f16_at(block, 2));
    let scales = &block[4..16];
    let qh = &block[16..48];
    let qs = &block[48..176];
    for (group, (q, o)) in qs.chunks_exact(32).zip(out.chunks_exact_mut(64)).enumerate() {
        let [(d_lo, min_lo), (d_hi, min_hi)] = k_group_factors(d, dmin, scales, group);
        for l in 0..32 {
            let low = (q[l] & 0x0F) | (((qh[l] >> (2 * group)) & 1) << 4);
            let high = (q[l] >> 4) | (((qh[l] >> (2 * group + 1)) & 1) << 4);
            o[l] = d_lo * low as f32 - min_lo;
            o[l + 32] = d_hi * high as f32 - min_hi;
        }
    }
}

#[inline(always)]
fn dequantize_q6_k(block: &[u8; 210], out: &mut [f32; 256]) {
    let ql_all = &block[0..128];
    let qh_all = &block[128..192];
    let scales_all = &block[192..208];
    let d = f16_at(block, 208);
    for half in 0..2 {
        let ql = &ql_all[64 * half..64 * half + 64];
        let qh = &qh_all[32 * half..32 * half + 32];
        let sc = &scales_all[8 * half..8 * half + 8];
        let o = &mut out[128 * half..128 * half + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            o[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            o[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            o[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            o[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    /// Every one of the 65,536 halves, NaNs included (compared by bits), against `half`.
    #[test]
    fn f16_to_f32_is_exact_for_every_half() {
        for bits in 0..=u16::MAX {
            let ours = f16_to_f32(bits);
            let theirs = f16::from_bits(bits).to_f32();
            if theirs.is_nan() {
                assert!(ours.is_nan(), "{bits:#06x}");
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{bits:#06x}: {ours} against {theirs}");
            }
        }
    }
}
