//! How long the sampler's work on one row of logits takes: the row's normaliser
//! ([`LogSoftmax::of`], every exponential of the row), a greedy draw, a default one
//! ([`Sampler::sample`] at temperature 1) and the playground's "balanced" one (temperature 0.7,
//! top-p 0.9), on a Gemma 3-sized row of 262,144 logits (or the count given), best of 20.
//!
//!     cargo run --release -p nucleus-sampler --example normaliser_speed [-- LOGITS]

use std::time::Instant;

use nucleus_sampler::{LogSoftmax, Sampler, SamplingParams};

/// Logits from a fixed sequence, roughly normal (a sum of four uniforms), spread like a language
/// model's: most tens of units below the largest.
fn logits(count: usize) -> Vec<f32> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut uniform = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 40) as f32 / (1u64 << 24) as f32
    };
    (0..count).map(|_| (uniform() + uniform() + uniform() + uniform() - 2.0) * 6.0).collect()
}

fn best_ms(mut run: impl FnMut()) -> f64 {
    (0..20)
        .map(|_| {
            let started = Instant::now();
            run();
            started.elapsed().as_secs_f64() * 1e3
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let count = std::env::args().nth(1).map_or(262_144, |n| n.parse().expect("a count of logits"));
    let row = logits(count);
    let mut norm = None;
    let normaliser = best_ms(|| norm = Some(LogSoftmax::of(&row).expect("finite logits")));
    let draw_ms = |params: SamplingParams| {
        let mut sampler = Sampler::new(params, count).expect("valid parameters");
        best_ms(|| {
            sampler.sample(&row, None, 0).expect("a draw");
        })
    };
    let greedy = draw_ms(SamplingParams::greedy());
    let draw = draw_ms(SamplingParams::default());
    let balanced = draw_ms(SamplingParams { temperature: 0.7, top_p: 0.9, ..SamplingParams::default() });
    println!(
        "{count} logits: normaliser {normaliser:.3} ms ({:.2} ns a logit), greedy draw {greedy:.3} ms, default draw {draw:.3} ms, temperature 0.7 and top-p 0.9 {balanced:.3} ms; log-probability of the first {:.17}",
        normaliser * 1e6 / count as f64,
        norm.expect("measured").at(row[0]),
    );
}
