//! `linear.wgsl`: the model's linear layers without workgroup barriers, for wgpu adapters that
//! run on the CPU (see the crate documentation's "Linear layers").

#[cfg(feature = "burn-ops")]
mod burn_route;
#[cfg(feature = "burn-ops")]
pub use burn_route::linear;

/// Which kernel computes a model's linear layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LinearKernel {
    /// Burn's matmul: any backend; its tiled kernels suit real GPUs.
    #[default]
    BurnMatmul,
    /// `linear.wgsl` (`linear`, with the `burn-ops` feature): wgpu devices only; several times faster on CPU adapters.
    Wgsl,
}

impl LinearKernel {
    /// `"burn-matmul"` or `"wgsl"`.
    pub fn as_str(self) -> &'static str {
        match self {
            LinearKernel::BurnMatmul => "burn-matmul",
            LinearKernel::Wgsl => "wgsl",
        }
    }

    /// The kernel for a wgpu adapter: [`LinearKernel::Wgsl`] on an adapter that runs on the CPU
    /// (SwiftShader, lavapipe, WARP; in a browser, the fallback adapter), Burn's matmul on GPUs.
    /// Why, with the measurements: ARCHITECTURE.md, "Linear layers on CPU adapters".
    #[cfg(feature = "gpu")]
    pub fn for_adapter(adapter: &burn::backend::wgpu::wgpu::AdapterInfo) -> Self {
        use burn::backend::wgpu::wgpu;
        if adapter.device_type == wgpu::DeviceType::Cpu { LinearKernel::Wgsl } else { LinearKernel::BurnMatmul }
    }
}

/// How a weight matrix `W` (`outputs × inputs`) is stored, row-major.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightLayout {
    /// `[outputs, inputs]`: GGUF's own layout. Each invocation reads its weights contiguously.
    OutputsByInputs,
    /// `[inputs, outputs]`: transposed. Neighbouring invocations read neighbouring weights.
    InputsByOutputs,
}

impl WeightLayout {
    /// `(outputs, inputs)` of a weight of these `dims`.
    pub fn outputs_inputs(self, dims: [usize; 2]) -> (usize, usize) {
        match self {
            WeightLayout::OutputsByInputs => (dims[0], dims[1]),
            WeightLayout::InputsByOutputs => (dims[1], dims[0]),
        }
    }

    /// The number of outputs of a weight of these `dims`.
    pub fn outputs(self, dims: [usize; 2]) -> usize {
        self.outputs_inputs(dims).0
    }
}
