//! The decode products' speed in WebAssembly, per format and per way the relaxed SIMD build sums
//! its byte products (`nucleus_cpu::ByteDot`), timed by `tests/wasm/product-speed.mjs` in Node's
//! V8, or with `--chromium`, `--firefox` or `--webkit` in a page of that browser, whose compiler
//! is the one that matters (natively, `matmul_speed` measures the same products):
//!
//! ```sh
//! RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd" CARGO_TARGET_DIR=target/wasm-speed \
//!   cargo build --release --target wasm32-unknown-unknown -p nucleus-cpu --example wasm_product_speed
//! node tests/wasm/product-speed.mjs target/wasm-speed/wasm32-unknown-unknown/release/examples/wasm_product_speed.wasm
//! ```
//!
//! Built for wasm32 it exports `prepare` (a matrix of arbitrary blocks and activation rows, kept
//! until the next), `choose` (a way of summing) and `run` (the product, repeated); the script
//! times `run` from JavaScript, since wasm32-unknown-unknown has no clock.

use std::sync::Mutex;

use nucleus_cpu::{ByteDot, Matrix, matmul};
use nucleus_gguf::GgmlType;

/// The formats `prepare` takes, by index (the script's names).
const FORMATS: [GgmlType; 9] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::F16,
];

struct Prepared {
    ggml_type: GgmlType,
    blocks: Vec<u8>,
    rows: usize,
    cols: usize,
    x: Vec<f32>,
    y: Vec<f32>,
}

static PREPARED: Mutex<Option<Prepared>> = Mutex::new(None);

/// A `rows × cols` matrix of `FORMATS[format]` (arbitrary quants, finite scales) and `n` rows of
/// activations, kept for `run`.
#[unsafe(no_mangle)]
pub extern "C" fn prepare(format: u32, rows: u32, cols: u32, n: u32) {
    let ggml_type = FORMATS[format as usize];
    let (rows, cols, n) = (rows as usize, cols as usize, n as usize);
    let blocks = nucleus_cpu::integer::timing_blocks(ggml_type, rows * cols);
    let x = (0..n * cols).map(|i| (i * 37 % 101) as f32 / 50.0 - 1.0).collect();
    let prepared = Prepared { ggml_type, blocks, rows, cols, x, y: vec![0.0; n * rows] };
    *PREPARED.lock().expect("one thread") = Some(prepared);
}

/// Sums byte products the way `ByteDot::ALL[choice]` names from here on.
#[unsafe(no_mangle)]
pub extern "C" fn choose(choice: u32) {
    nucleus_cpu::set_byte_dot(ByteDot::ALL[choice as usize].0);
}

/// How many ways this build has of summing byte products (2 with relaxed SIMD, else 0).
#[unsafe(no_mangle)]
pub extern "C" fn choices() -> u32 {
    nucleus_cpu::byte_dot_choices().len() as u32
}

/// The prepared product `times` times; returns an output, so nothing is skipped.
#[unsafe(no_mangle)]
pub extern "C" fn run(times: u32) -> f32 {
    let mut guard = PREPARED.lock().expect("one thread");
    let p = guard.as_mut().expect("prepare first");
    let w = Matrix::new(p.ggml_type, &p.blocks, p.rows, p.cols).expect("whole blocks");
    for _ in 0..times {
        matmul(&w, &p.x, &mut p.y, false);
    }
    p.y[0]
}
