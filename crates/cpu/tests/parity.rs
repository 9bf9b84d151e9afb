//! `matmul` against the reference (the matrix dequantized whole by `nucleus-gguf`, f64 sums) on
//! every format the engine reads, random blocks, one and several activation rows, widths that are
//! not multiples of the tile or of eight lanes, more weight rows than one task holds; and the
//! embedding lookup against the same dequantization.

use nucleus_cpu::{Matrix, matmul, reference};
use nucleus_gguf::{GgmlType, dequantize};

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Random blocks of `ggml_type` for `rows × cols` values, with finite scales.
fn random_matrix(rng: &mut Rng, ggml_type: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let (block, block_bytes) = ggml_type.block_layout();
    let blocks = rows * cols / block as usize;
    let mut bytes: Vec<u8> = (0..blocks * block_bytes as usize).map(|_| rng.next() as u8).collect();
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

const TYPES: [GgmlType; 11] = [
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
fn widths(ggml_type: GgmlType) -> Vec<usize> {
    match ggml_type.block_layout().0 {
        1 => vec![13, 300, 640],
        32 => vec![96, 640],
        _ => vec![256, 768],
    }
}

#[test]
fn matmul_equals_the_dequantized_product_on_every_format() {
    let mut rng = Rng(7);
    for ggml_type in TYPES {
        for cols in widths(ggml_type) {
            let rows = 133;
            let bytes = random_matrix(&mut rng, ggml_type, rows, cols);
            let w = Matrix::new(ggml_type, &bytes, rows, cols).unwrap();
            for n in [1usize, 3, 5] {
                let x: Vec<f32> = (0..n * cols).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect();
                let expected = reference::matmul(&w, &x);
                let scale = expected.iter().fold(1.0f64, |m, v| m.max(v.abs()));
                for accumulate in [false, true] {
                    let start: Vec<f32> = (0..n * rows).map(|i| (i % 7) as f32).collect();
                    let mut y = start.clone();
                    matmul(&w, &x, &mut y, accumulate);
                    for (i, (&got, &want)) in y.iter().zip(&expected).enumerate() {
                        let want = want + if accumulate { f64::from(start[i]) } else { 0.0 };
                        assert!(
                            (f64::from(got) - want).abs() <= 1e-5 * scale.max(want.abs()),
                            "{ggml_type} [{n}, {cols}] x [{rows}, {cols}]ᵀ, accumulate {accumulate}: y[{i}] = {got}, reference {want}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_row_dequantizes_as_the_whole_matrix_does() {
    let mut rng = Rng(11);
    for ggml_type in TYPES {
        let cols = *widths(ggml_type).last().unwrap();
        let bytes = random_matrix(&mut rng, ggml_type, 5, cols);
        let w = Matrix::new(ggml_type, &bytes, 5, cols).unwrap();
        let whole = dequantize(ggml_type, &bytes, 5 * cols).unwrap();
        let mut row = vec![0.0; cols];
        w.dequantize_row(3, &mut row);
        assert_eq!(row, whole[3 * cols..4 * cols], "{ggml_type}");
    }
}

#[test]
fn a_matrix_that_is_not_whole_blocks_or_of_an_unread_type_is_refused() {
    assert!(Matrix::new(GgmlType::Q4_0, &[0; 18], 1, 32).is_ok());
    assert!(Matrix::new(GgmlType::Q4_0, &[0; 18], 1, 16).unwrap_err().contains("not whole blocks"));
    assert!(Matrix::new(GgmlType::Q4_0, &[0; 17], 1, 32).unwrap_err().contains("bytes for 1 rows"));
    assert!(Matrix::new(GgmlType::Iq4Nl, &[0; 18], 1, 32).unwrap_err().contains("cannot read IQ4_NL"));
}
