//! Counts this process's wgpu compute dispatches, queue submissions and buffer writes, for
//! `nucleus bench`, whoever makes them (Burn's runtime or the fused path).
//!
//! Burn's runtime (cubecl) records and submits through its own handles, out of our reach, and a
//! submission index read from outside does not see its work. Every call does pass through
//! wgpu-core, though, which logs `ComputePass::dispatch [x, y, z]` for each dispatch,
//! `Queue::submit` for each submission and `Queue::write_buffer` for each buffer write (at trace
//! level; `log` with no level compiled out). This module installs a `log` listener that counts
//! exactly those records and ignores everything else.
//!
//! Counting is on only while a [`GpuCallCount`] is alive: outside it log's maximum level is
//! `Off`, so timed runs do not pay for trace records. wgpu-core is native only; in the browser the
//! worker counts `GPUQueue.submit` itself (`www/nucleus-worker.js`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Calls seen so far (since the counting window opened).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuCalls {
    pub dispatches: u64,
    pub submits: u64,
    pub buffer_writes: u64,
}

impl std::ops::Sub for GpuCalls {
    type Output = GpuCalls;

    fn sub(self, earlier: GpuCalls) -> GpuCalls {
        GpuCalls {
            dispatches: self.dispatches - earlier.dispatches,
            submits: self.submits - earlier.submits,
            buffer_writes: self.buffer_writes - earlier.buffer_writes,
        }
    }
}

static DISPATCHES: AtomicU64 = AtomicU64::new(0);
static SUBMITS: AtomicU64 = AtomicU64::new(0);
static BUFFER_WRITES: AtomicU64 = AtomicU64::new(0);
/// Whether a counting window is open (at most one at a time: the totals are process-wide).
static COUNTING: AtomicBool = AtomicBool::new(false);

/// The modules that emit wgpu-core's queue and compute-pass API records.
const QUEUE_LOG_TARGET: &str = "wgpu_core::device::queue";
const COMPUTE_LOG_TARGET: &str = "wgpu_core::command::compute";

struct GpuCallListener;

impl log::Log for GpuCallListener {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.target() == QUEUE_LOG_TARGET || metadata.target() == COMPUTE_LOG_TARGET
    }

    fn log(&self, record: &log::Record<'_>) {
        match record.target() {
            // Plain literals, so `as_str` sees them without formatting.
            QUEUE_LOG_TARGET => match record.args().as_str() {
                Some("Queue::submit") => SUBMITS.fetch_add(1, Ordering::Relaxed),
                Some("Queue::write_buffer") => BUFFER_WRITES.fetch_add(1, Ordering::Relaxed),
                _ => return,
            },
            COMPUTE_LOG_TARGET if record.args().to_string().starts_with("ComputePass::dispatch [") => {
                DISPATCHES.fetch_add(1, Ordering::Relaxed)
            }
            _ => return,
        };
    }

    fn flush(&self) {}
}

static LISTENER: GpuCallListener = GpuCallListener;

fn totals() -> GpuCalls {
    GpuCalls {
        dispatches: DISPATCHES.load(Ordering::Relaxed),
        submits: SUBMITS.load(Ordering::Relaxed),
        buffer_writes: BUFFER_WRITES.load(Ordering::Relaxed),
    }
}

/// A counting window: queue calls made while it lives are counted; [`GpuCallCount::so_far`]
/// reads them. Dropping it stops counting.
pub struct GpuCallCount {
    start: GpuCalls,
}

impl GpuCallCount {
    /// Opens the window. Fails when another `log` logger owns this process, or when a window is
    /// already open.
    pub fn start() -> Result<Self, String> {
        static INSTALLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if !*INSTALLED.get_or_init(|| log::set_logger(&LISTENER).is_ok()) {
            return Err("cannot count GPU calls: another logger is installed".into());
        }
        if COUNTING.swap(true, Ordering::SeqCst) {
            return Err("cannot count GPU calls: a count is already running".into());
        }
        log::set_max_level(log::LevelFilter::Trace);
        Ok(GpuCallCount { start: totals() })
    }

    /// The calls made since [`GpuCallCount::start`].
    pub fn so_far(&self) -> GpuCalls {
        totals() - self.start
    }
}

impl Drop for GpuCallCount {
    fn drop(&mut self) {
        log::set_max_level(log::LevelFilter::Off);
        COUNTING.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::wgpu::wgpu;
    use burn::tensor::{Device, Tensor};

    fn plain_wgpu_device() -> (wgpu::Device, wgpu::Queue) {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions::default()))
            .expect("a wgpu adapter (lavapipe: apt-get install mesa-vulkan-drivers)");
        pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor::default())).expect("a wgpu device")
    }

    /// One test, so no other test's GPU work lands in its windows (the count is process-wide).
    #[test]
    fn counts_each_dispatch_submit_and_buffer_write_and_nothing_outside_the_window() {
        let (device, queue) = plain_wgpu_device();
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("counted"),
            size: 16,
            usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        });

        let count = GpuCallCount::start().expect("the listener installs");
        assert!(GpuCallCount::start().is_err(), "a second window is refused while one is open");
        for _ in 0..3 {
            queue.submit([device.create_command_encoder(&Default::default()).finish()]);
        }
        queue.write_buffer(&buffer, 0, &[1; 16]);
        queue.write_buffer(&buffer, 0, &[2; 16]);
        queue.submit([]);
        assert_eq!(count.so_far(), GpuCalls { dispatches: 0, submits: 4, buffer_writes: 2 });

        // Two dispatches of a trivial shader.
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: None,
            source: wgpu::ShaderSource::Wgsl("@compute @workgroup_size(1) fn main() {}".into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: None,
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            pass.dispatch_workgroups(1, 1, 1);
            pass.dispatch_workgroups(2, 1, 1);
        }
        queue.submit([encoder.finish()]);
        assert_eq!(count.so_far(), GpuCalls { dispatches: 2, submits: 5, buffer_writes: 2 });
        drop(count);

        // Outside a window nothing counts, and a new window starts from zero.
        queue.submit([]);
        queue.write_buffer(&buffer, 0, &[3; 16]);
        let count = GpuCallCount::start().expect("a window opens again");
        assert_eq!(count.so_far(), GpuCalls::default());

        // Burn's own submissions (through cubecl's queue) are seen: computing and reading a
        // tensor submits at least once.
        let burn_device = Device::wgpu_options().init().expect("Burn's wgpu runtime starts");
        let before = count.so_far();
        let tensor = Tensor::<2>::from_floats([[1.0, 2.0], [3.0, 4.0]], &burn_device) * 2.0;
        let values = tensor.into_data().try_to_vec::<f32>().expect("f32 values");
        assert_eq!(values, [2.0, 4.0, 6.0, 8.0]);
        let burn_calls = count.so_far() - before;
        assert!(burn_calls.submits >= 1, "Burn's submissions were not seen: {burn_calls:?}");
    }
}
