//! What the kernels launched through Burn's custom-kernel route share: the `KernelSource`
//! wrapper of a WGSL file, the launch on `CubeBackend`, parameter uploads, and the checks that
//! make a tensor bindable (contiguous, at offset 0, writable when modified in place).
//!
//! The route: a `#[backend_extension(Cube, Fusion)]` trait (the decode tail's `DecodeTailOps`,
//! the linear layer's `LinearOps`) implemented for `CubeBackend`, called from `Tensor` with
//! `into_dispatch` / `Tensor::from_dispatch`. Under fusion each call is one opaque operation: the
//! fused graph before it runs first. A WGSL passthrough module gets wgpu's automatic bind-group
//! layout (every binding is used by `main`). Only wgpu devices are accepted.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use burn::backend::wgpu::{CubeTensor, KernelSource, SourceKernel};
use burn::cubecl::CubeCount;
use burn::cubecl::CubeDim;
use burn::cubecl::ir::attributes::BufferIOAttr;
use burn::cubecl::server::{BufferBinding, Handle, KernelArguments};
use burn::tensor::{DType, Shape};

/// Implements `KernelSource` (and [`WgslKernel`]) for a marker type, from a complete WGSL file.
macro_rules! wgsl_kernel {
    ($kernel:ty, $source:expr, $workgroup_size:expr) => {
        impl burn::backend::wgpu::KernelSource for $kernel {
            fn source(&self) -> burn::backend::wgpu::SourceTemplate {
                // The files have no `{{ }}` placeholders: they are complete WGSL.
                burn::backend::wgpu::SourceTemplate::new($source)
            }

            fn id(&self) -> burn::cubecl::prelude::KernelId {
                burn::cubecl::prelude::KernelId::new::<Self>()
                    .cube_dim(burn::cubecl::CubeDim::new_1d($workgroup_size).0)
            }

            fn lang(&self) -> &'static str {
                "wgsl"
            }
        }

        impl $crate::burn_launch::WgslKernel for $kernel {
            const WORKGROUP_SIZE: u32 = $workgroup_size;
        }
    };
}
pub(crate) use wgsl_kernel;

/// A kernel's `@workgroup_size(N, 1, 1)`, as declared in its file.
pub(crate) trait WgslKernel: KernelSource {
    const WORKGROUP_SIZE: u32;
}

pub(crate) fn words_to_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// A storage buffer holding `words` (parameters and inputs the kernels only read).
pub(crate) fn upload(tensor: &CubeTensor, words: &[u32]) -> Handle {
    tensor.client.create_from_slice(&words_to_bytes(words))
}

/// Like [`upload`], but uploaded once per device and content and then reused, for parameters that
/// repeat from step to step: cubecl submits the work recorded so far before every write to the
/// queue (so that the write cannot overtake it), so a fresh upload per launch would cost a queue
/// submission per launch (per linear layer: 217 per decode token, measured).
pub(crate) fn constant_buffer(tensor: &CubeTensor, words: &[u32]) -> Handle {
    type Key = (burn::cubecl::Device, Vec<u32>);
    static BUFFERS: LazyLock<Mutex<HashMap<Key, Handle>>> = LazyLock::new(Default::default);
    /// Distinct parameter sets kept (shapes × prompt lengths); past it the set starts afresh.
    const MAX_KEPT: usize = 1024;
    let mut buffers = BUFFERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if buffers.len() >= MAX_KEPT {
        buffers.clear();
    }
    buffers.entry((tensor.device.clone(), words.to_vec())).or_insert_with(|| upload(tensor, words)).clone()
}

/// Contiguous, starting at the buffer's first byte (a view with an offset is copied: storage
/// bindings need aligned offsets and the shaders index from 0).
pub(crate) fn readable(tensor: CubeTensor) -> CubeTensor {
    let tensor = burn::backend::wgpu::into_contiguous(tensor);
    if tensor.handle.offset_start.unwrap_or(0) != 0 { tensor.copy() } else { tensor }
}

/// Like [`readable`], and not shared with any other tensor, so it can be modified in place.
pub(crate) fn writable(tensor: CubeTensor) -> CubeTensor {
    let tensor = readable(tensor);
    if tensor.can_mut() { tensor } else { tensor.copy() }
}

pub(crate) fn zeroed_output(like: &CubeTensor, words: usize) -> CubeTensor {
    let handle = like.client.create_from_slice(&vec![0u8; words * 4]);
    CubeTensor::new_contiguous(like.client.clone(), like.device.clone(), Shape::new([words]), handle, DType::F32)
}

pub(crate) fn empty_like(like: &CubeTensor) -> CubeTensor {
    let shape = like.meta.shape().clone();
    let handle = like.client.empty(shape.num_elements() * 4);
    CubeTensor::new_contiguous(like.client.clone(), like.device.clone(), shape, handle, DType::F32)
}

pub(crate) fn binding(handle: &Handle) -> BufferBinding {
    handle.clone().binding()
}

pub(crate) fn launch<K: WgslKernel>(
    tensor: &CubeTensor,
    kernel: K,
    count: CubeCount,
    buffers: Vec<(BufferBinding, BufferIOAttr)>,
) {
    let arguments = buffers
        .into_iter()
        .fold(KernelArguments::new(), |arguments, (buffer, io)| arguments.with_buffer_io(buffer, io));
    tensor.client.launch(Box::new(SourceKernel::new(kernel, CubeDim::new_1d(K::WORKGROUP_SIZE))), count, arguments);
}
