//! # nucleus-sampler
//!
//! Everything between a model's logits and the chosen token, exact, seeded and explainable,
//! in pure Rust (no GPU, no tokenizer, no platform-specific maths), so it behaves identically
//! natively and in `wasm32-unknown-unknown`.
//!
//! ## The pipeline, in order
//!
//! One call to [`Sampler::sample`] runs these stages on one logit per vocabulary entry:
//!
//! 1. **Logit bias** ([`SamplingParams::logit_bias`]): added per token id; `-inf` forbids it.
//! 2. **Penalties** over the history ([`Sampler::set_prompt`], [`Sampler::accept`]): the
//!    generated tokens, plus the prompt if [`SamplingParams::penalize_prompt`], limited to the
//!    last [`SamplingParams::penalty_last_n`] tokens (0 = all), in this order:
//!    - repetition penalty θ (CTRL / Hugging Face): a seen token's logit is divided by θ if
//!      positive, multiplied by θ otherwise;
//!    - presence and frequency penalties (OpenAI): `z - count·frequency - [count>0]·presence`;
//!    - DRY ([`SamplingParams::dry_multiplier`] and the `dry_*` fields, with its own context
//!      window and sequence breakers): penalises a token that would extend
//!      a repeated n-gram by `multiplier · base^(match_length - allowed_length)`.
//! 3. **Mask** from a constraint ([`TokenMask`]): disallowed tokens are removed.
//! 4. **Temperature**: softmax of `adjusted / T` over the whole vocabulary, in f64, computed
//!    from `(a_i - a_max) / T`; `T = 0` is greedy (argmax, ties to the lowest id).
//! 5. **Truncation**, each filter on the renormalised survivors of the previous:
//!    top-k, top-p (nucleus), min-p, typical-p (see [`distribution`] for the exact rules).
//! 6. **Renormalise and draw** with a uniform number from the seeded ChaCha20 generator
//!    ([`SamplerRng`]).
//!
//! Stages 1–3 are [`adjust_logits`], 4–5 are [`process`], 6 is [`Distribution::draw`], and
//! [`explain()`] builds the step's [`Explanation`]; all four are pure functions, so the
//! visualiser can re-run stages 4–6 on cached adjusted logits with other parameters.
//!
//! ## Determinism
//!
//! The same seed and inputs give the same tokens on every platform and every run: the
//! generator is ChaCha20 with a documented seeding ([`rng`]), `exp` and `ln` are implemented
//! here with IEEE basic operations only ([`math`]), every sum runs in a fixed order, and the
//! draw walks the survivors in token-id order. Each `sample` call uses exactly one random
//! number.
//!
//! ## Finishing on the GPU's candidates
//!
//! When the GPU applies stages 1–3 ([`Sampler::gpu_adjustments`]) and returns only its top-K
//! adjusted logits with the softmax statistics, [`Sampler::sample_candidates`] finishes the
//! step from those ([`candidates`]) with the same token `sample` would choose, or says it
//! cannot (then sample from the full logits).
//!
//! ## Beyond sampling
//!
//! * [`stop`]: stop strings on streamed bytes, end-of-generation ids, token limit,
//!   [`FinishReason`].
//! * [`beam`]: beam search with length penalty and its search tree.
//! * [`speculative`]: the speculative-decoding acceptance rule and its ledger.
//! * [`json`]: the options' JSON form as the JS API spells it ([`SamplingParams::from_json`]),
//!   read with `null` as not given, unknown keys refused, and every error naming the option.

#![warn(missing_docs)]

pub mod adjustment;
pub mod beam;
pub mod candidates;
pub mod distribution;
pub mod error;
pub mod explain;
pub mod json;
pub mod knobs;
pub mod mask;
pub mod math;
pub mod params;
pub mod penalties;
pub mod rng;
pub mod sampler;
pub mod speculative;
pub mod stop;

pub use adjustment::LogitAdjustment;
pub use beam::{
    Beam, BeamNode, BeamSearch, BeamSearchParams, BeamSearchResult, BeamStepTrace, BeamTrace, Hypothesis, NodeStatus,
    beam_search,
};
pub use candidates::{
    CandidateDistribution, CandidateRule, CandidateSet, OwnedCandidateSet, SUM_EXP_RELATIVE_TOLERANCE,
    decide_from_candidates, decide_from_candidates_with_tolerance,
};
pub use distribution::{Distribution, RemovedBy, StageCounts, process};
pub use error::SamplerError;
pub use explain::{Candidate, Chosen, Explanation, MAX_EXPLAIN_TOP_N, explain};
pub use json::{OptionError, camel_case, camel_keys};
pub use mask::{AllowList, DenyList, TokenMask, TokenSet};
pub use math::{LogSoftmax, entropy, log_softmax, softmax, top_k_ids};
pub use params::{SamplingParams, parse_logit_bias};
pub use penalties::{AdjustedLogits, PenaltyHistory, adjust_logits};
pub use rng::SamplerRng;
pub use sampler::{SampleStep, Sampler};
pub use speculative::{DraftProbs, DraftToken, Ledger, LedgerEntry, Verdict, judge_point_draft, speculative_accept};
pub use stop::{Emitted, FinishReason, StopConditions, StopStreamer, StopTracker, TokenOutput};
