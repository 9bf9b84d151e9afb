//! Weights uploaded as Burn tensors and bound by our kernels in place.
//!
//! Burn's wgpu backend owns the weights: each is a `u32` tensor holding the tensor's bytes (GGUF
//! blocks as they are, or f32 values), allocated by Burn's memory manager on Burn's device. The
//! fused path asks cubecl for the wgpu buffer behind it (`ComputeClient::get_resource`) and keeps
//! two things alive as long as it binds it: a clone of the tensor (so Burn never frees it or
//! reuses its memory for an in-place operation) and the resource (which pins the allocation, so
//! cubecl's memory manager never relocates it).

use burn::backend::Cube;
use burn::backend::wgpu::{AutoCompiler, CubeBackend, WgpuResource};
use burn::cubecl::wgpu::WgpuServer;
use burn::tensor::{DType, Device, Int, Tensor, TensorData};

use crate::KernelError;
use crate::gpu::BufferView;

type Resource = cubecl_runtime::storage::ManagedResource<WgpuResource>;

/// A Burn tensor of raw words, pinned where our kernels bind it.
pub struct PinnedTensor {
    tensor: Tensor<1, Int>,
    view: BufferView,
    _resource: Resource,
}

impl PinnedTensor {
    /// Uploads `bytes` (padded with zeros to a multiple of 4) as a `u32` tensor on Burn's wgpu
    /// `device`, then pins it.
    pub fn upload(device: &Device, bytes: &[u8]) -> Result<Self, KernelError> {
        let mut words = vec![0u32; bytes.len().div_ceil(4)];
        bytemuck::cast_slice_mut::<u32, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        let len = words.len();
        let tensor = Tensor::<1, Int>::from_data(TensorData::new(words, [len]), (device, DType::U32));
        Self::pin(tensor)
    }

    /// Pins an existing `u32` tensor.
    pub fn pin(tensor: Tensor<1, Int>) -> Result<Self, KernelError> {
        if tensor.dtype() != DType::U32 {
            return Err(KernelError::UnsupportedInput(format!(
                "pinned tensors hold u32 words, got {:?}",
                tensor.dtype()
            )));
        }
        if !crate::supports_device(&tensor.device()) {
            return Err(KernelError::UnsupportedInput(format!(
                "the fused path runs on wgpu devices, not {:?}",
                tensor.device()
            )));
        }
        let fused = tensor
            .clone()
            .try_into_primitive::<Cube>()
            .map_err(|e| KernelError::Device(format!("a weight tensor is not a wgpu tensor: {e:?}")))?;
        let cube = fused.client.clone().resolve_tensor_int::<CubeBackend>(fused);
        let resource = cube
            .client
            .get_resource::<WgpuServer<AutoCompiler>>(cube.handle.clone())
            .map_err(|e| KernelError::Device(format!("the buffer of a weight tensor: {e:?}")))?;
        let inner = resource.resource();
        let bytes = (tensor.dims()[0] * 4) as u64;
        if inner.size < bytes {
            return Err(KernelError::Device(format!(
                "a weight tensor's buffer holds {} bytes, not {bytes}",
                inner.size
            )));
        }
        let view = BufferView { buffer: inner.buffer.clone(), offset: inner.offset, size: bytes };
        Ok(Self { tensor, view, _resource: resource })
    }

    /// The bytes as a binding.
    pub fn view(&self) -> &BufferView {
        &self.view
    }

    /// The Burn tensor.
    pub fn tensor(&self) -> &Tensor<1, Int> {
        &self.tensor
    }

    /// Bytes held (a multiple of 4).
    pub fn bytes(&self) -> u64 {
        self.view.size
    }
}
