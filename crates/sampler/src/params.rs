//! Sampling parameters and their validation.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::error::{SamplerError, out_of_range};

/// Everything that decides how a token is chosen from logits.
///
/// The defaults change nothing: temperature 1, no truncation, no penalties, no bias, seed 0.
/// See the crate documentation for the order in which these are applied.
///
/// This struct is the one list of sampling options. Its serde form is the JS API's spelling
/// (`topP`, `dryMultiplier`, …; missing fields take their defaults), which the engine's request
/// parser reads (`nucleus_engine::GenerateRequest::from_json`); the CLI's flags take their defaults
/// from [`SamplingParams::default`]; the page's sliders are described by [`crate::knobs::KNOBS`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
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
    /// DRY ("don't repeat yourself") strength; 0 turns DRY off. Finite, >= 0.
    ///
    /// DRY penalises a token that would extend a sequence that already occurred in the context:
    /// if the last `n` tokens also occurred earlier followed by token `t`, and
    /// `n >= dry_allowed_length`, then `t`'s logit is reduced by
    /// `dry_multiplier · dry_base^(n - dry_allowed_length)`. The match is extended backwards at
    /// most 50 tokens and never across a sequence breaker. This follows the reference description
    /// of DRY (p-e-w's pull request #5677 to text-generation-webui); see
    /// [`crate::penalties::dry_penalties`].
    pub dry_multiplier: f64,
    /// Growth of DRY's penalty per token of match beyond `dry_allowed_length`. Finite, >= 1.
    pub dry_base: f64,
    /// The longest repetition DRY leaves unpenalised. >= 1.
    pub dry_allowed_length: usize,
    /// DRY looks only at the last this many tokens of the context; 0 = the whole context.
    pub dry_penalty_last_n: usize,
    /// Whether the prompt is part of the context DRY searches (true, as in the reference).
    pub dry_include_prompt: bool,
    /// Strings that break a DRY match: every token containing one of them is a breaker. The
    /// sampler has no tokenizer: whoever has one resolves these into
    /// [`SamplingParams::dry_breaker_ids`] (the engine does, when a generation starts).
    pub dry_sequence_breakers: Vec<String>,
    /// Token ids that break a DRY match (the match never extends across them).
    #[serde(skip)]
    pub dry_breaker_ids: BTreeSet<u32>,
    /// Additive bias per token id; -inf forbids the token. Ids must be in the vocabulary;
    /// values finite or -inf (in JSON, the string `"-Infinity"`).
    #[serde(with = "bias_json")]
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
            dry_multiplier: 0.0,
            dry_base: 1.75,
            dry_allowed_length: 2,
            dry_penalty_last_n: 0,
            dry_include_prompt: true,
            dry_sequence_breakers: Self::DEFAULT_DRY_SEQUENCE_BREAKERS.map(String::from).to_vec(),
            dry_breaker_ids: BTreeSet::new(),
            logit_bias: BTreeMap::new(),
            seed: 0,
        }
    }
}

impl SamplingParams {
    /// The strings whose tokens break a repeated sequence unless the caller names others (the
    /// reference implementation's defaults): newline, colon, double quote, asterisk.
    pub const DEFAULT_DRY_SEQUENCE_BREAKERS: [&'static str; 4] = ["\n", ":", "\"", "*"];

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
            || self.dry_enabled()
    }

    /// Whether DRY does anything (`dry_multiplier > 0`).
    pub fn dry_enabled(&self) -> bool {
        self.dry_multiplier > 0.0
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
        if !(self.dry_multiplier.is_finite() && self.dry_multiplier >= 0.0) {
            return Err(out_of_range("dry_multiplier", "finite and >= 0", self.dry_multiplier));
        }
        if !(self.dry_base.is_finite() && self.dry_base >= 1.0) {
            return Err(out_of_range("dry_base", "finite and >= 1", self.dry_base));
        }
        if self.dry_allowed_length == 0 {
            return Err(out_of_range("dry_allowed_length", ">= 1", 0));
        }
        if self.dry_sequence_breakers.iter().any(String::is_empty) {
            return Err(out_of_range("dry_sequence_breakers", "non-empty strings", "\"\""));
        }
        for &id in &self.dry_breaker_ids {
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

/// `logit_bias` in JSON: `{ "<token id>": bias }`, where a bias is a number or the string
/// `"-Infinity"` (forbid the token; JSON has no infinite numbers). Range checks are
/// [`SamplingParams::validate`]'s.
mod bias_json {
    use std::collections::BTreeMap;
    use std::fmt;

    use serde::de::{self, Visitor};
    use serde::ser::SerializeMap;
    use serde::{Deserialize, Deserializer, Serializer};

    const NEG_INFINITY: &str = "-Infinity";

    struct Bias(f64);

    impl<'de> Deserialize<'de> for Bias {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct BiasVisitor;
            impl Visitor<'_> for BiasVisitor {
                type Value = Bias;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    write!(f, "a finite number or \"{NEG_INFINITY}\"")
                }
                fn visit_f64<E: de::Error>(self, v: f64) -> Result<Bias, E> {
                    Ok(Bias(v))
                }
                fn visit_i64<E: de::Error>(self, v: i64) -> Result<Bias, E> {
                    Ok(Bias(v as f64))
                }
                fn visit_u64<E: de::Error>(self, v: u64) -> Result<Bias, E> {
                    Ok(Bias(v as f64))
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Bias, E> {
                    if v == NEG_INFINITY {
                        Ok(Bias(f64::NEG_INFINITY))
                    } else {
                        Err(E::invalid_value(de::Unexpected::Str(v), &self))
                    }
                }
            }
            deserializer.deserialize_any(BiasVisitor)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<BTreeMap<u32, f64>, D::Error> {
        let entries = BTreeMap::<u32, Bias>::deserialize(deserializer)?;
        Ok(entries.into_iter().map(|(id, Bias(bias))| (id, bias)).collect())
    }

    pub fn serialize<S: Serializer>(bias: &BTreeMap<u32, f64>, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(bias.len()))?;
        for (id, &value) in bias {
            if value == f64::NEG_INFINITY {
                map.serialize_entry(id, NEG_INFINITY)?;
            } else {
                map.serialize_entry(id, &value)?;
            }
        }
        map.end()
    }
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
        assert_eq!(p.dry_base, 1.75);
        assert_eq!(p.dry_allowed_length, 2);
        assert_eq!(p.dry_sequence_breakers, ["\n", ":", "\"", "*"]);
        assert!(!p.dry_enabled());
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
                SamplingParams { dry_multiplier: -0.5, ..base.clone() },
                "dry_multiplier must be finite and >= 0, got -0.5",
            ),
            (SamplingParams { dry_base: 0.5, ..base.clone() }, "dry_base must be finite and >= 1, got 0.5"),
            (SamplingParams { dry_allowed_length: 0, ..base.clone() }, "dry_allowed_length must be >= 1, got 0"),
            (
                SamplingParams { dry_breaker_ids: [10].into(), ..base.clone() },
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
    fn params_deserialise_from_the_js_spelling_with_defaults_for_missing_fields() {
        let p: SamplingParams = serde_json::from_str(
            r#"{"temperature":0.7,"topK":40,"logitBias":{"5":-2.5,"6":"-Infinity"},"dryMultiplier":0.8}"#,
        )
        .unwrap();
        assert_eq!((p.temperature, p.top_k, p.top_p), (0.7, 40, 1.0));
        assert_eq!(p.logit_bias, BTreeMap::from([(5, -2.5), (6, f64::NEG_INFINITY)]));
        assert_eq!((p.dry_multiplier, p.dry_base), (0.8, 1.75));
        // -inf survives the round trip (as "-Infinity"; JSON has no infinite numbers).
        let json = serde_json::to_string(&p).unwrap();
        assert!(json.contains(r#""6":"-Infinity""#), "{json}");
        let round_trip: SamplingParams = serde_json::from_str(&json).unwrap();
        assert_eq!(round_trip, p);
        let error = serde_json::from_str::<SamplingParams>(r#"{"logitBias":{"5":"Infinity"}}"#).unwrap_err();
        assert!(error.to_string().contains(r#"expected a finite number or "-Infinity""#), "{error}");
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
