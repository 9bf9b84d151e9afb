//! A long session on the fused path (native wgpu): generations of every kind (lengths, stop
//! strings, aborts, chat, sampling) one after another leave the GPU buffers the engine holds and
//! the process's memory flat after the first few; and what it holds is what its memory plan said.

use nucleus_engine::{Engine, GenerateRequest, LoadOptions, Prompt};
use nucleus_gguf::GgufFile;
use nucleus_model::MemoryPlan;
use nucleus_sampler::SamplingParams;
use nucleus_tests::{model_bytes, wgpu_device};

/// Resident memory of this process, from /proc (Linux), in bytes.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("resident pages");
    pages * 4096
}

/// The `i`th generation of the session: a mix of prompts, lengths, stop strings and aborts.
fn request(i: usize) -> (GenerateRequest, Option<usize>) {
    let prompts = ["The capital of France is", "Once upon a time", "def fibonacci(n):"];
    let mut request = GenerateRequest::new(Prompt::Text(prompts[i % prompts.len()].into()));
    request.max_tokens = 1 + i % 3;
    request.sampling = if i.is_multiple_of(2) {
        SamplingParams::greedy()
    } else {
        SamplingParams { temperature: 0.8, top_p: 0.9, seed: i as u64, ..SamplingParams::default() }
    };
    if i % 4 == 1 {
        request.stop = vec![".".into(), "\n".into()];
    }
    // Every fifth is aborted after its first step.
    let abort_after = (i % 5 == 4).then_some(1);
    (request, abort_after)
}

/// What the fused path holds after load is what [`MemoryPlan::fused`] planned (checked before
/// the upload): the weights exactly, the scratch and decode-tail buffers (the step parameters'
/// offset planned at WebGPU's largest alignment, so up to 256 bytes more than some adapters use)
/// and the KV cache as allocated so far; the plan leaves out only the kernels' small parameter
/// buffers (a few dozen bytes per kernel and block: 3,164 bytes for SmolLM2-135M on lavapipe).
fn the_memory_plan_is_what_was_allocated(engine: &Engine, live_bytes: u64) {
    let file = GgufFile::parse(model_bytes()).unwrap();
    let plan = MemoryPlan::fused(&file, engine.model().config(), engine.cache().capacity()).unwrap();
    assert_eq!(engine.model().memory().weight_bytes, plan.weight_bytes(), "the weights as planned");
    let planned = plan.weight_bytes() + plan.scratch_bytes() + plan.rope_bytes() + engine.cache().device_bytes();
    assert!(
        (planned.saturating_sub(256)..=planned + (16 << 10)).contains(&live_bytes),
        "live {live_bytes} bytes against {planned} planned (weights {}, scratch {}, KV cache {})",
        plan.weight_bytes(),
        plan.scratch_bytes(),
        engine.cache().device_bytes()
    );
}

#[test]
fn a_long_session_leaves_gpu_buffers_and_memory_flat() {
    let device = wgpu_device();
    let gpu = device.gpu().expect("a wgpu device").clone();
    let options = LoadOptions { context_length: Some(256), ..LoadOptions::default() };
    let mut engine = Engine::load(model_bytes(), &device, options).unwrap();
    the_memory_plan_is_what_was_allocated(&engine, gpu.counters().live_bytes);
    let generations = std::env::var("NUCLEUS_SOAK_GENERATIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(12);
    let warm_up = 4;
    let mut figures = Vec::new();
    for i in 0..generations {
        let (request, abort_after) = request(i);
        let mut generation = engine.generate(request).unwrap();
        let mut steps = 0;
        while pollster::block_on(generation.next_step()).unwrap().is_some() {
            steps += 1;
            if abort_after == Some(steps) {
                generation.stop();
            }
        }
        let counters = gpu.counters();
        figures.push((counters.live_buffers, counters.live_bytes, resident_bytes()));
    }
    let (buffers, bytes, rss) = figures[warm_up - 1];
    let (last_buffers, last_bytes, last_rss) = *figures.last().unwrap();
    println!(
        "[soak] {generations} generations: live GPU buffers {buffers} -> {last_buffers}, bytes {bytes} -> {last_bytes}, \
         resident memory {:.1} -> {:.1} MiB (after generation {warm_up} -> after the last)",
        rss as f64 / 1048576.0,
        last_rss as f64 / 1048576.0
    );
    assert_eq!((last_buffers, last_bytes), (buffers, bytes), "the engine's GPU buffers grew: {figures:?}");
    // Allocators keep some slack; a leak of one step's buffers or a logits row each time would
    // pass this in a few generations.
    let growth = last_rss.saturating_sub(rss);
    assert!(growth < 16 << 20, "resident memory grew {growth} bytes over {} generations", generations - warm_up);
}
