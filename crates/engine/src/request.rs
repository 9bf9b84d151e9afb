//! A generation's request and its validation.

use nucleus_sampler::SamplingParams;
use nucleus_tokenizer::ChatMessage;

use crate::EngineError;
use crate::constraint::ResponseFormat;
use crate::speculative::PromptLookup;

/// Most candidates a step can report (`top_logprobs`, explanation size).
pub const MAX_TOP_LOGPROBS: usize = 256;

/// Candidates the GPU decode tail selects when the request asks for fewer: enough for top-k,
/// top-p and min-p to settle inside them in the common case.
pub const DECODE_TAIL_CANDIDATES: usize = 64;

/// Default `max_tokens`: the CLI's `--max-tokens` and the JS API's `maxTokens`.
pub const DEFAULT_MAX_TOKENS: usize = 128;

/// Default `top_logprobs`: the candidates reported with each step (CLI and JS API).
pub const DEFAULT_TOP_LOGPROBS: usize = 20;

/// What to generate from.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// Raw text, tokenized as is (control tokens written in it are parsed as special tokens).
    Text(String),
    /// Messages rendered with the model's chat template, ending with the assistant's turn opened.
    Chat(Vec<ChatMessage>),
}

/// One generation's settings. [`GenerateRequest::validate`] checks every field.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateRequest {
    pub prompt: Prompt,
    /// Most tokens to generate, >= 1.
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Stop strings (non-empty), matched on the decoded text; never part of the output.
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Candidates by raw logit reported with each step, 0..=256.
    pub top_logprobs: usize,
    /// Candidates in the sampler's explanation of each step; 0 = no explanation. 0..=256.
    pub explain_top_n: usize,
    /// Hand each step the whole raw logits row ([`Step::logits`]): the step reads the row back
    /// (`4·vocab` bytes) instead of ending on the GPU decode tail.
    pub return_logits: bool,
    /// The output's first tokens, given instead of sampled (a fork: the same prompt, the tokens
    /// of an earlier run up to a step, then another candidate at that step). They enter the
    /// context, the penalties' history, the stop conditions and the output's text as generated
    /// tokens, but no step reports them: the first [`Step`](crate::Step) is the first sampled
    /// token, its index `forced_tokens.len()`. Whatever of them the KV cache still holds is not
    /// run again.
    pub forced_tokens: Vec<u32>,
    /// Speculative decoding by prompt lookup (see [`crate::speculative`]): the same output,
    /// fewer forward passes when the context repeats itself.
    pub speculative: Option<PromptLookup>,
    /// What the output must be (a JSON schema, a regular expression, a Lark grammar; see
    /// [`crate::constraint`]); compiled when the generation starts.
    pub response_format: Option<ResponseFormat>,
}

impl GenerateRequest {
    pub fn new(prompt: Prompt) -> Self {
        Self {
            prompt,
            max_tokens: DEFAULT_MAX_TOKENS,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            ignore_eos: false,
            top_logprobs: DEFAULT_TOP_LOGPROBS,
            explain_top_n: 0,
            return_logits: false,
            forced_tokens: Vec::new(),
            speculative: None,
            response_format: None,
        }
    }

    /// Checks every parameter; the error names it and its allowed range.
    pub fn validate(&self, vocab_size: usize) -> Result<(), EngineError> {
        if self.max_tokens == 0 {
            return Err(EngineError::bad_option("max_tokens", ">= 1", self.max_tokens));
        }
        if self.top_logprobs > MAX_TOP_LOGPROBS {
            return Err(EngineError::bad_option("top_logprobs", "0..=256", self.top_logprobs));
        }
        if self.explain_top_n > MAX_TOP_LOGPROBS {
            return Err(EngineError::bad_option("explain_top_n", "0..=256", self.explain_top_n));
        }
        if self.stop.iter().any(String::is_empty) {
            return Err(EngineError::bad_option("stop", "non-empty strings", "\"\""));
        }
        match &self.prompt {
            Prompt::Text(text) if text.is_empty() => {
                return Err(EngineError::bad_option("prompt", "non-empty text", "\"\""));
            }
            Prompt::Chat(messages) if messages.is_empty() => {
                return Err(EngineError::bad_option("messages", "at least one message", "[]"));
            }
            Prompt::Chat(messages) => {
                if let Some(message) = messages.iter().find(|m| !ChatMessage::ROLES.contains(&m.role.as_str())) {
                    return Err(EngineError::bad_option(
                        "messages",
                        "roles system, user or assistant",
                        format!("{:?}", message.role),
                    ));
                }
            }
            _ => {}
        }
        if let Some(&id) = self.forced_tokens.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(EngineError::bad_option("forced_tokens", format!("token ids below {vocab_size}"), id));
        }
        if let Some(lookup) = &self.speculative {
            lookup.validate()?;
        }
        self.sampling.validate(vocab_size)?;
        Ok(())
    }
}
