//! Times the model's matmul shapes at 1 and 5 rows on the wgpu backend (any Vulkan driver:
//! `VK_ICD_FILENAMES` picks lavapipe or SwiftShader).
//! `cargo run --release -p nucleus-model --example op_timing`
use burn::tensor::{DType, Device, Distribution, Tensor};

fn time_ms<const D: usize>(device: &Device, iterations: usize, mut f: impl FnMut() -> Tensor<D>) -> f64 {
    let _ = f().into_data();
    let start = std::time::Instant::now();
    let mut last = None;
    for _ in 0..iterations {
        last = Some(f());
    }
    let _ = last.unwrap().into_data();
    device.sync().unwrap();
    start.elapsed().as_secs_f64() * 1000.0 / iterations as f64
}

fn main() {
    let device = Device::wgpu_options().init().expect("wgpu");
    for rows in [1, 5, 37] {
        for (out, inp) in [(576, 576), (1536, 576), (576, 1536)] {
            let w = Tensor::<2>::random([out, inp], Distribution::Default, (&device, DType::F32));
            let x = Tensor::<2>::random([rows, inp], Distribution::Default, (&device, DType::F32));
            let ms = time_ms(&device, 5, || x.clone().matmul(w.clone().transpose()));
            println!("linear [{rows},{inp}] x [{out},{inp}]^T: {ms:.2} ms");
        }
        // Attention: 3 kv heads, 3 query heads each, head dim 64, 40 cached positions.
        let q = Tensor::<3>::random([3, 3 * rows, 64], Distribution::Default, (&device, DType::F32));
        let k = Tensor::<3>::random([3, 40, 64], Distribution::Default, (&device, DType::F32));
        let ms = time_ms(&device, 5, || q.clone().matmul(k.clone().swap_dims(1, 2)));
        println!("scores [3,{},64] x [3,64,40]: {ms:.2} ms", 3 * rows);
    }
}
