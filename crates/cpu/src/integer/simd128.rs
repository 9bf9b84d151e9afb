//! The WebAssembly SIMD build (WebKit's: no relaxed SIMD there): each block's quants widened to
//! 16 bits in registers against the activations' two 16-bit halves by `i32x4.dot_i16x8_s`. And
//! what both wasm builds share: the vector loads, the constants made once a row, the K-quants'
//! blocks unpacked in registers (which the tile's dequantization reads too, `crate::dequant`),
//! Q5_0's and Q5_1's fifth bits as bytes, and the 32-value formats' widened products, through
//! which relaxed SIMD takes Q8_0 (`relaxed::row_dot`).

use std::arch::wasm32::*;

#[cfg(not(target_feature = "relaxed-simd"))]
use super::apart;
use super::{BLOCK, GgmlType, IntegerRow, SUPER_BLOCK, Unsigned32, half, k_scales_and_mins};

/// A 32-value format's block as these products take it: its `d`, its quants widened to four
/// i16x8, its `m`. A method of a type, not a closure: a closure of a non-generic function is
/// compiled in one codegen unit, and called per block from another (the row's loop inlined
/// into each format's `apart`) plain SIMD's Q4_1 ran at 4.3 GMAC/s instead of 8.5 (Chromium,
/// with the release profile's 16 codegen units).
pub(super) trait Widen32: Copy {
    /// Whether a block's two halves' sums join in i32 (`256·h + l`) before their conversion:
    /// quants below 32, at most 8 · 31 · 0x7F7F7F a lane. Q8_0's (magnitudes to 128) do not.
    const JOIN_IN_I32: bool;
    fn widen(self, block: &[u8], c: &Constants) -> (f32, [v128; 4], f32);
}

#[cfg(not(target_feature = "relaxed-simd"))]
impl Widen32 for Unsigned32 {
    const JOIN_IN_I32: bool = true;

    #[inline(always)]
    fn widen(self, block: &[u8], c: &Constants) -> (f32, [v128; 4], f32) {
        let [low, high] = c.unsigned32_quants(self, block);
        let quants = [
            u16x8_extend_low_u8x16(low),
            u16x8_extend_high_u8x16(low),
            u16x8_extend_low_u8x16(high),
            u16x8_extend_high_u8x16(high),
        ];
        let (d, m) = self.scale_and_min((half(block, 0), half(block, 2)));
        (d, quants, m)
    }
}

/// Q8_0's blocks (`d·q`).
#[derive(Clone, Copy)]
pub(super) struct Q8_0;

impl Widen32 for Q8_0 {
    const JOIN_IN_I32: bool = false;

    #[inline(always)]
    fn widen(self, block: &[u8], _: &Constants) -> (f32, [v128; 4], f32) {
        let (first, second) = (load(block, 2), load(block, 18));
        let quants = [
            i16x8_extend_low_i8x16(first),
            i16x8_extend_high_i8x16(first),
            i16x8_extend_low_i8x16(second),
            i16x8_extend_high_i8x16(second),
        ];
        (half(block, 0), quants, 0.0)
    }
}

/// `Σ w·x` of a row of `format`'s blocks (`d·q + m`; relaxed SIMD has its byte dot product).
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
pub(super) fn unsigned32(format: Unsigned32, row: &[u8], x: &IntegerRow) -> f32 {
    let (lanes, minimums) = by_block(row, format.bytes, x, format);
    sum_lanes(lanes) + minimums
}

/// `value`, made where the compiler cannot see what it is: a vector constant made before a
/// loop and used in it stays in a register there. V8 (Chromium 156) otherwise makes a
/// constant again at each use, inside a loop at every iteration (a splat three instructions,
/// others more, and `u8x16.shr`'s mask with each shift): Q5_0's relaxed product, five
/// constants a block, ran at 5.0 GMAC/s with them made in the loop and 6.6 with them made once
/// a row (ARCHITECTURE.md, "The wasm products' loops, as V8 compiles them").
#[inline(always)]
pub(super) fn hoisted<T>(value: T) -> T {
    std::hint::black_box(value)
}

/// `a`'s bytes at `indices` (each below 16). Relaxed SIMD's swizzle is one `pshufb` on x86; the
/// plain one adds a saturating add per use wherever the indices are not a constant V8 sees, as
/// [`hoisted`] ones are not (ARCHITECTURE.md, "The wasm products' loops, as V8 compiles them").
#[cfg(target_feature = "relaxed-simd")]
#[inline(always)]
fn swizzle(a: v128, indices: v128) -> v128 {
    i8x16_relaxed_swizzle(a, indices)
}

/// `a`'s bytes at `indices`: plain SIMD has only the swizzle that zeroes for indices past 15.
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
fn swizzle(a: v128, indices: v128) -> v128 {
    i8x16_swizzle(a, indices)
}

/// The vectors the products use in every block, made once a row ([`hoisted`]), in both wasm
/// builds. A byte shift is a 16-bit one and a mask from here: V8 makes `u8x16.shr`'s and
/// `u8x16.shl`'s own mask at each use.
#[derive(Clone, Copy)]
pub(crate) struct Constants {
    /// 0x0F in each byte: a nibble.
    pub(super) nibbles: v128,
    /// 0x30 in each byte: Q6_K's two upper bits, in place.
    pub(super) two_bits: v128,
    /// 1 in each byte: Q5_K's fifth bit.
    pub(super) one: v128,
    /// 2⁸ and 2¹⁶ in each f32 lane: the weights of the middle and of the first digit place
    /// (relaxed SIMD), and 2⁸ that of the high half (plain SIMD, and Q8_0 in both).
    pub(super) places: [v128; 2],
    /// Q5_0's and Q5_1's fifth bits: the byte of their word that holds the bit of each of the
    /// low and of the high 16 quants, the bit in that byte, and 16.
    fifth: [v128; 4],
}

impl Constants {
    #[inline(always)]
    pub(crate) fn new() -> Self {
        hoisted(Self {
            nibbles: u8x16_splat(0x0F),
            two_bits: u8x16_splat(0x30),
            one: u8x16_splat(1),
            places: [f32x4_splat(256.0), f32x4_splat(65536.0)],
            fifth: [
                u8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                u8x16(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3),
                u64x2_splat(0x8040_2010_0804_0201),
                u8x16_splat(16),
            ],
        })
    }

    /// The 32 quants of a block of `format` as bytes (0..32), the first 16 then the last 16: each
    /// byte's low nibble, then its high one, with Q5_0's and Q5_1's fifth bits.
    #[inline(always)]
    pub(crate) fn unsigned32_quants(&self, format: Unsigned32, block: &[u8]) -> [v128; 2] {
        let qs = load(block, format.nibbles);
        let (low, high) = (v128_and(qs, self.nibbles), self.high_nibbles(qs));
        match format.fifth_bits {
            Some(_) => {
                let [first, second] = self.fifth_bits(format.fifth_word(block));
                [v128_or(low, first), v128_or(high, second)]
            }
            None => [low, high],
        }
    }

    /// The high nibble of each byte.
    #[inline(always)]
    pub(super) fn high_nibbles(&self, bytes: v128) -> v128 {
        v128_and(u16x8_shr(bytes, 4), self.nibbles)
    }

    /// Q5_0's and Q5_1's fifth bits (`bits`, bit `j` quant `j`'s) as 16 in the bytes of the
    /// quants they belong to: the low 16 quants', then the high 16's.
    #[inline(always)]
    pub(super) fn fifth_bits(&self, bits: u32) -> [v128; 2] {
        let word = u32x4_splat(bits);
        let [low, high, bit, sixteen] = self.fifth;
        let spread = |indices: v128| v128_and(i8x16_eq(v128_and(swizzle(word, indices), bit), bit), sixteen);
        [spread(low), spread(high)]
    }
}

/// `Σ w·x` of a row of Q8_0 blocks (`d·q`).
#[inline(always)]
pub(super) fn q8_0(row: &[u8], x: &IntegerRow) -> f32 {
    sum_lanes(by_block(row, 34, x, Q8_0).0)
}

/// The products of a row of `bytes`-byte blocks of 32 (`d·q + m`, each block widened by
/// `blocks`) in f32 lanes, and `Σ m · Σx`.
#[inline(always)]
fn by_block<B: Widen32>(row: &[u8], bytes: usize, x: &IntegerRow, blocks: B) -> (v128, f32) {
    debug_assert_eq!(x.block, BLOCK);
    let [high, low] = &x.halves;
    let halves = high.chunks_exact(BLOCK).zip(low.chunks_exact(BLOCK));
    let activations = halves.zip(x.scales.iter().zip(&x.sums32));
    let (mut lanes, mut minimums) = (f32x4_splat(0.0), 0f32);
    let c = Constants::new();
    for (block, ((high, low), (&scale, &sum))) in row.chunks_exact(bytes).zip(activations) {
        let (d, quants, m) = blocks.widen(block, &c);
        let (mut h, mut l) = (i32x4_splat(0), i32x4_splat(0));
        for (k, quants) in quants.into_iter().enumerate() {
            h = i32x4_add(h, i32x4_dot_i16x8(quants, load(high, 8 * k)));
            l = i32x4_add(l, i32x4_dot_i16x8(quants, load(low, 8 * k)));
        }
        let value = if B::JOIN_IN_I32 {
            f32x4_convert_i32x4(i32x4_add(i32x4_shl(h, 8), l))
        } else {
            f32x4_add(f32x4_mul(f32x4_convert_i32x4(h), c.places[0]), f32x4_convert_i32x4(l))
        };
        lanes = f32x4_add(lanes, f32x4_mul(value, f32x4_splat(d * scale)));
        minimums += m * sum;
    }
    (lanes, minimums)
}

// The K-quants, as both builds read their blocks; each build multiplies the quants its own
// way (relaxed SIMD's byte dot product against the digits, plain SIMD's quants widened to 16
// bits against the halves).

/// A row of K-quant `ggml_type`'s blocks (`BYTES` each) against `x` (rounded per 256):
/// `block(bytes, x, b, constants)` gives block `b`'s products and what its minimums or
/// offsets take off, each in four f32 lanes. Each block's bytes an array, so that every
/// constant offset into it is checked by the compiler, not per block.
#[inline(always)]
pub(super) fn k_row<const BYTES: usize>(
    ggml_type: GgmlType,
    row: &[u8],
    x: &IntegerRow,
    block: impl Fn(&[u8; BYTES], &IntegerRow, usize, &Constants) -> (v128, v128),
) -> f32 {
    assert_eq!(ggml_type.block_layout().1 as usize, BYTES, "{ggml_type}'s blocks");
    let constants = Constants::new();
    let (mut lanes, mut offsets) = (f32x4_splat(0.0), f32x4_splat(0.0));
    for (b, bytes) in row.as_chunks::<BYTES>().0.iter().take(x.blocks_of(ggml_type)).enumerate() {
        let (products, offset) = block(bytes, x, b, &constants);
        (lanes, offsets) = (f32x4_add(lanes, products), f32x4_add(offsets, offset));
    }
    sum_lanes(f32x4_sub(lanes, offsets))
}

/// What a Q4_K or Q5_K block's products need besides its quants.
pub(super) struct KHeader {
    /// `d` times the activations' scale: what the block's integer sum is multiplied by.
    pub(super) scale: f32,
    /// The eight sub-block scales, a byte each.
    pub(super) scales: u64,
    /// `dmin · Σ min · Σx` over the sub-blocks, in four lanes: what the minimums take off.
    pub(super) minimums: v128,
}

/// Block `b`'s [`KHeader`] (`block`: a Q4_K or Q5_K block, against `x`).
#[inline(always)]
pub(super) fn k_header(block: &[u8], x: &IntegerRow, b: usize) -> KHeader {
    let (d, dmin) = (half(block, 0), half(block, 2));
    let (scales, mins) = k_scales_and_mins(&block[4..16]);
    let mins = u16x8_extend_low_u8x16(u64x2(mins, 0));
    let sums32: &[f32; 8] = x.sums32[b * 8..b * 8 + 8].try_into().expect("8");
    let minimums = f32x4_add(
        f32x4_mul(f32x4_convert_i32x4(u32x4_extend_low_u16x8(mins)), load(sums32, 0)),
        f32x4_mul(f32x4_convert_i32x4(u32x4_extend_high_u16x8(mins)), load(sums32, 4)),
    );
    KHeader { scale: d * x.scale(SUPER_BLOCK, b), scales, minimums: f32x4_mul(minimums, f32x4_splat(dmin)) }
}

/// Group `group` of a Q4_K block: 64 quants, the low sub-block's 32 then the high one's, 16 to
/// a register.
#[inline(always)]
pub(crate) fn q4_k_group(block: &[u8; 144], group: usize, c: &Constants) -> [v128; 4] {
    let (first, second) = (load(block, 16 + 32 * group), load(block, 32 + 32 * group));
    [v128_and(first, c.nibbles), v128_and(second, c.nibbles), c.high_nibbles(first), c.high_nibbles(second)]
}

/// A Q5_K block's fifth bits (`qh`): its two registers, read once a block.
#[inline(always)]
pub(crate) fn q5_k_fifth_bits(block: &[u8; 176]) -> [v128; 2] {
    [load(block, 16), load(block, 32)]
}

/// Group `group` of a Q5_K block, as [`q4_k_group`], with `qh` its [`q5_k_fifth_bits`].
#[inline(always)]
pub(crate) fn q5_k_group(block: &[u8; 176], qh: &[v128; 2], group: usize, c: &Constants) -> [v128; 4] {
    // 16 where bit `shift` of the quant's `qh` byte is set (16-bit shifts: the bits one
    // brings across a byte are masked off, and a 1 shifted by 4 stays in its byte).
    let fifth = |half: usize, shift: u32| u16x8_shl(v128_and(u16x8_shr(qh[half], shift), c.one), 4);
    let (first, second) = (load(block, 48 + 32 * group), load(block, 64 + 32 * group));
    let (low, high) = (2 * group as u32, 2 * group as u32 + 1);
    [
        v128_or(v128_and(first, c.nibbles), fifth(0, low)),
        v128_or(v128_and(second, c.nibbles), fifth(1, low)),
        v128_or(c.high_nibbles(first), fifth(0, high)),
        v128_or(c.high_nibbles(second), fifth(1, high)),
    ]
}

/// A quarter of a Q6_K block: quants `16·sixteen..` of each run of 32 in half `half_block`
/// (as `dequant.rs` reads them: four sub-blocks of 16), unsigned (0..64), a register each,
/// with where each one's sub-block (its scale: byte `192 + sub`) and its activations start.
#[inline(always)]
pub(crate) fn q6_k_quarter(
    block: &[u8; 210],
    half_block: usize,
    sixteen: usize,
    c: &Constants,
) -> [(v128, usize, usize); 4] {
    let (ql, qh) = (64 * half_block, 128 + 32 * half_block);
    let (low, high) = (load(block, ql + 16 * sixteen), load(block, ql + 32 + 16 * sixteen));
    let upper = load(block, qh + 16 * sixteen);
    // Each quant's two upper bits moved to bits 4 and 5 of its byte by 16-bit shifts: what
    // one brings across a byte falls outside `two_bits`.
    let runs = [
        (v128_and(low, c.nibbles), u16x8_shl(upper, 4)),
        (v128_and(high, c.nibbles), u16x8_shl(upper, 2)),
        (c.high_nibbles(low), upper),
        (c.high_nibbles(high), u16x8_shr(upper, 2)),
    ];
    let run = |run: usize| {
        let (four_bits, upper) = runs[run];
        let quants = v128_or(four_bits, v128_and(upper, c.two_bits));
        (quants, 8 * half_block + 2 * run + sixteen, 128 * half_block + 32 * run + 16 * sixteen)
    };
    [run(0), run(1), run(2), run(3)]
}

/// What Q6_K block `b`'s offset of 32 takes off: `32 · d · Σ scale · Σx` over its sixteen
/// sub-blocks, in four lanes.
#[inline(always)]
pub(super) fn q6_k_offsets(block: &[u8; 210], x: &IntegerRow, b: usize) -> v128 {
    let scales = load(block, 192);
    let (low, high) = (i16x8_extend_low_i8x16(scales), i16x8_extend_high_i8x16(scales));
    let sums16: &[f32; 16] = x.sums[b * 16..b * 16 + 16].try_into().expect("16");
    let offsets = [
        i32x4_extend_low_i16x8(low),
        i32x4_extend_high_i16x8(low),
        i32x4_extend_low_i16x8(high),
        i32x4_extend_high_i16x8(high),
    ]
    .into_iter()
    .enumerate()
    .fold(f32x4_splat(0.0), |sum, (k, scales)| {
        f32x4_add(sum, f32x4_mul(f32x4_convert_i32x4(scales), load(sums16, 4 * k)))
    });
    f32x4_mul(offsets, f32x4_splat(32.0 * half(block, 208)))
}

/// Plain SIMD's K-quant products: each sub-block's quants widened to 16 bits in registers,
/// multiplied there by the sub-block's scale (`i16x8.mul`: at most 63 · 128), and against the
/// high and the low halves by `i32x4.dot_i16x8_s`. The low halves' sums stay in i32 for the
/// block; the high ones' go to f32 every 64 quants of Q4_K and Q5_K, every 32 of Q6_K (16
/// products a lane of at most 31 · 63 · 2¹⁵, 8 of 63 · 128 · 2¹⁵: within i32).
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
pub(super) fn k_quants(ggml_type: GgmlType, row: &[u8], x: &IntegerRow) -> f32 {
    match ggml_type {
        GgmlType::Q4K => apart(|| k_row::<144>(ggml_type, row, x, q4_k)),
        GgmlType::Q5K => apart(|| k_row::<176>(ggml_type, row, x, q5_k)),
        GgmlType::Q6K => apart(|| k_row::<210>(ggml_type, row, x, q6_k)),
        other => unreachable!("{other} is not a K-quant"),
    }
}

#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
fn q4_k(block: &[u8; 144], x: &IntegerRow, b: usize, c: &Constants) -> (v128, v128) {
    k_block(block, x, b, c, |group| q4_k_group(block, group, c))
}

#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
fn q5_k(block: &[u8; 176], x: &IntegerRow, b: usize, c: &Constants) -> (v128, v128) {
    let qh = q5_k_fifth_bits(block);
    k_block(block, x, b, c, |group| q5_k_group(block, &qh, group, c))
}

/// What Q4_K and Q5_K share: four groups of 64 quants, `quants(group)` the low sub-block's
/// 32 then the high one's; the block's products and what its minimums take off. The groups a
/// loop, which LLVM keeps: written out, as relaxed SIMD's are, a block's 64 loads of the
/// halves went ahead of the arithmetic, and WebKit (this module's browser: the others have
/// relaxed SIMD) ran Q4_K at 5.9 GMAC/s instead of 6.4 (Chromium at 7.5 instead of 6.6).
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
fn k_block(block: &[u8], x: &IntegerRow, b: usize, c: &Constants, quants: impl Fn(usize) -> [v128; 4]) -> (v128, v128) {
    let header = k_header(block, x, b);
    let halves = x.block_halves(b);
    let scale = |sub: usize| ((header.scales >> (8 * sub)) as u8).into();
    let mut sums = HalfSums::default();
    for group in [0, 1, 2, 3] {
        let q = quants(group);
        sums.add([q[0], q[1]], scale(2 * group), &halves, 64 * group);
        sums.add([q[2], q[3]], scale(2 * group + 1), &halves, 64 * group + 32);
        sums.settle();
    }
    (f32x4_mul(sums.joined(c), f32x4_splat(header.scale)), header.minimums)
}

/// One Q6_K block: the quants unsigned (0..64) in the products, the 32 taken off as
/// [`q6_k_offsets`].
#[cfg(not(target_feature = "relaxed-simd"))]
#[inline(always)]
fn q6_k(block: &[u8; 210], x: &IntegerRow, b: usize, c: &Constants) -> (v128, v128) {
    let halves = x.block_halves(b);
    let mut sums = HalfSums::default();
    let scale = |sub: usize| i16::from(block[192 + sub] as i8);
    for (half_block, sixteen) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        // The runs written out, the quarters a loop (WebKit's products ran at 3.9 GMAC/s with
        // both loops, 4.9 so: `sums`'s bound lets two runs go between conversions).
        let [(q0, s0, at0), (q1, s1, at1), (q2, s2, at2), (q3, s3, at3)] = q6_k_quarter(block, half_block, sixteen, c);
        sums.add([q0], scale(s0), &halves, at0);
        sums.add([q1], scale(s1), &halves, at1);
        sums.settle();
        sums.add([q2], scale(s2), &halves, at2);
        sums.add([q3], scale(s3), &halves, at3);
        sums.settle();
    }
    let scale = half(block, 208) * x.scale(SUPER_BLOCK, b);
    (f32x4_mul(sums.joined(c), f32x4_splat(scale)), q6_k_offsets(block, x, b))
}

/// A K-quant block's products against the halves as they are summed: the high halves' in
/// i32 since the last [`settle`](Self::settle) and in f32 before it, the low halves' in i32.
#[cfg(not(target_feature = "relaxed-simd"))]
struct HalfSums {
    high: v128,
    settled: v128,
    low: v128,
}

#[cfg(not(target_feature = "relaxed-simd"))]
impl Default for HalfSums {
    #[inline(always)]
    fn default() -> Self {
        Self { high: i32x4_splat(0), settled: f32x4_splat(0.0), low: i32x4_splat(0) }
    }
}

#[cfg(not(target_feature = "relaxed-simd"))]
impl HalfSums {
    /// `N` registers of quants (bytes, 0..64) of one sub-block, times its `scale`, against
    /// the halves at `at..`.
    #[inline(always)]
    fn add<const N: usize>(
        &mut self,
        quants: [v128; N],
        scale: i16,
        [high, low]: &[&[i16; SUPER_BLOCK]; 2],
        at: usize,
    ) {
        // One register's quants are multiplied by the scale before (two `i16x8.mul`s), more
        // registers' sums after (two `i32x4.mul`s).
        let before = if N == 1 { i16x8_splat(scale) } else { i16x8_splat(1) };
        let (mut h, mut l) = (i32x4_splat(0), i32x4_splat(0));
        for (k, quants) in quants.into_iter().enumerate() {
            for (half, widened) in
                [u16x8_extend_low_u8x16(quants), u16x8_extend_high_u8x16(quants)].into_iter().enumerate()
            {
                let from = at + 16 * k + 8 * half;
                let widened = if N == 1 { i16x8_mul(widened, before) } else { widened };
                h = i32x4_add(h, i32x4_dot_i16x8(widened, load(*high, from)));
                l = i32x4_add(l, i32x4_dot_i16x8(widened, load(*low, from)));
            }
        }
        if N > 1 {
            let after = i32x4_splat(scale.into());
            (h, l) = (i32x4_mul(h, after), i32x4_mul(l, after));
        }
        self.high = i32x4_add(self.high, h);
        self.low = i32x4_add(self.low, l);
    }

    /// The high halves' sums so far into f32.
    #[inline(always)]
    fn settle(&mut self) {
        self.settled = f32x4_add(self.settled, f32x4_convert_i32x4(self.high));
        self.high = i32x4_splat(0);
    }

    /// `256 · high + low`, in f32 lanes (after a [`settle`](Self::settle)).
    #[inline(always)]
    fn joined(&self, c: &Constants) -> v128 {
        f32x4_add(f32x4_mul(self.settled, c.places[0]), f32x4_convert_i32x4(self.low))
    }
}

/// 16 bytes of `values` from `at`, in a WebAssembly vector.
#[inline(always)]
pub(super) fn load<T>(values: &[T], at: usize) -> v128 {
    let bytes = &values[at..at + 16 / size_of::<T>()];
    // SAFETY: 16 bytes in bounds (sliced above).
    unsafe { v128_load(bytes.as_ptr().cast()) }
}

/// The four f32 lanes of `lanes` added pairwise.
#[inline(always)]
pub(super) fn sum_lanes(lanes: v128) -> f32 {
    (f32x4_extract_lane::<0>(lanes) + f32x4_extract_lane::<1>(lanes))
        + (f32x4_extract_lane::<2>(lanes) + f32x4_extract_lane::<3>(lanes))
}
