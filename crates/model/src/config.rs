//! The hyper-parameters of a model, read from GGUF metadata, and what follows from them per block.

use nucleus_gguf::GgufFile;

use crate::ModelError;
use crate::architecture::{self, Architecture};

/// Shape and constants of a model of one of the supported families.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub architecture: String,
    pub block_count: usize,
    pub embedding_length: usize,
    pub feed_forward_length: usize,
    pub head_count: usize,
    pub head_count_kv: usize,
    /// Values per head: `{arch}.attention.key_length` when the file has it (Gemma 3 and Qwen3
    /// heads are wider than `embedding_length / head_count`), else that quotient.
    pub head_dim: usize,
    /// Dimensions of each head that RoPE rotates (GGUF `rope.dimension_count`; all of them).
    pub rope_dims: usize,
    pub rope_freq_base: f64,
    pub rms_norm_eps: f64,
    pub vocab_size: usize,
    /// Positions the model runs: the file's trained context, or fewer when the engine asks
    /// (the RoPE tables and the KV cache are sized by it).
    pub context_length: usize,
    /// Keys a local block's query sees (`{arch}.attention.sliding_window`), for families with
    /// local blocks.
    pub sliding_window: Option<usize>,
}

/// How one block attends: its window (`None`: every earlier position) and its RoPE base.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockAttention {
    pub window: Option<usize>,
    pub rope_base: f64,
}

impl ModelConfig {
    /// Reads `{arch}.*` keys. Fails on an unsupported architecture, a missing key, or
    /// inconsistent numbers (heads that do not divide, and so on).
    pub fn from_gguf(file: &GgufFile) -> Result<Self, ModelError> {
        let architecture_name = file.get_str("general.architecture")?.to_string();
        let architecture = architecture::by_name(&architecture_name)
            .ok_or_else(|| ModelError::UnsupportedArchitecture(architecture_name.clone()))?;
        let key = |name: &str| format!("{architecture_name}.{name}");
        let usize_key = |name: &str| -> Result<usize, ModelError> { Ok(file.get_u64(&key(name))? as usize) };
        let optional = |name: &str| -> Result<Option<usize>, ModelError> {
            file.get(&key(name)).map(|_| usize_key(name)).transpose()
        };

        let embedding_length = usize_key("embedding_length")?;
        let head_count = usize_key("attention.head_count")?;
        let head_count_kv = optional("attention.head_count_kv")?.unwrap_or(head_count);
        if head_count == 0 {
            return Err(ModelError::Invalid("the model has no attention heads".into()));
        }
        if head_count_kv == 0 || head_count % head_count_kv != 0 {
            return Err(ModelError::Invalid(format!(
                "{head_count_kv} key/value heads do not divide {head_count} attention heads"
            )));
        }
        let head_dim = match optional("attention.key_length")? {
            Some(length) => length,
            None if embedding_length % head_count == 0 => embedding_length / head_count,
            None => {
                return Err(ModelError::Invalid(format!(
                    "{head_count} attention heads do not divide the embedding length {embedding_length}"
                )));
            }
        };
        if let Some(value_length) = optional("attention.value_length")?.filter(|&v| v != head_dim) {
            return Err(ModelError::Unsupported(format!(
                "values of {value_length} dimensions per head beside keys of {head_dim}"
            )));
        }
        let rope_dims = optional("rope.dimension_count")?.unwrap_or(head_dim);
        if rope_dims != head_dim {
            return Err(ModelError::Unsupported(format!(
                "partial rotary embeddings ({rope_dims} of {head_dim} head dimensions)"
            )));
        }
        let vocab_size = match optional("vocab_size")? {
            Some(n) => n,
            None => file.get_array("tokenizer.ggml.tokens")?.len(),
        };
        let rope_freq_base = match file.get(&key("rope.freq_base")) {
            Some(_) => file.get_f64(&key("rope.freq_base"))?,
            None => 10_000.0,
        };
        if let Some(kind) = file.get(&key("rope.scaling.type")).and_then(|v| v.as_str()).filter(|&t| t != "none") {
            return Err(ModelError::Unsupported(format!("RoPE scaling ('{kind}')")));
        }
        if file.get(&key("rope.scaling.factor")).and_then(|v| v.as_f64()).is_some_and(|f| f != 0.0 && f != 1.0) {
            return Err(ModelError::Unsupported("RoPE scaling (rope.scaling.factor)".into()));
        }
        for softcap in ["attn_logit_softcapping", "final_logit_softcapping"] {
            if file.get(&key(softcap)).and_then(|v| v.as_f64()).is_some_and(|f| f != 0.0) {
                return Err(ModelError::Unsupported(format!("logit soft-capping ({architecture_name}.{softcap})")));
            }
        }
        let sliding_window = match architecture.sliding_window {
            Some(_) => Some(usize_key("attention.sliding_window")?),
            None => None,
        };
        let config = Self {
            block_count: usize_key("block_count")?,
            embedding_length,
            feed_forward_length: usize_key("feed_forward_length")?,
            head_count,
            head_count_kv,
            head_dim,
            rope_dims,
            rope_freq_base,
            rms_norm_eps: file.get_f64(&key("attention.layer_norm_rms_epsilon"))?,
            vocab_size,
            context_length: usize_key("context_length")?,
            sliding_window,
            architecture: architecture_name,
        };
        let zero = [config.block_count, config.vocab_size, config.context_length, config.embedding_length].contains(&0)
            || config.head_dim == 0
            || config.feed_forward_length == 0
            || config.sliding_window == Some(0);
        if zero {
            return Err(ModelError::Invalid(
                "blocks, vocabulary, context, embedding, heads, feed-forward and window must be non-zero".into(),
            ));
        }
        if !config.head_dim.is_multiple_of(2) {
            return Err(ModelError::Invalid(format!("RoPE needs an even head dimension, not {}", config.head_dim)));
        }
        Ok(config)
    }

    /// The architecture (checked supported when the config was read).
    pub fn architecture(&self) -> &'static Architecture {
        architecture::by_name(&self.architecture).expect("from_gguf accepts supported architectures only")
    }

    /// Query heads that share one key/value head.
    pub fn group_size(&self) -> usize {
        self.head_count / self.head_count_kv
    }

    /// Values of all query heads of a position.
    pub fn q_dim(&self) -> usize {
        self.head_count * self.head_dim
    }

    /// Values of all key (or value) heads of a position.
    pub fn kv_dim(&self) -> usize {
        self.head_count_kv * self.head_dim
    }

    /// Bytes one position takes in one block's KV cache: keys and values, f32 (both paths).
    pub fn kv_position_bytes(&self) -> u64 {
        2 * self.kv_dim() as u64 * 4
    }

    /// Bytes one token takes in the KV cache, every block together.
    pub fn kv_token_bytes(&self) -> u64 {
        self.block_count as u64 * self.kv_position_bytes()
    }

    /// How block `block` attends: Gemma 3's local blocks see a window of keys and rotate with
    /// their own base; every other block sees every earlier position.
    pub fn block_attention(&self, block: usize) -> BlockAttention {
        let global = BlockAttention { window: None, rope_base: self.rope_freq_base };
        match (self.architecture().sliding_window, self.sliding_window) {
            (Some(pattern), Some(window)) if !(block + 1).is_multiple_of(pattern.period) => {
                BlockAttention { window: Some(window), rope_base: pattern.local_rope_base }
            }
            _ => global,
        }
    }

    /// The factor the token embedding is multiplied by (`√embedding_length` for Gemma, else 1),
    /// rounded to f32 once: the one value both paths multiply by.
    pub fn embedding_scale(&self) -> f32 {
        if self.architecture().scale_embedding { (self.embedding_length as f64).sqrt() as f32 } else { 1.0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gemma() -> ModelConfig {
        ModelConfig {
            architecture: "gemma3".into(),
            block_count: 18,
            embedding_length: 640,
            feed_forward_length: 2048,
            head_count: 4,
            head_count_kv: 1,
            head_dim: 256,
            rope_dims: 256,
            rope_freq_base: 1e6,
            rms_norm_eps: 1e-6,
            vocab_size: 262_144,
            context_length: 32_768,
            sliding_window: Some(512),
        }
    }

    #[test]
    fn gemma_blocks_5_11_17_are_global_and_the_others_local() {
        let config = gemma();
        let global: Vec<usize> = (0..18).filter(|&b| config.block_attention(b).window.is_none()).collect();
        assert_eq!(global, [5, 11, 17]);
        assert_eq!(config.block_attention(0), BlockAttention { window: Some(512), rope_base: 10_000.0 });
        assert_eq!(config.block_attention(5), BlockAttention { window: None, rope_base: 1e6 });
        assert_eq!(config.q_dim(), 1024);
        assert_eq!(config.embedding_scale(), 640f32.sqrt());
    }

    #[test]
    fn a_family_without_local_blocks_attends_globally_everywhere() {
        let config = ModelConfig { architecture: "qwen3".into(), sliding_window: None, ..gemma() };
        assert!((0..18).all(|b| config.block_attention(b).window.is_none()));
        assert_eq!(config.embedding_scale(), 1.0);
    }
}
