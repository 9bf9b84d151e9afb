//! What a block attends to: the softmax weights of its attention for chosen query positions,
//! one head's or the mean of every head's, read on every path for an inspection and never in a
//! generation's pass. The fused path records `attention_weights.wgsl` after the block's
//! `attn_qkv` and reads back only the rows asked; the CPU engine computes them from the queries
//! and keys it has in memory (`nucleus_cpu::ops::attention_weights`); the Burn path keeps its
//! softmax tensor. The reference is `nucleus_kernels::reference::attention_weights`.

use std::ops::Range;

use crate::{CacheKind, KvCache, Mixer, Model, ModelError, Route};

/// Most query positions one read returns (a heatmap's rows).
pub const MAX_ATTENTION_ROWS: usize = 256;

/// Which heads an attention read shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionHeads {
    /// One query head (0-based).
    One(usize),
    /// The mean of every head's weights.
    Mean,
}

impl AttentionHeads {
    fn index(self) -> Option<usize> {
        match self {
            AttentionHeads::One(head) => Some(head),
            AttentionHeads::Mean => None,
        }
    }
}

/// A block's attention weights for consecutive query positions ([`Model::attention`]).
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionMap {
    /// The position of the first row.
    pub first: usize,
    /// Row `i` (query position `first + i`): the weight of each key position `0..=first + i`,
    /// after the softmax (a row sums to 1); zero before a local block's window.
    pub rows: Vec<Vec<f32>>,
    /// The block's window (a local block of Gemma 3), else `None`.
    pub window: Option<usize>,
    /// Bytes read back from the device (0 on the CPU engine).
    pub bytes_read: u64,
}

impl Model {
    /// Runs `tokens` after what `cache` holds, as [`Model::forward`] does, and returns what block
    /// `block`'s attention weighs each key by for the query positions `rows` (positions of this
    /// pass, at most [`MAX_ATTENTION_ROWS`]). A Gated DeltaNet block has no attention: refused.
    pub async fn attention(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        block: usize,
        heads: AttentionHeads,
        rows: Range<usize>,
    ) -> Result<AttentionMap, ModelError> {
        let c = &self.config;
        let (start, end) = self.check_pass(tokens, cache)?;
        if block >= c.block_count || c.mixer(block) != Mixer::Attention {
            let what = if block < c.block_count { "keeps a fixed-size state, not attention" } else { "is not a block" };
            return Err(ModelError::Invalid(format!("block {block} of {} {what}", c.block_count)));
        }
        if let AttentionHeads::One(head) = heads
            && head >= c.head_count
        {
            return Err(ModelError::Invalid(format!("head {head} of {}", c.head_count)));
        }
        if rows.is_empty() || rows.start < start || rows.end > end || rows.len() > MAX_ATTENTION_ROWS {
            return Err(ModelError::Invalid(format!(
                "query positions {rows:?}: at most {MAX_ATTENTION_ROWS} of the pass's {start}..{end}"
            )));
        }
        let window = c.block_attention(block).window;
        let (weights, bytes_read) = match (&self.route, &mut cache.inner) {
            #[cfg(feature = "burn-ops")]
            (Route::Burn(model), CacheKind::Burn(inner)) => {
                let (tensor, lo) = model.attention_weights(tokens, inner, start, block)?;
                let [_, group_rows, keys] = tensor.dims();
                let bytes = (tensor.dims().iter().product::<usize>() * 4) as u64;
                let values = crate::read_tensor(tensor.reshape([group_rows * c.head_count_kv, keys])).await?;
                (burn_rows(&values, c.head_count, c.head_count_kv, start, tokens.len(), lo, heads, rows.clone()), bytes)
            }
            #[cfg(feature = "gpu")]
            (Route::Fused(model), CacheKind::Fused(inner)) => {
                model.attention(tokens, inner, start, block, heads.index(), rows.clone()).await?
            }
            (Route::Cpu(model), CacheKind::Cpu(inner)) => {
                (model.attention_weights(tokens, inner, start, block, heads.index(), rows.clone())?, 0)
            }
            #[allow(unreachable_patterns)] // The CPU engine alone (the threaded browser build).
            _ => return Err(ModelError::Invalid("the cache was made for another model".into())),
        };
        cache.len = end;
        Ok(AttentionMap { first: rows.start, rows: weights, window, bytes_read })
    }
}

/// The rows of the Burn path's softmax `[kv_heads · group · seq, T − lo]` (read back as rows:
/// row `kv · group · seq + g · seq + i` is head `kv · group + g`, query `start + i`; column `j`
/// is key `lo + j`) for the query positions `rows`.
#[cfg(feature = "burn-ops")]
#[allow(clippy::too_many_arguments)]
fn burn_rows(
    values: &[Vec<f32>],
    heads: usize,
    kv_heads: usize,
    start: usize,
    seq: usize,
    lo: usize,
    chosen: AttentionHeads,
    rows: Range<usize>,
) -> Vec<Vec<f32>> {
    let group = heads / kv_heads;
    let chosen: Vec<usize> = chosen.index().map_or_else(|| (0..heads).collect(), |h| vec![h]);
    rows.map(|position| {
        let i = position - start;
        let mut row = vec![0.0; position + 1];
        for &h in &chosen {
            let (kv, g) = (h / group, h % group);
            let source = &values[(kv * group + g) * seq + i];
            for (key, &w) in (lo..=position).zip(source) {
                row[key] += w / chosen.len() as f32;
            }
        }
        row
    })
    .collect()
}
