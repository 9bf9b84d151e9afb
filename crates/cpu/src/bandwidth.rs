//! What the machine reads from memory a second: the physical limit of a decode step, which
//! reads every weight once. `nucleus bench` prints it beside the speeds (a model of 98 MB on a
//! machine that streams 39 GB/s decodes at most about 400 tokens a second).

use std::time::Instant;

use crate::matmul::DECODE_TASKS_PER_THREAD;
use crate::threads::{for_each_task, threads};

/// Bytes each measurement reads: far more than any CPU's last-level cache.
const BUFFER_BYTES: usize = 256 << 20;

/// Passes over the buffer per measurement; the fastest counts (the first also warms the pages).
const PASSES: usize = 3;

/// Memory read a second, in bytes: on one thread, and on every thread the kernels use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bandwidth {
    pub one_thread: f64,
    pub all_threads: f64,
    /// The threads of `all_threads` ([`threads`]).
    pub threads: usize,
}

/// Reads a buffer of 256 MiB, on the calling thread, then spread over the pool as a decode
/// product is (a few long runs a thread): the fastest of three passes each.
pub fn memory_bandwidth() -> Bandwidth {
    let words: Vec<u64> = (0..BUFFER_BYTES / 8).map(|i| i as u64).collect();
    let one_thread = fastest(|| {
        std::hint::black_box(sum(&words));
    });
    let tasks = threads() * DECODE_TASKS_PER_THREAD;
    let all_threads = fastest(|| {
        for_each_task(words.chunks(words.len().div_ceil(tasks)).collect(), |run| {
            std::hint::black_box(sum(run));
        });
    });
    Bandwidth { one_thread, all_threads, threads: threads() }
}

/// Bytes a second of the fastest of [`PASSES`] calls of `read` (each reads the whole buffer).
fn fastest(read: impl Fn()) -> f64 {
    let seconds = (0..PASSES)
        .map(|_| {
            let start = Instant::now();
            read();
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    BUFFER_BYTES as f64 / seconds
}

/// The words' wrapping sum, in eight lanes (so the compiler reads them a vector at a time).
fn sum(words: &[u64]) -> u64 {
    let mut lanes = [0u64; 8];
    let mut chunks = words.chunks_exact(8);
    for chunk in &mut chunks {
        for (lane, &word) in lanes.iter_mut().zip(chunk) {
            *lane = lane.wrapping_add(word);
        }
    }
    let rest = chunks.remainder().iter().fold(0u64, |s, &w| s.wrapping_add(w));
    lanes.iter().fold(rest, |s, &l| s.wrapping_add(l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sum_reads_every_word() {
        let words: Vec<u64> = (0..1003).collect();
        assert_eq!(sum(&words), 1003 * 1002 / 2);
    }

    /// Whatever the machine, reading memory takes time and finishes: a finite, positive rate.
    #[test]
    fn bandwidth_is_a_finite_rate() {
        let measured = memory_bandwidth();
        for rate in [measured.one_thread, measured.all_threads] {
            assert!(rate.is_finite() && rate > 1e8, "{measured:?}");
        }
        assert_eq!(measured.threads, threads());
    }
}
