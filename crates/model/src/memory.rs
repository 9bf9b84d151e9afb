//! What a model will hold on its device, computed from the GGUF and the context length before
//! anything is uploaded, and checked against the device's limits.
//!
//! A browser tab's GPU gives each buffer a ceiling (`maxBufferSize`, and per binding
//! `maxStorageBufferBindingSize`: 128 MiB on many phones and on lavapipe) and the visitor's
//! machine a total. The fused path holds every weight tensor in its own buffer (a
//! vocabulary-sized one larger than a binding in several, of whole rows), one KV-cache buffer per
//! block (grown by doubling up to the context asked for) and a few scratch buffers;
//! [`MemoryPlan`] lists them all at full context, so a load that could only fail later (an upload
//! refused, a cache that cannot grow mid-generation) is refused at once, naming what does not fit
//! and the largest context length that would.

use burn::backend::wgpu::wgpu;
use nucleus_gguf::GgufHeader;

use crate::host_plan::mib;
use crate::{ModelConfig, ModelError};

/// What the device allows: each buffer, each binding, and (optionally) all of them together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimits {
    /// The largest buffer (`maxBufferSize`).
    pub max_buffer: u64,
    /// The largest storage binding (`maxStorageBufferBindingSize`); every buffer here is bound whole.
    pub max_binding: u64,
    /// The most all buffers together may take, when the caller sets a budget.
    pub budget: Option<u64>,
}

impl MemoryLimits {
    /// The limits of a wgpu device, with an optional total budget.
    pub fn of_device(limits: &wgpu::Limits, budget: Option<u64>) -> Self {
        Self { max_buffer: limits.max_buffer_size, max_binding: limits.max_storage_buffer_binding_size, budget }
    }

    /// The largest single buffer allowed.
    fn per_buffer(&self) -> u64 {
        self.max_buffer.min(self.max_binding)
    }
}

/// One buffer of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedBuffer {
    pub what: String,
    pub bytes: u64,
    /// `Some(row bytes)`: held in several buffers of whole rows when larger than one (it then
    /// needs only a row to fit): a vocabulary-sized matrix; the recurrent state's checkpoints,
    /// a buffer per copy.
    pub row_bytes: Option<u64>,
}

impl PlannedBuffer {
    /// The most bytes one of its buffers needs.
    fn largest_part(&self, per_buffer: u64) -> u64 {
        match self.row_bytes {
            Some(row) if self.bytes > per_buffer => row,
            _ => self.bytes,
        }
    }
}

/// Every buffer a model on the fused path holds at full context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Weight tensors as uploaded (GGUF blocks, or f32 where a type is converted), and each
    /// block's attention vectors.
    pub weights: Vec<PlannedBuffer>,
    /// Scratch: activations, attention records, logits, step parameters, a recurrent state.
    pub scratch: Vec<PlannedBuffer>,
    /// Bytes of one position in one block's KV-cache buffer.
    pub position_bytes: u64,
    /// Bytes of one position in each RoPE table (one table per base, each its own buffer).
    pub rope_position_bytes: u64,
    /// RoPE tables (Gemma 3 has two: its local and global bases).
    pub rope_tables: usize,
    /// Attention blocks, each with its own KV-cache buffer (a recurrent block's state is scratch).
    pub blocks: usize,
    /// Of them, local blocks whose buffer is a ring of [`Self::ring_rows`] rows (`window.rs`).
    pub ring_blocks: usize,
    /// Rows of a local block's ring (0 without).
    pub ring_rows: usize,
    /// Positions the plan is for.
    pub context_length: usize,
}

impl MemoryPlan {
    /// The fused path's buffers for `file` (whose configuration is `config`) at `context_length`
    /// (the RoPE tables at the configuration's). Fails as the load would on a tensor the fused
    /// kernels cannot read, missing or of the wrong shape: before anything is uploaded.
    pub fn fused(file: &GgufHeader, config: &ModelConfig, context_length: usize) -> Result<Self, ModelError> {
        let weights = crate::fused::planned_weights(file, config)?;
        let mut scratch: Vec<PlannedBuffer> = crate::fused::ScratchSizes::new(config)
            .named()
            .map(|(what, bytes)| PlannedBuffer { what: what.to_string(), bytes, row_bytes: None })
            .collect();
        // The recurrent blocks' state: fixed, whatever the context; and its checkpoints, a buffer
        // per copy (`state.rs`: at most MAX_CHECKPOINTS kept, and one rollback).
        // The local blocks' windows each kept checkpoint copies (`state.rs`: at most MAX_CHECKPOINTS).
        let ring_blocks = config.ring_blocks();
        let window_copy = ring_blocks as u64 * crate::fused::window_checkpoint_bytes(config);
        if window_copy > 0 {
            let copies = crate::state::MAX_CHECKPOINTS as u64;
            scratch.push(PlannedBuffer {
                what: format!("the local blocks' window checkpoints (at most {copies})"),
                bytes: copies * window_copy,
                row_bytes: Some(window_copy),
            });
        }
        if let Some(layout) = crate::fused::StateLayout::new(config) {
            let copies = crate::state::MAX_CHECKPOINTS as u64 + 1;
            scratch.push(PlannedBuffer { what: "the recurrent state".into(), bytes: layout.bytes(), row_bytes: None });
            scratch.push(PlannedBuffer {
                what: format!("the recurrent state's checkpoints (at most {copies})"),
                bytes: copies * layout.bytes(),
                row_bytes: Some(layout.bytes()),
            });
        }
        Ok(Self {
            weights,
            scratch,
            position_bytes: config.kv_position_bytes(),
            rope_position_bytes: crate::rope::RopeTables::position_bytes(config),
            rope_tables: crate::rope::RopeTables::count(config),
            blocks: config.attention_blocks(),
            ring_blocks,
            ring_rows: config.window_ring().map_or(0, |ring| ring.slots()),
            context_length,
        })
    }

    pub fn weight_bytes(&self) -> u64 {
        self.weights.iter().map(|b| b.bytes).sum()
    }

    pub fn scratch_bytes(&self) -> u64 {
        self.scratch.iter().map(|b| b.bytes).sum()
    }

    /// One block's KV-cache buffer at `positions`.
    pub fn kv_block_bytes(&self, positions: usize) -> u64 {
        positions as u64 * self.position_bytes
    }

    /// Every block's KV cache at the full context: a local block's ring at most its rows.
    pub fn kv_bytes(&self) -> u64 {
        let global = (self.blocks - self.ring_blocks) as u64 * self.kv_block_bytes(self.context_length);
        global + self.ring_blocks as u64 * self.kv_block_bytes(self.context_length.min(self.ring_rows))
    }

    /// The RoPE tables at the full context (they have a row per position, like the cache).
    pub fn rope_bytes(&self) -> u64 {
        self.rope_tables as u64 * self.rope_position_bytes * self.context_length as u64
    }

    /// Bytes each position of the context adds: every global block's keys and values (a ring's
    /// stop growing), and a row of every RoPE table.
    fn bytes_per_position(&self) -> u64 {
        (self.blocks - self.ring_blocks) as u64 * self.position_bytes
            + self.rope_tables as u64 * self.rope_position_bytes
    }

    /// Everything together.
    pub fn total_bytes(&self) -> u64 {
        self.weight_bytes() + self.scratch_bytes() + self.kv_bytes() + self.rope_bytes()
    }

    /// The most positions the KV cache can hold within `limits` (0 when even the weights and
    /// scratch do not fit).
    pub fn max_context_length(&self, limits: &MemoryLimits) -> usize {
        let widest = self.position_bytes.max(self.rope_position_bytes).max(1);
        let by_buffer = limits.per_buffer() / widest;
        // The rings counted whole: they fill before a context reaches a budget's positions.
        let rings = self.ring_blocks as u64 * self.kv_block_bytes(self.ring_rows);
        let by_budget = limits.budget.map_or(u64::MAX, |budget| {
            budget.saturating_sub(self.weight_bytes() + self.scratch_bytes() + rings) / self.bytes_per_position().max(1)
        });
        usize::try_from(by_buffer.min(by_budget)).unwrap_or(usize::MAX)
    }

    /// Refuses the plan when a buffer is larger than the device allows or the total exceeds the
    /// budget: [`ModelError::OutOfMemory`], naming what needs what and the largest context length
    /// that would fit.
    pub fn check(&self, limits: &MemoryLimits) -> Result<(), ModelError> {
        let per_buffer = limits.per_buffer();
        let fixed = self.weights.iter().chain(&self.scratch);
        if let Some(buffer) = fixed.filter(|b| b.largest_part(per_buffer) > per_buffer).max_by_key(|b| b.bytes) {
            return Err(ModelError::OutOfMemory(format!(
                "{} needs one buffer of {}, more than this GPU allows in one ({}); this model cannot run on this GPU",
                buffer.what,
                mib(buffer.largest_part(per_buffer)),
                mib(per_buffer)
            )));
        }
        let fits = format!("contextLength {} or less would fit", self.max_context_length(limits));
        let kv_block = self.kv_block_bytes(self.context_length);
        if kv_block > per_buffer {
            return Err(ModelError::OutOfMemory(format!(
                "the KV cache of one block needs {} for {} positions, more than this GPU allows in one buffer ({}): {fits}",
                mib(kv_block),
                self.context_length,
                mib(per_buffer)
            )));
        }
        let rope_table = self.rope_position_bytes * self.context_length as u64;
        if rope_table > per_buffer {
            return Err(ModelError::OutOfMemory(format!(
                "a RoPE table needs {} for {} positions, more than this GPU allows in one buffer ({}): {fits}",
                mib(rope_table),
                self.context_length,
                mib(per_buffer)
            )));
        }
        if let Some(budget) = limits.budget.filter(|&budget| self.total_bytes() > budget) {
            return Err(ModelError::OutOfMemory(format!(
                "the model needs {} on the GPU ({} of weights, {} of KV cache for {} positions, {} of scratch and \
                 RoPE tables), more than the budget of {}: {fits}",
                mib(self.total_bytes()),
                mib(self.weight_bytes()),
                mib(self.kv_bytes()),
                self.context_length,
                mib(self.scratch_bytes() + self.rope_bytes()),
                mib(budget)
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(context_length: usize) -> MemoryPlan {
        MemoryPlan {
            weights: vec![
                PlannedBuffer { what: "tensor 'token_embd.weight'".into(), bytes: 50 << 20, row_bytes: Some(1 << 10) },
                PlannedBuffer { what: "tensor 'blk.0.ffn_up.weight'".into(), bytes: 10 << 20, row_bytes: None },
            ],
            scratch: vec![PlannedBuffer { what: "logits".into(), bytes: 4 << 20, row_bytes: None }],
            position_bytes: 4096,
            rope_position_bytes: 0,
            rope_tables: 1,
            blocks: 30,
            ring_blocks: 0,
            ring_rows: 0,
            context_length,
        }
    }

    const ROOMY: MemoryLimits = MemoryLimits { max_buffer: 1 << 30, max_binding: 1 << 30, budget: None };

    #[test]
    fn a_plan_that_fits_passes_and_its_sums_add_up() {
        let plan = plan(8192);
        assert_eq!(plan.kv_bytes(), 30 * 8192 * 4096);
        assert_eq!(plan.total_bytes(), (64 << 20) + 30 * 8192 * 4096);
        plan.check(&ROOMY).unwrap();
        assert_eq!(plan.max_context_length(&ROOMY), (1 << 30) / 4096);
    }

    #[test]
    fn a_local_blocks_ring_stops_growing_at_its_rows() {
        // 25 of the 30 blocks local, rings of 639 rows.
        let ringed = |context| MemoryPlan { ring_blocks: 25, ring_rows: 639, ..plan(context) };
        assert_eq!(ringed(8192).kv_bytes(), 5 * 8192 * 4096 + 25 * 639 * 4096);
        assert_eq!(ringed(100).kv_bytes(), plan(100).kv_bytes());
        let limits = MemoryLimits { budget: Some(200 << 20), ..ROOMY };
        let fits = ((200 << 20) - (64 << 20) - 25 * 639 * 4096) / (5 * 4096);
        assert_eq!(ringed(8192).max_context_length(&limits), fits);
    }

    #[test]
    fn a_kv_cache_larger_than_one_binding_names_the_largest_context_that_fits() {
        // 128 MiB per binding, as on many phones: 32,768 positions of 4 KiB.
        let limits = MemoryLimits { max_binding: 128 << 20, ..ROOMY };
        let error = plan(40_000).check(&limits).unwrap_err().to_string();
        assert!(error.contains("the KV cache of one block needs 156.2 MiB for 40000 positions"), "{error}");
        assert!(error.contains("(128.0 MiB): contextLength 32768 or less would fit"), "{error}");
        plan(32_768).check(&limits).unwrap();
    }

    #[test]
    fn a_budget_bounds_the_total_and_the_context_that_fits() {
        // 64 MiB of weights and scratch, 120 KiB per position over 30 blocks.
        let limits = MemoryLimits { budget: Some(100 << 20), ..ROOMY };
        let fits = ((100 << 20) - (64 << 20)) / (30 * 4096);
        assert_eq!(plan(8192).max_context_length(&limits), fits);
        let error = plan(8192).check(&limits).unwrap_err().to_string();
        assert!(error.contains("more than the budget of 100.0 MiB"), "{error}");
        assert!(error.contains(&format!("contextLength {fits} or less would fit")), "{error}");
        plan(fits).check(&limits).unwrap();
        plan(fits + 1).check(&limits).unwrap_err();
    }

    #[test]
    fn a_tensor_larger_than_one_buffer_is_refused_by_name_unless_it_is_held_in_rows() {
        // The 50 MiB embedding is held in parts of whole rows; the 10 MiB matrix must be one buffer.
        let limits = MemoryLimits { max_buffer: 32 << 20, ..ROOMY };
        plan(16).check(&limits).unwrap();
        let limits = MemoryLimits { max_buffer: 8 << 20, ..ROOMY };
        let error = plan(16).check(&limits).unwrap_err().to_string();
        assert!(error.starts_with("tensor 'blk.0.ffn_up.weight' needs one buffer of 10.0 MiB"), "{error}");
        assert!(error.contains("cannot run on this GPU"), "{error}");
    }
}
