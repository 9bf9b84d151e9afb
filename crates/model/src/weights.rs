//! The weight table: every tensor a model needs, with its expected shape, in load order. Both
//! forward paths load through [`load`], each turning a GGUF tensor into its own kind of weight
//! (an f32 Burn tensor, or the GGUF blocks in a GPU buffer).

use nucleus_gguf::{GgufError, GgufFile, TensorInfo};

use crate::architecture::{Architecture, Role};
use crate::{LlamaConfig, LoadProgress, ModelError};

/// The tensors of one block.
#[derive(Debug)]
pub struct BlockWeights<T> {
    pub attention_norm: T,
    pub query: T,
    pub key: T,
    pub value: T,
    pub attention_output: T,
    pub feed_forward_norm: T,
    pub gate: T,
    pub up: T,
    pub down: T,
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
}

/// `(role, block, GGML dims [cols, rows])` of every tensor, in load order.
fn table(config: &LlamaConfig, tied: bool) -> Vec<(Role, usize, Vec<u64>)> {
    let d = config.embedding_length as u64;
    let (kv, ffn, vocab) = (config.kv_dim() as u64, config.feed_forward_length as u64, config.vocab_size as u64);
    let mut table = vec![(Role::TokenEmbedding, 0, vec![d, vocab])];
    for block in 0..config.block_count {
        table.extend([
            (Role::AttentionNorm, block, vec![d]),
            (Role::Query, block, vec![d, d]),
            (Role::Key, block, vec![d, kv]),
            (Role::Value, block, vec![d, kv]),
            (Role::AttentionOutput, block, vec![d, d]),
            (Role::FeedForwardNorm, block, vec![d]),
            (Role::Gate, block, vec![d, ffn]),
            (Role::Up, block, vec![d, ffn]),
            (Role::Down, block, vec![ffn, d]),
        ]);
    }
    table.push((Role::OutputNorm, 0, vec![d]));
    if !tied {
        table.push((Role::Output, 0, vec![d, vocab]));
    }
    table
}

/// Whether `file` ties the output layer to the token embedding (it has no `output.weight`).
pub fn tied_output(file: &GgufFile, architecture: &Architecture) -> bool {
    file.tensor(&architecture.tensor_name(Role::Output, 0)).is_none()
}

/// Loads every tensor of the model with `upload` (checked against its expected shape first),
/// calling `progress` after each.
pub fn load<T>(
    file: &GgufFile,
    architecture: &Architecture,
    config: &LlamaConfig,
    mut progress: impl FnMut(LoadProgress),
    mut upload: impl FnMut(&TensorInfo) -> Result<T, ModelError>,
) -> Result<ModelWeights<T>, ModelError> {
    let tied = tied_output(file, architecture);
    let table = table(config, tied);
    let mut infos = Vec::with_capacity(table.len());
    for (role, block, expected) in table {
        let name = architecture.tensor_name(role, block);
        let info = file.tensor(&name).ok_or_else(|| GgufError::MissingTensor(name.clone()))?;
        if info.dims != expected {
            return Err(ModelError::WrongShape { name, expected, found: info.dims.clone() });
        }
        infos.push(info);
    }
    let mut status = LoadProgress {
        tensors_done: 0,
        tensors_total: infos.len(),
        bytes_done: 0,
        bytes_total: infos.iter().map(|t| t.byte_len()).sum(),
    };
    let mut loaded = infos.into_iter().map(|info| {
        let weight = upload(info)?;
        status.tensors_done += 1;
        status.bytes_done += info.byte_len();
        progress(status);
        Ok::<T, ModelError>(weight)
    });
    let mut next = || loaded.next().expect("one weight per table entry");
    let token_embedding = next()?;
    let mut blocks = Vec::with_capacity(config.block_count);
    for _ in 0..config.block_count {
        blocks.push(BlockWeights {
            attention_norm: next()?,
            query: next()?,
            key: next()?,
            value: next()?,
            attention_output: next()?,
            feed_forward_norm: next()?,
            gate: next()?,
            up: next()?,
            down: next()?,
        });
    }
    let output_norm = next()?;
    let output = if tied { None } else { Some(next()?) };
    Ok(ModelWeights { token_embedding, blocks, output_norm, output })
}
