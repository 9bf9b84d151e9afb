//! The weight table: every tensor a model needs, with its expected shape, in load order, from the
//! family's [`BlockSpec`](crate::BlockSpec). Both forward paths load through [`load`], each turning
//! a GGUF tensor into its own kind of weight (f32 Burn tensors, or the GGUF blocks in GPU buffers).

use std::collections::HashMap;
use std::ops::Range;

use nucleus_gguf::{GgufError, GgufHeader, TensorInfo};

use crate::architecture::{Mixer, Role};
use crate::{LoadProgress, ModelConfig, ModelError};

/// The tensors of an attention mixer; the optional ones are those only some families have.
#[derive(Debug)]
pub struct AttentionWeights<T> {
    /// `[q_dim, dim]`, or with an output gate `[2 · q_dim, dim]` (per head the query, then the gate).
    pub query: T,
    pub key: T,
    pub value: T,
    /// Biases of the query, key and value projections (`qkv_bias`).
    pub query_bias: Option<T>,
    pub key_bias: Option<T>,
    pub value_bias: Option<T>,
    /// Per-head RMSNorm weights of queries and keys (`qk_norm`).
    pub query_norm: Option<T>,
    pub key_norm: Option<T>,
    pub output: T,
}

/// The tensors of a Gated DeltaNet mixer (Qwen3.5's recurrent blocks), named as in
/// [`Role`]'s `Delta*` roles.
#[derive(Debug)]
pub struct DeltaNetWeights<T> {
    /// `[channels, dim]`: queries, keys and values before the convolution.
    pub qkv: T,
    /// `[value_dim, dim]`: the output gate `z`.
    pub gate: T,
    /// `[value_heads, dim]`: β before its sigmoid.
    pub beta: T,
    /// `[value_heads, dim]`: α, the decay's input.
    pub alpha: T,
    /// `[value_heads]`.
    pub dt_bias: T,
    /// `[value_heads]`: `−exp(A_log)`.
    pub a: T,
    /// `[channels, kernel]`.
    pub conv: T,
    /// `[head_dim]`.
    pub norm: T,
    /// `[dim, value_dim]`.
    pub output: T,
}

/// What mixes positions in a block ([`Mixer`](crate::Mixer)), with its tensors.
#[derive(Debug)]
pub enum MixerWeights<T> {
    Attention(AttentionWeights<T>),
    GatedDeltaNet(DeltaNetWeights<T>),
}

/// The tensors of one block; the optional ones are those only some families have.
#[derive(Debug)]
pub struct BlockWeights<T> {
    pub attention_norm: T,
    pub mixer: MixerWeights<T>,
    /// RMSNorm weight of the mixer's output (`post_norms`).
    pub post_attention_norm: Option<T>,
    pub feed_forward_norm: T,
    pub gate: T,
    pub up: T,
    pub down: T,
    /// RMSNorm weight of the feed-forward's output (`post_norms`).
    pub post_feed_forward_norm: Option<T>,
}

impl<T> BlockWeights<T> {
    /// The attention's tensors, for an attention block (the Burn-op path, which computes no other).
    #[cfg(feature = "burn-ops")]
    pub fn attention(&self) -> Option<&AttentionWeights<T>> {
        match &self.mixer {
            MixerWeights::Attention(attention) => Some(attention),
            MixerWeights::GatedDeltaNet(_) => None,
        }
    }
}

/// The tensors of a model.
#[derive(Debug)]
pub struct ModelWeights<T> {
    pub token_embedding: T,
    pub blocks: Vec<BlockWeights<T>>,
    pub output_norm: T,
    /// `None` when the model ties its output layer to the token embedding.
    pub output: Option<T>,
}

impl<T> ModelWeights<T> {
    /// The output layer: its own tensor, or the token embedding.
    pub fn output(&self) -> &T {
        self.output.as_ref().unwrap_or(&self.token_embedding)
    }

    /// Every weight, each once.
    pub fn all(&self) -> impl Iterator<Item = &T> {
        let blocks = self.blocks.iter().flat_map(|b| {
            let mixer: Vec<Option<&T>> = match &b.mixer {
                MixerWeights::Attention(a) => vec![
                    Some(&a.query),
                    Some(&a.key),
                    Some(&a.value),
                    a.query_bias.as_ref(),
                    a.key_bias.as_ref(),
                    a.value_bias.as_ref(),
                    a.query_norm.as_ref(),
                    a.key_norm.as_ref(),
                    Some(&a.output),
                ],
                MixerWeights::GatedDeltaNet(d) => {
                    [&d.qkv, &d.gate, &d.beta, &d.alpha, &d.dt_bias, &d.a, &d.conv, &d.norm, &d.output]
                        .map(Some)
                        .to_vec()
                }
            };
            std::iter::once(Some(&b.attention_norm))
                .chain(mixer)
                .chain([
                    b.post_attention_norm.as_ref(),
                    Some(&b.feed_forward_norm),
                    Some(&b.gate),
                    Some(&b.up),
                    Some(&b.down),
                    b.post_feed_forward_norm.as_ref(),
                ])
                .flatten()
        });
        std::iter::once(&self.token_embedding).chain(blocks).chain([&self.output_norm]).chain(self.output.as_ref())
    }
}

/// `(role, block, GGML dims [cols, rows])` of every tensor, in load order.
fn table(config: &ModelConfig, tied: bool) -> Vec<(Role, usize, Vec<u64>)> {
    let spec = config.architecture().block;
    let d = config.embedding_length as u64;
    let (q, kv, hd) = (config.q_dim() as u64, config.kv_dim() as u64, config.head_dim as u64);
    let (ffn, vocab) = (config.feed_forward_length as u64, config.vocab_size as u64);
    let mut table = vec![(Role::TokenEmbedding, 0, vec![d, vocab])];
    for block in 0..config.block_count {
        let mut add = |role, dims: &[u64]| table.push((role, block, dims.to_vec()));
        add(Role::AttentionNorm, &[d]);
        match (config.mixer(block), &config.delta_net) {
            (Mixer::GatedDeltaNet, Some(delta)) => {
                let (channels, value_dim) = (delta.channels() as u64, delta.value_dim() as u64);
                let (heads, kernel) = (delta.value_heads as u64, delta.conv_kernel as u64);
                add(Role::DeltaQkv, &[d, channels]);
                add(Role::DeltaGate, &[d, value_dim]);
                add(Role::DeltaBeta, &[d, heads]);
                add(Role::DeltaAlpha, &[d, heads]);
                add(Role::DeltaDtBias, &[heads]);
                add(Role::DeltaA, &[heads]);
                add(Role::DeltaConv, &[kernel, channels]);
                add(Role::DeltaNorm, &[delta.head_dim as u64]);
                add(Role::DeltaOutput, &[value_dim, d]);
            }
            _ => {
                add(Role::Query, &[d, config.query_projection_dim() as u64]);
                add(Role::Key, &[d, kv]);
                add(Role::Value, &[d, kv]);
                if spec.qkv_bias {
                    add(Role::QueryBias, &[q]);
                    add(Role::KeyBias, &[kv]);
                    add(Role::ValueBias, &[kv]);
                }
                if spec.qk_norm {
                    add(Role::QueryNorm, &[hd]);
                    add(Role::KeyNorm, &[hd]);
                }
                add(Role::AttentionOutput, &[q, d]);
            }
        }
        if spec.post_norms {
            add(Role::PostAttentionNorm, &[d]);
        }
        add(Role::FeedForwardNorm, &[d]);
        add(Role::Gate, &[d, ffn]);
        add(Role::Up, &[d, ffn]);
        add(Role::Down, &[ffn, d]);
        if spec.post_norms {
            add(Role::PostFeedForwardNorm, &[d]);
        }
    }
    table.push((Role::OutputNorm, 0, vec![d]));
    if !tied {
        table.push((Role::Output, 0, vec![d, vocab]));
    }
    table
}

/// Whether `file` ties the output layer to the token embedding (it has no `output.weight`).
pub fn tied_output(file: &GgufHeader) -> bool {
    file.tensor(&Role::Output.tensor_name(0)).is_none()
}

/// The weights the model loads, each checked against its expected shape.
pub fn tensors<'f>(
    file: &'f GgufHeader,
    config: &ModelConfig,
) -> Result<Vec<(Role, usize, &'f TensorInfo)>, ModelError> {
    let architecture = config.architecture();
    table(config, tied_output(file))
        .into_iter()
        .map(|(role, block, expected)| {
            let name = architecture.tensor_name(role, block);
            let info = file.tensor(&name).ok_or_else(|| GgufError::MissingTensor(name.clone()))?;
            if info.dims != expected {
                return Err(ModelError::WrongShape { name, expected, found: info.dims.clone() });
            }
            Ok((role, block, info))
        })
        .collect()
}

/// Refuses, before anything is loaded, a weight of a type `nucleus_gguf` cannot dequantize (the
/// Burn and CPU paths read every format through it).
pub fn check_dequantizable(file: &GgufHeader, config: &ModelConfig) -> Result<(), ModelError> {
    for (_, _, info) in tensors(file, config)? {
        if !nucleus_gguf::can_dequantize(info.ggml_type) {
            return Err(
                GgufError::UnsupportedDequantization { name: info.name.clone(), ggml_type: info.ggml_type }.into()
            );
        }
    }
    Ok(())
}

/// Parameters of the model: the elements of every tensor it loads (a tied output layer once).
pub fn parameter_count(file: &GgufHeader, config: &ModelConfig) -> Result<u64, ModelError> {
    Ok(tensors(file, config)?.iter().map(|(_, _, info)| info.element_count()).sum())
}

/// Loads every tensor of the model with `upload` (checked against its expected shape first),
/// calling `progress` after each.
pub fn load<T>(
    file: &GgufHeader,
    config: &ModelConfig,
    mut progress: impl FnMut(LoadProgress),
    mut upload: impl FnMut(Role, &TensorInfo) -> Result<T, ModelError>,
) -> Result<ModelWeights<T>, ModelError> {
    let infos = tensors(file, config)?;
    let mut status = LoadProgress::of(infos.iter().map(|(_, _, info)| *info));
    let mut set = WeightSet::new(file, config)?;
    for (role, block, info) in infos {
        set.insert(role, block, upload(role, info)?);
        status.add(info);
        progress(status);
    }
    set.finish(config)
}

/// The weights of a model as they are loaded, a tensor at a time in any order (a whole file's
/// table order, or the order a streamed file's bytes arrive in), then assembled
/// ([`WeightSet::finish`]).
pub struct WeightSet<T> {
    /// Each tensor the model loads, by name: its role and block (checked against its shape);
    /// what a streamed load asks of each tensor as it arrives (the fused path's).
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))]
    wanted: HashMap<String, (Role, usize)>,
    loaded: HashMap<(Role, usize), T>,
}

impl<T> WeightSet<T> {
    pub fn new(file: &GgufHeader, config: &ModelConfig) -> Result<Self, ModelError> {
        let wanted: HashMap<String, (Role, usize)> =
            tensors(file, config)?.into_iter().map(|(role, block, info)| (info.name.clone(), (role, block))).collect();
        Ok(Self { loaded: HashMap::with_capacity(wanted.len()), wanted })
    }

    /// The role and block of the tensor called `name`, when the model loads it.
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))]
    pub fn role(&self, name: &str) -> Option<(Role, usize)> {
        self.wanted.get(name).copied()
    }

    pub fn insert(&mut self, role: Role, block: usize, weight: T) {
        self.loaded.insert((role, block), weight);
    }

    /// The model's weights; a required tensor never given is `MissingTensor`.
    pub fn finish(mut self, config: &ModelConfig) -> Result<ModelWeights<T>, ModelError> {
        let architecture = config.architecture();
        let mut take = |role: Role, block: usize| self.loaded.remove(&(role, block));
        let required = |weight: Option<T>, role: Role, block: usize| {
            weight.ok_or_else(|| ModelError::from(GgufError::MissingTensor(architecture.tensor_name(role, block))))
        };
        let mut blocks = Vec::with_capacity(config.block_count);
        for block in 0..config.block_count {
            let mut need = |role: Role| required(take(role, block), role, block);
            let mixer = match config.mixer(block) {
                Mixer::Attention => MixerWeights::Attention(AttentionWeights {
                    query: need(Role::Query)?,
                    key: need(Role::Key)?,
                    value: need(Role::Value)?,
                    query_bias: take(Role::QueryBias, block),
                    key_bias: take(Role::KeyBias, block),
                    value_bias: take(Role::ValueBias, block),
                    query_norm: take(Role::QueryNorm, block),
                    key_norm: take(Role::KeyNorm, block),
                    output: required(take(Role::AttentionOutput, block), Role::AttentionOutput, block)?,
                }),
                Mixer::GatedDeltaNet => MixerWeights::GatedDeltaNet(DeltaNetWeights {
                    qkv: need(Role::DeltaQkv)?,
                    gate: need(Role::DeltaGate)?,
                    beta: need(Role::DeltaBeta)?,
                    alpha: need(Role::DeltaAlpha)?,
                    dt_bias: need(Role::DeltaDtBias)?,
                    a: need(Role::DeltaA)?,
                    conv: need(Role::DeltaConv)?,
                    norm: need(Role::DeltaNorm)?,
                    output: need(Role::DeltaOutput)?,
                }),
            };
            blocks.push(BlockWeights {
                attention_norm: required(take(Role::AttentionNorm, block), Role::AttentionNorm, block)?,
                mixer,
                post_attention_norm: take(Role::PostAttentionNorm, block),
                feed_forward_norm: required(take(Role::FeedForwardNorm, block), Role::FeedForwardNorm, block)?,
                gate: required(take(Role::Gate, block), Role::Gate, block)?,
                up: required(take(Role::Up, block), Role::Up, block)?,
                down: required(take(Role::Down, block), Role::Down, block)?,
                post_feed_forward_norm: take(Role::PostFeedForwardNorm, block),
            });
        }
        Ok(ModelWeights {
            token_embedding: required(take(Role::TokenEmbedding, 0), Role::TokenEmbedding, 0)?,
            blocks,
            output_norm: required(take(Role::OutputNorm, 0), Role::OutputNorm, 0)?,
            output: take(Role::Output, 0),
        })
    }
}

/// Row ranges of a vocabulary-sized matrix (the token embedding, the output layer) that each fit
/// `limit` bytes: one storage binding of the device. Gemma 3's 262,144 × 640 Q8_0 embedding is
/// 170 MiB, more than the 128 MiB many devices bind at once, so such a matrix is held in parts.
pub fn vocabulary_parts(rows: usize, row_bytes: u64, limit: u64) -> Result<Vec<Range<usize>>, ModelError> {
    if row_bytes > limit {
        return Err(ModelError::OutOfMemory(format!(
            "one row of the vocabulary matrix needs {row_bytes} bytes, more than this GPU binds at once ({limit})"
        )));
    }
    let per_part = (limit / row_bytes.max(1)) as usize;
    Ok((0..rows).step_by(per_part.max(1)).map(|begin| begin..(begin + per_part).min(rows)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matrix_larger_than_a_binding_is_held_in_parts_that_fit() {
        // Gemma 3's embedding: 262,144 rows of 680 bytes (Q8_0, 640 columns) in 128 MiB bindings.
        let parts = vocabulary_parts(262_144, 680, 128 << 20).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], 0..197_379);
        assert_eq!(parts[1], 197_379..262_144);
        assert!(parts.iter().all(|p| p.len() as u64 * 680 <= 128 << 20));
        let whole = vocabulary_parts(49_152, 612, 1 << 30).unwrap();
        assert_eq!((whole.len(), whole[0].clone()), (1, 0..49_152));
        assert!(vocabulary_parts(10, 1 << 20, 1000).is_err());
    }
}
