//! The one error type of the crate.

/// Everything that can go wrong in the sampler.
///
/// Parameter errors name the parameter and its allowed range, so a CLI can print them as they
/// are: `top_p must be in (0, 1], got 1.5`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplerError {
    /// A numeric parameter is outside its allowed range.
    #[error("{name} must be {allowed}, got {value}")]
    OutOfRange {
        /// The parameter's name as the CLI spells it in snake case (`top_p`, `dry_base`, ...).
        name: &'static str,
        /// The allowed range in words, e.g. `in (0, 1]`.
        allowed: &'static str,
        /// The rejected value, formatted.
        value: String,
    },

    /// The vocabulary size is zero.
    #[error("vocab_size must be >= 1, got 0")]
    EmptyVocabulary,

    /// A `logit_bias` entry names a token id outside the vocabulary.
    #[error("logit_bias token id {id} is outside the vocabulary (ids 0..{vocab_size})")]
    BiasIdOutOfVocabulary {
        /// The offending id.
        id: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },

    /// A `logit_bias` value is NaN or +inf (finite values and -inf are allowed).
    #[error("logit_bias for token {id} must be finite or -inf, got {value}")]
    InvalidBias {
        /// The token id the bias is for.
        id: u32,
        /// The rejected bias.
        value: f64,
    },

    /// A `logit_bias` entry could not be parsed from `ID=BIAS` text.
    #[error("logit_bias entry {text:?} must look like ID=BIAS (e.g. 42=-inf or 7=2.5)")]
    BiasSyntax {
        /// The text that failed to parse.
        text: String,
    },

    /// A DRY sequence-breaker token id is outside the vocabulary.
    #[error("dry_sequence_breakers token id {id} is outside the vocabulary (ids 0..{vocab_size})")]
    BreakerIdOutOfVocabulary {
        /// The offending id.
        id: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },

    /// A token id (prompt, accepted token, mask, draft, EOS id...) is outside the vocabulary.
    #[error("token id {id} is outside the vocabulary (ids 0..{vocab_size})")]
    TokenOutOfVocabulary {
        /// The offending id.
        id: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },

    /// The logits slice is empty.
    #[error("logits are empty")]
    EmptyLogits,

    /// The logits slice does not have one value per vocabulary entry.
    #[error("expected {expected} logits (one per vocabulary entry), got {got}")]
    LogitsLength {
        /// The vocabulary size.
        expected: usize,
        /// The length received.
        got: usize,
    },

    /// A logit is NaN or +inf (finite values and -inf, which forbids the token, are allowed).
    #[error("logit at id {id} is {value}; logits must be finite or -inf")]
    InvalidLogit {
        /// The token id.
        id: u32,
        /// The rejected value.
        value: f64,
    },

    /// Every token was excluded by the mask, a -inf logit, bias or penalty: nothing can be drawn.
    #[error("every token is excluded (by the mask or by -inf logits after bias and penalties); nothing can be sampled")]
    AllTokensExcluded,

    /// A probability distribution given to the crate (beam search, speculative decoding) is not
    /// one: a negative, NaN or infinite entry, or a total of zero.
    #[error("{what} is not a probability distribution: {reason}")]
    InvalidDistribution {
        /// Which distribution (e.g. `target distribution 2`).
        what: String,
        /// What is wrong with it.
        reason: String,
    },

    /// Inputs whose lengths must agree do not.
    #[error("{what}: expected {expected}, got {got}")]
    LengthMismatch {
        /// What was being counted.
        what: &'static str,
        /// The expected length.
        expected: usize,
        /// The length received.
        got: usize,
    },

    /// A drafted token has probability zero under its own draft distribution, so it cannot have
    /// been drawn from it.
    #[error("drafted token {id} at position {position} has draft probability 0")]
    ImpossibleDraft {
        /// Position in the draft (0-based).
        position: usize,
        /// The drafted token id.
        id: u32,
    },

    /// A [`crate::candidates::CandidateSet`] read back from the GPU is malformed (unsorted,
    /// duplicate ids, lengths that disagree, a `max` that is not the first candidate's logit,
    /// a non-finite or non-positive `sum_exp`...).
    #[error("invalid candidate set: {reason}")]
    InvalidCandidates {
        /// What is wrong with it.
        reason: String,
    },

    /// The GPU decode tail cannot reproduce these parameters (see
    /// [`crate::Sampler::gpu_path_available`]): sample from the full logits instead.
    #[error("the GPU sampling path is unavailable: {reason}")]
    GpuPathUnavailable {
        /// Why (e.g. DRY is enabled).
        reason: &'static str,
    },
}

/// Shorthand used by the validators: an [`SamplerError::OutOfRange`].
pub(crate) fn out_of_range(name: &'static str, allowed: &'static str, value: impl std::fmt::Display) -> SamplerError {
    SamplerError::OutOfRange { name, allowed, value: value.to_string() }
}
