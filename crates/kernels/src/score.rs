//! What a text's logits say about each of its tokens (`shaders/score.wgsl` on the fused path,
//! [`crate::reference::score_row`] everywhere else): per position, the row's log-sum-exp, the
//! logit and rank of the token that follows it in the text, and the row's top `k`. A position's
//! record is [`score_words`] words, so scoring a 2,000-token text on a 262k vocabulary reads back
//! about a hundred kilobytes instead of two gigabytes of rows.
//!
//! Semantics (the same on the GPU and in the reference):
//! - `log_sum_exp = m + ln Σ exp(x − m)` over the row, `m` its largest value;
//! - the rank of the following token `t` (logit `x_t`): `1 + #{j : x_j > x_t or (x_j = x_t and
//!   j < t)}`, so 1 is the most likely and ties go to the lower id, as in the top list;
//! - the top list: the `k` largest logits with their ids, descending, ties to the lower id;
//! - the entropy of the row's softmax in nats, `ln S − Σ e·(x − m) / S` with `e = exp(x − m)`,
//!   `S = Σ e`: how unsure the model was there (0: certain).
//!
//! The record, in `u32` words: `[log_sum_exp (f32 bits), the following token's logit (f32 bits),
//! its rank (0: no following token), the entropy (f32 bits)]`, then `k` pairs `(id, logit bits)`.

use crate::KernelError;

/// The one owner of [`MAX_SCORE_TOP_K`] (a macro, so `score.wgsl`'s `MAX_K` is made from the
/// same literal).
macro_rules! max_score_top_k {
    () => {
        20
    };
}
#[allow(unused_imports)] // Used by the GPU kernels only.
pub(crate) use max_score_top_k;

/// Most alternatives a scored position reports (the kernel keeps them per lane).
pub const MAX_SCORE_TOP_K: usize = max_score_top_k!();

/// The `targets` word of a position no token follows (the text's last).
pub const NO_TARGET: u32 = u32::MAX;

/// Words before a record's top list.
pub const SCORE_HEADER_WORDS: usize = 4;

/// Words of one position's record with a top list of `k`.
pub fn score_words(k: usize) -> usize {
    SCORE_HEADER_WORDS + 2 * k
}

/// Checks a top list's length: `0..=`[`MAX_SCORE_TOP_K`].
pub fn validate_score_k(k: usize) -> Result<(), KernelError> {
    if k <= MAX_SCORE_TOP_K {
        Ok(())
    } else {
        Err(KernelError::invalid("top_k", format!("must be in 0..={MAX_SCORE_TOP_K}, got {k}")))
    }
}

/// The token that follows a position, as its row rates it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TargetScore {
    /// The token.
    pub id: u32,
    /// Its logit in the row.
    pub logit: f32,
    /// 1 for the row's most likely token (ties to the lower id).
    pub rank: u32,
}

/// One position's row of logits, as much of it as scoring reads.
#[derive(Debug, Clone, PartialEq)]
pub struct RowScore {
    /// `ln Σ exp(logit)` over the vocabulary: `log p(x) = x − log_sum_exp`.
    pub log_sum_exp: f64,
    /// The entropy of the row's softmax, in nats.
    pub entropy: f64,
    /// The text's next token (none after its last).
    pub target: Option<TargetScore>,
    /// The row's largest logits `(id, logit)`, best first, ties to the lower id.
    pub top: Vec<(u32, f32)>,
}

impl RowScore {
    /// `log p` of a logit of this row.
    pub fn log_prob(&self, logit: f32) -> f64 {
        f64::from(logit) - self.log_sum_exp
    }

    /// A record as the kernel writes it ([`score_words`]`(k)` words), for the token `target`.
    pub fn from_words(words: &[u32], target: Option<u32>, k: usize) -> Result<Self, KernelError> {
        if words.len() != score_words(k) {
            let reason = format!("{} words, expected {}", words.len(), score_words(k));
            return Err(KernelError::MalformedResult(reason));
        }
        let f = |w: u32| f32::from_bits(w);
        let target = match target {
            None => None,
            Some(id) if words[2] == 0 => {
                return Err(KernelError::MalformedResult(format!("no rank for the following token {id}")));
            }
            Some(id) => Some(TargetScore { id, logit: f(words[1]), rank: words[2] }),
        };
        let top = words[SCORE_HEADER_WORDS..].chunks_exact(2).map(|pair| (pair[0], f(pair[1]))).collect();
        Ok(Self { log_sum_exp: f64::from(f(words[0])), entropy: f64::from(f(words[3])), target, top })
    }
}

#[cfg(test)]
mod tests {
    use crate::reference::{score_row, top_k};

    /// The reference's one-walk top list against `top_k`'s sort of the whole row, on rows full
    /// of ties (and of both zeros), and its rank against a count by that order.
    #[test]
    fn the_reference_walk_orders_like_a_sort_of_the_whole_row() {
        let mut seed = 7u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        for (len, k) in [(50usize, 20usize), (1000, 5), (7, 7), (300, 1)] {
            let row: Vec<f32> =
                (0..len).map(|_| [-0.0, 0.0, 1.5, -2.0, 3.0][next() as usize % 5] + (next() % 3) as f32).collect();
            let target = next() % len as u32;
            let score = score_row(&row, Some(target), k);
            let sorted = top_k(&row, k).unwrap();
            let expected: Vec<(u32, f32)> = sorted.ids.iter().copied().zip(sorted.logits.iter().copied()).collect();
            assert_eq!(score.top, expected, "{len} values, k {k}");
            let key = |id: u32| (std::cmp::Reverse(crate::reference::order_key(row[id as usize])), id);
            let rank = (0..len as u32).filter(|&id| key(id) < key(target)).count() as u32 + 1;
            assert_eq!(score.target.unwrap().rank, rank, "{len} values");
        }
    }
}
