//! The sampler's random numbers: ChaCha20, seeded from a `u64`, identical on every platform.
//!
//! The generator is `rand_chacha::ChaCha20Rng`, whose output stream is fixed by the ChaCha20
//! specification and is value-stable across platforms and crate releases. The 32-byte key is
//! the seed's 8 little-endian bytes followed by 24 zero bytes (no seed-expansion function in
//! between), so another implementation of ChaCha20 can reproduce the stream.
//!
//! A uniform draw takes one 64-bit output `x` and returns `(x >> 11) · 2^-53`: an exact
//! multiple of 2^-53 in `[0, 1)`, computed without any rounding.

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};

/// The portable, seeded random source of the sampler (ChaCha20, see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SamplerRng {
    inner: ChaCha20Rng,
}

impl SamplerRng {
    /// A generator whose key is `seed` in little-endian followed by 24 zero bytes.
    pub fn from_seed(seed: u64) -> Self {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        Self { inner: ChaCha20Rng::from_seed(key) }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }

    /// A uniform value in `[0, 1)`: the top 53 bits of [`Self::next_u64`] times 2^-53.
    pub fn next_f64(&mut self) -> f64 {
        const SCALE: f64 = 1.0 / (1u64 << 53) as f64;
        (self.next_u64() >> 11) as f64 * SCALE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_fixed() {
        // Recorded values: a change here means every seeded generation changes.
        let mut rng = SamplerRng::from_seed(0);
        let first = rng.next_u64();
        let mut again = SamplerRng::from_seed(0);
        assert_eq!(first, again.next_u64());
        let mut other = SamplerRng::from_seed(1);
        assert_ne!(first, other.next_u64());
        // ChaCha20 with an all-zero key and nonce: the first keystream block starts
        // 76 b8 e0 ad a0 f1 3d 90 (RFC 7539 test vector, block counter 0).
        assert_eq!(first, u64::from_le_bytes([0x76, 0xb8, 0xe0, 0xad, 0xa0, 0xf1, 0x3d, 0x90]));
    }

    #[test]
    fn uniform_values_are_in_range() {
        let mut rng = SamplerRng::from_seed(42);
        for _ in 0..10_000 {
            let u = rng.next_f64();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
