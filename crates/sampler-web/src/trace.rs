//! A recorded run (a trace): what the page needs to replay a generation's steps in its inspector,
//! with working what-if sliders, without the model and without a GPU.
//!
//! A trace is JSON: the model (name, sha256 when known, vocabulary size), the prompt (text or
//! chat messages), the run's sampling options (the JS API's spelling), and for each step the
//! chosen token and the model's top candidates (ids, texts, raw logits) with the full
//! vocabulary's log-sum-exp, which with the candidates gives every candidate's exact
//! probability and the rest of the vocabulary's mass ([`crate::estimated_row`]).
//!
//! [`read_trace`] is the one reader: the format and its version first (a newer trace is refused as
//! newer, not as malformed), then the structure (unknown fields refused), then what the structure
//! cannot say (lengths that must agree, ids inside the vocabulary, candidates best first, a
//! log-sum-exp that can be one, settings the sampler takes). The whole trace is read or none of
//! it is, and the error names the path of what is wrong (`steps[3].candidates.logits`). The JSON
//! Schema (`www/trace.schema.json`) is generated from these types by this crate's tests.

use std::collections::BTreeSet;

use nucleus_sampler::SamplingParams;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The `format` of every trace.
pub const TRACE_FORMAT: &str = "nucleus-trace";
/// The version this build writes and reads.
pub const TRACE_VERSION: u32 = 1;
/// What a trace written by this build says recorded it: the package's version, Cargo.toml's
/// workspace version (the one the JS package, its service worker's cache and `VERSION` carry).
pub const TRACE_GENERATOR: &str = concat!("nucleus ", env!("CARGO_PKG_VERSION"));

/// A recorded generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(
    title = "Nucleus trace",
    description = "A recorded generation: replayed in the inspector without the model or a GPU."
)]
pub struct Trace {
    /// Always "nucleus-trace".
    #[schemars(extend("const" = "nucleus-trace"))]
    pub format: String,
    /// The format's version (this is version 1).
    #[schemars(extend("const" = 1))]
    pub version: u32,
    /// The Nucleus version that recorded it ("nucleus 0.1.0"); absent in traces from before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<String>,
    /// The model that generated it.
    pub model: TraceModel,
    /// The prompt as text; absent when the run was a chat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The chat, in order; absent when the run had a text prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<TraceMessage>>,
    /// The run's sampling options, as the JS API spells them (`temperature`, `topP`, `seed`, ...).
    pub settings: Map<String, Value>,
    /// The generated steps, in order.
    #[schemars(length(min = 1))]
    pub steps: Vec<TraceStep>,
    /// The text the run returned.
    pub text: String,
    /// Why the run ended: "eos", "length", "stop" or "abort".
    pub finish_reason: FinishReason,
}

/// Why the recorded run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    /// The model's end-of-generation token.
    Eos,
    /// The token limit or the context's end.
    Length,
    /// A stop string.
    Stop,
    /// Stopped by the person.
    Abort,
}

/// The model a trace was recorded with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TraceModel {
    /// The model's name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// The model file's SHA-256, lowercase hex, when known.
    #[serde(default)]
    #[schemars(regex(pattern = r"^[0-9a-f]{64}$"))]
    pub sha256: Option<String>,
    /// Tokens in the vocabulary.
    #[schemars(range(min = 1))]
    pub vocab_size: usize,
}

/// One message of a recorded chat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TraceMessage {
    /// "system", "user" or "assistant".
    pub role: Role,
    /// The message's text.
    pub content: String,
}

/// Who said a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The system prompt.
    System,
    /// The person.
    User,
    /// The model.
    Assistant,
}

/// One generated step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TraceStep {
    /// The chosen token's id.
    pub id: u32,
    /// The chosen token's text.
    pub token: String,
    /// The chosen token's log-probability under the model's raw distribution.
    pub logprob: f64,
    /// The log-sum-exp of the raw logits over the whole vocabulary: a candidate's
    /// log-probability is its logit minus this.
    pub log_sum_exp: f64,
    /// The model's top candidates by raw logit, best first.
    pub candidates: TraceCandidates,
}

/// A step's top candidates as three arrays of one length, best first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TraceCandidates {
    /// Token ids.
    #[schemars(length(min = 1))]
    pub ids: Vec<u32>,
    /// Their texts.
    pub texts: Vec<String>,
    /// Their raw logits, highest first.
    pub logits: Vec<f32>,
}

/// Why a trace was refused: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{message}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
pub struct TraceError {
    /// The path of the value that is wrong (`steps[3].candidates.ids`); empty for the whole file.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl TraceError {
    fn at(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self { path: path.into(), message: message.into() }
    }
}

/// How far a candidate's probability may exceed 1 in the sum (the logits are f32).
const MASS_TOLERANCE: f64 = 1e-4;

/// The fields a trace written now begins with: `format`, `version` and `generator`.
pub fn header() -> Value {
    serde_json::json!({ "format": TRACE_FORMAT, "version": TRACE_VERSION, "generator": TRACE_GENERATOR })
}

/// Reads a trace from its JSON text, whole or not at all.
pub fn read_trace(json: &str) -> Result<Trace, TraceError> {
    let value: Value = serde_json::from_str(json).map_err(|e| TraceError::at("", format!("not JSON: {e}")))?;
    let Value::Object(object) = &value else {
        return Err(TraceError::at("", "a trace is a JSON object"));
    };
    if object.get("format").and_then(Value::as_str) != Some(TRACE_FORMAT) {
        return Err(TraceError::at(
            "format",
            format!("not a Nucleus trace (its \"format\" must be \"{TRACE_FORMAT}\")"),
        ));
    }
    match object.get("version").and_then(Value::as_u64) {
        Some(version) if version == u64::from(TRACE_VERSION) => {}
        Some(version) if version > u64::from(TRACE_VERSION) => {
            return Err(TraceError::at(
                "version",
                format!("this is a version {version} trace, newer than this page reads (version {TRACE_VERSION})"),
            ));
        }
        _ => return Err(TraceError::at("version", format!("must be {TRACE_VERSION}"))),
    }
    let trace: Trace = serde_path_to_error::deserialize(&value).map_err(|error| {
        let path = error.path().to_string();
        TraceError::at(if path == "." { String::new() } else { path }, error.inner().to_string())
    })?;
    trace.check()?;
    Ok(trace)
}

impl Trace {
    /// What the structure cannot say.
    fn check(&self) -> Result<(), TraceError> {
        let vocab_size = self.model.vocab_size;
        if vocab_size == 0 {
            return Err(TraceError::at("model.vocabSize", "must be at least 1"));
        }
        if let Some(sha) = &self.model.sha256
            && !(sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        {
            return Err(TraceError::at("model.sha256", "must be 64 lowercase hex digits"));
        }
        match (&self.prompt, &self.messages) {
            (Some(_), Some(_)) => return Err(TraceError::at("messages", "give either prompt or messages, not both")),
            (None, None) => return Err(TraceError::at("prompt", "give the prompt (text) or the messages (a chat)")),
            _ => {}
        }
        SamplingParams::from_json(&Value::Object(self.settings.clone()).to_string(), vocab_size)
            .map_err(|e| TraceError::at(format!("settings.{}", e.option), e.message))?;
        if self.steps.is_empty() {
            return Err(TraceError::at("steps", "a trace has at least one step"));
        }
        for (i, step) in self.steps.iter().enumerate() {
            step.check(vocab_size).map_err(|e| TraceError::at(format!("steps[{i}].{}", e.path), e.message))?;
        }
        Ok(())
    }
}

impl TraceStep {
    fn check(&self, vocab_size: usize) -> Result<(), TraceError> {
        let TraceCandidates { ids, texts, logits } = &self.candidates;
        if ids.is_empty() {
            return Err(TraceError::at("candidates.ids", "a step has at least one candidate"));
        }
        if texts.len() != ids.len() || logits.len() != ids.len() {
            return Err(TraceError::at(
                "candidates",
                format!(
                    "ids, texts and logits must have one length (got {}, {} and {})",
                    ids.len(),
                    texts.len(),
                    logits.len()
                ),
            ));
        }
        if self.id as usize >= vocab_size {
            return Err(TraceError::at("id", format!("{} is outside the vocabulary (ids 0..{vocab_size})", self.id)));
        }
        let mut seen = BTreeSet::new();
        for (j, &id) in ids.iter().enumerate() {
            if id as usize >= vocab_size {
                return Err(TraceError::at(
                    format!("candidates.ids[{j}]"),
                    format!("{id} is outside the vocabulary (ids 0..{vocab_size})"),
                ));
            }
            if !seen.insert(id) {
                return Err(TraceError::at(format!("candidates.ids[{j}]"), format!("{id} is listed twice")));
            }
        }
        if let Some(j) = logits.windows(2).position(|pair| pair[1] > pair[0]) {
            return Err(TraceError::at(
                format!("candidates.logits[{}]", j + 1),
                "candidates must be best first (logits descending)",
            ));
        }
        let max = f64::from(logits[0]);
        let mass: f64 = logits.iter().map(|&l| (f64::from(l) - self.log_sum_exp).exp()).sum();
        if !self.log_sum_exp.is_finite() || self.log_sum_exp < max || mass > 1.0 + MASS_TOLERANCE {
            return Err(TraceError::at(
                "logSumExp",
                format!(
                    "{} cannot be the log-sum-exp of these logits (the candidates' probabilities would sum to {mass})",
                    self.log_sum_exp
                ),
            ));
        }
        if !(self.logprob.is_finite() && self.logprob <= 0.0) {
            return Err(TraceError::at(
                "logprob",
                format!("must be a log-probability (finite, <= 0), got {}", self.logprob),
            ));
        }
        Ok(())
    }
}
