//! The tokenizer and chat template that a GGUF file describes in its `tokenizer.*` metadata.
//!
//! Two tokenizer models, as llama.cpp reads them:
//! - `gpt2`: byte-level BPE through the `tokenizers` crate, with the vocabulary and merges from
//!   the file and the pre-tokenizer named by `tokenizer.ggml.pre` (`pretokenizer.rs`: `gpt2`,
//!   `smollm`, `llama-bpe`, `qwen2`, `qwen35`);
//! - `llama`: SentencePiece's BPE, merged by the file's scores with byte fallback (`spm.rs`).
//!
//! In both, control and user-defined tokens written in the text are parsed out of it first
//! (llama.cpp's `special = true`). Decoding is done here, token by token, into raw bytes
//! ([`Tokenizer::token_bytes`]): a token can end in the middle of a UTF-8 character, and
//! streaming needs the bytes, not a lossy string.

mod chat;
mod pretokenizer;
mod spm;

use std::collections::HashSet;

use aho_corasick::{AhoCorasick, MatchKind};
use nucleus_gguf::{GgufError, GgufHeader};
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::{AddedToken, Tokenizer as HfTokenizer};

use spm::Spm;

pub use chat::{ChatMessage, ChatTemplate};

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("GGUF tokenizer metadata: {0}")]
    Metadata(#[from] GgufError),
    #[error("unsupported tokenizer model '{0}' (supported: gpt2, byte-level BPE; llama, SentencePiece)")]
    UnsupportedModel(String),
    #[error("unsupported pre-tokenizer '{0}' (supported: {supported})", supported = pretokenizer::NAMES.join(", "))]
    UnsupportedPreTokenizer(String),
    #[error("invalid tokenizer data: {0}")]
    Invalid(String),
    #[error("tokenizer: {0}")]
    Encode(String),
    #[error("chat template: {0}")]
    Template(String),
}

/// GGUF `tokenizer.ggml.token_type` values.
const TOKEN_TYPE_CONTROL: i64 = 3;
const TOKEN_TYPE_USER_DEFINED: i64 = 4;
const TOKEN_TYPE_BYTE: i64 = 6;

/// Control-token texts that end generation, as llama.cpp recognises them.
const END_OF_GENERATION_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<EOT>",
    "<|end_of_text|>",
    "<｜end▁of▁sentence｜>",
];

/// How text becomes ids.
enum Encoder {
    /// Byte-level BPE (`gpt2`), special tokens split out by the `tokenizers` crate (boxed: it is
    /// far larger than the other).
    Bpe(Box<HfTokenizer>),
    /// SentencePiece (`llama`), special tokens split out here.
    Spm { model: Spm, specials: Option<AhoCorasick>, special_ids: Vec<u32>, add_space_prefix: bool },
}

/// A tokenizer built from GGUF metadata.
pub struct Tokenizer {
    encoder: Encoder,
    /// `tokenizer.ggml.model`.
    model_name: String,
    /// The raw bytes each token stands for.
    token_bytes: Vec<Vec<u8>>,
    is_control: Vec<bool>,
    bos_id: Option<u32>,
    eos_id: Option<u32>,
    add_bos: bool,
    end_of_generation: Vec<u32>,
    chat_template: Option<ChatTemplate>,
    pre_tokenizer_name: String,
}

impl Tokenizer {
    /// Builds the tokenizer described by `tokenizer.*` keys of `file`.
    pub fn from_gguf(file: &GgufHeader) -> Result<Self, TokenizerError> {
        let model_name = file.get_str("tokenizer.ggml.model")?.to_string();
        if model_name != "gpt2" && model_name != "llama" {
            return Err(TokenizerError::UnsupportedModel(model_name));
        }
        let tokens = file.get_string_array("tokenizer.ggml.tokens")?;
        let token_types: Vec<i64> = match file.get("tokenizer.ggml.token_type") {
            Some(_) => file
                .get_array("tokenizer.ggml.token_type")?
                .iter()
                .map(|v| v.as_f64().map(|f| f as i64))
                .collect::<Option<_>>()
                .ok_or_else(|| TokenizerError::Invalid("tokenizer.ggml.token_type holds non-integers".into()))?,
            None => vec![1; tokens.len()],
        };
        if token_types.len() != tokens.len() {
            return Err(TokenizerError::Invalid(format!(
                "{} tokens but {} token types",
                tokens.len(),
                token_types.len()
            )));
        }
        let is_control: Vec<bool> = token_types.iter().map(|&t| t == TOKEN_TYPE_CONTROL).collect();
        let special = |t: i64| t == TOKEN_TYPE_CONTROL || t == TOKEN_TYPE_USER_DEFINED;
        let optional_bool = |key: &str| file.get(key).and_then(|v| v.as_bool());

        let (encoder, pre_tokenizer_name, default_add_bos) = if model_name == "gpt2" {
            let pre_tokenizer_name = file.get_str("tokenizer.ggml.pre").unwrap_or("default").to_string();
            let pre = pretokenizer::for_name(&pre_tokenizer_name)
                .ok_or_else(|| TokenizerError::UnsupportedPreTokenizer(pre_tokenizer_name.clone()))?;
            let merges = file
                .get_string_array("tokenizer.ggml.merges")?
                .into_iter()
                .map(|merge| {
                    merge
                        .split_once(' ')
                        .map(|(a, b)| (a.to_string(), b.to_string()))
                        .ok_or_else(|| TokenizerError::Invalid(format!("merge '{merge}' is not two tokens")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let mut vocab = Vocab::default();
            for (id, token) in tokens.iter().enumerate() {
                vocab.insert(token.to_string(), id as u32);
            }
            let bpe = BPE::builder()
                .vocab_and_merges(vocab, merges)
                .ignore_merges(pre.ignore_merges)
                .build()
                .map_err(|e| TokenizerError::Invalid(e.to_string()))?;
            let mut encoder = HfTokenizer::new(bpe);
            encoder.with_pre_tokenizer(Some(pre.pre_tokenizer));
            let specials = tokens
                .iter()
                .zip(&token_types)
                .filter(|(_, t)| special(**t))
                .map(|(text, _)| AddedToken::from(text.to_string(), true));
            encoder
                .add_special_tokens(specials.collect::<Vec<_>>())
                .map_err(|e| TokenizerError::Invalid(e.to_string()))?;
            (Encoder::Bpe(Box::new(encoder)), pre_tokenizer_name, pre.add_bos)
        } else {
            let scores: Vec<f32> = file
                .get_array("tokenizer.ggml.scores")?
                .iter()
                .map(|v| v.as_f64().map(|f| f as f32))
                .collect::<Option<_>>()
                .ok_or_else(|| TokenizerError::Invalid("tokenizer.ggml.scores holds non-numbers".into()))?;
            let unknown = match file.get("tokenizer.ggml.unknown_token_id").and_then(|v| v.as_u64()) {
                Some(id) if (id as usize) < tokens.len() => Some(id as u32),
                _ => None,
            };
            let model = Spm::new(&tokens, scores, unknown)?;
            let (special_texts, special_ids): (Vec<&str>, Vec<u32>) = tokens
                .iter()
                .zip(&token_types)
                .enumerate()
                .filter(|(_, (text, t))| special(**t) && !text.is_empty())
                .map(|(id, (text, _))| (*text, id as u32))
                .unzip();
            let specials = (!special_texts.is_empty())
                .then(|| {
                    AhoCorasick::builder()
                        .match_kind(MatchKind::LeftmostLongest)
                        .build(&special_texts)
                        .map_err(|e| TokenizerError::Invalid(e.to_string()))
                })
                .transpose()?;
            // llama.cpp's default for SentencePiece files without the key.
            let add_space_prefix = optional_bool("tokenizer.ggml.add_space_prefix").unwrap_or(true);
            (Encoder::Spm { model, specials, special_ids, add_space_prefix }, "sentencepiece".to_string(), true)
        };

        let token_bytes = tokens
            .iter()
            .zip(&token_types)
            .map(|(text, &t)| match (&encoder, t) {
                (_, t) if special(t) => text.as_bytes().to_vec(),
                (Encoder::Spm { .. }, TOKEN_TYPE_BYTE) => {
                    spm::byte_token(text).map_or_else(|| text.as_bytes().to_vec(), |b| vec![b])
                }
                (Encoder::Spm { .. }, _) => text.replace(spm::SPACE, " ").into_bytes(),
                (Encoder::Bpe(_), _) => byte_level_decode(text),
            })
            .collect();

        let optional_id = |key: &str| -> Result<Option<u32>, TokenizerError> {
            match file.get(key) {
                None => Ok(None),
                Some(v) => match v.as_u64() {
                    Some(id) if (id as usize) < tokens.len() => Ok(Some(id as u32)),
                    _ => Err(TokenizerError::Invalid(format!("{key} is {v}, not a token id"))),
                },
            }
        };
        let bos_id = optional_id("tokenizer.ggml.bos_token_id")?;
        let eos_id = optional_id("tokenizer.ggml.eos_token_id")?;
        let eot_id = optional_id("tokenizer.ggml.eot_token_id")?;
        let eom_id = optional_id("tokenizer.ggml.eom_token_id")?;
        let add_bos = optional_bool("tokenizer.ggml.add_bos_token").unwrap_or(default_add_bos);

        let mut end_of_generation: Vec<u32> = [eos_id, eot_id, eom_id].into_iter().flatten().collect();
        for (id, text) in tokens.iter().enumerate() {
            if is_control[id] && END_OF_GENERATION_TEXTS.contains(text) {
                end_of_generation.push(id as u32);
            }
        }
        end_of_generation.sort_unstable();
        end_of_generation.dedup();

        let chat_template = match file.get("tokenizer.chat_template") {
            None => None,
            Some(v) => {
                let source = v
                    .as_str()
                    .ok_or_else(|| TokenizerError::Invalid("tokenizer.chat_template is not a string".into()))?;
                let token_text = |id: Option<u32>| id.map(|i| tokens[i as usize].to_string()).unwrap_or_default();
                Some(ChatTemplate::new(source, token_text(bos_id), token_text(eos_id))?)
            }
        };

        Ok(Self {
            encoder,
            model_name,
            token_bytes,
            is_control,
            bos_id,
            eos_id,
            add_bos,
            end_of_generation,
            chat_template,
            pre_tokenizer_name,
        })
    }

    /// Token ids of `text`. Control and user-defined tokens written in the text
    /// (`<|im_start|>`, `<start_of_turn>`) become their ids; a BOS token is prepended when the
    /// file says `add_bos_token` (or, without the key, as llama.cpp does for its tokenizer),
    /// unless the text begins with it already (a chat template that writes it, as Llama 3's does).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 2);
        let bos = self.bos_id.filter(|_| self.add_bos);
        ids.extend(bos);
        match &self.encoder {
            Encoder::Bpe(encoder) => {
                let encoding = encoder.encode(text, false).map_err(|e| TokenizerError::Encode(e.to_string()))?;
                ids.extend_from_slice(encoding.get_ids());
            }
            Encoder::Spm { model, specials, special_ids, add_space_prefix } => {
                // As llama.cpp, text between special tokens (and at either end) is encoded on its
                // own, after a space when the file says `add_space_prefix`.
                let prefix = if *add_space_prefix { spm::SPACE } else { "" };
                let fragment = |raw: &str, ids: &mut Vec<u32>| {
                    model.encode(&(prefix.to_string() + &raw.replace(' ', spm::SPACE)), ids)
                };
                let mut at = 0;
                for found in specials.iter().flat_map(|s| s.find_iter(text)) {
                    if found.start() > at {
                        fragment(&text[at..found.start()], &mut ids)?;
                    }
                    ids.push(special_ids[found.pattern().as_usize()]);
                    at = found.end();
                }
                if at < text.len() {
                    fragment(&text[at..], &mut ids)?;
                }
            }
        }
        if bos.is_some() && ids.get(1) == bos.as_ref() {
            ids.remove(0);
        }
        Ok(ids)
    }

    /// The raw bytes token `id` stands for (a control token: its text). Empty for an unknown id.
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.token_bytes.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// The text of a token on its own, with invalid UTF-8 (a partial character) shown as U+FFFD.
    pub fn token_text(&self, id: u32) -> String {
        String::from_utf8_lossy(self.token_bytes(id)).into_owned()
    }

    /// The text of a sequence of tokens.
    pub fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids.iter().flat_map(|&id| self.token_bytes(id).iter().copied()).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    pub fn vocab_size(&self) -> usize {
        self.token_bytes.len()
    }

    pub fn is_control(&self, id: u32) -> bool {
        self.is_control.get(id as usize).copied().unwrap_or(false)
    }

    /// Tokens that end generation: EOS, EOT and EOM from the metadata, and control tokens whose
    /// text llama.cpp treats as an end of generation (for SmolLM2: `<|endoftext|>` 0 and `<|im_end|>` 2).
    pub fn end_of_generation_ids(&self) -> &[u32] {
        &self.end_of_generation
    }

    pub fn is_end_of_generation(&self, id: u32) -> bool {
        self.end_of_generation.binary_search(&id).is_ok()
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.bos_id
    }

    pub fn eos_id(&self) -> Option<u32> {
        self.eos_id
    }

    pub fn adds_bos(&self) -> bool {
        self.add_bos
    }

    /// The BPE pre-tokenizer (`tokenizer.ggml.pre`), or `sentencepiece`.
    pub fn pre_tokenizer_name(&self) -> &str {
        &self.pre_tokenizer_name
    }

    /// `tokenizer.ggml.model`: `gpt2` (byte-level BPE) or `llama` (SentencePiece).
    pub fn model_name(&self) -> &str {
        &self.model_name
    }

    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat_template.as_ref()
    }

    /// Renders `messages` with the file's chat template, ending with the assistant's turn opened.
    pub fn render_chat(&self, messages: &[ChatMessage]) -> Result<String, TokenizerError> {
        self.template()?.render(messages, true)
    }

    /// `messages` through the chat template without the generation prompt: the conversation so
    /// far, which the prompt of a next turn begins with.
    pub fn render_chat_so_far(&self, messages: &[ChatMessage]) -> Result<String, TokenizerError> {
        self.template()?.render(messages, false)
    }

    fn template(&self) -> Result<&ChatTemplate, TokenizerError> {
        self.chat_template
            .as_ref()
            .ok_or_else(|| TokenizerError::Template("the model file has no tokenizer.chat_template".into()))
    }

    /// Tokens whose text contains any of `needles`: how strings such as DRY's sequence breakers
    /// become token ids.
    pub fn tokens_containing(&self, needles: &[&str]) -> HashSet<u32> {
        (0..self.vocab_size() as u32)
            .filter(|&id| {
                let bytes = self.token_bytes(id);
                needles.iter().any(|n| !n.is_empty() && bytes.windows(n.len()).any(|w| w == n.as_bytes()))
            })
            .collect()
    }
}

/// GPT-2's byte-level alphabet: each byte maps to a printable character; this inverts it.
fn byte_level_decode(token: &str) -> Vec<u8> {
    token.chars().filter_map(byte_of_char).collect()
}

/// The byte GPT-2's `bytes_to_unicode` maps to `c`.
fn byte_of_char(c: char) -> Option<u8> {
    let code = c as u32;
    let printable = |b: u32| (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
    if code < 256 && printable(code) {
        return Some(code as u8);
    }
    // The other 68 bytes, in order, map to U+0100 onwards.
    let index = code.checked_sub(256)?;
    (0u32..256).filter(|&b| !printable(b)).nth(index as usize).map(|b| b as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_alphabet_round_trips() {
        assert_eq!(byte_level_decode("Ġthe"), b" the");
        assert_eq!(byte_level_decode("Ċ"), b"\n");
        assert_eq!(byte_level_decode("ĉ"), b"\t");
        assert_eq!(byte_level_decode("Ā"), [0u8]);
        // Every byte is reachable, exactly once.
        let mut seen = [false; 256];
        for code in (0x21u32..0x7F).chain(0xA1..0xAD).chain(0xAE..0x100).chain(0x100..0x144) {
            let b = byte_of_char(char::from_u32(code).unwrap()).unwrap();
            assert!(!seen[b as usize], "byte {b} twice");
            seen[b as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(byte_of_char('\u{144}'), None);
    }
}
