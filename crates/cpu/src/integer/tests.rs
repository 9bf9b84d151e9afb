use super::*;

/// Random-looking blocks with sane scales (finite f16s of about 1e-3).
fn blocks(ggml_type: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let (block, block_bytes) = ggml_type.block_layout();
    let mut bytes: Vec<u8> =
        (0..rows * cols / block as usize * block_bytes as usize).map(|i| (i * 7919 % 251) as u8).collect();
    for b in bytes.chunks_exact_mut(block_bytes as usize) {
        let scale = 0x1400u16.to_le_bytes();
        match ggml_type {
            GgmlType::Q6K => b[208..210].copy_from_slice(&scale),
            GgmlType::Q8_0 => b[0..2].copy_from_slice(&scale),
            _ => {
                b[0..2].copy_from_slice(&scale);
                b[2..4].copy_from_slice(&0x1000u16.to_le_bytes());
            }
        }
    }
    bytes
}

/// Activations with an outlier per block, as Gemma's have.
fn activations(cols: usize) -> Vec<f32> {
    (0..cols)
        .map(|i| (i as f32 * 0.37).sin() * (1.0 + (i % 7) as f32) * if i % 256 == 3 { 300.0 } else { 1.0 })
        .collect()
}

/// `Σ w·x` of each row against the row dequantized whole, f64 sums.
fn exact(ggml_type: GgmlType, bytes: &[u8], rows: usize, x: &[f32]) -> Vec<(f64, f64)> {
    let cols = x.len();
    let mut dense = vec![0.0; rows * cols];
    assert!(nucleus_gguf::dequantize_into(ggml_type, bytes, &mut dense));
    dense
        .chunks_exact(cols)
        .map(|w| {
            let products = w.iter().zip(x).map(|(&a, &b)| f64::from(a) * f64::from(b));
            (products.clone().sum(), products.map(f64::abs).sum())
        })
        .collect()
}

/// Every format that goes through integers, and the row rounded as it reads it.
const FORMATS: [(GgmlType, usize); 8] = [
    (GgmlType::Q4K, SUPER_BLOCK),
    (GgmlType::Q5K, SUPER_BLOCK),
    (GgmlType::Q6K, SUPER_BLOCK),
    (GgmlType::Q4_0, BLOCK),
    (GgmlType::Q4_1, BLOCK),
    (GgmlType::Q5_0, BLOCK),
    (GgmlType::Q5_1, BLOCK),
    (GgmlType::Q8_0, BLOCK),
];

/// Every format with a scale per 32 values is one of the four unsigned layouts or Q8_0.
#[test]
fn the_unsigned_layouts_match_the_formats() {
    for (ggml_type, format) in [
        (GgmlType::Q4_0, Unsigned32::Q4_0),
        (GgmlType::Q4_1, Unsigned32::Q4_1),
        (GgmlType::Q5_0, Unsigned32::Q5_0),
        (GgmlType::Q5_1, Unsigned32::Q5_1),
    ] {
        assert_eq!(ggml_type.block_layout(), (BLOCK as u64, format.bytes as u64), "{ggml_type}");
        assert_eq!(format.nibbles + 16, format.bytes, "{ggml_type}: the nibbles end the block");
    }
}

/// The portable build against the block dequantized whole and an f64 sum: within the
/// rounding of 24 bits.
#[test]
fn integer_products_equal_the_dequantized_rows_within_the_rounding() {
    let (rows, cols) = (3, 768);
    let x = activations(cols);
    for (ggml_type, block) in FORMATS {
        let q = IntegerRow::new(&x, block);
        let bytes = blocks(ggml_type, rows, cols);
        let row_bytes = bytes.len() / rows;
        for (r, (exact, magnitude)) in exact(ggml_type, &bytes, rows, &x).into_iter().enumerate() {
            let got = f64::from(Portable::row_dot(ggml_type, &bytes[r * row_bytes..(r + 1) * row_bytes], &q));
            assert!(
                (got - exact).abs() <= 1e-6 * magnitude.max(1e-6),
                "{ggml_type} row {r}: {got} against {exact} (Σ|w·x| {magnitude})"
            );
        }
    }
}

/// The x86 builds (AVX2, with AVX-VNNI, AVX-512: those this CPU has) against the portable
/// one, on every format, every quant value (the blocks' bytes run through all 251 residues:
/// Q8_0's −128 among them) and the digits' extremes (−127 in each place, −128 in the lower
/// two); the 32-value formats on an even and an odd number of blocks (AVX-512 takes them in
/// pairs, an odd last one the AVX2 way), the K-quants on a row that AVX-512 prefetches and
/// one it does not.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_x86_builds_equal_the_portable_one() {
    use crate::matmul::X86;
    type Build = fn(GgmlType, &[u8], &IntegerRow) -> f32;
    let builds: [(&str, bool, Build); 3] = [
        ("AVX2", X86::Avx2.runs_here(), Avx2::row_dot),
        ("AVX-VNNI", X86::AvxVnni.runs_here(), Vnni::row_dot),
        ("AVX-512", X86::Avx512.runs_here(), Avx512::row_dot),
    ];
    let rows = 4;
    for (name, _, build) in builds.into_iter().filter(|(_, present, _)| *present) {
        for (ggml_type, block) in FORMATS {
            // K-quant rows of at least `PREFETCHED_ROW` values go through a loop of their own.
            let widths: &[usize] =
                if block == BLOCK { &[1024, 1024 + 3 * BLOCK] } else { &[1024, PREFETCHED_ROW + SUPER_BLOCK] };
            for &cols in widths {
                let mut x = activations(cols);
                x[300] = -x.iter().fold(0f32, |m, v| m.max(v.abs()));
                let q = IntegerRow::new(&x, block);
                assert!(q.digits[1..].iter().all(|place| place.contains(&-128)), "the lower digits reach −128");
                let bytes = blocks(ggml_type, rows, cols);
                let row_bytes = bytes.len() / rows;
                for (r, (_, magnitude)) in exact(ggml_type, &bytes, rows, &x).into_iter().enumerate() {
                    let row = &bytes[r * row_bytes..(r + 1) * row_bytes];
                    let (got, want) = (build(ggml_type, row, &q), Portable::row_dot(ggml_type, row, &q));
                    assert!(
                        f64::from((got - want).abs()) <= 1e-6 * magnitude,
                        "{ggml_type} {cols} wide, row {r}: {name} {got}, portable {want}"
                    );
                }
            }
        }
    }
}

/// A row rounded for products that include Q8_0 has AVX-512's Q8_0 offsets, as a row for
/// every format does; one for other formats alone has none, and reading it as Q8_0 panics.
#[cfg(target_arch = "x86_64")]
#[test]
fn only_a_row_for_q8_0_products_has_their_offsets() {
    let x = activations(1024);
    let every = IntegerRow::new(&x, BLOCK);
    let with = IntegerRow::for_types(&x, BLOCK, [GgmlType::Q5_0, GgmlType::Q8_0].into_iter());
    let without = IntegerRow::for_types(&x, BLOCK, [GgmlType::Q5_0].into_iter());
    assert!(without.q8_0_offsets.is_empty());
    assert_eq!(with.q8_0_offsets.len(), every.q8_0_offsets.len());
    if crate::matmul::X86::Avx512.runs_here() {
        assert_eq!(every.q8_0_offsets.len(), 1024 / 64);
        let bytes = blocks(GgmlType::Q8_0, 1, 1024);
        let read = std::panic::catch_unwind(|| Avx512::row_dot(GgmlType::Q8_0, &bytes, &without));
        assert!(read.is_err(), "a Q8_0 product of a row without its offsets");
    }
}

/// Each digit place starts on a cache line and holds exactly the row's values, a whole number
/// of lines or not; the digits read back are the values'.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_digits_start_on_a_cache_line() {
    for len in [32, 96, 256, 1056] {
        let q = IntegerRow::new(&activations(len), BLOCK);
        for place in &q.digits {
            assert_eq!((place.as_ptr() as usize % 64, place.len()), (0, len), "{len} values");
        }
        let value = |i: usize| i32::from(q.halves[0][i]) * 256 + i32::from(q.halves[1][i]);
        let digits = |i: usize| [0, 1, 2].map(|d| i32::from(q.digits[d][i])).into_iter().fold(0, |n, d| n * 256 + d);
        assert!((0..len).all(|i| digits(i) == value(i)), "{len} values");
    }
}

#[test]
fn every_value_rounds_to_its_nearest_step() {
    assert_eq!(
        [2.5, -2.5, 3.5, -3.5, 0.49, -0.51, 8_355_711.2, -8_355_711.2].map(nearest),
        [2, -2, 4, -4, 0, -1, 0x7F_7F7F, -0x7F_7F7F]
    );
    let x: Vec<f32> = (0..1024).map(|i| ((i * 7919 % 1013) as f32 - 506.0) * 3.7e-3 * (1 + i % 5) as f32).collect();
    for block in [BLOCK, SUPER_BLOCK] {
        let q = IntegerRow::new(&x, block);
        for (i, &v) in x.iter().enumerate() {
            let value = i32::from(q.halves[0][i]) * 256 + i32::from(q.halves[1][i]);
            let largest = x[i / block * block..][..block].iter().fold(0f32, |m, v| m.max(v.abs()));
            let steps = f64::from(v) / (f64::from(largest) / STEPS);
            assert!((f64::from(value) - steps).abs() <= 0.5 + 1e-6, "x[{i}] = {v}: {value} for {steps} steps");
        }
        let sums: Vec<f32> = x.chunks_exact(16).map(|c| c.iter().sum()).collect();
        assert!(q.sums.iter().zip(&sums).all(|(a, b)| (a - b).abs() <= 1e-5 * b.abs().max(1.0)));
    }
}

#[test]
fn a_zero_row_rounds_to_zero_and_the_largest_value_to_its_full_range() {
    let mut x = vec![0.0; 256];
    let q = IntegerRow::new(&x, SUPER_BLOCK);
    let value = |q: &IntegerRow, i: usize| i32::from(q.halves[0][i]) * 256 + i32::from(q.halves[1][i]);
    assert!((0..256).all(|i| value(&q, i) == 0) && q.scales == [1.0]);
    x[3] = -2.5;
    x[9] = 1.25;
    x[10] = 1e-5;
    let q = IntegerRow::new(&x, SUPER_BLOCK);
    assert_eq!((value(&q, 3), value(&q, 9)), (-0x7F_7F7F, 0x3F_BFC0));
    assert!((0..256).all(|i| (0..256).contains(&q.halves[1][i])));
    // A value five orders of magnitude below the block's largest keeps its digits: within
    // half a step (2.5 / 0x7F7F7F).
    assert!(((value(&q, 10) as f32 * q.scales[0]) - 1e-5).abs() < 1.6e-7);
    assert_eq!(q.sums[0], -1.25 + 1e-5);
    #[cfg(target_arch = "x86_64")]
    {
        let digits = |i: usize| {
            let [d0, d1, d2] = [0, 1, 2].map(|d| i32::from(q.digits[d][i]));
            d0 * 65536 + d1 * 256 + d2
        };
        assert!((0..256).all(|i| digits(i) == value(&q, i)));
        assert_eq!([0, 1, 2].map(|d| q.digits[d][3]), [-127, -127, -127]);
    }
}
