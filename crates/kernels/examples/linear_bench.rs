//! Times the model's linear layers: Burn's matmul against `linear.wgsl`, for each weight layout,
//! at 1 row (decode) and 5 and 37 rows (prefill). Any Vulkan driver: `VK_ICD_FILENAMES` picks
//! lavapipe or SwiftShader (`/usr/lib/chromium/vk_swiftshader_icd.json`, the browser's).
//!
//! `cargo run --release -p nucleus-kernels --example linear_bench`
use burn::tensor::{DType, Device, Distribution, Tensor};
use nucleus_kernels::{WeightLayout, linear};

/// Median ms per call over `iterations` calls, each followed by the read of its output (the
/// same read for every variant).
fn median_ms(device: &Device, iterations: usize, mut f: impl FnMut() -> Tensor<2>) -> f64 {
    let mut samples = Vec::new();
    for index in 0..iterations + 1 {
        let start = std::time::Instant::now();
        // Touch the values: the read completes when they are used.
        let data = f().into_data();
        std::hint::black_box(data.as_slice::<f32>().expect("f32")[0]);
        if index > 0 {
            samples.push(start.elapsed().as_secs_f64() * 1000.0);
        }
    }
    device.sync().unwrap();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() {
    let device = Device::wgpu_options().init().expect("wgpu");
    let random = |shape: [usize; 2]| Tensor::<2>::random(shape, Distribution::Default, (&device, DType::F32));
    println!("ms per linear layer (median), y = x Wᵀ");
    println!(
        "{:<26} {:>14} {:>14} {:>14} {:>14}",
        "shape", "burn [out,in]ᵀ", "burn [in,out]", "wgsl [out,in]", "wgsl [in,out]"
    );
    for rows in [1, 5, 37] {
        for (outputs, inputs) in [(576, 576), (192, 576), (1536, 576), (576, 1536), (49152, 576)] {
            let (w, wt, x) = (random([outputs, inputs]), random([inputs, outputs]), random([rows, inputs]));
            let iterations = if outputs > 10_000 { 3 } else { 7 };
            let burn_view = median_ms(&device, iterations, || x.clone().matmul(w.clone().transpose()));
            let burn_transposed = median_ms(&device, iterations, || x.clone().matmul(wt.clone()));
            let wgsl =
                median_ms(&device, iterations, || linear(x.clone(), w.clone(), WeightLayout::OutputsByInputs).unwrap());
            let wgsl_transposed = median_ms(&device, iterations, || {
                linear(x.clone(), wt.clone(), WeightLayout::InputsByOutputs).unwrap()
            });
            println!(
                "{:<26} {burn_view:>14.2} {burn_transposed:>14.2} {wgsl:>14.2} {wgsl_transposed:>14.2}",
                format!("[{rows},{inputs}] -> {outputs}")
            );
        }
    }
}
