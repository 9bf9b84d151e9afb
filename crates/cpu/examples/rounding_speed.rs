//! How long a decode step's activation row takes to round to integers (`IntegerRow::new`), which
//! the calling thread does before every integer product while the pool's helpers wait: `cargo run
//! --release -p nucleus-cpu --example rounding_speed`. Prints µs per row for the widths and scale
//! blocks of SmolLM2 (576 and 1,536 per 32 values) and of Gemma 3 1B (1,152 per 32, 6,912 per
//! 256).

use std::time::Instant;

use nucleus_cpu::integer::{BLOCK, IntegerRow, SUPER_BLOCK};

fn main() {
    for (cols, block) in [(576, BLOCK), (1536, BLOCK), (1152, BLOCK), (6912, SUPER_BLOCK)] {
        let x: Vec<f32> = (0..cols).map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 0.0131).collect();
        let runs = 20_000;
        let start = Instant::now();
        for _ in 0..runs {
            std::hint::black_box(IntegerRow::new(std::hint::black_box(&x), block));
        }
        let micros = start.elapsed().as_secs_f64() / runs as f64 * 1e6;
        println!("{cols:>6} values, a scale per {block:>3}: {micros:>6.2} µs");
    }
}
