//! Token masks: which tokens a constraint (a grammar, a JSON schema, a choice list) allows.
//!
//! The sampler asks the mask once per step and removes the disallowed tokens after bias and
//! penalties and before temperature. The constraint engine itself is not part of this crate;
//! anything that implements [`TokenMask`] plugs in.

use crate::error::SamplerError;

/// Decides, per token id, whether a token may be chosen at this step.
pub trait TokenMask {
    /// Whether token `id` is allowed.
    fn allows(&self, id: u32) -> bool;

    /// The allowed tokens of a vocabulary of `vocab_size` as a bitset. The default asks
    /// [`Self::allows`] for every id; an engine with its own bitset can return it directly.
    fn allowed_set(&self, vocab_size: usize) -> TokenSet {
        let mut set = TokenSet::empty(vocab_size);
        for id in 0..vocab_size as u32 {
            if self.allows(id) {
                set.insert(id);
            }
        }
        set
    }
}

/// Any `Fn(u32) -> bool` is a mask.
impl<F: Fn(u32) -> bool> TokenMask for F {
    fn allows(&self, id: u32) -> bool {
        self(id)
    }
}

/// A set of token ids over a vocabulary, stored as a bitset. As a [`TokenMask`] it is an
/// allow-list: it allows exactly its members.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TokenSet {
    words: Vec<u64>,
    vocab_size: usize,
}

/// An allow-list is a [`TokenSet`].
pub type AllowList = TokenSet;

impl TokenSet {
    /// The empty set over a vocabulary of `vocab_size` tokens.
    pub fn empty(vocab_size: usize) -> Self {
        Self { words: vec![0; vocab_size.div_ceil(64)], vocab_size }
    }

    /// The set of every token of the vocabulary.
    pub fn full(vocab_size: usize) -> Self {
        let mut set = Self { words: vec![u64::MAX; vocab_size.div_ceil(64)], vocab_size };
        let spare = set.words.len() * 64 - vocab_size;
        if spare > 0
            && let Some(last) = set.words.last_mut()
        {
            *last >>= spare;
        }
        set
    }

    /// The set of `ids`; errors on an id outside the vocabulary.
    pub fn from_ids(vocab_size: usize, ids: impl IntoIterator<Item = u32>) -> Result<Self, SamplerError> {
        let mut set = Self::empty(vocab_size);
        for id in ids {
            if id as usize >= vocab_size {
                return Err(SamplerError::TokenOutOfVocabulary { id, vocab_size });
            }
            set.insert(id);
        }
        Ok(set)
    }

    /// The set whose members are the set bits of `words` (bit `id % 32` of word `id / 32`: the
    /// layout of the GPU decode tail's allow-mask and of llguidance's masks); bits past the
    /// vocabulary and missing words count as absent.
    pub fn from_u32_words(vocab_size: usize, words: &[u32]) -> Self {
        let mut set = Self::empty(vocab_size);
        for (i, word) in set.words.iter_mut().enumerate() {
            let low = words.get(2 * i).copied().unwrap_or(0) as u64;
            let high = words.get(2 * i + 1).copied().unwrap_or(0) as u64;
            *word = low | high << 32;
        }
        let spare = set.words.len() * 64 - vocab_size;
        if spare > 0
            && let Some(last) = set.words.last_mut()
        {
            *last &= u64::MAX >> spare;
        }
        set
    }

    /// The set as `ceil(vocab / 32)` words of 32 bits, in [`Self::from_u32_words`]' layout.
    pub fn to_u32_words(&self) -> Vec<u32> {
        let mut words: Vec<u32> = self.words.iter().flat_map(|&w| [w as u32, (w >> 32) as u32]).collect();
        words.truncate(self.vocab_size.div_ceil(32));
        words
    }

    /// The vocabulary size the set is over.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Adds `id`; returns false (and does nothing) when `id` is outside the vocabulary.
    pub fn insert(&mut self, id: u32) -> bool {
        let i = id as usize;
        if i >= self.vocab_size {
            return false;
        }
        self.words[i / 64] |= 1 << (i % 64);
        true
    }

    /// Removes `id` (no-op when absent or outside the vocabulary).
    pub fn remove(&mut self, id: u32) {
        let i = id as usize;
        if i < self.vocab_size {
            self.words[i / 64] &= !(1 << (i % 64));
        }
    }

    /// Whether `id` is in the set (false outside the vocabulary).
    pub fn contains(&self, id: u32) -> bool {
        let i = id as usize;
        i < self.vocab_size && self.words[i / 64] & (1 << (i % 64)) != 0
    }

    /// Number of ids in the set.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set has no ids.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// The ids in the set, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.vocab_size as u32).filter(|&id| self.contains(id))
    }
}

impl TokenMask for TokenSet {
    fn allows(&self, id: u32) -> bool {
        self.contains(id)
    }

    fn allowed_set(&self, vocab_size: usize) -> TokenSet {
        if vocab_size == self.vocab_size {
            return self.clone();
        }
        let mut set = TokenSet::empty(vocab_size);
        for id in self.iter() {
            set.insert(id);
        }
        set
    }
}

/// A mask that allows everything except the tokens in its set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenyList(pub TokenSet);

impl TokenMask for DenyList {
    fn allows(&self, id: u32) -> bool {
        !self.0.contains(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_set_basics() {
        let mut set = TokenSet::empty(130);
        assert!(set.is_empty());
        assert!(set.insert(0));
        assert!(set.insert(64));
        assert!(set.insert(129));
        assert!(!set.insert(130));
        assert_eq!(set.count(), 3);
        assert!(set.contains(64) && !set.contains(63) && !set.contains(1000));
        set.remove(64);
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![0, 129]);
        assert_eq!(TokenSet::full(130).count(), 130);
        assert_eq!(TokenSet::full(128).count(), 128);
        assert!(TokenSet::from_ids(3, [3]).is_err());
    }

    #[test]
    fn u32_words_round_trip_in_the_gpu_layout() {
        let set = TokenSet::from_ids(100, [0, 31, 32, 63, 64, 99]).unwrap();
        let words = set.to_u32_words();
        assert_eq!(words.len(), 4);
        assert_eq!(words[0], 1 | 1 << 31);
        assert_eq!((words[1], words[2], words[3]), (1 | 1 << 31, 1, 1 << 3));
        assert_eq!(TokenSet::from_u32_words(100, &words), set);
        // Bits past the vocabulary and an extra word are ignored; missing words are empty.
        let padded = TokenSet::from_u32_words(100, &[u32::MAX; 5]);
        assert_eq!(padded, TokenSet::full(100));
        assert!(TokenSet::from_u32_words(100, &[]).is_empty());
    }

    #[test]
    fn masks_allow_what_they_say() {
        let allow = AllowList::from_ids(5, [1, 3]).unwrap();
        assert!(allow.allows(1) && !allow.allows(2));
        let deny = DenyList(allow.clone());
        assert!(!deny.allows(1) && deny.allows(2));
        let even = |id: u32| id.is_multiple_of(2);
        assert_eq!(even.allowed_set(5).iter().collect::<Vec<_>>(), vec![0, 2, 4]);
        assert_eq!(deny.allowed_set(5).iter().collect::<Vec<_>>(), vec![0, 2, 4]);
    }
}
