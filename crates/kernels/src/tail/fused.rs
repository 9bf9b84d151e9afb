//! The decode tail recorded into the fused forward pass's command encoder: the same three shaders
//! as the Burn route, with bind groups, parameter buffers and the readback buffer built once for
//! the model's logits buffer. A decode step is then one submission (layers, tail, copy of the
//! candidates) and one read of `16 + 8K` bytes (plus the raw row's statistics and top list when
//! the step asks for them, in the same read).
//!
//! Parameters are written only when they change (the temperature, K, the adjustments): a greedy
//! or fixed-temperature decode step writes none of them.

use burn::backend::wgpu::wgpu;

use super::adjust::AdjustPlan;
use super::layout::{self, CHUNK_LEN, HEADER_WORDS, MAX_ADJUST_WORKGROUPS, MAX_K, WORKGROUP_SIZE, packed_words};
use super::{RawRow, TailOutput, TailRequest, inverse_temperature, validate_k};
use crate::KernelError;
use crate::gpu::{BufferView, Gpu, GpuBuffer};
use crate::kernel::{Kernel, KernelSpec, Recorder, Slot};

static LOGIT_ADJUST: KernelSpec = KernelSpec {
    name: "logit_adjust",
    source: include_str!("../../../../shaders/logit_adjust.wgsl"),
    structs: &[],
    rms: false,
    lib: &[],
    workgroup_bytes: 0,
    declared: true,
    slots: &[
        Slot::ReadWrite("logits", "array<f32>"),
        Slot::ReadWrite("params", "array<u32>"),
        Slot::ReadWrite("adjustments", "array<u32>"),
        Slot::ReadWrite("allow_mask", "array<u32>"),
    ],
};

static SOFTMAX_STATS: KernelSpec = KernelSpec {
    name: "softmax_stats",
    source: include_str!("../../../../shaders/softmax_stats.wgsl"),
    structs: &[],
    rms: false,
    lib: &[],
    workgroup_bytes: 0,
    declared: true,
    slots: &[
        Slot::ReadWrite("logits", "array<f32>"),
        Slot::ReadWrite("params", "array<u32>"),
        Slot::ReadWrite("blocks", "array<u32>"),
        Slot::ReadWrite("stats", "array<u32>"),
        Slot::ReadWrite("probabilities", "array<f32>"),
    ],
};

static TOPK: KernelSpec = KernelSpec {
    name: "topk",
    source: include_str!("../../../../shaders/topk.wgsl"),
    structs: &[],
    rms: false,
    lib: &[],
    workgroup_bytes: 0,
    declared: true,
    slots: &[
        Slot::ReadWrite("logits", "array<u32>"),
        Slot::ReadWrite("params", "array<u32>"),
        Slot::ReadWrite("blocks", "array<u32>"),
        Slot::ReadWrite("packed", "array<u32>"),
    ],
};

/// A recorded tail, to be read after the caller's submission.
#[must_use = "read it after submitting the recorder"]
pub struct RecordedTail {
    gpu: Gpu,
    staging: wgpu::Buffer,
    k: usize,
    temperature: f32,
    raw_top_k: Option<usize>,
}

/// One packed output with its parameters, and the softmax (passes 0, 1) and top-k bind groups
/// that fill it from each source row: `[the model's row, the adjusted copy]`.
struct StatsTarget {
    packed: GpuBuffer,
    softmax_params: GpuBuffer,
    topk_params: GpuBuffer,
    groups: [(wgpu::BindGroup, wgpu::BindGroup); 2],
    /// The (1/T, K) last written to the parameters.
    written: Option<(u32, u32)>,
}

/// Which row a pass reads.
#[derive(Clone, Copy)]
enum Source {
    /// The model's logits, as the forward pass left them.
    Row = 0,
    /// The copy the adjustments were applied to (the row itself stays raw, for a full read).
    Adjusted = 1,
}

/// The decode tail on one logits row of the fused path.
pub struct TailKernels {
    gpu: Gpu,
    vocab: u32,
    block_count: u32,
    logits: BufferView,
    adjusted: GpuBuffer,
    adjust: Kernel,
    softmax: wgpu::ComputePipeline,
    topk: wgpu::ComputePipeline,
    adjust_pipeline: wgpu::ComputePipeline,
    /// The block records of softmax pass 0 (bound in every softmax and top-k group).
    _blocks: GpuBuffer,
    tail: StatsTarget,
    raw: StatsTarget,
    adjust_params: GpuBuffer,
    entries: GpuBuffer,
    mask: GpuBuffer,
    adjust_group: wgpu::BindGroup,
    /// The adjustment words last written (skipped when a step repeats them).
    written_adjustments: Option<(Vec<u32>, Option<Vec<u32>>)>,
    staging: GpuBuffer,
}

/// Bytes of the readback: the tail's packed result, then the raw one's, each for K = 256.
const STAGING_WORDS: usize = 2 * packed_words(MAX_K);

/// Bytes of the buffers [`TailKernels::new`] allocates for a vocabulary (each rounded up to 4
/// bytes as [`Gpu::buffer`] does): what it allocates, and what a memory plan counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailSizes {
    /// Block records the softmax and top-k passes write (one per workgroup invocation).
    pub block_count: u32,
    /// The adjusted copy of the row.
    pub adjusted: u64,
    /// The softmax and top-k passes' block records.
    pub blocks: u64,
    /// The allow mask, one bit per token.
    pub mask: u64,
    /// Everything else: packed results, parameters, adjustment entries, the readback.
    pub small: u64,
}

const PACKED_BYTES: u64 = packed_words(MAX_K) as u64 * 4;
const STATS_PARAMS_BYTES: u64 = 32;
const ADJUST_PARAMS_BYTES: u64 = 16;
const ADJUST_ENTRIES_BYTES: u64 = 5 * 4 * 64;

impl TailSizes {
    /// The sizes for a row of `vocab` logits.
    pub fn new(vocab: u32) -> Self {
        let block_count = vocab.div_ceil(CHUNK_LEN) * WORKGROUP_SIZE;
        // Per target (the tail's, the raw row's): the packed result and two parameter buffers.
        let target = PACKED_BYTES + 2 * STATS_PARAMS_BYTES;
        Self {
            block_count,
            adjusted: u64::from(vocab) * 4,
            blocks: u64::from(block_count) * 16,
            mask: u64::from(vocab.div_ceil(32)) * 4,
            small: 2 * target + ADJUST_PARAMS_BYTES + ADJUST_ENTRIES_BYTES + STAGING_WORDS as u64 * 4 + 4,
        }
    }

    /// Every buffer's bytes, by what it holds.
    pub fn named(&self) -> [(&'static str, u64); 4] {
        [
            ("the decode tail's adjusted row", self.adjusted),
            ("the decode tail's block records", self.blocks),
            ("the decode tail's allow mask", self.mask),
            ("the decode tail's parameters and results", self.small),
        ]
    }
}

impl TailKernels {
    /// The tail on `logits`, one row of `vocab` f32 values (modified in place by adjustments).
    pub fn new(gpu: &Gpu, logits: &BufferView, vocab: usize) -> Result<Self, KernelError> {
        if vocab == 0 || vocab > layout::MAX_VOCAB || logits.size < vocab as u64 * 4 {
            return Err(KernelError::invalid("logits", format!("{} bytes for a vocabulary of {vocab}", logits.size)));
        }
        let vocab = vocab as u32;
        let sizes = TailSizes::new(vocab);
        let softmax = Kernel::new(gpu, &SOFTMAX_STATS, &[])?;
        let topk = Kernel::new(gpu, &TOPK, &[])?;
        let adjust = Kernel::new(gpu, &LOGIT_ADJUST, &[])?;
        let blocks = gpu.storage("tail blocks", sizes.blocks);
        let unused = gpu.storage("tail unused binding", 4);
        let logits = BufferView { size: u64::from(vocab) * 4, ..logits.clone() };
        let adjusted = gpu.storage("adjusted logits", sizes.adjusted);
        let target = |label: &str| -> Result<StatsTarget, KernelError> {
            let packed = gpu.storage(label, PACKED_BYTES);
            let softmax_params = gpu.storage(label, STATS_PARAMS_BYTES);
            let topk_params = gpu.storage(label, STATS_PARAMS_BYTES);
            let groups_for = |row: &BufferView| -> Result<_, KernelError> {
                Ok((
                    softmax.bind(&[row, &softmax_params.view(), &blocks.view(), &packed.view(), &unused.view()])?,
                    topk.bind(&[row, &topk_params.view(), &blocks.view(), &packed.view()])?,
                ))
            };
            let groups = [groups_for(&logits)?, groups_for(&adjusted.view())?];
            Ok(StatsTarget { packed, softmax_params, topk_params, groups, written: None })
        };
        let tail = target("tail packed")?;
        let raw = target("tail raw packed")?;
        let adjust_params = gpu.storage("adjust params", ADJUST_PARAMS_BYTES);
        let entries = gpu.storage("adjust entries", ADJUST_ENTRIES_BYTES);
        let mask = gpu.storage("allow mask", sizes.mask);
        let adjust_group = adjust.bind(&[&adjusted.view(), &adjust_params.view(), &entries.view(), &mask.view()])?;
        let staging = gpu.buffer(
            "tail readback",
            STAGING_WORDS as u64 * 4,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        );
        Ok(Self {
            gpu: gpu.clone(),
            vocab,
            block_count: sizes.block_count,
            logits,
            adjusted,
            softmax: softmax.pipeline(1, 0),
            topk: topk.pipeline(1, 0),
            adjust_pipeline: adjust.pipeline(1, 0),
            adjust,
            _blocks: blocks,
            tail,
            raw,
            adjust_params,
            entries,
            mask,
            adjust_group,
            written_adjustments: None,
            staging,
        })
    }

    /// Records the tail of `request` (after what `recorder` holds) and the copy of its results
    /// to the readback buffer. Validates the request first; nothing is recorded on an error.
    pub fn record(&mut self, recorder: &mut Recorder, request: &TailRequest) -> Result<RecordedTail, KernelError> {
        validate_k(request.k)?;
        if let Some(n) = request.raw_top_k.filter(|&n| n > 0) {
            validate_k(n)?;
        }
        let inverse = inverse_temperature(request.temperature)?;
        let plan = request.adjustments.plan(self.vocab as usize)?;

        if let Some(raw_k) = request.raw_top_k {
            self.record_stats(recorder, Target::Raw, Source::Row, 1.0, raw_k);
        }
        let source = if plan.is_empty() {
            Source::Row
        } else {
            self.record_adjust(recorder, &plan);
            Source::Adjusted
        };
        self.record_stats(recorder, Target::Tail, source, inverse, request.k);

        let tail_bytes = packed_words(request.k) as u64 * 4;
        recorder.copy(self.tail.packed.buffer(), 0, self.staging.buffer(), 0, tail_bytes);
        if let Some(raw_k) = request.raw_top_k {
            let raw_bytes = if raw_k > 0 { packed_words(raw_k) } else { HEADER_WORDS } as u64 * 4;
            recorder.copy(self.raw.packed.buffer(), 0, self.staging.buffer(), tail_bytes, raw_bytes);
        }
        Ok(RecordedTail {
            gpu: self.gpu.clone(),
            staging: self.staging.buffer().clone(),
            k: request.k,
            temperature: request.temperature,
            raw_top_k: request.raw_top_k,
        })
    }

    /// Records the model's row's statistics at temperature 1 and its top `k` (no adjustment, no
    /// readback) and returns the buffer of the packed result (`4 + 2k` words, the layout of
    /// [`crate::RawRow`]), for a caller that copies it out after each of several rows (the logit
    /// lens: one row per block).
    pub fn record_raw_stats(&mut self, recorder: &mut Recorder, k: usize) -> Result<&GpuBuffer, KernelError> {
        validate_k(k)?;
        self.record_stats(recorder, Target::Raw, Source::Row, 1.0, k);
        Ok(&self.raw.packed)
    }

    /// The logits row the tail reads.
    pub fn logits(&self) -> &BufferView {
        &self.logits
    }

    fn record_stats(
        &mut self,
        recorder: &mut Recorder,
        which: Target,
        source: Source,
        inverse_temperature: f32,
        k: usize,
    ) {
        let target = match which {
            Target::Tail => &mut self.tail,
            Target::Raw => &mut self.raw,
        };
        let key = (inverse_temperature.to_bits(), k as u32);
        if target.written != Some(key) {
            let softmax = [0, self.vocab, key.0, self.block_count, 0, 0, 0, 0];
            let topk = [self.vocab, k.max(1) as u32, self.block_count, 0, 0, 0, 0, 0];
            self.gpu.write(target.softmax_params.buffer(), 0, bytemuck::cast_slice(&softmax));
            self.gpu.write(target.topk_params.buffer(), 0, bytemuck::cast_slice(&topk));
            target.written = Some(key);
        }
        let (softmax_group, topk_group) = &target.groups[source as usize];
        // Pass 0 (block records), pass 1 (flags, max, sum): the pass is the grid's z size.
        recorder.dispatch(SOFTMAX_STATS.name, &self.softmax, softmax_group, [self.block_count / WORKGROUP_SIZE, 1, 1]);
        recorder.dispatch(SOFTMAX_STATS.name, &self.softmax, softmax_group, [1, 1, 2]);
        if k > 0 {
            recorder.dispatch(TOPK.name, &self.topk, topk_group, [1, 1, 1]);
        }
    }

    /// Copies the row and applies `plan` to the copy.
    fn record_adjust(&mut self, recorder: &mut Recorder, plan: &AdjustPlan) {
        let words = (plan.entry_words.clone(), plan.allow_mask.clone());
        if self.written_adjustments.as_ref() != Some(&words) {
            let entry_bytes = (plan.entry_words.len() as u64 * 4).max(4);
            if entry_bytes > self.entries.size() {
                self.entries = self.gpu.storage("adjust entries", entry_bytes.next_power_of_two());
                self.adjust_group = self
                    .adjust
                    .bind(&[&self.adjusted.view(), &self.adjust_params.view(), &self.entries.view(), &self.mask.view()])
                    .expect("the adjust bindings were valid at creation and only the entries grew");
            }
            let has_mask = plan.allow_mask.is_some();
            self.gpu.write(
                self.adjust_params.buffer(),
                0,
                bytemuck::cast_slice(&[self.vocab, plan.entry_count, has_mask as u32, 0]),
            );
            if !plan.entry_words.is_empty() {
                self.gpu.write(self.entries.buffer(), 0, bytemuck::cast_slice(&plan.entry_words));
            }
            if let Some(mask) = &plan.allow_mask {
                self.gpu.write(self.mask.buffer(), 0, bytemuck::cast_slice(mask));
            }
            self.written_adjustments = Some(words);
        }
        recorder.copy(&self.logits.buffer, self.logits.offset, self.adjusted.buffer(), 0, self.logits.size);
        let mask_words = if plan.allow_mask.is_some() { self.vocab.div_ceil(32) } else { 0 };
        let workgroups = plan.entry_count.max(mask_words).div_ceil(WORKGROUP_SIZE).clamp(1, MAX_ADJUST_WORKGROUPS);
        recorder.dispatch(LOGIT_ADJUST.name, &self.adjust_pipeline, &self.adjust_group, [workgroups, 1, 1]);
    }
}

impl RecordedTail {
    /// Reads the results, once the recorder they were recorded into has been submitted: one map
    /// of the readback buffer (which the next recorded tail overwrites: read this one first).
    pub async fn read(self) -> Result<(TailOutput, Option<RawRow>), KernelError> {
        let tail_words = packed_words(self.k);
        let raw_words = match self.raw_top_k {
            None => 0,
            Some(0) => HEADER_WORDS,
            Some(n) => packed_words(n),
        };
        let bytes = self.gpu.read(&self.staging, (tail_words + raw_words) as u64 * 4).await?;
        let words = layout::words_of(&bytes);
        let tail = super::tail_output(&words[..tail_words], self.k, self.temperature)?;
        let raw = match self.raw_top_k {
            None => None,
            // One packed result: 16 bytes of statistics, then the top list's ids and logits.
            Some(n) => Some(super::raw_row(&words[tail_words..], n, 8 * n)?),
        };
        Ok((tail, raw))
    }
}

#[derive(Clone, Copy)]
enum Target {
    Tail,
    Raw,
}
