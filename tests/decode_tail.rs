//! The GPU decode tail on the real model (native wgpu, the fused path): decode steps that read
//! back only the candidates give the reference's greedy tokens and top-20, and the same seeded
//! sampled tokens as reading whole rows.

use nucleus_engine::{
    DECODE_TAIL_CANDIDATES, Engine, GenerateRequest, GenerationResult, LinearKernel, LoadOptions, Path, Prompt, Step,
};
use nucleus_sampler::SamplingParams;
use nucleus_tests::{burn_cpu_device, cpu_device, model_bytes, reference, wgpu_device};

/// [`nucleus_tests::run`] on an empty cache.
fn run(engine: &mut Engine, request: GenerateRequest) -> (Vec<Step>, GenerationResult) {
    engine.clear_cache();
    nucleus_tests::run(engine, request)
}

fn engine(decode_tail: bool) -> Engine {
    let mut engine = Engine::load(
        model_bytes(),
        &wgpu_device(),
        LoadOptions { context_length: Some(256), ..LoadOptions::default() },
    )
    .unwrap();
    assert!(engine.decode_tail(), "the wgpu engine uses the decode tail by default");
    engine.set_decode_tail(decode_tail);
    engine
}

#[test]
fn greedy_on_the_gpu_tail_matches_the_reference_and_reads_back_candidates_only() {
    let mut engine = engine(true);
    let bytes_per_step = 16 + 8 * DECODE_TAIL_CANDIDATES;
    for (name, case) in &reference().logit_cases {
        let mut request = GenerateRequest::new(Prompt::Text(case.text.clone()));
        request.sampling = SamplingParams::greedy();
        request.max_tokens = 8;
        let (steps, result) = run(&mut engine, request);
        let ids: Vec<u32> = steps.iter().map(|s| s.id).collect();
        assert_eq!(ids, case.greedy[..ids.len()], "{name}");
        let top: Vec<u32> = steps[0].top.iter().map(|t| t.id).collect();
        let reference_top: Vec<u32> = case.top20.iter().map(|t| t.id).collect();
        assert_eq!(top, reference_top, "{name}: top-20 order");
        let worst = steps[0].top.iter().zip(&case.top20).map(|(a, b)| (a.logit - b.logit).abs()).fold(0.0, f32::max);
        assert!(worst < 1e-3, "{name}: top-20 logits differ by {worst}");
        // The log-probabilities come from the tail's statistics over the whole row: compare the
        // best candidate's with the reference's full-row log-softmax.
        let reference_logits = case.last_logits();
        let max = reference_logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let log_sum_exp = max + reference_logits.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln();
        let expected = case.top20[0].logit as f64 - log_sum_exp;
        assert!(
            (steps[0].logprob - expected).abs() < 1e-3,
            "{name}: logprob {} vs reference {expected}",
            steps[0].logprob
        );
        let transfer = result.transfer;
        println!(
            "[decode tail] {name:8} {} steps on the GPU tail, {} full reads, {:.0} bytes/token",
            transfer.tail_steps,
            transfer.full_read_steps,
            transfer.bytes_per_token()
        );
        assert_eq!((transfer.tail_steps, transfer.full_read_steps), (ids.len(), 0), "{name}");
        assert_eq!(transfer.readback_bytes, ids.len() * bytes_per_step);
        assert!(bytes_per_step <= 4096);
    }
}

#[test]
fn seeded_sampling_gives_the_same_tokens_on_the_gpu_tail_as_on_whole_rows() {
    let request = || {
        let mut request = GenerateRequest::new(Prompt::Text("Once upon a time, there was a".into()));
        request.sampling = SamplingParams { temperature: 0.8, top_p: 0.95, seed: 2024, ..SamplingParams::default() };
        request.max_tokens = 32;
        request.ignore_eos = true;
        request
    };
    let (tail_steps, tail_result) = run(&mut engine(true), request());
    let (full_steps, full_result) = run(&mut engine(false), request());
    let tail_ids: Vec<u32> = tail_steps.iter().map(|s| s.id).collect();
    let full_ids: Vec<u32> = full_steps.iter().map(|s| s.id).collect();
    println!(
        "[decode tail] seeded T=0.8 top-p 0.95: {} of 32 steps on the GPU tail, {:.0} vs {:.0} bytes/token",
        tail_result.transfer.tail_steps,
        tail_result.transfer.bytes_per_token(),
        full_result.transfer.bytes_per_token()
    );
    assert_eq!(tail_ids, full_ids);
    assert_eq!(tail_result.text, full_result.text);
    assert!(tail_result.transfer.tail_steps > 0, "no step settled on the candidates");
    assert_eq!(full_result.transfer.tail_steps, 0);
    for (a, b) in tail_steps.iter().zip(&full_steps) {
        assert!((a.logprob - b.logprob).abs() < 1e-3, "logprob {} vs {}", a.logprob, b.logprob);
    }
}

#[test]
fn an_extreme_temperature_reads_the_whole_row_and_a_bias_stays_on_the_gpu() {
    let mut engine = engine(true);
    let case = &reference().logit_cases["capital"];
    let one_step = |sampling: SamplingParams| {
        let mut request = GenerateRequest::new(Prompt::Text(case.text.clone()));
        request.sampling = sampling;
        request.max_tokens = 1;
        request
    };
    // A temperature whose inverse overflows f32: the kernels cannot take it; greedy in effect.
    let (steps, result) =
        run(&mut engine, one_step(SamplingParams { temperature: 1e-39, ..SamplingParams::default() }));
    assert_eq!((steps[0].id, result.transfer.full_read_steps, result.transfer.tail_steps), (7042, 1, 0));
    // A bias is applied on the GPU; the reported candidates stay the model's raw logits.
    let mut biased = SamplingParams::greedy();
    biased.logit_bias.insert(7042, f64::NEG_INFINITY);
    let (steps, result) = run(&mut engine, one_step(biased));
    assert_eq!((steps[0].id, result.transfer.tail_steps), (260, 1), "\" the\" once \" Paris\" is forbidden");
    assert_eq!(steps[0].top[0].id, 7042, "top lists the raw logits");
    assert_eq!(steps[0].top[1].id, 260);
    assert!((steps[0].logprob - steps[0].top[1].logprob).abs() < 1e-6, "the chosen token's raw log-probability");
}

#[test]
fn penalties_on_the_gpu_give_the_same_tokens_as_on_whole_rows() {
    let request = || {
        let mut request = GenerateRequest::new(Prompt::Text("Once upon a time, there was a".into()));
        request.sampling = SamplingParams {
            temperature: 0.8,
            top_p: 0.95,
            repetition_penalty: 1.3,
            presence_penalty: 0.4,
            frequency_penalty: 0.2,
            penalize_prompt: true,
            seed: 11,
            ..SamplingParams::default()
        };
        request.max_tokens = 16;
        request.ignore_eos = true;
        request
    };
    let (tail_steps, tail_result) = run(&mut engine(true), request());
    let (full_steps, _) = run(&mut engine(false), request());
    println!(
        "[decode tail] seeded T=0.8 top-p 0.95 with penalties: {} of 16 steps on the GPU tail, {:.0} bytes/token",
        tail_result.transfer.tail_steps,
        tail_result.transfer.bytes_per_token()
    );
    assert_eq!(
        tail_steps.iter().map(|s| s.id).collect::<Vec<_>>(),
        full_steps.iter().map(|s| s.id).collect::<Vec<_>>()
    );
    assert!(tail_result.transfer.tail_steps > 0);
    for (a, b) in tail_steps.iter().zip(&full_steps) {
        assert!((a.logprob - b.logprob).abs() < 1e-3, "logprob {} vs {}", a.logprob, b.logprob);
        let ids = |s: &Step| s.top.iter().map(|t| t.id).collect::<Vec<_>>();
        assert_eq!(ids(a), ids(b), "the reported candidates are the raw ones on both paths");
    }
}

/// The fused path and the CPU engine draw the same seeded tokens: their logits agree far inside
/// the margins that decide a draw. The CPU engine's rows are in memory: nothing is read back.
#[test]
fn seeded_sampling_on_the_fused_path_gives_the_cpu_backends_tokens() {
    let request = || {
        let mut request =
            GenerateRequest::new(Prompt::Chat(vec![nucleus_tokenizer::ChatMessage::user("Name three colours.")]));
        request.sampling =
            SamplingParams { temperature: 0.9, top_k: 40, top_p: 0.95, seed: 77, ..SamplingParams::default() };
        request.max_tokens = 24;
        request
    };
    let mut cpu =
        Engine::load(model_bytes(), &cpu_device(), LoadOptions { context_length: Some(256), ..LoadOptions::default() })
            .unwrap();
    let mut fused = engine(true);
    assert_eq!(fused.info().path, "fused");
    let (cpu_steps, cpu_result) = run(&mut cpu, request());
    let (fused_steps, fused_result) = run(&mut fused, request());
    println!("[fused vs cpu] seeded chat: {:?}", fused_result.text);
    assert_eq!(
        fused_steps.iter().map(|s| s.id).collect::<Vec<_>>(),
        cpu_steps.iter().map(|s| s.id).collect::<Vec<_>>()
    );
    assert_eq!(fused_result.text, cpu_result.text);
    assert_eq!((cpu_result.transfer.full_read_steps, cpu_result.transfer.readback_bytes), (cpu_steps.len(), 0));
}

#[test]
fn a_prefill_reported_in_chunks_rises_to_the_prompt_length_and_gives_the_reference_tokens() {
    let mut engine = engine(true);
    let case = &reference().logit_cases["chat"];
    let total = case.ids.len();
    let mut request = GenerateRequest::new(Prompt::Text(case.text.clone()));
    request.sampling = SamplingParams::greedy();
    request.max_tokens = 4;
    let run_reported = |engine: &mut Engine| {
        let mut progress = Vec::new();
        let mut generation = engine.generate(request.clone()).unwrap();
        let mut steps = Vec::new();
        while let Some(step) =
            pollster::block_on(generation.next_step_reporting(&mut |p| progress.push((p.done, p.total, p.cached))))
                .unwrap()
        {
            steps.push(step);
        }
        (steps, progress)
    };
    engine.clear_cache();
    let (steps, progress) = run_reported(&mut engine);
    let chunk = nucleus_engine::prefill_chunk_len(total);
    let expected: Vec<_> = (1..).map(|i| (i * chunk).min(total)).take(total.div_ceil(chunk)).collect();
    assert_eq!(progress.iter().map(|p| p.0).collect::<Vec<_>>(), expected, "one report per chunk, the last at the end");
    assert!(progress.iter().all(|&(_, t, cached)| t == total && cached == 0), "{progress:?}");
    let ids: Vec<u32> = steps.iter().map(|s| s.id).collect();
    assert_eq!(ids, case.greedy[..ids.len()]);
    let top: Vec<u32> = steps[0].top.iter().map(|t| t.id).collect();
    assert_eq!(top, case.top20.iter().map(|t| t.id).collect::<Vec<_>>());
    let worst = steps[0].top.iter().zip(&case.top20).map(|(a, b)| (a.logit - b.logit).abs()).fold(0.0, f32::max);
    assert!(worst < 1e-3, "chunked prefill: top-20 logits differ by {worst}");
    // Again: the cache holds all but the last prompt token, so one report, of the cached run.
    let (again, progress) = run_reported(&mut engine);
    assert_eq!(progress, vec![(total, total, total - 1)]);
    assert_eq!(again.iter().map(|s| s.id).collect::<Vec<_>>(), ids);
}

#[test]
fn a_load_that_would_not_fit_is_refused_before_any_upload_naming_the_context_and_the_backend_that_fit() {
    let device = wgpu_device();
    let budget = 200 << 20;
    let load = |context_length: usize| {
        let mut uploads = 0;
        let options =
            LoadOptions { context_length: Some(context_length), memory_budget: Some(budget), ..Default::default() };
        let outcome = Engine::load_with_progress(model_bytes(), &device, options, |_| uploads += 1);
        (outcome, uploads)
    };
    let (outcome, uploads) = load(8192);
    let error = outcome.err().expect("8,192 positions do not fit 200 MiB");
    assert_eq!(error.code(), "out-of-memory");
    assert_eq!(uploads, 0, "refused before any tensor was uploaded");
    let message = error.to_string();
    assert!(message.contains("more than the budget of 200.0 MiB"), "{message}");
    // The other backend, which the GPU's budget does not bind: the CPU engine at the same context.
    let cpu = message.split("; ").nth(1).unwrap_or_else(|| panic!("no other backend named: {message}"));
    assert!(cpu.starts_with("the CPU engine would run it at 8192 positions (backend cpu, "), "{message}");
    assert!(cpu.ends_with(" MiB of memory)"), "{message}");
    let fits: usize = message
        .split("contextLength ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no context length named: {message}"));
    assert!((1000..8192).contains(&fits), "{message}");
    println!("[memory] {message}");
    let (outcome, uploads) = load(fits);
    let engine = outcome.expect("the context length it names fits");
    assert!(uploads > 0);
    assert_eq!(engine.info().context_length, fits);
    assert_eq!(load(fits + 1).0.err().map(|e| e.code()), Some("out-of-memory"));
}

#[test]
fn a_context_length_beyond_the_trained_one_is_a_bad_option_naming_it() {
    let options = LoadOptions { context_length: Some(8193), ..Default::default() };
    let error = Engine::load(model_bytes(), &wgpu_device(), options).err().expect("beyond 8,192");
    assert_eq!(error.code(), "bad-options");
    assert!(error.to_string().contains("1..=8192"), "{error}");
}

/// Files Nucleus cannot run, each refused with a typed error naming the cause, before any tensor
/// is uploaded, on the fused path and on the CPU backend: an architecture it does not know, a
/// tokenizer model it does not know, a tensor type its readers do not take, a truncated file, and
/// something that is not GGUF at all (a PNG).
#[test]
fn a_model_nucleus_cannot_run_is_refused_by_name_before_any_upload() {
    let tiny = |name: &str| std::fs::read(nucleus_tests::fixtures_dir().join("tiny").join(name)).unwrap();
    let qwen2 = tiny("qwen2.gguf");
    let png = [&b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"[..], &[0; 64]].concat();
    let cases: [(&str, Vec<u8>, &str, &str); 5] = [
        (
            "an unknown architecture",
            tiny("unknown-architecture.gguf"),
            "unsupported-model",
            "unsupported architecture 'mamba' (supported: llama, qwen2, qwen3, gemma3, qwen35)",
        ),
        (
            "an unknown tokenizer",
            tiny("unknown-tokenizer.gguf"),
            "unsupported-model",
            "unsupported tokenizer model 'bert'",
        ),
        (
            "an unsupported tensor type",
            tiny("unsupported-type.gguf"),
            "unsupported-model",
            "tensor 'blk.0.ffn_gate.weight' has type IQ4_NL",
        ),
        ("a truncated file", qwen2[..qwen2.len() - 1000].to_vec(), "bad-model", "blk.1"),
        ("a PNG", png, "bad-model", "not a GGUF file: the first four bytes are [137, 80, 78, 71]"),
    ];
    let paths = [
        (wgpu_device(), Path::Fused),
        (cpu_device(), Path::Cpu),
        (burn_cpu_device(), Path::BurnOps(LinearKernel::BurnMatmul)),
    ];
    for (device, path) in paths {
        for (what, bytes, code, needle) in &cases {
            let mut uploads = 0;
            let options = LoadOptions { path: Some(path), ..Default::default() };
            let error = Engine::load_with_progress(bytes, &device, options, |_| uploads += 1)
                .err()
                .unwrap_or_else(|| panic!("{what} loaded on {path:?}"));
            let message = error.to_string();
            println!("[refused] {what} on {}: {} ({message})", path.as_str(), error.code());
            assert_eq!(error.code(), *code, "{what}: {message}");
            assert!(message.contains(needle), "{what}: {message:?} does not name {needle:?}");
            assert_eq!(uploads, 0, "{what}: refused before any tensor was uploaded");
        }
    }
}
