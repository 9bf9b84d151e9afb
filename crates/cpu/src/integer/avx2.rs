//! The AVX2 build (x86-64, chosen at run time) and its AVX-VNNI variant ([`PairSums`]): a
//! block's quants as unsigned bytes against the three digits, `vpmaddubsw` on 32 at a time,
//! `vpmaddwd` by the sub-block's scale (AVX-VNNI's `vpdpwssd` also adds), the digits' sums joined
//! in f32 once per block. The AVX-512 build takes its loads, its f32 total and an odd last block
//! from here, and the tile's dequantization (`crate::dequant`) the K-quants' block readers.

use std::arch::x86_64::*;

use super::{
    BLOCK, GgmlType, IntegerRow, KFormat, Q4k, Q5k, Q6k, SUPER_BLOCK, Unsigned32, half, k_rows, k_scales_and_mins,
    prefetch_ahead,
};

/// How a build adds the 16-bit pair products `a·b` to 32-bit lanes, and its functions with
/// its target features.
pub(super) trait PairSums {
    /// `sum + Σ a·b` of each pair of 16-bit lanes.
    ///
    /// # Safety
    /// Only inlined into a function with the build's target features.
    unsafe fn add(sum: __m256i, a: __m256i, b: __m256i) -> __m256i;

    /// A row of a 32-value format.
    ///
    /// # Safety
    /// Only on a CPU with the build's target features.
    unsafe fn row32(ggml_type: GgmlType, row: &[u8], x: &IntegerRow) -> f32;

    /// A row of K-quant `F`.
    ///
    /// # Safety
    /// Only on a CPU with the build's target features.
    unsafe fn k_row<F: KBlock, const PREFETCH: bool>(row: &[u8], x: &IntegerRow) -> f32;
}

/// AVX2: `vpmaddwd`, then `vpaddd`.
pub(super) struct Madd;

impl PairSums for Madd {
    #[inline(always)]
    unsafe fn add(sum: __m256i, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_add_epi32(sum, _mm256_madd_epi16(a, b)) }
    }

    unsafe fn row32(ggml_type: GgmlType, row: &[u8], x: &IntegerRow) -> f32 {
        // SAFETY: as this function's.
        unsafe { row32_avx2(ggml_type, row, x) }
    }

    unsafe fn k_row<F: KBlock, const PREFETCH: bool>(row: &[u8], x: &IntegerRow) -> f32 {
        // SAFETY: as this function's.
        unsafe { k_row_avx2::<F, PREFETCH>(row, x) }
    }
}

/// AVX-VNNI: `vpdpwssd`, both in one instruction.
pub(super) struct Vnni;

impl PairSums for Vnni {
    #[inline(always)]
    unsafe fn add(sum: __m256i, a: __m256i, b: __m256i) -> __m256i {
        unsafe { _mm256_dpwssd_avx_epi32(sum, a, b) }
    }

    unsafe fn row32(ggml_type: GgmlType, row: &[u8], x: &IntegerRow) -> f32 {
        // SAFETY: as this function's.
        unsafe { row32_vnni(ggml_type, row, x) }
    }

    unsafe fn k_row<F: KBlock, const PREFETCH: bool>(row: &[u8], x: &IntegerRow) -> f32 {
        // SAFETY: as this function's.
        unsafe { k_row_vnni::<F, PREFETCH>(row, x) }
    }
}

/// A row of `ggml_type` against `x`: each 32-value format's loop, and each K-quant's, prefetched
/// or not ([`IntegerRow::prefetched`]), a function of its own (as in the AVX-512 build, whose
/// `row_dot` says why).
///
/// # Safety
/// Only on a CPU with `P`'s target features.
pub(super) unsafe fn row_dot<P: PairSums>(ggml_type: GgmlType, row: &[u8], x: &IntegerRow) -> f32 {
    // SAFETY: as this function's.
    unsafe {
        if IntegerRow::scale_block(ggml_type) == Some(BLOCK) {
            P::row32(ggml_type, row, x)
        } else {
            k_rows!(ggml_type, x.prefetched(ggml_type), P::k_row(row, x))
        }
    }
}

/// The AVX2 build's rows of the 32-value formats.
#[target_feature(enable = "avx2,fma,f16c")]
fn row32_avx2(ggml_type: GgmlType, row: &[u8], x: &IntegerRow) -> f32 {
    // SAFETY: inlined here, with AVX2 and FMA.
    unsafe { row32::<Madd>(ggml_type, row, x) }
}

/// The AVX-VNNI build's rows of the 32-value formats.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
fn row32_vnni(ggml_type: GgmlType, row: &[u8], x: &IntegerRow) -> f32 {
    // SAFETY: inlined here, with AVX2, FMA and AVX-VNNI.
    unsafe { row32::<Vnni>(ggml_type, row, x) }
}

/// The AVX2 build's rows of K-quant `F`.
#[target_feature(enable = "avx2,fma,f16c")]
fn k_row_avx2<F: KBlock, const PREFETCH: bool>(row: &[u8], x: &IntegerRow) -> f32 {
    // SAFETY: inlined here, with AVX2 and FMA.
    unsafe { k_row::<Madd, F, PREFETCH>(row, x) }
}

/// The AVX-VNNI build's rows of K-quant `F`.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
fn k_row_vnni<F: KBlock, const PREFETCH: bool>(row: &[u8], x: &IntegerRow) -> f32 {
    // SAFETY: inlined here, with AVX2, FMA and AVX-VNNI.
    unsafe { k_row::<Vnni, F, PREFETCH>(row, x) }
}

// Every function below is inlined into one of the four above, which give it its target
// features (SAFETY, for each `unsafe` block: the intrinsics need no more than those).

#[inline(always)]
unsafe fn row32<P: PairSums>(ggml_type: GgmlType, row: &[u8], x: &IntegerRow) -> f32 {
    // Each format its own copy of the loop, its layout a constant there.
    unsafe {
        match ggml_type {
            GgmlType::Q4_0 => unsigned32_row::<P>(Unsigned32::Q4_0, row, x),
            GgmlType::Q4_1 => unsigned32_row::<P>(Unsigned32::Q4_1, row, x),
            GgmlType::Q5_0 => unsigned32_row::<P>(Unsigned32::Q5_0, row, x),
            GgmlType::Q5_1 => unsigned32_row::<P>(Unsigned32::Q5_1, row, x),
            GgmlType::Q8_0 => q8_0_row::<P>(row, x),
            other => unreachable!("{other} does not go through integers"),
        }
    }
}

/// A row of `F`'s blocks, prefetched as it goes with `PREFETCH`.
#[inline(always)]
unsafe fn k_row<P: PairSums, F: KBlock, const PREFETCH: bool>(row: &[u8], x: &IntegerRow) -> f32 {
    let bytes = F::TYPE.block_layout().1 as usize;
    let mut lanes = unsafe { _mm256_setzero_ps() };
    for (b, block) in row.chunks_exact(bytes).take(x.blocks_of(F::TYPE)).enumerate() {
        if PREFETCH {
            prefetch_ahead(row, b * bytes, bytes);
        }
        lanes = unsafe { F::add::<P>(block, x, b, lanes) };
    }
    unsafe { total(lanes) }
}

/// A K-quant format's block products in this build.
pub(super) trait KBlock: KFormat {
    /// Block `b` of a row against `x`, added to `lanes`.
    ///
    /// # Safety
    /// Only inlined into a function with `P`'s target features.
    unsafe fn add<P: PairSums>(block: &[u8], x: &IntegerRow, b: usize, lanes: __m256) -> __m256;
}

impl KBlock for Q4k {
    #[inline(always)]
    unsafe fn add<P: PairSums>(block: &[u8], x: &IntegerRow, b: usize, lanes: __m256) -> __m256 {
        unsafe { q4_k::<P>(block, x, b, lanes) }
    }
}

impl KBlock for Q5k {
    #[inline(always)]
    unsafe fn add<P: PairSums>(block: &[u8], x: &IntegerRow, b: usize, lanes: __m256) -> __m256 {
        unsafe { q5_k::<P>(block, x, b, lanes) }
    }
}

impl KBlock for Q6k {
    #[inline(always)]
    unsafe fn add<P: PairSums>(block: &[u8], x: &IntegerRow, b: usize, lanes: __m256) -> __m256 {
        unsafe { q6_k::<P>(block, x, b, lanes) }
    }
}

/// The f16s at `at` and `at + 2` of a block (F16C).
#[inline(always)]
pub(super) unsafe fn f16_pair(block: &[u8], at: usize) -> (f32, f32) {
    let pair = i32::from_le_bytes(block[at..at + 4].try_into().expect("4"));
    unsafe {
        let both = _mm_cvtph_ps(_mm_cvtsi32_si128(pair));
        (_mm_cvtss_f32(both), _mm_cvtss_f32(_mm_movehdup_ps(both)))
    }
}

/// A row of `format`'s blocks (`d·q + m`) against `x` (rounded per 32).
#[inline(always)]
unsafe fn unsigned32_row<P: PairSums>(format: Unsigned32, row: &[u8], x: &IntegerRow) -> f32 {
    let (mut lanes, mut minimums) = (unsafe { _mm256_setzero_ps() }, 0f32);
    for (block, [d0, d1, d2], scale, sum) in x.blocks32(row, format.bytes) {
        // (Not `map`: a closure there does not take this function's target features.)
        let digits = unsafe { [load(d0, 0), load(d1, 0), load(d2, 0)] };
        let m;
        (lanes, m) = unsafe { unsigned32::<P>(format, block, digits, (scale, sum), lanes) };
        minimums += m * sum;
    }
    unsafe { total(lanes) + minimums }
}

/// A row of Q8_0 blocks against `x` (rounded per 32).
#[inline(always)]
unsafe fn q8_0_row<P: PairSums>(row: &[u8], x: &IntegerRow) -> f32 {
    let mut lanes = unsafe { _mm256_setzero_ps() };
    for (block, [d0, d1, d2], scale, _) in x.blocks32(row, 34) {
        let digits = unsafe { [load(d0, 0), load(d1, 0), load(d2, 0)] };
        lanes = unsafe { q8_0::<P>(block, digits, scale, lanes) };
    }
    unsafe { total(lanes) }
}

/// One block of `format` (`d·q + m`, 32 unsigned quants) against its activations' three
/// digits, `scale` and `Σx`: `d·Σq·x` added to `lanes`, and `m`, which the caller multiplies
/// by `Σx` (Q4_0's and Q5_0's `m = −offset·d` is in `lanes`, and `m` zero).
#[inline(always)]
pub(super) unsafe fn unsigned32<P: PairSums>(
    format: Unsigned32,
    block: &[u8],
    [d0, d1, d2]: [__m256i; 3],
    scale_and_sum: (f32, f32),
    lanes: __m256,
) -> (__m256, f32) {
    unsafe {
        let quants = unsigned32_quants(format, block);
        let (zero, ones) = (_mm256_setzero_si256(), _mm256_set1_epi16(1));
        // The digits joined in i32: at most 4·31·0x7F7F7F per lane, within i32.
        let high = P::add(
            P::add(zero, _mm256_maddubs_epi16(quants, d0), _mm256_set1_epi16(256)),
            _mm256_maddubs_epi16(quants, d1),
            ones,
        );
        let sum = P::add(_mm256_slli_epi32(high, 8), _mm256_maddubs_epi16(quants, d2), ones);
        unsigned32_scaled(format, block, sum, scale_and_sum, lanes)
    }
}

/// A block's 32 quants of `format`, a byte each: values 0..16 in the low half, 16..32 in the
/// high.
#[inline(always)]
pub(super) unsafe fn unsigned32_quants(format: Unsigned32, block: &[u8]) -> __m256i {
    unsafe {
        let nibbles = _mm_set1_epi8(0x0F);
        let qs = _mm_loadu_si128(block[format.nibbles..format.nibbles + 16].as_ptr().cast());
        let quants = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), nibbles), _mm_and_si128(qs, nibbles));
        match format.fifth_bits {
            Some(_) => _mm256_or_si256(quants, fifth_bits(format.fifth_word(block))),
            None => quants,
        }
    }
}

/// A block of `format` once its quants' products with the joined digits are summed in eight
/// i32 lanes (`sum`): as [`unsigned32`] returns.
#[inline(always)]
pub(super) unsafe fn unsigned32_scaled(
    format: Unsigned32,
    block: &[u8],
    sum: __m256i,
    (scale, sum_x): (f32, f32),
    lanes: __m256,
) -> (__m256, f32) {
    unsafe {
        let sum = _mm256_cvtepi32_ps(sum);
        match format.offset {
            None => {
                let (d, m) = f16_pair(block, 0);
                (_mm256_fmadd_ps(sum, _mm256_set1_ps(d * scale), lanes), m)
            }
            Some(offset) => {
                // `d` in every lane straight from its f16, and `−offset·Σx` an eighth in each
                // lane. (With `d` a scalar from its two bytes alone, LLVM inserted them into
                // the register that summed `m·Σx`, `vpinsrw`: that false dependency made
                // these two formats 1.6x slower than Q4_1.)
                let d = _mm256_cvtph_ps(_mm_set1_epi16(i16::from_le_bytes([block[0], block[1]])));
                let offsets = _mm256_set1_ps(offset * sum_x / 8.0);
                (_mm256_fmadd_ps(_mm256_fmsub_ps(sum, _mm256_set1_ps(scale), offsets), d, lanes), 0.0)
            }
        }
    }
}

/// 16 in byte `j` where bit `j` of `bits` is set, else 0: Q5_0's and Q5_1's fifth bits as
/// their quants take them.
#[inline(always)]
unsafe fn fifth_bits(bits: u32) -> __m256i {
    unsafe {
        // Byte `j`: the byte of `bits` that holds its bit (a shuffle within each 128-bit half,
        // each holding the whole word), then that bit alone.
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(bits as i32),
            _mm256_set_epi64x(0x0303_0303_0303_0303, 0x0202_0202_0202_0202, 0x0101_0101_0101_0101, 0),
        );
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(16))
    }
}

/// One Q8_0 block (`d·q`, 32 signed quants) against its activations' three digits and
/// `scale`, added to `lanes`: the positive quants' products less the negative ones'
/// magnitudes'.
#[inline(always)]
pub(super) unsafe fn q8_0<P: PairSums>(block: &[u8], [d0, d1, d2]: [__m256i; 3], scale: f32, lanes: __m256) -> __m256 {
    unsafe {
        let (positive, negative) = q8_0_parts(block);
        let zero = _mm256_setzero_si256();
        // Σ scale·q·d of one digit place (the pairs at most 2·128·128 in magnitude: each part
        // is summed to i32 before the other is taken off).
        let place = |sum: __m256i, digits: __m256i, scale: __m256i| {
            let positive = P::add(sum, _mm256_maddubs_epi16(positive, digits), scale);
            let negative = P::add(zero, _mm256_maddubs_epi16(negative, digits), scale);
            _mm256_sub_epi32(positive, negative)
        };
        let ones = _mm256_set1_epi16(1);
        // d₀·2⁸ + d₁ in i32 (at most 4·128·(128·2⁸ + 128)); times 2⁸ it might not be.
        let high = place(place(zero, d0, _mm256_set1_epi16(256)), d1, ones);
        let low = place(zero, d2, ones);
        q8_0_scaled(block, [high, low], scale, lanes)
    }
}

/// A Q8_0 block's quants in two unsigned parts: the positive ones, and the negative ones'
/// magnitudes (−128 as the byte 128), each 0 where the other is not.
#[inline(always)]
unsafe fn q8_0_parts(block: &[u8]) -> (__m256i, __m256i) {
    unsafe {
        let q = load(block, 2);
        let positive = _mm256_max_epi8(q, _mm256_setzero_si256());
        (positive, _mm256_sub_epi8(positive, q))
    }
}

/// A Q8_0 block once its products are summed in eight i32 lanes, `high` (`Σq·d₀·2⁸ + Σq·d₁`)
/// and `low` (`Σq·d₂`): `d·scale·(high·2⁸ + low)` added to `lanes`.
#[inline(always)]
pub(super) unsafe fn q8_0_scaled(block: &[u8], [high, low]: [__m256i; 2], scale: f32, lanes: __m256) -> __m256 {
    unsafe {
        let d = f16_pair(block, 0).0;
        let value = _mm256_fmadd_ps(_mm256_cvtepi32_ps(high), _mm256_set1_ps(256.0), _mm256_cvtepi32_ps(low));
        _mm256_fmadd_ps(value, _mm256_set1_ps(d * scale), lanes)
    }
}

/// The 128 quants of half `half_block` of a Q6_K block, unsigned (0..64), in its four runs of 32
/// (as `nucleus_gguf`'s `dequant.rs` reads them): each quant's low four bits and, moved to bits 4
/// and 5 of its byte by 16-bit shifts (what one brings across a byte falls outside the mask), its
/// two upper bits. The tile's dequantization reads them too (`crate::dequant`).
#[inline(always)]
pub(crate) unsafe fn q6_k_runs(block: &[u8], half_block: usize) -> [__m256i; 4] {
    unsafe {
        let (nibbles, two_bits) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
        let (ql, qh) = (64 * half_block, 128 + 32 * half_block);
        let (low, high, qh) = (load(block, ql), load(block, ql + 32), load(block, qh));
        let (low_high, high_high) = (_mm256_srli_epi16(low, 4), _mm256_srli_epi16(high, 4));
        [
            or_masked(_mm256_and_si256(low, nibbles), _mm256_slli_epi16(qh, 4), two_bits),
            or_masked(_mm256_and_si256(high, nibbles), _mm256_slli_epi16(qh, 2), two_bits),
            or_masked(_mm256_and_si256(low_high, nibbles), qh, two_bits),
            or_masked(_mm256_and_si256(high_high, nibbles), _mm256_srli_epi16(qh, 2), two_bits),
        ]
    }
}

/// `bits | (upper & mask)`.
#[inline(always)]
unsafe fn or_masked(bits: __m256i, upper: __m256i, mask: __m256i) -> __m256i {
    unsafe { _mm256_or_si256(bits, _mm256_and_si256(upper, mask)) }
}

/// 32 bytes from `at`.
#[inline(always)]
pub(super) unsafe fn load<T>(bytes: &[T], at: usize) -> __m256i {
    let bytes = &bytes[at..at + 32 / size_of::<T>()];
    // SAFETY: 32 bytes in bounds (sliced above).
    unsafe { _mm256_loadu_si256(bytes.as_ptr().cast()) }
}

/// Eight f32s from `at`.
#[inline(always)]
pub(super) unsafe fn load_f32(values: &[f32], at: usize) -> __m256 {
    let values = &values[at..at + 8];
    // SAFETY: eight f32s in bounds (sliced above).
    unsafe { _mm256_loadu_ps(values.as_ptr()) }
}

/// Eight bytes from `at`, in the low half of a register.
#[inline(always)]
pub(super) unsafe fn load8(bytes: &[u8], at: usize) -> __m128i {
    unsafe { _mm_cvtsi64_si128(i64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"))) }
}

/// `sum + Σ scale · q·d` of 32 unsigned quants (< 64) and 32 digits, in eight i32 lanes:
/// exact (`vpmaddubsw`'s pairs are at most 2·63·128, below its saturation).
#[inline(always)]
unsafe fn add_products<P: PairSums>(sum: __m256i, quants: __m256i, digits: __m256i, scale: __m256i) -> __m256i {
    unsafe { P::add(sum, _mm256_maddubs_epi16(quants, digits), scale) }
}

/// `(d₀·2¹⁶ + d₁·2⁸ + d₂)` of the three digits' sums, in f32 lanes.
#[inline(always)]
unsafe fn joined(sums: [__m256i; 3]) -> __m256 {
    unsafe {
        let [d0, d1, d2] = sums.map(|s| _mm256_cvtepi32_ps(s));
        _mm256_fmadd_ps(d0, _mm256_set1_ps(65536.0), _mm256_fmadd_ps(d1, _mm256_set1_ps(256.0), d2))
    }
}

#[inline(always)]
pub(super) unsafe fn total(lanes: __m256) -> f32 {
    unsafe {
        let sum = _mm_add_ps(_mm256_castps256_ps128(lanes), _mm256_extractf128_ps(lanes, 1));
        let sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
        _mm_cvtss_f32(_mm_add_ss(sum, _mm_shuffle_ps(sum, sum, 1)))
    }
}

/// One Q4_K block against block `b` of `x`, added to `lanes`.
#[inline(always)]
unsafe fn q4_k<P: PairSums>(block: &[u8], x: &IntegerRow, b: usize, lanes: __m256) -> __m256 {
    unsafe { k_block::<P>(block, x, b, lanes, Q4kGroups(block)) }
}

/// One Q5_K block (Q4_K's with a fifth bit per quant in `qh`) against block `b` of `x`.
#[inline(always)]
unsafe fn q5_k<P: PairSums>(block: &[u8], x: &IntegerRow, b: usize, lanes: __m256) -> __m256 {
    unsafe { k_block::<P>(block, x, b, lanes, Q5kGroups::new(block)) }
}

/// A Q4_K or Q5_K block's groups of 64 quants, the low and the high 32 as unsigned bytes: a
/// trait, not a closure (a closure was called out of line, without the build's target
/// features, once the K-quant loop had two copies).
pub(crate) trait Groups {
    /// # Safety
    /// Only inlined into a function with the build's target features.
    unsafe fn group(&self, group: usize) -> (__m256i, __m256i);
}

/// Q4_K's block: the group's 32 bytes, low nibbles then high.
pub(crate) struct Q4kGroups<'a>(pub(crate) &'a [u8]);

impl Groups for Q4kGroups<'_> {
    #[inline(always)]
    unsafe fn group(&self, group: usize) -> (__m256i, __m256i) {
        unsafe {
            let (q, nibbles) = (load(self.0, 16 + 32 * group), _mm256_set1_epi8(0x0F));
            (_mm256_and_si256(q, nibbles), _mm256_and_si256(_mm256_srli_epi16(q, 4), nibbles))
        }
    }
}

/// Q5_K's block and its 32 bytes of fifth bits.
pub(crate) struct Q5kGroups<'a> {
    block: &'a [u8],
    qh: __m256i,
}

impl Groups for Q5kGroups<'_> {
    #[inline(always)]
    unsafe fn group(&self, group: usize) -> (__m256i, __m256i) {
        unsafe {
            let (q, nibbles) = (load(self.block, 48 + 32 * group), _mm256_set1_epi8(0x0F));
            (
                _mm256_or_si256(_mm256_and_si256(q, nibbles), self.fifths(2 * group)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), nibbles), self.fifths(2 * group + 1)),
            )
        }
    }
}

impl<'a> Q5kGroups<'a> {
    /// A Q5_K block, its fifth bits loaded.
    #[inline(always)]
    pub(crate) unsafe fn new(block: &'a [u8]) -> Self {
        Self { block, qh: unsafe { load(block, 16) } }
    }

    /// 16 where bit `shift` of the quant's `qh` byte is set.
    #[inline(always)]
    unsafe fn fifths(&self, shift: usize) -> __m256i {
        unsafe {
            let bit = _mm256_set1_epi8(1 << shift);
            _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(self.qh, bit), bit), _mm256_set1_epi8(16))
        }
    }
}

/// What Q4_K and Q5_K share (`d·scale·q − dmin·min` in eight sub-blocks of 32): four groups
/// of 64 quants, `quants.group(group)` the low and the high 32 as unsigned bytes.
#[inline(always)]
unsafe fn k_block<P: PairSums>(block: &[u8], x: &IntegerRow, b: usize, lanes: __m256, quants: impl Groups) -> __m256 {
    unsafe {
        let (d, dmin) = (half(block, 0), half(block, 2));
        let (scales, mins) = k_scales_and_mins(&block[4..16]);
        // The eight scales as 16-bit lanes, in both halves of the register; sub-block `sub`'s
        // broadcast by a byte shuffle.
        let scales = _mm256_cvtepu8_epi16(_mm_cvtsi64_si128(scales as i64));
        let scales = _mm256_permute4x64_epi64(scales, 0b0100_0100);
        let broadcast = |sub: usize| {
            let pair = (2 * sub as i16) | ((2 * sub as i16 + 1) << 8);
            _mm256_shuffle_epi8(scales, _mm256_set1_epi16(pair))
        };
        let xs = x.block_digits(b);
        let mut sums = [_mm256_setzero_si256(); 3];
        for group in 0..4 {
            let (low, high) = quants.group(group);
            let (low_scale, high_scale) = (broadcast(2 * group), broadcast(2 * group + 1));
            for (digits, sum) in xs.iter().zip(&mut sums) {
                // At most 8 · 2·31·128·63 per lane: far within i32.
                let (low_x, high_x) = (load(*digits, 64 * group), load(*digits, 64 * group + 32));
                *sum = add_products::<P>(add_products::<P>(*sum, low, low_x, low_scale), high, high_x, high_scale);
            }
        }
        let mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(mins as i64)));
        let lanes = _mm256_fmadd_ps(joined(sums), _mm256_set1_ps(d * x.scale(SUPER_BLOCK, b)), lanes);
        _mm256_fnmadd_ps(_mm256_mul_ps(mins, load_f32(&x.sums32, b * 8)), _mm256_set1_ps(dmin), lanes)
    }
}

/// One Q6_K block (`d·scale·(q − 32)`, sixteen sub-blocks of 16 with signed 8-bit scales)
/// against block `b` of `x`, added to `lanes`: the quants unsigned (0..64) in the products,
/// the 32 taken off as `32 · scale · Σx` of each sub-block.
#[inline(always)]
unsafe fn q6_k<P: PairSums>(block: &[u8], x: &IntegerRow, b: usize, lanes: __m256) -> __m256 {
    unsafe {
        let d = half(block, 208);
        let xs = x.block_digits(b);
        // The sixteen scales as 16-bit lanes; sub-blocks `2k` and `2k + 1` (a run of 32) are
        // 32-bit lane `k`, broadcast, then the low half of the register takes the first scale
        // and the high half the second (the products of a run's first 16 quants land in the
        // low eight 16-bit lanes).
        let (low_scales, high_scales) = (load8(block, 192), load8(block, 200));
        let scales = _mm256_cvtepi8_epi16(_mm_unpacklo_epi64(low_scales, high_scales));
        let split = _mm256_setr_epi8(
            0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
        );
        let mut sums = [_mm256_setzero_si256(); 3];
        for half_block in 0..2 {
            for (run, quants) in q6_k_runs(block, half_block).into_iter().enumerate() {
                let pair = _mm256_permutevar8x32_epi32(scales, _mm256_set1_epi32(4 * half_block as i32 + run as i32));
                let scale = _mm256_shuffle_epi8(pair, split);
                let at = 128 * half_block + 32 * run;
                for (digits, sum) in xs.iter().zip(&mut sums) {
                    // At most 8 · 2·63·128·128 per lane: within i32.
                    *sum = add_products::<P>(*sum, quants, load(*digits, at), scale);
                }
            }
        }
        // 32 · Σ scale · Σx over the sixteen sub-blocks.
        let float_scales = |bytes: __m128i| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
        let offsets = _mm256_fmadd_ps(
            float_scales(low_scales),
            load_f32(&x.sums, b * 16),
            _mm256_mul_ps(float_scales(high_scales), load_f32(&x.sums, b * 16 + 8)),
        );
        let lanes = _mm256_fmadd_ps(joined(sums), _mm256_set1_ps(d * x.scale(SUPER_BLOCK, b)), lanes);
        _mm256_fnmadd_ps(offsets, _mm256_set1_ps(32.0 * d), lanes)
    }
}
