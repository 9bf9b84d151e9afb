//! Speed of the CPU engine's product on each format: `cargo run --release -p nucleus-cpu
//! --example matmul_speed`. Prints, per format, one decode-shaped product (one activation row)
//! and one prefill-shaped product (32 rows) of a 1,536 × 576 matrix (SmolLM2's gate projection)
//! on the calling thread and on every thread: GMAC/s and weight bytes read per second. `-- ROWS
//! COLS [FORMAT]` measures another shape (`-- 262144 640 Q8_0`: Gemma 3's output layer, which
//! does not fit in a cache); `-- ROWS COLS FORMAT N` multiplies N activation rows instead (`-- 3584
//! 1024 Q4_K 512`: a 512-token prefill's gate projection in Qwen3.5-0.8B).

use std::time::Instant;

use nucleus_cpu::{Matrix, matmul};
use nucleus_gguf::GgmlType;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (rows, cols) = match &args[..] {
        [rows, cols, ..] => (rows.parse().expect("ROWS"), cols.parse().expect("COLS")),
        _ => (1536, 576),
    };
    let all = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
        GgmlType::F16,
        GgmlType::F32,
    ];
    let formats: Vec<GgmlType> = match args.get(2) {
        Some(name) => all.into_iter().filter(|t| t.to_string() == *name).collect(),
        None => all.to_vec(),
    };
    println!("{} threads, {}", nucleus_cpu::threads(), nucleus_cpu::simd());
    println!("{:>6} {:>5} {:>10} {:>10} {:>12}", "format", "rows", "µs", "GMAC/s", "weights GB/s");
    for ggml_type in formats {
        let cols = if ggml_type.block_layout().0 == 256 && cols % 256 != 0 { cols / 256 * 256 } else { cols };
        let (block, block_bytes) = ggml_type.block_layout();
        let bytes: Vec<u8> = (0..rows * cols / block as usize * block_bytes as usize)
            .map(|i| match ggml_type {
                // Finite scales: small f16/f32 values wherever a scale may sit.
                GgmlType::F32 => [0, 0, 0x80, 0x3c][i % 4],
                _ => (i * 37 % 251) as u8 & 0x3b,
            })
            .collect();
        let w = Matrix::new(ggml_type, &bytes, rows, cols).unwrap();
        let counts: Vec<usize> = match args.get(3) {
            Some(n) => vec![n.parse().expect("N")],
            None => vec![1, 32],
        };
        for n in counts {
            let x: Vec<f32> = (0..n * cols).map(|i| (i % 17) as f32 * 0.01).collect();
            let mut y = vec![0f32; n * rows];
            let runs = ((4e8 / (rows * cols * n) as f64) as usize).clamp(2, 400);
            matmul(&w, &x, &mut y, false);
            let start = Instant::now();
            for _ in 0..runs {
                matmul(&w, &x, &mut y, false);
            }
            let seconds = start.elapsed().as_secs_f64() / runs as f64;
            let macs = (rows * cols * n) as f64;
            println!(
                "{:>6} {n:>5} {:>10.1} {:>10.2} {:>12.2}",
                ggml_type.to_string(),
                seconds * 1e6,
                macs / seconds / 1e9,
                bytes.len() as f64 / seconds / 1e9
            );
        }
    }
}
