//! SentencePiece's BPE as GGUF files describe it (`tokenizer.ggml.model = llama`: Gemma,
//! TinyLlama, Llama 2, Mistral), merging by score the way llama.cpp's `llm_tokenizer_spm` does.
//!
//! A fragment of text (what lies between special tokens) has its spaces replaced by `▁`
//! (U+2581), then starts as one symbol per UTF-8 character. Repeatedly, of the adjacent pairs
//! whose concatenation is a vocabulary entry, the one with the highest score merges (ties: the
//! leftmost); merged symbols are looked at again with their new neighbours. Each final symbol is
//! its token, or, when it is not in the vocabulary, one byte token (`<0xXX>`) per byte.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use crate::TokenizerError;

/// The piece `▁` stands for a space.
pub(crate) const SPACE: &str = "\u{2581}";

pub(crate) struct Spm {
    ids: HashMap<String, u32>,
    scores: Vec<f32>,
    /// The id of `<0xXX>` for each byte (256 entries).
    byte_ids: Vec<Option<u32>>,
    unknown: Option<u32>,
}

/// A candidate merge of two adjacent symbols.
#[derive(PartialEq)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    /// Bytes of the two symbols together when the pair was found: stale once either changed.
    len: usize,
}

impl Eq for Bigram {}

impl Ord for Bigram {
    /// Highest score first; among equal scores, the leftmost.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A run of the fragment's bytes, linked to its neighbours.
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

impl Spm {
    /// The vocabulary `tokens` with their `scores`; `unknown` for a byte without a byte token.
    pub(crate) fn new(tokens: &[&str], scores: Vec<f32>, unknown: Option<u32>) -> Result<Self, TokenizerError> {
        if scores.len() != tokens.len() {
            return Err(TokenizerError::Invalid(format!("{} tokens but {} scores", tokens.len(), scores.len())));
        }
        let mut ids = HashMap::with_capacity(tokens.len());
        let mut byte_ids = vec![None; 256];
        for (id, &token) in tokens.iter().enumerate() {
            ids.entry(token.to_string()).or_insert(id as u32);
            if let Some(byte) = byte_token(token) {
                byte_ids[byte as usize].get_or_insert(id as u32);
            }
        }
        Ok(Self { ids, scores, byte_ids, unknown })
    }

    /// Appends the ids of `text` (spaces already escaped to `▁`) to `out`.
    pub(crate) fn encode(&self, text: &str, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        let mut symbols: Vec<Symbol> = Vec::new();
        for (start, c) in text.char_indices() {
            let index = symbols.len();
            symbols.push(Symbol { start, len: c.len_utf8(), prev: index.checked_sub(1), next: None });
            if index > 0 {
                symbols[index - 1].next = Some(index);
            }
        }
        let mut queue = BinaryHeap::new();
        let bigram = |symbols: &[Symbol], left: usize, right: usize| -> Option<Bigram> {
            let (l, r) = (&symbols[left], &symbols[right]);
            let piece = &text[l.start..r.start + r.len];
            let id = *self.ids.get(piece)?;
            Some(Bigram { score: self.scores[id as usize], left, right, len: piece.len() })
        };
        for left in 1..symbols.len() {
            queue.extend(bigram(&symbols, left - 1, left));
        }
        while let Some(Bigram { left, right, len, .. }) = queue.pop() {
            let (l, r) = (&symbols[left], &symbols[right]);
            if l.len == 0 || r.len == 0 || l.len + r.len != len {
                continue;
            }
            let next = r.next;
            symbols[left].len += symbols[right].len;
            symbols[right].len = 0;
            symbols[left].next = next;
            if let Some(next) = next {
                symbols[next].prev = Some(left);
                queue.extend(bigram(&symbols, left, next));
            }
            if let Some(prev) = symbols[left].prev {
                queue.extend(bigram(&symbols, prev, left));
            }
        }
        let mut at = (!symbols.is_empty()).then_some(0);
        while let Some(index) = at {
            let symbol = &symbols[index];
            let piece = &text[symbol.start..symbol.start + symbol.len];
            match self.ids.get(piece) {
                Some(&id) => out.push(id),
                None => {
                    for &byte in piece.as_bytes() {
                        let id = self.byte_ids[byte as usize].or(self.unknown).ok_or_else(|| {
                            TokenizerError::Encode(format!(
                                "byte 0x{byte:02X} has no token and there is no unknown token"
                            ))
                        })?;
                        out.push(id);
                    }
                }
            }
            at = symbol.next;
        }
        Ok(())
    }
}

/// The byte a `<0xXX>` token stands for.
pub(crate) fn byte_token(token: &str) -> Option<u8> {
    let hex = token.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spm(tokens: &[(&str, f32)]) -> Spm {
        let (names, scores): (Vec<&str>, Vec<f32>) = tokens.iter().copied().unzip();
        Spm::new(&names, scores, Some(0)).unwrap()
    }

    fn encode(spm: &Spm, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        spm.encode(&text.replace(' ', SPACE), &mut out).unwrap();
        out
    }

    #[test]
    fn the_highest_score_merges_first_and_ties_go_left() {
        // "abc": "ab" (score 1) and "bc" (score 2) compete; "bc" wins, then "a" + "bc" is no token.
        let vocab = spm(&[("<unk>", 0.0), ("a", -1.0), ("b", -1.0), ("c", -1.0), ("ab", 1.0), ("bc", 2.0)]);
        assert_eq!(encode(&vocab, "abc"), [1, 5]);
        // "abab": both "ab" pairs have score 1; the left one merges first, then the right one.
        assert_eq!(encode(&vocab, "abab"), [4, 4]);
    }

    #[test]
    fn merges_continue_through_new_neighbours_and_spaces_are_pieces() {
        let vocab = spm(&[("<unk>", 0.0), ("▁", -5.0), ("h", -5.0), ("i", -5.0), ("hi", -2.0), ("▁hi", -1.0)]);
        assert_eq!(encode(&vocab, " hi"), [5]);
        assert_eq!(encode(&vocab, "hi hi"), [4, 5]);
    }

    #[test]
    fn a_character_outside_the_vocabulary_falls_back_to_its_bytes() {
        let vocab = spm(&[("<unk>", 0.0), ("a", -1.0), ("<0xC3>", 0.0), ("<0xA9>", 0.0)]);
        assert_eq!(encode(&vocab, "aé"), [1, 2, 3]);
        // A byte without a byte token is the unknown token.
        assert_eq!(encode(&vocab, "z"), [0]);
        assert_eq!(byte_token("<0x0A>"), Some(10));
        assert_eq!(byte_token("<0x0>"), None);
    }
}
