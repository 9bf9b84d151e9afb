//! GPU time per kernel, for finding where a step's time goes on a real GPU.
//!
//! With profiling on ([`Gpu::set_profiling`]), a [`Recorder`](crate::Recorder) gives each
//! dispatch a compute pass of its own with a timestamp written at the pass's start and end
//! (WebGPU's `timestamp-query`); when the recording is finished the timestamps are resolved into
//! a buffer, read back by [`Gpu::kernel_times`] once the work has run, and added up per kernel.
//! A pass per dispatch adds the cost of the passes' boundaries to the step, so a profiled step is
//! slower than a plain one: the times say how the kernels share the GPU's work, and their sum
//! against the plain step's time says what the boundaries between dispatches cost.
//! `nucleus bench --kernel-times` prints them.

use std::collections::BTreeMap;

use burn::backend::wgpu::wgpu;

use crate::{Gpu, KernelError};

/// Dispatches timed per recording: wgpu allows 4,096 queries in a set, two a dispatch. A
/// recording of more dispatches times its first `CAPACITY` (a prefill pass records ~1,100
/// dispatches across several submissions, a decode step ~300).
const CAPACITY: u32 = 2048;

/// One kernel's share of the profiled work.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelTime {
    /// The kernel's name (its `.wgsl` file).
    pub kernel: &'static str,
    /// Its dispatches timed.
    pub dispatches: u64,
    /// Their GPU time, in ns (the sum of each pass's end minus its start).
    pub ns: f64,
}

/// The timestamp queries of one recording: two per dispatch, the kernels' names in order.
pub(crate) struct Passes {
    queries: wgpu::QuerySet,
    names: Vec<&'static str>,
}

impl Passes {
    /// Queries for a recording on `gpu`, when it profiles.
    pub(crate) fn new(gpu: &Gpu) -> Option<Self> {
        gpu.profiling().then(|| Passes {
            queries: gpu.device().create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("nucleus kernel times"),
                ty: wgpu::QueryType::Timestamp,
                count: 2 * CAPACITY,
            }),
            names: Vec::new(),
        })
    }

    /// The timestamp writes for the pass of the next dispatch, `kernel`'s, or `None` past
    /// [`CAPACITY`].
    pub(crate) fn next(&mut self, kernel: &'static str) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        let index = self.names.len() as u32;
        if index == CAPACITY {
            return None;
        }
        self.names.push(kernel);
        Some(wgpu::ComputePassTimestampWrites {
            query_set: &self.queries,
            beginning_of_pass_write_index: Some(2 * index),
            end_of_pass_write_index: Some(2 * index + 1),
        })
    }

    /// Records the resolution of the timestamps into a buffer the host can read, and hands it to
    /// `gpu` for [`Gpu::kernel_times`].
    pub(crate) fn finish(self, gpu: &Gpu, encoder: &mut wgpu::CommandEncoder) {
        if self.names.is_empty() {
            return;
        }
        let count = 2 * self.names.len() as u32;
        let size = u64::from(count) * 8;
        let resolved = gpu.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("nucleus kernel times"),
            size,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let staging = gpu.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("nucleus kernel times, read back"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        encoder.resolve_query_set(&self.queries, 0..count, &resolved, 0);
        encoder.copy_buffer_to_buffer(&resolved, 0, &staging, 0, size);
        gpu.profiled(Recorded { staging, names: self.names });
    }
}

/// A finished recording's timestamps, waiting to be read.
pub(crate) struct Recorded {
    staging: wgpu::Buffer,
    names: Vec<&'static str>,
}

impl Gpu {
    /// Whether the adapter can time kernels (`timestamp-query`).
    pub fn can_profile(&self) -> bool {
        self.device().features().contains(wgpu::Features::TIMESTAMP_QUERY)
    }

    /// Turns kernel timing on or off for what is recorded from now on (see the module's docs).
    pub fn set_profiling(&self, on: bool) -> Result<(), KernelError> {
        if on && !self.can_profile() {
            return Err(KernelError::Device(format!(
                "{} cannot time kernels (no timestamp queries)",
                self.adapter_info().name
            )));
        }
        self.profile_state().on = on;
        Ok(())
    }

    fn profiling(&self) -> bool {
        self.profile_state().on
    }

    fn profiled(&self, recorded: Recorded) {
        self.profile_state().recorded.push(recorded);
    }

    /// The GPU time of every kernel timed since the last call, most first, once the work
    /// submitted so far has run. Asynchronous like [`Gpu::read`].
    pub async fn kernel_times(&self) -> Result<Vec<KernelTime>, KernelError> {
        let recorded = std::mem::take(&mut self.profile_state().recorded);
        let period = f64::from(self.queue().get_timestamp_period());
        let mut totals: BTreeMap<&'static str, (u64, f64)> = BTreeMap::new();
        for Recorded { staging, names } in recorded {
            let bytes = self.read(&staging, staging.size()).await?;
            let ticks: Vec<u64> =
                bytes.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().expect("eight bytes"))).collect();
            for (name, pair) in names.iter().zip(ticks.chunks_exact(2)) {
                let total = totals.entry(name).or_default();
                total.0 += 1;
                total.1 += pair[1].saturating_sub(pair[0]) as f64 * period;
            }
        }
        let mut times: Vec<KernelTime> =
            totals.into_iter().map(|(kernel, (dispatches, ns))| KernelTime { kernel, dispatches, ns }).collect();
        times.sort_by(|a, b| b.ns.total_cmp(&a.ns));
        Ok(times)
    }
}

/// Whether kernels are timed, and the recordings whose times are not read yet.
#[derive(Default)]
pub(crate) struct ProfileState {
    on: bool,
    recorded: Vec<Recorded>,
}
