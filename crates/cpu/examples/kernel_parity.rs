//! The CPU engine's products against their reference on every format, as one function that
//! both builds run: natively `tests/parity.rs` asserts it finds nothing; built for
//! `wasm32-unknown-unknown` (a `cdylib`, once with WebAssembly SIMD and once with relaxed SIMD),
//! it exports `failures()`, which `tests/wasm/cpu-parity.mjs` runs in Node (`./build.sh test`):
//! so the wasm kernels, which no native test compiles, meet the same reference.
//!
//! The weights the tile reads (`tile_weights`, each build's own dequantization) against
//! `nucleus-gguf`'s, bit for bit. Every f16 as a 32-value block's scales through a decode product.
//! `matmul` against the reference (the matrix dequantized whole by `nucleus-gguf`, f64 sums):
//! random blocks, one and several activation rows, widths that are not multiples of the tile or of
//! eight lanes, more weight rows than one task holds, accumulating or not. `ops::attention` against
//! its f64 reference: grouped heads, causal rows, windows, heads narrower than the lanes and wider
//! but not a multiple of them, key counts that are not whole fours. `elementwise`'s `exp`, SwiGLU
//! and GeGLU over rows (vectorised) against f64.

use nucleus_cpu::integer::IntegerRow;
use nucleus_cpu::ops::{AttentionShape, KvRows, attention};
use nucleus_cpu::{Matrix, matmul, reference};
use nucleus_gguf::GgmlType;

/// SplitMix64.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Random blocks of `ggml_type` for `rows × cols` values, with finite scales.
pub fn random_matrix(rng: &mut Rng, ggml_type: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let (block, block_bytes) = ggml_type.block_layout();
    let blocks = rows * cols / block as usize;
    let mut bytes: Vec<u8> = (0..blocks * block_bytes as usize).map(|_| rng.next_u64() as u8).collect();
    let f16 = |v: f64| half::f16::from_f64(v).to_le_bytes();
    for b in bytes.chunks_exact_mut(block_bytes as usize) {
        let scale = f16(0.002 + 0.05 * rng.unit());
        match ggml_type {
            GgmlType::F32 => b.copy_from_slice(&((rng.unit() - 0.5) as f32).to_le_bytes()),
            GgmlType::F16 => b.copy_from_slice(&f16(rng.unit() - 0.5)),
            GgmlType::Bf16 => b.copy_from_slice(&half::bf16::from_f64(rng.unit() - 0.5).to_le_bytes()),
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => b[0..2].copy_from_slice(&scale),
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => {
                b[0..2].copy_from_slice(&scale);
                b[2..4].copy_from_slice(&f16(0.01 * rng.unit()));
            }
            GgmlType::Q6K => b[208..210].copy_from_slice(&f16(0.0005 + 0.002 * rng.unit())),
            other => unreachable!("{other}"),
        }
    }
    bytes
}

pub const TYPES: [GgmlType; 11] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Bf16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
];

/// Widths of a type's rows in these tests: a tile and a part, and one not a multiple of 8 lanes
/// where the blocks allow it.
pub fn widths(ggml_type: GgmlType) -> Vec<usize> {
    match ggml_type.block_layout().0 {
        1 => vec![13, 300, 640],
        32 => vec![96, 640],
        _ => vec![256, 768],
    }
}

/// Every weight the tile reads (`tile_weights`: this build's own dequantization) that is not the
/// reference's value bit for bit, described: random blocks and blocks at their extremes of every
/// format, a tile of 256 values at a time as the products read them.
pub fn tile_mismatches() -> Vec<String> {
    let mut found = Vec::new();
    let mut rng = Rng(11);
    for ggml_type in TYPES {
        let (block, block_bytes) = ggml_type.block_layout();
        let tile_bytes = nucleus_cpu::TILE / block as usize * block_bytes as usize;
        let cols = widths(ggml_type).into_iter().max().expect("a width");
        for (label, bytes) in
            [("random", random_matrix(&mut rng, ggml_type, 8, cols)), ("extreme", extreme_matrix(ggml_type, 8, cols))]
        {
            let values = bytes.len() / block_bytes as usize * block as usize;
            let mut expected = vec![0f32; values];
            assert!(nucleus_gguf::dequantize_into(ggml_type, &bytes, &mut expected));
            let mut got = vec![f32::NAN; values];
            for (bytes, out) in bytes.chunks(tile_bytes).zip(got.chunks_mut(nucleus_cpu::TILE)) {
                nucleus_cpu::tile_weights(ggml_type, bytes, out);
            }
            let off = expected.iter().zip(&got).position(|(e, g)| e.to_bits() != g.to_bits());
            if let Some(i) = off {
                found.push(format!(
                    "{ggml_type} tile ({label} blocks): weight {i} = {}, reference {}",
                    got[i], expected[i]
                ));
            }
        }
    }
    found
}

/// Every f16 as a 32-value block's `d` (and, in Q4_1 and Q5_1, as its `m`), through a decode
/// product (one activation row), that does not come out as the reference does, described: finite
/// within `1e-5` of it, or not finite where it is not (`d·Σq·x + m·Σx` may give NaN where the
/// reference's sum of `w·x` gives an infinity). The products convert these f16s their own ways
/// (relaxed SIMD's Q4_1 four lanes at a time).
pub fn scale_mismatches() -> Vec<String> {
    let mut found = Vec::new();
    let formats = [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0];
    for ggml_type in formats {
        let has_m = matches!(ggml_type, GgmlType::Q4_1 | GgmlType::Q5_1);
        for (which, at) in [("d", 0), ("m", 2)].into_iter().take(if has_m { 2 } else { 1 }) {
            // One block a row, its quants nonzero (all their bits set; Q8_0's −128), the other
            // f16 zero, row `i`'s f16 at `at` being `i`.
            let rows = 1 << 16;
            let mut bytes = extreme_matrix(ggml_type, rows, 32);
            let block_bytes = bytes.len() / rows;
            for (i, block) in bytes.chunks_exact_mut(block_bytes).enumerate() {
                block[0..2].fill(0);
                if has_m {
                    block[2..4].fill(0);
                }
                block[at..at + 2].copy_from_slice(&(i as u16).to_le_bytes());
            }
            let w = Matrix::new(ggml_type, &bytes, rows, 32).expect("whole blocks");
            let x = vec![1.0f32; 32];
            let expected = reference::matmul(&w, &x);
            let mut y = vec![0f32; rows];
            matmul(&w, &x, &mut y, false);
            for (i, (&got, &want)) in y.iter().zip(&expected).enumerate() {
                let right = if want.is_finite() {
                    (f64::from(got) - want).abs() <= 1e-5 * want.abs()
                } else {
                    !got.is_finite()
                };
                if !right {
                    found.push(format!("{ggml_type} with {which} = f16 {i:#06x}: {got}, reference {want}"));
                }
            }
        }
    }
    found
}

/// Every output of `matmul` further from the reference than `1e-5` of the product's largest
/// magnitude, described.
pub fn mismatches() -> Vec<String> {
    // Under each way this build sums its byte products (wasm's relaxed SIMD build has two).
    let before = nucleus_cpu::byte_dot();
    let found = match nucleus_cpu::byte_dot_choices() {
        [] => product_mismatches(""),
        choices => choices
            .iter()
            .flat_map(|&(choice, name)| {
                nucleus_cpu::set_byte_dot(choice);
                product_mismatches(&format!("byte products {name}: "))
            })
            .collect(),
    };
    nucleus_cpu::set_byte_dot(before);
    found
}

/// Blocks of `ggml_type` whose integer products reach their bounds (`rows × cols` values): every
/// quant its format's largest magnitude, every sub-block scale too (Q6_K's −128), the f16 scales
/// finite. Against activations all of one magnitude (each rounded to the largest integer, ±0x7F7F7F),
/// every lane of every integer sum is as far from zero as it can be.
pub fn extreme_matrix(ggml_type: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let (block, block_bytes) = ggml_type.block_layout();
    let quant = if ggml_type == GgmlType::Q8_0 { 0x80 } else { 0xFF };
    let mut bytes = vec![quant; rows * cols / block as usize * block_bytes as usize];
    let scale = half::f16::from_f64(0.01).to_le_bytes();
    for b in bytes.chunks_exact_mut(block_bytes as usize) {
        match ggml_type {
            GgmlType::Q6K => {
                b[192..208].fill(0x80);
                b[208..210].copy_from_slice(&scale);
            }
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => {
                b[0..2].copy_from_slice(&scale);
                b[2..4].copy_from_slice(&scale);
            }
            _ => b[0..2].copy_from_slice(&scale),
        }
    }
    bytes
}

/// [`mismatches`] under the byte products' current summing, each prefixed with `label`.
fn product_mismatches(label: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rng = Rng(7);
    for ggml_type in TYPES {
        for cols in widths(ggml_type) {
            let rows = 133;
            let bytes = random_matrix(&mut rng, ggml_type, rows, cols);
            let w = Matrix::new(ggml_type, &bytes, rows, cols).expect("whole blocks");
            // One row and a few in integers (`matmul.rs`, `integer_rows_most`), more through the tile.
            for n in [1usize, 2, 3, 7] {
                let x: Vec<f32> = (0..n * cols).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect();
                found.extend(product_off(label, &w, &x, n));
            }
        }
        // The integer sums at their bounds, of either sign.
        if IntegerRow::scale_block(ggml_type).is_some() {
            let (rows, cols) = (16, widths(ggml_type)[0]);
            let bytes = extreme_matrix(ggml_type, rows, cols);
            let w = Matrix::new(ggml_type, &bytes, rows, cols).expect("whole blocks");
            for value in [-1.0, 1.0] {
                found.extend(product_off(&format!("{label}extreme ({value}) "), &w, &vec![value; cols], 1));
            }
        }
    }
    found
}

/// Every output of `matmul(w, x)` (`n` rows of `x`), further from the reference than `1e-5` of the
/// product's largest magnitude, described; accumulating into `y` and not.
fn product_off(label: &str, w: &Matrix, x: &[f32], n: usize) -> Vec<String> {
    let (ggml_type, rows, cols) = (w.ggml_type, w.rows, w.cols);
    let mut found = Vec::new();
    let expected = reference::matmul(w, x);
    let scale = expected.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    for accumulate in [false, true] {
        let start: Vec<f32> = (0..n * rows).map(|i| (i % 7) as f32).collect();
        let mut y = start.clone();
        matmul(w, x, &mut y, accumulate);
        for (i, (&got, &want)) in y.iter().zip(&expected).enumerate() {
            let want = want + if accumulate { f64::from(start[i]) } else { 0.0 };
            if (f64::from(got) - want).abs() > 1e-5 * scale.max(want.abs()) {
                found.push(format!(
                    "{label}{ggml_type} [{n}, {cols}] x [{rows}, {cols}]ᵀ, accumulate {accumulate}: y[{i}] = {got}, reference {want}"
                ));
            }
        }
    }
    found
}

/// Every output of `ops::attention` further than `1e-5` from the reference, described.
pub fn attention_mismatches() -> Vec<String> {
    let mut found = Vec::new();
    let mut rng = Rng(13);
    // (heads, kv heads, head width, position of the first query row, query rows); Qwen3.5's
    // attention shape (a prompt's tail over a cache), and keys in several chunks, a prompt's
    // rows and a decode step's row (`ops::keys_per_chunk`: 256 keys of 64).
    let shapes = [(4, 2, 8, 9, 3), (6, 3, 72, 33, 7), (8, 2, 256, 61, 3), (4, 1, 64, 600, 2), (6, 2, 64, 700, 1)];
    for (heads, kv_heads, hd, pos, rows) in shapes {
        let mut random = |len: usize| -> Vec<f32> { (0..len).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect() };
        let (keys, values) = (random((pos + rows) * kv_heads * hd), random((pos + rows) * kv_heads * hd));
        let q = random(rows * heads * hd);
        for window in [None, Some(4), Some(6), Some(300)] {
            let shape = AttentionShape { heads, kv_heads, head_dim: hd, scale: 1.0 / (hd as f32).sqrt(), window };
            let mut out = vec![0.0; q.len()];
            attention(&q, &KvRows::interleaved(&keys, &values, kv_heads, hd), pos, shape, &mut out);
            let expected = reference::attention(&q, &keys, &values, pos, shape);
            for (i, (&got, want)) in out.iter().zip(expected).enumerate() {
                if (f64::from(got) - want).abs() > 1e-5 {
                    found.push(format!("attention {heads}/{kv_heads} heads of {hd}, window {window:?}: out[{i}] = {got}, reference {want}"));
                }
            }
        }
    }
    found
}

/// Every value of `elementwise`'s functions, over rows (as the forward pass runs them, in
/// vector lanes), off from f64: `exp` by more than 2 ulp from below f32's smallest subnormal
/// result to past its largest, SwiGLU's and GeGLU's products by more than their rounding.
pub fn elementwise_mismatches() -> Vec<String> {
    use nucleus_cpu::elementwise::{exp, geglu_tanh, swiglu};
    let mut found = Vec::new();
    let xs: Vec<f32> = (0..=200_000).map(|i| -104.5 + f64::from(i) * (194.0 / 200_000.0)).map(|x| x as f32).collect();
    let exps: Vec<f32> = xs.iter().map(|&x| exp(x)).collect();
    for (&x, &got) in xs.iter().zip(&exps) {
        let want = f64::from(x).exp();
        let ulp = if want < f64::from(f32::MIN_POSITIVE) {
            f64::from(f32::from_bits(1))
        } else {
            f64::from((want as f32).next_up() - want as f32)
        };
        let off = if want > f64::from(f32::MAX) {
            if got == f32::INFINITY { 0.0 } else { f64::INFINITY }
        } else {
            (f64::from(got) - want).abs() / ulp
        };
        if off > 2.0 {
            found.push(format!("exp({x:e}) = {got:e}, f64 {want:e}: {off} ulp"));
        }
    }
    // Longer than `GATED_PARALLEL` (16,384): the products in chunks, spread over the threads.
    let gate: Vec<f32> = (0..20_495).map(|i| (i as f32 - 2049.0) / 128.0).collect();
    let up: Vec<f32> = gate.iter().map(|g| 0.75 - g / 8.0).collect();
    let (mut silu_rows, mut gelu_rows) = (gate.clone(), gate.clone());
    swiglu(&mut silu_rows, &up);
    geglu_tanh(&mut gelu_rows, &up);
    for ((&g, &u), (&silu, &gelu)) in gate.iter().zip(&up).zip(silu_rows.iter().zip(&gelu_rows)) {
        let (g, u) = (f64::from(g), f64::from(u));
        let two_u = 2.0 * (2.0 / std::f64::consts::PI).sqrt() * (g + 0.044715 * g * g * g);
        for (name, got, want, relative) in [
            ("swiglu", silu, g / (1.0 + (-g).exp()) * u, 5e-7),
            ("geglu", gelu, g / (1.0 + (-two_u).exp()) * u, 5e-7 * (1.0 + two_u.abs())),
        ] {
            if (f64::from(got) - want).abs() > relative * want.abs() + 1e-30 {
                found.push(format!("{name}({g}, {u}) = {got}, f64 {want}"));
            }
        }
    }
    found
}

/// How many outputs `tile_mismatches`, `scale_mismatches`, `mismatches`, `attention_mismatches`
/// and `elementwise_mismatches` find, and
/// the first five described, one per line (the wasm build's export): the text's length, in bytes,
/// written at `out` (`cap` bytes at most).
///
/// # Safety
/// `out` must point to `cap` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn failures(out: *mut u8, cap: usize) -> u64 {
    let found = [tile_mismatches(), scale_mismatches(), mismatches(), attention_mismatches(), elementwise_mismatches()]
        .concat();
    let text = found.iter().take(5).cloned().collect::<Vec<_>>().join("\n");
    let len = text.len().min(cap);
    // SAFETY: the caller provides `cap` bytes at `out`.
    unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), out, len) };
    ((found.len() as u64) << 32) | len as u64
}
