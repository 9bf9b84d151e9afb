//! Constrained decoding: the output follows a JSON schema, a regular expression or a Lark
//! grammar. The constraint engine is llguidance (Rust; what llama.cpp and other servers embed):
//! from the grammar and our vocabulary it computes, before each step, the tokens that keep the
//! output a prefix of some sentence of the grammar, and end-of-generation tokens where the
//! sentence may end. The sampler removes the others after bias and penalties and before
//! temperature (its documented place); on the GPU decode tail the set is the allow-mask input of
//! the logit-adjust stage, so a masked step still reads back only its candidates.
//!
//! A grammar is compiled when the generation starts: one that does not compile is `bad-options`
//! before any token. The generation ends with `stop` ([`nucleus_sampler::FinishReason::Complete`])
//! when the grammar allows nothing more, or when it chose an end-of-generation token where the
//! grammar may end.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{Matcher, ParserFactory, regex_to_lark};
use nucleus_sampler::TokenSet;
use nucleus_tokenizer::Tokenizer;
use serde::Deserialize;

use crate::EngineError;

/// What the output must be (JS `responseFormat`; the OpenAI facade's `response_format`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ResponseFormat {
    /// Any JSON object.
    JsonObject,
    /// JSON that validates against a JSON Schema.
    JsonSchema { schema: serde_json::Value },
    /// Text matched whole by a regular expression: Rust `regex` syntax with JavaScript's (and
    /// JSON Schema's) meaning of `\d` and `\w`, ASCII only, so `\d{3}` is three of `0-9`, not any
    /// of Unicode's digits.
    Regex { pattern: String },
    /// Text in the language of a Lark grammar (llguidance's dialect).
    Grammar { lark: String },
}

impl ResponseFormat {
    /// The format's name, as the option spells its `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::JsonObject => "json_object",
            Self::JsonSchema { .. } => "json_schema",
            Self::Regex { .. } => "regex",
            Self::Grammar { .. } => "grammar",
        }
    }

    fn grammar(&self) -> TopLevelGrammar {
        match self {
            Self::JsonObject => TopLevelGrammar::from_json_schema(compact(serde_json::json!({ "type": "object" }))),
            Self::JsonSchema { schema } => TopLevelGrammar::from_json_schema(compact(schema.clone())),
            Self::Regex { pattern } => {
                TopLevelGrammar::from_lark(format!("start: /{}/", regex_to_lark(pattern, JAVASCRIPT_CLASSES)))
            }
            Self::Grammar { lark } => TopLevelGrammar::from_lark(lark.clone()),
        }
    }
}

/// The regex classes llguidance reads as ASCII (`\d` and `\w`), as JavaScript does and as it
/// reads a JSON schema's `pattern`.
const JAVASCRIPT_CLASSES: &str = "dw";

/// `schema` asking for JSON without whitespace between its tokens, unless it says otherwise in
/// llguidance's `x-guidance` options: a small model sampled hot can otherwise spend its tokens on
/// the spaces and newlines the JSON grammar allows.
fn compact(mut schema: serde_json::Value) -> serde_json::Value {
    if let Some(object) = schema.as_object_mut()
        && !object.contains_key("x-guidance")
    {
        object.insert("x-guidance".into(), serde_json::json!({ "whitespace_flexible": false }));
    }
    schema
}

/// Our vocabulary as llguidance sees it: each token's bytes, control tokens behind llguidance's
/// special-token marker (so no grammar's text can contain them), the end-of-generation ids
/// allowed where the grammar may end.
struct Vocabulary {
    trie: TokTrie,
}

impl TokenizerEnv for Vocabulary {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, bytes: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(bytes)
    }

    /// Greedy tokenization is not how the model's BPE splits text, so llguidance must not force
    /// tokens from it: masks are computed from the bytes instead.
    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

/// Compiles response formats for one tokenizer (llguidance's tries over the vocabulary are built
/// once, on the first constrained request).
pub(crate) struct ConstraintCompiler {
    factory: Arc<ParserFactory>,
    vocab_size: usize,
}

impl ConstraintCompiler {
    pub(crate) fn new(tokenizer: &Tokenizer) -> Result<Self, EngineError> {
        let vocab_size = tokenizer.vocab_size();
        let words: Vec<Vec<u8>> = (0..vocab_size as u32)
            .map(|id| {
                let bytes = tokenizer.token_bytes(id);
                if tokenizer.is_control(id) && !bytes.is_empty() {
                    [&[TokTrie::SPECIAL_TOKEN_MARKER][..], bytes].concat()
                } else {
                    bytes.to_vec()
                }
            })
            .collect();
        let ends = tokenizer.end_of_generation_ids();
        let first_end = ends.first().copied().ok_or_else(|| {
            EngineError::Constraint("the model names no end-of-generation token to end a grammar with".into())
        })?;
        let mut info = TokRxInfo::new(vocab_size as u32, first_end);
        info.tok_bos = tokenizer.bos_id();
        let trie = TokTrie::from(&info, &words).with_eos_tokens(ends);
        let vocabulary: llguidance::toktrie::TokEnv = Arc::new(Vocabulary { trie });
        let mut factory =
            ParserFactory::new_simple(&vocabulary).map_err(|e| EngineError::Constraint(format!("{e:#}")))?;
        factory.quiet();
        // Errors for people: without this, a runtime error carries the parser's whole state.
        factory.limits_mut().verbose_errors = false;
        Ok(Self { factory: Arc::new(factory), vocab_size })
    }

    /// Compiles `format`; one that does not compile is a `bad-options` error naming it.
    pub(crate) fn compile(&self, format: &ResponseFormat) -> Result<Constraint, EngineError> {
        let parser = self
            .factory
            .create_parser(format.grammar())
            .map_err(|error| EngineError::BadConstraint { kind: format.kind(), message: format!("{error:#}") })?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(error) = matcher.get_error() {
            return Err(EngineError::BadConstraint { kind: format.kind(), message: error });
        }
        Ok(Constraint { matcher, vocab_size: self.vocab_size })
    }
}

/// One generation's constraint: where its output is in the grammar.
pub(crate) struct Constraint {
    matcher: Matcher,
    vocab_size: usize,
}

impl Constraint {
    /// The tokens the grammar allows next; `None` when it allows nothing (the output is a
    /// complete sentence that cannot go on).
    pub(crate) fn allowed(&mut self) -> Result<Option<TokenSet>, EngineError> {
        if self.matcher.is_stopped() {
            return Ok(None);
        }
        let accepting = self.matcher.is_accepting().map_err(runtime)?;
        match self.matcher.compute_mask() {
            Ok(mask) if mask.num_set() == 0 => Ok(None),
            Ok(mask) => Ok(Some(TokenSet::from_u32_words(self.vocab_size, mask.as_slice()))),
            // llguidance finds late that nothing can follow a complete sentence.
            Err(_) if accepting => Ok(None),
            Err(error) => Err(runtime(error)),
        }
    }

    /// Advances the grammar past `id` (a token [`Self::allowed`] allowed).
    pub(crate) fn accept(&mut self, id: u32) -> Result<(), EngineError> {
        self.matcher.consume_token(id).map_err(runtime)
    }

    /// Whether the grammar has ended: nothing can follow, or an end-of-generation token was
    /// taken where the sentence may end.
    pub(crate) fn is_complete(&self) -> bool {
        self.matcher.is_stopped()
    }
}

fn runtime(error: impl std::fmt::Display) -> EngineError {
    EngineError::Constraint(error.to_string())
}
