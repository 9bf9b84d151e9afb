//! The WebAssembly relaxed SIMD build (Chromium's, Firefox's): the quants (7-bit) against the
//! three digits by its byte dot product, 16 at a time, summed one of two ways ([`Sums`], chosen
//! at load: `byte_dot.rs`). The K-quants' blocks are read as plain SIMD reads them, and Q8_0's
//! signed quants go through plain SIMD's widened products (`simd128.rs`).

use std::arch::wasm32::*;

use super::simd128::{
    self, Constants, hoisted, k_header, k_row, load, q4_k_group, q5_k_fifth_bits, q5_k_group, q6_k_offsets, sum_lanes,
};
use super::{GgmlType, IntegerRow, SUPER_BLOCK, Unsigned32, apart, half};

/// The byte products' sums, one way per [`ByteDot`](super::ByteDot): 16 quants (< 64, so
/// 7-bit) times 16 digits (signed bytes). Exact either way: a pair of products is at most
/// 2·63·128 = 16,128, so x86's `pmaddubsw` does not saturate, and two pairs of quants below 32
/// (Q4_K's, Q5_K's, the 32-value formats') add in i16 to at most 15,872.
pub(crate) trait Sums {
    /// A sub-block of 32 quants (two registers) times its `scale`, into four i32 lanes.
    fn scaled32(quants: [v128; 2], digits: [v128; 2], scale: i16) -> v128;
    /// A sub-block of 16 quants (one register) times its `scale`, into four i32 lanes.
    fn scaled16(quants: v128, digits: v128, scale: i16) -> v128;
    /// 32 quants' products, into four i32 lanes.
    fn sum32(quants: [v128; 2], digits: [v128; 2]) -> v128;
}

pub(crate) struct Accumulating;

impl Sums for Accumulating {
    #[inline(always)]
    fn scaled32(quants: [v128; 2], digits: [v128; 2], scale: i16) -> v128 {
        i32x4_mul(Self::sum32(quants, digits), i32x4_splat(scale.into()))
    }

    #[inline(always)]
    fn scaled16(quants: v128, digits: v128, scale: i16) -> v128 {
        i32x4_mul(i32x4_relaxed_dot_i8x16_i7x16_add(digits, quants, i32x4_splat(0)), i32x4_splat(scale.into()))
    }

    #[inline(always)]
    fn sum32([q0, q1]: [v128; 2], [d0, d1]: [v128; 2]) -> v128 {
        i32x4_relaxed_dot_i8x16_i7x16_add(d1, q1, i32x4_relaxed_dot_i8x16_i7x16_add(d0, q0, i32x4_splat(0)))
    }
}

pub(crate) struct Paired;

impl Paired {
    /// Two registers' pairs added in i16.
    #[inline(always)]
    fn pairs32([q0, q1]: [v128; 2], [d0, d1]: [v128; 2]) -> v128 {
        i16x8_add(i16x8_relaxed_dot_i8x16_i7x16(d0, q0), i16x8_relaxed_dot_i8x16_i7x16(d1, q1))
    }
}

impl Sums for Paired {
    #[inline(always)]
    fn scaled32(quants: [v128; 2], digits: [v128; 2], scale: i16) -> v128 {
        i32x4_dot_i16x8(Self::pairs32(quants, digits), i16x8_splat(scale))
    }

    #[inline(always)]
    fn scaled16(quants: v128, digits: v128, scale: i16) -> v128 {
        i32x4_dot_i16x8(i16x8_relaxed_dot_i8x16_i7x16(digits, quants), i16x8_splat(scale))
    }

    #[inline(always)]
    fn sum32(quants: [v128; 2], digits: [v128; 2]) -> v128 {
        i32x4_extadd_pairwise_i16x8(Self::pairs32(quants, digits))
    }
}

/// Per row: the blocks' products in four f32 lanes, what their minimums or offsets take off in
/// four more. Each format's loop a function of its own, called once per weight row (see
/// [`RowDot`](super::RowDot)).
#[inline(never)]
pub(super) fn row_dot<S: Sums>(ggml_type: GgmlType, row: &[u8], x: &IntegerRow) -> f32 {
    match ggml_type {
        // The 32-value formats: each its own copy of the loop, its layout a constant there.
        GgmlType::Q4_0 => apart(|| unsigned32::<S>(Unsigned32::Q4_0, row, x)),
        GgmlType::Q4_1 => apart(|| unsigned32::<S>(Unsigned32::Q4_1, row, x)),
        GgmlType::Q5_0 => apart(|| unsigned32::<S>(Unsigned32::Q5_0, row, x)),
        GgmlType::Q5_1 => apart(|| unsigned32::<S>(Unsigned32::Q5_1, row, x)),
        // Q8_0's signed quants and digits both take 8 bits, where the byte dot product's
        // second operand takes 7: the quants widened to 16 bits against the halves, as in
        // plain SIMD (one 1,536 × 576 row in Node: 10.9 GMAC/s there; the quants split in
        // two 7-bit parts against the digits, 5.6; the f32 block, 6.7).
        GgmlType::Q8_0 => super::simd128::q8_0(row, x),
        GgmlType::Q4K => apart(|| k_row::<144>(GgmlType::Q4K, row, x, q4_k::<S>)),
        GgmlType::Q5K => apart(|| k_row::<176>(GgmlType::Q5K, row, x, q5_k::<S>)),
        GgmlType::Q6K => apart(|| k_row::<210>(GgmlType::Q6K, row, x, q6_k::<S>)),
        other => unreachable!("{other} does not go through integers"),
    }
}

/// `(d₀·2¹⁶ + d₁·2⁸ + d₂)` of the three digits' sums, in f32 lanes.
#[inline(always)]
fn joined(c: &Constants, sums: [v128; 3]) -> v128 {
    let [d0, d1, d2] = sums.map(|s| f32x4_convert_i32x4(s));
    let [second, first] = c.places;
    f32x4_relaxed_madd(d0, first, f32x4_relaxed_madd(d1, second, d2))
}

/// A row of `format`'s blocks (`d·q + m`) against `x` (rounded per 32): each block's digits'
/// sums joined in i32 (at most 8·31·0x7F7F7F per lane, below 2³¹), `m · Σx` added apart. A
/// block's `d` and `m` converted from f16 one at a time or, where that measured faster
/// ([`Unsigned32::halves_together`]: Q4_1), together in one vector.
#[inline(always)]
fn unsigned32<S: Sums>(format: Unsigned32, row: &[u8], x: &IntegerRow) -> f32 {
    let c = Constants::new();
    let bytes = format.bytes();
    let mut lanes = f32x4_splat(0.0);
    if format.halves_together {
        let (halves, mut minimums) = (Halves::new(), f32x4_splat(0.0));
        for (block, digits, scale, sum) in x.blocks32(row, bytes) {
            // `d · scale` and `m · Σx` in lanes 0 and 1.
            let scaled = halves.scaled(block, scale, sum);
            let d_scale = i32x4_shuffle::<0, 0, 0, 0>(scaled, scaled);
            lanes = f32x4_add(lanes, f32x4_mul(products::<S>(format, &c, block, digits), d_scale));
            minimums = f32x4_add(minimums, scaled);
        }
        return sum_lanes(lanes) + f32x4_extract_lane::<1>(minimums);
    }
    let mut minimums = 0f32;
    for (block, digits, scale, sum) in x.blocks32(row, bytes) {
        let (d, m) = format.scale_and_min((half(block, 0), half(block, 2)));
        lanes = f32x4_add(lanes, f32x4_mul(products::<S>(format, &c, block, digits), f32x4_splat(d * scale)));
        minimums += m * sum;
    }
    sum_lanes(lanes) + minimums
}

/// A block of `format` against its digits: its products in f32 lanes, before its `d` and the
/// activations' scale. A function, not a closure: a closure that both loops above call was
/// compiled apart and called per block (Q4_1's product at 3.1 GMAC/s in Chromium, not 6.5).
#[inline(always)]
fn products<S: Sums>(format: Unsigned32, c: &Constants, block: &[u8], [d0, d1, d2]: [&[i8]; 3]) -> v128 {
    let [low, high] = c.unsigned32_quants(format, block);
    let place = |digits: &[i8]| S::sum32([low, high], [load(digits, 0), load(digits, 16)]);
    f32x4_convert_i32x4(i32x4_add(i32x4_shl(i32x4_add(i32x4_shl(place(d0), 8), place(d1)), 8), place(d2)))
}

/// A block's two f16s converted together, in one vector: the vectors that takes, made once a
/// row ([`hoisted`]) by the products that use them alone (five more registers in [`Constants`]
/// slowed the others: Q4_0's product 8.1 → 7.6–7.8 GMAC/s in Chromium).
#[derive(Clone, Copy)]
struct Halves {
    /// An f16's magnitude bits in an f32's place (`0x7FFF << 13`), 2¹¹² in f32, the largest
    /// finite f16's magnitude bits there, an f32's exponent bits, and its sign bit.
    constants: [v128; 5],
}

impl Halves {
    #[inline(always)]
    fn new() -> Self {
        hoisted(Self {
            constants: [
                u32x4_splat(0x7FFF << 13),
                f32x4_splat(f32::from_bits((127 + 112) << 23)),
                u32x4_splat((0x7C00 << 13) - 1),
                u32x4_splat(0x7F80_0000),
                u32x4_splat(0x8000_0000),
            ],
        })
    }

    /// The f16s in the low 16 bits of each u32 lane, as f32 lanes: `nucleus_gguf`'s
    /// [`f16_to_f32`](nucleus_gguf::f16_to_f32) four at a time, bit for bit (subnormals,
    /// infinities and NaNs too).
    #[inline(always)]
    fn f16x4_to_f32(&self, bits: v128) -> v128 {
        let [magnitude_bits, two_112, largest, exponent, sign] = self.constants;
        let magnitude = v128_and(u32x4_shl(bits, 13), magnitude_bits);
        // A normal or subnormal f16's bits in an f32's place are its value times 2⁻¹¹², exactly.
        let finite = f32x4_mul(magnitude, two_112);
        // An infinity or NaN: exponent 31, 143 after the product; 255 wanted.
        let special = v128_and(i32x4_gt(magnitude, largest), exponent);
        v128_or(v128_or(finite, special), v128_and(u32x4_shl(bits, 16), sign))
    }

    /// A block's `d · scale` and `m · sum` (its first two f16s) in lanes 0 and 1, zero in 2
    /// and 3.
    #[inline(always)]
    fn scaled(&self, block: &[u8], scale: f32, sum: f32) -> v128 {
        let word = u32::from_le_bytes(block[..4].try_into().expect("4"));
        let halves = self.f16x4_to_f32(u32x4_extend_low_u16x8(u32x4_splat(word)));
        f32x4_mul(halves, f32x4(scale, sum, 0.0, 0.0))
    }
}

#[inline(always)]
fn q4_k<S: Sums>(block: &[u8; 144], x: &IntegerRow, b: usize, c: &Constants) -> (v128, v128) {
    k_block::<S>(block, x, b, c, |group| q4_k_group(block, group, c))
}

#[inline(always)]
fn q5_k<S: Sums>(block: &[u8; 176], x: &IntegerRow, b: usize, c: &Constants) -> (v128, v128) {
    let qh = q5_k_fifth_bits(block);
    k_block::<S>(block, x, b, c, |group| q5_k_group(block, &qh, group, c))
}

/// What Q4_K and Q5_K share: four groups of 64 quants, `quants(group)` the low sub-block's
/// 32 then the high one's, 16 to a register; the block's products and what its minimums take
/// off. The groups written out (each group's offsets constants, no loop to check).
#[inline(always)]
fn k_block<S: Sums>(
    block: &[u8],
    x: &IntegerRow,
    b: usize,
    c: &Constants,
    quants: impl Fn(usize) -> [v128; 4],
) -> (v128, v128) {
    let header = k_header(block, x, b);
    let xs = x.block_digits(b);
    let mut sums = [i32x4_splat(0); 3];
    // Written out: as a loop (even over `[0, 1, 2, 3]`) LLVM keeps it one, its offsets
    // variables and their bounds checked.
    k_group::<S>(quants(0), header.scales, 0, &xs, &mut sums);
    k_group::<S>(quants(1), header.scales, 1, &xs, &mut sums);
    k_group::<S>(quants(2), header.scales, 2, &xs, &mut sums);
    k_group::<S>(quants(3), header.scales, 3, &xs, &mut sums);
    (f32x4_mul(joined(c, sums), f32x4_splat(header.scale)), header.minimums)
}

/// Group `group` of a Q4_K or Q5_K block (64 quants, `q`: the low sub-block's 32 then the
/// high one's) against the block's digits `xs`, added to `sums`; `scales` the block's eight
/// sub-block scales, a byte each.
#[inline(always)]
fn k_group<S: Sums>(q: [v128; 4], scales: u64, group: usize, xs: &[&[i8; SUPER_BLOCK]; 3], sums: &mut [v128; 3]) {
    let scale = |sub: usize| i16::from((scales >> (8 * sub)) as u8);
    let (low_scale, high_scale) = (scale(2 * group), scale(2 * group + 1));
    let at = 64 * group;
    for (digits, sum) in xs.iter().zip(sums) {
        // At most 8 · 32·31·128·63 per lane: within i32.
        let d = |from: usize| [load(*digits, from), load(*digits, from + 16)];
        let low = S::scaled32([q[0], q[1]], d(at), low_scale);
        let high = S::scaled32([q[2], q[3]], d(at + 32), high_scale);
        *sum = i32x4_add(*sum, i32x4_add(low, high));
    }
}

/// One Q6_K block: the quants unsigned (0..64) in the products, the 32 taken off as
/// [`q6_k_offsets`]. Its four quarters written out, as in [`k_block`].
#[inline(always)]
fn q6_k<S: Sums>(block: &[u8; 210], x: &IntegerRow, b: usize, c: &Constants) -> (v128, v128) {
    let xs = x.block_digits(b);
    let mut sums = [i32x4_splat(0); 3];
    q6_k_quarter::<S>(block, 0, 0, &xs, c, &mut sums);
    q6_k_quarter::<S>(block, 0, 1, &xs, c, &mut sums);
    q6_k_quarter::<S>(block, 1, 0, &xs, c, &mut sums);
    q6_k_quarter::<S>(block, 1, 1, &xs, c, &mut sums);
    let scale = half(block, 208) * x.scale(SUPER_BLOCK, b);
    (f32x4_mul(joined(c, sums), f32x4_splat(scale)), q6_k_offsets(block, x, b))
}

/// A quarter of a Q6_K block ([`simd128::q6_k_quarter`]) against the block's digits, added to
/// `sums`.
#[inline(always)]
fn q6_k_quarter<S: Sums>(
    block: &[u8; 210],
    half_block: usize,
    sixteen: usize,
    xs: &[&[i8; SUPER_BLOCK]; 3],
    c: &Constants,
    sums: &mut [v128; 3],
) {
    for (quants, sub, at) in simd128::q6_k_quarter(block, half_block, sixteen, c) {
        let scale = i16::from(block[192 + sub] as i8);
        for (digits, sum) in xs.iter().zip(&mut *sums) {
            // At most 16 · 16·63·128·128 per lane: within i32.
            *sum = i32x4_add(*sum, S::scaled16(quants, load(*digits, at), scale));
        }
    }
}
