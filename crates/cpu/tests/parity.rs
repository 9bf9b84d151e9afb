//! `matmul` on every format and `ops::attention` against the reference (`examples/kernel_parity.rs`,
//! which the wasm builds also run), and the embedding lookup against the same dequantization.

use nucleus_cpu::Matrix;
use nucleus_gguf::{GgmlType, dequantize};

#[path = "../examples/kernel_parity.rs"]
mod kernel_parity;

use kernel_parity::{Rng, TYPES, random_matrix, widths};

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
