//! The hyper-parameters of a model, read from GGUF metadata, and what follows from them per block.

use nucleus_gguf::GgufHeader;

use crate::ModelError;
use crate::architecture::{self, Architecture, Mixer};
use crate::rope::{RopeFrequencies, RopeScaling};
use crate::window::WindowRing;

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
    /// How the file stretches RoPE for a longer context (its global blocks only, in Gemma 3).
    pub rope_scaling: RopeScaling,
    pub rms_norm_eps: f64,
    pub vocab_size: usize,
    /// Positions the model runs: the file's trained context, or fewer when the engine asks
    /// (the RoPE tables and the KV cache are sized by it).
    pub context_length: usize,
    /// Keys a local block's query sees (`{arch}.attention.sliding_window`), for families with
    /// local blocks.
    pub sliding_window: Option<usize>,
    /// The Gated DeltaNet blocks' shape, for families with recurrent blocks (Qwen3.5).
    pub delta_net: Option<DeltaNetConfig>,
    /// Multi-token-prediction blocks the file has after `block_count` (`{arch}.nextn_predict_layers`):
    /// a drafting head for speculative decoding that the next-token distribution does not use,
    /// so they are not loaded (the load report names them).
    pub skipped_mtp_blocks: usize,
}

/// The shape of a family's Gated DeltaNet blocks (`{arch}.ssm.*`, as llama.cpp's converter
/// writes Qwen3.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaNetConfig {
    /// Per block: `true` for a Gated DeltaNet block, `false` for an attention block.
    pub recurrent: Vec<bool>,
    /// Taps of the causal depthwise convolution (`ssm.conv_kernel`); its state is the last
    /// `conv_kernel − 1` inputs.
    pub conv_kernel: usize,
    /// Query and key heads (`ssm.group_count`).
    pub key_heads: usize,
    /// Value heads (`ssm.time_step_rank`), a multiple of the key heads: as the converter orders
    /// them, value head `j` reads key head `j mod key_heads`.
    pub value_heads: usize,
    /// Values per query, key and value head (`ssm.state_size`): each value head's state is
    /// `head_dim × head_dim`.
    pub head_dim: usize,
}

impl DeltaNetConfig {
    /// Values of the queries (or the keys) of one position.
    pub fn key_dim(&self) -> usize {
        self.key_heads * self.head_dim
    }

    /// Values of the values (and of the output gate) of one position.
    pub fn value_dim(&self) -> usize {
        self.value_heads * self.head_dim
    }

    /// Channels of the convolution: queries, keys and values.
    pub fn channels(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    /// f32 values of one block's convolution state: the last `conv_kernel − 1` inputs.
    pub fn conv_state_len(&self) -> usize {
        (self.conv_kernel - 1) * self.channels()
    }

    /// f32 values of one block's delta-rule state: a `head_dim × head_dim` matrix per value head.
    pub fn delta_state_len(&self) -> usize {
        self.value_heads * self.head_dim * self.head_dim
    }

    /// Bytes of one block's whole state (f32), whatever the context: Qwen3.5-0.8B's is
    /// 1 MiB of matrices and 72 KiB of convolution inputs.
    pub fn state_bytes(&self) -> u64 {
        4 * (self.conv_state_len() + self.delta_state_len()) as u64
    }
}

/// How one block attends: its window (`None`: every earlier position) and its RoPE frequencies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockAttention {
    pub window: Option<usize>,
    pub rope: RopeFrequencies,
}

impl ModelConfig {
    /// Reads `{arch}.*` keys. Fails on an unsupported architecture, a missing key, or
    /// inconsistent numbers (heads that do not divide, and so on).
    pub fn from_gguf(file: &GgufHeader) -> Result<Self, ModelError> {
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
        if rope_dims > head_dim || !rope_dims.is_multiple_of(2) || rope_dims == 0 {
            return Err(ModelError::Invalid(format!(
                "RoPE over {rope_dims} dimensions of a {head_dim}-dimension head (an even count, at most the head)"
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
        let context_length = usize_key("context_length")?;
        let rope_scaling = RopeScaling::from_gguf(file, &architecture_name, context_length)?;
        for softcap in ["attn_logit_softcapping", "final_logit_softcapping"] {
            if file.get(&key(softcap)).and_then(|v| v.as_f64()).is_some_and(|f| f != 0.0) {
                return Err(ModelError::Unsupported(format!("logit soft-capping ({architecture_name}.{softcap})")));
            }
        }
        let sliding_window = match architecture.sliding_window {
            Some(_) => Some(usize_key("attention.sliding_window")?),
            None => None,
        };
        let file_blocks = usize_key("block_count")?;
        let skipped_mtp_blocks = optional("nextn_predict_layers")?.unwrap_or(0);
        if skipped_mtp_blocks >= file_blocks {
            return Err(ModelError::Invalid(format!(
                "{skipped_mtp_blocks} multi-token-prediction blocks of {file_blocks} leave no decoder block"
            )));
        }
        let block_count = file_blocks - skipped_mtp_blocks;
        let delta_net = match architecture.recurrent {
            true => Some(delta_net_config(file, &architecture_name, block_count)?),
            false => None,
        };
        let config = Self {
            block_count,
            embedding_length,
            feed_forward_length: usize_key("feed_forward_length")?,
            head_count,
            head_count_kv,
            head_dim,
            rope_dims,
            rope_freq_base,
            rope_scaling,
            rms_norm_eps: file.get_f64(&key("attention.layer_norm_rms_epsilon"))?,
            vocab_size,
            context_length,
            sliding_window,
            delta_net,
            skipped_mtp_blocks,
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

    /// Bytes one token takes in the KV cache, every attention block together (a recurrent
    /// block keeps no rows).
    pub fn kv_token_bytes(&self) -> u64 {
        self.attention_blocks() as u64 * self.kv_position_bytes()
    }

    /// What mixes positions in block `block`: attention, or the file's Gated DeltaNet blocks.
    pub fn mixer(&self, block: usize) -> Mixer {
        match &self.delta_net {
            Some(delta) if delta.recurrent[block] => Mixer::GatedDeltaNet,
            _ => Mixer::Attention,
        }
    }

    /// Blocks that attend (and so keep rows of keys and values).
    pub fn attention_blocks(&self) -> usize {
        (0..self.block_count).filter(|&b| self.mixer(b) == Mixer::Attention).count()
    }

    /// Bytes of the recurrent state of every Gated DeltaNet block together (0 for families
    /// without): fixed, whatever the context.
    pub fn recurrent_state_bytes(&self) -> u64 {
        self.delta_net.as_ref().map_or(0, |d| (self.block_count - self.attention_blocks()) as u64 * d.state_bytes())
    }

    /// Values of the query projection's output per position: the queries, and with an output
    /// gate ([`BlockSpec::output_gate`](crate::BlockSpec)) as many gate values.
    pub fn query_projection_dim(&self) -> usize {
        if self.architecture().block.output_gate { 2 * self.q_dim() } else { self.q_dim() }
    }

    /// How block `block` attends: Gemma 3's local blocks see a window of keys and rotate with
    /// their own base, unscaled (llama.cpp's `rope_freq_scale_train_swa = 1`, transformers'
    /// `sliding_attention` RoPE); every other block sees every earlier position and rotates
    /// with the file's base and scaling.
    pub fn block_attention(&self, block: usize) -> BlockAttention {
        let global = BlockAttention {
            window: None,
            rope: RopeFrequencies { base: self.rope_freq_base, scaling: self.rope_scaling },
        };
        match (self.architecture().sliding_window, self.sliding_window) {
            (Some(pattern), Some(window)) if !(block + 1).is_multiple_of(pattern.period) => BlockAttention {
                window: Some(window),
                rope: RopeFrequencies { base: pattern.local_rope_base, scaling: RopeScaling::None },
            },
            _ => global,
        }
    }

    /// The ring the local blocks keep their rows in (`window.rs`), for a family with a sliding
    /// window.
    pub fn window_ring(&self) -> Option<WindowRing> {
        self.architecture().sliding_window.and(self.sliding_window).map(WindowRing::new)
    }

    /// The ring block `block` keeps: a local attention block's (`window.rs`); `None`, a row per
    /// position (a global block) or no rows at all (a recurrent block).
    pub fn block_ring(&self, block: usize) -> Option<WindowRing> {
        self.window_ring()
            .filter(|_| self.mixer(block) == Mixer::Attention && self.block_attention(block).window.is_some())
    }

    /// How many blocks keep a ring of their window ([`Self::block_ring`]).
    pub fn ring_blocks(&self) -> usize {
        (0..self.block_count).filter(|&block| self.block_ring(block).is_some()).count()
    }

    /// The factor the token embedding is multiplied by (`√embedding_length` for Gemma, else 1),
    /// rounded to f32 once: the one value both paths multiply by.
    pub fn embedding_scale(&self) -> f32 {
        if self.architecture().scale_embedding { (self.embedding_length as f64).sqrt() as f32 } else { 1.0 }
    }
}

/// Qwen3.5's `{arch}.ssm.*` keys and its layer pattern, checked: value heads a multiple of key
/// heads, the inner size their product, a convolution of at least one tap.
fn delta_net_config(file: &GgufHeader, arch: &str, block_count: usize) -> Result<DeltaNetConfig, ModelError> {
    let key = |name: &str| format!("{arch}.{name}");
    let usize_key = |name: &str| -> Result<usize, ModelError> { Ok(file.get_u64(&key(name))? as usize) };
    let recurrent: Vec<bool> = match file.get(&key("attention.recurrent_layers")) {
        Some(_) => {
            let flags = file.get_array(&key("attention.recurrent_layers"))?;
            let flags: Vec<bool> = flags.iter().map(|v| v.as_bool()).collect::<Option<_>>().ok_or_else(|| {
                ModelError::Invalid(format!("{} holds values that are not booleans", key("attention.recurrent_layers")))
            })?;
            if flags.len() < block_count {
                return Err(ModelError::Invalid(format!(
                    "{} names {} blocks, the model has {block_count}",
                    key("attention.recurrent_layers"),
                    flags.len()
                )));
            }
            flags[..block_count].to_vec()
        }
        None => {
            let interval = match file.get(&key("full_attention_interval")) {
                Some(_) => usize_key("full_attention_interval")?,
                None => 4,
            };
            if interval == 0 {
                return Err(ModelError::Invalid(format!("{} is 0", key("full_attention_interval"))));
            }
            (0..block_count).map(|b| !(b + 1).is_multiple_of(interval)).collect()
        }
    };
    let config = DeltaNetConfig {
        recurrent,
        conv_kernel: usize_key("ssm.conv_kernel")?,
        key_heads: usize_key("ssm.group_count")?,
        value_heads: usize_key("ssm.time_step_rank")?,
        head_dim: usize_key("ssm.state_size")?,
    };
    if config.conv_kernel == 0 || config.key_heads == 0 || config.head_dim == 0 {
        return Err(ModelError::Invalid(
            "the Gated DeltaNet's kernel, key heads and state size must be non-zero".into(),
        ));
    }
    if config.value_heads == 0 || !config.value_heads.is_multiple_of(config.key_heads) {
        return Err(ModelError::Invalid(format!(
            "{} Gated DeltaNet value heads are not a multiple of its {} key heads",
            config.value_heads, config.key_heads
        )));
    }
    let inner = usize_key("ssm.inner_size")?;
    if inner != config.value_dim() {
        return Err(ModelError::Invalid(format!(
            "the Gated DeltaNet's inner size {inner} is not its {} value heads of state size {}",
            config.value_heads, config.head_dim
        )));
    }
    Ok(config)
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
            rope_scaling: RopeScaling::Linear { factor: 8.0 },
            rms_norm_eps: 1e-6,
            vocab_size: 262_144,
            context_length: 32_768,
            sliding_window: Some(512),
            delta_net: None,
            skipped_mtp_blocks: 0,
        }
    }

    #[test]
    fn gemma_blocks_5_11_17_are_global_and_the_others_local() {
        let config = gemma();
        let global: Vec<usize> = (0..18).filter(|&b| config.block_attention(b).window.is_none()).collect();
        assert_eq!(global, [5, 11, 17]);
        // Gemma 3 4B's linear scaling turns its global blocks only.
        let local = RopeFrequencies { base: 10_000.0, scaling: RopeScaling::None };
        let global = RopeFrequencies { base: 1e6, scaling: RopeScaling::Linear { factor: 8.0 } };
        assert_eq!(config.block_attention(0), BlockAttention { window: Some(512), rope: local });
        assert_eq!(config.block_attention(5), BlockAttention { window: None, rope: global });
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
