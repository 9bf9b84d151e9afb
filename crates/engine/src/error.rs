//! The engine's errors, each with a stable code for the JS API.

use std::fmt::Display;

use nucleus_gguf::GgufError;
use nucleus_kernels::KernelError;
use nucleus_model::ModelError;
use nucleus_sampler::SamplerError;
use nucleus_tokenizer::TokenizerError;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    BadModel(#[from] GgufError),
    #[error("{0}")]
    Model(ModelError),
    #[error("{0}")]
    Tokenizer(#[from] TokenizerError),
    #[error("{0}")]
    Sampler(#[from] SamplerError),
    #[error("invalid option {name}: must be {allowed}, got {got}")]
    BadOption { name: &'static str, allowed: String, got: String },
    #[error(
        "the prompt has {prompt_tokens} tokens but the context holds {context_length} (one more is needed to generate)"
    )]
    ContextOverflow { prompt_tokens: usize, context_length: usize },
    #[error("another generation ran on this engine since this one's last step; start this one again")]
    Interleaved,
    /// A response format that does not compile (its kind: `json_schema`, `regex`, …).
    #[error("invalid option response_format: the {kind} does not compile: {message}")]
    BadConstraint { kind: &'static str, message: String },
    /// The constraint engine failed during a generation (a grammar too complex for its limits).
    #[error("the response format's constraint failed: {0}")]
    Constraint(String),
}

impl EngineError {
    pub(crate) fn bad_option(name: &'static str, allowed: impl Into<String>, got: impl Display) -> Self {
        Self::BadOption { name, allowed: allowed.into(), got: got.to_string() }
    }

    /// Every code [`EngineError::code`] returns. The JS API's table of codes (`www/protocol.js`)
    /// holds each of them (`tests/browser/protocol.test.mjs` checks it).
    pub const CODES: [&'static str; 8] = [
        "bad-model",
        "unsupported-model",
        "bad-options",
        "context-overflow",
        "out-of-memory",
        "bad-logits",
        "device",
        "busy",
    ];

    /// A stable machine-readable code, one of [`EngineError::CODES`].
    pub fn code(&self) -> &'static str {
        match self {
            Self::Model(ModelError::Kernel(
                KernelError::NanLogits | KernelError::PositiveInfiniteLogits | KernelError::NoFiniteLogits,
            )) => "bad-logits",
            Self::Model(ModelError::Kernel(KernelError::TooLarge { .. }) | ModelError::OutOfMemory(_)) => {
                "out-of-memory"
            }
            Self::Model(ModelError::Kernel(KernelError::UnsupportedFormat { .. })) => "unsupported-model",
            Self::BadModel(GgufError::UnknownTensorType(..) | GgufError::UnsupportedDequantization { .. }) => {
                "unsupported-model"
            }
            Self::BadModel(_) => "bad-model",
            Self::Model(
                ModelError::UnsupportedArchitecture(_) | ModelError::Unsupported(_) | ModelError::NotInThisBuild(_),
            ) => "unsupported-model",
            Self::Model(ModelError::Gguf(
                GgufError::UnknownTensorType(..) | GgufError::UnsupportedDequantization { .. },
            )) => "unsupported-model",
            Self::Model(ModelError::ContextOverflow { .. }) | Self::ContextOverflow { .. } => "context-overflow",
            Self::Model(ModelError::Device(_) | ModelError::Kernel(KernelError::Device(_))) => "device",
            Self::Model(_) | Self::Tokenizer(TokenizerError::Metadata(_) | TokenizerError::Invalid(_)) => "bad-model",
            Self::Tokenizer(TokenizerError::UnsupportedModel(_) | TokenizerError::UnsupportedPreTokenizer(_)) => {
                "unsupported-model"
            }
            Self::Tokenizer(_) => "bad-options",
            Self::Sampler(_) | Self::BadOption { .. } | Self::BadConstraint { .. } | Self::Constraint(_) => {
                "bad-options"
            }
            Self::Interleaved => "busy",
        }
    }
}

impl From<ModelError> for EngineError {
    fn from(error: ModelError) -> Self {
        match error {
            ModelError::Gguf(inner) => Self::BadModel(inner),
            other => Self::Model(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(error: KernelError) -> EngineError {
        EngineError::from(ModelError::from(error))
    }

    #[test]
    fn every_code_is_listed() {
        let errors = [
            EngineError::BadModel(GgufError::Corrupt("bad magic".into())),
            EngineError::bad_option("top_p", "(0, 1]", 2),
            EngineError::ContextOverflow { prompt_tokens: 9, context_length: 8 },
            EngineError::Interleaved,
            EngineError::from(ModelError::Unsupported("a feature".into())),
            EngineError::from(ModelError::Invalid("a shape".into())),
            kernel(KernelError::NanLogits),
            kernel(KernelError::TooLarge { what: "x".into(), bytes: 2, limit: 1 }),
            kernel(KernelError::Device("lost".into())),
        ];
        for error in errors {
            assert!(EngineError::CODES.contains(&error.code()), "{error:?} → {}", error.code());
        }
    }

    #[test]
    fn kernel_errors_keep_their_kind_to_the_code() {
        for bad in [KernelError::NanLogits, KernelError::PositiveInfiniteLogits, KernelError::NoFiniteLogits] {
            assert_eq!(kernel(bad).code(), "bad-logits");
        }
        let too_large = KernelError::TooLarge { what: "the KV cache".into(), bytes: 1 << 31, limit: 1 << 30 };
        assert_eq!(kernel(too_large).code(), "out-of-memory");
        let format = KernelError::UnsupportedFormat {
            name: "blk.0.attn_q.weight".into(),
            ggml_type: nucleus_gguf::GgmlType::Q5_0,
        };
        assert_eq!(kernel(format).code(), "unsupported-model");
        let not_here = ModelError::NotInThisBuild("the Burn-op path is not in this build".into());
        assert_eq!(EngineError::from(not_here).code(), "unsupported-model");
        assert_eq!(kernel(KernelError::Device("lost".into())).code(), "device");
        assert_eq!(EngineError::from(ModelError::Device("lost".into())).code(), "device");
    }
}
