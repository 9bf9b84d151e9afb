//! A decode step's products over the K-quant blocks (Q4_K, Q5_K, Q6_K: the bulk of a Q4_K_M
//! file) in integers: the activation row as 31-bit integers per 256 values (one scale each),
//! held as two 16-bit halves, each block's quants multiplied by both halves as 16-bit integers
//! summed in 32 (what AVX2's `vpmaddwd` and WebAssembly's `i32x4.dot_i16x8_s` do, sixteen and
//! eight products an instruction), the block's scales applied once per 16 or 32 values in f32.
//!
//! Why: through the tile (`matmul.rs`) each weight is converted to f32, scaled, written and read
//! back before its multiply-add; a K-quant decode product ran at 10 GMAC/s natively, far from
//! what memory could feed. Why 31 bits in two halves, not 8 or 16: llama.cpp rounds activations
//! to 8 bits, which moves logits by up to ~0.6; one 16-bit half per 256 values moved Gemma 3's
//! decode logits by up to 1.1e-2 from its prefill's (its activations have outliers that set a
//! block's step), where the engine keeps the two within 1e-4. Two halves are a rounding of 2⁻³⁰
//! of the block's largest activation: the f32 path's precision, at twice the integer products.
//! The minimums of Q4_K and Q5_K multiply the exact f32 sum of each 32 activations.
//!
//! One body per format, written so the compiler vectorises it (the products of `u8`/`i8` quants
//! widened to `i16` times `i16` activations, summed in `i32`): compiled into the AVX2 build and
//! the `simd128` build by `matmul.rs`, like the tile's kernel.

use nucleus_gguf::{GgmlType, f16_to_f32, k_scale_min};

/// Values sharing one activation scale: a K-quant block.
pub const SUPER_BLOCK: usize = 256;

/// Steps of the largest activation of a block: `2³⁰ − 2¹⁵`, so `x / scale` fits 31 bits and its
/// high half 16.
const STEPS: f64 = ((1u64 << 30) - (1 << 15)) as f64;
/// The low half's range: `X = high · 2¹⁵ + low`, `0 ≤ low < 2¹⁵`.
const LOW: f32 = 32768.0;

/// An activation row as 31-bit integers in two 16-bit halves: per 256 values one scale, per 32
/// their exact sum.
#[derive(Debug, Clone)]
pub struct Activations16 {
    /// `X >> 15` (signed).
    high: Vec<i16>,
    /// `X & 0x7FFF`.
    low: Vec<i16>,
    /// Per 256 values: `x ≈ X · scale`.
    scales: Vec<f32>,
    /// Per 32 values: `Σ x`, in f32 (the blocks' minimums multiply it).
    sums: Vec<f32>,
}

impl Activations16 {
    /// `x` (a multiple of 256 values) rounded to the nearest of 2³¹ steps of its largest
    /// magnitude per 256.
    pub fn new(x: &[f32]) -> Self {
        assert!(x.len().is_multiple_of(SUPER_BLOCK), "{} activations are not whole blocks of 256", x.len());
        let (mut high, mut low) = (vec![0i16; x.len()], vec![0i16; x.len()]);
        let mut scales = Vec::with_capacity(x.len() / SUPER_BLOCK);
        for ((block, high), low) in
            x.chunks_exact(SUPER_BLOCK).zip(high.chunks_exact_mut(SUPER_BLOCK)).zip(low.chunks_exact_mut(SUPER_BLOCK))
        {
            let largest = block.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = if largest > 0.0 { f64::from(largest) / STEPS } else { 1.0 };
            for ((h, l), &v) in high.iter_mut().zip(low.iter_mut()).zip(block) {
                let steps = (f64::from(v) / scale).round() as i32;
                (*h, *l) = ((steps >> 15) as i16, (steps & 0x7FFF) as i16);
            }
            scales.push(scale as f32);
        }
        let sums = x.chunks_exact(32).map(|c| c.iter().sum()).collect();
        Self { high, low, scales, sums }
    }

    /// Whether products of `ggml_type` go through here.
    pub fn reads(ggml_type: GgmlType) -> bool {
        matches!(ggml_type, GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K)
    }
}

/// `Σ w·x` of one weight row of `ggml_type` (one of [`Activations16::reads`]) and the row `x`.
#[inline(always)]
pub(crate) fn row_dot<D: IntDot>(ggml_type: GgmlType, row: &[u8], x: &Activations16) -> f32 {
    let blocks = x.scales.len();
    let mut total = 0f32;
    match ggml_type {
        GgmlType::Q4K => {
            for (b, block) in row.chunks_exact(144).enumerate().take(blocks) {
                total += q4_k::<D>(block.try_into().expect("144-byte blocks"), x, b);
            }
        }
        GgmlType::Q5K => {
            for (b, block) in row.chunks_exact(176).enumerate().take(blocks) {
                total += q5_k::<D>(block.try_into().expect("176-byte blocks"), x, b);
            }
        }
        GgmlType::Q6K => {
            for (b, block) in row.chunks_exact(210).enumerate().take(blocks) {
                total += q6_k::<D>(block.try_into().expect("210-byte blocks"), x, b);
            }
        }
        other => unreachable!("{other} is not a K-quant"),
    }
    total
}

#[inline(always)]
fn half(block: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([block[at], block[at + 1]]))
}

/// `Σ scale · q[i]·X[i]` over sub-blocks of 16 or 32 quants (already `i16`) and the activations
/// at `at..`, kept in vector lanes across a block's sub-blocks and added together once per block:
/// one build per instruction set, like `dot.rs`'s. Each half's products are summed in i32 (exact:
/// |q| < 64, |half| ≤ 2¹⁵, 32 of them), then `high · 2¹⁵ + low` in f32.
pub(crate) trait IntDot {
    type Lanes: Copy;
    fn zero() -> Self::Lanes;
    fn add<const N: usize>(lanes: &mut Self::Lanes, scale: f32, q: &[i16; N], x: &Activations16, at: usize);
    fn total(lanes: Self::Lanes) -> f32;
}

/// Plain Rust.
pub(crate) struct Portable;

impl IntDot for Portable {
    type Lanes = f32;

    #[inline(always)]
    fn zero() -> f32 {
        0.0
    }

    #[inline(always)]
    fn add<const N: usize>(lanes: &mut f32, scale: f32, q: &[i16; N], x: &Activations16, at: usize) {
        let (high, low) = (&x.high[at..at + N], &x.low[at..at + N]);
        let (mut h, mut l) = (0i32, 0i32);
        for i in 0..N {
            h += i32::from(q[i]) * i32::from(high[i]);
            l += i32::from(q[i]) * i32::from(low[i]);
        }
        *lanes += scale * (h as f32 * LOW + l as f32);
    }

    #[inline(always)]
    fn total(lanes: f32) -> f32 {
        lanes
    }
}

/// AVX2 (x86-64, chosen at run time): `vpmaddwd` on sixteen quants at a time.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx2;

#[cfg(target_arch = "x86_64")]
impl IntDot for Avx2 {
    type Lanes = std::arch::x86_64::__m256;

    #[inline(always)]
    fn zero() -> Self::Lanes {
        // SAFETY: (for every function here) only compiled into `#[target_feature(enable =
        // "avx2,fma")]` functions, which run after the CPU was found to have both.
        unsafe { std::arch::x86_64::_mm256_setzero_ps() }
    }

    #[inline(always)]
    fn add<const N: usize>(lanes: &mut Self::Lanes, scale: f32, q: &[i16; N], x: &Activations16, at: usize) {
        assert!(N.is_multiple_of(16) && at + N <= x.high.len());
        unsafe { add_avx2(lanes, scale, q, &x.high[at..at + N], &x.low[at..at + N]) }
    }

    #[inline(always)]
    fn total(lanes: Self::Lanes) -> f32 {
        unsafe { total_avx2(lanes) }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn add_avx2(lanes: &mut std::arch::x86_64::__m256, scale: f32, q: &[i16], high: &[i16], low: &[i16]) {
    use std::arch::x86_64::*;
    let (mut h, mut l) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    for k in (0..q.len()).step_by(16) {
        // SAFETY: k + 16 <= the length of each (the caller's assertion).
        let (qs, hs, ls) = unsafe {
            (
                _mm256_loadu_si256(q.as_ptr().add(k).cast()),
                _mm256_loadu_si256(high.as_ptr().add(k).cast()),
                _mm256_loadu_si256(low.as_ptr().add(k).cast()),
            )
        };
        h = _mm256_add_epi32(h, _mm256_madd_epi16(qs, hs));
        l = _mm256_add_epi32(l, _mm256_madd_epi16(qs, ls));
    }
    let value = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h), _mm256_set1_ps(LOW), _mm256_cvtepi32_ps(l));
    *lanes = _mm256_fmadd_ps(value, _mm256_set1_ps(scale), *lanes);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn total_avx2(lanes: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let sum = _mm_add_ps(_mm256_castps256_ps128(lanes), _mm256_extractf128_ps(lanes, 1));
    let sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
    _mm_cvtss_f32(_mm_add_ss(sum, _mm_shuffle_ps(sum, sum, 1)))
}

/// WebAssembly SIMD: `i32x4.dot_i16x8_s` on eight quants at a time.
#[cfg(target_arch = "wasm32")]
pub(crate) struct Simd128;

#[cfg(target_arch = "wasm32")]
impl IntDot for Simd128 {
    type Lanes = std::arch::wasm32::v128;

    #[inline(always)]
    fn zero() -> Self::Lanes {
        std::arch::wasm32::f32x4_splat(0.0)
    }

    #[inline(always)]
    fn add<const N: usize>(lanes: &mut Self::Lanes, scale: f32, q: &[i16; N], x: &Activations16, at: usize) {
        use std::arch::wasm32::*;
        assert!(N.is_multiple_of(8) && at + N <= x.high.len());
        let (high, low) = (&x.high[at..at + N], &x.low[at..at + N]);
        let (mut h, mut l) = (i32x4_splat(0), i32x4_splat(0));
        for k in (0..N).step_by(8) {
            // SAFETY: k + 8 <= N for each; only compiled into `#[target_feature(enable =
            // "simd128")]` functions.
            let (qs, hs, ls) = unsafe {
                (
                    v128_load(q.as_ptr().add(k).cast()),
                    v128_load(high.as_ptr().add(k).cast()),
                    v128_load(low.as_ptr().add(k).cast()),
                )
            };
            h = i32x4_add(h, i32x4_dot_i16x8(qs, hs));
            l = i32x4_add(l, i32x4_dot_i16x8(qs, ls));
        }
        let value = f32x4_add(f32x4_mul(f32x4_convert_i32x4(h), f32x4_splat(LOW)), f32x4_convert_i32x4(l));
        *lanes = f32x4_add(*lanes, f32x4_mul(value, f32x4_splat(scale)));
    }

    #[inline(always)]
    fn total(lanes: Self::Lanes) -> f32 {
        use std::arch::wasm32::*;
        (f32x4_extract_lane::<0>(lanes) + f32x4_extract_lane::<1>(lanes))
            + (f32x4_extract_lane::<2>(lanes) + f32x4_extract_lane::<3>(lanes))
    }
}

/// One Q4_K block (`d·scale·q − dmin·min` in eight sub-blocks of 32) against block `b` of `x`.
#[inline(always)]
fn q4_k<D: IntDot>(block: &[u8; 144], x: &Activations16, b: usize) -> f32 {
    k_block::<D>(block, x, b, |group, l| {
        let byte = block[16 + 32 * group + l];
        (byte & 0x0F, byte >> 4)
    })
}

/// One Q5_K block (Q4_K's with a fifth bit per quant in `qh`) against block `b` of `x`.
#[inline(always)]
fn q5_k<D: IntDot>(block: &[u8; 176], x: &Activations16, b: usize) -> f32 {
    let qh = &block[16..48];
    k_block::<D>(block, x, b, |group, l| {
        let byte = block[48 + 32 * group + l];
        let fifth = |shift: usize| ((qh[l] >> shift) & 1) << 4;
        ((byte & 0x0F) | fifth(2 * group), (byte >> 4) | fifth(2 * group + 1))
    })
}

/// What Q4_K and Q5_K share: `d` and `dmin` first, the packed scales, and four groups of 64
/// quants whose quant `l` of the low and of the high 32 `quants(group, l)` gives.
#[inline(always)]
fn k_block<D: IntDot>(block: &[u8], x: &Activations16, b: usize, quants: impl Fn(usize, usize) -> (u8, u8)) -> f32 {
    let (d, dmin) = (half(block, 0), half(block, 2));
    let scales = &block[4..16];
    let sums = &x.sums[b * 8..b * 8 + 8];
    let (mut scaled, mut minimums) = (D::zero(), 0f32);
    for group in 0..4 {
        let (mut low, mut high) = ([0i16; 32], [0i16; 32]);
        for l in 0..32 {
            let (lo, hi) = quants(group, l);
            (low[l], high[l]) = (i16::from(lo), i16::from(hi));
        }
        let at = b * SUPER_BLOCK + 64 * group;
        for (sub, quants, at) in [(2 * group, &low, at), (2 * group + 1, &high, at + 32)] {
            let (scale, min) = k_scale_min(sub, scales);
            D::add(&mut scaled, f32::from(scale), quants, x, at);
            minimums += f32::from(min) * sums[sub];
        }
    }
    d * x.scales[b] * D::total(scaled) - dmin * minimums
}

/// One Q6_K block (`d·scale·(q − 32)`, sixteen sub-blocks of 16 with signed 8-bit scales)
/// against block `b` of `x`.
#[inline(always)]
fn q6_k<D: IntDot>(block: &[u8; 210], x: &Activations16, b: usize) -> f32 {
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
    d * x.scales[b] * D::total(scaled)
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
                _ => {
                    b[0..2].copy_from_slice(&scale);
                    b[2..4].copy_from_slice(&0x1000u16.to_le_bytes());
                }
            }
        }
        bytes
    }

    /// Against the block dequantized whole and an f64 sum: within the rounding of 16 bits.
    #[test]
    fn integer_products_equal_the_dequantized_rows_within_the_rounding() {
        let (rows, cols) = (3, 768);
        let x: Vec<f32> = (0..cols).map(|i| (i as f32 * 0.37).sin() * (1.0 + (i % 7) as f32)).collect();
        let q = Activations16::new(&x);
        for ggml_type in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
            let bytes = blocks(ggml_type, rows, cols);
            let row_bytes = bytes.len() / rows;
            let mut dense = vec![0.0; rows * cols];
            assert!(nucleus_gguf::dequantize_into(ggml_type, &bytes, &mut dense));
            for r in 0..rows {
                let w = &dense[r * cols..(r + 1) * cols];
                let exact: f64 = w.iter().zip(&x).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
                let magnitude: f64 = w.iter().zip(&x).map(|(&a, &b)| (f64::from(a) * f64::from(b)).abs()).sum();
                let row = &bytes[r * row_bytes..(r + 1) * row_bytes];
                let got = f64::from(row_dot::<Portable>(ggml_type, row, &q));
                assert!(
                    (got - exact).abs() <= 1e-6 * magnitude.max(1e-6),
                    "{ggml_type} row {r}: {got} against {exact} (Σ|w·x| {magnitude})"
                );
            }
        }
    }

    #[test]
    fn a_zero_row_rounds_to_zero_and_the_largest_value_to_two_to_the_thirty() {
        let mut x = vec![0.0; 256];
        let q = Activations16::new(&x);
        assert!(q.high.iter().chain(&q.low).all(|&v| v == 0) && q.scales == [1.0]);
        x[3] = -2.5;
        x[9] = 1.25;
        x[10] = 1e-6;
        let q = Activations16::new(&x);
        let value = |i: usize| i32::from(q.high[i]) * 32768 + i32::from(q.low[i]);
        assert_eq!((value(3), value(9)), (-(1 << 30) + (1 << 15), (1 << 29) - (1 << 14)));
        assert_eq!((q.high[3], q.high[9]), (-32767, 16383));
        // A value six orders of magnitude below the block's largest keeps its digits: within
        // half a step (2.5 / (2³⁰ − 2¹⁵)).
        assert!(((value(10) as f32 * q.scales[0]) - 1e-6).abs() < 1.2e-9);
        assert!((0..256).all(|i| (0..32768).contains(&i32::from(q.low[i]))));
        assert_eq!(q.sums[0], -1.25 + 1e-6);
    }
}
