//! The GPU the fused path runs on: the wgpu device and queue of Burn's wgpu backend, what is built
//! once for them (bind group layouts, pipelines), and the counters of what the path asks of them.
//!
//! Burn creates the device ([`init`], [`init_async`]); the fused path records on it, in buffers
//! of its own ([`Gpu::buffer`], [`Gpu::upload`] for the weights), counted while they live.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use burn::backend::wgpu::{WgpuSetup, wgpu};
use burn::tensor::Device;

use crate::KernelError;

/// Kernels Burn's wgpu runtime records before each queue submission (`tasks_max`; Burn's default
/// is 32), on the path that still runs Burn operations (ARCHITECTURE.md has the measurement).
pub const WGPU_TASKS_PER_SUBMISSION: usize = 256;

/// How the layer kernels are compiled for this adapter: how the matrix kernels spread their work
/// (the shader constants `WG`, `TPR`) and where their parameters are bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tuning {
    /// Lanes per workgroup.
    pub workgroup: u32,
    /// Lanes that share one output row (they split its columns and add their sums).
    pub lanes_per_row: u32,
    /// Where the parameter structs (`step`, `params`) are bound.
    pub params: ParamSpace,
}

/// The address space of the layer kernels' parameter structs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParamSpace {
    /// `var<uniform>`: WebGPU's place for small constants, and within every adapter's limit on
    /// storage bindings (attn_qkv.wgsl has 8 besides its two parameter structs).
    Uniform,
    /// `var<storage, read>`, on lavapipe. lavapipe inlines the values of uniforms that steer a
    /// loop into the shader and compiles a variant per set of values when it dispatches (Mesa's
    /// inline uniforms), so blocks whose parameters differ compiled their kernels again at every
    /// step (ARCHITECTURE.md has the measurements, by `Tuning::for_adapter`).
    Storage,
}

impl Tuning {
    /// On adapters that run on the CPU (lavapipe, SwiftShader, WARP): one lane per output row and
    /// no workgroup barrier in the inner loop, where barriers are emulated at great cost.
    pub const CPU_ADAPTER: Tuning = Tuning { workgroup: 64, lanes_per_row: 1, params: ParamSpace::Uniform };

    /// On lavapipe (Mesa's Vulkan on the CPU, where the native tests run): as
    /// [`Tuning::CPU_ADAPTER`], the parameters in storage ([`ParamSpace::Storage`]).
    pub const LAVAPIPE: Tuning = Tuning { params: ParamSpace::Storage, ..Tuning::CPU_ADAPTER };

    /// On GPUs: 16 lanes per row, so that even a 576-row projection keeps thousands of lanes
    /// busy. On an H200 (`nucleus bench --kernel-times`, Qwen3.5-0.8B's shape, ARCHITECTURE.md)
    /// 16 prefilled 512 tokens 20 % faster than 32 and decoded 1.6 % faster; 8 prefilled faster
    /// still but decoded 5 % slower, 64 was slower at both.
    pub const GPU: Tuning = Tuning { workgroup: 256, lanes_per_row: 16, params: ParamSpace::Uniform };

    /// [`Tuning::LAVAPIPE`] on lavapipe natively (a browser keeps WebGPU's uniforms, whatever its
    /// adapter), [`Tuning::CPU_ADAPTER`] on other adapters that run on the CPU, else
    /// [`Tuning::GPU`].
    ///
    /// Natively `NUCLEUS_GPU_TUNING=WGxTPR` (`256x16`) sets other lanes, to measure them; one
    /// that does not divide (or a workgroup over 256 lanes) is ignored with a warning.
    pub fn for_adapter(info: &wgpu::AdapterInfo) -> Self {
        let lavapipe = info.driver == "llvmpipe" || info.name.starts_with("llvmpipe");
        let chosen = if info.device_type != wgpu::DeviceType::Cpu {
            Self::GPU
        } else if lavapipe && cfg!(not(target_family = "wasm")) {
            Self::LAVAPIPE
        } else {
            Self::CPU_ADAPTER
        };
        #[cfg(not(target_family = "wasm"))]
        if let Ok(value) = std::env::var("NUCLEUS_GPU_TUNING") {
            let parsed = value.split_once('x').and_then(|(wg, tpr)| Some((wg.parse().ok()?, tpr.parse().ok()?)));
            match parsed {
                Some((workgroup, lanes_per_row))
                    if (1..=256).contains(&workgroup) && lanes_per_row >= 1 && workgroup % lanes_per_row == 0 =>
                {
                    return Self { workgroup, lanes_per_row, ..chosen };
                }
                _ => eprintln!("NUCLEUS_GPU_TUNING={value} ignored: not WGxTPR with TPR dividing WG <= 256"),
            }
        }
        chosen
    }

    /// Output rows per workgroup.
    pub fn rows_per_workgroup(self) -> u32 {
        self.workgroup / self.lanes_per_row
    }
}

/// What the fused path has asked of the GPU since the device was set up; [`Gpu::counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuCounters {
    /// Compute dispatches recorded.
    pub dispatches: u64,
    /// Queue submissions.
    pub submissions: u64,
    /// `Queue::write_buffer` calls.
    pub buffer_writes: u64,
    /// Bytes read back to the host.
    pub bytes_read: u64,
    /// Buffers the fused path created and has not released.
    pub live_buffers: u64,
    /// Their bytes.
    pub live_bytes: u64,
    /// Host time the fused path spent recording work (its own clock), ns.
    pub record_ns: u64,
    /// Host time spent in `Queue::submit` (wgpu's validation and the driver's submission), ns.
    pub submit_ns: u64,
}

impl std::ops::Sub for GpuCounters {
    type Output = GpuCounters;

    /// The calls between two readings (`live_*` are taken from `self`, the later one).
    fn sub(self, earlier: GpuCounters) -> GpuCounters {
        GpuCounters {
            dispatches: self.dispatches - earlier.dispatches,
            submissions: self.submissions - earlier.submissions,
            buffer_writes: self.buffer_writes - earlier.buffer_writes,
            bytes_read: self.bytes_read - earlier.bytes_read,
            live_buffers: self.live_buffers,
            live_bytes: self.live_bytes,
            record_ns: self.record_ns - earlier.record_ns,
            submit_ns: self.submit_ns - earlier.submit_ns,
        }
    }
}

#[derive(Default)]
struct Counters {
    dispatches: AtomicU64,
    submissions: AtomicU64,
    buffer_writes: AtomicU64,
    bytes_read: AtomicU64,
    live_buffers: AtomicU64,
    live_bytes: AtomicU64,
    record_ns: AtomicU64,
    submit_ns: AtomicU64,
}

/// The wgpu device and queue Burn's backend runs on, and the caches of the fused path.
/// Cloning is cheap (one shared state).
#[derive(Clone)]
pub struct Gpu {
    inner: Arc<Inner>,
}

struct Inner {
    device: wgpu::Device,
    queue: wgpu::Queue,
    adapter: wgpu::AdapterInfo,
    tuning: Tuning,
    layouts: Mutex<HashMap<&'static str, wgpu::BindGroupLayout>>,
    pipelines: Mutex<HashMap<crate::kernel::PipelineKey, wgpu::ComputePipeline>>,
    counters: Counters,
    profile: Mutex<crate::profile::ProfileState>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("adapter", &self.inner.adapter.name).field("tuning", &self.inner.tuning).finish()
    }
}

/// Burn's wgpu device as the project sets it up everywhere (CLI, browser, tests): autotune off
/// (the workspace's Burn features), [`WGPU_TASKS_PER_SUBMISSION`] kernels per submission unless
/// `CUBECL_WGPU_MAX_TASKS` is set (cubecl's own variable, for measuring other values).
fn wgpu_options() -> burn::tensor::wgpu::WgpuOptions {
    let options = Device::wgpu_options();
    if std::env::var_os("CUBECL_WGPU_MAX_TASKS").is_some() {
        options
    } else {
        options.tasks_max(WGPU_TASKS_PER_SUBMISSION)
    }
}

/// Starts Burn's wgpu backend (natively: Vulkan, Metal or DX12) and returns its device with the
/// [`Gpu`] that shares it. Burn allows one initialisation per process: keep and clone both.
#[cfg(not(target_family = "wasm"))]
pub fn init() -> Result<(Device, Gpu), KernelError> {
    let (device, setup) = wgpu_options()
        .init_with_setup()
        .map_err(|e| KernelError::Device(format!("cannot start the wgpu backend: {e}")))?;
    Ok((device, Gpu::from_setup(&setup)))
}

/// As [`init`], asynchronously: the only way in a browser (WebGPU has no synchronous adapter
/// request).
pub async fn init_async() -> Result<(Device, Gpu), KernelError> {
    let (device, setup) = wgpu_options()
        .init_with_setup_async()
        .await
        .map_err(|e| KernelError::Device(format!("WebGPU could not start a device: {e}")))?;
    Ok((device, Gpu::from_setup(&setup)))
}

impl Gpu {
    /// The GPU of a Burn wgpu setup (the handles Burn's runtime uses).
    pub fn from_setup(setup: &WgpuSetup) -> Self {
        let adapter = setup.adapter.get_info();
        let tuning = Tuning::for_adapter(&adapter);
        Self::with_tuning(setup.device.clone(), setup.queue.clone(), adapter, tuning)
    }

    /// The same with an explicit tuning (tests run both tunings on one adapter).
    pub fn with_tuning(device: wgpu::Device, queue: wgpu::Queue, adapter: wgpu::AdapterInfo, tuning: Tuning) -> Self {
        Self {
            inner: Arc::new(Inner {
                device,
                queue,
                adapter,
                tuning,
                layouts: Mutex::default(),
                pipelines: Mutex::default(),
                counters: Counters::default(),
                profile: Mutex::default(),
            }),
        }
    }

    /// This GPU with another tuning, sharing the device, queue and counters' starting point.
    pub fn retuned(&self, tuning: Tuning) -> Self {
        Self::with_tuning(self.inner.device.clone(), self.inner.queue.clone(), self.inner.adapter.clone(), tuning)
    }

    /// The wgpu device.
    pub fn device(&self) -> &wgpu::Device {
        &self.inner.device
    }

    /// The wgpu queue.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.inner.queue
    }

    /// What the adapter says of itself.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.inner.adapter
    }

    /// How the matrix kernels spread their work here.
    pub fn tuning(&self) -> Tuning {
        self.inner.tuning
    }

    /// The device's limits.
    pub fn limits(&self) -> wgpu::Limits {
        self.inner.device.limits()
    }

    /// What the fused path has asked of the GPU so far.
    pub fn counters(&self) -> GpuCounters {
        let c = &self.inner.counters;
        GpuCounters {
            dispatches: c.dispatches.load(Ordering::Relaxed),
            submissions: c.submissions.load(Ordering::Relaxed),
            buffer_writes: c.buffer_writes.load(Ordering::Relaxed),
            bytes_read: c.bytes_read.load(Ordering::Relaxed),
            live_buffers: c.live_buffers.load(Ordering::Relaxed),
            live_bytes: c.live_bytes.load(Ordering::Relaxed),
            record_ns: c.record_ns.load(Ordering::Relaxed),
            submit_ns: c.submit_ns.load(Ordering::Relaxed),
        }
    }

    /// Adds host time spent recording (see [`GpuCounters::record_ns`]).
    pub fn add_record_time(&self, elapsed: std::time::Duration) {
        self.inner.counters.record_ns.fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    }

    pub(crate) fn count_dispatches(&self, n: u64) {
        self.inner.counters.dispatches.fetch_add(n, Ordering::Relaxed);
    }

    /// A storage buffer of `bytes` (rounded up to 4) of our own, counted until dropped.
    pub fn buffer(&self, label: &str, bytes: u64, usage: wgpu::BufferUsages) -> GpuBuffer {
        let size = bytes.max(4).next_multiple_of(4);
        let buffer = self.inner.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage,
            mapped_at_creation: false,
        });
        let c = &self.inner.counters;
        c.live_buffers.fetch_add(1, Ordering::Relaxed);
        c.live_bytes.fetch_add(size, Ordering::Relaxed);
        GpuBuffer { buffer, gpu: self.clone() }
    }

    /// A buffer the kernels read and write, also a copy source and destination.
    pub fn storage(&self, label: &str, bytes: u64) -> GpuBuffer {
        use wgpu::BufferUsages as U;
        self.buffer(label, bytes, U::STORAGE | U::COPY_SRC | U::COPY_DST)
    }

    /// A read-only storage buffer holding `bytes` (padded with zeros to a multiple of 4): a
    /// weight, uploaded once. Counted like every buffer of ours.
    pub fn upload(&self, label: &str, bytes: &[u8]) -> GpuBuffer {
        use wgpu::BufferUsages as U;
        let buffer = self.buffer(label, bytes.len() as u64, U::STORAGE | U::COPY_DST);
        self.write(buffer.buffer(), 0, bytes);
        buffer
    }

    /// Writes `data` at `offset` of `buffer` (padded with zeros to a multiple of 4 bytes, as
    /// queue writes must be); it lands before the next submission's work.
    pub fn write(&self, buffer: &wgpu::Buffer, offset: u64, data: &[u8]) {
        if data.len().is_multiple_of(4) {
            self.inner.queue.write_buffer(buffer, offset, data);
        } else {
            let mut padded = data.to_vec();
            padded.resize(data.len().next_multiple_of(4), 0);
            self.inner.queue.write_buffer(buffer, offset, &padded);
        }
        self.inner.counters.buffer_writes.fetch_add(1, Ordering::Relaxed);
    }

    /// Submits `commands` in order, as one queue submission.
    pub fn submit(&self, commands: impl IntoIterator<Item = wgpu::CommandBuffer>) -> wgpu::SubmissionIndex {
        let clock = web_time::Instant::now();
        let index = self.inner.queue.submit(commands);
        let c = &self.inner.counters;
        c.submissions.fetch_add(1, Ordering::Relaxed);
        c.submit_ns.fetch_add(clock.elapsed().as_nanos() as u64, Ordering::Relaxed);
        index
    }

    /// Resolves once the work submitted so far is done: a step that reports progress waits here,
    /// so what it reports has run. Asynchronous like [`Gpu::read`].
    pub async fn done(&self) -> Result<(), KernelError> {
        let (sender, receiver) = futures_channel::oneshot::channel();
        self.inner.queue.on_submitted_work_done(move || {
            let _ = sender.send(());
        });
        #[cfg(not(target_family = "wasm"))]
        self.inner
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| KernelError::Device(format!("waiting for the GPU: {e}")))?;
        receiver.await.map_err(|_| KernelError::Device("the GPU dropped a wait (device lost?)".into()))
    }

    /// Reads `size` bytes of a mappable `staging` buffer once the work submitted so far is done.
    /// Asynchronous: natively the device is polled here; in a browser WebGPU resolves the map.
    pub async fn read(&self, staging: &wgpu::Buffer, size: u64) -> Result<Vec<u8>, KernelError> {
        let slice = staging.slice(..size);
        let (sender, receiver) = futures_channel::oneshot::channel();
        slice.map_async(wgpu::MapMode::Read, move |result| {
            let _ = sender.send(result);
        });
        #[cfg(not(target_family = "wasm"))]
        self.inner
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| KernelError::Device(format!("waiting for the GPU: {e}")))?;
        receiver
            .await
            .map_err(|_| KernelError::Device("the GPU dropped a read (device lost?)".into()))?
            .map_err(|e| KernelError::Device(format!("reading back from the GPU: {e} (device lost?)")))?;
        let bytes = slice
            .get_mapped_range()
            .map_err(|e| KernelError::Device(format!("reading back from the GPU: {e}")))?
            .to_vec();
        staging.unmap();
        self.inner.counters.bytes_read.fetch_add(size, Ordering::Relaxed);
        Ok(bytes)
    }

    pub(crate) fn layouts(&self) -> MutexGuard<'_, HashMap<&'static str, wgpu::BindGroupLayout>> {
        self.inner.layouts.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn profile_state(&self) -> MutexGuard<'_, crate::profile::ProfileState> {
        self.inner.profile.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn pipelines(&self) -> MutexGuard<'_, HashMap<crate::kernel::PipelineKey, wgpu::ComputePipeline>> {
        self.inner.pipelines.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether `self` and `other` share one device.
    pub fn same_device(&self, other: &Gpu) -> bool {
        self.inner.device == other.inner.device
    }
}

/// A buffer of our own on a [`Gpu`], counted in [`GpuCounters::live_buffers`] until dropped.
pub struct GpuBuffer {
    buffer: wgpu::Buffer,
    gpu: Gpu,
}

impl GpuBuffer {
    /// The wgpu buffer.
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.buffer.size()
    }

    /// The whole buffer as a binding.
    pub fn view(&self) -> BufferView {
        BufferView { buffer: self.buffer.clone(), offset: 0, size: self.buffer.size() }
    }

    /// `size` bytes from `offset` as a binding.
    pub fn range(&self, offset: u64, size: u64) -> BufferView {
        BufferView { buffer: self.buffer.clone(), offset, size }
    }
}

impl Drop for GpuBuffer {
    /// The memory is freed once no bind group or submitted work holds the buffer any more.
    fn drop(&mut self) {
        let c = &self.gpu.inner.counters;
        c.live_buffers.fetch_sub(1, Ordering::Relaxed);
        c.live_bytes.fetch_sub(self.buffer.size(), Ordering::Relaxed);
    }
}

/// A byte range of a wgpu buffer that a kernel binds.
#[derive(Debug, Clone)]
pub struct BufferView {
    /// The buffer.
    pub buffer: wgpu::Buffer,
    /// Where the range starts (a multiple of the device's offset alignment).
    pub offset: u64,
    /// Its length in bytes.
    pub size: u64,
}
