//! The element-wise functions of a forward pass (eˣ, the sigmoid, SiLU, GELU's tanh form) in a
//! form the compiler vectorises: no branches, no calls, the same operations on every value.
//!
//! Why our own `exp`: `f32::exp` is a call into the platform's maths library, one value at a
//! time. In wasm that is Rust's software `expf`: 15.7–26 ns a SwiGLU value in Node's V8 (a
//! multiply-add over the same values: 0.6–0.9 ns), and a 512-token prefill of Qwen3.5-0.8B's shape
//! takes about 126 M of them on the calling thread (SwiGLU 44 M, the convolution's SiLU 57 M, the
//! gated norm's 19 M, the attention's gate 6 M): about 3 s of a 36 s prefill in Chromium on a
//! 2-core Xeon. Written as below, the loops over a row run four values an instruction (wasm's
//! SIMD128, x86-64's baseline SSE2); ARCHITECTURE.md, "The pass's exponentials in lanes".

use crate::threads::for_each_chunk;

/// Below this, `e^x` is less than half f32's smallest subnormal: 0.
const LOWEST: f32 = -103.972_08;
/// Above this, `e^x` is more than f32's largest value: `+inf`.
const HIGHEST: f32 = 88.722_83;
/// `1.5 · 2^23`: `v + MAGIC` rounds `v` to an integer held in the low bits of the sum's mantissa
/// (for `|v| < 2^22`), so `(v + MAGIC) − MAGIC` is `v` rounded to the nearest integer, and the
/// sum's bits less `MAGIC`'s are that integer.
const MAGIC: f32 = 12_582_912.0;
/// ln 2 in two parts (Cody and Waite): `n · LN2_HI` is exact for the `|n| ≤ 150` used here.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// `e^x`, within 2 ulp of the exact value over f32's whole range (subnormal results included),
/// `+inf` above [`HIGHEST`], 0 below [`LOWEST`], NaN for NaN. `x = n·ln 2 + r` with `|r| ≤ ln 2 / 2`,
/// `e^r` by Cephes' degree-6 minimax polynomial, times `2^n` built from its bits in two halves
/// (so that `2^n` past f32's normal range at either end is still two normal factors).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let v = x.clamp(LOWEST, HIGHEST);
    let shifted = v * std::f32::consts::LOG2_E + MAGIC;
    let n = shifted - MAGIC;
    let r = (v - n * LN2_HI) - n * LN2_LO;
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let e_r = p * r * r + r + 1.0;
    // n, an integer in -150..=128, from the sum's bits; 2^n = 2^half · 2^(n − half).
    let n = (shifted.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    let half = n >> 1;
    let power = |k: i32| f32::from_bits((k.wrapping_add(127) as u32) << 23);
    let value = e_r * power(half) * power(n - half);
    if x > HIGHEST {
        f32::INFINITY
    } else if x < LOWEST {
        0.0
    } else {
        value
    }
}

/// `1 / (1 + e^−x)`.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// SiLU, `x · sigmoid(x)`.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + exp(-x))
}

/// GELU in its tanh form, `0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³)))`, computed as
/// `g · sigmoid(2·√(2/π)·(g + 0.044715·g³))` (the same function: `(1 + tanh u) / 2 = sigmoid(2u)`).
#[inline(always)]
pub fn gelu_tanh(g: f32) -> f32 {
    /// `2·√(2/π)`.
    const TWICE_SQRT_2_OVER_PI: f32 = 1.595_769;
    g * sigmoid(TWICE_SQRT_2_OVER_PI * (g + 0.044715 * g * g * g))
}

/// `gate[i] = silu(gate[i]) · up[i]`: SwiGLU's product.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    gated(gate, up, silu);
}

/// `gate[i] = gelu_tanh(gate[i]) · up[i]`: GeGLU's product (Gemma).
pub fn geglu_tanh(gate: &mut [f32], up: &[f32]) {
    gated(gate, up, gelu_tanh);
}

/// Values of a gated product (a prompt's rows of the feed-forward) from which its chunks of
/// [`GATED_TASK`] go to the pool: on the calling thread alone they were 1.6 % of Gemma 3's 32-token
/// prefill while the other core waited (`perf`, two threads). A decode step's one row stays on it.
const GATED_PARALLEL: usize = 1 << 14;
/// Values of each task of a spread gated product: about 8 µs of work, several times the pool's
/// hand-over.
const GATED_TASK: usize = 1 << 13;

/// `gate[i] = activation(gate[i]) · up[i]`, spread over the threads when long.
#[inline(always)]
fn gated(gate: &mut [f32], up: &[f32], activation: impl Fn(f32) -> f32 + Sync) {
    assert_eq!(gate.len(), up.len());
    let parallel = gate.len() >= GATED_PARALLEL;
    for_each_chunk(gate, GATED_TASK, parallel, |index, gate| {
        let up = &up[index * GATED_TASK..][..gate.len()];
        gate.iter_mut().zip(up).for_each(|(g, &u)| *g = activation(*g) * u);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between `got` and the exact `want` (as f32's spacing
    /// at `want`; subnormal results in the smallest subnormal's).
    fn ulps(got: f32, want: f64) -> f64 {
        let spacing = if want.abs() < f64::from(f32::MIN_POSITIVE) {
            f64::from(f32::from_bits(1))
        } else {
            f64::from((want as f32).abs().next_up() - (want as f32).abs())
        };
        (f64::from(got) - want).abs() / spacing
    }

    /// Every 97th f32 from LOWEST to HIGHEST (about 300,000 values, every exponent), each case's
    /// edges, and the range's ends: within 2 ulp of f64's `exp`.
    #[test]
    fn exp_is_within_two_ulp_everywhere() {
        let mut worst = (0.0, 0.0);
        let mut check = |x: f32| {
            let off = ulps(exp(x), f64::from(x).exp());
            assert!(off <= 2.0, "exp({x:e}) = {:e}, want {:e}: {off} ulp", exp(x), f64::from(x).exp());
            if off > worst.0 {
                worst = (off, f64::from(x));
            }
        };
        for bits in ((-0.0f32).to_bits()..=LOWEST.to_bits()).step_by(97) {
            check(f32::from_bits(bits));
        }
        for bits in (0..=HIGHEST.to_bits()).step_by(97) {
            check(f32::from_bits(bits));
        }
        for edge in [LOWEST, HIGHEST, 0.0, -0.0, -87.336_54, -87.336_55, 88.376_26, 88.376_27, 0.346_573_6] {
            for x in [edge.next_down(), edge, edge.next_up()] {
                if (LOWEST..=HIGHEST).contains(&x) {
                    check(x);
                }
            }
        }
        // Every rounding of n: halfway between multiples of ln 2.
        for n in -149..128 {
            let x = ((f64::from(n) + 0.5) * std::f64::consts::LN_2) as f32;
            if (LOWEST..=HIGHEST).contains(&x) {
                for x in [x.next_down(), x, x.next_up()] {
                    check(x);
                }
            }
        }
        assert!(worst.0 > 0.0, "some value is rounded: {worst:?}");
    }

    #[test]
    fn exp_beyond_the_range_and_of_nan() {
        assert_eq!(exp(HIGHEST.next_up()), f32::INFINITY);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(LOWEST.next_down()), 0.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(HIGHEST).is_finite() && exp(LOWEST) > 0.0);
    }

    /// The activations against their f64 definitions.
    #[test]
    fn the_activations_match_their_definitions() {
        for i in -4000..=4000 {
            let x = i as f32 / 100.0;
            let d = f64::from(x);
            let sigmoid_64 = 1.0 / (1.0 + (-d).exp());
            // `0.5·d·(1 + tanh u)` as `d·sigmoid(2u)`, which f64 keeps exact where tanh u is near −1.
            let u = (2.0 / std::f64::consts::PI).sqrt() * (d + 0.044715 * d * d * d);
            let gelu_64 = d / (1.0 + (-2.0 * u).exp());
            // GELU's argument `2u` is rounded in f32 before the sigmoid, and where the sigmoid is
            // small its relative error is that rounding times `|2u|` (the tanh of it in f32, before,
            // was off by 30 % at -4 and by all of it below -5).
            for (name, got, want, relative) in [
                ("sigmoid", sigmoid(x), sigmoid_64, 4e-7),
                ("silu", silu(x), d * sigmoid_64, 4e-7),
                ("gelu", gelu_tanh(x), gelu_64, 4e-7 * (1.0 + (2.0 * u).abs())),
            ] {
                let off = (f64::from(got) - want).abs();
                assert!(off <= relative * want.abs() + 1e-30, "{name}({x}) = {got}, want {want}");
            }
        }
        let (mut gate, up) = (vec![1.0, -2.0, 0.5], vec![2.0, 3.0, -1.0]);
        let mut geglu = gate.clone();
        swiglu(&mut gate, &up);
        assert_eq!(gate, [silu(1.0) * 2.0, silu(-2.0) * 3.0, -silu(0.5)]);
        geglu_tanh(&mut geglu, &up);
        assert_eq!(geglu, [gelu_tanh(1.0) * 2.0, gelu_tanh(-2.0) * 3.0, -gelu_tanh(0.5)]);
    }
}
