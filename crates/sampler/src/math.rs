//! Portable numerics: `exp`, `ln`, softmax, entropy, partial top-k selection and the
//! categorical draw.
//!
//! # Why the crate has its own `exp` and `ln`
//!
//! `f64::exp` and `f64::ln` call the platform's maths library (glibc natively, a Rust port of
//! musl on `wasm32-unknown-unknown`), and those are allowed to differ in the last bit. A one-bit
//! difference in a probability can move a top-p cut-off or a draw that lands on a boundary, and
//! then the same seed gives different tokens on different platforms. [`exp`] and [`ln`] here use
//! only IEEE-754 `+ - * /` (which every platform rounds identically; Rust never fuses them into
//! FMA behind your back) and exact bit manipulation, after the classic fdlibm algorithms, so
//! every platform computes bit-identical values. They are accurate to within one unit in the
//! last place (tested against the standard library).
//!
//! Sums are always taken in a fixed, documented order, never in one that depends on a sort's
//! internals or the compiler: a sum over a whole row (its normaliser, a temperature
//! distribution's total) in eight running sums ([`lane_sum`]), which vectorises, in the widest
//! registers the processor has ([`widest!`]); a sum the draw walks, in token-id order.

// The polynomial coefficients below are the published fdlibm constants, written with all
// their digits; they parse to the intended doubles (the accuracy tests check the results).
#![allow(clippy::excessive_precision)]

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::hint::select_unpredictable;

use crate::error::SamplerError;

const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-1;
const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;
const INV_LN2: f64 = std::f64::consts::LOG2_E;
const HALF_LN2: f64 = std::f64::consts::LN_2 * 0.5;

const EXP_P1: f64 = 1.666_666_666_666_660_190_37e-1;
const EXP_P2: f64 = -2.777_777_777_701_559_338_42e-3;
const EXP_P3: f64 = 6.613_756_321_437_934_361_17e-5;
const EXP_P4: f64 = -1.653_390_220_546_525_153_90e-6;
const EXP_P5: f64 = 4.138_136_797_057_238_460_39e-8;
/// Above this `exp` overflows to +inf.
const EXP_OVERFLOW: f64 = 7.097_827_128_933_839_730_96e2;
/// Below this `exp` underflows to 0.
const EXP_UNDERFLOW: f64 = -7.451_332_191_019_411_084_20e2;
/// 2^-28: below this in magnitude, `exp(x)` rounds to `1 + x`.
const EXP_TINY: f64 = 3.725_290_298_461_914e-9;

const LG1: f64 = 6.666_666_666_666_735_130e-1;
const LG2: f64 = 3.999_999_999_940_941_908e-1;
const LG3: f64 = 2.857_142_874_366_239_149e-1;
const LG4: f64 = 2.222_219_843_214_978_396e-1;
const LG5: f64 = 1.818_357_216_161_805_012e-1;
const LG6: f64 = 1.531_383_769_920_937_332e-1;
const LG7: f64 = 1.479_819_860_511_658_591e-1;
/// 2^54, used to bring subnormal inputs of `ln` into the normal range.
const TWO_POW_54: f64 = 18_014_398_509_481_984.0;

/// `1.5 · 2^52`: a double below 2^51 in magnitude plus this is that double rounded to an integer
/// (ties to even), held in the sum's low mantissa bits; minus it again, the integer as a double.
const ROUNDING: f64 = 6_755_399_441_055_744.0;
/// 2^-1000, the second factor of a result that would be subnormal.
const TWO_POW_MINUS_1000: f64 = 9.332_636_185_032_188_8e-302;

/// 2^k for an integral `k` in the normal exponent range [-1022, 1023] (as a double), built exactly
/// from its bits: the integer read from [`ROUNDING`]'s low bits, so no conversion.
#[inline(always)]
fn pow2(k: f64) -> f64 {
    let k_bits = (k + ROUNDING).to_bits().wrapping_sub(ROUNDING.to_bits());
    f64::from_bits(k_bits.wrapping_add(1023) << 52)
}

/// The natural exponential, computed bit-identically on every platform.
///
/// fdlibm's `e_exp.c`: reduce `x = k·ln2 + r` with `|r| <= ln2/2`, approximate `exp(r)` by a
/// rational function, scale by `2^k` (in two factors where the result is subnormal). Error below
/// 1 ulp. Written without branches, every case computed and one chosen, and `k` found by exact
/// arithmetic in doubles rather than a conversion to an integer, so that a loop over a row of
/// exponentials is vectorised ([`LogSoftmax::of`]: 262,144 of them a Gemma 3 step). The cases and
/// their values are fdlibm's, bit for bit (tested against its branching form).
#[inline(always)]
pub fn exp(x: f64) -> f64 {
    exp_of::<false>(x)
}

/// [`exp`] of an `x` that is not above 0 and not NaN (a logit less the row's largest), the same
/// bits with the cases that cannot arise left out: a fifth fewer operations a lane.
#[inline(always)]
pub(crate) fn exp_nonpositive(x: f64) -> f64 {
    debug_assert!(x <= 0.0, "exp_nonpositive({x})");
    exp_of::<true>(x)
}

#[inline(always)]
fn exp_of<const NONPOSITIVE: bool>(x: f64) -> f64 {
    // Out of range the result is chosen below; keep k's arithmetic finite meanwhile.
    let clamped = if NONPOSITIVE {
        select_unpredictable(x < EXP_UNDERFLOW, EXP_UNDERFLOW, x)
    } else {
        x.clamp(EXP_UNDERFLOW, EXP_OVERFLOW)
    };
    // fdlibm's k: x/ln2 + 1/2 (- 1/2 below zero) truncated towards zero, 0 where |x| <= ln2/2.
    let below_zero = NONPOSITIVE || clamped < 0.0;
    let scaled = INV_LN2 * clamped + if below_zero { -0.5 } else { 0.5 };
    let nearest = (scaled + ROUNDING) - ROUNDING;
    let towards_zero = if below_zero {
        if nearest < scaled { nearest + 1.0 } else { nearest }
    } else if nearest > scaled {
        nearest - 1.0
    } else {
        nearest
    };
    let k = if clamped.abs() <= HALF_LN2 { 0.0 } else { towards_zero };
    let hi = clamped - k * LN2_HI;
    let lo = k * LN2_LO;
    let r = hi - lo;
    let rr = r * r;
    let c = r - rr * (EXP_P1 + rr * (EXP_P2 + rr * (EXP_P3 + rr * (EXP_P4 + rr * EXP_P5))));
    let y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
    // y·2^k, rounded once: as 2·2^1023 above the exponent range, as 2^(k+1000)·2^-1000 below it.
    let (first, second) = if !NONPOSITIVE && k > 1023.0 {
        (1023.0, 2.0)
    } else if k >= -1021.0 {
        (k, 1.0)
    } else {
        (k + 1000.0, TWO_POW_MINUS_1000)
    };
    let result = y * pow2(first) * second;
    if !NONPOSITIVE && x.is_nan() {
        x
    } else if !NONPOSITIVE && x > EXP_OVERFLOW {
        f64::INFINITY
    } else {
        // Selects, not branches: the compiler would otherwise skip the work for an underflow.
        select_unpredictable(x < EXP_UNDERFLOW, 0.0, select_unpredictable(x.abs() < EXP_TINY, 1.0 + x, result))
    }
}

/// How many running sums [`lane_sum`] keeps.
const SUM_LANES: usize = 8;

/// `Σ term(item)` over `items`, in the one order every row-long sum of the crate takes: item `i`
/// into running sum `i mod 8`, the eight joined pairwise ([`join_lanes`]). The same on every
/// platform (no reassociation is left to the compiler), and a loop it can vectorise: one running
/// sum in id order would wait on each addition. In a [`widest`] function for the wider registers.
#[inline(always)]
pub(crate) fn lane_sum<T: Copy>(items: &[T], term: impl Fn(T) -> f64) -> f64 {
    let mut sums = [0.0f64; SUM_LANES];
    let chunks = items.chunks_exact(SUM_LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (sum, &item) in sums.iter_mut().zip(chunk) {
            *sum += term(item);
        }
    }
    for (sum, &item) in sums.iter_mut().zip(tail) {
        *sum += term(item);
    }
    join_lanes(sums)
}

/// The running sums of [`lane_sum`]'s order joined: `((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7))`.
#[inline(always)]
fn join_lanes(sums: [f64; SUM_LANES]) -> f64 {
    ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]))
}

/// Defines a function whose body is compiled three times, for the widest vector registers the
/// processor has (x86-64: AVX-512F or AVX2, found at run time) and as the crate is built, which
/// every other platform runs. The same operations in the same order round the same in any width,
/// and Rust never fuses a multiply and an add, so the bits do not depend on which ran (the wasm
/// probe and the tests check). The body, not a closure passed in, is what gets the registers: a
/// closure made outside a `#[target_feature]` function is compiled without them.
macro_rules! widest {
    ($(#[$doc:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty $body:block) => {
        $(#[$doc])*
        $vis fn $name($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                fn avx512($($arg: $ty),*) -> $ret $body
                #[target_feature(enable = "avx2")]
                fn avx2($($arg: $ty),*) -> $ret $body
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the processor has AVX-512F.
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the processor has AVX2.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body
        }
    };
}

widest! {
    /// `Σ exp(z - max)` over a row of logits, as [`lane_sum`] sums. On a 2-core AVX-512 Xeon,
    /// 262,144 of them: 4.1 ms one at a time (fdlibm's branching `exp` in id order), 0.9–1.05 ms
    /// eight at a time (ARCHITECTURE.md, "A row's exponentials eight at a time").
    fn exp_sum(logits: &[f32], max: f64) -> f64 {
        lane_sum(logits, |z| exp_nonpositive(f64::from(z) - max))
    }
}

widest! {
    /// A temperature distribution's weights: `weights[i] = exp((values[i] - max) / temperature)`
    /// (0 where the value is -inf). Returns their sum and `Σ x·w` over the weights that are not 0
    /// (`x` the exponent: the entropy's term), both summed in [`lane_sum`]'s order.
    pub(crate) fn temperature_weights(
        values: &[f64],
        max: f64,
        temperature: f64,
        weights: &mut [f64],
    ) -> (f64, f64) {
        assert_eq!(values.len(), weights.len(), "a weight for each value");
        let mut totals = [0.0f64; SUM_LANES];
        let mut weighted = [0.0f64; SUM_LANES];
        let lane = |value: f64, weight: &mut f64, total: &mut f64, weighted: &mut f64| {
            let x = (value - max) / temperature;
            let w = exp_nonpositive(x);
            *weighted += if w > 0.0 { w * x } else { 0.0 };
            *total += w;
            *weight = w;
        };
        let mut chunks = weights.chunks_exact_mut(SUM_LANES);
        let mut values = values.chunks_exact(SUM_LANES);
        for (weights, values) in (&mut chunks).zip(&mut values) {
            let lanes = weights.iter_mut().zip(values).zip(&mut totals).zip(&mut weighted);
            for (((weight, &value), total), weighted) in lanes {
                lane(value, weight, total, weighted);
            }
        }
        let tail = chunks.into_remainder().iter_mut().zip(values.remainder());
        for (((weight, &value), total), weighted) in tail.zip(&mut totals).zip(&mut weighted) {
            lane(value, weight, total, weighted);
        }
        (join_lanes(totals), join_lanes(weighted))
    }
}

/// The natural logarithm, computed bit-identically on every platform.
///
/// Same algorithm as fdlibm's `e_log.c` (as in musl): write `x = 2^k·(1+f)` with
/// `sqrt(2)/2 < 1+f < sqrt(2)`, approximate `log(1+f)` by a polynomial in `s = f/(2+f)`.
/// `ln(0) = -inf`, `ln(negative) = NaN`, `ln(+inf) = +inf`. Error below 1 ulp.
pub fn ln(x: f64) -> f64 {
    let mut bits = x.to_bits();
    let mut high = (bits >> 32) as u32;
    let mut k: i32 = 0;
    if high < 0x0010_0000 || (high >> 31) != 0 {
        if bits << 1 == 0 {
            return f64::NEG_INFINITY;
        }
        if high >> 31 != 0 {
            return f64::NAN;
        }
        // Subnormal: scale up into the normal range.
        k -= 54;
        bits = (x * TWO_POW_54).to_bits();
        high = (bits >> 32) as u32;
    } else if high >= 0x7ff0_0000 {
        return x;
    } else if high == 0x3ff0_0000 && bits << 32 == 0 {
        return 0.0;
    }
    // Reduce x into [sqrt(2)/2, sqrt(2)].
    high = high.wrapping_add(0x3ff0_0000 - 0x3fe6_a09e);
    k += (high >> 20) as i32 - 0x3ff;
    high = (high & 0x000f_ffff) + 0x3fe6_a09e;
    bits = (u64::from(high) << 32) | (bits & 0xffff_ffff);
    let reduced = f64::from_bits(bits);

    let f = reduced - 1.0;
    let half_f_squared = 0.5 * f * f;
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (LG2 + w * (LG4 + w * LG6));
    let t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)));
    let r = t2 + t1;
    let dk = f64::from(k);
    s * (half_f_squared + r) + dk * LN2_LO - half_f_squared + f + dk * LN2_HI
}

/// `base^n` by binary exponentiation with a fixed sequence of multiplications (portable, unlike
/// `powi`, whose implementation is up to the compiler).
pub fn powi_portable(base: f64, n: u32) -> f64 {
    let mut result = 1.0;
    let mut factor = base;
    let mut n = n;
    while n > 0 {
        if n & 1 == 1 {
            result *= factor;
        }
        n >>= 1;
        if n > 0 {
            factor *= factor;
        }
    }
    result
}

/// Checks that `logits` is non-empty and holds only finite values or -inf.
pub fn validate_logits(logits: &[f32]) -> Result<(), SamplerError> {
    if logits.is_empty() {
        return Err(SamplerError::EmptyLogits);
    }
    match first_not_below(logits, f32::INFINITY) {
        Some(id) => Err(SamplerError::InvalidLogit { id: id as u32, value: f64::from(logits[id]) }),
        None => Ok(()),
    }
}

/// The first index whose value is not below `limit` (NaN is not), if any: a check over a whole
/// row in blocks the compiler vectorises (no exit per value), and only a block that fails walked
/// again.
pub(crate) fn first_not_below<T: Copy + PartialOrd>(values: &[T], limit: T) -> Option<usize> {
    const BLOCK: usize = 1024;
    values.chunks(BLOCK).enumerate().find_map(|(block, chunk)| {
        let all_below = chunk.iter().fold(true, |below, &value| below & (value < limit));
        if all_below {
            None
        } else {
            chunk
                .iter()
                .position(|value| value.partial_cmp(&limit) != Some(Ordering::Less))
                .map(|at| block * BLOCK + at)
        }
    })
}

/// The largest of `values` (finite or -inf, no NaN) and the first index holding it: [`lane_max`],
/// then the first index equal to it.
pub(crate) fn argmax(values: &[f64]) -> (f64, usize) {
    let max = lane_max(values, f64::NEG_INFINITY);
    (max, values.iter().position(|&value| value == max).unwrap_or(0))
}

/// The largest of `values` (no NaN; `lowest` when there are none), in [`lane_sum`]'s eight
/// running lanes: vectorised, where a fold of `max` is not in wasm (its `max` must order NaN, and
/// was a call per value for the normaliser's 262,144 logits).
fn lane_max<T: Copy + PartialOrd>(values: &[T], lowest: T) -> T {
    let mut lanes = [lowest; SUM_LANES];
    let chunks = values.chunks_exact(SUM_LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (lane, &value) in lanes.iter_mut().zip(chunk) {
            *lane = if value > *lane { value } else { *lane };
        }
    }
    for (lane, &value) in lanes.iter_mut().zip(tail) {
        *lane = if value > *lane { value } else { *lane };
    }
    lanes.into_iter().fold(lowest, |max, lane| if lane > max { lane } else { max })
}

/// The softmax of `logits` (finite or -inf) in f64: `exp(z_i - max) / sum`, summed as [`lane_sum`]
/// does.
///
/// Errors on empty input, NaN or +inf, and when every logit is -inf.
pub fn softmax(logits: &[f32]) -> Result<Vec<f64>, SamplerError> {
    let norm = LogSoftmax::of(logits)?;
    Ok(logits.iter().map(|&z| exp(norm.at(z))).collect())
}

/// The log-softmax of `logits` (finite or -inf) in f64: `z_i - max - ln(sum exp(z_j - max))`.
///
/// This is what [`crate::beam`] wants per live beam. Same errors as [`softmax`].
pub fn log_softmax(logits: &[f32]) -> Result<Vec<f64>, SamplerError> {
    let norm = LogSoftmax::of(logits)?;
    Ok(logits.iter().map(|&z| norm.at(z)).collect())
}

/// What the log-softmax of a row needs besides a logit: its largest logit and `ln(sum exp(z_j -
/// max))`, summed as [`lane_sum`] does. [`LogSoftmax::at`] gives any entry of [`log_softmax`], bit
/// for bit, without a row of f64s: a decode step wants a handful of them from a row of up to
/// 262,144.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogSoftmax {
    max: f64,
    log_norm: f64,
}

impl LogSoftmax {
    /// The row's normaliser. Same errors as [`softmax`].
    pub fn of(logits: &[f32]) -> Result<Self, SamplerError> {
        validate_logits(logits)?;
        let max = lane_max(logits, f32::NEG_INFINITY);
        if max == f32::NEG_INFINITY {
            return Err(SamplerError::AllTokensExcluded);
        }
        let max = f64::from(max);
        let sum = exp_sum(logits, max);
        Ok(Self { max, log_norm: ln(sum) })
    }

    /// The log-probability of the entry whose logit is `logit`.
    pub fn at(&self, logit: f32) -> f64 {
        (f64::from(logit) - self.max) - self.log_norm
    }
}

/// Shannon entropy in nats, `-sum p ln p` over the entries with `p > 0`, summed in index order.
pub fn entropy(probs: &[f64]) -> f64 {
    let h: f64 = probs.iter().filter(|&&p| p > 0.0).map(|&p| -p * ln(p)).sum();
    h.max(0.0)
}

/// Makes `items[..n]` hold the `n` first items under `cmp`, in order, assuming `items[..sorted]`
/// already do. Uses `select_nth_unstable_by` on the unsorted tail and sorts only the new part.
/// Returns the new sorted length, `min(n, items.len())` (or `sorted` if that is larger).
pub(crate) fn ensure_sorted_prefix<T, F>(items: &mut [T], sorted: usize, n: usize, cmp: &mut F) -> usize
where
    F: FnMut(&T, &T) -> Ordering,
{
    let n = n.min(items.len());
    if n <= sorted {
        return sorted;
    }
    let tail = &mut items[sorted..];
    let want = n - sorted;
    if want < tail.len() {
        tail.select_nth_unstable_by(want - 1, &mut *cmp);
    }
    tail[..want].sort_unstable_by(&mut *cmp);
    n
}

/// The smallest `n >= 1` such that the first `n` items under `cmp` carry at least `mass` of
/// `total` (`cumulative / total >= mass`, the cumulative summed in that order), or `None` if no
/// prefix does (then all of them are sorted). On return `items[..n]` are those items, sorted.
///
/// It never sorts more than it needs: it selects and sorts a prefix of 64 items, then grows the
/// prefix four-fold at a time while the mass is not reached (a flat tail can need thousands).
pub(crate) fn smallest_prefix_with_mass<T, F, W>(
    items: &mut [T],
    mut sorted: usize,
    mut cmp: F,
    weight: W,
    total: f64,
    mass: f64,
) -> Option<usize>
where
    F: FnMut(&T, &T) -> Ordering,
    W: Fn(&T) -> f64,
{
    let mut cumulative = 0.0;
    let mut chunk = 64;
    let mut i = 0;
    while i < items.len() {
        if i == sorted {
            sorted = ensure_sorted_prefix(items, sorted, sorted + chunk, &mut cmp);
            chunk = chunk.saturating_mul(4);
        }
        cumulative += weight(&items[i]);
        i += 1;
        if cumulative / total >= mass {
            return Some(i);
        }
    }
    None
}

/// A weight top-p's prefix cannot end above: the largest power of two such that the weights at
/// or above it (of `weights`, each in `[0, 1]`) carry at least `mass` of `total`, summed by
/// binary exponent, largest first; `None` when rounding leaves every exponent's sum short. One
/// pass over the row, which spares top-p listing and selecting among a 262,144-token vocabulary
/// for a prefix most often far shorter: the caller lists the tokens at or above the floor's
/// logit, checks that their mass in the processed order reaches `mass` too, and lists the rest
/// only where it does not.
pub(crate) fn nucleus_floor(weights: &[f64], total: f64, mass: f64) -> Option<f64> {
    const EXPONENTS: usize = 1 << 11;
    let mut by_exponent = [0.0f64; EXPONENTS];
    for &weight in weights {
        by_exponent[(weight.to_bits() >> 52) as usize % EXPONENTS] += weight;
    }
    let mut cumulative = 0.0;
    // Down from 2^0 (no weight is above 1), not into the subnormals' and zero's exponent.
    (1..EXPONENTS).rev().find_map(|exponent| {
        cumulative += by_exponent[exponent];
        (cumulative / total >= mass).then(|| f64::from_bits((exponent as u64) << 52))
    })
}

/// An entry of a top-n heap, ordered so that the worst entry (lowest key, then highest id) is
/// the greatest: the heap's top is the entry to evict.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Ranked {
    key: f64,
    id: u32,
}

impl Eq for Ranked {}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        other.key.total_cmp(&self.key).then(self.id.cmp(&other.id))
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The `n` `(key, id)` items with the highest keys, highest first, ties to the lowest id, in one
/// pass with a bounded heap (`O(len · log n)`, no sort of the input). Keys must not be NaN;
/// -0.0 counts as +0.0.
pub(crate) fn top_n_by_key(items: impl Iterator<Item = (f64, u32)>, n: usize) -> Vec<(f64, u32)> {
    if n == 0 {
        return Vec::new();
    }
    let mut heap = BinaryHeap::with_capacity(n.min(1 << 16));
    for (key, id) in items {
        let entry = Ranked { key: key + 0.0, id };
        if heap.len() < n {
            heap.push(entry);
        } else if let Some(mut worst) = heap.peek_mut()
            && entry < *worst
        {
            *worst = entry;
        }
    }
    heap.into_sorted_vec().into_iter().map(|entry| (entry.key, entry.id)).collect()
}

/// The ids of the `k` largest values, largest first, ties to the lowest id, without sorting the
/// whole slice (one pass with a bounded heap). Validate first: NaN is not expected.
pub fn top_k_ids(values: &[f32], k: usize) -> Vec<u32> {
    let items = values.iter().zip(0u32..).map(|(&v, id)| (f64::from(v), id));
    top_n_by_key(items, k).into_iter().map(|(_, id)| id).collect()
}

/// Draws an index from non-negative `weights` (not necessarily normalised) given a uniform
/// `u` in `[0, 1)`: the first index whose cumulative weight, summed in index order, exceeds
/// `u · total`. Zero-weight entries are never returned. `None` when the total is not positive
/// and finite.
pub fn draw_categorical(weights: &[f64], u: f64) -> Option<usize> {
    let total: f64 = weights.iter().sum();
    if !(total > 0.0 && total.is_finite()) {
        return None;
    }
    draw_with_total(weights.iter().copied().enumerate(), total, u)
}

/// The draw of [`draw_categorical`] over `(index, weight)` pairs whose weights sum to `total`
/// in this order.
pub(crate) fn draw_with_total(items: impl Iterator<Item = (usize, f64)>, total: f64, u: f64) -> Option<usize> {
    let u = if u.is_nan() { 0.0 } else { u.clamp(0.0, 1.0) };
    let target = u * total;
    let mut cumulative = 0.0;
    let mut last_positive = None;
    for (index, weight) in items {
        if weight > 0.0 {
            cumulative += weight;
            last_positive = Some(index);
            if target < cumulative {
                return Some(index);
            }
        }
    }
    // Only reached through rounding when u is within an ulp of 1.
    last_positive
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The normaliser gives every entry of the log-softmax bit for bit, and the softmax is its
    /// exponential: one owner of the arithmetic.
    #[test]
    fn the_normaliser_gives_the_log_softmax_bit_for_bit() {
        let logits: Vec<f32> = (0..1000).map(|i| ((i * 7919 % 1000) as f32 * 0.037).sin() * 12.0).collect();
        let mut with_excluded = logits.clone();
        with_excluded[3] = f32::NEG_INFINITY;
        for row in [&logits, &with_excluded] {
            let norm = LogSoftmax::of(row).unwrap();
            let (logprobs, probs) = (log_softmax(row).unwrap(), softmax(row).unwrap());
            for (i, &z) in row.iter().enumerate() {
                assert_eq!(norm.at(z).to_bits(), logprobs[i].to_bits(), "entry {i}");
                assert_eq!(exp(logprobs[i]).to_bits(), probs[i].to_bits(), "entry {i}");
            }
            let max = f64::from(row.iter().copied().fold(f32::NEG_INFINITY, f32::max));
            let sum = lane_sum(row, |z| exp(f64::from(z) - max));
            assert_eq!(norm.at(row[0]).to_bits(), ((f64::from(row[0]) - max) - ln(sum)).to_bits());
        }
        assert!(LogSoftmax::of(&[f32::NEG_INFINITY; 4]).is_err() && LogSoftmax::of(&[]).is_err());
    }

    /// A row's sum in eight running sums equals the same sum written out, for every length's
    /// tail.
    #[test]
    fn a_lane_sum_is_eight_running_sums_joined_pairwise() {
        for len in [0, 1, 7, 8, 9, 23, 64] {
            let items: Vec<f64> = (0..len).map(|i| 1.0 / (i as f64 + 3.0)).collect();
            let mut sums = [0.0f64; 8];
            for (i, &item) in items.iter().enumerate() {
                sums[i % 8] += item * 2.0;
            }
            let expected = ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]));
            assert_eq!(lane_sum(&items, |x| x * 2.0).to_bits(), expected.to_bits(), "{len} items");
        }
    }

    /// The widest registers' sums and weights are the plain build's, bit for bit (on an x86-64
    /// with AVX2 or AVX-512 the functions run the wider bodies; these closures are compiled for
    /// the crate's baseline), on rows with -inf, subnormal results and every tail length.
    #[test]
    fn the_widest_bodies_give_the_plain_bits() {
        for len in [1, 5, 8, 13, 1000, 4099] {
            let row: Vec<f32> = (0..len)
                .map(|i| match i % 97 {
                    5 => f32::NEG_INFINITY,
                    6 => -740.0,
                    _ => ((i * 7919 % 1000) as f32 * 0.037).sin() * 30.0,
                })
                .collect();
            let max = f64::from(row.iter().copied().fold(f32::NEG_INFINITY, f32::max));
            let plain = std::hint::black_box(|z: f32| exp(f64::from(z) - max));
            assert_eq!(exp_sum(&row, max).to_bits(), lane_sum(&row, plain).to_bits(), "{len} logits");

            let values: Vec<f64> = row.iter().map(|&z| f64::from(z)).collect();
            for temperature in [0.7, 1.0, 1.3] {
                let mut weights = vec![0.0; len];
                let (total, weighted) = temperature_weights(&values, max, temperature, &mut weights);
                let x = |v: f64| (v - max) / temperature;
                for (&w, &v) in weights.iter().zip(&values) {
                    assert_eq!(w.to_bits(), exp(x(v)).to_bits());
                }
                assert_eq!(total.to_bits(), lane_sum(&values, |v| exp(x(v))).to_bits());
                let term = |v: f64| if exp(x(v)) > 0.0 { exp(x(v)) * x(v) } else { 0.0 };
                assert_eq!(weighted.to_bits(), lane_sum(&values, term).to_bits());
            }
        }
    }

    /// The blocked check finds the first value that is not below the limit (NaN included) in any
    /// block, and the lane maximum the first index of the largest value.
    #[test]
    fn the_row_checks_find_the_first_offender_and_the_first_maximum() {
        let mut row = vec![1.0f32; 5000];
        assert_eq!(first_not_below(&row, f32::INFINITY), None);
        for (at, bad) in [(0, f32::NAN), (1023, f32::INFINITY), (1024, f32::NAN), (4999, f32::INFINITY)] {
            row[at] = bad;
            row[4999 - at / 2] = f32::NAN;
            assert_eq!(first_not_below(&row, f32::INFINITY), Some(at.min(4999 - at / 2)), "{at}");
            row = vec![1.0f32; 5000];
        }
        assert!(matches!(
            validate_logits(&[0.0, f32::NEG_INFINITY, f32::NAN]),
            Err(SamplerError::InvalidLogit { id: 2, .. })
        ));
        let mut values = vec![f64::NEG_INFINITY; 37];
        assert_eq!(argmax(&values), (f64::NEG_INFINITY, 0));
        values[9] = 2.0;
        values[30] = 2.0;
        values[20] = 1.0;
        assert_eq!(argmax(&values), (2.0, 9));
        values[36] = 3.0;
        assert_eq!(argmax(&values), (3.0, 36));
    }

    /// fdlibm's `e_exp.c` as published, with its branches: the reference [`exp`] is tested against.
    fn fdlibm_exp(x: f64) -> f64 {
        let pow2 = |k: i32| f64::from_bits(((k + 1023) as u64) << 52);
        if x.is_nan() {
            return x;
        }
        if x > EXP_OVERFLOW {
            return f64::INFINITY;
        }
        if x < EXP_UNDERFLOW {
            return 0.0;
        }
        if x.abs() < EXP_TINY {
            return 1.0 + x;
        }
        let k: i32 = if x.abs() <= HALF_LN2 { 0 } else { (INV_LN2 * x + if x < 0.0 { -0.5 } else { 0.5 }) as i32 };
        let kf = f64::from(k);
        let hi = x - kf * LN2_HI;
        let lo = kf * LN2_LO;
        let r = hi - lo;
        let rr = r * r;
        let c = r - rr * (EXP_P1 + rr * (EXP_P2 + rr * (EXP_P3 + rr * (EXP_P4 + rr * EXP_P5))));
        let y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
        if k == 0 {
            y
        } else if k > 1023 {
            y * 2.0 * pow2(1023)
        } else if k >= -1021 {
            y * pow2(k)
        } else {
            y * pow2(k + 1000) * pow2(-1000)
        }
    }

    /// The branch-free exponential (and its form for `x <= 0`) is fdlibm's, bit for bit: across
    /// the whole range, at each case's edges, where `k` changes, and where the rounding to find `k` meets a tie.
    #[test]
    fn exp_is_fdlibms_bit_for_bit() {
        let mut cases = vec![
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MIN_POSITIVE,
            -f64::MIN_POSITIVE,
            EXP_OVERFLOW,
            EXP_UNDERFLOW,
            EXP_TINY,
            -EXP_TINY,
            HALF_LN2,
            -HALF_LN2,
            1e300,
            -1e300,
        ];
        for edge in [EXP_OVERFLOW, EXP_UNDERFLOW, EXP_TINY, -EXP_TINY, HALF_LN2, -HALF_LN2] {
            let mut below = edge;
            let mut above = edge;
            for _ in 0..4 {
                below = f64::from_bits(below.to_bits() - 1);
                above = f64::from_bits(above.to_bits() + 1);
                cases.extend([below, above]);
            }
        }
        // Where x/ln2 ± 1/2 is near an integer (k's steps) and near a half (a tie when rounding
        // it to the nearest), including the subnormal and overflowing ends.
        for n in -1080..=1030 {
            for offset in [0.0, 0.5] {
                let x = (f64::from(n) + offset) * std::f64::consts::LN_2;
                let mut at = x;
                for _ in 0..3 {
                    cases.extend([at, f64::from_bits(x.to_bits() ^ 1)]);
                    at = f64::from_bits(at.to_bits() + 1);
                }
            }
        }
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            cases.push(((state >> 11) as f64 / (1u64 << 53) as f64) * 1500.0 - 760.0);
        }
        for x in cases {
            let (ours, theirs) = (exp(x), fdlibm_exp(x));
            assert!(
                ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan()),
                "exp({x:e}): {ours:e} against {theirs:e}"
            );
            if x <= 0.0 {
                assert_eq!(exp_nonpositive(x).to_bits(), theirs.to_bits(), "exp_nonpositive({x:e})");
            }
        }
    }

    fn ulps_apart(a: f64, b: f64) -> u64 {
        if a == b {
            return 0;
        }
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs()
    }

    #[test]
    fn exp_matches_std_within_one_ulp() {
        let mut worst = 0;
        let mut x = -745.0;
        while x < 709.0 {
            let ours = exp(x);
            let theirs = x.exp();
            if theirs > f64::MIN_POSITIVE {
                worst = worst.max(ulps_apart(ours, theirs));
            }
            x += 0.012_345_678_9;
        }
        assert!(worst <= 1, "exp is {worst} ulps from std");
        for x in [-1e-10, 1e-10, 0.0, 0.5, -0.5, 0.346, -0.347, 1.0, -1.0, 10.0, -10.0] {
            assert!(ulps_apart(exp(x), x.exp()) <= 1, "exp({x})");
        }
        assert_eq!(exp(f64::NEG_INFINITY), 0.0);
        assert_eq!(exp(f64::INFINITY), f64::INFINITY);
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(f64::NAN).is_nan());
        assert_eq!(exp(-800.0), 0.0);
        assert!(exp(-740.0) > 0.0, "subnormal results survive");
    }

    #[test]
    fn ln_matches_std_within_one_ulp() {
        let mut worst = 0;
        let mut x = 1e-300;
        while x < 1e300 {
            worst = worst.max(ulps_apart(ln(x), x.ln()));
            x *= 1.071_234_5;
        }
        for x in [0.1, 0.5, 0.9, 0.99, 1.0 - 1e-12, 1.0 + 1e-12, 2.0, 3.0, 1e-310] {
            worst = worst.max(ulps_apart(ln(x), x.ln()));
        }
        assert!(worst <= 1, "ln is {worst} ulps from std");
        assert_eq!(ln(1.0), 0.0);
        assert_eq!(ln(0.0), f64::NEG_INFINITY);
        assert!(ln(-1.0).is_nan());
        assert_eq!(ln(f64::INFINITY), f64::INFINITY);
    }

    #[test]
    fn powi_portable_is_exact_for_small_powers() {
        assert_eq!(powi_portable(1.75, 0), 1.0);
        assert_eq!(powi_portable(1.75, 1), 1.75);
        assert_eq!(powi_portable(1.75, 2), 3.0625);
        assert_eq!(powi_portable(2.0, 10), 1024.0);
        assert_eq!(powi_portable(2.0, 2000), f64::INFINITY);
    }

    #[test]
    fn softmax_sums_to_one_and_handles_neg_inf() {
        let p = softmax(&[1.0, f32::NEG_INFINITY, 1.0]).unwrap();
        assert_eq!(p, vec![0.5, 0.0, 0.5]);
        let ls = log_softmax(&[0.0, 0.0]).unwrap();
        assert!((ls[0] - (0.5f64).ln()).abs() < 1e-15);
        assert_eq!(softmax(&[]), Err(SamplerError::EmptyLogits));
        assert_eq!(softmax(&[f32::NEG_INFINITY]), Err(SamplerError::AllTokensExcluded));
        assert!(matches!(softmax(&[0.0, f32::NAN]), Err(SamplerError::InvalidLogit { id: 1, .. })));
        assert!(matches!(softmax(&[f32::INFINITY]), Err(SamplerError::InvalidLogit { id: 0, .. })));
    }

    #[test]
    fn entropy_of_uniform_is_ln_n() {
        let h = entropy(&[0.25; 4]);
        assert!((h - 4f64.ln()).abs() < 1e-15);
        assert_eq!(entropy(&[1.0, 0.0]), 0.0);
    }

    #[test]
    fn top_k_ids_breaks_ties_to_lowest_id() {
        assert_eq!(top_k_ids(&[1.0, 3.0, 3.0, 2.0, 3.0], 3), vec![1, 2, 4]);
        assert_eq!(top_k_ids(&[1.0, 3.0, 2.0], 10), vec![1, 2, 0]);
        assert!(top_k_ids(&[1.0], 0).is_empty());
    }

    #[test]
    fn smallest_prefix_grows_past_the_first_chunk() {
        // 1000 equal weights: reaching half the mass needs 500 items, more than one chunk.
        let mut items: Vec<u32> = (0..1000).rev().collect();
        let n = smallest_prefix_with_mass(&mut items, 0, |a, b| a.cmp(b), |_| 1.0, 1000.0, 0.5).unwrap();
        assert_eq!(n, 500);
        assert_eq!(items[..n], (0..500).collect::<Vec<u32>>()[..]);
        // Unreachable mass keeps everything.
        let mut items: Vec<u32> = (0..10).collect();
        let n = smallest_prefix_with_mass(&mut items, 0, |a, b| a.cmp(b), |_| 1.0, 20.0, 0.9);
        assert_eq!(n, None);
        assert!(items.is_sorted());
    }

    #[test]
    fn the_nucleus_floor_is_the_highest_power_of_two_whose_weights_reach_the_mass() {
        // Weights 1, 0.75 (exponent -1), 0.3 and 0.26 (-2), 0.1 (-4): total 2.41.
        let weights = [0.3, 1.0, 0.1, 0.75, 0.26];
        let total: f64 = weights.iter().sum();
        assert_eq!(nucleus_floor(&weights, total, 0.4), Some(1.0));
        assert_eq!(nucleus_floor(&weights, total, 0.5), Some(0.5));
        assert_eq!(nucleus_floor(&weights, total, 0.9), Some(0.25));
        assert_eq!(nucleus_floor(&weights, total, 0.99), Some(0.0625));
        // Only zeros and subnormals left to reach it: no floor.
        assert_eq!(nucleus_floor(&[0.0, 1e-310], 1e-310, 0.5), None);
    }

    #[test]
    fn draw_categorical_skips_zero_weights() {
        let w = [0.0, 1.0, 0.0, 3.0];
        assert_eq!(draw_categorical(&w, 0.0), Some(1));
        assert_eq!(draw_categorical(&w, 0.2499), Some(1));
        assert_eq!(draw_categorical(&w, 0.25), Some(3));
        assert_eq!(draw_categorical(&w, 0.999_999_999), Some(3));
        assert_eq!(draw_categorical(&w, 1.0), Some(3));
        assert_eq!(draw_categorical(&[0.0, 0.0], 0.5), None);
    }
}
