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
use half::{bf16, f16};

/// Whether [`dequantize`] reads `ggml_type`.
pub fn can_dequantize(ggml_type: GgmlType) -> bool {
    use GgmlType::*;
    matches!(ggml_type, F32 | F16 | Bf16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q4K | Q5K | Q6K)
}

/// Dequantizes `count` elements of type `ggml_type` from `bytes`.
/// Returns `None` for a type this crate does not dequantize. `bytes` must hold exactly
/// the blocks of `count` elements (as [`crate::GgufFile`] guarantees).
pub fn dequantize(ggml_type: GgmlType, bytes: &[u8], count: usize) -> Option<Vec<f32>> {
    if !can_dequantize(ggml_type) {
        return None;
    }
    let (block, block_bytes) = ggml_type.block_layout();
    let (block, block_bytes) = (block as usize, block_bytes as usize);
    assert_eq!(count % block, 0, "{count} elements are not whole {ggml_type} blocks");
    assert_eq!(bytes.len(), count / block * block_bytes, "byte length does not match {count} {ggml_type} elements");
    let mut out = vec![0f32; count];
    let blocks = bytes.chunks_exact(block_bytes).zip(out.chunks_exact_mut(block));
    match ggml_type {
        GgmlType::F32 => blocks.for_each(|(b, o)| o[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        GgmlType::F16 => blocks.for_each(|(b, o)| o[0] = f16_at(b, 0)),
        GgmlType::Bf16 => blocks.for_each(|(b, o)| o[0] = bf16::from_le_bytes([b[0], b[1]]).to_f32()),
        GgmlType::Q4_0 => blocks.for_each(|(b, o)| dequantize_q4_0(b, o)),
        GgmlType::Q4_1 => blocks.for_each(|(b, o)| dequantize_q4_1(b, o)),
        GgmlType::Q5_0 => blocks.for_each(|(b, o)| {
            let d = f16_at(b, 0);
            dequantize_q5(&b[6..22], u32_at(b, 2), o, |q| (q as i32 - 16) as f32 * d)
        }),
        GgmlType::Q5_1 => blocks.for_each(|(b, o)| {
            let (d, m) = (f16_at(b, 0), f16_at(b, 2));
            dequantize_q5(&b[8..24], u32_at(b, 4), o, |q| q as f32 * d + m)
        }),
        GgmlType::Q8_0 => blocks.for_each(|(b, o)| dequantize_q8_0(b, o)),
        GgmlType::Q4K => blocks.for_each(|(b, o)| dequantize_q4_k(b, o)),
        GgmlType::Q5K => blocks.for_each(|(b, o)| dequantize_q5_k(b, o)),
        GgmlType::Q6K => blocks.for_each(|(b, o)| dequantize_q6_k(b, o)),
        other => unreachable!("{other} is not in can_dequantize"),
    }
    Some(out)
}

fn f16_at(bytes: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

fn dequantize_q4_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let qs = &block[2..18];
    for (j, &q) in qs.iter().enumerate() {
        out[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
        out[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

fn dequantize_q4_1(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let m = f16_at(block, 2);
    let qs = &block[4..20];
    for (j, &q) in qs.iter().enumerate() {
        out[j] = (q & 0x0F) as f32 * d + m;
        out[j + 16] = (q >> 4) as f32 * d + m;
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// A Q5_0 or Q5_1 block: element `j` is `value(q)` with `q` the low (`j < 16`) or high nibble of
/// `qs[j % 16]` plus 16 times bit `j` of `qh`.
fn dequantize_q5(qs: &[u8], qh: u32, out: &mut [f32], value: impl Fn(u32) -> f32) {
    for (j, &q) in qs.iter().enumerate() {
        out[j] = value((q & 0x0F) as u32 | (((qh >> j) & 1) << 4));
        out[j + 16] = value((q >> 4) as u32 | (((qh >> (j + 16)) & 1) << 4));
    }
}

fn dequantize_q8_0(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    for (o, &q) in out.iter_mut().zip(&block[2..34]) {
        *o = q as i8 as f32 * d;
    }
}

/// The 6-bit scale and min of sub-block `j` (0..8) of a Q4_K block, packed in 12 bytes.
fn q4_k_scale_min(j: usize, scales: &[u8]) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        ((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4), (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))
    }
}

fn dequantize_q4_k(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let dmin = f16_at(block, 2);
    let scales = &block[4..16];
    let qs = &block[16..144];
    for (group, (q, o)) in qs.chunks_exact(32).zip(out.chunks_exact_mut(64)).enumerate() {
        let (sc_lo, m_lo) = q4_k_scale_min(2 * group, scales);
        let (sc_hi, m_hi) = q4_k_scale_min(2 * group + 1, scales);
        let (d_lo, min_lo) = (d * sc_lo as f32, dmin * m_lo as f32);
        let (d_hi, min_hi) = (d * sc_hi as f32, dmin * m_hi as f32);
        for l in 0..32 {
            o[l] = d_lo * (q[l] & 0x0F) as f32 - min_lo;
            o[l + 32] = d_hi * (q[l] >> 4) as f32 - min_hi;
        }
    }
}

fn dequantize_q5_k(block: &[u8], out: &mut [f32]) {
    let d = f16_at(block, 0);
    let dmin = f16_at(block, 2);
    let scales = &block[4..16];
    let qh = &block[16..48];
    let qs = &block[48..176];
    for (group, (q, o)) in qs.chunks_exact(32).zip(out.chunks_exact_mut(64)).enumerate() {
        let (sc_lo, m_lo) = q4_k_scale_min(2 * group, scales);
        let (sc_hi, m_hi) = q4_k_scale_min(2 * group + 1, scales);
        let (d_lo, min_lo) = (d * sc_lo as f32, dmin * m_lo as f32);
        let (d_hi, min_hi) = (d * sc_hi as f32, dmin * m_hi as f32);
        for l in 0..32 {
            let low = (q[l] & 0x0F) | (((qh[l] >> (2 * group)) & 1) << 4);
            let high = (q[l] >> 4) | (((qh[l] >> (2 * group + 1)) & 1) << 4);
            o[l] = d_lo * low as f32 - min_lo;
            o[l + 32] = d_hi * high as f32 - min_hi;
        }
    }
}

fn dequantize_q6_k(block: &[u8], out: &mut [f32]) {
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
