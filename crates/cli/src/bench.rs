//! `nucleus bench`: prefill and decode speed of the real generation path, several runs.

use nucleus_engine::{Engine, GenerateRequest, Prompt, Stopwatch};
use nucleus_sampler::SamplingParams;

use crate::queue_calls::{QueueCallCount, QueueCalls};
use crate::{Backend, LinearArg, ModelArg, load_engine};

#[derive(clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    model: ModelArg,
    #[arg(long, value_enum, default_value_t = Backend::Wgpu)]
    backend: Backend,
    /// The kernel of the linear layers.
    #[arg(long, value_enum, default_value_t = LinearArg::Auto)]
    linear: LinearArg,
    /// Prompt length in tokens.
    #[arg(long, default_value_t = 128)]
    prompt_tokens: usize,
    /// Tokens generated per run (greedy, end-of-generation ignored).
    #[arg(long, default_value_t = 128)]
    gen_tokens: usize,
    /// Measured runs, after one warm-up run.
    #[arg(long, default_value_t = 3)]
    runs: usize,
}

/// How decode steps end.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tail {
    /// The WGSL decode tail: adjust, softmax statistics and top-k on the GPU, candidates read back.
    Gpu,
    /// The whole logits row read back, sampled on the CPU.
    FullRead,
}

/// Figures of one run.
struct Run {
    tail: Tail,
    bytes_per_token: f64,
    ttft_ms: f64,
    prefill_tokens_per_s: f64,
    decode_tokens_per_s: f64,
    decode_ms_per_token: f64,
}

const FILLER: &str = "The quick brown fox jumps over the lazy dog while the river runs past the old mill, \
and the miller counts 12 sacks of flour, 7 loaves of bread and 3 baskets of apples before noon. ";

pub fn run(args: &BenchArgs) -> Result<(), String> {
    if args.prompt_tokens == 0 || args.gen_tokens == 0 || args.runs == 0 {
        return Err("--prompt-tokens, --gen-tokens and --runs must be at least 1".into());
    }
    let context = args.prompt_tokens + args.gen_tokens;
    let (mut engine, load_ms) = load_engine(&args.model, args.backend, args.linear, Some(context))?;
    let prompt = bench_prompt(&engine, args.prompt_tokens)?;
    println!(
        "model {} ({} parameters), backend {:?}, linear layers {:?}, {} prompt tokens, {} generated tokens, {} runs after 1 warm-up; load {:.0} ms",
        engine.info().name,
        engine.info().parameters,
        args.backend,
        engine.linear_kernel(),
        args.prompt_tokens,
        args.gen_tokens,
        args.runs,
        load_ms
    );
    // On a wgpu device, the same runs once with the GPU decode tail and once reading whole rows.
    let tails: &[Tail] = if engine.decode_tail() { &[Tail::Gpu, Tail::FullRead] } else { &[Tail::FullRead] };
    let mut runs = Vec::new();
    for &tail in tails {
        engine.set_decode_tail(tail == Tail::Gpu);
        for index in 0..=args.runs {
            let run = one_run(&mut engine, &prompt, args.gen_tokens, tail)?;
            if index > 0 {
                runs.push(run);
            }
        }
    }
    let mut counted = Vec::new();
    for &tail in tails {
        engine.set_decode_tail(tail == Tail::Gpu);
        if args.backend == Backend::Wgpu {
            counted.push((tail, counted_run(&mut engine, &prompt, args.gen_tokens)?));
        }
    }
    for &tail in tails {
        let of_tail: Vec<&Run> = runs.iter().filter(|r| r.tail == tail).collect();
        let column = |f: fn(&Run) -> f64| {
            let mut values: Vec<f64> = of_tail.iter().map(|r| f(r)).collect();
            values.sort_by(f64::total_cmp);
            (values[0], values[values.len() / 2], values[values.len() - 1])
        };
        println!("\ndecode steps end: {}", match tail {
            Tail::Gpu => "on the GPU (WGSL adjust + softmax statistics + top-k, candidates read back)",
            Tail::FullRead => "reading the whole logits row, sampling on the CPU",
        });
        println!("{:<28} {:>12} {:>12} {:>12}", "metric", "min", "median", "max");
        for (name, f) in [
            ("time to first token (ms)", (|r: &Run| r.ttft_ms) as fn(&Run) -> f64),
            ("prefill (tok/s)", |r: &Run| r.prefill_tokens_per_s),
            ("decode (tok/s)", |r: &Run| r.decode_tokens_per_s),
            ("decode (ms/token)", |r: &Run| r.decode_ms_per_token),
            ("read back (bytes/token)", |r: &Run| r.bytes_per_token),
        ] {
            let (min, median, max) = column(f);
            println!("{name:<28} {min:>12.2} {median:>12.2} {max:>12.2}");
        }
        if let Some((_, run)) = counted.iter().find(|(t, _)| *t == tail) {
            let per_step = |n: u64| n as f64 / run.decode_steps.max(1) as f64;
            println!("GPU queue calls, counted in one more (untimed) run:");
            println!("{:<28} {:>12} {:>12}", "", "submits", "buffer writes");
            println!("{:<28} {:>12} {:>12}", "prefill + first token", run.first_step.submits, run.first_step.buffer_writes);
            println!(
                "{:<28} {:>12.2} {:>12.2}",
                "per decode token",
                per_step(run.decode.submits),
                per_step(run.decode.buffer_writes)
            );
        }
    }
    println!();
    engine.set_decode_tail(true);
    if engine.decode_tail() {
        decode_tail_alone(&engine, &prompt, args.runs.max(5))?;
    }
    println!("peak resident memory (MiB)   {:>12.1}", peak_rss_mib());
    if let Some(usage) = engine.model().device().memory_pool_usage() {
        println!("device memory reserved (MiB) {:>12.1}", usage.bytes_reserved as f64 / (1024.0 * 1024.0));
    }
    Ok(())
}

/// Exactly `n` tokens of ordinary text.
fn bench_prompt(engine: &Engine, n: usize) -> Result<Vec<u32>, String> {
    let mut text = String::new();
    loop {
        text.push_str(FILLER);
        let ids = engine.tokenizer().encode(&text).map_err(|e| e.to_string())?;
        if ids.len() >= n {
            return Ok(ids[..n].to_vec());
        }
    }
}

/// Greedy, `gen_tokens` tokens whatever they are, on an empty cache.
fn bench_request(engine: &mut Engine, prompt: &[u32], gen_tokens: usize) -> GenerateRequest {
    engine.clear_cache();
    let text = engine.tokenizer().decode(prompt);
    let mut request = GenerateRequest::new(Prompt::Text(text));
    request.max_tokens = gen_tokens;
    request.sampling = SamplingParams::greedy();
    request.ignore_eos = true;
    request.top_logprobs = 0;
    request
}

fn one_run(engine: &mut Engine, prompt: &[u32], gen_tokens: usize, tail: Tail) -> Result<Run, String> {
    let request = bench_request(engine, prompt, gen_tokens);
    let clock = Stopwatch::start();
    let mut generation = engine.generate(request).map_err(|e| e.to_string())?;
    let mut ttft_ms = 0.0;
    while let Some(step) = pollster::block_on(generation.next_step()).map_err(|e| e.to_string())? {
        if step.index == 0 {
            ttft_ms = clock.elapsed_ms();
        }
    }
    let result = generation.result();
    let decoded = result.usage.completion_tokens.saturating_sub(1).max(1) as f64;
    Ok(Run {
        tail,
        bytes_per_token: result.transfer.bytes_per_token(),
        ttft_ms,
        prefill_tokens_per_s: result.timing.prefill_tokens_per_s,
        decode_tokens_per_s: result.timing.decode_tokens_per_s,
        decode_ms_per_token: result.timing.decode_ms / decoded,
    })
}

/// Queue calls of one run: the first step (prefill and the first token) and each later step.
struct CountedRun {
    first_step: QueueCalls,
    decode_steps: u64,
    decode: QueueCalls,
}

/// One more run, untimed, with the GPU queue calls counted (see `queue_calls`).
fn counted_run(engine: &mut Engine, prompt: &[u32], gen_tokens: usize) -> Result<CountedRun, String> {
    let request = bench_request(engine, prompt, gen_tokens);
    let count = QueueCallCount::start()?;
    let mut generation = engine.generate(request).map_err(|e| e.to_string())?;
    let mut first_step = None;
    let mut steps = 0u64;
    while pollster::block_on(generation.next_step()).map_err(|e| e.to_string())?.is_some() {
        steps += 1;
        first_step.get_or_insert_with(|| count.so_far());
    }
    let first_step = first_step.ok_or("the counted run generated no token")?;
    Ok(CountedRun { first_step, decode_steps: steps - 1, decode: count.so_far() - first_step })
}

/// Peak resident set size of this process (Linux; 0 elsewhere).
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// The last step of a decode on its own, on the model's real logits for the bench prompt:
/// the WGSL tail against reading the row and selecting on the CPU, and against Burn's own
/// `softmax` + `topk_with_indices`. Median and min over `iterations` after 2 warm-up calls.
fn decode_tail_alone(engine: &Engine, prompt: &[u32], iterations: usize) -> Result<(), String> {
    use burn::tensor::{Int, Tensor, activation::softmax};
    use nucleus_kernels::{LogitAdjustments, decode_tail};

    const K: usize = nucleus_engine::DECODE_TAIL_CANDIDATES;
    const TEMPERATURE: f32 = 0.8;
    let model = engine.model();
    let mut cache = model.new_cache(prompt.len()).map_err(|e| e.to_string())?;
    let logits = model.forward(prompt, &mut cache, nucleus_model::Logits::Last).map_err(|e| e.to_string())?;
    // A fresh row each call (the tail adjusts in place), made on the device from the real logits.
    let fresh = |step: usize| logits.clone() + (step as f32) * 1e-6;
    let time = |f: &mut dyn FnMut(usize) -> Result<usize, String>| -> Result<(f64, f64, usize), String> {
        let mut bytes = 0;
        for step in 0..2 {
            bytes = f(step)?;
        }
        let mut samples = Vec::new();
        for step in 0..iterations {
            let clock = Stopwatch::start();
            bytes = f(step + 2)?;
            samples.push(clock.elapsed_ms());
        }
        samples.sort_by(f64::total_cmp);
        Ok((samples[samples.len() / 2], samples[0], bytes))
    };
    println!("the decode tail alone, on the model's logits (vocab {}, K = {K}, T = {TEMPERATURE}); ms per step", engine.info().vocab_size);
    println!("{:<52} {:>10} {:>10} {:>12}", "variant", "median", "min", "bytes read");
    let mut rows: Vec<(&str, (f64, f64, usize))> = Vec::new();
    rows.push(("fresh row + 4-byte read (floor, in every line)", time(&mut |step| {
        pollster::block_on(fresh(step).slice([0..1, 0..1]).into_data_async()).map_err(|e| format!("{e:?}"))?;
        Ok(4)
    })?));
    rows.push(("WGSL adjust + softmax statistics + top-k, one read", time(&mut |step| {
        let tail = pollster::block_on(decode_tail(fresh(step), &LogitAdjustments::new(), TEMPERATURE, K)).map_err(|e| e.to_string())?;
        Ok(tail.bytes_read)
    })?));
    rows.push(("read the whole row, softmax + top-k on the CPU", time(&mut |step| {
        let row = pollster::block_on(nucleus_model::read_logits(fresh(step))).map_err(|e| e.to_string())?.remove(0);
        let _ = nucleus_sampler::softmax(&row).map_err(|e| e.to_string())?;
        let _ = nucleus_sampler::top_k_ids(&row, K);
        Ok(row.len() * 4)
    })?));
    rows.push(("Burn softmax + topk_with_indices, two reads", time(&mut |step| {
        let row = fresh(step);
        let probabilities = softmax(row.clone().div_scalar(TEMPERATURE), 1);
        let (values, ids): (Tensor<2>, Tensor<2, Int>) = probabilities.topk_with_indices(K, 1);
        let values = pollster::block_on(values.into_data_async()).map_err(|e| format!("{e:?}"))?;
        let ids = pollster::block_on(ids.into_data_async()).map_err(|e| format!("{e:?}"))?;
        Ok(values.as_bytes().len() + ids.as_bytes().len())
    })?));
    for (name, (median, min, bytes)) in rows {
        println!("{name:<52} {median:>10.2} {min:>10.2} {bytes:>12}");
    }
    println!();
    Ok(())
}
