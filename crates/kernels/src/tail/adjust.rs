//! Sparse logit adjustments (bias, penalties) and the allow-mask, with their validation and
//! their packing for `logit_adjust.wgsl`. One token's adjustment is the sampler's
//! [`LogitAdjustment`], taken as it is.

pub use nucleus_sampler::LogitAdjustment;

use crate::KernelError;

/// The sparse adjustments of one decode step and an optional allow-mask (constrained decoding).
///
/// The mask has one bit per vocabulary id: bit `id % 32` of word `id / 32`, 1 = allowed; a
/// disallowed token's logit becomes `-inf` (after the adjustments, which it overrides), except
/// a NaN or `+inf` logit, which is kept so that the softmax reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogitAdjustments {
    entries: Vec<LogitAdjustment>,
    allow_mask: Option<Vec<u32>>,
}

impl LogitAdjustments {
    /// No adjustment and no mask.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adjustments without a mask.
    pub fn from_entries(entries: Vec<LogitAdjustment>) -> Self {
        Self { entries, allow_mask: None }
    }

    /// Adds one token's adjustment (each id at most once; checked by [`Self::validate`]).
    pub fn push(&mut self, adjustment: LogitAdjustment) {
        self.entries.push(adjustment);
    }

    /// Sets the allow-mask: `ceil(vocab / 32)` words, bit `id % 32` of word `id / 32` set when
    /// `id` is allowed.
    pub fn with_allow_mask(mut self, words: Vec<u32>) -> Self {
        self.allow_mask = Some(words);
        self
    }

    /// Builds the allow-mask words for `vocab` tokens from the allowed ids (ids `>= vocab` are
    /// an error naming the id).
    pub fn allow_mask_from_ids(vocab: usize, allowed: impl IntoIterator<Item = u32>) -> Result<Vec<u32>, KernelError> {
        let mut words = vec![0u32; vocab.div_ceil(32)];
        for id in allowed {
            if id as usize >= vocab {
                return Err(KernelError::invalid(
                    "allowed ids",
                    format!("token id {id} is outside the vocabulary of {vocab}"),
                ));
            }
            words[id as usize / 32] |= 1 << (id % 32);
        }
        Ok(words)
    }

    /// The adjustments, in the order given.
    pub fn entries(&self) -> &[LogitAdjustment] {
        &self.entries
    }

    /// The allow-mask words, if any.
    pub fn allow_mask(&self) -> Option<&[u32]> {
        self.allow_mask.as_deref()
    }

    /// True when there is neither an adjustment nor a mask (the adjust kernel is skipped).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.allow_mask.is_none()
    }

    /// Checks everything against a vocabulary of `vocab` tokens: ids inside it and each at most
    /// once, `bias`/`offset` finite or `-inf`, scales finite and `> 0`, mask of `ceil(vocab/32)`
    /// words. The error names the offending entry and field.
    pub fn validate(&self, vocab: usize) -> Result<(), KernelError> {
        let mut seen = vec![false; vocab];
        for (index, entry) in self.entries.iter().enumerate() {
            let name = |field: &str| format!("adjustments[{index}].{field}");
            let id = entry.id as usize;
            if id >= vocab {
                return Err(KernelError::invalid(
                    name("id"),
                    format!("token id {} is outside the vocabulary of {vocab}", entry.id),
                ));
            }
            if std::mem::replace(&mut seen[id], true) {
                return Err(KernelError::invalid(
                    name("id"),
                    format!("token id {} is adjusted more than once", entry.id),
                ));
            }
            for (field, value) in [("bias", entry.bias), ("offset", entry.offset)] {
                if value.is_nan() || value == f32::INFINITY {
                    return Err(KernelError::invalid(name(field), format!("must be finite or -inf, got {value}")));
                }
            }
            for (field, value) in
                [("scale_positive", entry.scale_positive), ("scale_non_positive", entry.scale_non_positive)]
            {
                if !(value.is_finite() && value > 0.0) {
                    return Err(KernelError::invalid(name(field), format!("must be finite and > 0, got {value}")));
                }
            }
        }
        if let Some(mask) = &self.allow_mask
            && mask.len() != vocab.div_ceil(32)
        {
            return Err(KernelError::invalid(
                "allow_mask",
                format!("needs ceil({vocab} / 32) = {} words, got {}", vocab.div_ceil(32), mask.len()),
            ));
        }
        Ok(())
    }

    /// Validates and packs for the kernel.
    #[cfg(feature = "gpu")]
    pub(crate) fn plan(&self, vocab: usize) -> Result<AdjustPlan, KernelError> {
        self.validate(vocab)?;
        let mut words = Vec::with_capacity(5 * self.entries.len());
        for entry in &self.entries {
            words.extend([
                entry.id,
                entry.bias.to_bits(),
                entry.scale_positive.to_bits(),
                entry.scale_non_positive.to_bits(),
                entry.offset.to_bits(),
            ]);
        }
        Ok(AdjustPlan {
            entry_words: words,
            entry_count: self.entries.len() as u32,
            allow_mask: self.allow_mask.clone(),
        })
    }
}

/// Validated adjustments in the layout of `logit_adjust.wgsl` binding 2 (5 words per entry)
/// and binding 3.
#[derive(Debug, Clone, PartialEq)]
pub struct AdjustPlan {
    pub(crate) entry_words: Vec<u32>,
    pub(crate) entry_count: u32,
    pub(crate) allow_mask: Option<Vec<u32>>,
}

impl AdjustPlan {
    #[cfg(feature = "gpu")]
    pub(crate) fn is_empty(&self) -> bool {
        self.entry_count == 0 && self.allow_mask.is_none()
    }
}
