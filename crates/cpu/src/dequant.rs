//! The tile's weights in f32 (`matmul.rs`: a pass of many activation rows dequantizes each
//! weight once for all of them, then multiplies in f32), bit for bit what
//! `nucleus_gguf::dequantize_into` (the reference, plain loops) writes: the same products and sums
//! in the same order, a multiply and an add never fused. AVX2 unpacks the K-quants' blocks in
//! registers as its integer products do, and WebAssembly SIMD (both wasm builds) the K-quants'
//! and Q4_0's, Q4_1's, Q5_0's and Q5_1's (`integer::avx2`, `integer::simd128`: one reader of each
//! layout per build); both widen the quants to f32 eight or four at a time and scale them there.
//! The other formats go through the reference, whose loops compile about as well for them.
//!
//! Why: the K-quants' plain loops read each sub-block's scale and minimum and each value on its
//! own; a tile of 256 values took 0.168 ns a value for Q4_K, 0.194 for Q5_K and 0.136 for Q6_K,
//! in registers 0.106, 0.127 and 0.109 (one thread). A 32-row product of Gemma 3 1B's shapes, two
//! threads, best of five: Q4_K (6,912 × 1,152) 75.6 -> 82.1 GMAC/s, Q6_K (1,152 × 6,912) 68.2 ->
//! 75.3; the 32-value formats' own AVX2 dequantization measured within 2 % of the plain loops',
//! either way, and was left out. In wasm (one thread, 32 rows) the plain loops cost more: in
//! Chromium Q4_K (3,584 × 1,024) 17.3 -> 19.6 GMAC/s, Q6_K (1,024 × 3,584) 18.3 -> 20.2, Q5_0
//! (6,912 × 1,152) 16.5-16.9 -> 17.2-19.8, Q4_1 (576 × 1,536) 16.8 -> 20.2-20.5, Q4_0 (2,048 ×
//! 640) 15.9-16.2 -> 18.6-18.9; in WebKit (plain SIMD) Q6_K 13.8 -> 17.4, Q5_0 14.2 -> 17.0, Q4_1
//! 12.9 -> 16.2. Q8_0's own measured 1.03-1.05x in Chromium and 0.97x in WebKit, and was left out
//! (2-core AMD EPYC Zen 4; ARCHITECTURE.md, "The tiles unpacked in registers").

use nucleus_gguf::{GgmlType, dequantize_into};

/// Panics unless `bytes` are whole blocks of `ggml_type` and `out` holds their values (as
/// `dequantize_into` does): checked where weights come in from outside (`matmul::tile_weights`),
/// and in debug builds on every tile; the products' own tiles are whole blocks of a `Matrix`,
/// checked once when it was made.
pub(crate) fn assert_whole_blocks(ggml_type: GgmlType, bytes: &[u8], out: &[f32]) {
    let (values, block_bytes) = ggml_type.block_layout();
    assert_eq!(
        (bytes.len() / block_bytes as usize * values as usize, bytes.len() % block_bytes as usize),
        (out.len(), 0),
        "{} bytes of {ggml_type} for {} values",
        bytes.len(),
        out.len()
    );
}

/// AVX2's dequantization of `bytes` (whole blocks of `ggml_type`) into `out`: the K-quants in
/// registers, the other formats by the reference.
///
/// # Safety
/// Only inlined into a function with AVX2 and FMA, on a CPU that has them.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn avx2(ggml_type: GgmlType, bytes: &[u8], out: &mut [f32]) {
    if cfg!(debug_assertions) {
        assert_whole_blocks(ggml_type, bytes, out);
    }
    // SAFETY (every call): the caller's AVX2 (the loops slice every block and its values).
    unsafe {
        match ggml_type {
            GgmlType::Q4K => x86::q4_k(bytes, out),
            GgmlType::Q5K => x86::q5_k(bytes, out),
            GgmlType::Q6K => x86::q6_k(bytes, out),
            _ => {
                dequantize_into(ggml_type, bytes, out);
            }
        }
    }
}

/// WebAssembly SIMD's (both builds') dequantization of `bytes` (whole blocks of `ggml_type`) into
/// `out`: the K-quants and the unsigned 32-value formats in registers, the others by the reference.
#[cfg(target_arch = "wasm32")]
#[inline(always)]
pub(crate) fn simd128(ggml_type: GgmlType, bytes: &[u8], out: &mut [f32]) {
    use crate::integer::Unsigned32;
    if cfg!(debug_assertions) {
        assert_whole_blocks(ggml_type, bytes, out);
    }
    match ggml_type {
        GgmlType::Q4K => wasm::q4_k(bytes, out),
        GgmlType::Q5K => wasm::q5_k(bytes, out),
        GgmlType::Q6K => wasm::q6_k(bytes, out),
        GgmlType::Q4_0 => wasm::unsigned32(Unsigned32::Q4_0, bytes, out),
        GgmlType::Q4_1 => wasm::unsigned32(Unsigned32::Q4_1, bytes, out),
        GgmlType::Q5_0 => wasm::unsigned32(Unsigned32::Q5_0, bytes, out),
        GgmlType::Q5_1 => wasm::unsigned32(Unsigned32::Q5_1, bytes, out),
        _ => {
            dequantize_into(ggml_type, bytes, out);
        }
    }
}

#[cfg(target_arch = "wasm32")]
mod wasm {
    use std::arch::wasm32::*;

    use nucleus_gguf::k_scale_min;

    use crate::integer::simd128::{Constants, q4_k_group, q5_k_fifth_bits, q5_k_group, q6_k_quarter};
    use crate::integer::{Unsigned32, half};

    /// Four i32 lanes as f32 times `d`, into `out[at..at + 4]`.
    #[inline(always)]
    fn store4(out: &mut [f32], at: usize, values: v128, d: v128) {
        let out = &mut out[at..at + 4];
        // SAFETY: four values in bounds (sliced above).
        unsafe { v128_store(out.as_mut_ptr().cast(), f32x4_mul(f32x4_convert_i32x4(values), d)) };
    }

    /// Eight i16 lanes as f32 times `d`, into `out[at..at + 8]`.
    #[inline(always)]
    fn store8(out: &mut [f32], at: usize, values: v128, d: v128) {
        store4(out, at, i32x4_extend_low_i16x8(values), d);
        store4(out, at + 4, i32x4_extend_high_i16x8(values), d);
    }

    /// Q4_0, Q4_1, Q5_0, Q5_1: `(q − offset)·d` (the offset taken off in integers, exactly), or
    /// `q·d + m`.
    #[inline(always)]
    pub(super) fn unsigned32(format: Unsigned32, bytes: &[u8], out: &mut [f32]) {
        let c = Constants::new();
        for (block, out) in bytes.chunks_exact(format.bytes()).zip(out.chunks_exact_mut(32)) {
            let d = half(block, 0);
            let quants = c.unsigned32_quants(format, block);
            match format.offset() {
                Some(offset) => {
                    let (offset, d) = (i16x8_splat(offset as i16), f32x4_splat(d));
                    for (k, q) in quants.into_iter().enumerate() {
                        store8(out, 16 * k, i16x8_sub(u16x8_extend_low_u8x16(q), offset), d);
                        store8(out, 16 * k + 8, i16x8_sub(u16x8_extend_high_u8x16(q), offset), d);
                    }
                }
                None => {
                    // `q·d − (−m)`: `q·d + m`, exactly.
                    let (d, minus) = (f32x4_splat(d), f32x4_splat(-half(block, 2)));
                    store16(out, 0, quants[0], d, minus);
                    store16(out, 16, quants[1], d, minus);
                }
            }
        }
    }

    /// 16 unsigned bytes as f32, in order, into `out[at..at + 16]` as `scale·q − minus` (each
    /// rounded: never fused).
    #[inline(always)]
    fn store16(out: &mut [f32], at: usize, bytes: v128, scale: v128, minus: v128) {
        let out = &mut out[at..at + 16];
        let (low, high) = (u16x8_extend_low_u8x16(bytes), u16x8_extend_high_u8x16(bytes));
        let quarters = [
            u32x4_extend_low_u16x8(low),
            u32x4_extend_high_u16x8(low),
            u32x4_extend_low_u16x8(high),
            u32x4_extend_high_u16x8(high),
        ];
        for (k, quarter) in quarters.into_iter().enumerate() {
            let value = f32x4_sub(f32x4_mul(scale, f32x4_convert_i32x4(quarter)), minus);
            // SAFETY: four values in bounds (sliced above).
            unsafe { v128_store(out.as_mut_ptr().add(4 * k).cast(), value) };
        }
    }

    /// Q4_K: `d·scale · q − dmin·min` per sub-block of 32.
    #[inline(always)]
    pub(super) fn q4_k(bytes: &[u8], out: &mut [f32]) {
        let c = Constants::new();
        for (block, out) in bytes.as_chunks::<144>().0.iter().zip(out.as_chunks_mut::<256>().0) {
            k_block(block, out, |group| q4_k_group(block, group, &c));
        }
    }

    /// Q5_K: Q4_K's with a fifth bit per quant.
    #[inline(always)]
    pub(super) fn q5_k(bytes: &[u8], out: &mut [f32]) {
        let c = Constants::new();
        for (block, out) in bytes.as_chunks::<176>().0.iter().zip(out.as_chunks_mut::<256>().0) {
            let qh = q5_k_fifth_bits(block);
            k_block(block, out, |group| q5_k_group(block, &qh, group, &c));
        }
    }

    /// What Q4_K and Q5_K share: four groups of 64 quants, `quants(group)` the low sub-block's 32
    /// then the high one's, 16 to a register.
    #[inline(always)]
    fn k_block(block: &[u8], out: &mut [f32], quants: impl Fn(usize) -> [v128; 4]) {
        let (d, dmin) = (half(block, 0), half(block, 2));
        let scales = &block[4..16];
        for group in 0..4 {
            let q = quants(group);
            for (half_group, sub) in [2 * group, 2 * group + 1].into_iter().enumerate() {
                let (scale, min) = k_scale_min(sub, scales);
                let (scale, min) = (f32x4_splat(d * f32::from(scale)), f32x4_splat(dmin * f32::from(min)));
                store16(out, 32 * sub, q[2 * half_group], scale, min);
                store16(out, 32 * sub + 16, q[2 * half_group + 1], scale, min);
            }
        }
    }

    /// Q6_K: `d·scale · (q − 32)` per sub-block of 16, the scales signed: `scale·q − 32·scale`
    /// would round differently, so the 32 goes off each quant first, exactly.
    #[inline(always)]
    pub(super) fn q6_k(bytes: &[u8], out: &mut [f32]) {
        let c = Constants::new();
        let offset = i16x8_splat(32);
        for (block, out) in bytes.as_chunks::<210>().0.iter().zip(out.as_chunks_mut::<256>().0) {
            let d = half(block, 208);
            for (half_block, sixteen) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                for (quants, sub, at) in q6_k_quarter(block, half_block, sixteen, &c) {
                    let scale = f32x4_splat(d * f32::from(block[192 + sub] as i8));
                    store8(out, at, i16x8_sub(u16x8_extend_low_u8x16(quants), offset), scale);
                    store8(out, at + 8, i16x8_sub(u16x8_extend_high_u8x16(quants), offset), scale);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use nucleus_gguf::k_scale_min;

    use crate::integer::avx2::{Groups, Q4kGroups, Q5kGroups, q6_k_runs};
    use crate::integer::half;

    /// 32 unsigned bytes as f32, eight a register, in order.
    #[inline(always)]
    unsafe fn floats(bytes: __m256i) -> [__m256; 4] {
        unsafe {
            let (low, high) = (_mm256_castsi256_si128(bytes), _mm256_extracti128_si256::<1>(bytes));
            [
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(low)),
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(low, low))),
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(high)),
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(high, high))),
            ]
        }
    }

    /// `values` into `out[at..at + 8 · N]`.
    #[inline(always)]
    unsafe fn store<const N: usize>(out: &mut [f32], at: usize, values: [__m256; N]) {
        let out = &mut out[at..at + 8 * N];
        for (k, value) in values.into_iter().enumerate() {
            // SAFETY: eight values in bounds (sliced above).
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(8 * k), value) };
        }
    }

    // The arithmetic written out, not in closures: a closure does not take its caller's target
    // features, and the intrinsics in one may stay calls.

    /// `a·b − c`, rounded twice.
    #[inline(always)]
    unsafe fn mul_sub(a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_sub_ps(_mm256_mul_ps(a, b), c) }
    }

    /// `(a − b)·c`.
    #[inline(always)]
    unsafe fn sub_mul(a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_mul_ps(_mm256_sub_ps(a, b), c) }
    }

    /// Q4_K: `d·scale · q − dmin·min` per sub-block of 32.
    #[inline(always)]
    pub(super) unsafe fn q4_k(bytes: &[u8], out: &mut [f32]) {
        for (block, out) in bytes.as_chunks::<144>().0.iter().zip(out.as_chunks_mut::<256>().0) {
            unsafe { k_block(block, out, Q4kGroups(block)) }
        }
    }

    /// Q5_K: Q4_K's with a fifth bit per quant.
    #[inline(always)]
    pub(super) unsafe fn q5_k(bytes: &[u8], out: &mut [f32]) {
        for (block, out) in bytes.as_chunks::<176>().0.iter().zip(out.as_chunks_mut::<256>().0) {
            unsafe { k_block(block, out, Q5kGroups::new(block)) }
        }
    }

    /// What Q4_K and Q5_K share: four groups of 64, the low sub-block's 32 then the high one's.
    #[inline(always)]
    unsafe fn k_block(block: &[u8], out: &mut [f32], quants: impl Groups) {
        let (d, dmin) = (half(block, 0), half(block, 2));
        let scales = &block[4..16];
        for group in 0..4 {
            unsafe {
                let (low, high) = quants.group(group);
                for (sub, quants) in [(2 * group, low), (2 * group + 1, high)] {
                    let (scale, min) = k_scale_min(sub, scales);
                    let (scale, min) = (_mm256_set1_ps(d * f32::from(scale)), _mm256_set1_ps(dmin * f32::from(min)));
                    let [q0, q1, q2, q3] = floats(quants);
                    let values = [
                        mul_sub(scale, q0, min),
                        mul_sub(scale, q1, min),
                        mul_sub(scale, q2, min),
                        mul_sub(scale, q3, min),
                    ];
                    store(out, 32 * sub, values);
                }
            }
        }
    }

    /// Q6_K: `d·scale · (q − 32)` per sub-block of 16, the scales signed.
    #[inline(always)]
    pub(super) unsafe fn q6_k(bytes: &[u8], out: &mut [f32]) {
        for (block, out) in bytes.as_chunks::<210>().0.iter().zip(out.as_chunks_mut::<256>().0) {
            let d = half(block, 208);
            let scale = |sub: usize| d * f32::from(block[192 + sub] as i8);
            for half_block in 0..2 {
                unsafe {
                    for (run, quants) in q6_k_runs(block, half_block).into_iter().enumerate() {
                        let [q0, q1, q2, q3] = floats(quants);
                        let sub = 8 * half_block + 2 * run;
                        let (first, second) = (_mm256_set1_ps(scale(sub)), _mm256_set1_ps(scale(sub + 1)));
                        let offset = _mm256_set1_ps(32.0);
                        // `(q − 32)·(d·scale)`: the reference's `d·scale·(q − 32)`, a product
                        // being the same either way round.
                        let values = [
                            sub_mul(q0, offset, first),
                            sub_mul(q1, offset, first),
                            sub_mul(q2, offset, second),
                            sub_mul(q3, offset, second),
                        ];
                        store(out, 128 * half_block + 32 * run, values);
                    }
                }
            }
        }
    }
}

// Every build, the wasm ones in Node, is held to the reference bit for bit by `kernel_parity`'s
// `tile_mismatches` (through `matmul::tile_weights`); here the scales' edge cases besides.
#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// The formats a build dequantizes its own way (the others go through the reference).
    const BLOCK_FORMATS: [GgmlType; 3] = [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K];

    /// Blocks of every byte pattern the layouts can hold: arbitrary bytes, each block's f16
    /// scales set to values of either sign, subnormal, zero and large.
    fn blocks(ggml_type: GgmlType, count: usize) -> Vec<u8> {
        let (_, bytes) = ggml_type.block_layout();
        let mut blocks: Vec<u8> =
            (0..count * bytes as usize).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
        let halves: &[usize] = if ggml_type == GgmlType::Q6K { &[208] } else { &[0, 2] };
        let scales = [0x2400u16, 0xa400, 0x0001, 0x8003, 0x0000, 0x7bff, 0xfbff, 0x3c00, 0x1555];
        for (b, block) in blocks.chunks_exact_mut(bytes as usize).enumerate() {
            for (k, &at) in halves.iter().enumerate() {
                let scale = scales[(b + 3 * k) % scales.len()];
                block[at..at + 2].copy_from_slice(&scale.to_le_bytes());
            }
        }
        blocks
    }

    /// AVX2's values are the reference's, bit for bit, on every format it dequantizes (a quant,
    /// scale or minimum read from the wrong place would differ).
    #[test]
    fn avx2_writes_the_references_values() {
        if !crate::matmul::has_avx2() {
            eprintln!("skipped: this CPU has no AVX2");
            return;
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn dequantize(ggml_type: GgmlType, bytes: &[u8], out: &mut [f32]) {
            unsafe { avx2(ggml_type, bytes, out) }
        }
        for ggml_type in BLOCK_FORMATS {
            let (values, _) = ggml_type.block_layout();
            let count = 4096 / values as usize;
            let bytes = blocks(ggml_type, count);
            let expected = nucleus_gguf::dequantize(ggml_type, &bytes, count * values as usize).unwrap();
            let mut got = vec![f32::NAN; expected.len()];
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            unsafe { dequantize(ggml_type, &bytes, &mut got) };
            for (i, (e, g)) in expected.iter().zip(&got).enumerate() {
                assert!(e.to_bits() == g.to_bits() || e.is_nan() && g.is_nan(), "{ggml_type} value {i}: {g} != {e}");
            }
        }
    }
}
