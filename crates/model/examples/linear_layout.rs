//! Times the model's matmul shapes on the wgpu backend (any Vulkan driver: `VK_ICD_FILENAMES`
//! picks lavapipe or SwiftShader):
//! - a decode-sized linear layer two ways: the weight as stored in GGUF (`[out, in]`, multiplied
//!   through a transposed view) and pre-transposed (`[in, out]`);
//! - the linear layers and the attention scores at 1, 5 and 37 rows (prefill sizes).
//!
//! `cargo run --release -p nucleus-model --example linear_layout`
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
    let random = |shape: [usize; 2]| Tensor::<2>::random(shape, Distribution::Default, (&device, DType::F32));
    for (out, inp) in [(576, 576), (1536, 576), (576, 1536), (49152, 576)] {
        let (w, wt, x) = (random([out, inp]), random([inp, out]), random([1, inp]));
        let iterations = if out > 10_000 { 5 } else { 30 };
        let view = time_ms(&device, iterations, || x.clone().matmul(w.clone().transpose()));
        let contiguous = time_ms(&device, iterations, || x.clone().matmul(wt.clone()));
        println!("[1,{inp}] x [{out},{inp}]^T: transposed view {view:.2} ms, pre-transposed {contiguous:.2} ms");
    }
    for rows in [1, 5, 37] {
        for (out, inp) in [(576, 576), (1536, 576), (576, 1536)] {
            let (w, x) = (random([out, inp]), random([rows, inp]));
            let ms = time_ms(&device, 5, || x.clone().matmul(w.clone().transpose()));
            println!("linear [{rows},{inp}] x [{out},{inp}]^T: {ms:.2} ms");
        }
        // SmolLM2's attention: 3 key/value heads of 3 query heads each, head dim 64, 40 positions.
        let q = Tensor::<3>::random([3, 3 * rows, 64], Distribution::Default, (&device, DType::F32));
        let k = Tensor::<3>::random([3, 40, 64], Distribution::Default, (&device, DType::F32));
        let ms = time_ms(&device, 5, || q.clone().matmul(k.clone().swap_dims(1, 2)));
        println!("scores [3,{},64] x [3,64,40]: {ms:.2} ms", 3 * rows);
    }
}
