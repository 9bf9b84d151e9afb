//! Sampling parameters and their validation.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::error::{SamplerError, out_of_range};

/// DRY ("don't repeat yourself") parameters.
///
/// DRY penalises a token that would extend a sequence that already occurred in the context:
/// if the last `n` tokens also occurred earlier followed by token `t`, and `n >= allowed_length`,
/// then `t`'s logit is reduced by `multiplier · base^(n - allowed_length)`. The match is extended
/// backwards at most 50 tokens and never across a sequence breaker. This follows the reference
/// description of DRY (p-e-w's pull request #5677 to text-generation-webui); see
/// [`crate::penalties::dry_penalties`].
///
/// Sequence breakers are **token ids**: the sampler has no tokenizer, so the caller maps
/// breaker strings (the reference default is `"\n"`, `":"`, `"\""`, `"*"`) to the ids of the
/// tokens that encode them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DryParams {
    /// Strength; 0 turns DRY off. Finite, >= 0.
    pub multiplier: f64,
    /// Growth of the penalty per token of match beyond `allowed_length`. Finite, >= 1.
    pub base: f64,
    /// The longest repetition that goes unpenalised. >= 1.
    pub allowed_length: usize,
    /// Look only at the last this many tokens of the context; 0 = the whole context.
    pub penalty_last_n: usize,
    /// Token ids that break a match (the match never extends across them).
    pub sequence_breakers: BTreeSet<u32>,
    /// Whether the prompt is part of the context DRY searches (true, as in the reference).
    pub include_prompt: bool,
}

impl Default for DryParams {
    fn default() -> Self {
        Self {
            multiplier: 0.0,
            base: 1.75,
            allowed_length: 2,
            penalty_last_n: 0,
            sequence_breakers: BTreeSet::new(),
            include_prompt: true,
        }
    }
}

impl DryParams {
    /// The strings whose tokens break a repeated sequence unless the caller names others (the
    /// reference implementation's defaults): newline, colon, double quote, asterisk. The CLI's
    /// `--dry-sequence-breaker` and the JS API's `drySequenceBreakers` default to them; the
    /// tokenizer turns them into [`DryParams::sequence_breakers`].
    pub const DEFAULT_SEQUENCE_BREAKERS: [&'static str; 4] = ["\n", ":", "\"", "*"];

    /// Whether DRY does anything (`multiplier > 0`).
    pub fn is_enabled(&self) -> bool {
        self.multiplier > 0.0
    }
}

/// Everything that decides how a token is chosen from logits.
///
/// The defaults change nothing: temperature 1, no truncation, no penalties, no bias, seed 0.
/// See the crate documentation for the order in which these are applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    /// Softmax temperature; 0 means greedy (argmax, ties to the lowest id). Finite, >= 0.
    pub temperature: f64,
    /// Keep only the `top_k` most probable tokens; 0 = off.
    pub top_k: usize,
    /// Nucleus: keep the smallest prefix of the sorted distribution whose mass reaches `top_p`.
    /// In (0, 1]; 1 = off.
    pub top_p: f64,
    /// Keep tokens with `p >= min_p · p_max`. In [0, 1]; 0 = off.
    pub min_p: f64,
    /// Locally typical sampling: keep the tokens whose surprisal is closest to the entropy,
    /// up to mass `typical_p`. In (0, 1]; 1 = off.
    pub typical_p: f64,
    /// CTRL / Hugging Face repetition penalty θ: a seen token's logit is divided by θ if
    /// positive, multiplied by θ otherwise. Finite, > 0; 1 = off.
    pub repetition_penalty: f64,
    /// OpenAI presence penalty: subtracted once from every seen token's logit. Finite.
    pub presence_penalty: f64,
    /// OpenAI frequency penalty: subtracted once per occurrence. Finite.
    pub frequency_penalty: f64,
    /// Repetition, presence and frequency penalties look at the last this many tokens of the
    /// history only; 0 = the whole history.
    pub penalty_last_n: usize,
    /// Whether the prompt counts as history for the repetition, presence and frequency
    /// penalties (false: only generated tokens do).
    pub penalize_prompt: bool,
    /// DRY parameters (off by default).
    pub dry: DryParams,
    /// Additive bias per token id; -inf forbids the token. Ids must be in the vocabulary;
    /// values finite or -inf. (In JSON, -inf has no representation: serde_json writes `null`.)
    pub logit_bias: BTreeMap<u32, f64>,
    /// Seed of the ChaCha20 generator (see [`crate::rng`]).
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            typical_p: 1.0,
            repetition_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 0,
            penalize_prompt: false,
            dry: DryParams::default(),
            logit_bias: BTreeMap::new(),
            seed: 0,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding: temperature 0, everything else default.
    pub fn greedy() -> Self {
        Self { temperature: 0.0, ..Self::default() }
    }

    /// Whether this is greedy decoding (temperature 0).
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Whether any history-based penalty (repetition, presence, frequency, DRY) is active.
    pub fn has_penalties(&self) -> bool {
        self.repetition_penalty != 1.0
            || self.presence_penalty != 0.0
            || self.frequency_penalty != 0.0
            || self.dry.is_enabled()
    }

    /// Checks every parameter against its allowed range and the vocabulary size.
    ///
    /// The error names the parameter and the range, e.g. `top_p must be in (0, 1], got 1.5`.
    pub fn validate(&self, vocab_size: usize) -> Result<(), SamplerError> {
        if vocab_size == 0 {
            return Err(SamplerError::EmptyVocabulary);
        }
        self.validate_processing()?;
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return Err(out_of_range("repetition_penalty", "finite and > 0", self.repetition_penalty));
        }
        if !self.presence_penalty.is_finite() {
            return Err(out_of_range("presence_penalty", "finite", self.presence_penalty));
        }
        if !self.frequency_penalty.is_finite() {
            return Err(out_of_range("frequency_penalty", "finite", self.frequency_penalty));
        }
        let dry = &self.dry;
        if !(dry.multiplier.is_finite() && dry.multiplier >= 0.0) {
            return Err(out_of_range("dry_multiplier", "finite and >= 0", dry.multiplier));
        }
        if !(dry.base.is_finite() && dry.base >= 1.0) {
            return Err(out_of_range("dry_base", "finite and >= 1", dry.base));
        }
        if dry.allowed_length == 0 {
            return Err(out_of_range("dry_allowed_length", ">= 1", 0));
        }
        for &id in &dry.sequence_breakers {
            if id as usize >= vocab_size {
                return Err(SamplerError::BreakerIdOutOfVocabulary { id, vocab_size });
            }
        }
        for (&id, &value) in &self.logit_bias {
            if id as usize >= vocab_size {
                return Err(SamplerError::BiasIdOutOfVocabulary { id, vocab_size });
            }
            if value.is_nan() || value == f64::INFINITY {
                return Err(SamplerError::InvalidBias { id, value });
            }
        }
        Ok(())
    }

    /// Checks the parameters used after the logits are adjusted: temperature and truncation.
    /// (Part of [`Self::validate`]; [`crate::process`] calls only this.)
    pub fn validate_processing(&self) -> Result<(), SamplerError> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(out_of_range("temperature", "finite and >= 0", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(out_of_range("top_p", "in (0, 1]", self.top_p));
        }
        if !(self.min_p >= 0.0 && self.min_p <= 1.0) {
            return Err(out_of_range("min_p", "in [0, 1]", self.min_p));
        }
        if !(self.typical_p > 0.0 && self.typical_p <= 1.0) {
            return Err(out_of_range("typical_p", "in (0, 1]", self.typical_p));
        }
        Ok(())
    }
}

/// Parses one `--logit-bias` argument, `ID=BIAS` (`BIAS` a float, `-inf` allowed), into an
/// entry for [`SamplingParams::logit_bias`]. Range checks happen in
/// [`SamplingParams::validate`], which knows the vocabulary size.
pub fn parse_logit_bias(text: &str) -> Result<(u32, f64), SamplerError> {
    let syntax = || SamplerError::BiasSyntax { text: text.to_string() };
    let (id, bias) = text.split_once('=').ok_or_else(syntax)?;
    let id: u32 = id.trim().parse().map_err(|_| syntax())?;
    let bias: f64 = bias.trim().parse().map_err(|_| syntax())?;
    Ok((id, bias))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(params: &SamplingParams) -> String {
        params.validate(10).unwrap_err().to_string()
    }

    #[test]
    fn defaults_are_valid_and_neutral() {
        let p = SamplingParams::default();
        p.validate(1).unwrap();
        assert_eq!(p.temperature, 1.0);
        assert_eq!(p.top_k, 0);
        assert_eq!(p.top_p, 1.0);
        assert_eq!(p.min_p, 0.0);
        assert_eq!(p.typical_p, 1.0);
        assert_eq!(p.repetition_penalty, 1.0);
        assert_eq!(p.dry.base, 1.75);
        assert_eq!(p.dry.allowed_length, 2);
        assert!(!p.dry.is_enabled());
        assert!(!p.has_penalties());
        assert!(SamplingParams::greedy().is_greedy());
    }

    #[test]
    fn every_parameter_is_named_with_its_range() {
        let base = SamplingParams::default();
        let cases: Vec<(SamplingParams, &str)> = vec![
            (SamplingParams { top_p: 1.5, ..base.clone() }, "top_p must be in (0, 1], got 1.5"),
            (SamplingParams { top_p: 0.0, ..base.clone() }, "top_p must be in (0, 1], got 0"),
            (SamplingParams { temperature: -1.0, ..base.clone() }, "temperature must be finite and >= 0, got -1"),
            (SamplingParams { temperature: f64::NAN, ..base.clone() }, "temperature must be finite and >= 0, got NaN"),
            (
                SamplingParams { temperature: f64::INFINITY, ..base.clone() },
                "temperature must be finite and >= 0, got inf",
            ),
            (SamplingParams { min_p: 1.1, ..base.clone() }, "min_p must be in [0, 1], got 1.1"),
            (SamplingParams { typical_p: 0.0, ..base.clone() }, "typical_p must be in (0, 1], got 0"),
            (
                SamplingParams { repetition_penalty: 0.0, ..base.clone() },
                "repetition_penalty must be finite and > 0, got 0",
            ),
            (SamplingParams { presence_penalty: f64::NAN, ..base.clone() }, "presence_penalty must be finite, got NaN"),
            (
                SamplingParams { frequency_penalty: f64::NEG_INFINITY, ..base.clone() },
                "frequency_penalty must be finite, got -inf",
            ),
            (
                SamplingParams { dry: DryParams { multiplier: -0.5, ..DryParams::default() }, ..base.clone() },
                "dry_multiplier must be finite and >= 0, got -0.5",
            ),
            (
                SamplingParams { dry: DryParams { base: 0.5, ..DryParams::default() }, ..base.clone() },
                "dry_base must be finite and >= 1, got 0.5",
            ),
            (
                SamplingParams { dry: DryParams { allowed_length: 0, ..DryParams::default() }, ..base.clone() },
                "dry_allowed_length must be >= 1, got 0",
            ),
            (
                SamplingParams {
                    dry: DryParams { sequence_breakers: [10].into(), ..DryParams::default() },
                    ..base.clone()
                },
                "dry_sequence_breakers token id 10 is outside the vocabulary (ids 0..10)",
            ),
            (
                SamplingParams { logit_bias: [(10, 1.0)].into(), ..base.clone() },
                "logit_bias token id 10 is outside the vocabulary (ids 0..10)",
            ),
            (
                SamplingParams { logit_bias: [(3, f64::NAN)].into(), ..base.clone() },
                "logit_bias for token 3 must be finite or -inf, got NaN",
            ),
            (
                SamplingParams { logit_bias: [(3, f64::INFINITY)].into(), ..base.clone() },
                "logit_bias for token 3 must be finite or -inf, got inf",
            ),
        ];
        for (params, expected) in cases {
            assert_eq!(message(&params), expected);
        }
        assert_eq!(base.validate(0).unwrap_err().to_string(), "vocab_size must be >= 1, got 0");
        // -inf bias is allowed: it forbids the token.
        SamplingParams { logit_bias: [(3, f64::NEG_INFINITY)].into(), ..base }.validate(10).unwrap();
    }

    #[test]
    fn params_deserialise_with_defaults_for_missing_fields() {
        let p: SamplingParams =
            serde_json::from_str(r#"{"temperature":0.7,"top_k":40,"logit_bias":{"5":-2.5},"dry":{"multiplier":0.8}}"#)
                .unwrap();
        assert_eq!(p.temperature, 0.7);
        assert_eq!(p.top_k, 40);
        assert_eq!(p.top_p, 1.0);
        assert_eq!(p.logit_bias.get(&5), Some(&-2.5));
        assert_eq!(p.dry.multiplier, 0.8);
        assert_eq!(p.dry.base, 1.75);
        let round_trip: SamplingParams = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(round_trip, p);
    }

    #[test]
    fn logit_bias_parses_id_equals_bias() {
        assert_eq!(parse_logit_bias("42=-inf").unwrap(), (42, f64::NEG_INFINITY));
        assert_eq!(parse_logit_bias(" 7 = 2.5 ").unwrap(), (7, 2.5));
        assert!(parse_logit_bias("7").is_err());
        assert!(parse_logit_bias("x=1").is_err());
        assert!(parse_logit_bias("-1=1").is_err());
        assert_eq!(
            parse_logit_bias("7:1").unwrap_err().to_string(),
            "logit_bias entry \"7:1\" must look like ID=BIAS (e.g. 42=-inf or 7=2.5)"
        );
    }
}
