//! What a token attends to: one layer's attention weights (one head's, or the mean of its
//! heads'), after the softmax, from chosen positions of a text to every earlier position
//! ([`nucleus_model::Model::attention`]): a heatmap's rows. A Gemma 3 local layer's window
//! shows as zeros before it; a Qwen3.5 Gated DeltaNet layer has no attention to show (the
//! report says its memory is a state). Read for an inspection only: a generation's passes never
//! compute it.

use std::ops::Range;

use nucleus_model::{AttentionHeads, MAX_ATTENTION_ROWS, Mixer};
use serde::Serialize;

use crate::{Engine, EngineError, Prompt, Stopwatch};

/// A text and what to read of one layer's attention over it.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionRequest {
    pub prompt: Prompt,
    /// Token ids after the prompt's (a run's generated tokens), read with it.
    pub generated: Vec<u32>,
    /// The layer, 1-based (as the logit lens numbers them); default the last.
    pub layer: Option<usize>,
    /// One head, 1-based; `None`: the mean of the layer's heads.
    pub head: Option<usize>,
    /// The first query position (a 0-based token index); default `to −` [`MAX_ATTENTION_ROWS`]
    /// (or 0).
    pub from: Option<usize>,
    /// The position after the last query; default the text's end.
    pub to: Option<usize>,
}

impl AttentionRequest {
    pub fn new(prompt: Prompt) -> Self {
        Self { prompt, generated: Vec::new(), layer: None, head: None, from: None, to: None }
    }
}

/// A token of the text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttentionToken {
    pub id: u32,
    pub text: String,
    /// A control token (a chat template's markers, BOS).
    pub special: bool,
}

/// One query position's row of the heatmap.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttentionRow {
    pub position: usize,
    /// The weight of each position `0..=position` (sums to 1; 0 before a window).
    pub weights: Vec<f32>,
}

/// One layer's attention over a text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttentionReport {
    pub tokens: Vec<AttentionToken>,
    /// The layer read, 1-based.
    pub layer: usize,
    /// The head read, 1-based; absent for the mean of the layer's heads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head: Option<usize>,
    /// Query heads per attention layer.
    pub heads: usize,
    /// What each layer keeps of earlier positions, first to last: `"kv-rows"` (attention) or
    /// `"state"` (a Gated DeltaNet layer: nothing to show here).
    pub layers: Vec<&'static str>,
    /// The layer's window (a local layer of Gemma 3): a position sees itself and the `window − 1`
    /// before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<usize>,
    /// The rows, in position order (none for a layer without attention).
    pub rows: Vec<AttentionRow>,
    /// Bytes read back from the device (0 on the CPU engine).
    pub bytes_read: u64,
    pub elapsed_ms: f64,
}

/// What a layer keeps of earlier positions, as reports name it (the logit lens's too).
pub(crate) fn memory_of(mixer: Mixer) -> &'static str {
    match mixer {
        Mixer::Attention => "kv-rows",
        Mixer::GatedDeltaNet => "state",
    }
}

impl Engine {
    /// Reads one layer's attention over `request`'s text (see the module). Uses the engine's KV
    /// cache: its previous contents are replaced by the text.
    pub async fn attention(&mut self, request: &AttentionRequest) -> Result<AttentionReport, EngineError> {
        let config = self.model.config().clone();
        let blocks = config.block_count;
        let layer = request.layer.unwrap_or(blocks);
        if !(1..=blocks).contains(&layer) {
            return Err(EngineError::bad_option("layer", format!("1..={blocks}"), layer));
        }
        if let Some(head) = request.head.filter(|h| !(1..=config.head_count).contains(h)) {
            return Err(EngineError::bad_option("head", format!("1..={}", config.head_count), head));
        }
        let ids = self.context_tokens(&request.prompt, &request.generated)?;
        let to = request.to.unwrap_or(ids.len());
        if !(1..=ids.len()).contains(&to) {
            return Err(EngineError::bad_option("to", format!("1..={} (the text's tokens)", ids.len()), to));
        }
        let from = request.from.unwrap_or(to.saturating_sub(MAX_ATTENTION_ROWS));
        if from >= to || to - from > MAX_ATTENTION_ROWS {
            let allowed = format!("below to ({to}), at most {MAX_ATTENTION_ROWS} positions before it");
            return Err(EngineError::bad_option("from", allowed, from));
        }
        let positions: Range<usize> = from..to;
        let clock = Stopwatch::start();
        let tokens = ids
            .iter()
            .map(|&id| AttentionToken {
                id,
                text: self.tokenizer.token_text(id),
                special: self.tokenizer.is_control(id),
            })
            .collect();
        let block = layer - 1;
        let mut report = AttentionReport {
            tokens,
            layer,
            head: request.head,
            heads: config.head_count,
            layers: (0..blocks).map(|b| memory_of(config.mixer(b))).collect(),
            window: None,
            rows: Vec::new(),
            bytes_read: 0,
            elapsed_ms: 0.0,
        };
        if config.mixer(block) != Mixer::Attention {
            return Ok(report);
        }
        let heads = request.head.map_or(AttentionHeads::Mean, |h| AttentionHeads::One(h - 1));
        self.clear_cache();
        let map = match self.model.attention(&ids, &mut self.cache, block, heads, positions).await {
            Ok(map) => map,
            Err(error) => {
                self.clear_cache();
                return Err(error.into());
            }
        };
        self.cached_tokens = ids;
        report.window = map.window;
        report.rows =
            (map.first..).zip(map.rows).map(|(position, weights)| AttentionRow { position, weights }).collect();
        report.bytes_read = map.bytes_read;
        report.elapsed_ms = clock.elapsed_ms();
        Ok(report)
    }
}
