//! The AVX-512 build (F, BW and VNNI; chosen at run time): 64 quants an instruction, four byte
//! products into each i32 lane by `vpdpbusd`, the three digit places joined there; the 32-value
//! formats two blocks a register, a K-quant's sub-block scales applied in f32.

use std::arch::x86_64::*;

use super::avx2::{self, Madd, load, load_f32, load8, total};
use super::lanes::{FourRows, GROUP, LANES, Lanes};
use super::{
    GgmlType, IntegerRow, KFormat, Pair, Q4k, Q5k, Q6k, SUPER_BLOCK, Unsigned32, half, k_rows, k_scales_and_mins,
    prefetch_ahead,
};

/// The 32-value formats, two blocks a register: `vpdpbusd` adds four byte products into
/// each i32 lane, where AVX2 takes three instructions (`vpmaddubsw`, `vpmaddwd`, `vpaddd`)
/// for half as many. The pair's quants are unpacked, and its sums scaled, in 16 lanes at
/// once (the first block's in the low eight), and added into 16 f32 lanes: each lane's i32
/// sums are the AVX2 build's, their f32 sums in another order. A row of an odd number of
/// blocks ends with one the AVX2 way.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
pub(super) fn row_dot32(ggml_type: GgmlType, row: &[u8], x: &IntegerRow) -> f32 {
    // SAFETY: (every `unsafe` block here) the helpers need no more than this function's
    // target features. Each format its own copy of the loop, its layout a constant there.
    unsafe {
        match ggml_type {
            GgmlType::Q4_0 => unsigned32_row(Unsigned32::Q4_0, row, x),
            GgmlType::Q4_1 => unsigned32_row(Unsigned32::Q4_1, row, x),
            GgmlType::Q5_0 => unsigned32_row(Unsigned32::Q5_0, row, x),
            GgmlType::Q5_1 => unsigned32_row(Unsigned32::Q5_1, row, x),
            GgmlType::Q8_0 => q8_0_row(row, x),
            other => unreachable!("{other} is not a 32-value format"),
        }
    }
}

/// The first two f16s of two blocks in f32, `d, next, d', next'` (`next` is Q4_1's and Q5_1's
/// `m`), and `d·s` (`s` the block's activation scale, from `lanes`) in each block's eight
/// lanes: one conversion and one product in four lanes (each f16 broadcast and converted in 16
/// lanes held Q4_1 at 0.9x the AVX2 build's speed).
#[inline(always)]
unsafe fn scales_of(a: &[u8], b: &[u8], lanes: &Pair) -> (__m128, __m512) {
    let word = |block: &[u8]| i32::from_le_bytes(block[..4].try_into().expect("4"));
    unsafe {
        let scales = _mm_cvtph_ps(_mm_set_epi32(0, 0, word(b), word(a)));
        let products = _mm_mul_ps(scales, _mm_load_ps(lanes.scales.as_ptr()));
        let spread = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
        (scales, _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(products)))
    }
}

/// Two blocks' 32 bytes as one register's 64, `a`'s first.
#[inline(always)]
unsafe fn pair(a: __m256i, b: __m256i) -> __m512i {
    unsafe { _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1) }
}

/// 64 bytes of 16 f32 or i32 lanes.
#[inline(always)]
unsafe fn lanes16<T: Copy>(values: &[T; 16]) -> __m512i {
    const { assert!(size_of::<T>() == 4) };
    // SAFETY: 64 bytes.
    unsafe { _mm512_loadu_si512(values.as_ptr().cast()) }
}

/// Two blocks' 32 quants of `format`, a byte each, `a`'s first: each block's nibbles in its
/// 32 bytes (values 0..16 low nibbles, 16..32 high ones), and their fifth bits by a mask.
#[inline(always)]
unsafe fn unsigned32_quants(format: Unsigned32, a: &[u8], b: &[u8]) -> __m512i {
    unsafe {
        let nibbles = |block: &[u8]| _mm_loadu_si128(block[format.nibbles..format.nibbles + 16].as_ptr().cast());
        // 128-bit lanes a, a, b, b (each block's bytes loaded twice by `vbroadcasti128`); the
        // second of each shifted down by four.
        let twice = |block: &[u8]| _mm256_broadcastsi128_si256(nibbles(block));
        let spread = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(twice(a)), twice(b));
        let shifts = _mm512_set_epi64(
            0x0004_0004_0004_0004,
            0x0004_0004_0004_0004,
            0,
            0,
            0x0004_0004_0004_0004,
            0x0004_0004_0004_0004,
            0,
            0,
        );
        let nibbles = _mm512_srlv_epi16(spread, shifts);
        match format.fifth_bits {
            // `nibbles & 0x0F | fifths` in one `vpternlogd` (0xEA: `A & B | C`), the fifths 16
            // where a bit is set.
            Some(_) => {
                let bits = u64::from(format.fifth_word(a)) | u64::from(format.fifth_word(b)) << 32;
                let fifths = _mm512_maskz_mov_epi8(bits, _mm512_set1_epi8(16));
                _mm512_ternarylogic_epi32::<0xEA>(nibbles, _mm512_set1_epi8(0x0F), fifths)
            }
            None => _mm512_and_si512(nibbles, _mm512_set1_epi8(0x0F)),
        }
    }
}

/// A row of `format`'s blocks (`d·q + m`) against `x` (rounded per 32).
#[inline(always)]
unsafe fn unsigned32_row(format: Unsigned32, row: &[u8], x: &IntegerRow) -> f32 {
    // `d·s·ΣQ·X` in 16 lanes; Q4_1's and Q5_1's `m·Σx`, or Q4_0's and Q5_0's `d·Σx` (which
    // their offset multiplies once, at the end), in four.
    let (mut wide, mut minimums4) = unsafe { (_mm512_setzero_ps(), _mm_setzero_ps()) };
    let (pairs, last) = x.pairs32(row, format.bytes);
    for ([a, b], [d0, d1, d2], lanes) in pairs {
        unsafe {
            let quants = unsigned32_quants(format, a, b);
            // The digits joined in each i32 lane, `(Σq·d₀·2⁸ + Σq·d₁)·2⁸ + Σq·d₂`: at most
            // 4·31·0x7F7F7F, within i32.
            let mut sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), quants, load64(d0, 0));
            sum = _mm512_dpbusd_epi32(_mm512_slli_epi32(sum, 8), quants, load64(d1, 0));
            sum = _mm512_dpbusd_epi32(_mm512_slli_epi32(sum, 8), quants, load64(d2, 0));
            let (scales, ds) = scales_of(a, b, lanes);
            wide = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), ds, wide);
            // `m·Σx` from `d, m, d', m'`, or `d·Σx` from `d, d, d', d'`.
            let minimums = if format.offset.is_some() { _mm_moveldup_ps(scales) } else { scales };
            minimums4 = _mm_fmadd_ps(minimums, _mm_load_ps(lanes.minimum_sums.as_ptr()), minimums4);
        }
    }
    let (mut lanes, mut minimums) = (unsafe { _mm256_setzero_ps() }, 0f32);
    if let Some((block, [d0, d1, d2], scale, sum)) = last {
        let digits = unsafe { [load(d0, 0), load(d1, 0), load(d2, 0)] };
        let m;
        (lanes, m) = unsafe { avx2::unsigned32::<Madd>(format, block, digits, (scale, sum), lanes) };
        minimums += m * sum;
    }
    unsafe {
        let minimums4 = _mm_add_ps(minimums4, _mm_movehl_ps(minimums4, minimums4));
        let pairs_minimums = _mm_cvtss_f32(_mm_movehdup_ps(minimums4)) * format.offset.map_or(1.0, |offset| -offset);
        _mm512_reduce_add_ps(wide) + total(lanes) + (minimums + pairs_minimums)
    }
}

/// A row of Q8_0 blocks against `x` (rounded per 32).
#[inline(always)]
unsafe fn q8_0_row(row: &[u8], x: &IntegerRow) -> f32 {
    let mut wide = unsafe { _mm512_setzero_ps() };
    let (pairs, last) = x.pairs32(row, 34);
    assert!(x.q8_0_offsets.len() >= row.len() / 68, "a row rounded without Q8_0's offsets, read by Q8_0");
    for (([a, b], [d0, d1, d2], lanes), offsets) in pairs.zip(&x.q8_0_offsets) {
        unsafe {
            // `q + 128`: each quant's sign bit flipped, an unsigned byte.
            let quants = _mm512_xor_si512(pair(load(a, 2), load(b, 2)), _mm512_set1_epi8(-128));
            let [offsets_high, offsets_low] =
                [0, 16].map(|at| lanes16::<i32>(offsets.0[at..at + 16].try_into().expect("16")));
            // `high` is `Σq·d₀·2⁸ + Σq·d₁`, `low` `Σq·d₂`: the products of `q + 128` (each
            // place's at most 4·255·128 in magnitude a lane: a digit may be −128) and the
            // offsets, `−128·Σd`, the same integers as the AVX2 build's.
            let high = _mm512_dpbusd_epi32(_mm512_setzero_si512(), quants, load64(d0, 0));
            let high = _mm512_dpbusd_epi32(_mm512_slli_epi32(high, 8), quants, load64(d1, 0));
            let high = _mm512_add_epi32(high, offsets_high);
            let low = _mm512_dpbusd_epi32(offsets_low, quants, load64(d2, 0));
            let value = _mm512_fmadd_ps(_mm512_cvtepi32_ps(high), _mm512_set1_ps(256.0), _mm512_cvtepi32_ps(low));
            wide = _mm512_fmadd_ps(value, scales_of(a, b, lanes).1, wide);
        }
    }
    let mut lanes = unsafe { _mm256_setzero_ps() };
    if let Some((block, [d0, d1, d2], scale, _)) = last {
        let digits = unsafe { [load(d0, 0), load(d1, 0), load(d2, 0)] };
        lanes = unsafe { avx2::q8_0::<Madd>(block, digits, scale, lanes) };
    }
    unsafe { _mm512_reduce_add_ps(wide) + total(lanes) }
}

/// Per row: the blocks' products in 16 lanes, their minimums or offsets in 8. Each format,
/// and each K-quant row prefetched or not ([`IntegerRow::prefetched`]), has a function of its
/// own (`k_row`): with the three formats' loops in one function, a change to one format's
/// products moved the others' (Q6_K's at 0.9x with Q4_K's quants unpacked another way), and
/// the prefetching loop beside the other held narrow rows at 0.95x.
///
/// # Safety
/// Only on a CPU with AVX2, FMA, F16C and AVX-512 F, BW and VNNI.
pub(super) unsafe fn row_dot(ggml_type: GgmlType, row: &[u8], x: &IntegerRow) -> f32 {
    // SAFETY: as this function's.
    unsafe { k_rows!(ggml_type, x.prefetched(ggml_type), k_row(row, x)) }
}

/// A row of `F`'s blocks, prefetched as it goes with `PREFETCH`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
fn k_row<F: KBlock, const PREFETCH: bool>(row: &[u8], x: &IntegerRow) -> f32 {
    let bytes = F::TYPE.block_layout().1 as usize;
    let mut sums = (_mm512_setzero_ps(), _mm256_setzero_ps());
    for (b, block) in row.chunks_exact(bytes).take(x.blocks_of(F::TYPE)).enumerate() {
        if PREFETCH {
            prefetch_ahead(row, b * bytes, bytes);
        }
        // SAFETY: the block's products need no more than this function's target features.
        sums = unsafe { F::add(block, F::quants(block), x, b, sums) };
    }
    _mm512_reduce_add_ps(sums.0) + unsafe { total(sums.1) }
}

/// The products and minimums (or offsets) of a K-quant row's blocks so far.
type Sums = (__m512, __m256);

/// A K-quant format's block products in this build.
trait KBlock: KFormat {
    /// A block's 256 quants as four registers of 64 unsigned bytes, in the order [`add`](Self::add)
    /// takes them (and [`unpack_row`]'s, for a prompt's products in lanes).
    ///
    /// # Safety
    /// Only inlined into a function with this module's target features.
    unsafe fn quants(block: &[u8]) -> [__m512i; 4];

    /// Block `b` of a row, its `quants` unpacked, against `x`, added to `sums`.
    ///
    /// # Safety
    /// Only inlined into a function with this module's target features.
    unsafe fn add(block: &[u8], quants: [__m512i; 4], x: &IntegerRow, b: usize, sums: Sums) -> Sums;
}

impl KBlock for Q4k {
    #[inline(always)]
    unsafe fn quants(block: &[u8]) -> [__m512i; 4] {
        unsafe { [nibbles64(block, 16), nibbles64(block, 48), nibbles64(block, 80), nibbles64(block, 112)] }
    }

    #[inline(always)]
    unsafe fn add(block: &[u8], quants: [__m512i; 4], x: &IntegerRow, b: usize, sums: Sums) -> Sums {
        unsafe { k_block(block, x, b, sums, quants) }
    }
}

impl KBlock for Q5k {
    #[inline(always)]
    unsafe fn quants(block: &[u8]) -> [__m512i; 4] {
        unsafe {
            let qh = _mm512_broadcast_i64x4(load(block, 16));
            [fifths64(block, qh, 0), fifths64(block, qh, 1), fifths64(block, qh, 2), fifths64(block, qh, 3)]
        }
    }

    #[inline(always)]
    unsafe fn add(block: &[u8], quants: [__m512i; 4], x: &IntegerRow, b: usize, sums: Sums) -> Sums {
        unsafe { k_block(block, x, b, sums, quants) }
    }
}

impl KBlock for Q6k {
    #[inline(always)]
    unsafe fn quants(block: &[u8]) -> [__m512i; 4] {
        unsafe { q6_k_quants(block) }
    }

    #[inline(always)]
    unsafe fn add(block: &[u8], quants: [__m512i; 4], x: &IntegerRow, b: usize, sums: Sums) -> Sums {
        unsafe { q6_k(block, quants, x, b, sums) }
    }
}

/// 64 bytes from `at`.
#[inline(always)]
unsafe fn load64<T>(bytes: &[T], at: usize) -> __m512i {
    let bytes = &bytes[at..at + 64 / size_of::<T>()];
    // SAFETY: 64 bytes in bounds (sliced above).
    unsafe { _mm512_loadu_si512(bytes.as_ptr().cast()) }
}

/// f32 lane `i` of the result: lane `first + i / run` of `scales` (`vpermps`): a sub-block's
/// scale over the lanes that hold its sums (8 lanes for Q4_K's 32 values, 4 for Q6_K's 16).
#[inline(always)]
unsafe fn spread(scales: __m512, first: usize, run: usize) -> __m512 {
    let index: [i32; 16] = std::array::from_fn(|i| (first + i / run) as i32);
    // SAFETY: 64 bytes.
    unsafe { _mm512_permutexvar_ps(_mm512_loadu_si512(index.as_ptr().cast()), scales) }
}

/// `Σ q·X` of a K-quant block's 64 quants from value `at` (unsigned, at most 63) against the
/// activations' digits, four values to an i32 lane: `(Σq·d₀·2⁸ + Σq·d₁)·2⁸ + Σq·d₂`, exact
/// (at most 4·63·0x7F7F7F, within i32), one `vpdpbusd` a digit place.
#[inline(always)]
unsafe fn products64(quants: __m512i, [d0, d1, d2]: [&[i8; SUPER_BLOCK]; 3], at: usize) -> __m512i {
    unsafe {
        let sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), quants, load64(d0, at));
        let sum = _mm512_dpbusd_epi32(_mm512_slli_epi32(sum, 8), quants, load64(d1, at));
        _mm512_dpbusd_epi32(_mm512_slli_epi32(sum, 8), quants, load64(d2, at))
    }
}

/// Q5_K's group `group` of 64 quants: their low four bits, and 16 where their fifth bit in
/// `qh` is set (bit 2·group of each byte for the low 32, 2·group + 1 for the high).
#[inline(always)]
unsafe fn fifths64(block: &[u8], qh: __m512i, group: usize) -> __m512i {
    unsafe {
        let bits = _mm512_inserti64x4(_mm512_set1_epi8(1 << (2 * group)), _mm256_set1_epi8(1 << (2 * group + 1)), 1);
        let fifth = _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(qh, bits), _mm512_set1_epi8(16));
        _mm512_or_si512(nibbles64(block, 48 + 32 * group), fifth)
    }
}

/// A group of 64 Q4_K or Q5_K quants' low four bits from the 32 bytes at `at`: the bytes in
/// both halves, the high half shifted to its high nibbles.
#[inline(always)]
unsafe fn nibbles64(block: &[u8], at: usize) -> __m512i {
    unsafe {
        let q = _mm512_broadcast_i64x4(load(block, at));
        let shifts = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
        _mm512_and_si512(_mm512_srlv_epi16(q, shifts), _mm512_set1_epi8(0x0F))
    }
}

/// What Q4_K and Q5_K share: four groups of 64 quants, `quants[group]` the group's 64
/// unsigned bytes in the order of its values (unpacked before the block's products: passed
/// as a closure, they were called out of line, without this module's target features, when
/// the loop over the blocks was a function of its own).
#[inline(always)]
unsafe fn k_block(block: &[u8], x: &IntegerRow, b: usize, (lanes, offsets): Sums, quants: [__m512i; 4]) -> Sums {
    unsafe {
        let (d, dmin) = (half(block, 0), half(block, 2));
        let (scales, mins) = k_scales_and_mins(&block[4..16]);
        // The eight sub-blocks' scales times `d` and the activations' scale, in lanes 0..8.
        let scales = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_cvtsi64_si128(scales as i64)));
        let scales = _mm512_mul_ps(scales, _mm512_set1_ps(d * x.scale(SUPER_BLOCK, b)));
        let xs = x.block_digits(b);
        let mut lanes = lanes;
        for (group, quants) in quants.into_iter().enumerate() {
            let sums = products64(quants, xs, 64 * group);
            lanes = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), spread(scales, 2 * group, 8), lanes);
        }
        let mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(mins as i64)));
        let minimums = _mm256_mul_ps(mins, load_f32(&x.sums32, b * 8));
        (lanes, _mm256_fnmadd_ps(minimums, _mm256_set1_ps(dmin), offsets))
    }
}

/// Q6_K's quants: each half's four runs of 32 as two registers of 64 (runs 0 and 1, then 2 and
/// 3, as `dequant.rs` reads them).
#[inline(always)]
unsafe fn q6_k_quants(block: &[u8]) -> [__m512i; 4] {
    unsafe {
        let [a, b] = q6_k_half(block, 0);
        let [c, d] = q6_k_half(block, 1);
        [a, b, c, d]
    }
}

/// Half `at` of a Q6_K block's quants, as two registers of 64 (a function, not a closure: a
/// closure does not take the caller's target features).
#[inline(always)]
unsafe fn q6_k_half(block: &[u8], at: usize) -> [__m512i; 2] {
    unsafe {
        let (nibbles, two_bits) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
        let halves = |low: i16, high: i16| _mm512_inserti64x4(_mm512_set1_epi16(low), _mm256_set1_epi16(high), 1);
        let ql = load64(block, 64 * at);
        let qh = _mm512_broadcast_i64x4(load(block, 128 + 32 * at));
        let first = _mm512_or_si512(
            _mm512_and_si512(ql, nibbles),
            _mm512_and_si512(_mm512_sllv_epi16(qh, halves(4, 2)), two_bits),
        );
        let second = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi16(ql, 4), nibbles),
            _mm512_and_si512(_mm512_srlv_epi16(qh, halves(0, 2)), two_bits),
        );
        [first, second]
    }
}

/// Q6_K: its quants ([`q6_k_quants`]) against the digits, each 16 values' scale spread over
/// their four i32 lanes.
#[inline(always)]
unsafe fn q6_k(block: &[u8], quants: [__m512i; 4], x: &IntegerRow, b: usize, (lanes, offsets): Sums) -> Sums {
    unsafe {
        let d = half(block, 208);
        let xs = x.block_digits(b);
        let (low_scales, high_scales) = (load8(block, 192), load8(block, 200));
        // The 16 sub-blocks' scales times `d` and the activations' scale.
        let scales = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_unpacklo_epi64(low_scales, high_scales)));
        let scales = _mm512_mul_ps(scales, _mm512_set1_ps(d * x.scale(SUPER_BLOCK, b)));
        let mut lanes = lanes;
        for (run, quants) in quants.into_iter().enumerate() {
            let sums = products64(quants, xs, 64 * run);
            lanes = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), spread(scales, 4 * run, 4), lanes);
        }
        let float_scales = |bytes: __m128i| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
        let scaled_sums = _mm256_fmadd_ps(
            float_scales(low_scales),
            load_f32(&x.sums, b * 16),
            _mm256_mul_ps(float_scales(high_scales), load_f32(&x.sums, b * 16 + 8)),
        );
        (lanes, _mm256_fnmadd_ps(scaled_sums, _mm256_set1_ps(32.0 * d), offsets))
    }
}

/// Weight row `row` of `ggml_type` (one of the formats [`in_lanes`](super::in_lanes)) unpacked
/// into row `j` of `four`: its quants a byte each, in the order of its values (as the decode
/// products unpack them), and per group its scale and minimum.
///
/// # Safety
/// Only on a CPU with AVX2, FMA, F16C and AVX-512 F, BW and VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn unpack_row(ggml_type: GgmlType, row: &[u8], four: &mut FourRows, j: usize) {
    let (quants, scales, mins) = four.row_mut(j);
    // SAFETY (every call): as this function's.
    unsafe {
        match ggml_type {
            GgmlType::Q4K => unpack_k::<Q4k>(row, quants, scales, mins),
            GgmlType::Q5K => unpack_k::<Q5k>(row, quants, scales, mins),
            GgmlType::Q4_0 => unpack_unsigned32(Unsigned32::Q4_0, row, quants, scales, mins),
            GgmlType::Q4_1 => unpack_unsigned32(Unsigned32::Q4_1, row, quants, scales, mins),
            GgmlType::Q5_0 => unpack_unsigned32(Unsigned32::Q5_0, row, quants, scales, mins),
            GgmlType::Q5_1 => unpack_unsigned32(Unsigned32::Q5_1, row, quants, scales, mins),
            other => unreachable!("{other} has no prompt products in integers"),
        }
    }
}

/// 64 bytes to `out` from `at`.
#[inline(always)]
unsafe fn store64(out: &mut [u8], at: usize, bytes: __m512i) {
    let out = &mut out[at..at + 64];
    // SAFETY: 64 bytes in bounds (sliced above).
    unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), bytes) }
}

/// Q4_K's and Q5_K's blocks: `d·sc` and `−dmin·m` per 32 values.
#[inline(always)]
unsafe fn unpack_k<F: KBlock>(row: &[u8], quants: &mut [u8], scales: &mut [f32], mins: &mut [f32]) {
    let bytes = F::TYPE.block_layout().1 as usize;
    for (b, block) in row.chunks_exact(bytes).enumerate() {
        unsafe {
            for (group, values) in F::quants(block).into_iter().enumerate() {
                store64(quants, b * SUPER_BLOCK + 64 * group, values);
            }
        }
        let (d, dmin) = unsafe { avx2::f16_pair(block, 0) };
        let (sc, m) = k_scales_and_mins(&block[4..16]);
        for i in 0..8 {
            scales[8 * b + i] = d * ((sc >> (8 * i)) & 0xFF) as f32;
            mins[8 * b + i] = -(dmin * ((m >> (8 * i)) & 0xFF) as f32);
        }
    }
}

/// The 32-value formats' blocks, two a register: `d` and `m` per 32 values.
#[inline(always)]
unsafe fn unpack_unsigned32(format: Unsigned32, row: &[u8], quants: &mut [u8], scales: &mut [f32], mins: &mut [f32]) {
    let pairs = row.chunks_exact(2 * format.bytes);
    let last = pairs.remainder();
    for (p, pair) in pairs.enumerate() {
        let (a, b) = pair.split_at(format.bytes);
        unsafe { store64(quants, 64 * p, unsigned32_quants(format, a, b)) };
        for (i, block) in [a, b].into_iter().enumerate() {
            (scales[2 * p + i], mins[2 * p + i]) = format.scale_and_min(unsafe { avx2::f16_pair(block, 0) });
        }
    }
    if !last.is_empty() {
        let (b, mut both) = (scales.len() - 1, [0u8; 64]);
        unsafe { store64(&mut both, 0, unsigned32_quants(format, last, last)) };
        quants[32 * b..].copy_from_slice(&both[..32]);
        (scales[b], mins[b]) = format.scale_and_min(unsafe { avx2::f16_pair(last, 0) });
    }
}

/// Four unpacked weight rows against up to sixteen activation rows in lanes: `out[j][l]`, weight
/// row `j` against lane `l`. Per four values, one load of each digit place's 64 digits, each
/// weight row's four quants broadcast, and a `vpdpbusd` each (64 byte products); per group of
/// 32, each place's sums joined (`(Σq·d₀)·2¹⁶ + (Σq·d₁)·2⁸ + Σq·d₂`, the last two in i32: the
/// quants below 32, at most 32·31·128·2⁸ + 32·31·128, within i32), scaled and added in f32, with
/// the minimum times each lane's `Σx`.
///
/// # Safety
/// Only on a CPU with AVX2, FMA, F16C and AVX-512 F, BW and VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn lanes_products(w: &FourRows, x: &Lanes) -> [[f32; LANES]; 4] {
    let (cols, groups) = (w.cols, w.cols / GROUP);
    assert!(cols == x.cols && x.block.is_multiple_of(GROUP));
    let quants: [&[u8]; 4] = std::array::from_fn(|j| &w.quants[j * cols..(j + 1) * cols]);
    let (scales, mins) = (&w.scales, &w.mins);
    let [d0, d1, d2] = &x.digits;
    let mut acc = [_mm512_setzero_ps(); 4];
    for g in 0..groups {
        let at = g * GROUP * LANES;
        let (d0, d1, d2) = (&d0[at..at + GROUP * LANES], &d1[at..at + GROUP * LANES], &d2[at..at + GROUP * LANES]);
        let mut products = [[_mm512_setzero_si512(); 3]; 4];
        for s in 0..GROUP / 4 {
            let digits = unsafe { [load64(d0, 64 * s), load64(d1, 64 * s), load64(d2, 64 * s)] };
            for (j, quants) in quants.iter().enumerate() {
                let four = &quants[g * GROUP + 4 * s..g * GROUP + 4 * s + 4];
                let w = _mm512_set1_epi32(i32::from_le_bytes(four.try_into().expect("4")));
                for (sum, digits) in products[j].iter_mut().zip(digits) {
                    *sum = _mm512_dpbusd_epi32(*sum, w, digits);
                }
            }
        }
        // Each lane's activation scale and `Σx` (16 f32s, a 64-byte load).
        let scale_x = _mm512_castsi512_ps(unsafe { load64(&x.scales, (g * GROUP / x.block) * LANES) });
        let sum_x = _mm512_castsi512_ps(unsafe { load64(&x.sums, g * LANES) });
        for (j, [high, middle, low]) in products.into_iter().enumerate() {
            let (scale, min) = (scales[j * groups + g], mins[j * groups + g]);
            let joined = _mm512_add_epi32(_mm512_slli_epi32(middle, 8), low);
            let value = _mm512_fmadd_ps(_mm512_cvtepi32_ps(high), _mm512_set1_ps(65536.0), _mm512_cvtepi32_ps(joined));
            acc[j] = _mm512_fmadd_ps(value, _mm512_mul_ps(scale_x, _mm512_set1_ps(scale)), acc[j]);
            acc[j] = _mm512_fmadd_ps(sum_x, _mm512_set1_ps(min), acc[j]);
        }
    }
    let mut out = [[0f32; LANES]; 4];
    for (out, acc) in out.iter_mut().zip(acc) {
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), acc) };
    }
    out
}
