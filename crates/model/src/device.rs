//! The device a model runs on: the CPU engine's threads, or Burn's device, and on wgpu the
//! [`Gpu`] the fused path records on (the `gpu` feature).

#[cfg(feature = "gpu")]
use burn::tensor::Device;
#[cfg(feature = "gpu")]
use nucleus_kernels::Gpu;

#[cfg(feature = "gpu")]
use crate::ModelError;

/// Where a model runs: the CPU engine (no Burn device), or Burn's device with its GPU handles
/// when it is a wgpu device set up by this project.
#[derive(Clone, Debug)]
pub struct ModelDevice {
    /// `None` for the CPU engine ([`ModelDevice::cpu`]).
    #[cfg(feature = "gpu")]
    device: Option<Device>,
    #[cfg(feature = "gpu")]
    gpu: Option<Gpu>,
}

impl ModelDevice {
    /// The CPU engine ([`Path::Cpu`](crate::Path::Cpu)): our kernels on this machine's cores (all
    /// of them natively, the calling thread in the browser). Starts nothing; cannot fail.
    pub fn cpu() -> Self {
        Self {
            #[cfg(feature = "gpu")]
            device: None,
            #[cfg(feature = "gpu")]
            gpu: None,
        }
    }

    /// Burn's pure-Rust CPU backend (flex; the `burn-ops` feature): the Burn-op path on the CPU,
    /// a reference the CPU engine is checked against.
    #[cfg(feature = "burn-ops")]
    pub fn burn_cpu() -> Self {
        Self { device: Some(Device::flex()), gpu: None }
    }

    /// Burn's wgpu backend, started once per process ([`nucleus_kernels::gpu::init`]).
    #[cfg(all(feature = "gpu", not(target_family = "wasm")))]
    pub fn wgpu() -> Result<Self, ModelError> {
        let (device, gpu) = nucleus_kernels::gpu::init()?;
        Ok(Self { device: Some(device), gpu: Some(gpu) })
    }

    /// As [`ModelDevice::wgpu`], asynchronously (the browser).
    #[cfg(feature = "gpu")]
    pub async fn wgpu_async() -> Result<Self, ModelError> {
        let (device, gpu) = nucleus_kernels::gpu::init_async().await?;
        Ok(Self { device: Some(device), gpu: Some(gpu) })
    }

    /// A device from its parts (`gpu` must be the handles of `device`'s wgpu setup).
    #[cfg(feature = "gpu")]
    pub fn from_parts(device: Device, gpu: Option<Gpu>) -> Self {
        Self { device: Some(device), gpu }
    }

    /// Burn's device; `None` on the CPU engine.
    #[cfg(feature = "gpu")]
    pub fn burn(&self) -> Option<&Device> {
        self.device.as_ref()
    }

    #[cfg(feature = "gpu")]
    pub fn gpu(&self) -> Option<&Gpu> {
        self.gpu.as_ref()
    }

    /// Whether this is the CPU engine's device.
    pub fn is_cpu_engine(&self) -> bool {
        #[cfg(feature = "gpu")]
        return self.device.is_none();
        #[cfg(not(feature = "gpu"))]
        true
    }

    /// The device as a person reads it: the CPU engine's threads and vector instructions ("the
    /// CPU (2 threads, AVX2)"); a wgpu adapter's name and API, and when it emulates a GPU on the
    /// CPU, that it does ("llvmpipe (LLVM 19.1.7, 256 bits), Vulkan, a CPU emulation of a GPU:
    /// expect a few tokens per second"); Burn's CPU backend.
    pub fn describe(&self) -> String {
        if self.is_cpu_engine() {
            let threads = nucleus_cpu::threads();
            return format!(
                "the CPU ({threads} thread{}, {})",
                if threads == 1 { "" } else { "s" },
                nucleus_cpu::simd()
            );
        }
        #[cfg(feature = "gpu")]
        if let Some(gpu) = &self.gpu {
            let info = gpu.adapter_info();
            let emulated = if self.is_cpu_adapter() {
                ", a CPU emulation of a GPU: expect a few tokens per second, and speeds that say little about a real GPU"
            } else {
                ""
            };
            return format!("{}, {:?}{emulated}", info.name, info.backend);
        }
        "the CPU (Burn's flex backend, no GPU)".to_string()
    }

    /// Whether the wgpu adapter runs on the CPU (lavapipe, SwiftShader, WARP); false elsewhere.
    pub fn is_cpu_adapter(&self) -> bool {
        #[cfg(feature = "gpu")]
        return self
            .gpu
            .as_ref()
            .is_some_and(|gpu| gpu.adapter_info().device_type == burn::backend::wgpu::wgpu::DeviceType::Cpu);
        #[cfg(not(feature = "gpu"))]
        false
    }
}
