//! `Σ a[i]·b[i]`, the one product every kernel ends in, written once per instruction set.
//!
//! Every build sums a row's whole 32s in 32 lanes (element `i` into lane `i mod 32`: four vectors
//! of eight on AVX2, eight of four in WebAssembly, independent additions that keep the adder
//! busy), adds the lanes pairwise once at the row's end, then the elements past the last whole 32
//! in order. AVX2 multiplies and adds in one rounding (FMA); the others round twice: results differ
//! in the last bits between builds, far inside the 1e-3 the references allow.

/// A build of the dot product: sums kept in vector lanes across calls ([`Dot::add`]), added
/// together once at the end ([`Dot::total`]), so a row of several tiles pays for one reduction.
pub(crate) trait Dot {
    /// 32 partial sums in registers.
    type Lanes: Copy;
    fn zero() -> Self::Lanes;
    /// `lanes[i mod 32] += a[i]·b[i]` over the whole 32s of `a` and `b` (as long as each other, a
    /// multiple of 32).
    fn add(lanes: &mut Self::Lanes, a: &[f32], b: &[f32]);
    /// The lanes added pairwise.
    fn total(lanes: Self::Lanes) -> f32;
}

/// Plain Rust: whatever the compiler makes of it for the baseline CPU.
pub(crate) struct Portable;

impl Dot for Portable {
    type Lanes = [f32; 32];

    #[inline(always)]
    fn zero() -> Self::Lanes {
        [0.0; 32]
    }

    #[inline(always)]
    fn add(lanes: &mut Self::Lanes, a: &[f32], b: &[f32]) {
        for (a, b) in a.chunks_exact(32).zip(b.chunks_exact(32)) {
            for lane in 0..32 {
                lanes[lane] += a[lane] * b[lane];
            }
        }
    }

    #[inline(always)]
    fn total(mut lanes: Self::Lanes) -> f32 {
        let mut width = 16;
        while width > 0 {
            for lane in 0..width {
                lanes[lane] += lanes[lane + width];
            }
            width /= 2;
        }
        lanes[0]
    }
}

/// AVX2 with FMA (x86-64, chosen at run time).
#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Dot for Avx2 {
    type Lanes = [std::arch::x86_64::__m256; 4];

    #[inline(always)]
    fn zero() -> Self::Lanes {
        // SAFETY: (for every function here) only compiled into `#[target_feature(enable =
        // "avx2,fma")]` functions, which run after the CPU was found to have both.
        unsafe { [std::arch::x86_64::_mm256_setzero_ps(); 4] }
    }

    #[inline(always)]
    fn add(lanes: &mut Self::Lanes, a: &[f32], b: &[f32]) {
        unsafe { add_avx2(lanes, a, b) }
    }

    #[inline(always)]
    fn total(lanes: Self::Lanes) -> f32 {
        unsafe { total_avx2(lanes) }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn add_avx2(lanes: &mut [std::arch::x86_64::__m256; 4], a: &[f32], b: &[f32]) {
    use std::arch::x86_64::*;
    let len = a.len().min(b.len()) / 32 * 32;
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    while i < len {
        for (k, lane) in lanes.iter_mut().enumerate() {
            // SAFETY: i + 8k + 8 <= len: in bounds of both.
            let (x, y) = unsafe { (_mm256_loadu_ps(pa.add(i + 8 * k)), _mm256_loadu_ps(pb.add(i + 8 * k))) };
            *lane = _mm256_fmadd_ps(x, y, *lane);
        }
        i += 32;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn total_avx2(lanes: [std::arch::x86_64::__m256; 4]) -> f32 {
    use std::arch::x86_64::*;
    let sum = _mm256_add_ps(_mm256_add_ps(lanes[0], lanes[2]), _mm256_add_ps(lanes[1], lanes[3]));
    let sum = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    let sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
    _mm_cvtss_f32(_mm_add_ss(sum, _mm_shuffle_ps(sum, sum, 1)))
}

/// WebAssembly SIMD (simd128; the browser's module is built with it).
#[cfg(target_arch = "wasm32")]
pub(crate) struct Simd128;

#[cfg(target_arch = "wasm32")]
impl Dot for Simd128 {
    type Lanes = [std::arch::wasm32::v128; 8];

    #[inline(always)]
    fn zero() -> Self::Lanes {
        [std::arch::wasm32::f32x4_splat(0.0); 8]
    }

    #[inline(always)]
    fn add(lanes: &mut Self::Lanes, a: &[f32], b: &[f32]) {
        // SAFETY: only compiled into `#[target_feature(enable = "simd128")]` functions; a module
        // holding them does not load in an engine without SIMD.
        unsafe { add_simd128(lanes, a, b) }
    }

    #[inline(always)]
    fn total(lanes: Self::Lanes) -> f32 {
        use std::arch::wasm32::*;
        let quarter = |k: usize| f32x4_add(f32x4_add(lanes[k], lanes[k + 4]), f32x4_add(lanes[k + 2], lanes[k + 6]));
        let sum = f32x4_add(quarter(0), quarter(1));
        (f32x4_extract_lane::<0>(sum) + f32x4_extract_lane::<2>(sum))
            + (f32x4_extract_lane::<1>(sum) + f32x4_extract_lane::<3>(sum))
    }
}

#[cfg(target_arch = "wasm32")]
#[target_feature(enable = "simd128")]
#[inline]
unsafe fn add_simd128(lanes: &mut [std::arch::wasm32::v128; 8], a: &[f32], b: &[f32]) {
    use std::arch::wasm32::*;
    let len = a.len().min(b.len()) / 32 * 32;
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    while i < len {
        for (k, lane) in lanes.iter_mut().enumerate() {
            // SAFETY: i + 4k + 4 <= len: in bounds of both.
            let (x, y) = unsafe { (v128_load(pa.add(i + 4 * k).cast()), v128_load(pb.add(i + 4 * k).cast())) };
            *lane = f32x4_add(*lane, f32x4_mul(x, y));
        }
        i += 32;
    }
}
