//! Constants shared with the shaders and the decoding of the packed result.

use crate::KernelError;

/// Invocations per workgroup in every shader (`@workgroup_size(256, 1, 1)`).
pub const WORKGROUP_SIZE: u32 = 256;
/// Largest K of the top-k (one selected entry per invocation in the ranking step).
pub const MAX_K: usize = 256;
/// Largest vocabulary: ids must fit the 24 bits the top-k radix select orders ties by.
pub const MAX_VOCAB: usize = 1 << 24;
/// Words before the top-k ids in a packed result: flags, max, sum_exp, count.
pub const HEADER_WORDS: usize = 4;
/// Ids per block record of `softmax_stats.wgsl` pass 0.
pub const BLOCK_LEN: u32 = 16;
/// Ids per chunk: the 256 blocks of one pass-0 workgroup (block `256c + l` holds the ids
/// `4096c + l + 256j`).
pub const CHUNK_LEN: u32 = WORKGROUP_SIZE * BLOCK_LEN;
/// Cap on the adjust kernel's workgroups (it loops over the rest).
#[cfg(feature = "gpu")]
pub const MAX_ADJUST_WORKGROUPS: u32 = 1024;
/// Cap on the probability pass's workgroups (it loops over the rest; the Burn route's `softmax`).
#[cfg(feature = "burn-ops")]
pub const MAX_PROBABILITY_WORKGROUPS: u32 = 64;

/// Flag bit: a logit is NaN.
pub const FLAG_NAN: u32 = 1;
/// Flag bit: a logit is `+inf`.
pub const FLAG_POSITIVE_INFINITY: u32 = 2;
/// Flag bit: no logit is finite (all `-inf`).
pub const FLAG_NO_FINITE: u32 = 4;

/// Words of a packed result for `k`: the header, `k` ids, `k` logits.
pub const fn packed_words(k: usize) -> usize {
    HEADER_WORDS + 2 * k
}

/// A packed result (`softmax_stats.wgsl` words 0..2, `topk.wgsl` words 3..), decoded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Packed {
    pub flags: u32,
    pub max: f32,
    pub sum_exp: f32,
    pub ids: Vec<u32>,
    pub logits: Vec<f32>,
}

/// The little-endian u32 words of a read-back buffer.
#[cfg(feature = "gpu")]
pub(crate) fn words_of(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect()
}

/// Turns flags into the error they stand for (NaN first, then `+inf`, then no finite logit).
pub(crate) fn check_flags(flags: u32) -> Result<(), KernelError> {
    if flags & FLAG_NAN != 0 {
        Err(KernelError::NanLogits)
    } else if flags & FLAG_POSITIVE_INFINITY != 0 {
        Err(KernelError::PositiveInfiniteLogits)
    } else if flags & FLAG_NO_FINITE != 0 {
        Err(KernelError::NoFiniteLogits)
    } else if flags != 0 {
        Err(KernelError::MalformedResult(format!("unknown flags {flags:#x}")))
    } else {
        Ok(())
    }
}

/// Decodes a packed result of `4 + 2k` words (`with_top_k`: words 3.. were written by the top-k
/// merge pass).
pub(crate) fn unpack(words: &[u32], k: usize, with_top_k: bool) -> Result<Packed, KernelError> {
    let expected = if with_top_k { packed_words(k) } else { HEADER_WORDS };
    if words.len() != expected {
        return Err(KernelError::MalformedResult(format!("expected {expected} words, read {}", words.len())));
    }
    let flags = words[0];
    check_flags(flags)?;
    let (ids, logits) = if with_top_k {
        let count = words[3] as usize;
        if count == 0 || count > k {
            return Err(KernelError::MalformedResult(format!("top-k count {count} for k = {k}")));
        }
        let ids = words[HEADER_WORDS..HEADER_WORDS + count].to_vec();
        let logits = words[HEADER_WORDS + k..HEADER_WORDS + k + count].iter().map(|&w| f32::from_bits(w)).collect();
        (ids, logits)
    } else {
        (Vec::new(), Vec::new())
    };
    Ok(Packed { flags, max: f32::from_bits(words[1]), sum_exp: f32::from_bits(words[2]), ids, logits })
}
