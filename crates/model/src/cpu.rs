//! The forward pass on the CPU over the weights as the GGUF stores them (`Path::Cpu`): the CPU
//! engine, for visitors whose browser has no usable GPU, and the CLI on a machine without one.
//!
//! Every matrix stays in its GGUF blocks (a copy of the file's bytes: resident weights are the
//! file's size, where Burn's CPU path holds 5.5× as much in f32) and is multiplied by
//! `nucleus_cpu::matmul`, a tile dequantized at a time, vectorised by the compiler and spread
//! over the threads natively. Norm weights and biases are f32. The block is the family's
//! [`BlockSpec`](crate::BlockSpec), computed as `burn_ops.rs` computes it on tensors (its module
//! documentation has the formulas): same seam, same weight table, same RoPE tables. The KV cache
//! is f32 rows per attention block, grown as positions are used (a local block's a ring of its
//! window: [`crate::window`]); a Gated DeltaNet block
//! (Qwen3.5) keeps its fixed-size state instead ([`crate::state`]), and its prompt runs through
//! the chunked form of the delta rule (`nucleus_cpu::delta_net`).

use std::ops::Range;

use nucleus_cpu::delta_net::{self, DeltaInputs, DeltaShape};
use nucleus_cpu::elementwise;
use nucleus_cpu::ops::{AttentionShape, KvRows, attention, attention_weights, inverse_rms, rms_norm};
use nucleus_cpu::{Matrix, matmul, matmuls};
use nucleus_gguf::{GgmlType, GgufFile, SharedSlice, TensorInfo};

use crate::architecture::{Architecture, FeedForward, Norm, Role};
use crate::rope::RopeTables;
use crate::state::{Checkpoints, MAX_CHECKPOINTS, RecurrentState, Snapshot};
use crate::weights::{self, AttentionWeights, DeltaNetWeights, MixerWeights, ModelWeights};
use crate::window::WindowRing;
use crate::{LoadProgress, LogitLens, Logits, ModelConfig, ModelError};

/// A weight as the CPU engine holds it.
pub(crate) enum CpuWeight {
    /// A matrix `[rows, cols]` in its GGUF blocks: where they lie in the file when it was
    /// parsed shared ([`GgufFile::parse_shared`]: no copy), else copied out of it.
    Blocks { ggml_type: GgmlType, bytes: SharedSlice, rows: usize, cols: usize },
    /// A vector (a norm's γ, a bias), f32.
    Vector(Vec<f32>),
}

impl CpuWeight {
    fn matrix(&self) -> Matrix<'_> {
        match self {
            CpuWeight::Blocks { ggml_type, bytes, rows, cols } => {
                Matrix { ggml_type: *ggml_type, bytes, rows: *rows, cols: *cols }
            }
            CpuWeight::Vector(_) => unreachable!("the weight table uploads matrices as blocks"),
        }
    }

    fn vector(&self) -> &[f32] {
        match self {
            CpuWeight::Vector(values) => values,
            CpuWeight::Blocks { .. } => unreachable!("the weight table uploads vectors as f32"),
        }
    }

    fn bytes(&self) -> u64 {
        match self {
            CpuWeight::Blocks { bytes, .. } => bytes.len() as u64,
            CpuWeight::Vector(values) => values.len() as u64 * 4,
        }
    }
}

/// A pass's positions in an attention block: the first, and the RoPE rows of the block's table
/// for each, `[seq, rope_dims / 2]`.
struct Positions<'a> {
    start: usize,
    rope: &'a [(f32, f32)],
}

/// A model on the CPU.
pub(crate) struct CpuModel {
    config: ModelConfig,
    architecture: &'static Architecture,
    weights: ModelWeights<CpuWeight>,
    /// The blocks' RoPE, whose rows a pass computes for its own positions.
    rope: RopeTables,
}

/// Keys and values of every attention block, the state of every recurrent block (empty for a
/// family without) and the checkpoints of what cannot go back (the recurrent states, the local
/// blocks' rings).
pub(crate) struct CpuCache {
    /// Per block, in block order (a recurrent block's stay empty).
    rows: Vec<BlockRows>,
    /// Values in one KV head's row.
    head_dim: usize,
    /// The local blocks' ring, for a family with a sliding window.
    ring: Option<WindowRing>,
    /// Per recurrent block, in block order.
    states: Vec<RecurrentState>,
    checkpoints: Checkpoints<CpuSnapshot>,
}

/// One attention block's keys and values, f32 rows of `head_dim` with each KV head's rows
/// together (a decode step's attention reads a head's keys, then its values, as one stream from
/// memory: ARCHITECTURE.md, "Each KV head's rows together"), grown as positions are written:
/// every position from 0; or for a local block its ring (`window.rs`), twice its slots long: a
/// position from `slots` on is written at its slot and again at `slot + slots`, so that any
/// `slots` consecutive positions are consecutive rows (what the attention kernel reads).
#[derive(Clone)]
struct BlockRows {
    /// Per KV head, `[rows, head_dim]`.
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    ring: bool,
}

/// What a checkpoint copies: the recurrent states, and each local block's rows of the window
/// before the checkpoint's position (keys, values), in block order.
#[derive(Default)]
pub(crate) struct CpuSnapshot {
    states: Vec<RecurrentState>,
    windows: Vec<(Vec<f32>, Vec<f32>)>,
}

impl Snapshot for CpuSnapshot {
    fn bytes(&self) -> u64 {
        self.states.bytes() + self.windows.iter().map(|(k, v)| (k.len() + v.len()) as u64 * 4).sum::<u64>()
    }
}

impl CpuCache {
    pub(crate) fn bytes(&self) -> u64 {
        self.rows.iter().map(BlockRows::bytes).sum::<u64>() + self.state_bytes() + self.checkpoints.bytes()
    }

    /// Bytes of the recurrent blocks' live state.
    pub(crate) fn state_bytes(&self) -> u64 {
        self.states.iter().map(RecurrentState::bytes).sum()
    }

    pub(crate) fn checkpoints(&self) -> &Checkpoints<CpuSnapshot> {
        &self.checkpoints
    }

    /// Whether the cache holds recurrent state (it cannot simply forget positions).
    pub(crate) fn is_recurrent(&self) -> bool {
        !self.states.is_empty()
    }

    /// Whether going back may need a checkpoint: a recurrent state, or a ring that drops rows.
    pub(crate) fn needs_checkpoints(&self) -> bool {
        self.is_recurrent() || self.ring.is_some()
    }

    /// Goes back to `len` positions from `filled`: rows of every position need nothing, nor a
    /// ring that still holds the window before `len`; else the recurrent states and the rings go
    /// back to the latest checkpoint at or before `len` (the start when there is none). Returns
    /// the positions held after.
    pub(crate) fn go_back(&mut self, len: usize, filled: usize) -> usize {
        if len >= filled {
            return filled;
        }
        if !self.is_recurrent() && self.ring.is_none_or(|ring| ring.holds_window_before(len)) {
            // A checkpoint after `len` holds rows of the tokens being forgotten.
            self.checkpoints.forget_after(len);
            return len;
        }
        let Self { rows, head_dim, ring, states, checkpoints } = self;
        match checkpoints.restore(len) {
            Some((at, saved)) => {
                states.clone_from_slice(&saved.states);
                if let Some(ring) = ring {
                    let window = ring.window_before(at);
                    for (rows, (keys, values)) in rows.iter_mut().filter(|rows| rows.ring).zip(&saved.windows) {
                        rows.write(*head_dim, Some(*ring), window.clone(), keys, values);
                    }
                    ring.restored_at(at);
                }
                at
            }
            None => {
                states.iter_mut().for_each(RecurrentState::reset);
                if let Some(ring) = ring {
                    ring.clear();
                }
                0
            }
        }
    }

    /// Keeps a copy of what cannot go back, as it is at `position` (nothing for rows alone).
    pub(crate) fn checkpoint(&mut self, position: usize) {
        if self.needs_checkpoints() {
            let Self { rows, head_dim, ring, states, checkpoints } = self;
            checkpoints.record(position, |old| snapshot(rows, *head_dim, *ring, states, position, old));
        }
    }

    /// Before a pass of several tokens from `position` on a recurrent cache (a prompt's chunk, a
    /// draft's verification): the state here, to come back to if the pass's tokens are not all
    /// kept. A ring needs none: such a pass goes back within its slack.
    fn checkpoint_for_rollback(&mut self, position: usize) {
        if self.is_recurrent() {
            let Self { rows, head_dim, ring, states, checkpoints } = self;
            checkpoints.record_rollback(position, |old| snapshot(rows, *head_dim, *ring, states, position, old));
        }
    }

    /// Forgets everything: zero states, no checkpoints.
    pub(crate) fn clear(&mut self) {
        self.checkpoints.clear();
        let ended = self.go_back(0, usize::MAX);
        debug_assert_eq!(ended, 0);
    }

    /// An independent copy of the rows and the live state, without the checkpoints (a copy is
    /// a beam or a fork that goes on from here: it does not go back before its start).
    pub(crate) fn duplicate(&self) -> Self {
        Self {
            rows: self.rows.clone(),
            head_dim: self.head_dim,
            ring: self.ring,
            states: self.states.clone(),
            checkpoints: Checkpoints::default(),
        }
    }
}

impl BlockRows {
    fn new(kv_heads: usize, ring: bool) -> Self {
        Self { keys: vec![Vec::new(); kv_heads], values: vec![Vec::new(); kv_heads], ring }
    }

    fn bytes(&self) -> u64 {
        self.keys.iter().chain(&self.values).map(|rows| rows.len() as u64 * 4).sum()
    }

    /// Writes the rows of `positions` (`keys`, `values`: `[positions, kv_heads · head_dim]`, each
    /// position's heads side by side): at their positions, or in `ring`.
    fn write(
        &mut self,
        head_dim: usize,
        ring: Option<WindowRing>,
        positions: Range<usize>,
        keys: &[f32],
        values: &[f32],
    ) {
        let ring = ring.filter(|_| self.ring);
        let width = self.keys.len() * head_dim;
        for ((position, key), value) in positions.zip(keys.chunks_exact(width)).zip(values.chunks_exact(width)) {
            let rows = match ring {
                Some(ring) => {
                    let slot = ring.slot(position);
                    [Some(slot), (position >= ring.slots()).then_some(slot + ring.slots())]
                }
                None => [Some(position), None],
            };
            for row in rows.into_iter().flatten() {
                let at = row * head_dim..(row + 1) * head_dim;
                for (cache, new) in [(&mut self.keys, key), (&mut self.values, value)] {
                    for (head, new) in cache.iter_mut().zip(new.chunks_exact(head_dim)) {
                        if head.len() < at.end {
                            head.resize(at.end, 0.0);
                        }
                        head[at.clone()].copy_from_slice(new);
                    }
                }
            }
        }
    }

    /// The first row of `positions`: in a ring, its slot (at most its slots are consecutive).
    fn first_row(&self, ring: Option<WindowRing>, positions: &Range<usize>) -> usize {
        match ring.filter(|_| self.ring) {
            Some(ring) => {
                debug_assert!(positions.len() <= ring.slots());
                ring.slot(positions.start)
            }
            None => positions.start,
        }
    }

    /// The rows of `positions`, consecutive, as the attention reads them; in a ring, at most its
    /// slots.
    fn read(&self, head_dim: usize, ring: Option<WindowRing>, positions: Range<usize>) -> KvRows<'_> {
        let first = self.first_row(ring, &positions);
        let rows = first * head_dim..(first + positions.len()) * head_dim;
        KvRows {
            keys: self.keys.iter().map(|head| &head[rows.clone()]).collect(),
            values: self.values.iter().map(|head| &head[rows.clone()]).collect(),
            stride: head_dim,
        }
    }

    /// The rows of `positions` (in a ring, at most its slots) into `keys` and `values` as `[positions,
    /// kv_heads · head_dim]`, each position's heads side by side (what [`write`](Self::write) takes).
    fn copy_into(
        &self,
        head_dim: usize,
        ring: Option<WindowRing>,
        positions: Range<usize>,
        keys: &mut Vec<f32>,
        values: &mut Vec<f32>,
    ) {
        let first = self.first_row(ring, &positions);
        for (cache, out) in [(&self.keys, keys), (&self.values, values)] {
            out.clear();
            for row in first..first + positions.len() {
                for head in cache {
                    out.extend_from_slice(&head[row * head_dim..(row + 1) * head_dim]);
                }
            }
        }
    }
}

/// The most rows a local block's ring holds here: twice its slots ([`BlockRows`]).
pub(crate) fn ring_rows(ring: WindowRing) -> usize {
    2 * ring.slots()
}

/// What the CPU engine's cache of rows holds at `positions` positions, from the configuration
/// alone: the bytes each position adds (the global blocks' rows), and the bytes that stop
/// growing past the ring (the local blocks' rings, twice their slots at most, and the window
/// each kept checkpoint copies).
pub(crate) fn planned_rows(config: &ModelConfig, positions: usize) -> (u64, u64) {
    let row = config.kv_position_bytes();
    let local = config.ring_blocks() as u64;
    let global = config.attention_blocks() as u64 - local;
    let rings = config.window_ring().map_or(0, |ring| {
        let rows = positions.min(ring_rows(ring)) + MAX_CHECKPOINTS * ring.window_before(positions).len();
        local * rows as u64 * row
    });
    (global * row, rings)
}

/// A checkpoint at `position` of `states` and of each local block's window before it, in
/// `reuse`'s memory when there is one.
fn snapshot(
    rows: &[BlockRows],
    head_dim: usize,
    ring: Option<WindowRing>,
    states: &[RecurrentState],
    position: usize,
    reuse: Option<CpuSnapshot>,
) -> CpuSnapshot {
    let mut saved = reuse.unwrap_or_default();
    if saved.states.len() == states.len() {
        saved.states.clone_from_slice(states);
    } else {
        saved.states = states.to_vec();
    }
    let mut old = std::mem::take(&mut saved.windows).into_iter();
    for rows in rows.iter().filter(|rows| rows.ring) {
        let ring = ring.expect("a cache with local blocks has their ring");
        let (mut saved_keys, mut saved_values) = old.next().unwrap_or_default();
        rows.copy_into(head_dim, Some(ring), ring.window_before(position), &mut saved_keys, &mut saved_values);
        saved.windows.push((saved_keys, saved_values));
    }
    saved
}

impl CpuModel {
    /// Copies the weights of `file` in their blocks (vectors as f32).
    pub(crate) fn load(
        file: &GgufFile,
        config: &ModelConfig,
        progress: impl FnMut(LoadProgress),
    ) -> Result<Self, ModelError> {
        // Every tensor's type and shape, before anything is copied.
        weights::check_dequantizable(file, config)?;
        for (_, _, info) in weights::tensors(file, config)? {
            let (rows, cols) = info.matrix_shape();
            Matrix::new(info.ggml_type, file.tensor_bytes(info), rows, cols)
                .map_err(|reason| ModelError::Unsupported(format!("tensor '{}': {reason}", info.name)))?;
        }
        let weights = weights::load(file, config, progress, |role, info| load(file, role, info))?;
        Ok(Self {
            config: config.clone(),
            architecture: config.architecture(),
            weights,
            rope: RopeTables::new(file, config)?,
        })
    }

    pub(crate) fn weight_bytes(&self) -> u64 {
        self.weights.all().map(CpuWeight::bytes).sum()
    }

    /// Bytes of the matrices read where they lie in the file.
    pub(crate) fn in_file_bytes(&self) -> u64 {
        let in_file = |w: &CpuWeight| matches!(w, CpuWeight::Blocks { bytes, .. } if !bytes.is_copy());
        self.weights.all().filter(|w| in_file(w)).map(CpuWeight::bytes).sum()
    }

    pub(crate) fn new_cache(&self) -> CpuCache {
        let blocks = self.config.block_count;
        let states = match &self.config.delta_net {
            Some(delta) => {
                let recurrent = blocks - self.config.attention_blocks();
                vec![RecurrentState::zeros(delta.conv_state_len(), delta.delta_state_len()); recurrent]
            }
            None => Vec::new(),
        };
        let c = &self.config;
        let rows = (0..blocks).map(|block| BlockRows::new(c.head_count_kv, c.block_ring(block).is_some())).collect();
        CpuCache { rows, head_dim: c.head_dim, ring: c.window_ring(), states, checkpoints: Checkpoints::default() }
    }

    /// Runs `tokens` at positions `start..` after what `cache` holds and returns the logits of
    /// the last row or of every row. The caller has checked the tokens and the room.
    /// `after_block(n)` is called as the pass's first `n` blocks are done.
    pub(crate) fn forward(
        &self,
        tokens: &[u32],
        cache: &mut CpuCache,
        start: usize,
        logits: Logits,
        after_block: &mut dyn FnMut(usize),
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        let x = self.blocks(tokens, cache, start, Taps { after_block: Some(after_block), ..Taps::default() })?;
        let rows = match logits {
            Logits::Last => &x[(tokens.len() - 1) * self.config.embedding_length..],
            Logits::All => &x[..],
        };
        Ok(self.head(rows))
    }

    /// Runs `tokens` into `cache` without the output layer (no logits wanted), calling
    /// `after_block` as [`Self::forward`] does.
    pub(crate) fn advance(
        &self,
        tokens: &[u32],
        cache: &mut CpuCache,
        start: usize,
        after_block: &mut dyn FnMut(usize),
    ) -> Result<(), ModelError> {
        self.blocks(tokens, cache, start, Taps { after_block: Some(after_block), ..Taps::default() }).map(drop)
    }

    /// The logit lens of the last of `tokens`: the residual after every block and the whole rows
    /// the output norm and layer make of each, its `candidates` top tokens followed.
    pub(crate) fn logit_lens(
        &self,
        tokens: &[u32],
        cache: &mut CpuCache,
        start: usize,
        candidates: usize,
    ) -> Result<LogitLens, ModelError> {
        let mut hidden = Vec::with_capacity(self.config.block_count);
        self.blocks(tokens, cache, start, Taps { lens: Some(&mut hidden), ..Taps::default() })?;
        // One product over every block's row: the output layer is read once.
        let rows = self.head(&hidden.concat());
        // The rows are in memory already: nothing is read back.
        Ok(LogitLens { bytes_read: 0, ..LogitLens::from_rows(hidden, &rows, candidates) })
    }

    /// Runs `tokens` after what `cache` holds, as [`Self::forward`] does (without the output
    /// layer), and returns what block `block`'s attention weighs each key by for the query
    /// positions `rows`: head `head`'s weights, or the mean over every head.
    pub(crate) fn attention_weights(
        &self,
        tokens: &[u32],
        cache: &mut CpuCache,
        start: usize,
        block: usize,
        head: Option<usize>,
        rows: Range<usize>,
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        let mut tap = AttentionTap { block, head, rows, weights: Vec::new() };
        self.blocks(tokens, cache, start, Taps { attention: Some(&mut tap), ..Taps::default() })?;
        Ok(tap.weights)
    }

    /// The output norm and layer of rows `x` (`[n, dim]`): `n` rows of logits.
    fn head(&self, x: &[f32]) -> Vec<Vec<f32>> {
        let c = &self.config;
        let mut normed = vec![0.0; x.len()];
        self.norm(x, &self.weights.output_norm, &mut normed);
        let vocab = c.vocab_size;
        let mut logits = vec![0.0; x.len() / c.embedding_length * vocab];
        matmul(&self.weights.output().matrix(), &normed, &mut logits, false);
        if logits.len() == vocab {
            // A decode step's one row, as it is.
            return vec![logits];
        }
        logits.chunks_exact(vocab).map(<[f32]>::to_vec).collect()
    }

    /// The embedding and every block for `tokens`; the residual stream `[seq, dim]` after the last,
    /// with `taps.lens` the last row after each, with `taps.attention` its block's weights.
    fn blocks(
        &self,
        tokens: &[u32],
        cache: &mut CpuCache,
        start: usize,
        taps: Taps<'_>,
    ) -> Result<Vec<f32>, ModelError> {
        let Taps { mut lens, attention: mut tap, mut after_block } = taps;
        let c = &self.config;
        let spec = self.architecture.block;
        let (seq, d) = (tokens.len(), c.embedding_length);
        let embedding = self.weights.token_embedding.matrix();
        let scale = c.embedding_scale();
        let mut x = vec![0.0; seq * d];
        for (&id, row) in tokens.iter().zip(x.chunks_exact_mut(d)) {
            embedding.dequantize_row(id as usize, row);
            if scale != 1.0 {
                row.iter_mut().for_each(|v| *v *= scale);
            }
        }
        let mut h = vec![0.0; seq * d];
        let mut projected = vec![0.0; seq * d];
        let (hidden, ffn) = (c.feed_forward_length, seq * c.feed_forward_length);
        let (mut gate, mut up) = (vec![0.0; ffn], vec![0.0; ffn]);
        if seq > 1 {
            cache.checkpoint_for_rollback(start);
        }
        // The pass's RoPE rows, `[seq, rope_dims / 2]` per table.
        let rope = self.rope.every_table(start..start + seq);
        let mut recurrent_index = 0;
        for (index, block) in self.weights.blocks.iter().enumerate() {
            self.norm(&x, &block.attention_norm, &mut h);
            match &block.mixer {
                MixerWeights::Attention(weights) => {
                    let tap = tap.as_deref_mut().filter(|tap| tap.block == index);
                    let positions = Positions { start, rope: &rope[self.rope.block_table[index]] };
                    let attended = self.attention(&h, weights, index, cache, positions, tap)?;
                    matmul(&weights.output.matrix(), &attended, &mut projected, false);
                }
                MixerWeights::GatedDeltaNet(weights) => {
                    let state = &mut cache.states[recurrent_index];
                    recurrent_index += 1;
                    let mixed = self.gated_delta_net(&h, weights, state);
                    matmul(&weights.output.matrix(), &mixed, &mut projected, false);
                }
            }
            self.add_sublayer(&mut x, &mut projected, block.post_attention_norm.as_ref());

            self.norm(&x, &block.feed_forward_norm, &mut h);
            matmuls(&h, &mut [(&block.gate.matrix(), &mut gate), (&block.up.matrix(), &mut up)], false);
            match spec.feed_forward {
                FeedForward::SwiGlu => elementwise::swiglu(&mut gate, &up),
                FeedForward::GeGluTanh => elementwise::geglu_tanh(&mut gate, &up),
            }
            debug_assert_eq!(gate.len(), seq * hidden);
            matmul(&block.down.matrix(), &gate, &mut projected, false);
            self.add_sublayer(&mut x, &mut projected, block.post_feed_forward_norm.as_ref());
            if let Some(rows) = lens.as_deref_mut() {
                rows.push(x[(seq - 1) * d..].to_vec());
            }
            if let Some(report) = after_block.as_deref_mut() {
                report(index + 1);
            }
        }
        if let Some(ring) = &mut cache.ring {
            ring.wrote_up_to(start + seq);
        }
        Ok(x)
    }

    /// `x += y`, through the norm after the sub-layer when the family has one.
    fn add_sublayer(&self, x: &mut [f32], y: &mut [f32], post_norm: Option<&CpuWeight>) {
        if let Some(norm) = post_norm {
            let dim = self.config.embedding_length;
            for (x_row, y_row) in x.chunks_exact_mut(dim).zip(y.chunks_exact(dim)) {
                let inv = inverse_rms(y_row, self.config.rms_norm_eps);
                for ((x, &y), &g) in x_row.iter_mut().zip(y_row).zip(norm.vector()) {
                    *x += y * inv * g;
                }
            }
        } else {
            x.iter_mut().zip(y.iter()).for_each(|(x, &y)| *x += y);
        }
    }

    /// The Gated DeltaNet sub-layer for the normalised rows `h`, from and into `state`: the
    /// gated, normalised outputs of its value heads `[seq, value_dim]`, before the output
    /// projection. A prompt takes the chunked form of the delta rule, a decode step the
    /// recurrent one.
    fn gated_delta_net(&self, h: &[f32], weights: &DeltaNetWeights<CpuWeight>, state: &mut RecurrentState) -> Vec<f32> {
        let c = &self.config;
        let delta = c.delta_net.as_ref().expect("a Gated DeltaNet block has its shape");
        let seq = h.len() / c.embedding_length;
        let (channels, key_dim, value_dim, heads) =
            (delta.channels(), delta.key_dim(), delta.value_dim(), delta.value_heads);
        let (mut mixed, mut z) = (vec![0.0; seq * channels], vec![0.0; seq * value_dim]);
        let (mut beta, mut alpha) = (vec![0.0; seq * heads], vec![0.0; seq * heads]);
        matmuls(
            h,
            &mut [
                (&weights.qkv.matrix(), &mut mixed),
                (&weights.gate.matrix(), &mut z),
                (&weights.beta.matrix(), &mut beta),
                (&weights.alpha.matrix(), &mut alpha),
            ],
            false,
        );
        let mut convolved = vec![0.0; seq * channels];
        delta_net::conv_silu(&mixed, weights.conv.vector(), delta.conv_kernel, &mut state.conv, &mut convolved);
        // Split each position's channels into queries, keys and values, heads contiguous.
        let (mut q, mut k, mut v) = (vec![0.0; seq * key_dim], vec![0.0; seq * key_dim], vec![0.0; seq * value_dim]);
        for (t, row) in convolved.chunks_exact(channels).enumerate() {
            q[t * key_dim..(t + 1) * key_dim].copy_from_slice(&row[..key_dim]);
            k[t * key_dim..(t + 1) * key_dim].copy_from_slice(&row[key_dim..2 * key_dim]);
            v[t * value_dim..(t + 1) * value_dim].copy_from_slice(&row[2 * key_dim..]);
        }
        delta_net::l2_normalize(&mut q, delta.head_dim, c.rms_norm_eps);
        delta_net::l2_normalize(&mut k, delta.head_dim, c.rms_norm_eps);
        let scale = (1.0 / (delta.head_dim as f64).sqrt()) as f32;
        q.iter_mut().for_each(|x| *x *= scale);
        // β = sigmoid(β'); g = a · softplus(α + dt_bias), the log of the step's decay (≤ 0).
        beta.iter_mut().for_each(|b| *b = elementwise::sigmoid(*b));
        let (a, dt_bias) = (weights.a.vector(), weights.dt_bias.vector());
        for row in alpha.chunks_exact_mut(heads) {
            for ((g, &a), &bias) in row.iter_mut().zip(a).zip(dt_bias) {
                *g = a * delta_net::softplus(*g + bias);
            }
        }
        let inputs = DeltaInputs { q: &q, k: &k, v: &v, g: &alpha, beta: &beta };
        let shape = DeltaShape { key_heads: delta.key_heads, value_heads: heads, head_dim: delta.head_dim };
        let mut out = vec![0.0; seq * value_dim];
        if seq == 1 {
            delta_net::delta_rule_recurrent(inputs, shape, &mut state.matrices, &mut out);
        } else {
            delta_net::delta_rule_chunked(inputs, shape, &mut state.matrices, &mut out);
        }
        delta_net::gated_rms_norm(&mut out, &z, weights.norm.vector(), c.rms_norm_eps);
        out
    }

    /// The attention sub-layer of block `index` for the normalised rows `h`, its keys and values
    /// written into `cache` at `positions.start..`: the heads' outputs `[seq, q_dim]` (times the
    /// sigmoid of the output gate where the family has one).
    fn attention(
        &self,
        h: &[f32],
        block: &AttentionWeights<CpuWeight>,
        index: usize,
        cache: &mut CpuCache,
        positions: Positions,
        tap: Option<&mut AttentionTap>,
    ) -> Result<Vec<f32>, ModelError> {
        let Positions { start, rope: angles } = positions;
        let c = &self.config;
        let spec = self.architecture.block;
        let seq = h.len() / c.embedding_length;
        let (q_dim, kv_dim, hd) = (c.q_dim(), c.kv_dim(), c.head_dim);
        let (mut q, mut k, mut v) =
            (vec![0.0; seq * c.query_projection_dim()], vec![0.0; seq * kv_dim], vec![0.0; seq * kv_dim]);
        let (wq, wk, wv) = (block.query.matrix(), block.key.matrix(), block.value.matrix());
        matmuls(h, &mut [(&wq, &mut q), (&wk, &mut k), (&wv, &mut v)], false);
        // With an output gate, each head's query is followed by its gate: split them.
        let gate = spec.output_gate.then(|| {
            let mut gate = vec![0.0; seq * q_dim];
            let mut query = vec![0.0; seq * q_dim];
            for ((both, q), g) in q.chunks_exact(2 * hd).zip(query.chunks_exact_mut(hd)).zip(gate.chunks_exact_mut(hd))
            {
                q.copy_from_slice(&both[..hd]);
                g.copy_from_slice(&both[hd..]);
            }
            q = query;
            gate
        });
        for (out, bias) in [(&mut q, &block.query_bias), (&mut k, &block.key_bias), (&mut v, &block.value_bias)] {
            if let Some(bias) = bias {
                let width = out.len() / seq;
                for row in out.chunks_exact_mut(width) {
                    row.iter_mut().zip(bias.vector()).for_each(|(v, &b)| *v += b);
                }
            }
        }
        // RoPE turns the first `rope_dims` of each head (all but in Qwen3.5), the rest pass through.
        let (rotated, pairs) = (c.rope_dims, c.rope_dims / 2);
        for (values, norm) in [(&mut q, &block.query_norm), (&mut k, &block.key_norm)] {
            let width = values.len() / seq;
            for (s, row) in values.chunks_exact_mut(width).enumerate() {
                let angles = &angles[s * pairs..(s + 1) * pairs];
                for head in row.chunks_exact_mut(hd) {
                    if let Some(norm) = norm {
                        let inv = inverse_rms(head, c.rms_norm_eps);
                        head.iter_mut().zip(norm.vector()).for_each(|(v, &g)| *v *= inv * g);
                    }
                    for (i, &(cos, sin)) in angles.iter().enumerate() {
                        let (ia, ib) = spec.rope.pair(i, rotated);
                        let (a, b) = (head[ia], head[ib]);
                        head[ia] = a * cos - b * sin;
                        head[ib] = a * sin + b * cos;
                    }
                }
            }
        }
        // The keys and values the pass's queries see, consecutive from position `first` (the
        // first of the window before the pass in a local block, else 0): written, then read
        // where they lie; a pass longer than a ring's slack reads the window before it from the
        // ring and its own rows where they are, and the ring keeps its last rows.
        let (end, rows) = (start + seq, &mut cache.rows[index]);
        let ring = cache.ring.filter(|_| rows.ring);
        let first = ring.map_or(0, |ring| ring.window_before(start).start);
        let (mut gathered_keys, mut gathered_values) = (Vec::new(), Vec::new());
        let kv = match ring {
            Some(ring) if end - first > ring.slots() => {
                rows.copy_into(hd, Some(ring), first..start, &mut gathered_keys, &mut gathered_values);
                gathered_keys.extend_from_slice(&k);
                gathered_values.extend_from_slice(&v);
                let dropped = seq.saturating_sub(ring.slots());
                let (k, v) = (&k[dropped * kv_dim..], &v[dropped * kv_dim..]);
                rows.write(hd, Some(ring), start + dropped..end, k, v);
                KvRows::interleaved(&gathered_keys, &gathered_values, c.head_count_kv, hd)
            }
            _ => {
                rows.write(hd, ring, start..end, &k, &v);
                rows.read(hd, ring, first..end)
            }
        };
        let shape = AttentionShape {
            heads: c.head_count,
            kv_heads: c.head_count_kv,
            head_dim: hd,
            scale: (1.0 / (hd as f64).sqrt()) as f32,
            window: c.block_attention(index).window,
        };
        if let Some(tap) = tap {
            // The rows asked that this pass holds, as rows of the pass.
            let local = tap.rows.start.max(start) - start..tap.rows.end.min(start + seq).max(start) - start;
            // Positions count from `first` (attention depends on the distance alone): each row's
            // weights of the positions before it are zeros.
            let rows = attention_weights(&q, &kv, start - first, shape, local, tap.head);
            tap.weights.extend(rows.into_iter().map(|row| [vec![0.0; first], row].concat()));
        }
        let mut out = vec![0.0; seq * q_dim];
        attention(&q, &kv, start - first, shape, &mut out);
        if let Some(gate) = gate {
            out.iter_mut().zip(&gate).for_each(|(o, &g)| *o *= elementwise::sigmoid(g));
        }
        Ok(out)
    }

    fn norm(&self, x: &[f32], weight: &CpuWeight, out: &mut [f32]) {
        match self.architecture.block.norm {
            Norm::Rms => rms_norm(x, weight.vector(), self.config.rms_norm_eps, out),
        }
    }
}

/// One tensor as the CPU engine holds it: a matrix in its blocks, a vector (and the Gated
/// DeltaNet's small convolution) in f32.
/// What a pass keeps besides its output.
#[derive(Default)]
struct Taps<'a> {
    /// The last row of the residual stream after every block (the logit lens).
    lens: Option<&'a mut Vec<Vec<f32>>>,
    /// One block's attention weights.
    attention: Option<&'a mut AttentionTap>,
    /// Called with the number of blocks done after each (a prefill's progress).
    after_block: Option<&'a mut dyn FnMut(usize)>,
}

/// An attention read ([`CpuModel::attention_weights`]): block `block`'s weights for the query
/// positions `rows`, one head's or (`None`) the mean of every head's, gathered in `weights`.
struct AttentionTap {
    block: usize,
    head: Option<usize>,
    rows: Range<usize>,
    weights: Vec<Vec<f32>>,
}

fn load(file: &GgufFile, role: Role, info: &TensorInfo) -> Result<CpuWeight, ModelError> {
    let (rows, cols) = info.matrix_shape();
    if role == Role::DeltaConv {
        // `[channels, kernel]` in the file (dims `[kernel, channels]`, checked by the weight
        // table), `[kernel, channels]` as the convolution reads it.
        let taps = delta_net::conv_taps(&file.dequantize(&info.name)?, info.dims[0] as usize);
        return Ok(CpuWeight::Vector(taps));
    }
    if info.dims.len() == 1 {
        return Ok(CpuWeight::Vector(file.dequantize(&info.name)?));
    }
    Ok(CpuWeight::Blocks { ggml_type: info.ggml_type, bytes: file.shared_tensor_bytes(info), rows, cols })
}
