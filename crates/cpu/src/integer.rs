//! A decode step's products in integers (and a pass's of a few rows, one row at a time:
//! `matmul::integer_rows_most`): the activation row rounded to 24-bit integers (one f32
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
//! Each instruction set holds the integers as its products want them:
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
//! (32) multiply the exact f32 sum of each 32 or 16 activations. Without one of these builds (x86 without AVX2, other CPUs) the
//! products go through the tile instead (`matmul.rs`: measured faster there); the portable build
//! is then only the tests' reference.

// Other CPUs have none of these builds: their products go through the tile (`matmul.rs`), and
// this module serves their tests alone.
#![cfg_attr(not(any(test, target_arch = "x86_64", target_arch = "wasm32")), allow(dead_code))]

use std::sync::atomic::{AtomicU8, Ordering};

use nucleus_gguf::{GgmlType, f16_to_f32};

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
}

impl Unsigned32 {
    const Q4_0: Self = Self { bytes: 18, nibbles: 2, fifth_bits: None, offset: Some(8.0) };
    const Q4_1: Self = Self { bytes: 20, nibbles: 4, fifth_bits: None, offset: None };
    const Q5_0: Self = Self { bytes: 22, nibbles: 6, fifth_bits: Some(2), offset: Some(16.0) };
    const Q5_1: Self = Self { bytes: 24, nibbles: 8, fifth_bits: Some(4), offset: None };

    /// `d` and `m` of a block from its first two f16s (`d`, and the one after it, which is `m`
    /// where the format stores one).
    #[cfg(any(test, target_arch = "wasm32"))]
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

/// `Σ w·x` of one weight row of `ggml_type` (one of [`IntegerRow::reads`]) and the row `x`: one
/// build per instruction set.
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

#[inline(always)]
fn half(block: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([block[at], block[at + 1]]))
}

/// `Σ w·x` over the blocks of a row, one block at a time by `block_dot(block, b)`.
#[cfg(test)]
#[inline(always)]
fn blocks(ggml_type: GgmlType, row: &[u8], x: &IntegerRow, mut block_dot: impl FnMut(&[u8], usize) -> f32) -> f32 {
    let bytes = ggml_type.block_layout().1 as usize;
    row.chunks_exact(bytes).take(x.blocks_of(ggml_type)).enumerate().map(|(b, block)| block_dot(block, b)).sum()
}

/// The reference's products ([`Portable`]), each block's quants widened to 16 bits one by one: `Σ
/// scale · q[i]·X[i]` over a sub-block of 16 or 32 quants and the values at `at..`, kept in
/// lanes across a block's sub-blocks and added together once per block. (WebAssembly SIMD reads
/// the same halves, each block's quants widened in registers: `simd128`.)
#[cfg(test)]
trait Widened: Sized {
    type Lanes: Copy;
    fn zero() -> Self::Lanes;
    fn add<const N: usize>(lanes: &mut Self::Lanes, scale: f32, q: &[i16; N], x: &IntegerRow, at: usize);
    fn total(lanes: Self::Lanes) -> f32;

    /// `Σ w·x` of a row of `format`'s blocks (`d·q + m`).
    #[inline(always)]
    fn unsigned32(format: Unsigned32, row: &[u8], x: &IntegerRow) -> f32 {
        by_block::<Self>(format.bytes, row, x, |block| {
            let qs = &block[format.nibbles..format.nibbles + 16];
            let fifth = format.fifth_word(block);
            let quants = std::array::from_fn(|i| {
                let nibble = if i < 16 { qs[i] & 0x0F } else { qs[i - 16] >> 4 };
                i16::from(nibble) | (((fifth >> i) & 1) << 4) as i16
            });
            let (d, m) = format.scale_and_min((half(block, 0), half(block, 2)));
            (d, quants, m)
        })
    }

    /// `Σ w·x` of a row of Q8_0 blocks (`d·q`).
    #[inline(always)]
    fn q8_0(row: &[u8], x: &IntegerRow) -> f32 {
        by_block::<Self>(34, row, x, |block| {
            (half(block, 0), std::array::from_fn(|i| i16::from(block[2 + i] as i8)), 0.0)
        })
    }

    /// `Σ w·x` of a row of a K-quant's blocks (Q4_K, Q5_K, Q6_K), a sub-block at a time.
    #[inline(always)]
    fn k_quants(ggml_type: GgmlType, row: &[u8], x: &IntegerRow) -> f32 {
        match ggml_type {
            GgmlType::Q4K => blocks(ggml_type, row, x, |block, b| {
                k_block::<Self>(block, x, b, |group, l| {
                    let byte = block[16 + 32 * group + l];
                    (byte & 0x0F, byte >> 4)
                })
            }),
            GgmlType::Q5K => blocks(ggml_type, row, x, |block, b| {
                let qh = &block[16..48];
                k_block::<Self>(block, x, b, |group, l| {
                    let byte = block[48 + 32 * group + l];
                    let fifth = |shift: usize| ((qh[l] >> shift) & 1) << 4;
                    ((byte & 0x0F) | fifth(2 * group), (byte >> 4) | fifth(2 * group + 1))
                })
            }),
            GgmlType::Q6K => blocks(ggml_type, row, x, |block, b| q6_k::<Self>(block, x, b)),
            other => unreachable!("{other} is not a K-quant"),
        }
    }
}

#[cfg(test)]
impl<D: Widened> RowDot for D {
    #[inline(always)]
    fn row_dot(ggml_type: GgmlType, row: &[u8], x: &IntegerRow) -> f32 {
        match ggml_type {
            GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K => D::k_quants(ggml_type, row, x),
            GgmlType::Q4_0 => D::unsigned32(Unsigned32::Q4_0, row, x),
            GgmlType::Q4_1 => D::unsigned32(Unsigned32::Q4_1, row, x),
            GgmlType::Q5_0 => D::unsigned32(Unsigned32::Q5_0, row, x),
            GgmlType::Q5_1 => D::unsigned32(Unsigned32::Q5_1, row, x),
            GgmlType::Q8_0 => D::q8_0(row, x),
            other => unreachable!("{other} does not go through integers"),
        }
    }
}

/// `Σ w·x` of a row of 32-value blocks of `bytes` (`d·q + m`): `block_quants(block)` gives a
/// block's `d`, its 32 quants and its `m`. The products stay in lanes across the row, each block's
/// scaled by `d` and the activations' scale; `m` multiplies the block's `Σx`.
#[cfg(test)]
#[inline(always)]
fn by_block<D: Widened>(
    bytes: usize,
    row: &[u8],
    x: &IntegerRow,
    block_quants: impl Fn(&[u8]) -> (f32, [i16; BLOCK], f32),
) -> f32 {
    debug_assert_eq!(x.block, BLOCK);
    let (mut lanes, mut minimums) = (D::zero(), 0f32);
    for (b, block) in row.chunks_exact(bytes).take(x.scales.len()).enumerate() {
        let (d, quants, m) = block_quants(block);
        // Exact in i32: |q| ≤ 128, |h| < 2¹⁵, 32 of them.
        D::add(&mut lanes, d * x.scale(BLOCK, b), &quants, x, BLOCK * b);
        minimums += m * x.sums32[b];
    }
    D::total(lanes) + minimums
}

/// What Q4_K and Q5_K share (`d·scale·q − dmin·min` in eight sub-blocks of 32): `d` and `dmin`
/// first, the packed scales, and four groups of 64 quants whose quant `l` of the low and of the
/// high 32 `quants(group, l)` gives.
#[cfg(test)]
#[inline(always)]
fn k_block<D: Widened>(block: &[u8], x: &IntegerRow, b: usize, quants: impl Fn(usize, usize) -> (u8, u8)) -> f32 {
    let (d, dmin) = (half(block, 0), half(block, 2));
    let scales = &block[4..16];
    let (mut scaled, mut minimums) = (D::zero(), 0f32);
    for group in 0..4 {
        let (mut low, mut high) = ([0i16; 32], [0i16; 32]);
        for l in 0..32 {
            let (lo, hi) = quants(group, l);
            (low[l], high[l]) = (i16::from(lo), i16::from(hi));
        }
        let at = b * SUPER_BLOCK + 64 * group;
        for (sub, quants, at) in [(2 * group, &low, at), (2 * group + 1, &high, at + 32)] {
            let (scale, min) = nucleus_gguf::k_scale_min(sub, scales);
            D::add(&mut scaled, f32::from(scale), quants, x, at);
            minimums += f32::from(min) * x.sums32[b * 8 + sub];
        }
    }
    d * x.scale(SUPER_BLOCK, b) * D::total(scaled) - dmin * minimums
}

/// One Q6_K block (`d·scale·(q − 32)`, sixteen sub-blocks of 16 with signed 8-bit scales)
/// against block `b` of `x`.
#[cfg(test)]
#[inline(always)]
fn q6_k<D: Widened>(block: &[u8], x: &IntegerRow, b: usize) -> f32 {
    let d = half(block, 208);
    let mut scaled = D::zero();
    for half_block in 0..2 {
        let ql = &block[64 * half_block..64 * half_block + 64];
        let qh = &block[128 + 32 * half_block..128 + 32 * half_block + 32];
        let sc = &block[192 + 8 * half_block..192 + 8 * half_block + 8];
        // The 128 values of this half, in four runs of 32 (quants 0..32, 32..64, 64..96, 96..128).
        let mut quants = [[0i16; 32]; 4];
        for l in 0..32 {
            quants[0][l] = i16::from((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) - 32;
            quants[1][l] = i16::from((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
            quants[2][l] = i16::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            quants[3][l] = i16::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        }
        for (run, quants) in quants.iter().enumerate() {
            for sixteen in 0..2 {
                let scale = f32::from(sc[2 * run + sixteen] as i8);
                let sixteen_quants: &[i16; 16] = quants[16 * sixteen..16 * sixteen + 16].try_into().expect("16");
                let at = b * SUPER_BLOCK + 128 * half_block + 32 * run + 16 * sixteen;
                D::add(&mut scaled, scale, sixteen_quants, x, at);
            }
        }
    }
    d * x.scale(SUPER_BLOCK, b) * D::total(scaled)
}

/// 16 bytes of `values` from `at`, in a WebAssembly vector.
#[cfg(target_arch = "wasm32")]
#[inline(always)]
fn load<T>(values: &[T], at: usize) -> std::arch::wasm32::v128 {
    let bytes = &values[at..at + 16 / size_of::<T>()];
    // SAFETY: 16 bytes in bounds (sliced above).
    unsafe { std::arch::wasm32::v128_load(bytes.as_ptr().cast()) }
}

/// The four f32 lanes of `lanes` added pairwise.
#[cfg(target_arch = "wasm32")]
#[inline(always)]
fn sum_lanes(lanes: std::arch::wasm32::v128) -> f32 {
    use std::arch::wasm32::f32x4_extract_lane;
    (f32x4_extract_lane::<0>(lanes) + f32x4_extract_lane::<1>(lanes))
        + (f32x4_extract_lane::<2>(lanes) + f32x4_extract_lane::<3>(lanes))
}

/// Plain Rust over the two halves: the reference the tests hold the others to.
#[cfg(test)]
pub(crate) struct Portable;

#[cfg(test)]
impl Widened for Portable {
    type Lanes = f32;

    #[inline(always)]
    fn zero() -> f32 {
        0.0
    }

    #[inline(always)]
    fn add<const N: usize>(lanes: &mut f32, scale: f32, q: &[i16; N], x: &IntegerRow, at: usize) {
        let [high, low] = &x.halves;
        let (high, low) = (&high[at..at + N], &low[at..at + N]);
        // Exact in i32: |q| ≤ 128, |h| < 2¹⁵, 32 of them.
        let (mut h, mut l) = (0i32, 0i32);
        for i in 0..N {
            h += i32::from(q[i]) * i32::from(high[i]);
            l += i32::from(q[i]) * i32::from(low[i]);
        }
        *lanes += scale * (h as f32 * 256.0 + l as f32);
    }

    #[inline(always)]
    fn total(lanes: f32) -> f32 {
        lanes
    }
}

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

/// The products over the 32-value formats' quants widened to 16 bits against the halves (plain
/// SIMD; relaxed SIMD takes Q8_0's from here too, see `relaxed::row_dot`), and the fifth bits of
/// Q5_0 and Q5_1 as bytes (both).
#[cfg(target_arch = "wasm32")]
mod simd128 {
    use std::arch::wasm32::*;

    use super::{BLOCK, GgmlType, IntegerRow, SUPER_BLOCK, half, k_scales_and_mins, load, sum_lanes};
    #[cfg(not(target_feature = "relaxed-simd"))]
    use super::{Unsigned32, apart};

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
            let qs = load(block, self.nibbles);
            let (mut low, mut high) = (v128_and(qs, c.nibbles), c.high_nibbles(qs));
            if self.fifth_bits.is_some() {
                let [first, second] = c.fifth_bits(self.fifth_word(block));
                (low, high) = (v128_or(low, first), v128_or(high, second));
            }
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

    /// The vectors the products use in every block, made once a row ([`hoisted`]), in both wasm
    /// builds. A byte shift is a 16-bit one and a mask from here: V8 makes `u8x16.shr`'s and
    /// `u8x16.shl`'s own mask at each use.
    #[derive(Clone, Copy)]
    pub(super) struct Constants {
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
        pub(super) fn new() -> Self {
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
            let spread = |indices: v128| v128_and(i8x16_eq(v128_and(i8x16_swizzle(word, indices), bit), bit), sixteen);
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
    pub(super) fn q4_k_group(block: &[u8; 144], group: usize, c: &Constants) -> [v128; 4] {
        let (first, second) = (load(block, 16 + 32 * group), load(block, 32 + 32 * group));
        [v128_and(first, c.nibbles), v128_and(second, c.nibbles), c.high_nibbles(first), c.high_nibbles(second)]
    }

    /// A Q5_K block's fifth bits (`qh`): its two registers, read once a block.
    #[inline(always)]
    pub(super) fn q5_k_fifth_bits(block: &[u8; 176]) -> [v128; 2] {
        [load(block, 16), load(block, 32)]
    }

    /// Group `group` of a Q5_K block, as [`q4_k_group`], with `qh` its [`q5_k_fifth_bits`].
    #[inline(always)]
    pub(super) fn q5_k_group(block: &[u8; 176], qh: &[v128; 2], group: usize, c: &Constants) -> [v128; 4] {
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
    pub(super) fn q6_k_quarter(
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
    fn k_block(
        block: &[u8],
        x: &IntegerRow,
        b: usize,
        c: &Constants,
        quants: impl Fn(usize) -> [v128; 4],
    ) -> (v128, v128) {
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
            let [(q0, s0, at0), (q1, s1, at1), (q2, s2, at2), (q3, s3, at3)] =
                q6_k_quarter(block, half_block, sixteen, c);
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

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{
        BLOCK, GgmlType, IntegerRow, KFormat, Q4k, Q5k, Q6k, SUPER_BLOCK, Unsigned32, half, k_scales_and_mins,
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
    unsafe fn f16_pair(block: &[u8], at: usize) -> (f32, f32) {
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
    pub(super) unsafe fn q8_0<P: PairSums>(
        block: &[u8],
        [d0, d1, d2]: [__m256i; 3],
        scale: f32,
        lanes: __m256,
    ) -> __m256 {
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
        unsafe { k_block::<P>(block, x, b, lanes, Q5kGroups { block, qh: load(block, 16) }) }
    }

    /// A Q4_K or Q5_K block's groups of 64 quants, the low and the high 32 as unsigned bytes: a
    /// trait, not a closure (a closure was called out of line, without the build's target
    /// features, once the K-quant loop had two copies).
    trait Groups {
        /// # Safety
        /// Only inlined into a function with the build's target features.
        unsafe fn group(&self, group: usize) -> (__m256i, __m256i);
    }

    /// Q4_K's block: the group's 32 bytes, low nibbles then high.
    struct Q4kGroups<'a>(&'a [u8]);

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
    struct Q5kGroups<'a> {
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

    impl Q5kGroups<'_> {
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
    unsafe fn k_block<P: PairSums>(
        block: &[u8],
        x: &IntegerRow,
        b: usize,
        lanes: __m256,
        quants: impl Groups,
    ) -> __m256 {
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
            let (nibbles, two_bits) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
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
                let (ql, qh) = (64 * half_block, 128 + 32 * half_block);
                let (low, high, qh) = (load(block, ql), load(block, ql + 32), load(block, qh));
                // The 128 values of this half, in four runs of 32 (as `dequant.rs` reads them).
                let runs = [
                    (_mm256_and_si256(low, nibbles), _mm256_slli_epi16(qh, 4)),
                    (_mm256_and_si256(high, nibbles), _mm256_slli_epi16(qh, 2)),
                    (_mm256_and_si256(_mm256_srli_epi16(low, 4), nibbles), qh),
                    (_mm256_and_si256(_mm256_srli_epi16(high, 4), nibbles), _mm256_srli_epi16(qh, 2)),
                ];
                for (run, (four_bits, upper)) in runs.into_iter().enumerate() {
                    let quants = _mm256_or_si256(four_bits, _mm256_and_si256(upper, two_bits));
                    let pair =
                        _mm256_permutevar8x32_epi32(scales, _mm256_set1_epi32(4 * half_block as i32 + run as i32));
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
mod avx512 {
    use std::arch::x86_64::*;

    use super::avx2::{self, Madd, load, load_f32, load8, total};
    use super::{
        GgmlType, IntegerRow, KFormat, Pair, Q4k, Q5k, Q6k, SUPER_BLOCK, Unsigned32, half, k_scales_and_mins,
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
            let pairs_minimums =
                _mm_cvtss_f32(_mm_movehdup_ps(minimums4)) * format.offset.map_or(1.0, |offset| -offset);
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
            sums = unsafe { F::add(block, x, b, sums) };
        }
        _mm512_reduce_add_ps(sums.0) + unsafe { total(sums.1) }
    }

    /// The products and minimums (or offsets) of a K-quant row's blocks so far.
    type Sums = (__m512, __m256);

    /// A K-quant format's block products in this build.
    trait KBlock: KFormat {
        /// Block `b` of a row against `x`, added to `sums`.
        ///
        /// # Safety
        /// Only inlined into a function with this module's target features.
        unsafe fn add(block: &[u8], x: &IntegerRow, b: usize, sums: Sums) -> Sums;
    }

    impl KBlock for Q4k {
        #[inline(always)]
        unsafe fn add(block: &[u8], x: &IntegerRow, b: usize, sums: Sums) -> Sums {
            unsafe { q4_k(block, x, b, sums) }
        }
    }

    impl KBlock for Q5k {
        #[inline(always)]
        unsafe fn add(block: &[u8], x: &IntegerRow, b: usize, sums: Sums) -> Sums {
            unsafe { q5_k(block, x, b, sums) }
        }
    }

    impl KBlock for Q6k {
        #[inline(always)]
        unsafe fn add(block: &[u8], x: &IntegerRow, b: usize, sums: Sums) -> Sums {
            unsafe { q6_k(block, x, b, sums) }
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

    #[inline(always)]
    unsafe fn q4_k(block: &[u8], x: &IntegerRow, b: usize, sums: Sums) -> Sums {
        unsafe {
            let quants = [nibbles64(block, 16), nibbles64(block, 48), nibbles64(block, 80), nibbles64(block, 112)];
            k_block(block, x, b, sums, quants)
        }
    }

    #[inline(always)]
    unsafe fn q5_k(block: &[u8], x: &IntegerRow, b: usize, sums: Sums) -> Sums {
        unsafe {
            let qh = _mm512_broadcast_i64x4(load(block, 16));
            let quants =
                [fifths64(block, qh, 0), fifths64(block, qh, 1), fifths64(block, qh, 2), fifths64(block, qh, 3)];
            k_block(block, x, b, sums, quants)
        }
    }

    /// Q5_K's group `group` of 64 quants: their low four bits, and 16 where their fifth bit in
    /// `qh` is set (bit 2·group of each byte for the low 32, 2·group + 1 for the high).
    #[inline(always)]
    unsafe fn fifths64(block: &[u8], qh: __m512i, group: usize) -> __m512i {
        unsafe {
            let bits =
                _mm512_inserti64x4(_mm512_set1_epi8(1 << (2 * group)), _mm256_set1_epi8(1 << (2 * group + 1)), 1);
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

    /// Q6_K: each half's four runs of 32 as two registers of 64 (runs 0 and 1, then 2 and 3,
    /// as `dequant.rs` reads them), each 16 values' scale spread over their four i32 lanes.
    #[inline(always)]
    unsafe fn q6_k(block: &[u8], x: &IntegerRow, b: usize, (lanes, offsets): Sums) -> Sums {
        unsafe {
            let d = half(block, 208);
            let xs = x.block_digits(b);
            let (nibbles, two_bits) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
            let (low_scales, high_scales) = (load8(block, 192), load8(block, 200));
            // The 16 sub-blocks' scales times `d` and the activations' scale.
            let scales = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_unpacklo_epi64(low_scales, high_scales)));
            let scales = _mm512_mul_ps(scales, _mm512_set1_ps(d * x.scale(SUPER_BLOCK, b)));
            let halves = |low: i16, high: i16| _mm512_inserti64x4(_mm512_set1_epi16(low), _mm256_set1_epi16(high), 1);
            let mut lanes = lanes;
            for half_block in 0..2 {
                let ql = load64(block, 64 * half_block);
                let qh = _mm512_broadcast_i64x4(load(block, 128 + 32 * half_block));
                let pairs = [
                    (_mm512_and_si512(ql, nibbles), _mm512_sllv_epi16(qh, halves(4, 2))),
                    (_mm512_and_si512(_mm512_srli_epi16(ql, 4), nibbles), _mm512_srlv_epi16(qh, halves(0, 2))),
                ];
                for (pair, (four_bits, upper)) in pairs.into_iter().enumerate() {
                    let quants = _mm512_or_si512(four_bits, _mm512_and_si512(upper, two_bits));
                    let sums = products64(quants, xs, 128 * half_block + 64 * pair);
                    let scale = spread(scales, 8 * half_block + 4 * pair, 4);
                    lanes = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, lanes);
                }
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
}

/// Decode-shaped products to time each [`ByteDot`] by (the engine's worker, at load): one row
/// against a Q4_K and a Q6_K matrix of 512 × 1,024 (the formats of a Q4_K_M file's bulk; 0.5 MB
/// of arbitrary blocks, made once and kept), four times, on the calling thread alone (the pool's
/// wake-ups moved a timing by more than the choice did): 4.2 M multiply-adds, a few milliseconds.
/// Returns a sum of the outputs, so nothing is skipped; 0 in a build with one way of summing.
pub fn byte_dot_probe() -> f32 {
    #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
    {
        const ROWS: usize = 512;
        const COLS: usize = 1024;
        const REPEATS: usize = 4;
        static PROBE: std::sync::OnceLock<[(GgmlType, Vec<u8>); 2]> = std::sync::OnceLock::new();
        let matrices = PROBE.get_or_init(|| {
            [GgmlType::Q4K, GgmlType::Q6K].map(|ggml_type| (ggml_type, timing_blocks(ggml_type, ROWS * COLS)))
        });
        let x: Vec<f32> = (0..COLS).map(|i| (i % 17) as f32 / 8.0 - 1.0).collect();
        let x = IntegerRow::new(&x, SUPER_BLOCK);
        let mut sum = 0.0;
        for _ in 0..REPEATS {
            for (ggml_type, blocks) in matrices {
                let row_bytes = blocks.len() / ROWS;
                let row_dot = match byte_dot() {
                    ByteDot::Accumulating => relaxed::row_dot::<relaxed::Accumulating>,
                    ByteDot::Paired => relaxed::row_dot::<relaxed::Paired>,
                };
                sum += blocks.chunks_exact(row_bytes).map(|row| row_dot(*ggml_type, row, &x)).sum::<f32>();
            }
        }
        sum
    }
    #[cfg(not(all(target_arch = "wasm32", target_feature = "relaxed-simd")))]
    0.0
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

/// How relaxed SIMD's byte products are summed: the fastest depends on the CPU under the browser,
/// which a module cannot ask, so the engine's worker times both at load ([`byte_dot_probe`]) and
/// keeps the faster ([`set_byte_dot`]). The sums are the same, exactly, either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteDot {
    /// `i32x4.relaxed_dot_i8x16_i7x16_add_s` per 16 quants, the sub-block's scale an `i32x4.mul`:
    /// one instruction where the CPU has a byte dot product that adds (ARM's `sdot`, x86's
    /// AVX-VNNI), three on other x86 CPUs (`pmaddubsw`, `pmaddwd` by ones, `paddd`) and the
    /// multiply two more.
    Accumulating,
    /// `i16x8.relaxed_dot_i8x16_i7x16_s` (`pmaddubsw`: the products summed in pairs, in i16), a
    /// sub-block's pairs added in i16, its scale and the widening to i32 one `i32x4.dot_i16x8_s`
    /// (`pmaddwd`): about half the instructions of `Accumulating` on x86 without AVX-VNNI; on ARM
    /// with `sdot`, about twice as many.
    Paired,
}

impl ByteDot {
    /// Each choice with its name (the worker's, and `info.backend.byteDot`).
    pub const ALL: [(ByteDot, &'static str); 2] =
        [(ByteDot::Accumulating, "accumulating"), (ByteDot::Paired, "paired")];

    pub fn from_name(name: &str) -> Option<ByteDot> {
        ByteDot::ALL.iter().find(|(_, n)| *n == name).map(|&(choice, _)| choice)
    }
}

/// The choice the relaxed build's products read (`Paired` as 1).
static BYTE_DOT: AtomicU8 = AtomicU8::new(0);

/// The choices this build has: both in wasm's relaxed SIMD build, none elsewhere (every other
/// build has one way of summing).
pub fn byte_dot_choices() -> &'static [(ByteDot, &'static str)] {
    if cfg!(all(target_arch = "wasm32", target_feature = "relaxed-simd")) { &ByteDot::ALL } else { &[] }
}

/// Sets how the relaxed build sums its byte products from here on (every thread reads it).
pub fn set_byte_dot(choice: ByteDot) {
    BYTE_DOT.store(u8::from(choice == ByteDot::Paired), Ordering::Relaxed);
}

/// How the relaxed build sums its byte products now (`Accumulating` until set).
pub fn byte_dot() -> ByteDot {
    if BYTE_DOT.load(Ordering::Relaxed) == 1 { ByteDot::Paired } else { ByteDot::Accumulating }
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

#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
pub(crate) mod relaxed {
    use std::arch::wasm32::*;

    use super::simd128::{self, Constants, k_header, k_row, q4_k_group, q5_k_fifth_bits, q5_k_group, q6_k_offsets};
    use super::{GgmlType, IntegerRow, SUPER_BLOCK, Unsigned32, apart, half, load, sum_lanes};

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
    /// sums joined in i32 (at most 8·31·0x7F7F7F per lane, below 2³¹), `m · Σx` added apart.
    #[inline(always)]
    fn unsigned32<S: Sums>(format: Unsigned32, row: &[u8], x: &IntegerRow) -> f32 {
        let (mut lanes, mut minimums) = (f32x4_splat(0.0), 0f32);
        let c = Constants::new();
        for (block, [d0, d1, d2], scale, sum) in x.blocks32(row, format.bytes) {
            let (d, m) = format.scale_and_min((half(block, 0), half(block, 2)));
            let qs = load(block, format.nibbles);
            let (mut low, mut high) = (v128_and(qs, c.nibbles), c.high_nibbles(qs));
            if format.fifth_bits.is_some() {
                let [first, second] = c.fifth_bits(format.fifth_word(block));
                (low, high) = (v128_or(low, first), v128_or(high, second));
            }
            let place = |digits: &[i8]| S::sum32([low, high], [load(digits, 0), load(digits, 16)]);
            let sum32 = i32x4_add(i32x4_shl(i32x4_add(i32x4_shl(place(d0), 8), place(d1)), 8), place(d2));
            lanes = f32x4_add(lanes, f32x4_mul(f32x4_convert_i32x4(sum32), f32x4_splat(d * scale)));
            minimums += m * sum;
        }
        sum_lanes(lanes) + minimums
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random-looking blocks with sane scales (finite f16s of about 1e-3).
    fn blocks(ggml_type: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
        let (block, block_bytes) = ggml_type.block_layout();
        let mut bytes: Vec<u8> =
            (0..rows * cols / block as usize * block_bytes as usize).map(|i| (i * 7919 % 251) as u8).collect();
        for b in bytes.chunks_exact_mut(block_bytes as usize) {
            let scale = 0x1400u16.to_le_bytes();
            match ggml_type {
                GgmlType::Q6K => b[208..210].copy_from_slice(&scale),
                GgmlType::Q8_0 => b[0..2].copy_from_slice(&scale),
                _ => {
                    b[0..2].copy_from_slice(&scale);
                    b[2..4].copy_from_slice(&0x1000u16.to_le_bytes());
                }
            }
        }
        bytes
    }

    /// Activations with an outlier per block, as Gemma's have.
    fn activations(cols: usize) -> Vec<f32> {
        (0..cols)
            .map(|i| (i as f32 * 0.37).sin() * (1.0 + (i % 7) as f32) * if i % 256 == 3 { 300.0 } else { 1.0 })
            .collect()
    }

    /// `Σ w·x` of each row against the row dequantized whole, f64 sums.
    fn exact(ggml_type: GgmlType, bytes: &[u8], rows: usize, x: &[f32]) -> Vec<(f64, f64)> {
        let cols = x.len();
        let mut dense = vec![0.0; rows * cols];
        assert!(nucleus_gguf::dequantize_into(ggml_type, bytes, &mut dense));
        dense
            .chunks_exact(cols)
            .map(|w| {
                let products = w.iter().zip(x).map(|(&a, &b)| f64::from(a) * f64::from(b));
                (products.clone().sum(), products.map(f64::abs).sum())
            })
            .collect()
    }

    /// Every format that goes through integers, and the row rounded as it reads it.
    const FORMATS: [(GgmlType, usize); 8] = [
        (GgmlType::Q4K, SUPER_BLOCK),
        (GgmlType::Q5K, SUPER_BLOCK),
        (GgmlType::Q6K, SUPER_BLOCK),
        (GgmlType::Q4_0, BLOCK),
        (GgmlType::Q4_1, BLOCK),
        (GgmlType::Q5_0, BLOCK),
        (GgmlType::Q5_1, BLOCK),
        (GgmlType::Q8_0, BLOCK),
    ];

    /// Every format with a scale per 32 values is one of the four unsigned layouts or Q8_0.
    #[test]
    fn the_unsigned_layouts_match_the_formats() {
        for (ggml_type, format) in [
            (GgmlType::Q4_0, Unsigned32::Q4_0),
            (GgmlType::Q4_1, Unsigned32::Q4_1),
            (GgmlType::Q5_0, Unsigned32::Q5_0),
            (GgmlType::Q5_1, Unsigned32::Q5_1),
        ] {
            assert_eq!(ggml_type.block_layout(), (BLOCK as u64, format.bytes as u64), "{ggml_type}");
            assert_eq!(format.nibbles + 16, format.bytes, "{ggml_type}: the nibbles end the block");
        }
    }

    /// The portable build against the block dequantized whole and an f64 sum: within the
    /// rounding of 24 bits.
    #[test]
    fn integer_products_equal_the_dequantized_rows_within_the_rounding() {
        let (rows, cols) = (3, 768);
        let x = activations(cols);
        for (ggml_type, block) in FORMATS {
            let q = IntegerRow::new(&x, block);
            let bytes = blocks(ggml_type, rows, cols);
            let row_bytes = bytes.len() / rows;
            for (r, (exact, magnitude)) in exact(ggml_type, &bytes, rows, &x).into_iter().enumerate() {
                let got = f64::from(Portable::row_dot(ggml_type, &bytes[r * row_bytes..(r + 1) * row_bytes], &q));
                assert!(
                    (got - exact).abs() <= 1e-6 * magnitude.max(1e-6),
                    "{ggml_type} row {r}: {got} against {exact} (Σ|w·x| {magnitude})"
                );
            }
        }
    }

    /// The x86 builds (AVX2, with AVX-VNNI, AVX-512: those this CPU has) against the portable
    /// one, on every format, every quant value (the blocks' bytes run through all 251 residues:
    /// Q8_0's −128 among them) and the digits' extremes (−127 in each place, −128 in the lower
    /// two); the 32-value formats on an even and an odd number of blocks (AVX-512 takes them in
    /// pairs, an odd last one the AVX2 way), the K-quants on a row that AVX-512 prefetches and
    /// one it does not.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_x86_builds_equal_the_portable_one() {
        use crate::matmul::X86;
        type Build = fn(GgmlType, &[u8], &IntegerRow) -> f32;
        let builds: [(&str, bool, Build); 3] = [
            ("AVX2", X86::Avx2.runs_here(), Avx2::row_dot),
            ("AVX-VNNI", X86::AvxVnni.runs_here(), Vnni::row_dot),
            ("AVX-512", X86::Avx512.runs_here(), Avx512::row_dot),
        ];
        let rows = 4;
        for (name, _, build) in builds.into_iter().filter(|(_, present, _)| *present) {
            for (ggml_type, block) in FORMATS {
                // K-quant rows of at least `PREFETCHED_ROW` values go through a loop of their own.
                let widths: &[usize] =
                    if block == BLOCK { &[1024, 1024 + 3 * BLOCK] } else { &[1024, PREFETCHED_ROW + SUPER_BLOCK] };
                for &cols in widths {
                    let mut x = activations(cols);
                    x[300] = -x.iter().fold(0f32, |m, v| m.max(v.abs()));
                    let q = IntegerRow::new(&x, block);
                    assert!(q.digits[1..].iter().all(|place| place.contains(&-128)), "the lower digits reach −128");
                    let bytes = blocks(ggml_type, rows, cols);
                    let row_bytes = bytes.len() / rows;
                    for (r, (_, magnitude)) in exact(ggml_type, &bytes, rows, &x).into_iter().enumerate() {
                        let row = &bytes[r * row_bytes..(r + 1) * row_bytes];
                        let (got, want) = (build(ggml_type, row, &q), Portable::row_dot(ggml_type, row, &q));
                        assert!(
                            f64::from((got - want).abs()) <= 1e-6 * magnitude,
                            "{ggml_type} {cols} wide, row {r}: {name} {got}, portable {want}"
                        );
                    }
                }
            }
        }
    }

    /// A row rounded for products that include Q8_0 has AVX-512's Q8_0 offsets, as a row for
    /// every format does; one for other formats alone has none, and reading it as Q8_0 panics.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn only_a_row_for_q8_0_products_has_their_offsets() {
        let x = activations(1024);
        let every = IntegerRow::new(&x, BLOCK);
        let with = IntegerRow::for_types(&x, BLOCK, [GgmlType::Q5_0, GgmlType::Q8_0].into_iter());
        let without = IntegerRow::for_types(&x, BLOCK, [GgmlType::Q5_0].into_iter());
        assert!(without.q8_0_offsets.is_empty());
        assert_eq!(with.q8_0_offsets.len(), every.q8_0_offsets.len());
        if crate::matmul::X86::Avx512.runs_here() {
            assert_eq!(every.q8_0_offsets.len(), 1024 / 64);
            let bytes = blocks(GgmlType::Q8_0, 1, 1024);
            let read = std::panic::catch_unwind(|| Avx512::row_dot(GgmlType::Q8_0, &bytes, &without));
            assert!(read.is_err(), "a Q8_0 product of a row without its offsets");
        }
    }

    /// Each digit place starts on a cache line and holds exactly the row's values, a whole number
    /// of lines or not; the digits read back are the values'.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_digits_start_on_a_cache_line() {
        for len in [32, 96, 256, 1056] {
            let q = IntegerRow::new(&activations(len), BLOCK);
            for place in &q.digits {
                assert_eq!((place.as_ptr() as usize % 64, place.len()), (0, len), "{len} values");
            }
            let value = |i: usize| i32::from(q.halves[0][i]) * 256 + i32::from(q.halves[1][i]);
            let digits =
                |i: usize| [0, 1, 2].map(|d| i32::from(q.digits[d][i])).into_iter().fold(0, |n, d| n * 256 + d);
            assert!((0..len).all(|i| digits(i) == value(i)), "{len} values");
        }
    }

    #[test]
    fn every_value_rounds_to_its_nearest_step() {
        assert_eq!(
            [2.5, -2.5, 3.5, -3.5, 0.49, -0.51, 8_355_711.2, -8_355_711.2].map(nearest),
            [2, -2, 4, -4, 0, -1, 0x7F_7F7F, -0x7F_7F7F]
        );
        let x: Vec<f32> = (0..1024).map(|i| ((i * 7919 % 1013) as f32 - 506.0) * 3.7e-3 * (1 + i % 5) as f32).collect();
        for block in [BLOCK, SUPER_BLOCK] {
            let q = IntegerRow::new(&x, block);
            for (i, &v) in x.iter().enumerate() {
                let value = i32::from(q.halves[0][i]) * 256 + i32::from(q.halves[1][i]);
                let largest = x[i / block * block..][..block].iter().fold(0f32, |m, v| m.max(v.abs()));
                let steps = f64::from(v) / (f64::from(largest) / STEPS);
                assert!((f64::from(value) - steps).abs() <= 0.5 + 1e-6, "x[{i}] = {v}: {value} for {steps} steps");
            }
            let sums: Vec<f32> = x.chunks_exact(16).map(|c| c.iter().sum()).collect();
            assert!(q.sums.iter().zip(&sums).all(|(a, b)| (a - b).abs() <= 1e-5 * b.abs().max(1.0)));
        }
    }

    #[test]
    fn a_zero_row_rounds_to_zero_and_the_largest_value_to_its_full_range() {
        let mut x = vec![0.0; 256];
        let q = IntegerRow::new(&x, SUPER_BLOCK);
        let value = |q: &IntegerRow, i: usize| i32::from(q.halves[0][i]) * 256 + i32::from(q.halves[1][i]);
        assert!((0..256).all(|i| value(&q, i) == 0) && q.scales == [1.0]);
        x[3] = -2.5;
        x[9] = 1.25;
        x[10] = 1e-5;
        let q = IntegerRow::new(&x, SUPER_BLOCK);
        assert_eq!((value(&q, 3), value(&q, 9)), (-0x7F_7F7F, 0x3F_BFC0));
        assert!((0..256).all(|i| (0..256).contains(&q.halves[1][i])));
        // A value five orders of magnitude below the block's largest keeps its digits: within
        // half a step (2.5 / 0x7F7F7F).
        assert!(((value(&q, 10) as f32 * q.scales[0]) - 1e-5).abs() < 1.6e-7);
        assert_eq!(q.sums[0], -1.25 + 1e-5);
        #[cfg(target_arch = "x86_64")]
        {
            let digits = |i: usize| {
                let [d0, d1, d2] = [0, 1, 2].map(|d| i32::from(q.digits[d][i]));
                d0 * 65536 + d1 * 256 + d2
            };
            assert!((0..256).all(|i| digits(i) == value(&q, i)));
            assert_eq!([0, 1, 2].map(|d| q.digits[d][3]), [-127, -127, -127]);
        }
    }
}
