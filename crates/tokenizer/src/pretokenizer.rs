//! The BPE pre-tokenizers named by `tokenizer.ggml.pre`, expressed with the `tokenizers` crate as
//! llama.cpp defines them (`llama-vocab.cpp`).

use tokenizers::SplitDelimiterBehavior;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};

/// Every name [`for_name`] knows.
pub(crate) const NAMES: &[&str] =
    &["gpt2", "default", "smollm", "llama-bpe", "llama3", "llama-v3", "qwen2", "deepseek-r1-qwen", "qwen35"];

/// Llama 3's split: contractions, letters with one leading non-letter, numbers of up to three
/// digits, punctuation runs, newlines, spaces.
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's: the same with every digit on its own.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen3.5's: Qwen2's with combining marks (`\p{M}`) joined to the letters they follow
/// (llama.cpp's `LLAMA_VOCAB_PRE_TYPE_QWEN35`; transformers' `Qwen3_5Tokenizer`, which also
/// NFC-normalises first: llama.cpp does not, and neither does this crate).
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A pre-tokenizer and what llama.cpp sets beside it.
pub(crate) struct PreTokenizer {
    pub pre_tokenizer: PreTokenizerWrapper,
    /// A pre-token that is a vocabulary entry is one token, whatever the merges say (Llama 3).
    pub ignore_merges: bool,
    /// Whether a BOS token is added when the file does not say (`add_bos_token`).
    pub add_bos: bool,
}

/// The pre-tokenizer llama.cpp uses for `name`, or `None` if this crate does not know it.
///
/// - `gpt2` / `default`: the GPT-2 regex, then the byte-level alphabet.
/// - `smollm`: every digit (`\p{N}`) split on its own first, then as `gpt2`.
/// - `llama-bpe` (`llama3`, `llama-v3`): the Llama 3 regex, then the byte-level alphabet; merges
///   ignored for whole vocabulary entries, BOS added.
/// - `qwen2` (`deepseek-r1-qwen`): the Qwen2 regex, then the byte-level alphabet.
/// - `qwen35`: the Qwen3.5 regex (Qwen2's, marks joined to letters), then the byte-level alphabet.
pub(crate) fn for_name(name: &str) -> Option<PreTokenizer> {
    // add_prefix_space: false (GGUF add_space_prefix), trim_offsets: irrelevant to ids.
    let byte_level = |use_regex| ByteLevel::new(false, true, use_regex);
    let split = |pattern: &str| -> PreTokenizerWrapper {
        Split::new(SplitPattern::Regex(pattern.into()), SplitDelimiterBehavior::Isolated, false)
            .expect("the pre-tokenizer patterns compile")
            .into()
    };
    let plain = |pre_tokenizer| PreTokenizer { pre_tokenizer, ignore_merges: false, add_bos: false };
    Some(match name {
        "gpt2" | "default" => plain(byte_level(true).into()),
        "smollm" => plain(Sequence::new(vec![Digits::new(true).into(), byte_level(true).into()]).into()),
        "llama-bpe" | "llama3" | "llama-v3" => PreTokenizer {
            pre_tokenizer: Sequence::new(vec![split(LLAMA3), byte_level(false).into()]).into(),
            ignore_merges: true,
            add_bos: true,
        },
        "qwen2" | "deepseek-r1-qwen" => plain(Sequence::new(vec![split(QWEN2), byte_level(false).into()]).into()),
        "qwen35" => plain(Sequence::new(vec![split(QWEN35), byte_level(false).into()]).into()),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_name_is_known() {
        for name in NAMES {
            assert!(for_name(name).is_some(), "{name}");
        }
        assert!(for_name("falcon").is_none());
    }
}
