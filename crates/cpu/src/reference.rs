//! The plain reference of the kernels: the matrix dequantized whole (`nucleus_gguf::dequantize`),
//! the products summed in f64. The parity tests compare [`crate::matmul`] with it.

use crate::Matrix;

/// `x · Wᵀ` in f64 for `x`: `[n, w.cols]`; `[n, w.rows]`.
pub fn matmul(w: &Matrix, x: &[f32]) -> Vec<f64> {
    let values = nucleus_gguf::dequantize(w.ggml_type, w.bytes, w.rows * w.cols).expect("a readable type");
    x.chunks_exact(w.cols)
        .flat_map(|row| {
            values
                .chunks_exact(w.cols)
                .map(|weights| row.iter().zip(weights).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum::<f64>())
                .collect::<Vec<_>>()
        })
        .collect()
}
