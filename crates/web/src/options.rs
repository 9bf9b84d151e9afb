//! The JS API's generation options, checked at the boundary: every option is named in the error
//! that rejects it, in the JS spelling (`topP must be in (0, 1], got 1.5`).
//!
//! The worker sends the options as JSON. The page-side client writes non-finite numbers as the
//! strings `"NaN"`, `"Infinity"` and `"-Infinity"` (JSON has no such numbers), so that they are
//! rejected by name instead of silently becoming `null`; `-Infinity` is a valid logit bias.
//! `null` means "not given", as in OpenAI's API.

use std::collections::{BTreeMap, BTreeSet};

use nucleus_engine::{DEFAULT_MAX_TOKENS, DEFAULT_TOP_LOGPROBS, EngineError, GenerateRequest, Prompt};
use nucleus_sampler::{DryParams, SamplerError, SamplingParams};
use nucleus_tokenizer::ChatMessage;
use serde_json::{Map, Value};

/// A rejected option: its JS name and why.
#[derive(Debug, Clone, PartialEq)]
pub struct OptionError {
    pub option: String,
    pub message: String,
}

impl OptionError {
    fn new(option: &str, message: impl Into<String>) -> Self {
        Self { option: option.to_string(), message: message.into() }
    }
}

impl std::fmt::Display for OptionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

const KNOWN_OPTIONS: &[&str] = &[
    "prompt",
    "messages",
    "maxTokens",
    "temperature",
    "topK",
    "topP",
    "minP",
    "typicalP",
    "repetitionPenalty",
    "presencePenalty",
    "frequencyPenalty",
    "penaltyLastN",
    "penalizePrompt",
    "dryMultiplier",
    "dryBase",
    "dryAllowedLength",
    "dryPenaltyLastN",
    "drySequenceBreakers",
    "logitBias",
    "stop",
    "seed",
    "ignoreEos",
    "topLogprobs",
    "explain",
    "returnLogits",
];

/// Parses and checks the options of `lm.generate(...)` (JSON text) into an engine request.
/// `vocab_size` bounds `logitBias` ids; `breaker_tokens` gives the ids of the tokens that contain
/// any of DRY's sequence-breaker strings (the tokenizer's `tokens_containing`).
pub fn parse_generate_options(
    json: &str,
    vocab_size: usize,
    breaker_tokens: impl Fn(&[&str]) -> BTreeSet<u32>,
) -> Result<GenerateRequest, OptionError> {
    let value: Value = serde_json::from_str(json)
        .map_err(|e| OptionError::new("options", format!("options must be an object: {e}")))?;
    let Value::Object(options) = value else {
        return Err(OptionError::new("options", "options must be an object"));
    };
    if let Some(unknown) = options.keys().find(|key| !KNOWN_OPTIONS.contains(&key.as_str())) {
        return Err(OptionError::new(
            unknown,
            format!("unknown option {unknown:?} (known: {})", KNOWN_OPTIONS.join(", ")),
        ));
    }
    let reader = Reader(&options);

    let prompt = match (reader.get("prompt"), reader.get("messages")) {
        (Some(_), Some(_)) => return Err(OptionError::new("prompt", "give either prompt or messages, not both")),
        (None, None) => return Err(OptionError::new("prompt", "give a prompt (text) or messages (a chat)")),
        (Some(_), None) => Prompt::Text(reader.string("prompt")?.expect("present")),
        (None, Some(_)) => Prompt::Chat(reader.messages()?),
    };
    let mut request = GenerateRequest::new(prompt);
    request.max_tokens = reader.count("maxTokens")?.unwrap_or(DEFAULT_MAX_TOKENS);
    request.top_logprobs = reader.count("topLogprobs")?.unwrap_or(DEFAULT_TOP_LOGPROBS);
    request.explain_top_n = reader.count("explain")?.unwrap_or(0);
    request.ignore_eos = reader.boolean("ignoreEos")?.unwrap_or(false);
    request.return_logits = reader.boolean("returnLogits")?.unwrap_or(false);
    request.stop = reader.stop()?;

    let defaults = SamplingParams::default();
    let sampling = SamplingParams {
        temperature: reader.number("temperature")?.unwrap_or(defaults.temperature),
        top_k: reader.count("topK")?.unwrap_or(defaults.top_k),
        top_p: reader.number("topP")?.unwrap_or(defaults.top_p),
        min_p: reader.number("minP")?.unwrap_or(defaults.min_p),
        typical_p: reader.number("typicalP")?.unwrap_or(defaults.typical_p),
        repetition_penalty: reader.number("repetitionPenalty")?.unwrap_or(defaults.repetition_penalty),
        presence_penalty: reader.number("presencePenalty")?.unwrap_or(defaults.presence_penalty),
        frequency_penalty: reader.number("frequencyPenalty")?.unwrap_or(defaults.frequency_penalty),
        penalty_last_n: reader.count("penaltyLastN")?.unwrap_or(defaults.penalty_last_n),
        penalize_prompt: reader.boolean("penalizePrompt")?.unwrap_or(defaults.penalize_prompt),
        dry: reader.dry(&breaker_tokens)?,
        logit_bias: reader.logit_bias()?,
        seed: reader.seed()?.unwrap_or(defaults.seed),
        ..defaults
    };
    request.sampling = sampling;
    request.validate(vocab_size).map_err(engine_option_error)?;
    Ok(request)
}

/// An engine or sampler parameter error, renamed to the JS option.
fn engine_option_error(error: EngineError) -> OptionError {
    let (snake, message) = match &error {
        EngineError::BadOption { name, .. } => (name.to_string(), error.to_string()),
        EngineError::Sampler(SamplerError::OutOfRange { name, .. }) => (name.to_string(), error.to_string()),
        EngineError::Sampler(
            SamplerError::BiasIdOutOfVocabulary { .. }
            | SamplerError::InvalidBias { .. }
            | SamplerError::BiasSyntax { .. },
        ) => ("logit_bias".to_string(), error.to_string()),
        _ => ("options".to_string(), error.to_string()),
    };
    let camel = camel_case(&snake);
    OptionError { message: message.replace(&snake, &camel), option: camel }
}

/// `top_p` -> `topP`.
pub fn camel_case(snake: &str) -> String {
    let mut out = String::with_capacity(snake.len());
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// Reads typed options out of the JSON object, naming the option in every error.
struct Reader<'a>(&'a Map<String, Value>);

impl Reader<'_> {
    /// The option's value; `null` counts as absent.
    fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    fn number(&self, name: &str) -> Result<Option<f64>, OptionError> {
        match self.get(name) {
            None => Ok(None),
            Some(value) => finite_number(value)
                .map(Some)
                .ok_or_else(|| OptionError::new(name, format!("{name} must be a finite number, got {}", shown(value)))),
        }
    }

    /// A non-negative integer.
    fn count(&self, name: &str) -> Result<Option<usize>, OptionError> {
        match self.get(name) {
            None => Ok(None),
            Some(value) => value
                .as_f64()
                .filter(|n| n.fract() == 0.0 && *n >= 0.0 && *n <= u32::MAX as f64)
                .map(|n| Some(n as usize))
                .ok_or_else(|| {
                    OptionError::new(name, format!("{name} must be a whole number >= 0, got {}", shown(value)))
                }),
        }
    }

    fn boolean(&self, name: &str) -> Result<Option<bool>, OptionError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(value) => Err(OptionError::new(name, format!("{name} must be true or false, got {}", shown(value)))),
        }
    }

    fn string(&self, name: &str) -> Result<Option<String>, OptionError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(value) => Err(OptionError::new(name, format!("{name} must be a string, got {}", shown(value)))),
        }
    }

    fn messages(&self) -> Result<Vec<ChatMessage>, OptionError> {
        let invalid = |what: String| OptionError::new("messages", what);
        let Some(Value::Array(items)) = self.get("messages") else {
            return Err(invalid("messages must be an array of { role, content }".into()));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let role = item.get("role").and_then(Value::as_str);
                let content = item.get("content").and_then(Value::as_str);
                match (role, content) {
                    (Some(role @ ("system" | "user" | "assistant")), Some(content)) => {
                        Ok(ChatMessage::new(role, content))
                    }
                    (Some(role), Some(_)) => {
                        Err(invalid(format!("messages[{i}].role must be system, user or assistant, got {role:?}")))
                    }
                    _ => Err(invalid(format!(
                        "messages[{i}] must be {{ role, content }} with string values, got {item}"
                    ))),
                }
            })
            .collect()
    }

    /// A string or an array of strings.
    fn strings(&self, name: &str) -> Result<Option<Vec<String>>, OptionError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(vec![s.clone()])),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| {
                    item.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| OptionError::new(name, format!("{name} must hold strings, got {item}")))
                })
                .collect::<Result<_, _>>()
                .map(Some),
            Some(value) => Err(OptionError::new(
                name,
                format!("{name} must be a string or an array of strings, got {}", shown(value)),
            )),
        }
    }

    fn stop(&self) -> Result<Vec<String>, OptionError> {
        Ok(self.strings("stop")?.unwrap_or_default())
    }

    /// DRY: off unless `dryMultiplier` > 0; the breakers' tokens are looked up only then.
    fn dry(&self, breaker_tokens: &dyn Fn(&[&str]) -> BTreeSet<u32>) -> Result<DryParams, OptionError> {
        let defaults = DryParams::default();
        let multiplier = self.number("dryMultiplier")?.unwrap_or(defaults.multiplier);
        let breakers = self.strings("drySequenceBreakers")?;
        let sequence_breakers = if multiplier > 0.0 {
            match &breakers {
                Some(strings) => breaker_tokens(&strings.iter().map(String::as_str).collect::<Vec<_>>()),
                None => breaker_tokens(&DryParams::DEFAULT_SEQUENCE_BREAKERS),
            }
        } else {
            BTreeSet::new()
        };
        Ok(DryParams {
            multiplier,
            base: self.number("dryBase")?.unwrap_or(defaults.base),
            allowed_length: self.count("dryAllowedLength")?.unwrap_or(defaults.allowed_length),
            penalty_last_n: self.count("dryPenaltyLastN")?.unwrap_or(defaults.penalty_last_n),
            sequence_breakers,
            ..defaults
        })
    }

    /// `{ "<token id>": bias }`; a bias is a finite number or `-Infinity` (forbid the token).
    fn logit_bias(&self) -> Result<BTreeMap<u32, f64>, OptionError> {
        let invalid = |what: String| OptionError::new("logitBias", what);
        let Some(value) = self.get("logitBias") else {
            return Ok(BTreeMap::new());
        };
        let Value::Object(entries) = value else {
            return Err(invalid(format!("logitBias must be an object {{ tokenId: bias }}, got {}", shown(value))));
        };
        entries
            .iter()
            .map(|(key, bias)| {
                let id: u32 =
                    key.parse().map_err(|_| invalid(format!("logitBias keys must be token ids, got {key:?}")))?;
                let bias = match bias {
                    Value::String(s) if s == "-Infinity" => f64::NEG_INFINITY,
                    other => finite_number(other).ok_or_else(|| {
                        invalid(format!("logitBias[{id}] must be a finite number or -Infinity, got {}", shown(other)))
                    })?,
                };
                Ok((id, bias))
            })
            .collect()
    }

    /// A whole number in 0..=2^53 (the integers a JS number holds exactly).
    fn seed(&self) -> Result<Option<u64>, OptionError> {
        const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;
        match self.get("seed") {
            None => Ok(None),
            Some(value) => value
                .as_f64()
                .filter(|n| n.fract() == 0.0 && (0.0..=MAX_SAFE_INTEGER).contains(n))
                .map(|n| Some(n as u64))
                .ok_or_else(|| {
                    OptionError::new("seed", format!("seed must be a whole number in 0..=2^53-1, got {}", shown(value)))
                }),
        }
    }
}

fn finite_number(value: &Value) -> Option<f64> {
    value.as_f64().filter(|n| n.is_finite())
}

/// A rejected value as the user wrote it (non-finite numbers arrive as strings).
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) if matches!(s.as_str(), "NaN" | "Infinity" | "-Infinity") => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VOCAB: usize = 49_152;

    /// A stand-in for the tokenizer: the token containing breaker `s` is `s.len()`.
    fn parse(json: &str) -> Result<GenerateRequest, OptionError> {
        parse_generate_options(json, VOCAB, |breakers| breakers.iter().map(|s| s.len() as u32 + 1000).collect())
    }

    fn rejected(json: &str) -> OptionError {
        parse(json).expect_err(json)
    }

    #[test]
    fn every_option_reaches_the_request() {
        let request = parse(
            r#"{"prompt":"Hi","maxTokens":7,"temperature":0.7,"topK":40,"topP":0.9,"minP":0.05,"typicalP":0.95,
                "repetitionPenalty":1.1,"presencePenalty":0.5,"frequencyPenalty":0.25,"penaltyLastN":64,
                "penalizePrompt":true,"logitBias":{"2":"-Infinity","42":1.5},"stop":["\n\n","END"],"seed":9007199254740991,
                "ignoreEos":true,"topLogprobs":256,"explain":30,"returnLogits":true}"#,
        )
        .unwrap();
        assert_eq!(request.prompt, Prompt::Text("Hi".into()));
        assert_eq!(
            (request.max_tokens, request.top_logprobs, request.explain_top_n, request.ignore_eos),
            (7, 256, 30, true)
        );
        assert!(request.return_logits);
        assert_eq!(request.stop, vec!["\n\n".to_string(), "END".to_string()]);
        let s = &request.sampling;
        assert_eq!((s.temperature, s.top_k, s.top_p, s.min_p, s.typical_p), (0.7, 40, 0.9, 0.05, 0.95));
        assert_eq!((s.repetition_penalty, s.presence_penalty, s.frequency_penalty), (1.1, 0.5, 0.25));
        assert_eq!((s.penalty_last_n, s.penalize_prompt, s.seed), (64, true, 9_007_199_254_740_991));
        assert_eq!(s.logit_bias, BTreeMap::from([(2, f64::NEG_INFINITY), (42, 1.5)]));
    }

    #[test]
    fn dry_reaches_the_request_with_the_default_breakers_or_given_ones() {
        let request =
            parse(r#"{"prompt":"Hi","dryMultiplier":0.8,"dryBase":2,"dryAllowedLength":3,"dryPenaltyLastN":100}"#)
                .unwrap();
        let dry = &request.sampling.dry;
        assert_eq!((dry.multiplier, dry.base, dry.allowed_length, dry.penalty_last_n), (0.8, 2.0, 3, 100));
        // The default strings are 1 byte each.
        assert_eq!(dry.sequence_breakers, BTreeSet::from([1001]));
        let given = parse(r#"{"prompt":"Hi","dryMultiplier":0.8,"drySequenceBreakers":["ab","xyz"]}"#).unwrap();
        assert_eq!(given.sampling.dry.sequence_breakers, BTreeSet::from([1002, 1003]));
        let off = parse(r#"{"prompt":"Hi","drySequenceBreakers":"x"}"#).unwrap();
        assert_eq!(off.sampling.dry, DryParams::default());
        let error = rejected(r#"{"prompt":"a","dryBase":0.5,"dryMultiplier":1}"#);
        assert_eq!(error.option, "dryBase");
        assert!(error.message.starts_with("dryBase must be"), "{}", error.message);
    }

    #[test]
    fn defaults_and_null_mean_not_given() {
        let request = parse(r#"{"messages":[{"role":"user","content":"Hi"}],"temperature":null,"stop":"x"}"#).unwrap();
        assert_eq!(request.prompt, Prompt::Chat(vec![ChatMessage::user("Hi")]));
        assert_eq!((request.max_tokens, request.top_logprobs, request.explain_top_n), (DEFAULT_MAX_TOKENS, 20, 0));
        assert_eq!(request.sampling, SamplingParams::default());
        assert_eq!(request.stop, vec!["x".to_string()]);
    }

    #[test]
    fn each_bad_option_is_named_in_js_spelling() {
        let cases = [
            (r#"{"prompt":"a","topP":1.5}"#, "topP", "topP must be in (0, 1], got 1.5"),
            (r#"{"prompt":"a","temperature":-1}"#, "temperature", "temperature must be finite and >= 0, got -1"),
            (r#"{"prompt":"a","temperature":"NaN"}"#, "temperature", "temperature must be a finite number, got NaN"),
            (
                r#"{"prompt":"a","temperature":"hot"}"#,
                "temperature",
                "temperature must be a finite number, got \"hot\"",
            ),
            (r#"{"prompt":"a","minP":2}"#, "minP", "minP must be in [0, 1], got 2"),
            (r#"{"prompt":"a","typicalP":0}"#, "typicalP", "typicalP must be in (0, 1], got 0"),
            (
                r#"{"prompt":"a","repetitionPenalty":0}"#,
                "repetitionPenalty",
                "repetitionPenalty must be finite and > 0, got 0",
            ),
            (r#"{"prompt":"a","topK":2.5}"#, "topK", "topK must be a whole number >= 0, got 2.5"),
            (r#"{"prompt":"a","maxTokens":0}"#, "maxTokens", "invalid option maxTokens: must be >= 1, got 0"),
            (
                r#"{"prompt":"a","topLogprobs":257}"#,
                "topLogprobs",
                "invalid option topLogprobs: must be 0..=256, got 257",
            ),
            (r#"{"prompt":"a","seed":-1}"#, "seed", "seed must be a whole number in 0..=2^53-1, got -1"),
            (
                r#"{"prompt":"a","logitBias":{"49152":1}}"#,
                "logitBias",
                "logitBias token id 49152 is outside the vocabulary (ids 0..49152)",
            ),
            (
                r#"{"prompt":"a","logitBias":{"7":"Infinity"}}"#,
                "logitBias",
                "logitBias[7] must be a finite number or -Infinity, got Infinity",
            ),
            (r#"{"prompt":"a","logitBias":{"x":1}}"#, "logitBias", "logitBias keys must be token ids, got \"x\""),
            (r#"{"prompt":"a","stop":[""]}"#, "stop", "invalid option stop: must be non-empty strings, got \"\""),
            (r#"{"prompt":"a","stop":3}"#, "stop", "stop must be a string or an array of strings, got 3"),
            (r#"{"prompt":"a","ignoreEos":1}"#, "ignoreEos", "ignoreEos must be true or false, got 1"),
            (r#"{"prompt":""}"#, "prompt", "invalid option prompt: must be non-empty text, got \"\""),
            (r#"{"prompt":"a","temprature":1}"#, "temprature", "unknown option \"temprature\""),
            (r#"{}"#, "prompt", "give a prompt (text) or messages (a chat)"),
            (r#"{"prompt":"a","messages":[]}"#, "prompt", "give either prompt or messages, not both"),
            (
                r#"{"messages":[{"role":"robot","content":"x"}]}"#,
                "messages",
                "messages[0].role must be system, user or assistant, got \"robot\"",
            ),
            (r#"{"messages":[]}"#, "messages", "invalid option messages: must be at least one message, got []"),
            (r#"[1]"#, "options", "options must be an object"),
        ];
        for (json, option, message) in cases {
            let error = rejected(json);
            assert_eq!(error.option, option, "{json}");
            assert!(error.message.starts_with(message), "{json}: {:?} does not start with {message:?}", error.message);
        }
    }

    #[test]
    fn camel_case_renames_snake_names() {
        assert_eq!(camel_case("top_p"), "topP");
        assert_eq!(camel_case("repetition_penalty"), "repetitionPenalty");
        assert_eq!(camel_case("seed"), "seed");
    }
}
