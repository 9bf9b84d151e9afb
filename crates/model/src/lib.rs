//! A language model of one of the supported families (Llama, Qwen2, Qwen3, Gemma 3) on Burn,
//! built from the bytes of a GGUF file.
//!
//! The crate does no I/O and never blocks on the device: [`Model::forward`] records work and
//! returns the logits still on the device ([`DeviceLogits`]); reading them, whole or through the
//! decode tail, is asynchronous, so the same code runs in the browser, where synchronous reads
//! panic.
//!
//! Three paths compute the same forward pass ([`Path`]):
//! - **fused** (wgpu devices): our WGSL kernels over the weights as GGUF stores them, a few
//!   dispatches per block, one queue submission per decode step (`fused.rs`);
//! - **CPU** (no GPU, [`ModelDevice::cpu`]): `nucleus-cpu`'s kernels over the same blocks, in
//!   this process's memory, vectorised and threaded natively (`cpu.rs`): the engine for every
//!   visitor without a usable GPU;
//! - **Burn operations** (any Burn device): Burn tensor operations over f32 weights, the
//!   reference the fused path is checked against and the path of the CPU backend (`burn_ops.rs`).
//!   Behind the `burn-ops` feature (on for the CLI and the tests, off in the browser build, which
//!   then carries no Burn tensor operation); without it, loading on this path is refused by name.
//!
//! All take their tensors from one weight table (`weights.rs`), their RoPE angles from one set of
//! tables (`rope.rs`), and ask one [`BlockSpec`] what a block computes (`architecture.rs`), so
//! another family is a new [`Architecture`] value and, for a variant no path computes yet, its
//! computation in each path: not a new loop.

mod architecture;
mod attention;
#[cfg(feature = "burn-ops")]
mod burn_ops;
mod config;
mod cpu;
mod device;
#[cfg(feature = "gpu")]
mod fused;
mod host_plan;
#[cfg(feature = "gpu")]
mod memory;
#[cfg(feature = "gpu")]
mod part_writer;
mod rope;
mod state;
#[cfg(feature = "gpu")]
mod stream;
mod weights;
mod window;

#[cfg(feature = "burn-ops")]
use burn::tensor::Tensor;
use nucleus_gguf::{GgufError, GgufFile, TensorInfo};
use nucleus_kernels::{KernelError, RawRow, TailOutput, TailRequest};

pub use architecture::{
    ARCHITECTURES, Architecture, BlockSpec, FeedForward, GEMMA3, LLAMA, Mixer, Norm, QWEN2, QWEN3, QWEN35, Role, Rope,
    SlidingWindow,
};
pub use attention::{AttentionHeads, AttentionMap, MAX_ATTENTION_ROWS};
pub use config::{BlockAttention, DeltaNetConfig, ModelConfig};
pub use device::ModelDevice;
#[cfg(feature = "gpu")]
pub use fused::{FusedLogits, MAX_ROWS, streamed_staging_bytes};
pub use host_plan::{HostPlan, WASM32_MEMORY_BYTES};
#[cfg(feature = "gpu")]
pub use memory::{MemoryLimits, MemoryPlan, PlannedBuffer};
pub use nucleus_kernels::{LinearKernel, MAX_SCORE_TOP_K, RowScore, TargetScore};
pub use rope::{RopeFrequencies, RopeScaling, Yarn};
pub use state::MAX_CHECKPOINTS;
#[cfg(feature = "gpu")]
pub use stream::ModelStream;
pub use weights::{parameter_count, vocabulary_parts};
pub use window::{RING_SLACK, WindowRing};

#[cfg(feature = "burn-ops")]
use burn_ops::{BurnCache, BurnModel};
use cpu::{CpuCache, CpuModel};
#[cfg(feature = "gpu")]
use fused::{FusedCache, FusedModel};

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("unsupported architecture '{0}' (supported: {supported})", supported = supported_architectures())]
    UnsupportedArchitecture(String),
    #[error("unsupported model feature: {0}")]
    Unsupported(String),
    #[error("invalid model: {0}")]
    Invalid(String),
    #[error("tensor '{name}' has shape {found:?}, expected {expected:?}")]
    WrongShape { name: String, expected: Vec<u64>, found: Vec<u64> },
    #[error("the sequence needs {needed} positions but the context holds {capacity}")]
    ContextOverflow { needed: usize, capacity: usize },
    #[error("token id {id} is outside the vocabulary of {vocab_size}")]
    TokenOutOfRange { id: u32, vocab_size: usize },
    #[error("no tokens to run")]
    EmptyInput,
    /// A buffer larger than the device allows, or more than the memory budget, found before
    /// anything was uploaded ([`MemoryPlan::check`]).
    #[error("{0}")]
    OutOfMemory(String),
    #[error("device: {0}")]
    Device(String),
    /// A path this build does not carry (the Burn-op path without the `burn-ops` feature).
    #[error("{0}")]
    NotInThisBuild(String),
    #[error(transparent)]
    Kernel(#[from] KernelError),
}

fn supported_architectures() -> String {
    ARCHITECTURES.iter().map(|a| a.name).collect::<Vec<_>>().join(", ")
}

/// Most rows of logits one pass computes ([`Logits::All`]: verification of drafted tokens): the
/// fused path's limit, which every path keeps so that a generation runs the same everywhere.
pub const MAX_LOGIT_ROWS: usize = 16;

/// Which positions of a forward pass produce logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// Only the last position: `[1, vocab]` (prefill and decode).
    Last,
    /// Every position: `[S, vocab]` (verification of drafted tokens, tests; on the fused path
    /// at most [`MAX_LOGIT_ROWS`] positions).
    All,
}

/// How a model's forward pass runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// Our WGSL kernels over the quantized weights (wgpu devices).
    Fused,
    /// Our CPU kernels over the quantized weights ([`ModelDevice::cpu`]).
    Cpu,
    /// Burn tensor operations over f32 weights, the linear layers in this kernel.
    BurnOps(LinearKernel),
}

impl Path {
    /// The CPU engine on its device; the fused path on a wgpu device when its kernels take the
    /// model's shapes; Burn's operations (and its matmul) elsewhere, and for a model the fused
    /// kernels cannot run.
    pub fn default_for(device: &ModelDevice, config: &ModelConfig) -> Self {
        #[cfg(feature = "gpu")]
        if !device.is_cpu_engine() {
            return if device.gpu().is_some() && fused::check_dims(config).is_ok() {
                Path::Fused
            } else {
                Path::BurnOps(LinearKernel::BurnMatmul)
            };
        }
        let _ = (device, config);
        Path::Cpu
    }

    /// `"fused"`, `"cpu"`, `"burn-matmul"` or `"burn-wgsl"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Path::Fused => "fused",
            Path::Cpu => "cpu",
            Path::BurnOps(LinearKernel::BurnMatmul) => "burn-matmul",
            Path::BurnOps(LinearKernel::Wgsl) => "burn-wgsl",
        }
    }
}

/// Progress of [`Model::load`]: tensors uploaded so far, and their bytes in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadProgress {
    pub tensors_done: usize,
    pub tensors_total: usize,
    pub bytes_done: u64,
    pub bytes_total: u64,
}

impl LoadProgress {
    /// Nothing done yet of `tensors`.
    pub fn of<'a>(tensors: impl IntoIterator<Item = &'a TensorInfo>) -> Self {
        let mut progress = Self { tensors_done: 0, tensors_total: 0, bytes_done: 0, bytes_total: 0 };
        for tensor in tensors {
            progress.tensors_total += 1;
            progress.bytes_total += tensor.byte_len();
        }
        progress
    }

    /// `tensor` done too.
    pub fn add(&mut self, tensor: &TensorInfo) {
        self.tensors_done += 1;
        self.bytes_done += tensor.byte_len();
    }
}

enum Route {
    /// Boxed: the Burn module tree is large and this is the fallback path.
    #[cfg(feature = "burn-ops")]
    Burn(Box<BurnModel>),
    #[cfg(feature = "gpu")]
    Fused(FusedModel),
    /// Boxed: its weight table is held inline, where the others hold handles.
    Cpu(Box<CpuModel>),
}

/// A loaded model on one device.
pub struct Model {
    config: ModelConfig,
    device: ModelDevice,
    tied_output: bool,
    route: Route,
}

/// What a sliding-window model's local blocks keep ([`Model::kv_window`]): each token takes
/// `bytes_per_token` in their rings (keys and values, every local block together) until they
/// hold `rows` positions; later tokens overwrite the oldest rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct KvWindow {
    pub rows: usize,
    pub bytes_per_token: u64,
}

/// Keys and values of every block for the positions seen so far.
pub struct KvCache {
    inner: CacheKind,
    len: usize,
    capacity: usize,
}

enum CacheKind {
    #[cfg(feature = "burn-ops")]
    Burn(BurnCache),
    #[cfg(feature = "gpu")]
    Fused(FusedCache),
    Cpu(CpuCache),
}

impl KvCache {
    /// Positions filled.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions it can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets every position (the memory stays allocated; a recurrent state goes back to zeros).
    pub fn clear(&mut self) {
        self.len = 0;
        match &mut self.inner {
            CacheKind::Cpu(cache) => cache.clear(),
            #[cfg(feature = "gpu")]
            CacheKind::Fused(cache) => cache.clear(),
            #[allow(unreachable_patterns)]
            _ => {}
        }
    }

    /// Forgets positions from `len` on, so generation can go back (a rejected draft, a shared
    /// prefix), and returns the positions it holds after: `len` (or fewer, when it held fewer)
    /// for a cache of rows (or a ring of a window that still holds the rows before `len`); for a
    /// model with recurrent blocks, whose state cannot forget, or a ring that has dropped those
    /// rows, the position of the latest checkpoint at or before `len` (`state.rs`), from which
    /// the caller runs the tokens up to `len` again.
    #[must_use = "a recurrent cache may go back further than asked: run the tokens in between again"]
    pub fn truncate(&mut self, len: usize) -> usize {
        self.len = match &mut self.inner {
            CacheKind::Cpu(cache) => cache.go_back(len, self.len),
            #[cfg(feature = "gpu")]
            CacheKind::Fused(cache) => cache.go_back(len, self.len),
            #[allow(unreachable_patterns)] // The CPU engine alone (the threaded browser build).
            _ => self.len.min(len),
        };
        self.len
    }

    /// Whether going back may restore a checkpoint ([`KvCache::truncate`]), so that the engine
    /// keeps them where a later prompt is likely to go back: the cache holds a recurrent state
    /// (Qwen3.5's Gated DeltaNet blocks), or the local blocks keep a ring of their
    /// window (Gemma 3), which drops rows.
    pub fn needs_checkpoints(&self) -> bool {
        match &self.inner {
            CacheKind::Cpu(cache) => cache.needs_checkpoints(),
            #[cfg(feature = "gpu")]
            CacheKind::Fused(cache) => cache.needs_checkpoints(),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Bytes of the recurrent blocks' live state (fixed, whatever the context; 0 without such blocks).
    pub fn recurrent_state_bytes(&self) -> u64 {
        match &self.inner {
            CacheKind::Cpu(cache) => cache.state_bytes(),
            #[cfg(feature = "gpu")]
            CacheKind::Fused(cache) => cache.state_bytes(),
            #[allow(unreachable_patterns)]
            _ => 0,
        }
    }

    /// Keeps a copy of what cannot go back as it is now (the recurrent state, a ring's window),
    /// to come back to ([`KvCache::truncate`]; nothing for a cache of rows alone). Passes of
    /// several tokens on a recurrent cache keep one before they run.
    pub fn checkpoint(&mut self) {
        match &mut self.inner {
            CacheKind::Cpu(cache) => cache.checkpoint(self.len),
            #[cfg(feature = "gpu")]
            CacheKind::Fused(cache) => cache.checkpoint(self.len),
            #[allow(unreachable_patterns)]
            _ => {}
        }
    }

    /// The positions kept to go back to (their recurrent state, their window's rows), oldest
    /// first, and their bytes.
    pub fn checkpoints(&self) -> (Vec<usize>, u64) {
        match &self.inner {
            CacheKind::Cpu(cache) => (cache.checkpoints().positions(), cache.checkpoints().bytes()),
            #[cfg(feature = "gpu")]
            CacheKind::Fused(cache) => cache.checkpoints(),
            #[allow(unreachable_patterns)]
            _ => (Vec::new(), 0),
        }
    }

    /// Bytes it holds on the device now (the fused and CPU caches grow as positions are used;
    /// the Burn cache is allocated whole).
    pub fn device_bytes(&self) -> u64 {
        match &self.inner {
            #[cfg(feature = "gpu")]
            CacheKind::Fused(cache) => cache.bytes(),
            CacheKind::Cpu(cache) => cache.bytes(),
            #[cfg(feature = "burn-ops")]
            CacheKind::Burn(cache) => cache.bytes(),
        }
    }

    /// An independent copy (beam search keeps one per beam). Cheap on the Burn path (the first
    /// write copies); a GPU copy of the filled positions on the fused path; a memory copy on the
    /// CPU path, recurrent state included but not its checkpoints (the copy goes on from here).
    pub fn try_clone(&self) -> Result<KvCache, ModelError> {
        let inner = match &self.inner {
            #[cfg(feature = "burn-ops")]
            CacheKind::Burn(cache) => CacheKind::Burn(cache.clone()),
            #[cfg(feature = "gpu")]
            CacheKind::Fused(cache) => CacheKind::Fused(cache.duplicate(self.len)?),
            CacheKind::Cpu(cache) => CacheKind::Cpu(cache.duplicate()),
        };
        Ok(KvCache { inner, len: self.len, capacity: self.capacity })
    }
}

/// Logits on the device, as [`Model::forward`] leaves them.
pub enum DeviceLogits {
    /// A Burn tensor `[rows, vocab]` (the Burn-op path; boxed, a Burn tensor is large).
    #[cfg(feature = "burn-ops")]
    Tensor(Box<Tensor<2>>),
    /// Rows of the fused path's logits buffer.
    #[cfg(feature = "gpu")]
    Fused(FusedLogits),
    /// Rows in memory (the CPU path): already computed, nothing to wait for.
    Host(Vec<Vec<f32>>),
}

impl DeviceLogits {
    /// Rows of logits.
    pub fn rows(&self) -> usize {
        match self {
            #[cfg(feature = "burn-ops")]
            DeviceLogits::Tensor(tensor) => tensor.dims()[0],
            #[cfg(feature = "gpu")]
            DeviceLogits::Fused(logits) => logits.rows(),
            DeviceLogits::Host(rows) => rows.len(),
        }
    }

    /// Waits until the pass that made these logits has run on the device (nothing is read but,
    /// on the Burn path, one value).
    pub async fn wait(&self) -> Result<(), ModelError> {
        match self {
            #[cfg(feature = "burn-ops")]
            DeviceLogits::Tensor(tensor) => {
                read_tensor((**tensor).clone().slice([0..1, 0..1])).await?;
                Ok(())
            }
            #[cfg(feature = "gpu")]
            DeviceLogits::Fused(logits) => logits.wait().await,
            DeviceLogits::Host(_) => Ok(()),
        }
    }

    /// Whether the rows are in memory already (the CPU engine's): reading them moves nothing
    /// from a device.
    pub fn in_memory(&self) -> bool {
        matches!(self, DeviceLogits::Host(_))
    }

    /// Every row, read back whole, the logits given up: rows in memory already are handed over
    /// as they are (no copy of a 1 MB row per step), the others read as [`DeviceLogits::read`].
    pub async fn into_rows(self) -> Result<Vec<Vec<f32>>, ModelError> {
        match self {
            DeviceLogits::Host(rows) => Ok(rows),
            #[allow(unreachable_patterns)] // The CPU engine alone (the threaded browser build).
            device => device.read().await,
        }
    }

    /// Every row, read back whole.
    pub async fn read(&self) -> Result<Vec<Vec<f32>>, ModelError> {
        match self {
            #[cfg(feature = "burn-ops")]
            DeviceLogits::Tensor(tensor) => read_tensor((**tensor).clone()).await,
            #[cfg(feature = "gpu")]
            DeviceLogits::Fused(logits) => logits.read().await,
            DeviceLogits::Host(rows) => Ok(rows.clone()),
        }
    }

    /// The decode tail on the (one) row: adjustments, softmax statistics at `request.temperature`
    /// and the top `request.k`, and with `raw_top_k` the raw row's statistics (and top list), in
    /// one read. The row itself is left as the model made it, for a full read after. A GPU
    /// step: refused for logits already in memory ([`Model::supports_decode_tail`]).
    pub async fn decode_tail(&self, request: &TailRequest<'_>) -> Result<(TailOutput, Option<RawRow>), ModelError> {
        match self {
            #[cfg(feature = "gpu")]
            DeviceLogits::Fused(logits) => logits.decode_tail(request).await,
            DeviceLogits::Host(_) => {
                let _ = request;
                Err(ModelError::Device("the decode tail runs on a GPU; these logits are in memory already".into()))
            }
            #[cfg(feature = "burn-ops")]
            DeviceLogits::Tensor(tensor) => Ok(match request.raw_top_k {
                None => {
                    let tail = nucleus_kernels::decode_tail(
                        (**tensor).clone(),
                        request.adjustments,
                        request.temperature,
                        request.k,
                    )
                    .await?;
                    (tail, None)
                }
                Some(raw_top_k) => {
                    let (tail, raw) = nucleus_kernels::decode_tail_with_raw(
                        (**tensor).clone(),
                        request.adjustments,
                        request.temperature,
                        request.k,
                        raw_top_k,
                    )
                    .await?;
                    (tail, Some(raw))
                }
            }),
        }
    }
}

#[cfg(feature = "burn-ops")]
async fn read_tensor(logits: Tensor<2>) -> Result<Vec<Vec<f32>>, ModelError> {
    let [rows, cols] = logits.dims();
    let data = logits.into_data_async().await.map_err(|e| ModelError::Device(format!("{e:?}")))?;
    let values = data.as_slice::<f32>().map_err(|e| ModelError::Device(format!("{e:?}")))?;
    Ok((0..rows).map(|r| values[r * cols..(r + 1) * cols].to_vec()).collect())
}

/// Bytes a model holds on its device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelMemory {
    /// The weights as uploaded (GGUF blocks on the fused and CPU paths, f32 on the Burn path).
    pub weight_bytes: u64,
    /// Of those, the bytes read where they lie in the file (the CPU engine's matrices from a
    /// file parsed shared, [`GgufFile::parse_shared`]): memory the model does not hold apart
    /// from the file's.
    pub in_file_bytes: u64,
}

impl Model {
    /// Uploads the weights of `file` to `device` for `path`.
    pub fn load(file: &GgufFile, device: &ModelDevice, path: Path) -> Result<Self, ModelError> {
        Self::load_with_progress(file, device, path, |_| {})
    }

    /// As [`Model::load`], calling `progress` after each tensor.
    pub fn load_with_progress(
        file: &GgufFile,
        device: &ModelDevice,
        path: Path,
        progress: impl FnMut(LoadProgress),
    ) -> Result<Self, ModelError> {
        Self::load_parsed(file, ModelConfig::from_gguf(file)?, device, path, progress)
    }

    /// As [`Model::load_with_progress`], with the file's config already read.
    pub fn load_parsed(
        file: &GgufFile,
        config: ModelConfig,
        device: &ModelDevice,
        path: Path,
        progress: impl FnMut(LoadProgress),
    ) -> Result<Self, ModelError> {
        let tied_output = weights::tied_output(file);
        let route = match path {
            #[cfg(feature = "gpu")]
            Path::Fused => {
                let gpu = device.gpu().ok_or_else(|| {
                    ModelError::Device(format!("the fused path runs on wgpu devices, not {}", device.describe()))
                })?;
                Route::Fused(FusedModel::load(file, &config, gpu, progress)?)
            }
            Path::Cpu => {
                if !device.is_cpu_engine() {
                    return Err(ModelError::Device(format!(
                        "the CPU path runs on ModelDevice::cpu(), not {}",
                        device.describe()
                    )));
                }
                Route::Cpu(Box::new(CpuModel::load(file, &config, progress)?))
            }
            #[cfg(feature = "burn-ops")]
            Path::BurnOps(kernel) => {
                weights::check_dequantizable(file, &config)?;
                let max_binding = device.gpu().map(|gpu| {
                    let limits = gpu.limits();
                    limits.max_storage_buffer_binding_size.min(limits.max_buffer_size)
                });
                let burn = device.burn().ok_or_else(|| {
                    ModelError::Device("the Burn-op path runs on a Burn device, not the CPU engine's".into())
                })?;
                Route::Burn(Box::new(BurnModel::load(file, &config, burn, max_binding, kernel, progress)?))
            }
            #[cfg(all(feature = "gpu", not(feature = "burn-ops")))]
            Path::BurnOps(_) => {
                let why = fused::check_dims(&config).err().map_or_else(|| "path burn".to_string(), |e| e.to_string());
                return Err(ModelError::NotInThisBuild(if config.delta_net.is_some() {
                    // No GPU path computes it: the CPU engine is the one that does.
                    format!("on a GPU, this build runs models in its fused kernels only: {why}")
                } else {
                    format!(
                        "this build runs the model only in its fused kernels, which cannot take this model ({why}); \
                         the Burn-op path that could is not in this build (the browser's)"
                    )
                }));
            }
            #[cfg(not(feature = "gpu"))]
            Path::Fused | Path::BurnOps(_) => {
                return Err(ModelError::NotInThisBuild(format!(
                    "the {} path runs on a GPU, and this build (the browser's threaded CPU engine) has none",
                    path.as_str()
                )));
            }
        };
        Ok(Self { config, device: device.clone(), tied_output, route })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn device(&self) -> &ModelDevice {
        &self.device
    }

    /// The path this model's forward pass takes.
    pub fn path(&self) -> Path {
        match &self.route {
            #[cfg(feature = "gpu")]
            Route::Fused(_) => Path::Fused,
            Route::Cpu(_) => Path::Cpu,
            #[cfg(feature = "burn-ops")]
            Route::Burn(model) => Path::BurnOps(model.linear_kernel()),
        }
    }

    /// Whether [`DeviceLogits::decode_tail`] can end this model's decode steps: logits left on a
    /// device whose Burn backend runs the tail's kernels.
    pub fn supports_decode_tail(&self) -> bool {
        #[cfg(feature = "gpu")]
        return !matches!(self.route, Route::Cpu(_))
            && self.device.burn().is_some_and(nucleus_kernels::supports_device);
        #[cfg(not(feature = "gpu"))]
        false
    }

    /// Whether the output layer is the token embedding.
    pub fn tied_output(&self) -> bool {
        self.tied_output
    }

    /// Bytes the model holds on its device.
    pub fn memory(&self) -> ModelMemory {
        match &self.route {
            #[cfg(feature = "gpu")]
            Route::Fused(model) => ModelMemory { weight_bytes: model.weight_bytes(), in_file_bytes: 0 },
            Route::Cpu(model) => {
                ModelMemory { weight_bytes: model.weight_bytes(), in_file_bytes: model.in_file_bytes() }
            }
            #[cfg(feature = "burn-ops")]
            Route::Burn(model) => ModelMemory { weight_bytes: model.weight_bytes(), in_file_bytes: 0 },
        }
    }

    /// The local blocks' rings of a sliding-window model as this path keeps them (`window.rs`);
    /// `None` where every attention block keeps a row per position: a model without a window,
    /// or Burn's path (the reference the rings are checked against keeps every row).
    pub fn kv_window(&self) -> Option<KvWindow> {
        let ring = self.config.window_ring()?;
        let rows = match &self.route {
            Route::Cpu(_) => cpu::ring_rows(ring),
            #[cfg(feature = "gpu")]
            Route::Fused(_) => ring.slots(),
            #[cfg(feature = "burn-ops")]
            Route::Burn(_) => return None,
        };
        Some(KvWindow { rows, bytes_per_token: self.config.ring_blocks() as u64 * self.config.kv_position_bytes() })
    }

    /// A cache for up to `capacity` positions (at most the model's context length).
    pub fn new_cache(&self, capacity: usize) -> Result<KvCache, ModelError> {
        if capacity == 0 || capacity > self.config.context_length {
            return Err(ModelError::ContextOverflow { needed: capacity, capacity: self.config.context_length });
        }
        let inner = match &self.route {
            #[cfg(feature = "burn-ops")]
            Route::Burn(model) => CacheKind::Burn(model.new_cache(capacity)),
            #[cfg(feature = "gpu")]
            Route::Fused(model) => CacheKind::Fused(model.new_cache(capacity)?),
            Route::Cpu(model) => CacheKind::Cpu(model.new_cache()),
        };
        Ok(KvCache { inner, len: 0, capacity })
    }

    /// Runs `tokens` at the positions after those already in `cache`, appends their keys and
    /// values, and returns the logits (see [`Logits`]), still on the device. Prefill is one call
    /// with the whole prompt; decode is one call per token. Nothing changes on an error.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache, logits: Logits) -> Result<DeviceLogits, ModelError> {
        self.forward_observed(tokens, cache, logits, &mut |_| {})
    }

    /// Whether [`Model::forward_observed`] reports a pass's blocks as they are done: where the
    /// pass runs on the calling thread (the CPU engine). A GPU path records the whole pass at
    /// once and learns of its end only by waiting on the device.
    pub fn observes_blocks(&self) -> bool {
        matches!(self.route, Route::Cpu(_))
    }

    /// [`Model::forward`], calling `after_block(n)` as the pass's first `n` blocks (of
    /// `config().block_count`) are done, where [`Model::observes_blocks`]; elsewhere never. A
    /// prompt's progress without splitting its pass: the CPU engine's products read each
    /// weight once per pass, so a prompt in chunks reads them once per chunk.
    pub fn forward_observed(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        logits: Logits,
        after_block: &mut dyn FnMut(usize),
    ) -> Result<DeviceLogits, ModelError> {
        let (start, end) = self.check_pass(tokens, cache)?;
        let output = match (&self.route, &mut cache.inner) {
            #[cfg(feature = "burn-ops")]
            (Route::Burn(model), CacheKind::Burn(inner)) => {
                DeviceLogits::Tensor(Box::new(model.forward(tokens, inner, start, logits)?))
            }
            #[cfg(feature = "gpu")]
            (Route::Fused(model), CacheKind::Fused(inner)) => {
                if logits == Logits::All && tokens.len() > MAX_LOGIT_ROWS {
                    return Err(ModelError::Unsupported(format!(
                        "logits of {} positions in one pass (the fused path computes at most {MAX_LOGIT_ROWS})",
                        tokens.len()
                    )));
                }
                DeviceLogits::Fused(model.forward(tokens, inner, start, logits)?)
            }
            (Route::Cpu(model), CacheKind::Cpu(inner)) => {
                DeviceLogits::Host(model.forward(tokens, inner, start, logits, after_block)?)
            }
            #[allow(unreachable_patterns)] // The CPU engine alone (the threaded browser build).
            _ => return Err(ModelError::Invalid("the cache was made for another model".into())),
        };
        cache.len = end;
        Ok(output)
    }

    /// Runs `tokens` after what `cache` holds into it, with no logits wanted (a recurrent
    /// model's prompt up to a checkpoint): the CPU engine skips the output layer, calling
    /// `after_block` as [`Model::forward_observed`] does; the GPU paths run their usual pass and
    /// drop its logits.
    pub fn advance(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        after_block: &mut dyn FnMut(usize),
    ) -> Result<(), ModelError> {
        let (start, end) = self.check_pass(tokens, cache)?;
        match (&self.route, &mut cache.inner) {
            (Route::Cpu(model), CacheKind::Cpu(inner)) => {
                model.advance(tokens, inner, start, after_block)?;
                cache.len = end;
            }
            #[allow(unreachable_patterns)] // The CPU engine alone (the threaded browser build).
            _ => {
                self.forward(tokens, cache, Logits::Last)?;
            }
        }
        Ok(())
    }

    /// The positions a pass of `tokens` after what `cache` holds fills, once checked: some
    /// tokens, room for them, ids in the vocabulary.
    fn check_pass(&self, tokens: &[u32], cache: &KvCache) -> Result<(usize, usize), ModelError> {
        if tokens.is_empty() {
            return Err(ModelError::EmptyInput);
        }
        let start = cache.len;
        let end = start + tokens.len();
        if end > cache.capacity {
            return Err(ModelError::ContextOverflow { needed: end, capacity: cache.capacity });
        }
        if let Some(&id) = tokens.iter().find(|&&id| id as usize >= self.config.vocab_size) {
            return Err(ModelError::TokenOutOfRange { id, vocab_size: self.config.vocab_size });
        }
        Ok((start, end))
    }

    /// Runs `tokens` after what `cache` holds, as [`Model::forward`] does, and rates every
    /// position: row `i` (the distribution after `tokens[..=i]`) with its log-sum-exp, the logit
    /// and rank of `tokens[i + 1]` (none after the last), and its top `top_k` (0..=20)
    /// ([`RowScore`]). Passes of [`MAX_LOGIT_ROWS`] rows on every path. The fused path rates the
    /// rows on the GPU (`score.wgsl`) and reads back only the records; the CPU engine rates the
    /// rows it has in memory; the Burn path reads whole rows (it is the reference).
    pub async fn score(&self, tokens: &[u32], cache: &mut KvCache, top_k: usize) -> Result<TextScores, ModelError> {
        nucleus_kernels::validate_score_k(top_k)?;
        if top_k > self.config.vocab_size {
            return Err(ModelError::Invalid(format!(
                "a top list of {top_k} in a vocabulary of {}",
                self.config.vocab_size
            )));
        }
        // Checked whole before any pass runs (the passes below check their own part again).
        #[cfg_attr(not(feature = "gpu"), allow(unused_variables))]
        let (start, end) = self.check_pass(tokens, cache)?;
        #[cfg(feature = "gpu")]
        if let (Route::Fused(model), CacheKind::Fused(inner)) = (&self.route, &mut cache.inner) {
            let (rows, bytes_read) = model.score(tokens, inner, start, top_k).await?;
            cache.len = end;
            return Ok(TextScores { rows, bytes_read });
        }
        let mut scores = TextScores { rows: Vec::with_capacity(tokens.len()), bytes_read: 0 };
        for (index, chunk) in tokens.chunks(MAX_LOGIT_ROWS).enumerate() {
            let logits = self.forward(chunk, cache, Logits::All)?;
            if !logits.in_memory() {
                scores.bytes_read += (chunk.len() * self.config.vocab_size * 4) as u64;
            }
            let first = index * MAX_LOGIT_ROWS;
            for (offset, row) in logits.into_rows().await?.iter().enumerate() {
                let next = tokens.get(first + offset + 1).copied();
                scores.rows.push(nucleus_kernels::reference::score_row(row, next, top_k));
            }
        }
        Ok(scores)
    }

    /// Runs `tokens` as [`Model::forward`] does and returns the logit lens of the last one:
    /// the residual stream after every block, and what the final norm and output layer make of
    /// each (what the model would predict if it stopped there): its statistics, its own top
    /// `candidates` and its logits of the last block's top `candidates` (1..=256). The last
    /// block's row is the pass's own logits. One pass: for one inspected step, not for
    /// generation. The fused path reads back only that; the Burn path reads whole rows (the CPU
    /// path has them in memory).
    pub async fn logit_lens(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        candidates: usize,
    ) -> Result<LogitLens, ModelError> {
        nucleus_kernels::validate_k(candidates)?;
        let (start, end) = self.check_pass(tokens, cache)?;
        let lens = match (&self.route, &mut cache.inner) {
            #[cfg(feature = "burn-ops")]
            (Route::Burn(model), CacheKind::Burn(inner)) => {
                let (hidden, logits) = model.logit_lens(tokens, inner, start)?;
                let (hidden, logits) = (read_tensor(hidden).await?, read_tensor(logits).await?);
                LogitLens::from_rows(hidden, &logits, candidates)
            }
            #[cfg(feature = "gpu")]
            (Route::Fused(model), CacheKind::Fused(inner)) => {
                model.logit_lens(tokens, inner, start, candidates).await?
            }
            (Route::Cpu(model), CacheKind::Cpu(inner)) => model.logit_lens(tokens, inner, start, candidates)?,
            #[allow(unreachable_patterns)] // The CPU engine alone (the threaded browser build).
            _ => return Err(ModelError::Invalid("the cache was made for another model".into())),
        };
        cache.len = end;
        Ok(lens)
    }
}

/// Every position of a text rated by its row of logits ([`Model::score`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TextScores {
    /// One per token of the pass, in order.
    pub rows: Vec<RowScore>,
    /// Bytes read back from the device (0 on the CPU engine, whose rows are in memory).
    pub bytes_read: u64,
}

/// The logit lens of one position ([`Model::logit_lens`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LogitLens {
    /// `[blocks][embedding]`: the residual stream after each block.
    pub hidden: Vec<Vec<f32>>,
    /// Per block, first to last: what the final norm and output layer make of its residual.
    pub layers: Vec<LensLogits>,
    /// Bytes read back from the device for the lens (0 on the CPU engine, whose rows are in memory).
    pub bytes_read: u64,
}

/// One block's row of raw logits through the output layer, as much of it as the lens shows.
#[derive(Debug, Clone, PartialEq)]
pub struct LensLogits {
    /// `ln Σ exp(logit)` over the vocabulary: `log p(x) = x − log_sum_exp` at T = 1.
    pub log_sum_exp: f64,
    /// This depth's most probable tokens, `(id, logit)`, best first (ties to the lower id).
    pub top: Vec<(u32, f32)>,
    /// Its logits of the last block's `top` ids, in that order.
    pub tracked: Vec<f32>,
}

impl LogitLens {
    /// The lens of whole rows `[blocks][vocab]` (the Burn and CPU paths, and the reference of
    /// the fused path's, which computes the same on the GPU).
    pub fn from_rows(hidden: Vec<Vec<f32>>, rows: &[Vec<f32>], candidates: usize) -> Self {
        let bytes_read = 4 * (hidden.iter().chain(rows).map(Vec::len).sum::<usize>() as u64);
        let top_of = |row: &[f32]| -> Vec<(u32, f32)> {
            let mut ids: Vec<u32> = (0..row.len() as u32).collect();
            ids.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]).then(a.cmp(&b)));
            ids.into_iter().take(candidates).map(|id| (id, row[id as usize])).collect()
        };
        let followed = rows.last().map(|row| top_of(row)).unwrap_or_default();
        let layers = rows
            .iter()
            .map(|row| {
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum: f64 = row.iter().map(|&x| (f64::from(x) - f64::from(max)).exp()).sum();
                LensLogits {
                    log_sum_exp: f64::from(max) + sum.ln(),
                    top: top_of(row),
                    tracked: followed.iter().map(|&(id, _)| row[id as usize]).collect(),
                }
            })
            .collect();
        Self { hidden, layers, bytes_read }
    }
}

#[cfg(all(test, feature = "burn-ops"))]
mod tests {
    use super::*;

    /// SmolLM2-135M's shapes.
    fn smollm2() -> ModelConfig {
        ModelConfig {
            architecture: "llama".into(),
            block_count: 30,
            embedding_length: 576,
            feed_forward_length: 1536,
            head_count: 9,
            head_count_kv: 3,
            head_dim: 64,
            rope_dims: 64,
            rope_freq_base: 100_000.0,
            rope_scaling: RopeScaling::None,
            rms_norm_eps: 1e-5,
            vocab_size: 49_152,
            context_length: 8192,
            sliding_window: None,
            delta_net: None,
            skipped_mtp_blocks: 0,
        }
    }

    #[test]
    fn the_default_path_is_the_cpu_engine_on_its_device_and_fused_on_wgpu_unless_the_kernels_cannot_take_the_shapes() {
        let burn = Path::BurnOps(LinearKernel::BurnMatmul);
        assert_eq!(Path::default_for(&ModelDevice::cpu(), &smollm2()), Path::Cpu);
        assert_eq!(Path::default_for(&ModelDevice::burn_cpu(), &smollm2()), burn);
        let wgpu = ModelDevice::wgpu().expect("a wgpu adapter (lavapipe without a GPU)");
        assert_eq!(Path::default_for(&wgpu, &smollm2()), Path::Fused);
        let wide_heads = ModelConfig { head_count: 2, head_count_kv: 1, head_dim: 288, rope_dims: 288, ..smollm2() };
        assert_eq!(Path::default_for(&wgpu, &wide_heads), burn);
        let odd_hidden = ModelConfig { feed_forward_length: 1540, ..smollm2() };
        assert_eq!(Path::default_for(&wgpu, &odd_hidden), burn);
    }
}
