//! `linear.wgsl` launched on Burn tensors through Burn's custom-kernel route.

use burn::backend::wgpu::{CubeBackend, CubeTensor};
use burn::backend::{Backend, Dispatch, backend_extension, tensor::FloatTensor};
use burn::cubecl::CubeCount;
use burn::cubecl::ir::attributes::BufferIOAttr;
use burn::tensor::Shape;
use burn::tensor::{DType, Tensor};

use super::WeightLayout;
use crate::burn_launch::{binding, constant_buffer, launch, readable, wgsl_kernel};
use crate::{KernelError, supports_device};

/// `y = x Wᵀ` with `linear.wgsl`: `x` is `[rows, inputs]`, `weight` is stored as `layout`
/// says; returns `[rows, outputs]`. Both must be f32 tensors on one wgpu device.
pub fn linear(x: Tensor<2>, weight: Tensor<2>, layout: WeightLayout) -> Result<Tensor<2>, KernelError> {
    let [rows, inputs] = x.dims();
    let (outputs, weight_inputs) = layout.outputs_inputs(weight.dims());
    if weight_inputs != inputs {
        return Err(KernelError::invalid(
            "weight",
            format!("{layout:?} weight of shape {:?} does not take {inputs} inputs", weight.dims()),
        ));
    }
    if rows == 0 || inputs == 0 || outputs == 0 {
        return Err(KernelError::invalid(
            "x",
            format!("empty product: {rows} rows, {inputs} inputs, {outputs} outputs"),
        ));
    }
    // Dispatch limits: 65,535 workgroups per dimension; the shader's indices are u32.
    let largest_index =
        rows.saturating_mul(inputs).max(outputs.saturating_mul(inputs)).max(rows.saturating_mul(outputs));
    let workgroups_y = rows.div_ceil(LINEAR_ROWS_PER_INVOCATION as usize);
    let workgroups_x = outputs.div_ceil(LINEAR_WORKGROUP_SIZE as usize);
    if workgroups_x > 65_535 || workgroups_y > 65_535 || largest_index > u32::MAX as usize {
        return Err(KernelError::invalid(
            "x",
            format!("too large for one dispatch: {rows} rows, {inputs} inputs, {outputs} outputs"),
        ));
    }
    if x.dtype() != DType::F32 || weight.dtype() != DType::F32 {
        return Err(KernelError::UnsupportedInput(format!(
            "linear reads f32 tensors, got {:?} and {:?}",
            x.dtype(),
            weight.dtype()
        )));
    }
    if !supports_device(&x.device()) || x.device() != weight.device() {
        return Err(KernelError::UnsupportedInput(format!(
            "linear runs on one wgpu device, got {:?} and {:?}",
            x.device(),
            weight.device()
        )));
    }
    Ok(Tensor::from_dispatch(Dispatch::linear(x.into_dispatch(), weight.into_dispatch(), layout)))
}

/// The barrier-free linear layer of `linear.wgsl`.
#[backend_extension(Cube, Fusion)]
pub trait LinearOps: Backend {
    /// `x Wᵀ`: `x` is `[rows, inputs]`, `weight` is stored as `layout` says; `[rows, outputs]`.
    #[fusion(dtype = x, shape = linear_shape(x, weight, layout))]
    fn linear(x: FloatTensor<Self>, weight: FloatTensor<Self>, layout: WeightLayout) -> FloatTensor<Self>;
}

/// `[rows, outputs]` of a linear layer.
fn linear_shape(x: &Shape, weight: &Shape, layout: &WeightLayout) -> Shape {
    Shape::new([x.dims::<2>()[0], layout.outputs(weight.dims::<2>())])
}

impl LinearOps for CubeBackend {
    fn linear(x: CubeTensor, weight: CubeTensor, layout: WeightLayout) -> CubeTensor {
        let x = readable(x);
        let weight = readable(weight);
        let [rows, inputs] = x.meta.shape().dims::<2>();
        let outputs = layout.outputs(weight.meta.shape().dims::<2>());
        let y = CubeTensor::new_contiguous(
            x.client.clone(),
            x.device.clone(),
            Shape::new([rows, outputs]),
            x.client.empty(rows * outputs * 4),
            DType::F32,
        );
        let layout_word = match layout {
            WeightLayout::OutputsByInputs => 0,
            WeightLayout::InputsByOutputs => 1,
        };
        let params = constant_buffer(&x, &[rows as u32, inputs as u32, outputs as u32, layout_word]);
        launch(
            &x,
            LinearLayerKernel,
            CubeCount::Static(
                (outputs as u32).div_ceil(LINEAR_WORKGROUP_SIZE),
                (rows as u32).div_ceil(LINEAR_ROWS_PER_INVOCATION),
                1,
            ),
            vec![
                (binding(&x.handle), BufferIOAttr::ReadOnly),
                (binding(&weight.handle), BufferIOAttr::ReadOnly),
                (binding(&y.handle), BufferIOAttr::WriteOnly),
                (binding(&params), BufferIOAttr::ReadOnly),
            ],
        );
        y
    }
}

/// `linear.wgsl`'s workgroup size and rows per invocation.
pub(crate) const LINEAR_WORKGROUP_SIZE: u32 = 64;
pub(crate) const LINEAR_ROWS_PER_INVOCATION: u32 = 4;

/// `linear.wgsl`.
struct LinearLayerKernel;
wgsl_kernel!(LinearLayerKernel, include_str!("../../../../shaders/linear.wgsl"), LINEAR_WORKGROUP_SIZE);
