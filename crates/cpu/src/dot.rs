//! `Σ a[i]·b[i]`, the one product every kernel ends in, written once per instruction set.
//!
//! Every build sums a row's whole 32s in 32 lanes (element `i` into lane `i mod 32`: four vectors
//! of eight on AVX2, eight of four in WebAssembly, independent additions that keep the adder
//! busy), adds the lanes pairwise once at the row's end, then the elements past the last whole 32
//! in order. AVX2 multiplies and adds in one rounding (FMA); the others round twice: results differ
//! in the last bits between builds, far inside the 1e-3 the references allow.

use nucleus_gguf::{GgmlType, dequantize_into};

/// A build of the dot product: sums kept in vector lanes across calls ([`Dot::add`]), added
/// together once at the end ([`Dot::total`]), so a row of several tiles pays for one reduction.
pub(crate) trait Dot {
    /// 32 partial sums in registers.
    type Lanes: Copy;
    fn zero() -> Self::Lanes;
    /// `lanes[i mod 32] += a[i]·b[i]` over the whole 32s of `a` and `b` (as long as each other, a
    /// multiple of 32).
    fn add(lanes: &mut Self::Lanes, a: &[f32], b: &[f32]);
    /// [`Dot::add`] for four rows `b` at once: each vector of `a` is loaded once for the four
    /// (a prefill tile's products: 1.25 loads per multiply-add instead of 2). The sums go into
    /// each row's lanes, in another order than `add`'s (they differ in the last bits).
    #[inline(always)]
    fn add4(lanes: &mut [Self::Lanes; 4], a: &[f32], b: [&[f32]; 4]) {
        for (lanes, b) in lanes.iter_mut().zip(b) {
            Self::add(lanes, a, b);
        }
    }
    /// [`Dot::add4`] for two rows `a` at once against the same four `b`: `lanes[4i + j] +=
    /// a[i]·b[j]`. Each vector of the eight inputs is loaded once for the products it is in (six
    /// loads for eight multiply-adds).
    #[inline(always)]
    fn add8(lanes: &mut [Self::Lanes; 8], a: [&[f32]; 2], b: [&[f32]; 4]) {
        for (lanes, a) in lanes.chunks_exact_mut(4).zip(a) {
            Self::add4(lanes.try_into().expect("four"), a, b);
        }
    }
    /// `Σ a·b[j]` over the whole 32s of one row `a` and four rows `b` (as [`Dot::add4`] sums
    /// them, then [`Dot::total`]).
    #[inline(always)]
    fn dot4(a: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
        let mut lanes = [Self::zero(); 4];
        Self::add4(&mut lanes, a, b);
        lanes.map(Self::total)
    }
    /// `sums[4i + j] = Σ a[i]·b[j]` for two rows `a` and four `b` (as [`Dot::add8`] sums them).
    #[inline(always)]
    fn dot8(a: [&[f32]; 2], b: [&[f32]; 4]) -> [f32; 8] {
        let mut lanes = [Self::zero(); 8];
        Self::add8(&mut lanes, a, b);
        lanes.map(Self::total)
    }
    /// [`Dot::dot8`] for four rows `a`: `sums[4i + j]`. Where a build has the registers for
    /// sixteen sums (AVX-512's 32), each vector of the eight inputs is loaded once for four
    /// multiply-adds; elsewhere two calls of `dot8`.
    #[inline(always)]
    fn dot16(a: [&[f32]; 4], b: [&[f32]; 4]) -> [f32; 16] {
        dot16_in_pairs::<Self>(a, b)
    }
    /// The lanes added pairwise.
    fn total(lanes: Self::Lanes) -> f32;
    /// The weights of `bytes` (whole blocks of `ggml_type`) into `out`, bit for bit as
    /// `nucleus_gguf::dequantize_into` writes them: the build's own way where it has one
    /// (`crate::dequant`).
    #[inline(always)]
    fn dequantize(ggml_type: GgmlType, bytes: &[u8], out: &mut [f32]) {
        dequantize_into(ggml_type, bytes, out);
    }
    /// `lanes[i] += ((nibble_i·d) + m)·x[i]` for one Q4_1 block (`d` its scale, `m` its minimum,
    /// the low nibbles of `qs` the values 0..16, the high ones 16..32): the products `add` makes
    /// of the block dequantized, without writing it out first.
    fn add_q4_1(lanes: &mut Self::Lanes, d: f32, m: f32, qs: &[u8; 16], x: &[f32]);
}

/// [`Dot::dot16`] as two calls of [`Dot::dot8`].
#[inline(always)]
fn dot16_in_pairs<D: Dot + ?Sized>(a: [&[f32]; 4], b: [&[f32]; 4]) -> [f32; 16] {
    let (first, second) = (D::dot8([a[0], a[1]], b), D::dot8([a[2], a[3]], b));
    std::array::from_fn(|k| if k < 8 { first[k] } else { second[k - 8] })
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
    fn add_q4_1(lanes: &mut Self::Lanes, d: f32, m: f32, qs: &[u8; 16], x: &[f32]) {
        for j in 0..16 {
            lanes[j] += ((qs[j] & 0x0F) as f32 * d + m) * x[j];
            lanes[j + 16] += ((qs[j] >> 4) as f32 * d + m) * x[j + 16];
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
    fn add4(lanes: &mut [Self::Lanes; 4], a: &[f32], b: [&[f32]; 4]) {
        unsafe { add4_avx2(lanes, a, b) }
    }

    #[inline(always)]
    fn add8(lanes: &mut [Self::Lanes; 8], a: [&[f32]; 2], b: [&[f32]; 4]) {
        unsafe { add8_avx2(lanes, a, b) }
    }

    /// With AVX-512 (its 32 registers for AVX2's vectors), sixteen sums in registers; otherwise
    /// two calls of `dot8`.
    #[inline(always)]
    fn dot16(a: [&[f32]; 4], b: [&[f32]; 4]) -> [f32; 16] {
        if crate::matmul::X86::chosen() == crate::matmul::X86::Avx512 {
            // SAFETY: the CPU has AVX-512 F and VL (`X86::chosen`).
            unsafe { dot16_avx512(a, b) }
        } else {
            dot16_in_pairs::<Self>(a, b)
        }
    }

    #[inline(always)]
    fn total(lanes: Self::Lanes) -> f32 {
        unsafe { total_avx2(lanes) }
    }

    #[inline(always)]
    fn dequantize(ggml_type: GgmlType, bytes: &[u8], out: &mut [f32]) {
        unsafe { crate::dequant::avx2(ggml_type, bytes, out) }
    }

    #[inline(always)]
    fn add_q4_1(lanes: &mut Self::Lanes, d: f32, m: f32, qs: &[u8; 16], x: &[f32]) {
        unsafe { add_q4_1_avx2(lanes, d, m, qs, x) }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn add_q4_1_avx2(lanes: &mut [std::arch::x86_64::__m256; 4], d: f32, m: f32, qs: &[u8; 16], x: &[f32]) {
    use std::arch::x86_64::*;
    assert!(x.len() >= 32);
    let (scale, min, low) = (_mm256_set1_ps(d), _mm256_set1_ps(m), _mm_set1_epi8(0x0F));
    // SAFETY: 16 bytes of `qs`.
    let bytes = unsafe { _mm_loadu_si128(qs.as_ptr().cast()) };
    let high = _mm_and_si128(_mm_srli_epi16(bytes, 4), low);
    let low = _mm_and_si128(bytes, low);
    // Values 0..8 and 8..16 from the low nibbles, 16..24 and 24..32 from the high ones.
    let nibbles = [low, _mm_srli_si128(low, 8), high, _mm_srli_si128(high, 8)];
    for (k, (lane, nibbles)) in lanes.iter_mut().zip(nibbles).enumerate() {
        let values = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(nibbles)), scale), min);
        // SAFETY: 8k + 8 <= 32 values of `x`.
        let xs = unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * k)) };
        *lane = _mm256_fmadd_ps(values, xs, *lane);
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

/// Four rows against one: per 8 values of `a` one load and four FMAs (the rows' values as memory
/// operands), into two accumulators per row (eight independent chains, nine registers), added
/// into the rows' lanes at the end.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn add4_avx2(lanes: &mut [[std::arch::x86_64::__m256; 4]; 4], a: &[f32], b: [&[f32]; 4]) {
    use std::arch::x86_64::*;
    let len = b.iter().fold(a.len(), |len, b| len.min(b.len())) / 32 * 32;
    let pa = a.as_ptr();
    let [p0, p1, p2, p3] = b.map(<[f32]>::as_ptr);
    // Named, so they stay in registers: row r's even and odd vectors of each 32.
    let zero = _mm256_setzero_ps();
    let (mut s00, mut s01, mut s10, mut s11, mut s20, mut s21, mut s30, mut s31) =
        (zero, zero, zero, zero, zero, zero, zero, zero);
    let mut i = 0;
    // SAFETY (every load): i + 16 <= len: in bounds of `a` and of every row of `b`.
    while i < len {
        let w = unsafe { _mm256_loadu_ps(pa.add(i)) };
        s00 = _mm256_fmadd_ps(w, unsafe { _mm256_loadu_ps(p0.add(i)) }, s00);
        s10 = _mm256_fmadd_ps(w, unsafe { _mm256_loadu_ps(p1.add(i)) }, s10);
        s20 = _mm256_fmadd_ps(w, unsafe { _mm256_loadu_ps(p2.add(i)) }, s20);
        s30 = _mm256_fmadd_ps(w, unsafe { _mm256_loadu_ps(p3.add(i)) }, s30);
        let w = unsafe { _mm256_loadu_ps(pa.add(i + 8)) };
        s01 = _mm256_fmadd_ps(w, unsafe { _mm256_loadu_ps(p0.add(i + 8)) }, s01);
        s11 = _mm256_fmadd_ps(w, unsafe { _mm256_loadu_ps(p1.add(i + 8)) }, s11);
        s21 = _mm256_fmadd_ps(w, unsafe { _mm256_loadu_ps(p2.add(i + 8)) }, s21);
        s31 = _mm256_fmadd_ps(w, unsafe { _mm256_loadu_ps(p3.add(i + 8)) }, s31);
        i += 16;
    }
    for (lanes, (even, odd)) in lanes.iter_mut().zip([(s00, s01), (s10, s11), (s20, s21), (s30, s31)]) {
        lanes[0] = _mm256_add_ps(lanes[0], even);
        lanes[1] = _mm256_add_ps(lanes[1], odd);
    }
}

/// Two rows against four: per 8 values, two loads of `a`, four of `b` and eight FMAs into eight
/// accumulators (eleven registers), added into the lanes at the end.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn add8_avx2(lanes: &mut [[std::arch::x86_64::__m256; 4]; 8], a: [&[f32]; 2], b: [&[f32]; 4]) {
    use std::arch::x86_64::*;
    let len = a.iter().chain(&b).fold(usize::MAX, |len, v| len.min(v.len())) / 32 * 32;
    let [a0, a1] = a.map(<[f32]>::as_ptr);
    let [b0, b1, b2, b3] = b.map(<[f32]>::as_ptr);
    let zero = _mm256_setzero_ps();
    let (mut s00, mut s01, mut s02, mut s03, mut s10, mut s11, mut s12, mut s13) =
        (zero, zero, zero, zero, zero, zero, zero, zero);
    let mut i = 0;
    // SAFETY (every load): i + 8 <= len: in bounds of every row.
    while i < len {
        let (x0, x1) = unsafe { (_mm256_loadu_ps(a0.add(i)), _mm256_loadu_ps(a1.add(i))) };
        let w = unsafe { _mm256_loadu_ps(b0.add(i)) };
        (s00, s10) = (_mm256_fmadd_ps(x0, w, s00), _mm256_fmadd_ps(x1, w, s10));
        let w = unsafe { _mm256_loadu_ps(b1.add(i)) };
        (s01, s11) = (_mm256_fmadd_ps(x0, w, s01), _mm256_fmadd_ps(x1, w, s11));
        let w = unsafe { _mm256_loadu_ps(b2.add(i)) };
        (s02, s12) = (_mm256_fmadd_ps(x0, w, s02), _mm256_fmadd_ps(x1, w, s12));
        let w = unsafe { _mm256_loadu_ps(b3.add(i)) };
        (s03, s13) = (_mm256_fmadd_ps(x0, w, s03), _mm256_fmadd_ps(x1, w, s13));
        i += 8;
    }
    for (lanes, sum) in lanes.iter_mut().zip([s00, s01, s02, s03, s10, s11, s12, s13]) {
        lanes[0] = _mm256_add_ps(lanes[0], sum);
    }
}

/// Four rows against four: per 8 values four loads of `a`, four of `b` and sixteen FMAs into
/// sixteen accumulators (24 of AVX-512's 32 registers, where AVX2's 16 held `add8`'s eight): twice
/// the independent sums to hide the FMA's latency behind, half the loads a multiply-add. Each sum
/// added across its lanes once, at the end of the rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
unsafe fn dot16_avx512(a: [&[f32]; 4], b: [&[f32]; 4]) -> [f32; 16] {
    use std::arch::x86_64::*;
    let len = a.iter().chain(&b).fold(usize::MAX, |len, v| len.min(v.len())) / 32 * 32;
    let a = a.map(<[f32]>::as_ptr);
    let b = b.map(<[f32]>::as_ptr);
    let mut sums = [_mm256_setzero_ps(); 16];
    let mut i = 0;
    // SAFETY (every load): i + 8 <= len: in bounds of every row.
    while i < len {
        let x = a.map(|a| unsafe { _mm256_loadu_ps(a.add(i)) });
        for (j, b) in b.iter().enumerate() {
            let w = unsafe { _mm256_loadu_ps(b.add(i)) };
            for (r, x) in x.iter().enumerate() {
                sums[4 * r + j] = _mm256_fmadd_ps(*x, w, sums[4 * r + j]);
            }
        }
        i += 8;
    }
    // A loop, not `map`: a closure does not take this function's target features, and its calls
    // of `total_avx2` stayed out of line (a third of the time).
    let (zero, mut totals) = (_mm256_setzero_ps(), [0f32; 16]);
    for (total, sum) in totals.iter_mut().zip(sums) {
        // SAFETY: AVX2 and FMA, which this function has.
        *total = unsafe { total_avx2([sum, zero, zero, zero]) };
    }
    totals
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

/// `c + a·b` in four lanes: one fused instruction in a module built with relaxed SIMD (`f32x4.
/// relaxed_madd`, which an engine may round once or twice: within the references' tolerance
/// either way), a multiply then an add without it.
#[cfg(target_arch = "wasm32")]
#[inline(always)]
pub(crate) fn madd(
    a: std::arch::wasm32::v128,
    b: std::arch::wasm32::v128,
    c: std::arch::wasm32::v128,
) -> std::arch::wasm32::v128 {
    #[cfg(target_feature = "relaxed-simd")]
    {
        std::arch::wasm32::f32x4_relaxed_madd(a, b, c)
    }
    #[cfg(not(target_feature = "relaxed-simd"))]
    {
        std::arch::wasm32::f32x4_add(c, std::arch::wasm32::f32x4_mul(a, b))
    }
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
    fn add4(lanes: &mut [Self::Lanes; 4], a: &[f32], b: [&[f32]; 4]) {
        // SAFETY: as `add`.
        unsafe { add4_simd128(lanes, a, b) }
    }

    #[inline(always)]
    fn add8(lanes: &mut [Self::Lanes; 8], a: [&[f32]; 2], b: [&[f32]; 4]) {
        // SAFETY: as `add`.
        unsafe { add8_simd128(lanes, a, b) }
    }

    #[inline(always)]
    fn add_q4_1(lanes: &mut Self::Lanes, d: f32, m: f32, qs: &[u8; 16], x: &[f32]) {
        // SAFETY: as `add`.
        unsafe { add_q4_1_simd128(lanes, d, m, qs, x) }
    }

    #[inline(always)]
    fn total(lanes: Self::Lanes) -> f32 {
        use std::arch::wasm32::*;
        let quarter = |k: usize| f32x4_add(f32x4_add(lanes[k], lanes[k + 4]), f32x4_add(lanes[k + 2], lanes[k + 6]));
        let sum = f32x4_add(quarter(0), quarter(1));
        (f32x4_extract_lane::<0>(sum) + f32x4_extract_lane::<2>(sum))
            + (f32x4_extract_lane::<1>(sum) + f32x4_extract_lane::<3>(sum))
    }

    #[inline(always)]
    fn dequantize(ggml_type: GgmlType, bytes: &[u8], out: &mut [f32]) {
        crate::dequant::simd128(ggml_type, bytes, out);
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
            *lane = madd(x, y, *lane);
        }
        i += 32;
    }
}

/// Four rows against one: per 4 values of `a` one load and four multiply-adds, into two
/// accumulators per row, added into the rows' lanes at the end.
#[cfg(target_arch = "wasm32")]
#[target_feature(enable = "simd128")]
#[inline]
unsafe fn add4_simd128(lanes: &mut [[std::arch::wasm32::v128; 8]; 4], a: &[f32], b: [&[f32]; 4]) {
    use std::arch::wasm32::*;
    let len = b.iter().fold(a.len(), |len, b| len.min(b.len())) / 32 * 32;
    let pa = a.as_ptr();
    let pb = b.map(<[f32]>::as_ptr);
    let mut sums = [[f32x4_splat(0.0); 2]; 4];
    let mut i = 0;
    while i < len {
        for k in 0..8 {
            // SAFETY: i + 4k + 4 <= len: in bounds of `a` and of every row of `b`.
            let w = unsafe { v128_load(pa.add(i + 4 * k).cast()) };
            for (sums, pb) in sums.iter_mut().zip(pb) {
                let x = unsafe { v128_load(pb.add(i + 4 * k).cast()) };
                sums[k & 1] = madd(w, x, sums[k & 1]);
            }
        }
        i += 32;
    }
    for (lanes, sums) in lanes.iter_mut().zip(sums) {
        lanes[0] = f32x4_add(lanes[0], sums[0]);
        lanes[1] = f32x4_add(lanes[1], sums[1]);
    }
}

/// Two rows against four: per 4 values, two loads of `a`, four of `b` and eight multiply-adds
/// into eight accumulators, added into the lanes at the end. A function of its own, not inlined
/// into the prefill's loops: V8 allocates registers per function, and inlined there the eight
/// accumulators spilled; alone, a prefill's products ran 1.5x as fast (Q4_K, 3,584 x 1,024, 64
/// rows, one thread in Node 20's V8: 13.9 -> 20.6 GMAC/s with relaxed SIMD, 13.4 -> 18.0
/// without; ARCHITECTURE.md, "A hot loop is a function of its own in wasm").
#[cfg(target_arch = "wasm32")]
#[target_feature(enable = "simd128")]
#[inline(never)]
unsafe fn add8_simd128(lanes: &mut [[std::arch::wasm32::v128; 8]; 8], a: [&[f32]; 2], b: [&[f32]; 4]) {
    use std::arch::wasm32::*;
    let len = a.iter().chain(&b).fold(usize::MAX, |len, v| len.min(v.len())) / 32 * 32;
    let [a0, a1] = a.map(<[f32]>::as_ptr);
    let pb = b.map(<[f32]>::as_ptr);
    let mut sums = [[f32x4_splat(0.0); 4]; 2];
    let mut i = 0;
    while i < len {
        // SAFETY: i + 4 <= len: in bounds of every row.
        let (x0, x1) = unsafe { (v128_load(a0.add(i).cast()), v128_load(a1.add(i).cast())) };
        for (j, pb) in pb.iter().enumerate() {
            let w = unsafe { v128_load(pb.add(i).cast()) };
            sums[0][j] = madd(x0, w, sums[0][j]);
            sums[1][j] = madd(x1, w, sums[1][j]);
        }
        i += 4;
    }
    for (lanes, sum) in lanes.iter_mut().zip(sums.into_iter().flatten()) {
        lanes[0] = f32x4_add(lanes[0], sum);
    }
}

#[cfg(target_arch = "wasm32")]
#[target_feature(enable = "simd128")]
#[inline]
unsafe fn add_q4_1_simd128(lanes: &mut [std::arch::wasm32::v128; 8], d: f32, m: f32, qs: &[u8; 16], x: &[f32]) {
    use std::arch::wasm32::*;
    assert!(x.len() >= 32);
    let (scale, min) = (f32x4_splat(d), f32x4_splat(m));
    // SAFETY: 16 bytes of `qs`.
    let bytes = unsafe { v128_load(qs.as_ptr().cast()) };
    // Values 0..16 from the low nibbles, 16..32 from the high ones.
    for (half, nibbles) in [v128_and(bytes, u8x16_splat(0x0F)), u8x16_shr(bytes, 4)].into_iter().enumerate() {
        let shorts = [u16x8_extend_low_u8x16(nibbles), u16x8_extend_high_u8x16(nibbles)];
        for (j, &short) in shorts.iter().enumerate() {
            for (i, ints) in [u32x4_extend_low_u16x8(short), u32x4_extend_high_u16x8(short)].into_iter().enumerate() {
                let k = 4 * half + 2 * j + i;
                // SAFETY: 4k + 4 <= 32 values of `x`.
                let xs = unsafe { v128_load(x.as_ptr().add(4 * k).cast()) };
                let values = madd(f32x4_convert_i32x4(ints), scale, min);
                lanes[k] = madd(values, xs, lanes[k]);
            }
        }
    }
}

/// `out[g·width + i] += Σ_t weights[g·n + t]·rows[t·stride + i]` for each of the `out.len() /
/// width` rows `g` of `out` (`n = weights.len()` over their count): `n` rows of `rows` as long as
/// `width`, `stride` apart, weighed by each row's own `n` weights and added (every query head of an
/// attention's KV head over that head's values, `ops::KvRows`). Four rows at a time, each output
/// row in turn `(w₀·a + w₁·b) + (w₂·c + w₃·d)` (read and written once for the four), then the rest
/// one at a time: the four rows come from memory once for all the outputs (the later ones read
/// them from the core's cache). A multiply and an add never fused, so every build gives the same
/// bits. Inlined into its caller, which is built for the widest vectors the CPU has
/// (`ops::weigh_chunk`): as plain Rust in a function built for none (SSE2's four lanes natively)
/// this loop was the larger part of a long context's attention.
///
/// # Panics
/// When `rows` is shorter than the weights need.
#[inline(always)]
pub(crate) fn weighted_rows(weights: &[f32], rows: &[f32], stride: usize, width: usize, out: &mut [f32]) {
    let outputs = out.len() / width;
    let n = weights.len() / outputs;
    if let Some(last) = n.checked_sub(1) {
        assert!(rows.len() >= last * stride + width, "{n} rows of {width} every {stride} in {}", rows.len());
    }
    let row = |t: usize| &rows[t * stride..t * stride + width];
    let done = n / 4 * 4;
    for four in (0..done).step_by(4) {
        let (a, b, c, d) = (row(four), row(four + 1), row(four + 2), row(four + 3));
        for (weights, out) in weights.chunks_exact(n).zip(out.chunks_exact_mut(width)) {
            let w = &weights[four..four + 4];
            for ((((o, a), b), c), d) in out.iter_mut().zip(a).zip(b).zip(c).zip(d) {
                *o += (w[0] * a + w[1] * b) + (w[2] * c + w[3] * d);
            }
        }
    }
    for t in done..n {
        for (weights, out) in weights.chunks_exact(n).zip(out.chunks_exact_mut(width)) {
            for (o, &v) in out.iter_mut().zip(row(t)) {
                *o += weights[t] * v;
            }
        }
    }
}

/// `out[g·n + j] = Σ a[g·width + i]·b[j·stride + i]`: each of the `a.len() / width` rows of `a`
/// against `n` rows of `b` as long as it, `stride` apart (`n = out.len()` over their count: every
/// query head of an attention's KV head against that head's keys, `ops::KvRows`; a Gated DeltaNet
/// head's query against its keys). Four rows of `b` at a time, against the rows of `a` four at a
/// time where there are four ([`Dot::dot16`]), then two ([`Dot::dot8`]), then one
/// ([`Dot::add4`]): each vector of the four rows comes from memory once for all of `a`. The row's
/// last few past the whole 32s in order; the widest build the CPU has. One row of `a` sums as
/// [`Dot::add4`] does; two or four, as `dot8` (each sum in other lanes: they differ in the last
/// bits).
///
/// # Panics
/// When `b` is shorter than the rows need.
pub(crate) fn strided_dots(a: &[f32], width: usize, b: &[f32], stride: usize, out: &mut [f32]) {
    let n = out.len() / (a.len() / width).max(1);
    if let Some(last) = n.checked_sub(1) {
        assert!(b.len() >= last * stride + width, "{n} rows of {width} every {stride} in {}", b.len());
    }
    #[cfg(target_arch = "x86_64")]
    {
        if crate::matmul::has_avx2() {
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            return unsafe { strided_dots_avx2(a, width, b, stride, out) };
        }
    }
    #[cfg(target_arch = "wasm32")]
    {
        // SAFETY: as `matmul::rows_simd128`'s: a module with SIMD loads only where SIMD runs.
        return unsafe { strided_dots_simd128(a, width, b, stride, out) };
    }
    #[allow(unreachable_code)]
    strided_dots_with::<Portable>(a, width, b, stride, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn strided_dots_avx2(a: &[f32], width: usize, b: &[f32], stride: usize, out: &mut [f32]) {
    strided_dots_with::<Avx2>(a, width, b, stride, out);
}

#[cfg(target_arch = "wasm32")]
#[target_feature(enable = "simd128")]
unsafe fn strided_dots_simd128(a: &[f32], width: usize, b: &[f32], stride: usize, out: &mut [f32]) {
    strided_dots_with::<Simd128>(a, width, b, stride, out);
}

/// [`strided_dots`]' one body, compiled into each build.
#[inline(always)]
fn strided_dots_with<D: Dot>(a: &[f32], width: usize, b: &[f32], stride: usize, out: &mut [f32]) {
    let heads = a.len() / width;
    let n = out.len() / heads;
    let whole = width / 32 * 32;
    let query = |g: usize| a[g * width..(g + 1) * width].split_at(whole);
    let row = |j: usize| b[j * stride..j * stride + width].split_at(whole);
    let done = n / 4 * 4;
    for four in (0..done).step_by(4) {
        let rows: [(&[f32], &[f32]); 4] = std::array::from_fn(|k| row(four + k));
        let keys = rows.map(|(whole, _)| whole);
        let mut g = 0;
        while g < heads {
            // Query rows `g..g + taken` against the four rows: their whole 32s' sums, `4i + k`.
            let taken = match heads - g {
                4.. => 4,
                2 | 3 => 2,
                _ => 1,
            };
            let mut sums = [0.0; 16];
            match taken {
                4 => sums = D::dot16(std::array::from_fn(|i| query(g + i).0), keys),
                2 => sums[..8].copy_from_slice(&D::dot8([query(g).0, query(g + 1).0], keys)),
                _ => sums[..4].copy_from_slice(&D::dot4(query(g).0, keys)),
            }
            for i in 0..taken {
                let (_, a_tail) = query(g + i);
                for (k, (_, rest)) in rows.iter().enumerate() {
                    out[(g + i) * n + four + k] = sums[4 * i + k] + tail(a_tail, rest);
                }
            }
            g += taken;
        }
    }
    for j in done..n {
        let (whole, rest) = row(j);
        for g in 0..heads {
            let (a, a_tail) = query(g);
            let mut lanes = D::zero();
            D::add(&mut lanes, a, whole);
            out[g * n + j] = D::total(lanes) + tail(a_tail, rest);
        }
    }
}

/// `Σ a·b` in order: a row's last few values past its whole 32s.
#[inline(always)]
fn tail(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0.0, |sum, (x, y)| sum + x * y)
}
