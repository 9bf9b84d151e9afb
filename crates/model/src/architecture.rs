//! The architecture seam: what a block computes, apart from how a GGUF file names its tensors.
//!
//! Both forward paths (Burn operations and the fused kernels) run the same loop over blocks and
//! ask the [`BlockSpec`] what each step is; the weight table ([`crate::weights`]) asks the
//! [`Architecture`] for tensor names. A Qwen-style block (biases on Q/K/V) or a Gemma-style one
//! (GeGLU, an embedding scale, norms after the sub-layers) adds variants here and their
//! computation in each path, not a new loop. Today one architecture is supported: Llama.

/// What one tensor of the model is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    TokenEmbedding,
    AttentionNorm,
    Query,
    Key,
    Value,
    AttentionOutput,
    FeedForwardNorm,
    Gate,
    Up,
    Down,
    OutputNorm,
    /// The output layer (absent when the model ties it to the token embedding).
    Output,
}

/// The normalisation before each sub-layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Norm {
    /// `x / sqrt(mean(x²) + eps) · γ`.
    Rms,
}

/// How queries and keys are rotated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rope {
    /// Adjacent pairs `(x[2i], x[2i+1])` rotated by `position · base^(−2i/head_dim)` (GGUF stores
    /// Llama's Q and K permuted for this).
    AdjacentPairs,
}

/// The feed-forward sub-layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedForward {
    /// `down(silu(gate(h)) · up(h))`.
    SwiGlu,
}

/// What a block computes: pre-norm attention with RoPE and grouped-query heads, then a pre-norm
/// feed-forward, each added to the residual stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSpec {
    pub norm: Norm,
    pub rope: Rope,
    pub feed_forward: FeedForward,
}

/// A family of models: its GGUF architecture name, its block, and its tensor names.
#[derive(Debug)]
pub struct Architecture {
    /// `general.architecture`, also the prefix of its metadata keys.
    pub name: &'static str,
    pub block: BlockSpec,
    /// The GGUF name of the tensor with `role` (in block `block` for the per-block roles).
    tensor_name: fn(Role, usize) -> String,
}

impl Architecture {
    /// The GGUF name of the tensor with `role`; `block` is ignored for whole-model roles.
    pub fn tensor_name(&self, role: Role, block: usize) -> String {
        (self.tensor_name)(role, block)
    }
}

/// Llama and the models that share its layout (SmolLM, TinyLlama, Mistral-style GQA).
pub static LLAMA: Architecture = Architecture {
    name: "llama",
    block: BlockSpec { norm: Norm::Rms, rope: Rope::AdjacentPairs, feed_forward: FeedForward::SwiGlu },
    tensor_name: llama_tensor_name,
};

fn llama_tensor_name(role: Role, block: usize) -> String {
    let per_block = |name: &str| format!("blk.{block}.{name}.weight");
    match role {
        Role::TokenEmbedding => "token_embd.weight".into(),
        Role::AttentionNorm => per_block("attn_norm"),
        Role::Query => per_block("attn_q"),
        Role::Key => per_block("attn_k"),
        Role::Value => per_block("attn_v"),
        Role::AttentionOutput => per_block("attn_output"),
        Role::FeedForwardNorm => per_block("ffn_norm"),
        Role::Gate => per_block("ffn_gate"),
        Role::Up => per_block("ffn_up"),
        Role::Down => per_block("ffn_down"),
        Role::OutputNorm => "output_norm.weight".into(),
        Role::Output => "output.weight".into(),
    }
}

/// Every supported architecture.
pub static ARCHITECTURES: &[&Architecture] = &[&LLAMA];

/// The architecture called `name` (`general.architecture`), if supported.
pub fn by_name(name: &str) -> Option<&'static Architecture> {
    ARCHITECTURES.iter().copied().find(|a| a.name == name)
}
