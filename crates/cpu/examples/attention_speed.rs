//! Speed of the CPU engine's attention: `cargo run --release -p nucleus-cpu --example
//! attention_speed`. Prints, for one attention block of Qwen3.5-0.8B's shape (8 query heads, 2 KV
//! heads of 256), a 512-token prompt's attention over itself and one decode step's over 512
//! cached positions, on the pool's threads (`NUCLEUS_THREADS` to choose): milliseconds and GMAC/s
//! (the scores' and the weighted values' multiply-adds), the best of ten (a long context's decode
//! step over three ran up to 1.6x slower than over ten). `-- TOKENS` measures another length,
//! `-- TOKENS HEADS KV_HEADS HEAD_DIM LAYERS` another shape (`-- 1024 9 3 64 30`: SmolLM2's), its
//! decode step over LAYERS blocks' caches in turn, as a model's step reads them (a layer's keys
//! and values out of the cache by the time the step comes back to them), each KV head's rows
//! together as the engine's cache holds them.

use std::time::Instant;

use nucleus_cpu::ops::{AttentionShape, KvRows, attention};

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("a count")).collect();
    let tokens = args.first().copied().unwrap_or(512);
    let (heads, kv_heads, hd, layers) = match args[..] {
        [_, heads, kv_heads, hd, layers] => (heads, kv_heads, hd, layers),
        _ => (8, 2, 256, 1),
    };
    let value = |i: usize| ((i * 37 % 101) as f32 / 50.0) - 1.0;
    // Each block's keys and values as the engine's cache holds them: each KV head's rows together
    // (a block's keys, then its values: `2 · kv_heads` rows of heads).
    let heads_rows: Vec<Vec<Vec<f32>>> = (0..layers)
        .map(|layer| {
            (0..2 * kv_heads).map(|h| (0..tokens * hd).map(|i| value(i + layer + h * tokens * hd)).collect()).collect()
        })
        .collect();
    let cache: Vec<KvRows<'_>> = heads_rows
        .iter()
        .map(|heads| KvRows {
            keys: heads[..kv_heads].iter().map(Vec::as_slice).collect(),
            values: heads[kv_heads..].iter().map(Vec::as_slice).collect(),
            stride: hd,
        })
        .collect();
    let q: Vec<f32> = (0..tokens * heads * hd).map(|i| value(i + 3)).collect();
    let shape = AttentionShape { heads, kv_heads, head_dim: hd, scale: (hd as f32).sqrt().recip(), window: None };
    let mut out = vec![0.0; q.len()];
    let row = heads * hd;
    // Two products (scores, values) of `head_dim` per key each head sees.
    let prefill_macs = 2 * heads * hd * tokens * (tokens + 1) / 2;
    let decode_macs = 2 * heads * hd * tokens * layers;
    let best = |run: &mut dyn FnMut()| {
        (0..10)
            .map(|_| {
                let started = Instant::now();
                run();
                started.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    };
    let prefill = best(&mut || attention(&q, &cache[0], 0, shape, &mut out));
    let decode = best(&mut || {
        for kv in &cache {
            attention(&q[..row], kv, tokens - 1, shape, &mut out[..row]);
        }
    });
    println!("{} threads, {}", nucleus_cpu::threads(), nucleus_cpu::simd());
    println!(
        "prefill of {tokens} tokens {:.1} ms ({:.1} GMAC/s); decode at {tokens} over {layers} blocks {:.3} ms ({:.1} GMAC/s)",
        prefill * 1e3,
        prefill_macs as f64 / prefill / 1e9,
        decode * 1e3,
        decode_macs as f64 / decode / 1e9
    );
}
