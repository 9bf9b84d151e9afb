//! How a weight tensor lies in GPU memory for the layer kernels.
//!
//! Quantized tensors stay in their GGUF blocks, byte for byte (the upload is the file's bytes,
//! padded to a multiple of 4): the kernels read them as `u32` words and dequantize inside the
//! inner loop (`shaders/lib/formats/*.wgsl`). The K-quants are read in place too, rather than
//! repacked at load: in-place reading keeps one upload path for every type, costs no load time,
//! and unaligned blocks (Q6_K's 210 bytes, Q5_0's 22) only need the 2-aligned word reader that
//! Q4_0 and Q8_0 need anyway. F16 and BF16 tensors become F32 at upload (the browsers this project is
//! tested on have no `shader-f16`; they are rare in quantized files).

use nucleus_gguf::GgmlType;

/// A weight layout the layer kernels read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightFormat {
    /// f32 values (also F16 and BF16 tensors, converted at upload).
    F32,
    /// GGUF Q4_0 blocks (32 weights in 18 bytes).
    Q4_0,
    /// GGUF Q4_1 blocks (32 weights in 20 bytes).
    Q4_1,
    /// GGUF Q5_0 blocks (32 weights in 22 bytes).
    Q5_0,
    /// GGUF Q5_1 blocks (32 weights in 24 bytes).
    Q5_1,
    /// GGUF Q8_0 blocks (32 weights in 34 bytes).
    Q8_0,
    /// GGUF Q4_K blocks (256 weights in 144 bytes).
    Q4K,
    /// GGUF Q5_K blocks (256 weights in 176 bytes).
    Q5K,
    /// GGUF Q6_K blocks (256 weights in 210 bytes).
    Q6K,
}

impl WeightFormat {
    /// Every format, for tests and documentation.
    pub const ALL: [WeightFormat; 9] = [
        WeightFormat::F32,
        WeightFormat::Q4_0,
        WeightFormat::Q4_1,
        WeightFormat::Q5_0,
        WeightFormat::Q5_1,
        WeightFormat::Q8_0,
        WeightFormat::Q4K,
        WeightFormat::Q5K,
        WeightFormat::Q6K,
    ];

    /// The format a GGUF tensor of type `ggml_type` is uploaded in, or `None` for a type the
    /// kernels cannot read.
    pub fn for_ggml(ggml_type: GgmlType) -> Option<Self> {
        Some(match ggml_type {
            GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16 => WeightFormat::F32,
            GgmlType::Q4_0 => WeightFormat::Q4_0,
            GgmlType::Q4_1 => WeightFormat::Q4_1,
            GgmlType::Q5_0 => WeightFormat::Q5_0,
            GgmlType::Q5_1 => WeightFormat::Q5_1,
            GgmlType::Q8_0 => WeightFormat::Q8_0,
            GgmlType::Q4K => WeightFormat::Q4K,
            GgmlType::Q5K => WeightFormat::Q5K,
            GgmlType::Q6K => WeightFormat::Q6K,
            _ => return None,
        })
    }

    /// The GGUF type whose blocks this format holds (F32 for F32).
    pub fn ggml_type(self) -> GgmlType {
        match self {
            WeightFormat::F32 => GgmlType::F32,
            WeightFormat::Q4_0 => GgmlType::Q4_0,
            WeightFormat::Q4_1 => GgmlType::Q4_1,
            WeightFormat::Q5_0 => GgmlType::Q5_0,
            WeightFormat::Q5_1 => GgmlType::Q5_1,
            WeightFormat::Q8_0 => GgmlType::Q8_0,
            WeightFormat::Q4K => GgmlType::Q4K,
            WeightFormat::Q5K => GgmlType::Q5K,
            WeightFormat::Q6K => GgmlType::Q6K,
        }
    }

    /// `(elements, bytes)` of one block.
    pub fn block_layout(self) -> (u64, u64) {
        self.ggml_type().block_layout()
    }

    /// Bytes of one row of `cols` weights (`cols` a multiple of the block size and of 8).
    pub fn row_bytes(self, cols: u64) -> u64 {
        let (elements, bytes) = self.block_layout();
        cols / elements * bytes
    }

    /// Whether rows of `cols` weights can be read by the kernels: whole blocks, and whole units of
    /// 8 weights (an F32 matrix of 12 columns cannot).
    pub fn fits_row(self, cols: u64) -> bool {
        cols > 0 && cols.is_multiple_of(self.block_layout().0) && cols.is_multiple_of(8)
    }

    /// The GGUF type's name (`Q4_1`).
    pub fn name(self) -> &'static str {
        self.ggml_type().name()
    }
}

impl std::fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
