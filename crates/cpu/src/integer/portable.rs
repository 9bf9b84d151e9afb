//! The portable build: plain Rust over the activations' two 16-bit halves (`X = h·2⁸ + l`), each
//! block's quants widened to 16 bits one by one and summed in i32. The reference the tests hold
//! every other build to (`tests.rs`); the engine never runs it.

use super::{BLOCK, GgmlType, IntegerRow, RowDot, SUPER_BLOCK, Unsigned32, half};

/// `Σ w·x` over the blocks of a row, one block at a time by `block_dot(block, b)`.
#[inline(always)]
fn blocks(ggml_type: GgmlType, row: &[u8], x: &IntegerRow, mut block_dot: impl FnMut(&[u8], usize) -> f32) -> f32 {
    let bytes = ggml_type.block_layout().1 as usize;
    row.chunks_exact(bytes).take(x.blocks_of(ggml_type)).enumerate().map(|(b, block)| block_dot(block, b)).sum()
}

/// The reference's products ([`Portable`]), each block's quants widened to 16 bits one by one: `Σ
/// scale · q[i]·X[i]` over a sub-block of 16 or 32 quants and the values at `at..`, kept in
/// lanes across a block's sub-blocks and added together once per block. (WebAssembly SIMD reads
/// the same halves, each block's quants widened in registers: `simd128`.)
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

/// Plain Rust over the two halves: the reference the tests hold the others to.
pub(crate) struct Portable;

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
