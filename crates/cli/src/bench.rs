//! `nucleus bench`: prefill and decode speed of the real generation path, several runs, with the
//! work each decode token asks of the GPU, side by side for the forward-pass paths and the models
//! (`--model` once per model: SmolLM2-135M and Gemma 3 270M in `./build.sh bench`).

use nucleus_engine::{Engine, GenerateRequest, Path, Prompt, PromptLookup, Stopwatch};
use nucleus_sampler::SamplingParams;

use crate::gpu_calls::{GpuCallCount, GpuCalls};
use crate::{Backend, DeviceArgs, LinearArg, ModelArg, PathArg, load_engine};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// GGUF model files, each measured on each path, side by side [default: $NUCLEUS_MODEL, else
    /// ~/.cache/nucleus/models/SmolLM2-135M-Instruct.Q4_1.gguf]
    #[arg(long = "model", value_name = "PATH")]
    models: Vec<std::path::PathBuf>,
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    backend: Backend,
    /// The paths to compare [default on wgpu: fused and burn; on the CPU engine: cpu; on
    /// burn-cpu: burn].
    #[arg(long = "path", value_enum)]
    paths: Vec<PathArg>,
    /// The kernel of the linear layers on the Burn path.
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
    /// Also time decode steps at this position against position 100 (0 = skip) [default: 2000,
    /// or 0 on an adapter that runs on the CPU, where the long prompt takes minutes].
    #[arg(long)]
    long_context: Option<usize>,
    /// Skip the comparison of the decode tail alone.
    #[arg(long)]
    no_tail: bool,
    /// Tokens drafted per pass in the comparison of decoding with and without speculative
    /// decoding by prompt lookup (0 = skip).
    #[arg(long, value_name = "K", default_value_t = nucleus_engine::DEFAULT_MAX_DRAFT)]
    speculative_lookup: usize,
    /// Also time each kernel of the fused path on the GPU (timestamp queries around each
    /// dispatch, in one more run): where a prefill's and a decode step's GPU time goes.
    #[arg(long)]
    kernel_times: bool,
    /// Also print the medians as one JSON line at the end (`{"device", "reports": [...]}`), for
    /// tests/browser/bench.mjs's table of engines.
    #[arg(long)]
    json: bool,
}

/// Figures of one run.
struct Run {
    bytes_per_token: f64,
    ttft_ms: f64,
    prefill_tokens_per_s: f64,
    decode_tokens_per_s: f64,
    decode_ms_per_token: f64,
}

/// Everything measured on one path of one model.
struct PathReport {
    /// The model's short name (its title's first part) and the path: the column's heading.
    label: String,
    load_ms: f64,
    runs: Vec<Run>,
    /// GPU calls of the first step and per decode step (wgpu only).
    calls: Option<CountedRun>,
    /// Host time to record one decode step, and to submit it, from the fused path's own clock (µs).
    host_us_per_token: Option<(f64, f64)>,
    weight_bytes: u64,
    /// Bytes of the file's weights a decode step reads: every tensor but an embedding table that
    /// is not also the output layer (of which a step reads one row).
    read_per_token: u64,
    cache_bytes: u64,
    /// Decode ms/token at position ~100 and at the long position.
    long_context: Option<(f64, f64)>,
}

const FILLER: &str = "The quick brown fox jumps over the lazy dog while the river runs past the old mill, \
and the miller counts 12 sacks of flour, 7 loaves of bread and 3 baskets of apples before noon. ";

pub fn run(args: &BenchArgs) -> Result<(), String> {
    if args.prompt_tokens == 0 || args.gen_tokens == 0 || args.runs == 0 {
        return Err("--prompt-tokens, --gen-tokens and --runs must be at least 1".into());
    }
    let (device, why) = args.backend.device()?;
    if let Some(why) = why {
        println!("auto: the CPU engine, as {why}");
    }
    let paths: Vec<PathArg> = match &args.paths[..] {
        [] if device.gpu().is_some() => vec![PathArg::Fused, PathArg::Burn],
        [] if device.is_cpu_engine() => vec![PathArg::Cpu],
        [] => vec![PathArg::Burn],
        paths => paths.to_vec(),
    };
    if args.kernel_times && !(device.gpu().is_some() && paths[0] == PathArg::Fused) {
        return Err(KERNEL_TIMES_NEED.into());
    }
    let long_context = args.long_context.unwrap_or(if device.is_cpu_adapter() { 0 } else { 2000 });
    println!(
        "backend {:?} on {}; {} prompt tokens, {} generated tokens, {} runs after 1 warm-up",
        args.backend,
        device.describe(),
        args.prompt_tokens,
        args.gen_tokens,
        args.runs,
    );

    // What the machine reads a second: over the bytes a decode step reads, the most tokens a
    // second any engine can decode on this CPU. Measured before any model is loaded, its buffer
    // (256 MiB) then freed and left out of the peak memory printed below.
    let bandwidth = device.is_cpu_engine().then(|| {
        let bandwidth = nucleus_cpu::memory_bandwidth();
        reset_peak_rss();
        bandwidth
    });

    let mut reports = Vec::new();
    let mut first_engine = None;
    let models = if args.models.is_empty() {
        vec![ModelArg::default()]
    } else {
        args.models.iter().map(|path| ModelArg::of(path)).collect()
    };
    for (model, path) in models.iter().flat_map(|model| paths.iter().map(move |&path| (model, path))) {
        let flags = DeviceArgs { backend: args.backend, path: Some(path), linear: args.linear };
        let context = (args.prompt_tokens + args.gen_tokens)
            .max(if long_context > 0 { long_context + 32 } else { 0 })
            .max(if args.speculative_lookup > 0 { SPECULATIVE_PROMPT_ROOM + args.gen_tokens } else { 0 });
        let (mut engine, load_ms) = load_engine(model, &flags, Some(context), Some(&device))?;
        let title = engine.info().title(Some(&model.path().to_string_lossy()));
        if path == paths[0] {
            println!("model {title} ({} parameters)", engine.info().parameters);
        }
        eprintln!("[bench] {}: {} runs", engine.info().path, args.runs + 1);
        let prompt = bench_prompt(&engine, args.prompt_tokens)?;
        let mut runs = Vec::new();
        for index in 0..=args.runs {
            let run = one_run(&mut engine, &prompt, args.gen_tokens)?;
            if index > 0 {
                runs.push(run);
            }
        }
        let calls =
            if device.gpu().is_some() { Some(counted_run(&mut engine, &prompt, args.gen_tokens)?) } else { None };
        let host_us_per_token = host_encode_time(&mut engine, &prompt, args.gen_tokens)?;
        let long = if long_context > 0 {
            eprintln!("[bench] {}: decode at position 100 and {long_context}", engine.info().path);
            Some((decode_ms_at(&mut engine, 100)?, decode_ms_at(&mut engine, long_context)?))
        } else {
            None
        };
        reports.push(PathReport {
            label: format!("{} {}", title.split(" · ").next().unwrap_or_default(), engine.model().path().as_str()),
            load_ms,
            runs,
            calls,
            host_us_per_token,
            weight_bytes: engine.info().weight_bytes,
            read_per_token: read_per_token(model)?,
            cache_bytes: engine.cache().device_bytes(),
            long_context: long,
        });
        // The first path's engine stays loaded for the comparisons below.
        if first_engine.is_none() {
            first_engine = Some((engine, prompt));
        }
    }
    print_reports(&reports, args, long_context, bandwidth);
    if let Some((mut engine, prompt)) = first_engine {
        if args.speculative_lookup > 0 {
            println!();
            speculative_comparison(&mut engine, args)?;
        }
        if engine.decode_tail() && !args.no_tail {
            println!();
            decode_tail_alone(&engine, &prompt, args.runs.max(5))?;
        }
        if args.kernel_times {
            println!();
            kernel_times(&mut engine, &prompt, args.gen_tokens)?;
        }
    }
    println!("peak resident memory (MiB)   {:>12.1}", peak_rss_mib());
    if args.json {
        println!("{}", json_summary(&reports, &device.describe(), bandwidth));
    }
    if let Some(gpu) = device.gpu() {
        // Every run above has ended: what stays is what the engines still loaded hold.
        let counters = gpu.counters();
        println!(
            "live GPU buffers of the fused path {:>6} ({:.1} MiB, the weights included)",
            counters.live_buffers,
            mib(counters.live_bytes)
        );
    }
    if let Some(usage) = device.burn().and_then(|burn| burn.memory_pool_usage()) {
        println!("Burn's device memory reserved (MiB, all paths) {:>8.1}", mib(usage.bytes_reserved));
    }
    Ok(())
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Bytes of `model`'s weights a decode step reads ([`PathReport::read_per_token`]).
fn read_per_token(model: &ModelArg) -> Result<u64, String> {
    let bytes = model.read()?;
    let file = nucleus_gguf::GgufFile::parse_shared(&bytes).map_err(|e| e.to_string())?;
    let untied = file.tensors.iter().any(|t| t.name == "output.weight");
    Ok(file.tensors.iter().filter(|t| !(untied && t.name == "token_embd.weight")).map(|t| t.byte_len()).sum())
}

fn print_reports(
    reports: &[PathReport],
    args: &BenchArgs,
    long_context: usize,
    bandwidth: Option<nucleus_cpu::Bandwidth>,
) {
    let width = reports.iter().map(|r| r.label.len()).max().unwrap_or(0).max(16);
    print!("\n{:<40}", "median of the runs (min..max below)");
    for report in reports {
        print!(" {:>width$}", report.label);
    }
    println!();
    let column = |report: &PathReport, f: &dyn Fn(&Run) -> f64| {
        let mut values: Vec<f64> = report.runs.iter().map(f).collect();
        values.sort_by(f64::total_cmp);
        (values[values.len() / 2], values[0], values[values.len() - 1])
    };
    type Row<'a> = (&'a str, &'a dyn Fn(&Run) -> f64);
    let rows: [Row; 5] = [
        ("time to first token (ms)", &|r| r.ttft_ms),
        ("prefill (tok/s)", &|r| r.prefill_tokens_per_s),
        ("decode (tok/s)", &|r| r.decode_tokens_per_s),
        ("decode (ms/token)", &|r| r.decode_ms_per_token),
        ("read back (bytes/token)", &|r| r.bytes_per_token),
    ];
    let line = |name: &str, cell: &dyn Fn(&PathReport) -> String| {
        print!("{name:<40}");
        for report in reports {
            print!(" {:>width$}", cell(report));
        }
        println!();
    };
    line("load (ms)", &|r| format!("{:.0}", r.load_ms));
    for (name, f) in rows {
        line(name, &|r| format!("{:.2}", column(r, f).0));
        line("", &|r| {
            let (_, min, max) = column(r, f);
            format!("{min:.1}..{max:.1}")
        });
    }
    if reports.iter().any(|r| r.calls.is_some()) {
        let per_token = |r: &PathReport, f: fn(&GpuCalls) -> u64| match &r.calls {
            Some(c) => format!("{:.1}", f(&c.decode) as f64 / c.decode_steps.max(1) as f64),
            None => "-".into(),
        };
        line("kernels dispatched per decode token", &|r| per_token(r, |c| c.dispatches));
        line("queue submissions per decode token", &|r| per_token(r, |c| c.submits));
        line("buffer writes per decode token", &|r| per_token(r, |c| c.buffer_writes));
        line("kernels dispatched, prefill + 1st token", &|r| {
            r.calls.as_ref().map_or("-".into(), |c| c.first_step.dispatches.to_string())
        });
        line("submissions, prefill + 1st token", &|r| {
            r.calls.as_ref().map_or("-".into(), |c| c.first_step.submits.to_string())
        });
    }
    line("host µs to record a decode step", &|r| r.host_us_per_token.map_or("-".into(), |(us, _)| format!("{us:.0}")));
    line("host µs in Queue::submit per decode step", &|r| {
        r.host_us_per_token.map_or("-".into(), |(_, us)| format!("{us:.0}"))
    });
    line("weights on the device (MiB)", &|r| format!("{:.1}", mib(r.weight_bytes)));
    line("weights read per decode token (MB)", &|r| format!("{:.1}", r.read_per_token as f64 / 1e6));
    if let Some(bandwidth) = bandwidth {
        println!(
            "memory read (GB/s)                       {:.1} on one thread, {:.1} on {}",
            bandwidth.one_thread / 1e9,
            bandwidth.all_threads / 1e9,
            bandwidth.threads
        );
        line(&format!("the memory's limit, decode ({} thr., tok/s)", bandwidth.threads), &|r| {
            format!("{:.0}", bandwidth.all_threads / r.read_per_token as f64)
        });
    }
    line(&format!("KV cache on the device (MiB, {} pos.)", args.prompt_tokens + args.gen_tokens), &|r| {
        format!("{:.1}", mib(r.cache_bytes))
    });
    if long_context > 0 {
        line("decode ms/token at position 100", &|r| {
            r.long_context.map_or("-".into(), |(short, _)| format!("{short:.2}"))
        });
        line(&format!("decode ms/token at position {long_context}"), &|r| {
            r.long_context.map_or("-".into(), |(_, long)| format!("{long:.2}"))
        });
    }
    println!(
        "(kernels, submissions and writes: counted in one more, untimed run from wgpu-core's API log; \
         host time: the fused path's own clock; the Burn path records lazily, so it has no such figure)"
    );
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

fn one_run(engine: &mut Engine, prompt: &[u32], gen_tokens: usize) -> Result<Run, String> {
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
        bytes_per_token: result.transfer.bytes_per_token(),
        ttft_ms,
        prefill_tokens_per_s: result.timing.prefill_tokens_per_s,
        decode_tokens_per_s: result.timing.decode_tokens_per_s,
        decode_ms_per_token: result.timing.decode_ms / decoded,
    })
}

/// The prompts of the speculative comparison: one whose continuation repeats what it holds, one
/// that asks for new text.
const SPECULATIVE_PROMPTS: [(&str, &str); 2] = [
    (
        "repetitive (code)",
        "fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\nfn sub(a: i32, b: i32) -> i32 {\n    a - b\n}\n\n\
         fn mul(a: i32, b: i32) -> i32 {\n    a * b\n}\n\nfn div(a: i32, b: i32) -> i32 {\n",
    ),
    ("non-repetitive (chat)", "Write a short story about a lighthouse keeper who finds a message in a bottle."),
];

/// Context positions the longest of [`SPECULATIVE_PROMPTS`] fits in (its chat template included).
const SPECULATIVE_PROMPT_ROOM: usize = 160;

/// Decoding with and without speculative decoding by prompt lookup, greedy, on each of
/// [`SPECULATIVE_PROMPTS`]: decode tok/s, the acceptance rate and tokens per pass, and whether
/// the outputs are the same (they must be).
fn speculative_comparison(engine: &mut Engine, args: &BenchArgs) -> Result<(), String> {
    let lookup = PromptLookup { max_draft: args.speculative_lookup, ..PromptLookup::default() };
    lookup.validate().map_err(|e| e.to_string())?;
    println!(
        "speculative decoding by prompt lookup on the {} path (greedy, {} tokens, draft <= {}, n-gram <= {}); median of {} runs",
        engine.info().path,
        args.gen_tokens,
        lookup.max_draft,
        lookup.ngram,
        args.runs
    );
    println!(
        "{:<24} {:>14} {:>14} {:>8} {:>12} {:>12} {:>10}",
        "prompt", "plain tok/s", "spec. tok/s", "speedup", "accepted", "tokens/pass", "same text"
    );
    for (name, text) in SPECULATIVE_PROMPTS {
        // A base model (no chat template) continues the request as text.
        let prompt = if name.contains("chat") && engine.tokenizer().chat_template().is_some() {
            Prompt::Chat(vec![nucleus_tokenizer::ChatMessage::user(text)])
        } else {
            Prompt::Text(text.to_string())
        };
        let mut measure =
            |speculative: Option<PromptLookup>| -> Result<(f64, nucleus_engine::GenerationResult), String> {
                let mut rates = Vec::new();
                let mut last = None;
                for index in 0..=args.runs {
                    engine.clear_cache();
                    let mut request = GenerateRequest::new(prompt.clone());
                    request.max_tokens = args.gen_tokens;
                    request.sampling = SamplingParams::greedy();
                    request.ignore_eos = true;
                    request.top_logprobs = 0;
                    request.speculative = speculative;
                    let mut generation = engine.generate(request).map_err(|e| e.to_string())?;
                    while pollster::block_on(generation.next_step()).map_err(|e| e.to_string())?.is_some() {}
                    let result = generation.result();
                    if index > 0 {
                        rates.push(result.timing.decode_tokens_per_s);
                    }
                    last = Some(result);
                }
                rates.sort_by(f64::total_cmp);
                Ok((rates[rates.len() / 2], last.expect("at least one run")))
            };
        let (plain_rate, plain) = measure(None)?;
        let (rate, speculative) = measure(Some(lookup))?;
        let stats = speculative.speculation;
        println!(
            "{:<24} {:>14.2} {:>14.2} {:>7.2}x {:>5}/{:<3} {:>3.0}% {:>11.2} {:>10}",
            name,
            plain_rate,
            rate,
            rate / plain_rate,
            stats.accepted_tokens,
            stats.drafted_tokens,
            stats.acceptance_rate * 100.0,
            stats.tokens_per_pass,
            if plain.text == speculative.text { "yes" } else { "NO" },
        );
    }
    Ok(())
}

/// GPU calls of one run: the first step (prefill and the first token) and each later step.
struct CountedRun {
    first_step: GpuCalls,
    decode_steps: u64,
    decode: GpuCalls,
}

/// One more run, untimed, with the GPU calls counted (see `gpu_calls`).
fn counted_run(engine: &mut Engine, prompt: &[u32], gen_tokens: usize) -> Result<CountedRun, String> {
    let request = bench_request(engine, prompt, gen_tokens);
    let count = GpuCallCount::start()?;
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

/// Host time the fused path spends recording a decode step and submitting it, in µs (its own
/// clock, in one more run); `None` on paths without it.
fn host_encode_time(engine: &mut Engine, prompt: &[u32], gen_tokens: usize) -> Result<Option<(f64, f64)>, String> {
    let Some(gpu) = engine.model().device().gpu().cloned() else { return Ok(None) };
    if engine.model().path() != Path::Fused {
        return Ok(None);
    }
    let request = bench_request(engine, prompt, gen_tokens);
    let mut generation = engine.generate(request).map_err(|e| e.to_string())?;
    pollster::block_on(generation.next_step()).map_err(|e| e.to_string())?;
    let before = gpu.counters();
    let mut steps = 0u64;
    while pollster::block_on(generation.next_step()).map_err(|e| e.to_string())?.is_some() {
        steps += 1;
    }
    let spent = gpu.counters() - before;
    let per_step = |ns: u64| ns as f64 / 1000.0 / steps.max(1) as f64;
    Ok(Some((per_step(spent.record_ns), per_step(spent.submit_ns))))
}

const KERNEL_TIMES_NEED: &str =
    "--kernel-times times the fused path's kernels: run it with --backend wgpu and the fused path first";

/// The fused path's GPU time per kernel (`nucleus_kernels::profile`) in one more run: the prefill
/// with its first token, and the decode steps per token.
fn kernel_times(engine: &mut Engine, prompt: &[u32], gen_tokens: usize) -> Result<(), String> {
    let Some(gpu) = engine.model().device().gpu().cloned().filter(|_| engine.model().path() == Path::Fused) else {
        return Err(KERNEL_TIMES_NEED.into());
    };
    gpu.set_profiling(true).map_err(|e| e.to_string())?;
    let times = (|| {
        let request = bench_request(engine, prompt, gen_tokens);
        let mut generation = engine.generate(request).map_err(|e| e.to_string())?;
        pollster::block_on(generation.next_step()).map_err(|e| e.to_string())?;
        let prefill = pollster::block_on(gpu.kernel_times()).map_err(|e| e.to_string())?;
        let mut steps = 0;
        while pollster::block_on(generation.next_step()).map_err(|e| e.to_string())?.is_some() {
            steps += 1;
        }
        let decode = pollster::block_on(gpu.kernel_times()).map_err(|e| e.to_string())?;
        Ok::<_, String>((prefill, decode, steps))
    })();
    gpu.set_profiling(false).map_err(|e| e.to_string())?;
    let (prefill, decode, steps) = times?;
    let table = |title: &str, times: &[nucleus_kernels::profile::KernelTime], per: usize| {
        let total: f64 = times.iter().map(|t| t.ns).sum();
        println!("{title}: {:.1} µs of kernels", total / 1000.0 / per as f64);
        println!("  {:<20} {:>10} {:>10} {:>6}", "kernel", "dispatches", "µs", "%");
        for t in times {
            println!(
                "  {:<20} {:>10.1} {:>10.1} {:>6.1}",
                t.kernel,
                t.dispatches as f64 / per as f64,
                t.ns / 1000.0 / per as f64,
                100.0 * t.ns / total.max(1.0)
            );
        }
    };
    println!("GPU time per kernel (timestamps around each dispatch, each in a pass of its own, one more run):");
    table(&format!("prefill of {} tokens and the first token", prompt.len()), &prefill, 1);
    table(&format!("decode, per token ({steps} steps)"), &decode, steps.max(1));
    Ok(())
}

/// Decode ms/token after a prompt of `position` tokens (16 steps, the last 15 timed).
fn decode_ms_at(engine: &mut Engine, position: usize) -> Result<f64, String> {
    let prompt = bench_prompt(engine, position)?;
    let request = bench_request(engine, &prompt, 16);
    let mut generation = engine.generate(request).map_err(|e| e.to_string())?;
    while pollster::block_on(generation.next_step()).map_err(|e| e.to_string())?.is_some() {}
    let result = generation.result();
    Ok(result.timing.decode_ms / result.usage.completion_tokens.saturating_sub(1).max(1) as f64)
}

/// Peak resident set size of this process (Linux; 0 elsewhere).
/// The medians of each report and the process's peak memory, as one JSON object.
fn json_summary(reports: &[PathReport], device: &str, bandwidth: Option<nucleus_cpu::Bandwidth>) -> serde_json::Value {
    let median = |report: &PathReport, f: fn(&Run) -> f64| {
        let mut values: Vec<f64> = report.runs.iter().map(f).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let reports: Vec<_> = reports
        .iter()
        .map(|r| {
            serde_json::json!({
                "label": r.label,
                "loadMs": r.load_ms,
                "ttftMs": median(r, |run| run.ttft_ms),
                "prefillTokensPerS": median(r, |run| run.prefill_tokens_per_s),
                "decodeTokensPerS": median(r, |run| run.decode_tokens_per_s),
                "weightBytes": r.weight_bytes,
                "readBytesPerToken": r.read_per_token,
            })
        })
        .collect();
    let bandwidth = bandwidth.map(|b| {
        serde_json::json!({ "oneThreadBytesPerS": b.one_thread, "allThreadsBytesPerS": b.all_threads, "threads": b.threads })
    });
    serde_json::json!({ "device": device, "peakRssMiB": peak_rss_mib(), "reports": reports, "memoryBandwidth": bandwidth })
}

/// Starts the peak resident set size again from what the process holds now (Linux: `5` written to
/// `/proc/self/clear_refs`; elsewhere there is no peak to reset).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// The last step of a decode on its own, on the model's real logits for the bench prompt: the
/// WGSL tail against reading the row and selecting on the CPU. Median and min over
/// `iterations` after 2 warm-up calls.
fn decode_tail_alone(engine: &Engine, prompt: &[u32], iterations: usize) -> Result<(), String> {
    use nucleus_kernels::LogitAdjustments;
    use nucleus_kernels::TailRequest;

    const K: usize = nucleus_engine::DECODE_TAIL_CANDIDATES;
    const TEMPERATURE: f32 = 0.8;
    let model = engine.model();
    let mut cache = model.new_cache(prompt.len()).map_err(|e| e.to_string())?;
    let logits = model.forward(prompt, &mut cache, nucleus_model::Logits::Last).map_err(|e| e.to_string())?;
    let none = LogitAdjustments::new();
    let time = |f: &mut dyn FnMut() -> Result<usize, String>| -> Result<(f64, f64, usize), String> {
        let mut bytes = 0;
        for _ in 0..2 {
            bytes = f()?;
        }
        let mut samples = Vec::new();
        for _ in 0..iterations {
            let clock = Stopwatch::start();
            bytes = f()?;
            samples.push(clock.elapsed_ms());
        }
        samples.sort_by(f64::total_cmp);
        Ok((samples[samples.len() / 2], samples[0], bytes))
    };
    println!(
        "the decode tail alone on the {} path, on the model's logits (vocab {}, K = {K}, T = {TEMPERATURE}); ms per step",
        model.path().as_str(),
        engine.info().vocab_size
    );
    println!("{:<52} {:>10} {:>10} {:>12}", "variant", "median", "min", "bytes read");
    let mut rows: Vec<(&str, (f64, f64, usize))> = Vec::new();
    rows.push((
        "WGSL softmax statistics + top-k, one read",
        time(&mut || {
            let request = TailRequest { adjustments: &none, temperature: TEMPERATURE, k: K, raw_top_k: None };
            let (tail, _) = pollster::block_on(logits.decode_tail(&request)).map_err(|e| e.to_string())?;
            Ok(tail.bytes_read)
        })?,
    ));
    rows.push((
        "read the whole row, softmax + top-k on the CPU",
        time(&mut || {
            let row = pollster::block_on(logits.read()).map_err(|e| e.to_string())?.remove(0);
            let _ = nucleus_sampler::softmax(&row).map_err(|e| e.to_string())?;
            let _ = nucleus_sampler::top_k_ids(&row, K);
            Ok(row.len() * 4)
        })?,
    ));
    for (name, (median, min, bytes)) in rows {
        println!("{name:<52} {median:>10.2} {min:>10.2} {bytes:>12}");
    }
    println!();
    Ok(())
}
