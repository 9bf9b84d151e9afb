//! The options in their JSON form, as the JS API spells them (`{ temperature, topP, … }`), and
//! the one reader of that form: the engine reads a request's sampling half with it, the page's
//! sampler module a what-if's options.
//!
//! The rules, the same everywhere: the options are an object; `null` means "not given" (as in
//! OpenAI's API); a key no reader takes is refused by name; every error names the option in the
//! JS spelling: serde's errors through the path of the value that failed
//! (`serde_path_to_error`), range errors from [`SamplingParams::validate`] renamed from the Rust
//! field names ([`OptionError::from_sampler`]).
//!
//! JSON has no NaN or infinities: the page-side client writes them as the strings `"NaN"`,
//! `"Infinity"`, `"-Infinity"`, so that a number field rejects them by name instead of silently
//! taking `null`; `"-Infinity"` is a valid logit bias.

use std::collections::BTreeSet;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::SamplerError;
use crate::params::SamplingParams;

/// A rejected option: its name in the JS spelling and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct OptionError {
    /// The option, as JS spells it (`"options"` when the whole object is wrong).
    pub option: String,
    /// What is wrong, naming the option the same way.
    pub message: String,
}

impl OptionError {
    /// An error about `option`.
    pub fn new(option: &str, message: impl Into<String>) -> Self {
        Self { option: option.to_string(), message: message.into() }
    }

    /// A sampler's refusal of the options, renamed from the Rust field to the JS option
    /// (`top_p must be in (0, 1]` -> `topP must be in (0, 1]`).
    pub fn from_sampler(error: &SamplerError) -> Self {
        let field = match error {
            SamplerError::OutOfRange { name, .. } => name,
            SamplerError::BiasIdOutOfVocabulary { .. }
            | SamplerError::InvalidBias { .. }
            | SamplerError::BiasSyntax { .. } => "logit_bias",
            _ => "options",
        };
        Self::renamed(field, &error.to_string())
    }

    /// `message` about the field `field`, with the field's name in JS spelling.
    pub fn renamed(field: &str, message: &str) -> Self {
        let option = camel_case(field);
        Self { message: message.replace(field, &option), option }
    }
}

/// Parses the options' JSON text: it must be an object; `null` values are dropped ("not given").
pub fn options_object(json: &str) -> Result<Value, OptionError> {
    let value: Value = serde_json::from_str(json)
        .map_err(|e| OptionError::new("options", format!("options must be an object: {e}")))?;
    let Value::Object(mut options) = value else {
        return Err(OptionError::new("options", "options must be an object"));
    };
    options.retain(|_, value| !value.is_null());
    Ok(Value::Object(options))
}

/// Deserialises `T` from the whole options object, adding to `ignored` the top-level keys it
/// does not read (several readers may share one object: a key is unknown when none reads it).
pub fn read_options<T: DeserializeOwned>(options: &Value, ignored: &mut BTreeSet<String>) -> Result<T, OptionError> {
    let mut note = |path: serde_ignored::Path| {
        if let serde_ignored::Path::Map { parent: serde_ignored::Path::Root, key } = path {
            ignored.insert(key);
        }
    };
    serde_path_to_error::deserialize(serde_ignored::Deserializer::new(options, &mut note)).map_err(|error| {
        let path = error.path().to_string();
        let option = path.split(['.', '[']).next().unwrap_or_default();
        OptionError::new(option, format!("invalid option {path}: {}", error.inner()))
    })
}

/// The error for a key that no reader took.
pub fn unknown_option(key: &str) -> OptionError {
    OptionError::new(key, format!("unknown option {key:?}"))
}

/// Deserialises `T` from an options object `json` that holds `T`'s options only: a key `T` does
/// not read is unknown.
pub fn read_only_options<T: DeserializeOwned>(json: &str) -> Result<T, OptionError> {
    let options = options_object(json)?;
    let mut ignored = BTreeSet::new();
    let value = read_options(&options, &mut ignored)?;
    match ignored.first() {
        Some(unknown) => Err(unknown_option(unknown)),
        None => Ok(value),
    }
}

impl SamplingParams {
    /// Reads and checks the sampling options alone from their JSON (every other key refused);
    /// `vocab_size` bounds `logitBias` ids.
    pub fn from_json(json: &str, vocab_size: usize) -> Result<Self, OptionError> {
        let params: SamplingParams = read_only_options(json)?;
        params.validate(vocab_size).map_err(|e| OptionError::from_sampler(&e))?;
        Ok(params)
    }
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

/// Renames every object key from snake_case to camelCase, recursively: a Rust value's serde
/// form as JS expects it, its keys in [`sorted_keys`]' order.
pub fn camel_keys(value: Value) -> Value {
    match value {
        Value::Object(map) => object_sorted(map.into_iter().map(|(k, v)| (camel_case(&k), camel_keys(v))).collect()),
        Value::Array(items) => Value::Array(items.into_iter().map(camel_keys).collect()),
        other => other,
    }
}

/// `value` with every object's keys in sorted order, recursively. serde_json keeps insertion
/// order instead when any crate of the build turns on its `preserve_order` feature (llguidance
/// does, in every build with the engine), so JSON text that is compared byte for byte (the files
/// tests write, what the wasm what-if returns) is written through this to be the same in every
/// build.
pub fn sorted_keys(value: Value) -> Value {
    match value {
        Value::Object(map) => object_sorted(map.into_iter().map(|(k, v)| (k, sorted_keys(v))).collect()),
        Value::Array(items) => Value::Array(items.into_iter().map(sorted_keys).collect()),
        other => other,
    }
}

fn object_sorted(mut entries: Vec<(String, Value)>) -> Value {
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Value::Object(entries.into_iter().collect::<Map<_, _>>())
}

#[cfg(test)]
mod tests {
    use super::*;

    const VOCAB: usize = 49_152;

    #[test]
    fn the_sampling_options_alone_are_read_with_null_as_not_given() {
        let params =
            SamplingParams::from_json(r#"{"temperature":0.7,"topP":null,"logitBias":{"2":"-Infinity"}}"#, VOCAB)
                .unwrap();
        assert_eq!((params.temperature, params.top_p), (0.7, 1.0));
        assert_eq!(params.logit_bias.get(&2), Some(&f64::NEG_INFINITY));
    }

    #[test]
    fn each_bad_option_is_named_in_js_spelling() {
        let cases = [
            (r#"{"topP":1.5}"#, "topP", "topP must be in (0, 1], got 1.5"),
            (r#"{"temperature":"NaN"}"#, "temperature", r#"invalid option temperature: invalid type: string "NaN""#),
            (r#"{"topQ":0.9}"#, "topQ", r#"unknown option "topQ""#),
            (r#"{"prompt":"a"}"#, "prompt", r#"unknown option "prompt""#),
            (r#"{"logitBias":{"49152":1}}"#, "logitBias", "logitBias token id 49152 is outside the vocabulary"),
            (r#"{"logitBias":{"7":"Infinity"}}"#, "logitBias", "invalid option logitBias.7"),
            (r#"{"dryBase":0.5,"dryMultiplier":1}"#, "dryBase", "dryBase must be finite and >= 1, got 0.5"),
            ("not json", "options", "options must be an object"),
            ("[1]", "options", "options must be an object"),
        ];
        for (json, option, message) in cases {
            let error = SamplingParams::from_json(json, VOCAB).expect_err(json);
            assert_eq!(error.option, option, "{json}");
            assert!(error.message.starts_with(message), "{json}: {:?} does not start with {message:?}", error.message);
        }
    }

    #[test]
    fn snake_names_become_camel_case() {
        assert_eq!(camel_case("top_p"), "topP");
        assert_eq!(camel_case("repetition_penalty"), "repetitionPenalty");
        assert_eq!(camel_case("seed"), "seed");
        let value = camel_keys(serde_json::json!({ "kept_mass": 1, "candidates": [{ "final_prob": 0.5 }] }));
        assert_eq!(value, serde_json::json!({ "keptMass": 1, "candidates": [{ "finalProb": 0.5 }] }));
    }
}
