//! The device a model runs on: Burn's device, and on wgpu the [`Gpu`] the fused path records on.

use burn::tensor::Device;
use nucleus_kernels::Gpu;

use crate::ModelError;

/// Burn's device, with its GPU handles when it is a wgpu device set up by this project.
#[derive(Clone, Debug)]
pub struct ModelDevice {
    device: Device,
    gpu: Option<Gpu>,
}

impl ModelDevice {
    /// Burn's pure-Rust CPU backend (flex; the `burn-ops` feature).
    #[cfg(feature = "burn-ops")]
    pub fn cpu() -> Self {
        Self { device: Device::flex(), gpu: None }
    }

    /// Burn's wgpu backend, started once per process ([`nucleus_kernels::gpu::init`]).
    #[cfg(not(target_family = "wasm"))]
    pub fn wgpu() -> Result<Self, ModelError> {
        let (device, gpu) = nucleus_kernels::gpu::init()?;
        Ok(Self { device, gpu: Some(gpu) })
    }

    /// As [`ModelDevice::wgpu`], asynchronously (the browser).
    pub async fn wgpu_async() -> Result<Self, ModelError> {
        let (device, gpu) = nucleus_kernels::gpu::init_async().await?;
        Ok(Self { device, gpu: Some(gpu) })
    }

    /// A device from its parts (`gpu` must be the handles of `device`'s wgpu setup).
    pub fn from_parts(device: Device, gpu: Option<Gpu>) -> Self {
        Self { device, gpu }
    }

    pub fn burn(&self) -> &Device {
        &self.device
    }

    pub fn gpu(&self) -> Option<&Gpu> {
        self.gpu.as_ref()
    }

    /// The device as a person reads it: the adapter's name and API, and when it emulates a GPU
    /// on the CPU, that it does ("llvmpipe (LLVM 19.1.7, 256 bits), Vulkan, a CPU emulation of a
    /// GPU: expect a few tokens per second"); Burn's CPU backend otherwise.
    pub fn describe(&self) -> String {
        match &self.gpu {
            None => "the CPU (Burn's flex backend, no GPU)".to_string(),
            Some(gpu) => {
                let info = gpu.adapter_info();
                let emulated = if self.is_cpu_adapter() {
                    ", a CPU emulation of a GPU: expect a few tokens per second, and speeds that say little about a real GPU"
                } else {
                    ""
                };
                format!("{}, {:?}{emulated}", info.name, info.backend)
            }
        }
    }

    /// Whether the wgpu adapter runs on the CPU (lavapipe, SwiftShader, WARP); false elsewhere.
    pub fn is_cpu_adapter(&self) -> bool {
        self.gpu
            .as_ref()
            .is_some_and(|gpu| gpu.adapter_info().device_type == burn::backend::wgpu::wgpu::DeviceType::Cpu)
    }
}
