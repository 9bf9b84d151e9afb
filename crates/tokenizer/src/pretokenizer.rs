//! The pre-tokenizers named by `tokenizer.ggml.pre`, expressed with the `tokenizers` crate.

use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;

/// The pre-tokenizer llama.cpp uses for `name`, or `None` if this crate does not know it.
///
/// - `gpt2` / `default`: the GPT-2 regex, then the byte-level alphabet.
/// - `smollm`: every digit (`\p{N}`) split on its own first, then as `gpt2`.
pub(crate) fn for_name(name: &str) -> Option<PreTokenizerWrapper> {
    // add_prefix_space: false (GGUF add_space_prefix), trim_offsets: irrelevant to ids, use_regex: GPT-2's.
    let byte_level = || ByteLevel::new(false, true, true);
    match name {
        "gpt2" | "default" => Some(byte_level().into()),
        "smollm" => Some(Sequence::new(vec![Digits::new(true).into(), byte_level().into()]).into()),
        _ => None,
    }
}
