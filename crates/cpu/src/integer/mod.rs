//! A decode step's products in integers (and a pass's of a few rows, one row at a time:
//! `matmul::integer_rows_most`; with AVX-512, a prompt's of many rows, sixteen to a register:
//! `lanes.rs`): the activation row rounded to 24-bit integers (one f32
//! scale per block of values, [`IntegerRow`]), each weight block's quants multiplied by them in
//! integer instructions, one f32 conversion per block. The K-quants (Q4_K, Q5_K, Q6_K: the bulk of
//! a Q4_K_M file) with one activation scale per 256 values, their sub-blocks' scales applied in
//! integers; the 32-value formats with one per 32: Q4_1 (most of SmolLM2), Q5_0 (a Q4_K_M file's
//! matrices whose rows are not whole 256s: Gemma 3's), Q4_0, Q5_1, and Q8_0 (SmolLM2's and Gemma
//! 3's embeddings and output layers).
//!
//! Why: through the tile (`matmul.rs`) each weight is converted to f32, scaled, written and read
//! back before its multiply-add; a K-quant decode product ran at 10 GMAC/s natively, far from
//! what memory could feed. Why 24 bits: llama.cpp rounds activations to 8 bits, which moves
//! logits by up to ~0.6; 16 bits per 256 values moved Gemma 3's decode logits by up to 1.1e-2
//! from its prefill's (its activations have outliers that set a block's step), where the engine
//! keeps the two within 1e-4. 24 bits (a step of 2⁻²³ of the block's largest activation) keep
//! Gemma 3's decode within 3.6e-5 of a recompute (31 bits: 1.5e-5; ARCHITECTURE.md). Why per 32
//! for the 32-value formats: their blocks are converted to f32 once per 32 anyway, so a scale per 32 costs
//! nothing, and per 256 SmolLM2's first token (whose activations have outliers) moved its logits
//! 1.6e-4 from the prompt's; per 32, 6.8e-5. Q4_0, Q4_1, Q5_0 and Q5_1 share one product per
//! build over their unsigned quants (`d·q + m`, [`Unsigned32`] saying where a block keeps its
//! parts; `m = −offset·d` in Q4_0 and Q5_0).
//!
//! Each instruction set holds the integers as its products want them (a file each: `avx2.rs`,
//! `avx512.rs`, `relaxed.rs`, `simd128.rs`, `portable.rs`):
//! - x86 as three signed 8-bit digits (`X = d₀·2¹⁶ + d₁·2⁸ + d₂`, each in −128..=127): a block's
//!   quants are unsigned bytes (0..64; Q5_0's and Q5_1's fifth bits spread to bytes by a shuffle
//!   and a compare), so `vpmaddubsw` multiplies 32 quants by 32 digits an
//!   instruction, `vpmaddwd` applies the sub-block's integer scale and widens to i32 (AVX-VNNI's
//!   `vpdpwssd` also adds; AVX-512 takes 64 quants an instruction, the 32-value formats two
//!   blocks a register by `vpdpbusd`), and the three digits' sums
//!   meet in f32 once per block. Q8_0's signed quants go in as two unsigned parts (the positive
//!   quants, the negative ones' magnitudes), the second's products taken off the first's:
//!   llama.cpp's way, the quants' magnitudes against the digits carrying the quants' signs, is
//!   wrong here, since a digit may be −128, whose negation is not a byte. AVX-512 (whose
//!   `vpdpbusd` sums in i32, where `vpmaddubsw`'s i16 pairs would saturate) takes them as
//!   `q + 128` instead, the row's `128·Σd` taken off once per four values' lane;
//! - WebAssembly relaxed SIMD as the same three digits, its byte dot product multiplying 16
//!   quants (7-bit) by 16 digits, summed one of two ways ([`ByteDot`], timed at load: into i32
//!   with the sub-block's scale an `i32x4.mul`, or in i16 pairs scaled and widened by
//!   `i32x4.dot_i16x8_s`, as `vpmaddwd` does above). Not Q8_0: its quants and the digits are both
//!   signed bytes, where the second operand is 7-bit; its quants go in widened to 16 bits against
//!   the halves, as below;
//! - WebAssembly SIMD (no byte products without relaxed SIMD) and the portable build (the tests'
//!   reference) as two 16-bit halves (`X = h·2⁸ + l`, `0 ≤ l < 2⁸`) against the quants widened
//!   to 16 bits, summed in i32: `i32x4.dot_i16x8_s` eight at a time in wasm, a block's quants
//!   unpacked and widened in registers as relaxed SIMD unpacks them (the K-quants' sub-block
//!   scales multiplied in integers too).
//!
//! The minimums of Q4_K, Q5_K, Q4_1 and Q5_1, the offsets of Q4_0 and Q5_0 (8 and 16) and Q6_K's
//! (32) multiply the exact f32 sum of each 32 or 16 activations. Without one of these builds (x86
//! without AVX2, other CPUs) the products go through the tile instead (`matmul.rs`: measured
//! faster there); the portable build is then only the tests' reference.

// Other CPUs have none of these builds: their products go through the tile (`matmul.rs`), and
// this module serves their tests alone.
#![cfg_attr(not(any(test, target_arch = "x86_64", target_arch = "wasm32")), allow(dead_code))]

use nucleus_gguf::{GgmlType, f16_to_f32};

// One file per build of the products (the portable one the tests' reference), and the choice
// between relaxed SIMD's two ways of summing.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod byte_dot;
#[cfg(target_arch = "x86_64")]
mod lanes;
#[cfg(test)]
mod portable;
#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
pub(crate) mod relaxed;
#[cfg(target_arch = "wasm32")]
pub(crate) mod simd128;
#[cfg(test)]
mod tests;

pub use byte_dot::{ByteDot, byte_dot, byte_dot_choices, byte_dot_probe, set_byte_dot};
#[cfg(target_arch = "x86_64")]
pub(crate) use lanes::{FourRows, LANES, Lanes, fill_lanes, in_lanes};
#[cfg(test)]
use portable::Portable;

/// The values of a K-quant block: one activation scale for the K-quants' products.
pub const SUPER_BLOCK: usize = 256;

/// The values of a block of the 32-value formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): one activation
/// scale for their products.
pub const BLOCK: usize = 32;

/// A format of 32-value blocks whose quants are unsigned, `d·q + m` (Q4_0, Q4_1, Q5_0, Q5_1):
/// where a block keeps its parts. Each build's products are written once for all four, the
/// layout a constant in each format's copy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Unsigned32 {
    /// Bytes a block.
    bytes: usize,
    /// Where the 16 bytes of nibbles start: quant `j` the low nibble of byte `j`, quant `j + 16`
    /// the high one.
    nibbles: usize,
    /// Q5_0's and Q5_1's fifth bits: where their little-endian u32 lies (bit `j` adds 16 to quant
    /// `j`).
    fifth_bits: Option<usize>,
    /// `m = −offset · d` (Q4_0's 8, Q5_0's 16), or (`None`) the f16 after `d`.
    offset: Option<f32>,
    /// Whether relaxed SIMD's products convert a block's `d` and `m` from f16 together, in one
    /// vector, or one at a time: measured faster for Q4_1 alone (ARCHITECTURE.md, "A Q4_1
    /// block's two f16s in one vector").
    #[cfg_attr(not(all(target_arch = "wasm32", target_feature = "relaxed-simd")), allow(dead_code))]
    halves_together: bool,
}

impl Unsigned32 {
    pub(crate) const Q4_0: Self =
        Self { bytes: 18, nibbles: 2, fifth_bits: None, offset: Some(8.0), halves_together: false };
    pub(crate) const Q4_1: Self = Self { bytes: 20, nibbles: 4, fifth_bits: None, offset: None, halves_together: true };
    pub(crate) const Q5_0: Self =
        Self { bytes: 22, nibbles: 6, fifth_bits: Some(2), offset: Some(16.0), halves_together: false };
    pub(crate) const Q5_1: Self =
        Self { bytes: 24, nibbles: 8, fifth_bits: Some(4), offset: None, halves_together: false };

    /// Bytes a block.
    #[cfg(target_arch = "wasm32")]
    pub(crate) fn bytes(self) -> usize {
        self.bytes
    }

    /// What the quants are offset by (`d·(q − offset)`: Q4_0's 8, Q5_0's 16), or (`None`) a
    /// minimum the format keeps (`d·q + m`, `m` the f16 after `d`).
    #[cfg(target_arch = "wasm32")]
    pub(crate) fn offset(self) -> Option<f32> {
        self.offset
    }

    /// `d` and `m` of a block from its first two f16s (`d`, and the one after it, which is `m`
    /// where the format stores one).
    #[cfg(any(test, target_arch = "x86_64", target_arch = "wasm32"))]
    #[inline(always)]
    fn scale_and_min(self, (d, next): (f32, f32)) -> (f32, f32) {
        (d, self.offset.map_or(next, |offset| -offset * d))
    }

    /// A block's fifth bits (none: 0).
    #[inline(always)]
    fn fifth_word(self, block: &[u8]) -> u32 {
        self.fifth_bits.map_or(0, |at| u32::from_le_bytes(block[at..at + 4].try_into().expect("4")))
    }
}

/// How far ahead of the block in use the K-quants' decode products prefetch a row of at least
/// [`PREFETCHED_ROW`] values, in bytes (about 14 Q4_K blocks, 10 of Q6_K; 1,024 measured alike):
/// ARCHITECTURE.md, "Wide K-quant rows prefetched".
#[cfg(target_arch = "x86_64")]
const PREFETCH_AHEAD: usize = 2048;

/// The fewest values of a K-quant row whose decode products prefetch it: narrower rows' were
/// slower with the prefetches (2,048 values: 0.9x), wider ones faster (4,096: 1.04-1.09x, 6,912:
/// 1.3x), as the activations' digits take more of the L1 cache.
#[cfg(target_arch = "x86_64")]
const PREFETCHED_ROW: usize = 4096;

/// The cache lines of a block's `bytes` from `at` in `row`, [`PREFETCH_AHEAD`] bytes on: a
/// software prefetch (`prefetcht0`), which the hardware's own does not replace in K-quant
/// rows (ARCHITECTURE.md, "Wide K-quant rows prefetched"). Past the row's end it reaches into the
/// next row, or nothing: a prefetch does not fault.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_ahead(row: &[u8], at: usize, bytes: usize) {
    let ahead = row.as_ptr().wrapping_add(at + PREFETCH_AHEAD);
    for line in (0..bytes).step_by(64) {
        // SAFETY: a prefetch reads nothing the program sees, wherever it points.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(ahead.wrapping_add(line).cast())
        }
    }
}

/// A K-quant format as a type: each x86 build compiles its loop over a row once per format, and
/// once more for rows that are prefetched ([`k_rows`]).
#[cfg(target_arch = "x86_64")]
trait KFormat {
    const TYPE: GgmlType;
}

#[cfg(target_arch = "x86_64")]
struct Q4k;
#[cfg(target_arch = "x86_64")]
struct Q5k;
#[cfg(target_arch = "x86_64")]
struct Q6k;

#[cfg(target_arch = "x86_64")]
impl KFormat for Q4k {
    const TYPE: GgmlType = GgmlType::Q4K;
}

#[cfg(target_arch = "x86_64")]
impl KFormat for Q5k {
    const TYPE: GgmlType = GgmlType::Q5K;
}

#[cfg(target_arch = "x86_64")]
impl KFormat for Q6k {
    const TYPE: GgmlType = GgmlType::Q6K;
}

/// `row::<F, PREFETCH>(args)` for K-quant `ggml_type` (`F` its [`KFormat`]) and whether the row is
/// [prefetched](IntegerRow::prefetched): each format and choice a function of its own, in each x86
/// build (the AVX-512 build's `row_dot` says why).
#[cfg(target_arch = "x86_64")]
macro_rules! k_rows {
    ($ggml_type:expr, $prefetched:expr, $($row:ident)::+ ($($arg:expr),*)) => {
        match ($ggml_type, $prefetched) {
            (GgmlType::Q4K, false) => $($row)::+::<$crate::integer::Q4k, false>($($arg),*),
            (GgmlType::Q4K, true) => $($row)::+::<$crate::integer::Q4k, true>($($arg),*),
            (GgmlType::Q5K, false) => $($row)::+::<$crate::integer::Q5k, false>($($arg),*),
            (GgmlType::Q5K, true) => $($row)::+::<$crate::integer::Q5k, true>($($arg),*),
            (GgmlType::Q6K, false) => $($row)::+::<$crate::integer::Q6k, false>($($arg),*),
            (GgmlType::Q6K, true) => $($row)::+::<$crate::integer::Q6k, true>($($arg),*),
            (other, _) => unreachable!("{other} is not a K-quant"),
        }
    };
}
#[cfg(target_arch = "x86_64")]
use k_rows;

/// Steps of the largest activation of a block: `0x7F7F7F`, the largest integer whose three
/// balanced 8-bit digits are all at most 127 (and its negation's at least −127).
const STEPS: f64 = 0x7F_7F7F as f64;

/// An activation row rounded to 24-bit integers: per [`SUPER_BLOCK`] or per [`BLOCK`] values one
/// scale, per 16 their exact sum.
#[derive(Debug, Clone)]
pub struct IntegerRow {
    /// `d₀, d₁, d₂` of each value: `X = d₀·2¹⁶ + d₁·2⁸ + d₂`.
    #[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
    digits: [Digits; 3],
    /// `X >> 8` and `X & 0xFF` of each value `X` (`x ≈ X · scale`, `|X| ≤ 0x7F7F7F`).
    #[cfg(any(test, target_arch = "wasm32"))]
    halves: [Vec<i16>; 2],
    /// Values per scale: [`SUPER_BLOCK`] or [`BLOCK`].
    block: usize,
    /// Per `block` values: `x ≈ X · scale`.
    scales: Vec<f32>,
    /// Per 16 values: `Σ x`, in f32 (Q6_K's offset multiplies it in the byte builds).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    sums: Vec<f32>,
    /// Per 32 values: `Σ x`, in f32 (the minimums of Q4_K, Q5_K, Q4_1 and Q5_1 and the offsets
    /// of Q4_0 and Q5_0 multiply it).
    sums32: Vec<f32>,
    /// Per 64 values (a pair of 32-value blocks), what AVX-512's products of a pair read besides
    /// their digits ([`Pair`]); none in a row rounded per 256, nor on a CPU without AVX-512.
    #[cfg(target_arch = "x86_64")]
    pairs: Vec<Pair>,
    /// Per 64 values, what AVX-512's Q8_0 products of a pair add to their i32 lanes
    /// ([`Q8_0Offsets`]); apart from [`pairs`](Self::pairs), which the other formats read.
    #[cfg(target_arch = "x86_64")]
    q8_0_offsets: Vec<Q8_0Offsets>,
}

/// What AVX-512's products of a pair of 32-value blocks (64 values, the first block's in lanes
/// 0..8 of f32, 0..8 of i32) read besides their digits: one 16-byte load each, against the
/// pair's first two f16s each in f32 (`d, next, d', next'`, `next` being Q4_1's and Q5_1's `m`).
/// The blocks' scales are multiplied there, in four lanes, and only then spread over 16: the
/// scales and `Σx/8` loaded spread over 16 lanes each held Q5_0's products at 0.86x
/// (ARCHITECTURE.md, "The pair's scales in four lanes").
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy)]
#[repr(C, align(32))]
struct Pair {
    /// `s, s, s', s'`: each block's activation scale twice, so that lanes 0 and 2 of the product
    /// with `d, next, d', next'` are `d·s` and `d'·s'`.
    scales: [f32; 4],
    /// `0, Σx, 0, Σx'` of the two blocks: what `d, m, d', m'` (Q4_1, Q5_1) multiply into the
    /// minimums' products, and `d, d, d', d'` (Q4_0, Q5_0) into `Σd·Σx`, which their offset
    /// multiplies.
    minimum_sums: [f32; 4],
}

/// What the Q8_0 product of a pair adds to its i32 lanes to take off the 128 it adds to each
/// quant: 16 lanes of `−128·Σ(d₀·2⁸ + d₁)`, then 16 of `−128·Σd₂`, each lane's sum over the four
/// values `vpdpbusd` puts in it.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Q8_0Offsets([i32; 32]);

impl IntegerRow {
    /// `x` (whole blocks of `block` values, [`SUPER_BLOCK`] or [`BLOCK`]) rounded to the nearest
    /// of `2 · 0x7F7F7F` steps of its largest magnitude per block, for products of any format.
    pub fn new(x: &[f32], block: usize) -> Self {
        Self::rounded(x, block, true)
    }

    /// [`new`](Self::new)'s row for products of `types` alone: AVX-512's Q8_0 offsets only where
    /// one of them is Q8_0 (they took a third of the time to round a row per 32 values, 1.0 of
    /// 2.7 µs at 1,152 values: `examples/rounding_speed.rs`; most such rows meet no Q8_0 matrix).
    pub fn for_types(x: &[f32], block: usize, mut types: impl Iterator<Item = GgmlType>) -> Self {
        Self::rounded(x, block, types.any(|ggml_type| ggml_type == GgmlType::Q8_0))
    }

    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
    fn rounded(x: &[f32], block: usize, q8_0: bool) -> Self {
        // Compiled for AVX2 where the CPU has it (the same operations, so the same integers): a
        // prompt's rows in lanes are rounded before every product (`matmul::InLanes`); a row of
        // 1,536 values per 32 took 3.4 µs in the baseline's SSE2, 2.4 so (`rounding_speed`).
        #[cfg(target_arch = "x86_64")]
        if crate::matmul::has_avx2() {
            #[target_feature(enable = "avx2,fma")]
            fn avx2(x: &[f32], block: usize, q8_0: bool) -> IntegerRow {
                IntegerRow::rounded_here(x, block, q8_0)
            }
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            return unsafe { avx2(x, block, q8_0) };
        }
        Self::rounded_here(x, block, q8_0)
    }

    /// [`rounded`](Self::rounded)'s body, compiled into each build.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
    fn rounded_here(x: &[f32], block: usize, q8_0: bool) -> Self {
        assert!(block == SUPER_BLOCK || block == BLOCK, "a scale per {block} values");
        assert!(x.len().is_multiple_of(block), "{} activations are not whole blocks of {block}", x.len());
        let mut values = vec![0i32; x.len()];
        let mut scales = Vec::with_capacity(x.len() / block);
        for (chunk, values) in x.chunks_exact(block).zip(values.chunks_exact_mut(block)) {
            let largest = chunk.iter().fold(0f32, |m, v| m.max(v.abs()));
            let (scale, steps) =
                if largest > 0.0 { (f64::from(largest) / STEPS, STEPS / f64::from(largest)) } else { (1.0, 1.0) };
            for (value, &v) in values.iter_mut().zip(chunk) {
                *value = nearest(f64::from(v) * steps);
            }
            scales.push(scale as f32);
        }
        let sums: Vec<f32> = x.chunks_exact(16).map(|c| sum16(c.try_into().expect("16"))).collect();
        let sums32: Vec<f32> = sums.chunks_exact(2).map(|pair| pair[0] + pair[1]).collect();
        #[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
        let digits = digits(&values);
        #[cfg(target_arch = "x86_64")]
        let (pairs, q8_0_offsets) = if block == BLOCK && crate::matmul::X86::Avx512.runs_here() {
            (pairs(&scales, &sums32), if q8_0 { q8_0_offsets(&digits) } else { Vec::new() })
        } else {
            (Vec::new(), Vec::new())
        };
        Self {
            #[cfg(target_arch = "x86_64")]
            pairs,
            #[cfg(target_arch = "x86_64")]
            q8_0_offsets,
            #[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
            digits,
            #[cfg(any(test, target_arch = "wasm32"))]
            halves: [
                values.iter().map(|&v| (v >> 8) as i16).collect(),
                values.iter().map(|&v| (v & 0xFF) as i16).collect(),
            ],
            block,
            scales,
            sums,
            sums32,
        }
    }

    /// The values per scale of a row that `ggml_type`'s integer products read, or `None` where
    /// its products do not go through integers: the one owner of which formats do.
    pub fn scale_block(ggml_type: GgmlType) -> Option<usize> {
        match ggml_type {
            GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K => Some(SUPER_BLOCK),
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0 => Some(BLOCK),
            _ => None,
        }
    }

    /// Values per scale: [`SUPER_BLOCK`] or [`BLOCK`].
    pub fn block(&self) -> usize {
        self.block
    }

    /// Whether the x86 builds' products of `ggml_type` against this row prefetch the weight row
    /// as they go: K-quant rows of at least [`PREFETCHED_ROW`] values.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn prefetched(&self, ggml_type: GgmlType) -> bool {
        Self::scale_block(ggml_type) == Some(SUPER_BLOCK) && self.scales.len() * self.block >= PREFETCHED_ROW
    }

    /// The scale of the `b`th block of `block` values, checked to be how this row was rounded.
    #[inline(always)]
    fn scale(&self, block: usize, b: usize) -> f32 {
        debug_assert_eq!(self.block, block, "a row rounded per {} values read per {block}", self.block);
        self.scales[b]
    }

    /// The blocks of `ggml_type` this row holds, checked to be rounded as that format's products
    /// read it.
    #[inline(always)]
    fn blocks_of(&self, ggml_type: GgmlType) -> usize {
        debug_assert_eq!(
            Self::scale_block(ggml_type),
            Some(self.block),
            "{ggml_type} read from a row rounded per {}",
            self.block
        );
        self.scales.len() * self.block / ggml_type.block_layout().0 as usize
    }

    /// Each block of a row of a 32-value format's blocks (`bytes` each) with its 32 activations'
    /// digits, their scale and their `Σx`, for the byte builds: walked together, so that no
    /// block pays for bounds checks (in relaxed SIMD they made Q4_1's integer products slower
    /// than the f32 block, 5.4 against 6.1 GMAC/s in Node; walked together 8.1).
    #[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
    #[inline(always)]
    fn blocks32<'a>(
        &'a self,
        row: &'a [u8],
        bytes: usize,
    ) -> impl Iterator<Item = (&'a [u8], [&'a [i8]; 3], f32, f32)> {
        debug_assert_eq!(self.block, BLOCK);
        let [d0, d1, d2] = &self.digits;
        let digits = d0.chunks_exact(BLOCK).zip(d1.chunks_exact(BLOCK)).zip(d2.chunks_exact(BLOCK));
        row.chunks_exact(bytes)
            .zip(digits)
            .zip(self.scales.iter().zip(&self.sums32))
            .map(|((block, ((d0, d1), d2)), (&scale, &sum))| (block, [d0, d1, d2], scale, sum))
    }

    /// [`blocks32`](Self::blocks32) two blocks at a time, for AVX-512: each pair's blocks, each
    /// place's 64 digits and the pair's [`Pair`]; then the last block, alone, where their number
    /// is odd.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    #[allow(clippy::type_complexity)]
    fn pairs32<'a>(
        &'a self,
        row: &'a [u8],
        bytes: usize,
    ) -> (impl Iterator<Item = ([&'a [u8]; 2], [&'a [i8]; 3], &'a Pair)>, Option<(&'a [u8], [&'a [i8]; 3], f32, f32)>)
    {
        debug_assert_eq!(self.block, BLOCK);
        let blocks = (row.len() / bytes).min(self.scales.len());
        debug_assert!(self.pairs.len() >= blocks / 2, "a row rounded without its pairs, read by AVX-512");
        let [d0, d1, d2] = &self.digits;
        let digits = d0.chunks_exact(2 * BLOCK).zip(d1.chunks_exact(2 * BLOCK)).zip(d2.chunks_exact(2 * BLOCK));
        let pairs = row[..blocks / 2 * 2 * bytes].chunks_exact(2 * bytes).zip(digits).zip(&self.pairs).map(
            move |((pair, ((d0, d1), d2)), lanes)| {
                let (a, b) = pair.split_at(bytes);
                ([a, b], [d0, d1, d2], lanes)
            },
        );
        let last = if blocks % 2 == 1 { self.blocks32(row, bytes).nth(blocks - 1) } else { None };
        (pairs, last)
    }

    /// The 256 high and 256 low halves of K-quant block `b`, for plain SIMD.
    #[cfg(all(target_arch = "wasm32", not(target_feature = "relaxed-simd")))]
    #[inline(always)]
    fn block_halves<'a>(&'a self, b: usize) -> [&'a [i16; SUPER_BLOCK]; 2] {
        let [high, low] = &self.halves;
        let block = |halves: &'a [i16]| -> &'a [i16; SUPER_BLOCK] {
            halves[b * SUPER_BLOCK..(b + 1) * SUPER_BLOCK].try_into().expect("256")
        };
        [block(high), block(low)]
    }

    /// The 256 digits of each place of K-quant block `b`, for the byte builds.
    #[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
    #[inline(always)]
    fn block_digits<'a>(&'a self, b: usize) -> [&'a [i8; SUPER_BLOCK]; 3] {
        let [d0, d1, d2] = &self.digits;
        let block = |digits: &'a [i8]| -> &'a [i8; SUPER_BLOCK] {
            digits[b * SUPER_BLOCK..(b + 1) * SUPER_BLOCK].try_into().expect("256")
        };
        [block(d0), block(d1), block(d2)]
    }
}

/// The eight 6-bit scales and eight 6-bit minimums of a Q4_K or Q5_K block's 12 packed bytes
/// (`nucleus_gguf::k_scale_min`'s layout), a byte each (the x86 and wasm builds).
#[cfg(any(target_arch = "x86_64", target_arch = "wasm32"))]
#[inline(always)]
fn k_scales_and_mins(packed: &[u8]) -> (u64, u64) {
    let word = |at: usize| u32::from_le_bytes(packed[at..at + 4].try_into().expect("4"));
    let (a, b, c) = (word(0), word(4), word(8));
    let (six, four, two) = (0x3F3F_3F3F, 0x0F0F_0F0F, 0x0303_0303);
    let scales = (a & six, (c & four) | (((a >> 6) & two) << 4));
    let mins = (b & six, ((c >> 4) & four) | (((b >> 6) & two) << 4));
    let join = |(low, high): (u32, u32)| u64::from(low) | (u64::from(high) << 32);
    (join(scales), join(mins))
}

/// `y` (of magnitude below 2³¹) rounded to the nearest integer, ties to even: with 1.5·2⁵² added
/// the sum has no fraction left, and its low 32 bits are the integer. In lanes, where
/// `f64::round` is a call per value and a conversion a check per value (a 576-value row was
/// rounded in 3-5 µs, 7 % of SmolLM2's decode step on the calling thread).
#[inline(always)]
fn nearest(y: f64) -> i32 {
    const ROUNDING: f64 = 6_755_399_441_055_744.0;
    (y + ROUNDING).to_bits() as u32 as i32
}

/// The sum of 16 values, halves added lane by lane down to one (which vectorises, where one
/// running sum is 15 dependent additions).
#[inline(always)]
fn sum16(values: &[f32; 16]) -> f32 {
    let eights: [f32; 8] = std::array::from_fn(|i| values[i] + values[i + 8]);
    let fours: [f32; 4] = std::array::from_fn(|i| eights[i] + eights[i + 4]);
    (fours[0] + fours[2]) + (fours[1] + fours[3])
}

/// One digit place of a row's values, its start on a 64-byte boundary: the products load the
/// digits 32 or 64 at a time from multiples of 32 values, and so never across two cache lines
/// (a `Vec<i8>` starts where the allocator puts it, 16-byte aligned, and three in four of
/// AVX-512's 64-byte loads straddled two lines: ARCHITECTURE.md, "The digits on cache lines").
#[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
#[derive(Debug, Clone)]
struct Digits {
    lines: Vec<Line>,
    len: usize,
}

/// 64 digits, a cache line.
#[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct Line([i8; 64]);

#[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
impl Digits {
    /// `len` zero digits.
    fn zeros(len: usize) -> Self {
        Self { lines: vec![Line([0; 64]); len.div_ceil(64)], len }
    }
}

#[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
impl std::ops::Deref for Digits {
    type Target = [i8];

    fn deref(&self) -> &[i8] {
        // SAFETY: `Line` is 64 `i8`s and nothing else (`repr(C)`, size 64), so the lines are
        // `64 · lines.len() ≥ len` consecutive, initialised `i8`s.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<i8>(), self.len) }
    }
}

#[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
impl std::ops::DerefMut for Digits {
    fn deref_mut(&mut self) -> &mut [i8] {
        // SAFETY: as `deref`'s, the slice borrowing `self` mutably.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<i8>(), self.len) }
    }
}

/// The balanced base-256 digits of each value, most significant first.
#[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
#[inline(always)]
fn digits(values: &[i32]) -> [Digits; 3] {
    let mut digits = [Digits::zeros(values.len()), Digits::zeros(values.len()), Digits::zeros(values.len())];
    let [high, middle, low] = &mut digits;
    for (((&value, high), middle), low) in values.iter().zip(high.iter_mut()).zip(middle.iter_mut()).zip(low.iter_mut())
    {
        let digit = |rest: i32| ((rest + 128) & 0xFF) - 128;
        let d2 = digit(value);
        let rest = (value - d2) >> 8;
        let d1 = digit(rest);
        let d0 = (rest - d1) >> 8;
        debug_assert!((-128..128).contains(&d0), "{value} has more than three digits");
        (*high, *middle, *low) = (d0 as i8, d1 as i8, d2 as i8);
    }
    digits
}

/// [`IntegerRow`]'s [`Pair`]s, one per 64 values.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn pairs(scales: &[f32], sums32: &[f32]) -> Vec<Pair> {
    scales
        .chunks_exact(2)
        .zip(sums32.chunks_exact(2))
        .map(|(s, sums)| Pair { scales: [s[0], s[0], s[1], s[1]], minimum_sums: [0.0, sums[0], 0.0, sums[1]] })
        .collect()
}

/// [`IntegerRow`]'s [`Q8_0Offsets`], one per 64 values. AVX-512 multiplies Q8_0's `q + 128` (each
/// signed quant's sign bit flipped: an unsigned byte) by the digits, one `vpdpbusd` a place where
/// the quants as two unsigned parts took two; the offsets take the `128·Σd` off, exactly, lane `i`
/// of 16 summing the values `4i..4i + 4`, as `vpdpbusd` does.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn q8_0_offsets([d0, d1, d2]: &[Digits; 3]) -> Vec<Q8_0Offsets> {
    let fours = |digits: &[i8]| -> Vec<i32> {
        digits.chunks_exact(4).map(|four| four.iter().map(|&d| i32::from(d)).sum()).collect()
    };
    let (d0, d1, d2) = (fours(d0), fours(d1), fours(d2));
    d0.chunks_exact(16)
        .zip(d1.chunks_exact(16))
        .zip(d2.chunks_exact(16))
        .map(|((d0, d1), d2)| {
            Q8_0Offsets(std::array::from_fn(|i| match i {
                0..16 => -128 * (d0[i] * 256 + d1[i]),
                _ => -128 * d2[i - 16],
            }))
        })
        .collect()
}

/// `Σ w·x` of one weight row of `ggml_type` (a format [`IntegerRow::scale_block`] names) and the
/// row `x`: one build per instruction set.
///
/// The WebAssembly builds' `row_dot` is a function of its own, called once per weight row, not
/// inlined into the loop over them: V8 allocates registers per function, and there (a larger
/// function) the products spilled theirs. Alone they ran 2.1x as fast on Q4_K and 1.7x on Q5_K
/// and Q6_K in relaxed SIMD (one thread in Node 20's V8, a 3,584 x 1,024 matrix: 3.9 -> 8.0
/// GMAC/s), 1.1x on Q6_K in SIMD alone; a wrapper of their own that inlined them ran at 7.0
/// (ARCHITECTURE.md, "A hot loop is a function of its own in wasm").
pub(crate) trait RowDot {
    fn row_dot(ggml_type: GgmlType, row: &[u8], x: &IntegerRow) -> f32;
}

/// `product()` in a function of its own in wasm (V8 allocates registers per function, see
/// [`RowDot`]): each closure is a type of its own, so each caller gets its own copy, the closure's
/// constants folded in. The four 32-value formats' products in one function ran at 3.8 GMAC/s
/// where Q4_1's alone had run at 8.8 (plain SIMD, Node); with the layout a value instead of a
/// constant, at 7.3 (and relaxed SIMD's at 7.0 instead of 8.3).
#[cfg(target_arch = "wasm32")]
#[inline(never)]
fn apart<R>(product: impl FnOnce() -> R) -> R {
    product()
}

/// The f16 at `at` of a block, as f32.
#[inline(always)]
pub(crate) fn half(block: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes(block[at..at + 2].try_into().expect("2")))
}

// The builds: a type per instruction set, each `RowDot` over the products of its file.

/// WebAssembly SIMD: `i32x4.dot_i16x8_s` on eight quants at a time, against both halves.
#[cfg(all(target_arch = "wasm32", not(target_feature = "relaxed-simd")))]
pub(crate) struct Simd128;

#[cfg(all(target_arch = "wasm32", not(target_feature = "relaxed-simd")))]
impl RowDot for Simd128 {
    // A function of its own (see `RowDot`), each format's loop in one of its own (`apart`).
    #[inline(never)]
    fn row_dot(ggml_type: GgmlType, row: &[u8], x: &IntegerRow) -> f32 {
        match ggml_type {
            GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K => simd128::k_quants(ggml_type, row, x),
            // The 32-value formats: each its own copy of the loop, its layout a constant there.
            GgmlType::Q4_0 => apart(|| simd128::unsigned32(Unsigned32::Q4_0, row, x)),
            GgmlType::Q4_1 => apart(|| simd128::unsigned32(Unsigned32::Q4_1, row, x)),
            GgmlType::Q5_0 => apart(|| simd128::unsigned32(Unsigned32::Q5_0, row, x)),
            GgmlType::Q5_1 => apart(|| simd128::unsigned32(Unsigned32::Q5_1, row, x)),
            GgmlType::Q8_0 => simd128::q8_0(row, x),
            other => unreachable!("{other} does not go through integers"),
        }
    }
}

/// AVX2 (x86-64, chosen at run time): the quants as unsigned bytes against the three digits,
/// `vpmaddubsw` on 32 at a time, `vpmaddwd` by the sub-block's scale.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx2;

#[cfg(target_arch = "x86_64")]
impl RowDot for Avx2 {
    #[inline(always)]
    fn row_dot(ggml_type: GgmlType, row: &[u8], x: &IntegerRow) -> f32 {
        // SAFETY: only called after the CPU was found to have AVX2, FMA and F16C.
        unsafe { avx2::row_dot::<avx2::Madd>(ggml_type, row, x) }
    }
}

/// AVX2 with AVX-VNNI (Intel since Alder Lake, AMD since Zen 4; chosen at run time): as
/// [`Avx2`], with the scale's `vpmaddwd` and the sum's add one `vpdpwssd`.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Vnni;

#[cfg(target_arch = "x86_64")]
impl RowDot for Vnni {
    #[inline(always)]
    fn row_dot(ggml_type: GgmlType, row: &[u8], x: &IntegerRow) -> f32 {
        // SAFETY: only called after the CPU was found to have AVX2, FMA, F16C and AVX-VNNI.
        unsafe { avx2::row_dot::<avx2::Vnni>(ggml_type, row, x) }
    }
}

/// The AVX-512 build (with VNNI and BW: Intel since Ice Lake, AMD since Zen 4; chosen at run
/// time): 64 quants an instruction, four products into each i32 lane by `vpdpbusd`; a K-quant's
/// sub-block scales applied in f32, the 32-value formats two blocks a register.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx512;

#[cfg(target_arch = "x86_64")]
impl RowDot for Avx512 {
    #[inline(always)]
    fn row_dot(ggml_type: GgmlType, row: &[u8], x: &IntegerRow) -> f32 {
        // SAFETY: only called after the CPU was found to have AVX2, FMA, F16C and AVX-512 F, BW
        // and VNNI.
        unsafe {
            match IntegerRow::scale_block(ggml_type) {
                Some(BLOCK) => avx512::row_dot32(ggml_type, row, x),
                _ => avx512::row_dot(ggml_type, row, x),
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Avx512 {
    /// Weight row `row` of `ggml_type` (one of the formats [`in_lanes`]) unpacked into row `j`
    /// of `four`, for [`lanes_products`](Self::lanes_products).
    ///
    /// # Safety
    /// Only on a CPU with AVX2, FMA, F16C and AVX-512 F, BW and VNNI.
    #[inline(always)]
    pub(crate) unsafe fn unpack_row(ggml_type: GgmlType, row: &[u8], four: &mut FourRows, j: usize) {
        // SAFETY: as this function's.
        unsafe { avx512::unpack_row(ggml_type, row, four, j) }
    }

    /// Four unpacked weight rows against the activation rows in `x`'s lanes: `out[j][l]`, weight
    /// row `j` against lane `l`.
    ///
    /// # Safety
    /// Only on a CPU with AVX2, FMA, F16C and AVX-512 F, BW and VNNI.
    #[inline(always)]
    pub(crate) unsafe fn lanes_products(w: &FourRows, x: &Lanes) -> [[f32; LANES]; 4] {
        // SAFETY: as this function's.
        unsafe { avx512::lanes_products(w, x) }
    }
}

/// WebAssembly relaxed SIMD: the quants (7-bit) against the three digits by its byte dot product,
/// 16 at a time, summed the way `S` is ([`relaxed::Accumulating`] or [`relaxed::Paired`]). A product
/// reads [`byte_dot`] once and runs all its rows on the one it names.
#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
pub(crate) struct Relaxed<S>(std::marker::PhantomData<S>);

#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
impl<S: relaxed::Sums> RowDot for Relaxed<S> {
    #[inline(always)]
    fn row_dot(ggml_type: GgmlType, row: &[u8], x: &IntegerRow) -> f32 {
        relaxed::row_dot::<S>(ggml_type, row, x)
    }
}

/// `values` weights (whole blocks) of `ggml_type` to time products on: arbitrary quants, and
/// f16 2⁻⁶ for the block's scale and minimum where the format keeps them (the float formats'
/// values as they fall). The engine's formats only (`kernel_parity::TYPES`).
pub fn timing_blocks(ggml_type: GgmlType, values: usize) -> Vec<u8> {
    let (block_values, bytes) = ggml_type.block_layout();
    let mut blocks: Vec<u8> = (0..values / block_values as usize * bytes as usize)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let halves: &[usize] = match ggml_type {
        GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16 => &[],
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
        GgmlType::Q6K => &[208],
        other => unreachable!("{other} is not a format the engine takes"),
    };
    for block in blocks.chunks_exact_mut(bytes as usize) {
        for &at in halves {
            block[at..at + 2].copy_from_slice(&0x2400u16.to_le_bytes());
        }
    }
    blocks
}
