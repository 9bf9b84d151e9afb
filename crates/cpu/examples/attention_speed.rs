//! Speed of the CPU engine's attention: `cargo run --release -p nucleus-cpu --example
//! attention_speed`. Prints, for one attention block of Qwen3.5-0.8B's shape (8 query heads, 2 KV
//! heads of 256), a 512-token prompt's attention over itself and one decode step's over 512
//! cached positions, on the pool's threads (`NUCLEUS_THREADS` to choose): milliseconds and GMAC/s
//! (the scores' and the weighted values' multiply-adds), the best of three. `-- TOKENS` measures
//! another length.

use std::time::Instant;

use nucleus_cpu::ops::{AttentionShape, attention};

fn main() {
    let tokens: usize = std::env::args().nth(1).map_or(512, |t| t.parse().expect("TOKENS"));
    let (heads, kv_heads, hd) = (8, 2, 256);
    let value = |i: usize| ((i * 37 % 101) as f32 / 50.0) - 1.0;
    let keys: Vec<f32> = (0..tokens * kv_heads * hd).map(value).collect();
    let values: Vec<f32> = (0..tokens * kv_heads * hd).map(|i| value(i + 5)).collect();
    let q: Vec<f32> = (0..tokens * heads * hd).map(|i| value(i + 3)).collect();
    let shape = AttentionShape { heads, kv_heads, head_dim: hd, scale: 1.0 / 16.0, window: None };
    let mut out = vec![0.0; q.len()];
    let row = heads * hd;
    // Two products (scores, values) of `head_dim` per key each head sees.
    let prefill_macs = 2 * heads * hd * tokens * (tokens + 1) / 2;
    let decode_macs = 2 * heads * hd * tokens;
    let best = |run: &mut dyn FnMut()| {
        (0..3)
            .map(|_| {
                let started = Instant::now();
                run();
                started.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    };
    let prefill = best(&mut || attention(&q, &keys, &values, 0, shape, &mut out));
    let decode = best(&mut || attention(&q[..row], &keys, &values, tokens - 1, shape, &mut out[..row]));
    println!("{} threads, {}", nucleus_cpu::threads(), nucleus_cpu::simd());
    println!(
        "prefill of {tokens} tokens {:.1} ms ({:.1} GMAC/s); decode at {tokens} {:.3} ms ({:.1} GMAC/s)",
        prefill * 1e3,
        prefill_macs as f64 / prefill / 1e9,
        decode * 1e3,
        decode_macs as f64 / decode / 1e9
    );
}
