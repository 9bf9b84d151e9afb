//! The machinery every layer kernel shares: its description ([`KernelSpec`]: source, parameter
//! structs, bindings in order), its pipelines (built once per GPU, tuning, row count and weight
//! formats, then cached), its bind groups (built by the caller once per set of buffers), and the
//! [`Recorder`] that records dispatches into one command encoder.
//!
//! Bind group layouts are explicit and shared by every pipeline of a kernel, so a bind group
//! built once serves the one-row (decode) and the many-row (prefill) variants alike.

use burn::backend::wgpu::wgpu;

use crate::format::WeightFormat;
use crate::gpu::{BufferView, Gpu, ParamSpace, Tuning};
use crate::profile::Passes;
use crate::{KernelError, wgsl};

/// One binding of a kernel, in binding order; its WGSL declaration is generated from this.
#[derive(Debug)]
pub(crate) enum Slot {
    /// `var<uniform> name: ty` (a [`wgsl::WgslStruct`]).
    Uniform(&'static str, &'static str),
    /// `var<storage, read> name: ty`.
    Read(&'static str, &'static str),
    /// `var<storage, read_write> name: ty`.
    ReadWrite(&'static str, &'static str),
    /// `var<storage, read> name: array<u32>`: a weight tensor in one of the [`WeightFormat`]s.
    /// `dot`: the kernel multiplies by its rows (`lib/row_dot.wgsl` is instantiated for it).
    Weights(&'static str, bool),
}

impl Slot {
    fn name(&self) -> &'static str {
        match self {
            Slot::Uniform(name, _) | Slot::Read(name, _) | Slot::ReadWrite(name, _) | Slot::Weights(name, _) => name,
        }
    }

    /// The binding's WGSL declaration; `params`: where [`Slot::Uniform`]s go.
    fn declaration(&self, index: usize, params: ParamSpace) -> String {
        let (space, name, ty) = match self {
            Slot::Uniform(name, ty) if params == ParamSpace::Uniform => ("uniform", name, *ty),
            Slot::Uniform(name, ty) => ("storage, read", name, *ty),
            Slot::Read(name, ty) => ("storage, read", name, *ty),
            Slot::ReadWrite(name, ty) => ("storage, read_write", name, *ty),
            Slot::Weights(name, _) => ("storage, read", name, "array<u32>"),
        };
        format!("@group(0) @binding({index}) var<{space}> {name}: {ty};\n")
    }

    fn layout_entry(&self, index: usize, params: ParamSpace) -> wgpu::BindGroupLayoutEntry {
        let ty = match self {
            Slot::Uniform(..) if params == ParamSpace::Uniform => wgpu::BufferBindingType::Uniform,
            Slot::Uniform(..) | Slot::Read(..) | Slot::Weights(..) => {
                wgpu::BufferBindingType::Storage { read_only: true }
            }
            Slot::ReadWrite(..) => wgpu::BufferBindingType::Storage { read_only: false },
        };
        wgpu::BindGroupLayoutEntry {
            binding: index as u32,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer { ty, has_dynamic_offset: false, min_binding_size: None },
            count: None,
        }
    }
}

/// A layer kernel: one file of `shaders/`, its structs and its bindings.
#[derive(Debug)]
pub(crate) struct KernelSpec {
    /// The file's stem (`attn_qkv`); labels and cache keys.
    pub name: &'static str,
    /// The file's text.
    pub source: &'static str,
    /// WGSL declarations of the structs its uniforms use.
    pub structs: &'static [&'static str],
    /// Whether it fuses an RMSNorm (`lib/rms.wgsl`).
    pub rms: bool,
    /// Library files it needs beyond the shared ones, in order (after the weight readers).
    pub lib: &'static [&'static str],
    /// Bytes of workgroup memory its own file declares (the staged input of `lib/rms.wgsl` gets
    /// what is left of the device's limit).
    pub workgroup_bytes: u32,
    /// Whether the file declares its own bindings and constants and is used as it is (the
    /// decode-tail shaders, which Burn's custom-kernel route also loads).
    pub declared: bool,
    pub slots: &'static [Slot],
}

/// What a pipeline is compiled for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PipelineKey {
    kernel: &'static str,
    tuning: Tuning,
    rows: u32,
    stage_cols4: u32,
    formats: Vec<WeightFormat>,
}

impl KernelSpec {
    fn weight_slots(&self) -> impl Iterator<Item = (&'static str, bool)> + '_ {
        self.slots.iter().filter_map(|slot| match slot {
            Slot::Weights(name, dot) => Some((*name, *dot)),
            _ => None,
        })
    }

    /// The module's WGSL for a tuning, `rows` x-rows per lane group, the staged input width
    /// (`STAGE_COLS4`, see `lib/rms.wgsl`) and the weight bindings' formats (in binding order).
    pub(crate) fn module_source(
        &self,
        tuning: Tuning,
        rows: u32,
        stage_cols4: u32,
        formats: &[WeightFormat],
    ) -> String {
        if self.declared {
            return self.source.to_string();
        }
        let mut text = wgsl::constants(tuning.workgroup, tuning.lanes_per_row, rows, stage_cols4);
        for declaration in self.structs {
            text.push_str(declaration);
        }
        text.push('\n');
        for (index, slot) in self.slots.iter().enumerate() {
            text.push_str(&slot.declaration(index, tuning.params));
        }
        text.push('\n');
        let weights: Vec<_> =
            self.weight_slots().zip(formats).map(|((name, dot), &format)| (name, format, dot)).collect();
        text.push_str(&wgsl::library(self.rms, &weights));
        for lib in self.lib {
            text.push_str(lib);
        }
        text.push_str(self.source);
        text
    }
}

/// A kernel ready to bind and dispatch on one GPU, for given weight formats.
pub(crate) struct Kernel {
    gpu: Gpu,
    spec: &'static KernelSpec,
    layout: wgpu::BindGroupLayout,
    formats: Vec<WeightFormat>,
}

impl Kernel {
    /// `formats`: one per weight binding, in binding order.
    pub(crate) fn new(gpu: &Gpu, spec: &'static KernelSpec, formats: &[WeightFormat]) -> Result<Self, KernelError> {
        let weight_slots = spec.weight_slots().count();
        if formats.len() != weight_slots {
            return Err(KernelError::invalid(
                "formats",
                format!("{} has {weight_slots} weight bindings, got {} formats", spec.name, formats.len()),
            ));
        }
        let layout = gpu
            .layouts()
            .entry(spec.name)
            .or_insert_with(|| {
                let params = gpu.tuning().params;
                let entries: Vec<_> =
                    spec.slots.iter().enumerate().map(|(i, slot)| slot.layout_entry(i, params)).collect();
                gpu.device().create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                    label: Some(spec.name),
                    entries: &entries,
                })
            })
            .clone();
        Ok(Self { gpu: gpu.clone(), spec, layout, formats: formats.to_vec() })
    }

    /// The pipeline for `rows` x-rows per lane group, compiled on first use; for a kernel that
    /// normalises its input (`rms`), `input_cols` is the input's width, staged in workgroup
    /// memory when it fits.
    pub(crate) fn pipeline(&self, rows: u32, input_cols: u32) -> wgpu::ComputePipeline {
        let tuning = self.gpu.tuning();
        let stage_cols4 = if self.spec.rms {
            let limit = self.gpu.limits().max_compute_workgroup_storage_size.saturating_sub(self.spec.workgroup_bytes);
            wgsl::stage_cols4(tuning.workgroup, rows, input_cols, limit)
        } else {
            0
        };
        let key = PipelineKey { kernel: self.spec.name, tuning, rows, stage_cols4, formats: self.formats.clone() };
        if let Some(pipeline) = self.gpu.pipelines().get(&key) {
            return pipeline.clone();
        }
        let source = self.spec.module_source(tuning, rows, stage_cols4, &self.formats);
        let device = self.gpu.device();
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(self.spec.name),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(self.spec.name),
            bind_group_layouts: &[Some(&self.layout)],
            immediate_size: 0,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(self.spec.name),
            layout: Some(&layout),
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        self.gpu.pipelines().insert(key, pipeline.clone());
        pipeline
    }

    /// A bind group of `buffers`, one per binding in order. Checks each against the device's
    /// limits (binding size, offset alignment), so a tensor too large for one binding is an
    /// error naming the binding, never a validation failure later.
    pub(crate) fn bind(&self, buffers: &[&BufferView]) -> Result<wgpu::BindGroup, KernelError> {
        let spec = self.spec;
        if buffers.len() != spec.slots.len() {
            return Err(KernelError::invalid(
                "buffers",
                format!("{} has {} bindings, got {} buffers", spec.name, spec.slots.len(), buffers.len()),
            ));
        }
        let limits = self.gpu.limits();
        for (slot, view) in spec.slots.iter().zip(buffers) {
            let (max, alignment) = match slot {
                Slot::Uniform(..) if self.gpu.tuning().params == ParamSpace::Uniform => {
                    (limits.max_uniform_buffer_binding_size, limits.min_uniform_buffer_offset_alignment)
                }
                _ => (limits.max_storage_buffer_binding_size, limits.min_storage_buffer_offset_alignment),
            };
            if view.size > max {
                return Err(KernelError::TooLarge {
                    what: format!("{}'s binding '{}'", spec.name, slot.name()),
                    bytes: view.size,
                    limit: max,
                });
            }
            if view.size == 0 || !view.offset.is_multiple_of(u64::from(alignment)) {
                return Err(KernelError::invalid(
                    slot.name(),
                    format!("{}: {} bytes at offset {} (alignment {alignment})", spec.name, view.size, view.offset),
                ));
            }
        }
        let entries: Vec<_> = buffers
            .iter()
            .enumerate()
            .map(|(i, view)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: &view.buffer,
                    offset: view.offset,
                    size: wgpu::BufferSize::new(view.size),
                }),
            })
            .collect();
        Ok(self.gpu.device().create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(spec.name),
            layout: &self.layout,
            entries: &entries,
        }))
    }
}

/// Records compute dispatches and copies into one command encoder, for one queue submission.
pub struct Recorder {
    // Declared before the encoder: a pass must end before its encoder goes.
    pass: Option<wgpu::ComputePass<'static>>,
    encoder: wgpu::CommandEncoder,
    gpu: Gpu,
    dispatches: u32,
    /// The timestamps around each dispatch, when the GPU profiles (`profile.rs`).
    profile: Option<Passes>,
}

impl Recorder {
    /// An empty recording for `gpu`.
    pub fn new(gpu: &Gpu) -> Self {
        let encoder = gpu.device().create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("nucleus") });
        Self { gpu: gpu.clone(), encoder, pass: None, dispatches: 0, profile: Passes::new(gpu) }
    }

    /// Records one dispatch of `grid` workgroups of `kernel`'s `pipeline`.
    pub(crate) fn dispatch(
        &mut self,
        kernel: &'static str,
        pipeline: &wgpu::ComputePipeline,
        group: &wgpu::BindGroup,
        grid: [u32; 3],
    ) {
        let max = self.gpu.limits().max_compute_workgroups_per_dimension;
        assert!(grid.iter().all(|&n| n <= max), "grid {grid:?} exceeds {max} workgroups per dimension");
        if grid.contains(&0) {
            return;
        }
        if let Some(passes) = self.profile.as_mut() {
            // A pass of its own, timed at its start and end (past the query set's capacity,
            // untimed: never inside a timed one).
            let timestamp_writes = passes.next(kernel);
            self.pass = None;
            self.pass = Some(
                self.encoder
                    .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some(kernel), timestamp_writes })
                    .forget_lifetime(),
            );
        }
        let pass = self.pass.get_or_insert_with(|| {
            self.encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("nucleus"), timestamp_writes: None })
                .forget_lifetime()
        });
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, group, &[]);
        pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
        self.dispatches += 1;
        self.gpu.count_dispatches(1);
    }

    /// Records a copy of `size` bytes from `from` to `to` at `to_offset` (after the dispatches
    /// recorded so far).
    pub fn copy(&mut self, from: &wgpu::Buffer, from_offset: u64, to: &wgpu::Buffer, to_offset: u64, size: u64) {
        self.pass = None;
        self.encoder.copy_buffer_to_buffer(from, from_offset, to, to_offset, size);
    }

    /// Records zeroing the whole of `buffer` (after what is recorded so far).
    pub fn clear(&mut self, buffer: &wgpu::Buffer) {
        self.pass = None;
        self.encoder.clear_buffer(buffer, 0, None);
    }

    /// Dispatches recorded so far.
    pub fn dispatches(&self) -> u32 {
        self.dispatches
    }

    /// The recorded commands.
    pub fn finish(mut self) -> wgpu::CommandBuffer {
        self.pass = None;
        if let Some(passes) = self.profile.take() {
            passes.finish(&self.gpu, &mut self.encoder);
        }
        self.encoder.finish()
    }
}
