//! How relaxed SIMD's byte products are summed ([`ByteDot`]): two ways, the faster one chosen
//! by timing both at load ([`byte_dot_probe`]), since a module cannot ask which CPU runs it.

use std::sync::atomic::{AtomicU8, Ordering};

#[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
use super::{GgmlType, IntegerRow, SUPER_BLOCK, relaxed, timing_blocks};

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
