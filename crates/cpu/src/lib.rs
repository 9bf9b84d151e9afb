//! # nucleus-cpu: the CPU engine's kernels
//!
//! The products a forward pass spends its time in, on the CPU, over the weights as the GGUF file
//! stores them: no f32 copy of a matrix is ever made. [`matmul`] multiplies f32 activation rows by
//! a [`Matrix`] of GGUF blocks: each weight row is dequantized a tile of [`TILE`] values at a time
//! into a buffer on the stack (`nucleus_gguf::dequantize_into`, the one owner of every block
//! format), and the tile serves every activation row before the next is read, so a prefill of
//! `n` tokens reads the weights once. For one activation row (a decode step) the K-quant blocks
//! (Q4_K, Q5_K, Q6_K) and the 32-value formats' (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) go into integer
//! products against the row rounded to 24 bits per 256 values (the K-quants) or per 32
//! (`integer`: three signed bytes against the quants by `vpmaddubsw`, with AVX-VNNI and AVX-512
//! builds; relaxed SIMD's byte dot product in wasm, summed the way timed faster at load,
//! `ByteDot`; two 16-bit halves in plain wasm SIMD); where a build has none (x86 without AVX2, other CPUs)
//! Q4_1 blocks go straight into the f32 dot product (`Dot::add_q4_1`: the same sums as the
//! tile's, without its store and load). Activations are never rounded
//! to 8 bits (llama.cpp's CPU kernels do, which moves logits by up to ~0.6; the references here
//! allow 1e-3; 24 bits keep decode within 4e-5 of a recompute).
//!
//! **SIMD.** The inner loops are written so the compiler vectorises them (eight accumulators, a
//! tile of whole lanes): natively the kernel is compiled twice, for the baseline (SSE2 on x86-64)
//! and for AVX2 with FMA, and the widest build the CPU has is chosen at run time (`NUCLEUS_SIMD`
//! caps it); in wasm the module is built with `simd128`, and the threaded one a second time with
//! relaxed SIMD (fused multiply-adds, byte dot products).
//!
//! **Threads.** The rows of a product are spread over a small pool of our own whose helpers spin
//! between jobs (`threads.rs`: why, and the protocol): natively every core (`NUCLEUS_THREADS` to
//! choose), in the browser's threaded build one Web Worker per core (shared memory, so only in a
//! cross-origin isolated page), in the plain wasm build the calling thread alone.
//!
//! **Element-wise functions.** `elementwise` owns the pass's `eˣ` (and the sigmoid, SiLU, GELU
//! built on it): branch-free, so the loops over a row run in vector lanes, where `f32::exp` is a
//! call per value into the platform's maths library (in wasm a software one, 4x slower).
//!
//! Every kernel has a plain reference (`reference`: the matrix dequantized whole, f64 sums) and a
//! test against it on every format, on shapes that are not multiples of the vector width
//! (`tests/parity.rs`).
//!
//! **The limit.** `memory_bandwidth` (natively) measures what the machine reads from memory a second, on
//! one thread and on all: a decode step reads every weight once, so that over the model's bytes is
//! the most tokens a second any engine can decode here (`nucleus bench` prints it).

#[cfg(not(target_family = "wasm"))]
mod bandwidth;
pub mod delta_net;
mod dequant;
mod dot;
pub mod elementwise;
pub mod integer;
mod matmul;
pub mod ops;
pub mod reference;
mod threads;

#[cfg(not(target_family = "wasm"))]
pub use bandwidth::{Bandwidth, memory_bandwidth};
pub use integer::{ByteDot, byte_dot, byte_dot_choices, byte_dot_probe, set_byte_dot};
pub use matmul::{Matrix, TILE, matmul, matmuls, simd, tile_weights};
pub use threads::{alongside, for_each_chunk, for_each_task, threads};
#[cfg(all(target_family = "wasm", target_feature = "atomics"))]
pub use threads::{expect_helpers, help, helpers_running};
