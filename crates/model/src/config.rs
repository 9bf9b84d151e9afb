//! The hyper-parameters of a Llama-family model, read from GGUF metadata.

use nucleus_gguf::GgufFile;

use crate::ModelError;
use crate::architecture::{self, Architecture};

/// Shape and constants of a Llama model.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    pub architecture: String,
    pub block_count: usize,
    pub embedding_length: usize,
    pub feed_forward_length: usize,
    pub head_count: usize,
    pub head_count_kv: usize,
    pub head_dim: usize,
    /// Dimensions of each head that RoPE rotates (GGUF `rope.dimension_count`).
    pub rope_dims: usize,
    pub rope_freq_base: f64,
    pub rms_norm_eps: f64,
    pub vocab_size: usize,
    pub context_length: usize,
}

impl LlamaConfig {
    /// Reads `{arch}.*` keys. Fails on an architecture other than Llama, a missing key, or
    /// inconsistent numbers (heads that do not divide the embedding, and so on).
    pub fn from_gguf(file: &GgufFile) -> Result<Self, ModelError> {
        let architecture = file.get_str("general.architecture")?.to_string();
        if architecture::by_name(&architecture).is_none() {
            return Err(ModelError::UnsupportedArchitecture(architecture));
        }
        let key = |name: &str| format!("{architecture}.{name}");
        let usize_key = |name: &str| -> Result<usize, ModelError> { Ok(file.get_u64(&key(name))? as usize) };

        let embedding_length = usize_key("embedding_length")?;
        let head_count = usize_key("attention.head_count")?;
        let head_count_kv = match file.get(&key("attention.head_count_kv")) {
            Some(_) => usize_key("attention.head_count_kv")?,
            None => head_count,
        };
        if head_count == 0 || embedding_length % head_count != 0 {
            return Err(ModelError::Invalid(format!(
                "{head_count} attention heads do not divide the embedding length {embedding_length}"
            )));
        }
        if head_count_kv == 0 || head_count % head_count_kv != 0 {
            return Err(ModelError::Invalid(format!(
                "{head_count_kv} key/value heads do not divide {head_count} attention heads"
            )));
        }
        let head_dim = embedding_length / head_count;
        let rope_dims = match file.get(&key("rope.dimension_count")) {
            Some(_) => usize_key("rope.dimension_count")?,
            None => head_dim,
        };
        if rope_dims != head_dim {
            return Err(ModelError::Unsupported(format!(
                "partial rotary embeddings ({rope_dims} of {head_dim} head dimensions)"
            )));
        }
        let vocab_size = match file.get(&key("vocab_size")) {
            Some(_) => usize_key("vocab_size")?,
            None => file.get_array("tokenizer.ggml.tokens")?.len(),
        };
        let rope_freq_base = match file.get(&key("rope.freq_base")) {
            Some(_) => file.get_f64(&key("rope.freq_base"))?,
            None => 10_000.0,
        };
        if file.get(&key("rope.scaling.type")).and_then(|v| v.as_str()).is_some_and(|t| t != "none") {
            return Err(ModelError::Unsupported("RoPE scaling".into()));
        }
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
            architecture,
        };
        if config.block_count == 0 || config.vocab_size == 0 || config.context_length == 0 {
            return Err(ModelError::Invalid("block count, vocabulary and context must be non-zero".into()));
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

    /// Parameters, counting the tied output layer once.
    pub fn parameter_count(&self, tied_output: bool) -> usize {
        let d = self.embedding_length;
        let attention = d * d * 2 + d * self.kv_dim() * 2;
        let ffn = 3 * d * self.feed_forward_length;
        let block = attention + ffn + 2 * d;
        let embedding = self.vocab_size * d;
        embedding + self.block_count * block + d + if tied_output { 0 } else { embedding }
    }
}
