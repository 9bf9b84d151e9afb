//! Measures a decode-sized linear layer two ways on the wgpu backend: the weight as stored in
//! GGUF (`[out, in]`, multiplied through a transposed view) and pre-transposed (`[in, out]`).
//! `cargo run --release -p nucleus-model --example linear_layout`
use burn::tensor::{DType, Device, Distribution, Tensor};

fn time_ms(device: &Device, iterations: usize, mut f: impl FnMut() -> Tensor<2>) -> f64 {
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
    for (out, inp) in [(576, 576), (1536, 576), (576, 1536), (49152, 576)] {
        let w = Tensor::<2>::random([out, inp], Distribution::Default, (&device, DType::F32));
        let wt = Tensor::<2>::random([inp, out], Distribution::Default, (&device, DType::F32));
        let x = Tensor::<2>::random([1, inp], Distribution::Default, (&device, DType::F32));
        let iterations = if out > 10_000 { 5 } else { 30 };
        let view = time_ms(&device, iterations, || x.clone().matmul(w.clone().transpose()));
        let contiguous = time_ms(&device, iterations, || x.clone().matmul(wt.clone()));
        println!("[1,{inp}] x [{out},{inp}]^T: transposed view {view:.2} ms, pre-transposed {contiguous:.2} ms");
    }
}
