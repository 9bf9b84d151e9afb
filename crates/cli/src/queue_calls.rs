//! Counts this process's wgpu queue submissions and buffer writes, for `nucleus bench`.
//!
//! Burn's runtime (cubecl) submits through its own handle on the `wgpu::Queue`, out of our reach,
//! and a submission index read from outside does not see its work. Every call does pass through
//! wgpu-core, though, which logs `Queue::submit` for each `Queue::submit` and `Queue::write_buffer`
//! for each `Queue::write_buffer` (at trace level; `log` with no level compiled out). This module
//! installs a `log` listener that counts exactly those two records and ignores everything else.
//!
//! Counting is on only while a [`QueueCallCount`] is alive: outside it log's maximum level is
//! `Off`, so timed runs do not pay for trace records. wgpu-core is native only; in the browser the
//! worker counts `GPUQueue.submit` itself (`www/nucleus-worker.js`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Queue calls seen so far (since the counting window opened).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueCalls {
    pub submits: u64,
    pub buffer_writes: u64,
}

impl std::ops::Sub for QueueCalls {
    type Output = QueueCalls;

    fn sub(self, earlier: QueueCalls) -> QueueCalls {
        QueueCalls { submits: self.submits - earlier.submits, buffer_writes: self.buffer_writes - earlier.buffer_writes }
    }
}

static SUBMITS: AtomicU64 = AtomicU64::new(0);
static BUFFER_WRITES: AtomicU64 = AtomicU64::new(0);
/// Whether a counting window is open (at most one at a time: the totals are process-wide).
static COUNTING: AtomicBool = AtomicBool::new(false);

/// The module that emits wgpu-core's queue API records.
const QUEUE_LOG_TARGET: &str = "wgpu_core::device::queue";

struct QueueCallListener;

impl log::Log for QueueCallListener {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.target() == QUEUE_LOG_TARGET
    }

    fn log(&self, record: &log::Record<'_>) {
        if record.target() != QUEUE_LOG_TARGET {
            return;
        }
        // The two records are plain literals, so `as_str` sees them without formatting.
        match record.args().as_str() {
            Some("Queue::submit") => SUBMITS.fetch_add(1, Ordering::Relaxed),
            Some("Queue::write_buffer") => BUFFER_WRITES.fetch_add(1, Ordering::Relaxed),
            _ => return,
        };
    }

    fn flush(&self) {}
}

static LISTENER: QueueCallListener = QueueCallListener;

fn totals() -> QueueCalls {
    QueueCalls { submits: SUBMITS.load(Ordering::Relaxed), buffer_writes: BUFFER_WRITES.load(Ordering::Relaxed) }
}

/// A counting window: queue calls made while it lives are counted; [`QueueCallCount::so_far`]
/// reads them. Dropping it stops counting.
pub struct QueueCallCount {
    start: QueueCalls,
}

impl QueueCallCount {
    /// Opens the window. Fails when another `log` logger owns this process, or when a window is
    /// already open.
    pub fn start() -> Result<Self, String> {
        static INSTALLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if !*INSTALLED.get_or_init(|| log::set_logger(&LISTENER).is_ok()) {
            return Err("cannot count GPU queue calls: another logger is installed".into());
        }
        if COUNTING.swap(true, Ordering::SeqCst) {
            return Err("cannot count GPU queue calls: a count is already running".into());
        }
        log::set_max_level(log::LevelFilter::Trace);
        Ok(QueueCallCount { start: totals() })
    }

    /// The calls made since [`QueueCallCount::start`].
    pub fn so_far(&self) -> QueueCalls {
        totals() - self.start
    }
}

impl Drop for QueueCallCount {
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
    fn counts_each_submit_and_buffer_write_and_nothing_outside_the_window() {
        let (device, queue) = plain_wgpu_device();
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("counted"),
            size: 16,
            usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        });

        let count = QueueCallCount::start().expect("the listener installs");
        assert!(QueueCallCount::start().is_err(), "a second window is refused while one is open");
        for _ in 0..3 {
            queue.submit([device.create_command_encoder(&Default::default()).finish()]);
        }
        queue.write_buffer(&buffer, 0, &[1; 16]);
        queue.write_buffer(&buffer, 0, &[2; 16]);
        queue.submit([]);
        assert_eq!(count.so_far(), QueueCalls { submits: 4, buffer_writes: 2 });
        drop(count);

        // Outside a window nothing counts, and a new window starts from zero.
        queue.submit([]);
        queue.write_buffer(&buffer, 0, &[3; 16]);
        let count = QueueCallCount::start().expect("a window opens again");
        assert_eq!(count.so_far(), QueueCalls::default());

        // Burn's own submissions (through cubecl's queue) are seen: computing and reading a
        // tensor submits at least once.
        let burn_device = Device::wgpu_options().init().expect("Burn's wgpu runtime starts");
        let before = count.so_far();
        let tensor = Tensor::<2>::from_floats([[1.0, 2.0], [3.0, 4.0]], &burn_device) * 2.0;
        let values = tensor.into_data().to_vec::<f32>().expect("f32 values");
        assert_eq!(values, [2.0, 4.0, 6.0, 8.0]);
        let burn_calls = count.so_far() - before;
        assert!(burn_calls.submits >= 1, "Burn's submissions were not seen: {burn_calls:?}");
    }
}
