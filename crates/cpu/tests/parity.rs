//! `matmul` on every format, `ops::attention` and `elementwise` against the reference
//! (`examples/kernel_parity.rs`, which the wasm builds also run), and the embedding lookup against
//! the same dequantization.

use nucleus_cpu::Matrix;
use nucleus_gguf::{GgmlType, dequantize};

#[path = "../examples/kernel_parity.rs"]
mod kernel_parity;

use kernel_parity::{Rng, TYPES, random_matrix, widths};

#[test]
fn the_tiles_weights_are_the_references_bit_for_bit() {
    let found = kernel_parity::tile_mismatches();
    assert!(found.is_empty(), "{} formats off the reference, first: {:?}", found.len(), &found[..found.len().min(5)]);
}

#[test]
fn every_f16_as_a_blocks_scales_comes_out_as_the_references() {
    let found = kernel_parity::scale_mismatches();
    assert!(found.is_empty(), "{} scales off the reference, first: {:?}", found.len(), &found[..found.len().min(5)]);
}

#[test]
fn matmul_equals_the_dequantized_product_on_every_format() {
    let found = kernel_parity::mismatches();
    assert!(found.is_empty(), "{} outputs off the reference, first: {:?}", found.len(), &found[..found.len().min(5)]);
}

#[test]
fn attention_equals_the_f64_reference() {
    let found = kernel_parity::attention_mismatches();
    assert!(found.is_empty(), "{} outputs off the reference, first: {:?}", found.len(), &found[..found.len().min(5)]);
}

#[test]
fn the_elementwise_functions_over_rows_equal_f64() {
    let found = kernel_parity::elementwise_mismatches();
    assert!(found.is_empty(), "{} values off f64, first: {:?}", found.len(), &found[..found.len().min(5)]);
}

/// A prompt's rows are multiplied in blocks that stay in the cache (`matmul.rs`,
/// `x_rows_in_cache`: 64 rows of 2,048 values natively); every row's sums are the same, bit for
/// bit, as when its block is multiplied alone, and within the reference. (Q6_K, which goes through
/// the tile in every build, not in integers in lanes; the last block is more rows than go through
/// the integer kernel alone, `integer_rows_most`. Rows in lanes: `matmul.rs`'s own tests.)
#[test]
fn a_prompt_multiplied_in_blocks_of_rows_sums_each_row_as_alone() {
    let mut rng = Rng(17);
    let (rows, cols, n, first_block) = (9, 2048, 71, 64);
    let bytes = random_matrix(&mut rng, GgmlType::Q6K, rows, cols);
    let w = Matrix::new(GgmlType::Q6K, &bytes, rows, cols).unwrap();
    let x: Vec<f32> = (0..n * cols).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect();
    let mut whole = vec![0.0; n * rows];
    nucleus_cpu::matmul(&w, &x, &mut whole, false);
    let (mut head, mut tail) = (vec![0.0; first_block * rows], vec![0.0; (n - first_block) * rows]);
    nucleus_cpu::matmul(&w, &x[..first_block * cols], &mut head, false);
    nucleus_cpu::matmul(&w, &x[first_block * cols..], &mut tail, false);
    assert!(whole == [head, tail].concat(), "the rows' sums depend on the block they fall in");
    let expected = nucleus_cpu::reference::matmul(&w, &x);
    let scale = expected.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    let worst = whole.iter().zip(&expected).map(|(&got, want)| (f64::from(got) - want).abs()).fold(0.0, f64::max);
    assert!(worst <= 1e-5 * scale, "{worst} off the reference");
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
