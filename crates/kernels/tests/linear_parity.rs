//! `linear.wgsl` against `reference::linear`: every output within the rounding bound of an f32
//! sum, for both weight layouts, row counts around the 4 rows an invocation computes, and sizes
//! that are not multiples of the 64-wide workgroup.

mod common;

use burn::tensor::{Device, Tensor, TensorData};
use common::*;
use nucleus_kernels::{KernelError, WeightLayout, linear, reference};

const LAYOUTS: [WeightLayout; 2] = [WeightLayout::OutputsByInputs, WeightLayout::InputsByOutputs];

fn matrix(values: &[f32], shape: [usize; 2], device: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(values.to_vec(), shape), device)
}

fn weight_shape(layout: WeightLayout, outputs: usize, inputs: usize) -> [usize; 2] {
    match layout {
        WeightLayout::OutputsByInputs => [outputs, inputs],
        WeightLayout::InputsByOutputs => [inputs, outputs],
    }
}

fn read(tensor: Tensor<2>) -> Vec<f32> {
    block_on(tensor.into_data_async()).expect("read y").as_slice::<f32>().expect("f32").to_vec()
}

/// The GPU's `[rows, outputs]` against the reference: each output within `(n - 1)·u·Σ|x·w|`
/// (+ a denormal floor), the bound on rounding in any order of an n-term f32 sum.
fn assert_parity(x: &[f32], weight: &[f32], rows: usize, inputs: usize, layout: WeightLayout, what: &str) {
    let outputs = weight.len() / inputs;
    let device = device();
    let y = linear(
        matrix(x, [rows, inputs], &device),
        matrix(weight, weight_shape(layout, outputs, inputs), &device),
        layout,
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(y.dims(), [rows, outputs], "{what}: shape");
    let gpu = read(y);
    let cpu = reference::linear(x, weight, rows, inputs, layout);
    let w = |o: usize, i: usize| match layout {
        WeightLayout::OutputsByInputs => weight[o * inputs + i],
        WeightLayout::InputsByOutputs => weight[i * outputs + o],
    };
    for row in 0..rows {
        for o in 0..outputs {
            let magnitude: f64 = (0..inputs).map(|i| (x[row * inputs + i] as f64 * w(o, i) as f64).abs()).sum();
            let bound = inputs.saturating_sub(1) as f64 * (f32::EPSILON as f64 / 2.0) * magnitude * 1.01 + 1e-30;
            let (g, c) = (gpu[row * outputs + o] as f64, cpu[row * outputs + o] as f64);
            assert!(
                (g - c).abs() <= bound.max(c.abs() * f32::EPSILON as f64),
                "{what}: y[{row}, {o}] = {g}, reference {c}, bound {bound}"
            );
        }
    }
}

#[test]
fn random_matrices_of_the_model_and_odd_sizes() {
    let mut rng = Rng::new(5);
    // SmolLM2's projections (q/o, k/v, gate/up, down), and sizes that do not fill a workgroup.
    for (inputs, outputs) in [(576, 576), (576, 192), (576, 1536), (1536, 576), (7, 3), (1, 1), (65, 130)] {
        for rows in [1, 2, 3, 4, 5, 8, 37] {
            let x = random_logits(&mut rng, rows * inputs, 1.0);
            let weight = random_logits(&mut rng, inputs * outputs, 0.05);
            for layout in LAYOUTS {
                assert_parity(&x, &weight, rows, inputs, layout, &format!("{rows}x{inputs} -> {outputs}, {layout:?}"));
            }
        }
    }
}

/// A weight with a single 1 picks one input for one output: the result is exact, so any
/// indexing mistake (a wrong row, column, or layout) shows.
#[test]
fn one_hot_weights_select_exactly_one_input() {
    let (rows, inputs, outputs) = (6, 70, 67);
    let x: Vec<f32> = (0..rows * inputs).map(|n| n as f32 + 0.5).collect();
    for layout in LAYOUTS {
        for (output, input) in [(0, 0), (66, 69), (64, 3), (5, 64)] {
            let mut weight = vec![0.0; inputs * outputs];
            match layout {
                WeightLayout::OutputsByInputs => weight[output * inputs + input] = 1.0,
                WeightLayout::InputsByOutputs => weight[input * outputs + output] = 1.0,
            }
            let device = device();
            let y = read(
                linear(
                    matrix(&x, [rows, inputs], &device),
                    matrix(&weight, weight_shape(layout, outputs, inputs), &device),
                    layout,
                )
                .unwrap(),
            );
            for row in 0..rows {
                for o in 0..outputs {
                    let expected = if o == output { x[row * inputs + input] } else { 0.0 };
                    assert_eq!(y[row * outputs + o], expected, "{layout:?}, W[{output}, {input}] = 1: y[{row}, {o}]");
                }
            }
        }
    }
}

/// Under fusion the kernel is one opaque operation between lazy element-wise work: what feeds it
/// and what follows it run around it, in order.
#[test]
fn element_wise_work_before_and_after_is_applied() {
    let mut rng = Rng::new(9);
    let (rows, inputs, outputs) = (3, 40, 50);
    let x = random_logits(&mut rng, rows * inputs, 1.0);
    let weight = random_logits(&mut rng, outputs * inputs, 0.2);
    let device = device();
    let scaled_x = matrix(&x, [rows, inputs], &device) * 2.0 + 1.0;
    let y = linear(scaled_x, matrix(&weight, [outputs, inputs], &device), WeightLayout::OutputsByInputs).unwrap() - 3.0;
    let gpu = read(y);
    let x_host: Vec<f32> = x.iter().map(|v| v * 2.0 + 1.0).collect();
    let cpu = reference::linear(&x_host, &weight, rows, inputs, WeightLayout::OutputsByInputs);
    for (g, c) in gpu.iter().zip(&cpu) {
        assert!(close(*g as f64, (c - 3.0) as f64, 1e-5, 1e-4), "{g} vs {}", c - 3.0);
    }
}

#[test]
fn mismatched_shapes_and_other_devices_are_refused() {
    let device = device();
    let x = matrix(&[1.0; 8], [2, 4], &device);
    let error = linear(x.clone(), matrix(&[1.0; 15], [3, 5], &device), WeightLayout::OutputsByInputs).unwrap_err();
    assert!(matches!(&error, KernelError::InvalidParameter { parameter, .. } if parameter == "weight"), "{error}");
    let error = linear(x.clone(), matrix(&[1.0; 12], [3, 4], &device), WeightLayout::InputsByOutputs).unwrap_err();
    assert!(matches!(&error, KernelError::InvalidParameter { parameter, .. } if parameter == "weight"), "{error}");
    let cpu = Device::flex();
    let error =
        linear(matrix(&[1.0; 8], [2, 4], &cpu), matrix(&[1.0; 12], [3, 4], &cpu), WeightLayout::OutputsByInputs)
            .unwrap_err();
    assert!(matches!(error, KernelError::UnsupportedInput(_)), "{error}");
}
