//! How surprising a text is to the model: every token of it rated by the distribution the model
//! gave before it (GLTR's view). One pass over the text ([`nucleus_model::Model::score`], in
//! passes of 16 rows): for every token but the first, which nothing predicts, its probability,
//! its rank among the whole vocabulary (1: the most likely) and the top alternatives; for the
//! text, its total log-likelihood and perplexity. On the fused path only each position's record
//! is read back (`16 + 8·top_k` bytes), never its row.
//!
//! The text runs from an empty cache (every position is rated), and stays in the cache after, so
//! a generation that continues from any of its positions prefills only what follows.

use serde::Serialize;

use crate::{Engine, EngineError, Prompt, Stopwatch, TopCandidate};

pub use nucleus_model::MAX_SCORE_TOP_K;

/// Default alternatives reported per token.
pub const DEFAULT_SCORE_TOP_K: usize = 5;

/// A text to rate.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreRequest {
    /// The text, or a chat rendered with the model's template (its tokens then include the
    /// template's, marked `special`).
    pub prompt: Prompt,
    /// Token ids after the prompt's (a run's generated tokens, as they were sampled: no
    /// tokenization in between), scored with it.
    pub generated: Vec<u32>,
    /// Alternatives per token, 0..=20.
    pub top_k: usize,
}

impl ScoreRequest {
    pub fn new(prompt: Prompt) -> Self {
        Self { prompt, generated: Vec::new(), top_k: DEFAULT_SCORE_TOP_K }
    }

    pub fn validate(&self, vocab_size: usize) -> Result<(), EngineError> {
        if self.top_k > MAX_SCORE_TOP_K {
            return Err(EngineError::bad_option("top_k", format!("0..={MAX_SCORE_TOP_K}"), self.top_k));
        }
        if let Some(&id) = self.generated.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(EngineError::bad_option("generated", format!("token ids below {vocab_size}"), id));
        }
        Ok(())
    }
}

/// One token of the text, as the model rated it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoredToken {
    pub id: u32,
    /// The token's own text (a token holding part of a UTF-8 character shows U+FFFD).
    pub text: String,
    /// A control token (a chat template's markers, BOS), not text.
    pub special: bool,
    /// The token's probability after the tokens before it (absent for the first token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prob: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprob: Option<f64>,
    /// Its rank in that distribution: 1 for the most likely token, ties to the lower id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The entropy (nats) of that distribution: how unsure the model was here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entropy: Option<f64>,
    /// The distribution's best tokens at this position, best first (empty for the first token).
    pub top: Vec<TopCandidate>,
}

/// A text rated token by token.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoreReport {
    /// Every token of the text, in order.
    pub tokens: Vec<ScoredToken>,
    /// Tokens that were predicted (all but the first).
    pub predicted_tokens: usize,
    /// `Σ log p` of the predicted tokens (natural log).
    pub total_logprob: f64,
    /// `exp(−total_logprob / predicted_tokens)` (absent when nothing was predicted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub perplexity: Option<f64>,
    /// What the model expects after the text: the last position's best tokens.
    pub next: Vec<TopCandidate>,
    /// The entropy (nats) of the distribution after the text.
    pub next_entropy: f64,
    /// Bytes read back from the device (0 on the CPU engine, whose rows are in memory).
    pub bytes_read: u64,
    /// Wall time of the pass and the reading, in milliseconds.
    pub elapsed_ms: f64,
}

impl Engine {
    /// Rates every token of `request.prompt` (see the module). Uses the engine's KV cache: its
    /// previous contents are replaced by the text.
    pub async fn score(&mut self, request: &ScoreRequest) -> Result<ScoreReport, EngineError> {
        request.validate(self.info.vocab_size)?;
        let tokens = self.context_tokens(&request.prompt, &request.generated)?;
        let clock = Stopwatch::start();
        self.clear_cache();
        let scores = match self.model.score(&tokens, &mut self.cache, request.top_k).await {
            Ok(scores) => scores,
            Err(error) => {
                // A pass may have run part of the text: start the next request afresh.
                self.clear_cache();
                return Err(error.into());
            }
        };
        self.cached_tokens = tokens.clone();
        let candidates = |row: &nucleus_model::RowScore| -> Vec<TopCandidate> {
            row.top
                .iter()
                .map(|&(id, logit)| TopCandidate {
                    id,
                    text: self.tokenizer.token_text(id),
                    logit,
                    logprob: row.log_prob(logit),
                })
                .collect()
        };
        let mut total_logprob = 0.0;
        let mut scored = Vec::with_capacity(tokens.len());
        for (index, &id) in tokens.iter().enumerate() {
            let (mut prob, mut logprob, mut rank, mut entropy, mut top) = (None, None, None, None, Vec::new());
            if let Some(row) = index.checked_sub(1).map(|before| &scores.rows[before]) {
                let next = row.target.expect("every row but the last rates the token after it");
                let log_p = row.log_prob(next.logit);
                total_logprob += log_p;
                (prob, logprob, rank, entropy) = (Some(log_p.exp()), Some(log_p), Some(next.rank), Some(row.entropy));
                top = candidates(row);
            }
            let special = self.tokenizer.is_control(id);
            let text = self.tokenizer.token_text(id);
            scored.push(ScoredToken { id, text, special, prob, logprob, rank, entropy, top });
        }
        let predicted_tokens = tokens.len() - 1;
        Ok(ScoreReport {
            tokens: scored,
            predicted_tokens,
            total_logprob,
            perplexity: (predicted_tokens > 0).then(|| (-total_logprob / predicted_tokens as f64).exp()),
            next: scores.rows.last().map(candidates).unwrap_or_default(),
            next_entropy: scores.rows.last().map_or(0.0, |row| row.entropy),
            bytes_read: scores.bytes_read,
            elapsed_ms: clock.elapsed_ms(),
        })
    }
}
