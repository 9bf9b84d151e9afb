//! A request in JSON, the JS API's spelling (`lm.generate({ prompt, topP, … })`), read with serde.
//!
//! The object is flat: the request's own options ([`RequestOptions`] here) and the sampling
//! options ([`SamplingParams`]' serde form, camelCase) side by side. Each is deserialised from the
//! whole object by the sampler's reader of the JS spelling ([`nucleus_sampler::json`]: `null` as
//! "not given", errors naming the option as JS spells it); a key neither of them reads is unknown.

use std::collections::BTreeSet;

use nucleus_sampler::SamplingParams;
use nucleus_sampler::json::{OptionError, camel_case, options_object, read_only_options, read_options, unknown_option};
use nucleus_tokenizer::ChatMessage;
use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

use crate::beam::{DEFAULT_BEAM_TOKENS, DEFAULT_BEAMS};
use crate::constraint::ResponseFormat;
use crate::lens::DEFAULT_LENS_CANDIDATES;
use crate::score::DEFAULT_SCORE_TOP_K;
use crate::speculative::PromptLookup;
use crate::{AttentionRequest, BeamRequest, EngineError, GenerateRequest, LensRequest, Prompt, ScoreRequest};

/// The request's options other than sampling, as JSON spells them; defaults from
/// [`GenerateRequest::new`].
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RequestOptions {
    prompt: Option<String>,
    messages: Option<Vec<ChatMessage>>,
    max_tokens: usize,
    #[serde(deserialize_with = "one_or_many")]
    stop: Vec<String>,
    ignore_eos: bool,
    top_logprobs: usize,
    #[serde(rename = "explain")]
    explain_top_n: usize,
    return_logits: bool,
    forced_tokens: Vec<u32>,
    speculative: Option<SpeculativeOptions>,
    response_format: Option<ResponseFormat>,
}

/// `speculative: { lookup: { maxDraft, ngram } }`: the drafting method and its settings.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpeculativeOptions {
    lookup: Option<PromptLookup>,
}

impl Default for RequestOptions {
    fn default() -> Self {
        let defaults = GenerateRequest::new(Prompt::Text(String::new()));
        Self {
            prompt: None,
            messages: None,
            max_tokens: defaults.max_tokens,
            stop: defaults.stop,
            ignore_eos: defaults.ignore_eos,
            top_logprobs: defaults.top_logprobs,
            explain_top_n: defaults.explain_top_n,
            return_logits: defaults.return_logits,
            forced_tokens: defaults.forced_tokens,
            speculative: None,
            response_format: None,
        }
    }
}

impl GenerateRequest {
    /// Reads and checks a request from its JSON form (the options of the JS API's
    /// `lm.generate`). `vocab_size` bounds `logitBias` ids.
    pub fn from_json(json: &str, vocab_size: usize) -> Result<Self, OptionError> {
        let options = options_object(json)?;
        let mut not_request = BTreeSet::new();
        let fields: RequestOptions = read_options(&options, &mut not_request)?;
        let mut not_sampling = BTreeSet::new();
        let sampling: SamplingParams = read_options(&options, &mut not_sampling)?;
        if let Some(unknown) = not_request.intersection(&not_sampling).next() {
            return Err(unknown_option(unknown));
        }

        let request = GenerateRequest {
            prompt: prompt_of(fields.prompt, fields.messages)?,
            max_tokens: fields.max_tokens,
            sampling,
            stop: fields.stop,
            ignore_eos: fields.ignore_eos,
            top_logprobs: fields.top_logprobs,
            explain_top_n: fields.explain_top_n,
            return_logits: fields.return_logits,
            forced_tokens: fields.forced_tokens,
            speculative: fields.speculative.and_then(|s| s.lookup),
            response_format: fields.response_format,
        };
        request.validate(vocab_size).map_err(js_option_error)?;
        Ok(request)
    }
}

/// The prompt of a request that gives `prompt` (text) or `messages` (a chat), not both.
fn prompt_of(prompt: Option<String>, messages: Option<Vec<ChatMessage>>) -> Result<Prompt, OptionError> {
    match (prompt, messages) {
        (Some(_), Some(_)) => Err(OptionError::new("prompt", "give either prompt or messages, not both")),
        (None, None) => Err(OptionError::new("prompt", "give a prompt (text) or messages (a chat)")),
        (Some(text), None) => Ok(Prompt::Text(text)),
        (None, Some(messages)) => Ok(Prompt::Chat(messages)),
    }
}

/// `lm.logitLens(options)`'s options.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct LensOptions {
    prompt: Option<String>,
    messages: Option<Vec<ChatMessage>>,
    generated: Vec<u32>,
    candidates: usize,
}

impl Default for LensOptions {
    fn default() -> Self {
        Self { prompt: None, messages: None, generated: Vec::new(), candidates: DEFAULT_LENS_CANDIDATES }
    }
}

impl LensRequest {
    /// Reads and checks a logit-lens request from its JSON form (`lm.logitLens`'s options).
    pub fn from_json(json: &str, vocab_size: usize) -> Result<Self, OptionError> {
        let fields: LensOptions = read_only_options(json)?;
        let request = LensRequest {
            prompt: prompt_of(fields.prompt, fields.messages)?,
            generated: fields.generated,
            candidates: fields.candidates,
        };
        request.validate(vocab_size).map_err(js_option_error)?;
        Ok(request)
    }
}

/// `lm.score(text, options)`'s options, with the text as `prompt` (or a chat as `messages`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct ScoreOptions {
    prompt: Option<String>,
    messages: Option<Vec<ChatMessage>>,
    generated: Vec<u32>,
    top_k: usize,
}

impl Default for ScoreOptions {
    fn default() -> Self {
        Self { prompt: None, messages: None, generated: Vec::new(), top_k: DEFAULT_SCORE_TOP_K }
    }
}

impl ScoreRequest {
    /// Reads and checks a scoring request from its JSON form.
    pub fn from_json(json: &str, vocab_size: usize) -> Result<Self, OptionError> {
        let fields: ScoreOptions = read_only_options(json)?;
        let prompt = prompt_of(fields.prompt, fields.messages)?;
        let request = ScoreRequest { prompt, generated: fields.generated, top_k: fields.top_k };
        request.validate(vocab_size).map_err(js_option_error)?;
        Ok(request)
    }
}

/// `lm.attention(options)`'s options.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct AttentionOptions {
    prompt: Option<String>,
    messages: Option<Vec<ChatMessage>>,
    generated: Vec<u32>,
    layer: Option<usize>,
    head: Option<usize>,
    from: Option<usize>,
    to: Option<usize>,
}

impl AttentionRequest {
    /// Reads an attention read's request from its JSON form (`lm.attention`'s options); the
    /// engine checks the layer, head and positions against the model and the text.
    pub fn from_json(json: &str) -> Result<Self, OptionError> {
        let fields: AttentionOptions = read_only_options(json)?;
        Ok(AttentionRequest {
            prompt: prompt_of(fields.prompt, fields.messages)?,
            generated: fields.generated,
            layer: fields.layer,
            head: fields.head,
            from: fields.from,
            to: fields.to,
        })
    }
}

/// `lm.beamSearch(options)`'s options.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct BeamOptions {
    prompt: Option<String>,
    messages: Option<Vec<ChatMessage>>,
    beams: usize,
    length_penalty: f64,
    max_tokens: usize,
    ignore_eos: bool,
}

impl Default for BeamOptions {
    fn default() -> Self {
        Self {
            prompt: None,
            messages: None,
            beams: DEFAULT_BEAMS,
            length_penalty: 1.0,
            max_tokens: DEFAULT_BEAM_TOKENS,
            ignore_eos: false,
        }
    }
}

impl BeamRequest {
    /// Reads and checks a beam-search request from its JSON form (`lm.beamSearch`'s options).
    pub fn from_json(json: &str) -> Result<Self, OptionError> {
        let fields: BeamOptions = read_only_options(json)?;
        let request = BeamRequest {
            prompt: prompt_of(fields.prompt, fields.messages)?,
            beams: fields.beams,
            length_penalty: fields.length_penalty,
            max_tokens: fields.max_tokens,
            ignore_eos: fields.ignore_eos,
        };
        request.validate().map_err(js_option_error)?;
        Ok(request)
    }
}

/// An engine error about an option (a request's validation, the sampler's, a response format
/// that does not compile), named as JS spells the option (`top_p` -> `topP`); any other error is
/// about the options as a whole.
pub fn js_option_error(error: EngineError) -> OptionError {
    match &error {
        EngineError::BadOption { name, .. } => {
            let option = js_name(name);
            OptionError { message: error.to_string().replace(name, &option), option }
        }
        EngineError::Sampler(sampler) => OptionError::from_sampler(sampler),
        EngineError::BadConstraint { .. } => {
            OptionError::new("responseFormat", error.to_string().replace("response_format", "responseFormat"))
        }
        _ => OptionError::new("options", error.to_string()),
    }
}

/// The JS name of a request or sampling field: its serde name.
pub fn js_name(field: &str) -> String {
    if field == "explain_top_n" {
        return "explain".to_string();
    }
    camel_case(field)
}

/// A string or an array of strings.
fn one_or_many<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    struct OneOrMany;
    impl<'de> Visitor<'de> for OneOrMany {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string or an array of strings")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(vec![v.to_string()])
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(item) = seq.next_element()? {
                out.push(item);
            }
            Ok(out)
        }
    }
    deserializer.deserialize_any(OneOrMany)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::{DEFAULT_BEAM_TOKENS, DEFAULT_LENS_CANDIDATES, DEFAULT_MAX_TOKENS};

    const VOCAB: usize = 49_152;

    fn parse(json: &str) -> Result<GenerateRequest, OptionError> {
        GenerateRequest::from_json(json, VOCAB)
    }

    #[test]
    fn every_option_reaches_the_request() {
        let request = parse(
            r#"{"prompt":"Hi","maxTokens":7,"temperature":0.7,"topK":40,"topP":0.9,"minP":0.05,"typicalP":0.95,
                "repetitionPenalty":1.1,"presencePenalty":0.5,"frequencyPenalty":0.25,"penaltyLastN":64,
                "penalizePrompt":true,"logitBias":{"2":"-Infinity","42":1.5},"stop":["\n\n","END"],"seed":9007199254740991,
                "ignoreEos":true,"topLogprobs":256,"explain":30,"returnLogits":true,"forcedTokens":[5,7],
                "speculative":{"lookup":{"maxDraft":6,"ngram":2}},"responseFormat":{"type":"regex","pattern":"a+"}}"#,
        )
        .unwrap();
        assert_eq!(request.prompt, Prompt::Text("Hi".into()));
        assert_eq!(
            (request.max_tokens, request.top_logprobs, request.explain_top_n, request.ignore_eos),
            (7, 256, 30, true)
        );
        assert!(request.return_logits);
        assert_eq!(request.forced_tokens, [5, 7]);
        assert_eq!(request.speculative, Some(PromptLookup { max_draft: 6, ngram: 2 }));
        assert_eq!(request.response_format, Some(ResponseFormat::Regex { pattern: "a+".into() }));
        let schema = parse(r#"{"prompt":"Hi","responseFormat":{"type":"json_schema","schema":{"type":"object"}}}"#);
        assert_eq!(
            schema.unwrap().response_format,
            Some(ResponseFormat::JsonSchema { schema: serde_json::json!({ "type": "object" }) })
        );
        let defaults = parse(r#"{"prompt":"Hi","speculative":{"lookup":{}}}"#).unwrap();
        assert_eq!(defaults.speculative, Some(PromptLookup::default()));
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
        let s = &request.sampling;
        assert_eq!((s.dry_multiplier, s.dry_base, s.dry_allowed_length, s.dry_penalty_last_n), (0.8, 2.0, 3, 100));
        assert_eq!(s.dry_sequence_breakers, SamplingParams::default().dry_sequence_breakers);
        let given = parse(r#"{"prompt":"Hi","dryMultiplier":0.8,"drySequenceBreakers":["ab","xyz"]}"#).unwrap();
        assert_eq!(given.sampling.dry_sequence_breakers, ["ab", "xyz"]);
        let error = parse(r#"{"prompt":"a","dryBase":0.5,"dryMultiplier":1}"#).unwrap_err();
        assert_eq!(
            (error.option.as_str(), error.message.as_str()),
            ("dryBase", "dryBase must be finite and >= 1, got 0.5")
        );
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
            (
                r#"{"prompt":"a","temperature":"NaN"}"#,
                "temperature",
                r#"invalid option temperature: invalid type: string "NaN", expected f64"#,
            ),
            (
                r#"{"prompt":"a","temperature":"hot"}"#,
                "temperature",
                r#"invalid option temperature: invalid type: string "hot", expected f64"#,
            ),
            (r#"{"prompt":"a","minP":2}"#, "minP", "minP must be in [0, 1], got 2"),
            (r#"{"prompt":"a","typicalP":0}"#, "typicalP", "typicalP must be in (0, 1], got 0"),
            (
                r#"{"prompt":"a","repetitionPenalty":0}"#,
                "repetitionPenalty",
                "repetitionPenalty must be finite and > 0, got 0",
            ),
            (
                r#"{"prompt":"a","topK":2.5}"#,
                "topK",
                "invalid option topK: invalid type: floating point `2.5`, expected usize",
            ),
            (r#"{"prompt":"a","maxTokens":0}"#, "maxTokens", "invalid option maxTokens: must be >= 1, got 0"),
            (
                r#"{"prompt":"a","topLogprobs":257}"#,
                "topLogprobs",
                "invalid option topLogprobs: must be 0..=256, got 257",
            ),
            (
                r#"{"prompt":"a","forcedTokens":[3,49152]}"#,
                "forcedTokens",
                "invalid option forcedTokens: must be token ids below 49152, got 49152",
            ),
            (
                r#"{"prompt":"a","forcedTokens":[-1]}"#,
                "forcedTokens",
                "invalid option forcedTokens[0]: invalid value: integer `-1`, expected u32",
            ),
            (
                r#"{"prompt":"a","speculative":{"lookup":{"maxDraft":16}}}"#,
                "speculative.lookup.maxDraft",
                "invalid option speculative.lookup.maxDraft: must be 1..=15, got 16",
            ),
            (
                r#"{"prompt":"a","speculative":{"lookup":{"ngram":0}}}"#,
                "speculative.lookup.ngram",
                "invalid option speculative.lookup.ngram: must be 1..=16, got 0",
            ),
            (
                r#"{"prompt":"a","speculative":{"medusa":{}}}"#,
                "speculative",
                "invalid option speculative.medusa: unknown field `medusa`, expected `lookup`",
            ),
            (
                r#"{"prompt":"a","responseFormat":{"type":"xml"}}"#,
                "responseFormat",
                "invalid option responseFormat.type: unknown variant `xml`, expected one of `json_object`, `json_schema`, `regex`, `grammar`",
            ),
            (
                r#"{"prompt":"a","responseFormat":{"type":"regex"}}"#,
                "responseFormat",
                "invalid option responseFormat: missing field `pattern`",
            ),
            (r#"{"prompt":"a","explain":300}"#, "explain", "invalid option explain: must be 0..=256, got 300"),
            (r#"{"prompt":"a","seed":-1}"#, "seed", "invalid option seed: invalid value: integer `-1`, expected u64"),
            (
                r#"{"prompt":"a","logitBias":{"49152":1}}"#,
                "logitBias",
                "logitBias token id 49152 is outside the vocabulary (ids 0..49152)",
            ),
            (
                r#"{"prompt":"a","logitBias":{"7":"Infinity"}}"#,
                "logitBias",
                r#"invalid option logitBias.7: invalid value: string "Infinity", expected a finite number or "-Infinity""#,
            ),
            (r#"{"prompt":"a","logitBias":{"x":1}}"#, "logitBias", "invalid option logitBias"),
            (r#"{"prompt":"a","stop":[""]}"#, "stop", "invalid option stop: must be non-empty strings, got \"\""),
            (
                r#"{"prompt":"a","stop":3}"#,
                "stop",
                "invalid option stop: invalid type: integer `3`, expected a string or an array of strings",
            ),
            (
                r#"{"prompt":"a","ignoreEos":1}"#,
                "ignoreEos",
                "invalid option ignoreEos: invalid type: integer `1`, expected a boolean",
            ),
            (r#"{"prompt":""}"#, "prompt", "invalid option prompt: must be non-empty text, got \"\""),
            (r#"{"prompt":"a","temprature":1}"#, "temprature", "unknown option \"temprature\""),
            (r#"{}"#, "prompt", "give a prompt (text) or messages (a chat)"),
            (r#"{"prompt":"a","messages":[]}"#, "prompt", "give either prompt or messages, not both"),
            (
                r#"{"messages":[{"role":"robot","content":"x"}]}"#,
                "messages",
                "invalid option messages: must be roles system, user or assistant, got \"robot\"",
            ),
            (r#"{"messages":[{"role":"user"}]}"#, "messages", "invalid option messages[0]: missing field `content`"),
            (r#"{"messages":[]}"#, "messages", "invalid option messages: must be at least one message, got []"),
            (r#"[1]"#, "options", "options must be an object"),
        ];
        for (json, option, message) in cases {
            let error = parse(json).expect_err(json);
            assert_eq!(error.option, option, "{json}");
            assert!(error.message.starts_with(message), "{json}: {:?} does not start with {message:?}", error.message);
        }
    }

    #[test]
    fn lens_and_beam_requests_read_their_own_options_only() {
        let lens = LensRequest::from_json(r#"{"prompt":"Hi","generated":[5,7],"candidates":3}"#, VOCAB).unwrap();
        assert_eq!((lens.prompt, lens.generated, lens.candidates), (Prompt::Text("Hi".into()), vec![5, 7], 3));
        let default = LensRequest::from_json(r#"{"messages":[{"role":"user","content":"Hi"}]}"#, VOCAB).unwrap();
        assert_eq!(default.candidates, DEFAULT_LENS_CANDIDATES);
        let score = ScoreRequest::from_json(r#"{"prompt":"Hi","topK":3,"generated":[5]}"#, VOCAB).unwrap();
        assert_eq!((score.prompt, score.generated, score.top_k), (Prompt::Text("Hi".into()), vec![5], 3));
        assert_eq!(ScoreRequest::from_json("{\"prompt\":\"Hi\"}", VOCAB).unwrap().top_k, DEFAULT_SCORE_TOP_K);
        let error = ScoreRequest::from_json(r#"{"prompt":"Hi","topK":21}"#, VOCAB).expect_err("refused");
        assert!(error.to_string().contains("topK"), "{error}");
        assert!(ScoreRequest::from_json(r#"{"prompt":"Hi","candidates":3}"#, VOCAB).is_err(), "unknown option");
        let attention = AttentionRequest::from_json(r#"{"prompt":"Hi","layer":2,"head":1,"from":0,"to":1}"#).unwrap();
        assert_eq!(
            (attention.layer, attention.head, attention.from, attention.to),
            (Some(2), Some(1), Some(0), Some(1))
        );
        assert!(AttentionRequest::from_json(r#"{"prompt":"Hi","heads":1}"#).is_err(), "unknown option");
        let beam = BeamRequest::from_json(r#"{"prompt":"Hi","beams":2,"lengthPenalty":0.5,"ignoreEos":true}"#).unwrap();
        assert_eq!(
            (beam.beams, beam.length_penalty, beam.max_tokens, beam.ignore_eos),
            (2, 0.5, DEFAULT_BEAM_TOKENS, true)
        );
        let cases = [
            (
                LensRequest::from_json(r#"{"prompt":"a","candidates":0}"#, VOCAB).err(),
                "candidates",
                "invalid option candidates: must be 1..=64, got 0",
            ),
            (
                LensRequest::from_json(r#"{"prompt":"a","generated":[49152]}"#, VOCAB).err(),
                "generated",
                "invalid option generated: must be token ids below 49152, got 49152",
            ),
            (
                LensRequest::from_json(r#"{"prompt":"a","temperature":1}"#, VOCAB).err(),
                "temperature",
                "unknown option \"temperature\"",
            ),
            (
                BeamRequest::from_json(r#"{"prompt":"a","beams":9}"#).err(),
                "beams",
                "invalid option beams: must be 1..=8, got 9",
            ),
            (
                BeamRequest::from_json(r#"{"prompt":"a","maxTokens":65}"#).err(),
                "maxTokens",
                "invalid option maxTokens: must be 1..=64, got 65",
            ),
            (BeamRequest::from_json(r#"{}"#).err(), "prompt", "give a prompt (text) or messages (a chat)"),
        ];
        for (error, option, message) in cases {
            let error = error.expect(message);
            assert_eq!((error.option.as_str(), error.message.as_str()), (option, message));
        }
    }

    #[test]
    fn request_fields_have_their_js_names() {
        assert_eq!(js_name("explain_top_n"), "explain");
        assert_eq!(js_name("top_logprobs"), "topLogprobs");
    }
}
