//! The architecture seam: what a block computes, apart from how a GGUF file names its tensors.
//!
//! Both forward paths (Burn operations and the fused kernels) run the same loop over blocks and
//! ask the [`BlockSpec`] what each step is; the weight table ([`crate::weights`]) asks it which
//! tensors a block has. A family is one [`Architecture`] value: its GGUF name and its block's
//! variants. Five are supported:
//!
//! | family | mixer | RoPE | feed-forward | Q/K/V bias | per-head Q/K norm | output gate | norms after sub-layers | embedding scale | sliding window |
//! |---|---|---|---|---|---|---|---|---|---|
//! | `llama` (SmolLM2, TinyLlama, Llama 3 with `rope_freqs`) | attention | adjacent pairs | SwiGLU | no | no | no | no | 1 | no |
//! | `qwen2` | attention | halves | SwiGLU | yes | no | no | no | 1 | no |
//! | `qwen3` | attention | halves | SwiGLU | no | yes | no | no | 1 | no |
//! | `gemma3` | attention | halves | GeGLU (tanh) | no | yes | no | yes | √dim | 5 local blocks of 6 |
//! | `qwen35` (Qwen3.5) | Gated DeltaNet, attention every 4th block | halves, a quarter of the head | SwiGLU | no | yes | yes | no | 1 | no |
//!
//! A block's *mixer* (what mixes positions) is attention, whose cache grows by a row per
//! position, or, in the families with [`Architecture::recurrent`], a Gated DeltaNet on the
//! blocks the file marks recurrent: a fixed-size state per block ([`Mixer`]).
//!
//! A fifth family adds a value here; a variant no path computes yet adds its computation to each
//! path (`burn_ops.rs`, and in `fused.rs` the kernel that does it) and to the CPU reference.

/// What one tensor of the model is for. Every family names them as llama.cpp's converter does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    TokenEmbedding,
    AttentionNorm,
    Query,
    Key,
    Value,
    QueryBias,
    KeyBias,
    ValueBias,
    /// Per-head RMSNorm weight of the queries (`head_dim` values), before RoPE.
    QueryNorm,
    /// Per-head RMSNorm weight of the keys.
    KeyNorm,
    AttentionOutput,
    /// RMSNorm of the attention's output before it joins the residual stream.
    PostAttentionNorm,
    FeedForwardNorm,
    Gate,
    Up,
    Down,
    /// RMSNorm of the feed-forward's output before it joins the residual stream.
    PostFeedForwardNorm,
    OutputNorm,
    /// The output layer (absent when the model ties it to the token embedding).
    Output,
    /// Llama 3's RoPE frequency factors (`head_dim / 2` values dividing each pair's frequency).
    RopeFrequencies,
    /// Gated DeltaNet: the projection to the convolution's channels (queries, keys, values).
    DeltaQkv,
    /// Gated DeltaNet: the projection to the output gate `z` (`[value heads · head dim]`).
    DeltaGate,
    /// Gated DeltaNet: the projection to the per-head write strength β (before the sigmoid).
    DeltaBeta,
    /// Gated DeltaNet: the projection to the per-head decay's input α.
    DeltaAlpha,
    /// Gated DeltaNet: the bias added to α before the softplus (`dt_bias`).
    DeltaDtBias,
    /// Gated DeltaNet: `−exp(A_log)`, per value head (negative: the decay `exp(g)` is below 1).
    DeltaA,
    /// Gated DeltaNet: the causal depthwise convolution's weights, `[channels, kernel]`.
    DeltaConv,
    /// Gated DeltaNet: the gated RMSNorm's weight over one head's values (stored as is, not 1 + w).
    DeltaNorm,
    /// Gated DeltaNet: the output projection.
    DeltaOutput,
}

impl Role {
    /// The GGUF name of the tensor with this role (in block `block` for the per-block roles).
    pub fn tensor_name(self, block: usize) -> String {
        let per_block = |name: &str| format!("blk.{block}.{name}");
        match self {
            Role::TokenEmbedding => "token_embd.weight".into(),
            Role::AttentionNorm => per_block("attn_norm.weight"),
            Role::Query => per_block("attn_q.weight"),
            Role::Key => per_block("attn_k.weight"),
            Role::Value => per_block("attn_v.weight"),
            Role::QueryBias => per_block("attn_q.bias"),
            Role::KeyBias => per_block("attn_k.bias"),
            Role::ValueBias => per_block("attn_v.bias"),
            Role::QueryNorm => per_block("attn_q_norm.weight"),
            Role::KeyNorm => per_block("attn_k_norm.weight"),
            Role::AttentionOutput => per_block("attn_output.weight"),
            Role::PostAttentionNorm => per_block("post_attention_norm.weight"),
            Role::FeedForwardNorm => per_block("ffn_norm.weight"),
            Role::Gate => per_block("ffn_gate.weight"),
            Role::Up => per_block("ffn_up.weight"),
            Role::Down => per_block("ffn_down.weight"),
            Role::PostFeedForwardNorm => per_block("post_ffw_norm.weight"),
            Role::OutputNorm => "output_norm.weight".into(),
            Role::Output => "output.weight".into(),
            Role::RopeFrequencies => "rope_freqs.weight".into(),
            Role::DeltaQkv => per_block("attn_qkv.weight"),
            Role::DeltaGate => per_block("attn_gate.weight"),
            Role::DeltaBeta => per_block("ssm_beta.weight"),
            Role::DeltaAlpha => per_block("ssm_alpha.weight"),
            Role::DeltaDtBias => per_block("ssm_dt.bias"),
            Role::DeltaA => per_block("ssm_a"),
            Role::DeltaConv => per_block("ssm_conv1d.weight"),
            Role::DeltaNorm => per_block("ssm_norm.weight"),
            Role::DeltaOutput => per_block("ssm_out.weight"),
        }
    }
}

/// The normalisation before each sub-layer (and, with [`BlockSpec::post_norms`], after it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Norm {
    /// `x / sqrt(mean(x²) + eps) · γ` (Gemma's files store its `1 + w` as γ).
    Rms,
}

/// How queries and keys are rotated: which two values of a head form a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rope {
    /// Adjacent pairs `(x[2i], x[2i+1])` (GGUF stores Llama's Q and K permuted for this).
    AdjacentPairs,
    /// The two halves: `(x[i], x[i + rotated/2])` (GPT-NeoX's layout: Qwen, Gemma).
    Halves,
}

impl Rope {
    /// The head dimensions of pair `i` (`i < rotated / 2`), rotated by the angle of frequency `i`;
    /// `rotated` is the head's first dimensions that RoPE turns (all of them but in Qwen3.5,
    /// whose partial RoPE turns a quarter and passes the rest through).
    pub fn pair(self, i: usize, rotated: usize) -> (usize, usize) {
        match self {
            Rope::AdjacentPairs => (2 * i, 2 * i + 1),
            Rope::Halves => (i, i + rotated / 2),
        }
    }
}

/// What mixes positions in a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mixer {
    /// Grouped-query attention over a cache of keys and values, a row per position.
    Attention,
    /// Gated DeltaNet (Qwen3.5's linear attention): a short causal convolution (its state: the
    /// last `kernel − 1` inputs) and per value head a `head_dim × head_dim` matrix updated by the
    /// gated delta rule. A fixed size, whatever the context.
    GatedDeltaNet,
}

/// The feed-forward sub-layer: `down(act(gate(h)) · up(h))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedForward {
    /// `act = silu`.
    SwiGlu,
    /// `act = gelu` in its tanh form, `0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³)))`.
    GeGluTanh,
}

/// What a block computes: attention with RoPE and grouped-query heads, then a feed-forward, each
/// after an RMSNorm and added to the residual stream; the flags add what some families have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSpec {
    pub norm: Norm,
    pub rope: Rope,
    pub feed_forward: FeedForward,
    /// Biases on the query, key and value projections (added before RoPE).
    pub qkv_bias: bool,
    /// A per-head RMSNorm of queries and keys, after the bias and before RoPE.
    pub qk_norm: bool,
    /// An RMSNorm of each sub-layer's output before it is added to the residual stream.
    pub post_norms: bool,
    /// The query projection also makes an output gate per head (`[heads][2 · head_dim]`: the
    /// query, then the gate); the heads' outputs are multiplied by `sigmoid(gate)` before the
    /// output projection (Qwen3.5's gated attention).
    pub output_gate: bool,
}

/// Local attention on most blocks: a block is global when `(block + 1) % period == 0`, local
/// otherwise; a local block's query at position `p` sees the keys `p − window + 1 ..= p` (the
/// window from `{arch}.attention.sliding_window`), rotated with RoPE base `local_rope_base`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlidingWindow {
    pub period: usize,
    pub local_rope_base: f64,
}

/// A family of models: its GGUF architecture name and its block.
#[derive(Debug, PartialEq)]
pub struct Architecture {
    /// `general.architecture`, also the prefix of its metadata keys.
    pub name: &'static str,
    pub block: BlockSpec,
    /// The token embedding is multiplied by `√embedding_length`.
    pub scale_embedding: bool,
    pub sliding_window: Option<SlidingWindow>,
    /// Some blocks are Gated DeltaNet blocks, as the file says (`{arch}.attention.recurrent_layers`
    /// or `{arch}.full_attention_interval`: `ModelConfig::mixer`).
    pub recurrent: bool,
    /// The GGUF name of the RMSNorm before the feed-forward, in block `blk.N.` (Qwen3.5's
    /// converter calls it `post_attention_norm`, the name Gemma uses for another norm).
    pub feed_forward_norm: &'static str,
}

impl Architecture {
    /// The GGUF name of the tensor with `role` in this family (in block `block` for per-block roles).
    pub fn tensor_name(&self, role: Role, block: usize) -> String {
        match role {
            Role::FeedForwardNorm => format!("blk.{block}.{}", self.feed_forward_norm),
            _ => role.tensor_name(block),
        }
    }
}

/// The pre-feed-forward norm's name in most families.
const FFN_NORM: &str = "ffn_norm.weight";

const LLAMA_BLOCK: BlockSpec = BlockSpec {
    norm: Norm::Rms,
    rope: Rope::AdjacentPairs,
    feed_forward: FeedForward::SwiGlu,
    qkv_bias: false,
    qk_norm: false,
    post_norms: false,
    output_gate: false,
};

/// Llama and the models that share its layout (SmolLM, TinyLlama, Mistral-style GQA, Llama 3 with
/// its `rope_freqs` factors).
pub static LLAMA: Architecture = Architecture {
    name: "llama",
    block: LLAMA_BLOCK,
    scale_embedding: false,
    sliding_window: None,
    recurrent: false,
    feed_forward_norm: FFN_NORM,
};

/// Qwen2 and Qwen2.5: Llama's block with biases on Q, K and V, RoPE on halves.
pub static QWEN2: Architecture = Architecture {
    name: "qwen2",
    block: BlockSpec { rope: Rope::Halves, qkv_bias: true, ..LLAMA_BLOCK },
    scale_embedding: false,
    sliding_window: None,
    recurrent: false,
    feed_forward_norm: FFN_NORM,
};

/// Qwen3: per-head RMSNorm of queries and keys, RoPE on halves, heads wider than `dim / heads`.
pub static QWEN3: Architecture = Architecture {
    name: "qwen3",
    block: BlockSpec { rope: Rope::Halves, qk_norm: true, ..LLAMA_BLOCK },
    scale_embedding: false,
    sliding_window: None,
    recurrent: false,
    feed_forward_norm: FFN_NORM,
};

/// Gemma 3: GeGLU, per-head Q/K norms, norms after each sub-layer, a scaled embedding, and five
/// local (sliding-window) blocks for each global one.
pub static GEMMA3: Architecture = Architecture {
    name: "gemma3",
    block: BlockSpec {
        norm: Norm::Rms,
        rope: Rope::Halves,
        feed_forward: FeedForward::GeGluTanh,
        qkv_bias: false,
        qk_norm: true,
        post_norms: true,
        output_gate: false,
    },
    scale_embedding: true,
    // llama.cpp's `hparams.set_swa_pattern(6)` and `rope_freq_base_train_swa = 10000` for Gemma 3.
    sliding_window: Some(SlidingWindow { period: 6, local_rope_base: 10_000.0 }),
    recurrent: false,
    feed_forward_norm: FFN_NORM,
};

/// Qwen3.5 (text only): three Gated DeltaNet blocks for each attention block; the attention
/// block has per-head Q/K norms, an output gate made with the query, and RoPE on halves of the
/// first quarter of each head. Its images' M-RoPE (three position streams, `rope.dimension_sections`)
/// gives every stream the token's position for text, which is plain partial RoPE: so it is
/// computed here. Its files store every RMSNorm weight as `1 + w` but the DeltaNet's gated one.
pub static QWEN35: Architecture = Architecture {
    name: "qwen35",
    block: BlockSpec { rope: Rope::Halves, qk_norm: true, output_gate: true, ..LLAMA_BLOCK },
    scale_embedding: false,
    sliding_window: None,
    recurrent: true,
    feed_forward_norm: "post_attention_norm.weight",
};

/// Every supported architecture.
pub static ARCHITECTURES: &[&Architecture] = &[&LLAMA, &QWEN2, &QWEN3, &GEMMA3, &QWEN35];

/// The architecture called `name` (`general.architecture`), if supported.
pub fn by_name(name: &str) -> Option<&'static Architecture> {
    ARCHITECTURES.iter().copied().find(|a| a.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rope_pairs_are_adjacent_or_halves() {
        assert_eq!(Rope::AdjacentPairs.pair(3, 64), (6, 7));
        assert_eq!(Rope::Halves.pair(3, 64), (3, 35));
        // Qwen3.5's partial RoPE: 64 of 256 dimensions, pairs within them.
        assert_eq!(Rope::Halves.pair(31, 64), (31, 63));
    }

    #[test]
    fn every_family_is_found_by_its_gguf_name() {
        for name in ["llama", "qwen2", "qwen3", "gemma3", "qwen35"] {
            assert_eq!(by_name(name).unwrap().name, name);
        }
        assert!(by_name("phi3").is_none());
        // Qwen3.5's siblings with other mixers or experts are not Qwen3.5.
        assert!(by_name("qwen3next").is_none() && by_name("qwen35moe").is_none());
        assert_eq!(Role::QueryNorm.tensor_name(4), "blk.4.attn_q_norm.weight");
        assert_eq!(Role::KeyBias.tensor_name(0), "blk.0.attn_k.bias");
        assert_eq!(GEMMA3.tensor_name(Role::FeedForwardNorm, 2), "blk.2.ffn_norm.weight");
        assert_eq!(QWEN35.tensor_name(Role::FeedForwardNorm, 2), "blk.2.post_attention_norm.weight");
        assert_eq!(QWEN35.tensor_name(Role::DeltaA, 0), "blk.0.ssm_a");
    }
}
