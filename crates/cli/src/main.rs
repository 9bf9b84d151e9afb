//! `nucleus`: the native command line. The same model, tokenizer, sampler and generation loop as
//! the browser, on Burn's wgpu backend (Vulkan, Metal, DX12; lavapipe on a machine without a GPU)
//! or its pure-Rust CPU backend.

mod bench;
mod gpu_calls;
mod inspect;
mod score;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use nucleus_engine::{
    BeamRequest, Engine, GenerateRequest, LinearKernel, LoadOptions, ModelDevice, Path, Prompt, PromptLookup,
    ResponseFormat, SharedBytes, SpeculationStats, Stopwatch, Timing, Transfer, Usage,
};
use nucleus_sampler::{SamplingParams, parse_logit_bias};
use nucleus_tokenizer::ChatMessage;
use serde::Serialize;

/// The sampling options' defaults, owned by [`SamplingParams::default`]; the flags show them.
static DEFAULTS: std::sync::LazyLock<SamplingParams> = std::sync::LazyLock::new(SamplingParams::default);

#[derive(Parser)]
#[command(name = "nucleus", version, about = "A small language model, and what happens at the last step of generation")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text, streaming it (or one JSON line per token with --json).
    Generate(Box<GenerateArgs>),
    /// Measure prefill and decode speed.
    Bench(bench::BenchArgs),
    /// Score a text token by token: each token's rank and probability after the ones before it,
    /// the text's log-likelihood and perplexity.
    Score(Box<score::ScoreArgs>),
    /// Describe a GGUF file: architecture, tensors, tokenizer.
    Inspect {
        #[command(flatten)]
        model: ModelArg,
    },
    /// Print the token ids of TEXT as a JSON array (control tokens in the text are parsed).
    Tokenize {
        #[command(flatten)]
        model: ModelArg,
        text: String,
    },
}

#[derive(clap::Args, Default)]
struct ModelArg {
    /// GGUF model file [default: $NUCLEUS_MODEL, else ~/.cache/nucleus/models/SmolLM2-135M-Instruct.Q4_1.gguf]
    #[arg(long, value_name = "PATH")]
    model: Option<PathBuf>,
}

impl ModelArg {
    /// The file at `path`.
    pub(crate) fn of(path: &std::path::Path) -> Self {
        Self { model: Some(path.to_path_buf()) }
    }

    fn path(&self) -> PathBuf {
        self.model.clone().unwrap_or_else(default_model_path)
    }

    /// The file, memory-mapped: nothing is copied, the CPU engine reads its matrices where they
    /// lie, and the pages the system brings in are the file's own (shared with its page cache).
    fn read(&self) -> Result<SharedBytes, String> {
        let path = self.path();
        let cannot = |e: std::io::Error| format!("cannot read model file {}: {e}", path.display());
        let file = std::fs::File::open(&path).map_err(cannot)?;
        if file.metadata().map_err(cannot)?.len() == 0 {
            return Ok(SharedBytes::new(Vec::new()));
        }
        // SAFETY: the map is read-only and private to this process. What it cannot rule out is
        // another process truncating or rewriting the file while it is mapped (llama.cpp's maps
        // share that): a model file is not written while it runs.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(cannot)?;
        Ok(SharedBytes::new(map))
    }
}

fn default_model_path() -> PathBuf {
    if let Some(path) = std::env::var_os("NUCLEUS_MODEL") {
        return PathBuf::from(path);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
    home.join(".cache/nucleus/models/SmolLM2-135M-Instruct.Q4_1.gguf")
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
enum Backend {
    /// The GPU through wgpu when there is a real one; the CPU engine when there is none or the
    /// only adapter emulates a GPU on the CPU (lavapipe, llvmpipe, SwiftShader), which the CPU
    /// engine outruns.
    Auto,
    /// Burn's wgpu backend (Vulkan here; lavapipe when there is no GPU).
    Wgpu,
    /// The CPU engine: our kernels over the quantized weights on every core.
    Cpu,
    /// Burn's pure-Rust CPU backend (flex), for the Burn-op path: a reference, not for speed.
    BurnCpu,
}

impl Backend {
    /// The device (Burn's wgpu backend is started once per process), and for `auto`, why it
    /// picked the CPU engine when it did.
    pub(crate) fn device(self) -> Result<(ModelDevice, Option<String>), String> {
        match self {
            Backend::Auto => Ok(match ModelDevice::wgpu() {
                Ok(gpu) if !gpu.is_cpu_adapter() => (gpu, None),
                Ok(emulated) => {
                    let adapter = emulated.gpu().map(|gpu| gpu.adapter_info().name.clone()).unwrap_or_default();
                    let why = format!(
                        "the only GPU adapter ({adapter}) emulates a GPU on the CPU, which the CPU engine outruns"
                    );
                    (ModelDevice::cpu(), Some(why))
                }
                Err(e) => (ModelDevice::cpu(), Some(format!("no GPU ({e})"))),
            }),
            Backend::Wgpu => ModelDevice::wgpu().map(|gpu| (gpu, None)).map_err(|e| e.to_string()),
            Backend::Cpu => Ok((ModelDevice::cpu(), None)),
            Backend::BurnCpu => Ok((ModelDevice::burn_cpu(), None)),
        }
    }
}

/// `--path`: how the forward pass runs.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
pub(crate) enum PathArg {
    /// Our WGSL kernels over the quantized weights (wgpu only; the default there).
    Fused,
    /// Our CPU kernels over the quantized weights (the CPU engine's, and only, path).
    Cpu,
    /// Burn tensor operations over f32 weights (the default on Burn's CPU backend).
    Burn,
}

/// `--linear`: the kernel of the linear layers on the Burn path.
#[derive(Clone, Copy, ValueEnum, PartialEq, Eq, Debug)]
pub(crate) enum LinearArg {
    /// `wgsl` on a wgpu adapter that runs on the CPU (lavapipe, SwiftShader), else `burn`.
    Auto,
    /// Burn's matmul.
    Burn,
    /// Our barrier-free `shaders/linear.wgsl` (wgpu only).
    Wgsl,
}

/// How a model is loaded: `--backend`, `--path`, `--linear`, `--context`.
#[derive(clap::Args, Clone, Copy)]
pub(crate) struct DeviceArgs {
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    backend: Backend,
    /// The forward pass [default: fused on wgpu, cpu on the CPU engine, burn on burn-cpu].
    #[arg(long, value_enum)]
    path: Option<PathArg>,
    /// The kernel of the linear layers on the Burn path.
    #[arg(long, value_enum, default_value_t = LinearArg::Auto)]
    linear: LinearArg,
}

impl DeviceArgs {
    /// The path these flags ask for on `device`.
    pub(crate) fn path(&self, device: &ModelDevice) -> Path {
        let linear = match self.linear {
            LinearArg::Auto if device.is_cpu_adapter() => LinearKernel::Wgsl,
            LinearArg::Auto | LinearArg::Burn => LinearKernel::BurnMatmul,
            LinearArg::Wgsl => LinearKernel::Wgsl,
        };
        match self.path {
            Some(PathArg::Fused) => Path::Fused,
            Some(PathArg::Cpu) => Path::Cpu,
            Some(PathArg::Burn) => Path::BurnOps(linear),
            None if device.gpu().is_some() => Path::Fused,
            None if device.is_cpu_engine() => Path::Cpu,
            None => Path::BurnOps(linear),
        }
    }
}

#[derive(clap::Args)]
struct GenerateArgs {
    #[command(flatten)]
    model: ModelArg,
    /// Raw prompt text, tokenized as is.
    #[arg(long, conflicts_with = "chat", required_unless_present = "chat")]
    prompt: Option<String>,
    /// A user message, wrapped with the model's chat template.
    #[arg(long)]
    chat: Option<String>,
    #[arg(long, default_value_t = nucleus_engine::DEFAULT_MAX_TOKENS)]
    max_tokens: usize,
    /// 0 is greedy.
    #[arg(long, default_value_t = DEFAULTS.temperature)]
    temperature: f64,
    /// 0 = off.
    #[arg(long, default_value_t = DEFAULTS.top_k)]
    top_k: usize,
    /// In (0, 1]; 1 = off.
    #[arg(long, default_value_t = DEFAULTS.top_p)]
    top_p: f64,
    /// In [0, 1]; 0 = off.
    #[arg(long, default_value_t = DEFAULTS.min_p)]
    min_p: f64,
    /// In (0, 1]; 1 = off.
    #[arg(long, default_value_t = DEFAULTS.typical_p)]
    typical_p: f64,
    /// > 0; 1 = off.
    #[arg(long, default_value_t = DEFAULTS.repetition_penalty)]
    repetition_penalty: f64,
    #[arg(long, default_value_t = DEFAULTS.presence_penalty, allow_hyphen_values = true)]
    presence_penalty: f64,
    #[arg(long, default_value_t = DEFAULTS.frequency_penalty, allow_hyphen_values = true)]
    frequency_penalty: f64,
    /// Penalties look at the last N tokens only; 0 = all.
    #[arg(long, default_value_t = DEFAULTS.penalty_last_n)]
    penalty_last_n: usize,
    /// The prompt counts as history for the repetition/presence/frequency penalties.
    #[arg(long)]
    penalize_prompt: bool,
    /// DRY multiplier; 0 = off.
    #[arg(long, default_value_t = DEFAULTS.dry_multiplier)]
    dry_multiplier: f64,
    #[arg(long, default_value_t = DEFAULTS.dry_base)]
    dry_base: f64,
    #[arg(long, default_value_t = DEFAULTS.dry_allowed_length)]
    dry_allowed_length: usize,
    /// DRY looks at the last N tokens; 0 = all.
    #[arg(long, default_value_t = DEFAULTS.dry_penalty_last_n)]
    dry_penalty_last_n: usize,
    /// Strings that break DRY's repeated sequences (tokens containing one).
    #[arg(long = "dry-sequence-breaker", value_name = "STR", default_values_t = DEFAULTS.dry_sequence_breakers.clone())]
    dry_sequence_breakers: Vec<String>,
    /// Additive bias for a token, ID=BIAS (BIAS may be -inf). Repeatable.
    #[arg(long = "logit-bias", value_name = "ID=BIAS", allow_hyphen_values = true)]
    logit_bias: Vec<String>,
    /// Seed of the sampler's generator [default: random, printed with --json].
    #[arg(long)]
    seed: Option<u64>,
    /// A stop string (repeatable); never part of the output.
    #[arg(long = "stop", value_name = "STR")]
    stop: Vec<String>,
    /// Candidates by raw logit on each --json line, 0..=256.
    #[arg(long, default_value_t = nucleus_engine::DEFAULT_TOP_LOGPROBS)]
    top_logprobs: usize,
    /// Add the sampler's explanation of each step to the --json lines.
    #[arg(long)]
    explain: bool,
    /// Keep generating past end-of-generation tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// Beam search with B beams instead of sampling (deterministic).
    #[arg(long, value_name = "B")]
    beams: Option<usize>,
    /// Beam search length penalty α (score = logprob / len^α).
    #[arg(long, default_value_t = 1.0, allow_hyphen_values = true)]
    length_penalty: f64,
    /// Constrain the output to JSON valid under the JSON Schema in FILE.
    #[arg(long, value_name = "FILE", group = "response_format")]
    json_schema: Option<PathBuf>,
    /// Constrain the output to text the regular expression matches whole (Rust regex syntax, with
    /// `\d` and `\w` ASCII as in JavaScript and JSON Schema).
    #[arg(long, value_name = "PATTERN", group = "response_format")]
    regex: Option<String>,
    /// Constrain the output to the language of the Lark grammar in FILE (llguidance's dialect).
    #[arg(long, value_name = "FILE", group = "response_format")]
    grammar: Option<PathBuf>,
    /// Speculative decoding by prompt lookup: draft up to K tokens per pass from an earlier
    /// occurrence of the context's last n-gram, verified in one pass (same output, fewer passes).
    #[arg(long, value_name = "K")]
    speculative_lookup: Option<usize>,
    /// The longest n-gram --speculative-lookup matches.
    #[arg(long, value_name = "N", default_value_t = nucleus_engine::DEFAULT_LOOKUP_NGRAM, requires = "speculative_lookup")]
    lookup_ngram: usize,
    /// KV cache positions [default: the model's context length].
    #[arg(long)]
    context: Option<usize>,
    #[command(flatten)]
    device: DeviceArgs,
    /// One JSON object per token, then a summary line.
    #[arg(long)]
    json: bool,
}

impl GenerateArgs {
    /// The response format of `--json-schema`, `--regex` or `--grammar` (at most one).
    fn response_format(&self) -> Result<Option<ResponseFormat>, String> {
        let read = |path: &PathBuf| std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()));
        if let Some(path) = &self.json_schema {
            let schema =
                serde_json::from_str(&read(path)?).map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
            return Ok(Some(ResponseFormat::JsonSchema { schema }));
        }
        if let Some(path) = &self.grammar {
            return Ok(Some(ResponseFormat::Grammar { lark: read(path)? }));
        }
        Ok(self.regex.clone().map(|pattern| ResponseFormat::Regex { pattern }))
    }

    fn prompt(&self) -> Prompt {
        match (&self.prompt, &self.chat) {
            (Some(text), _) => Prompt::Text(text.clone()),
            (None, Some(message)) => Prompt::Chat(vec![ChatMessage::user(message.clone())]),
            (None, None) => unreachable!("clap requires one"),
        }
    }

    fn sampling(&self, seed: u64) -> Result<SamplingParams, String> {
        let mut logit_bias = std::collections::BTreeMap::new();
        for entry in &self.logit_bias {
            let (id, bias) = parse_logit_bias(entry).map_err(|e| e.to_string())?;
            logit_bias.insert(id, bias);
        }
        Ok(SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            typical_p: self.typical_p,
            repetition_penalty: self.repetition_penalty,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            penalty_last_n: self.penalty_last_n,
            penalize_prompt: self.penalize_prompt,
            dry_multiplier: self.dry_multiplier,
            dry_base: self.dry_base,
            dry_allowed_length: self.dry_allowed_length,
            dry_penalty_last_n: self.dry_penalty_last_n,
            dry_sequence_breakers: self.dry_sequence_breakers.clone(),
            logit_bias,
            seed,
            ..SamplingParams::default()
        })
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Generate(args) => generate(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Score(args) => score::run(&args),
        Command::Inspect { model } => model.read().and_then(|bytes| inspect::run(&model.path(), &bytes)),
        Command::Tokenize { model, text } => tokenize(&model, &text),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn tokenize(model: &ModelArg, text: &str) -> Result<(), String> {
    let bytes = model.read()?;
    let file = nucleus_gguf::GgufFile::parse_shared(&bytes).map_err(|e| e.to_string())?;
    let tokenizer = nucleus_tokenizer::Tokenizer::from_gguf(&file).map_err(|e| e.to_string())?;
    let ids = tokenizer.encode(text).map_err(|e| e.to_string())?;
    println!("{}", serde_json::to_string(&ids).expect("ids serialize"));
    Ok(())
}

/// Reads the model and loads it as `device` says (on `existing` when given: Burn's wgpu backend
/// starts once per process), returning the engine and the load time in ms.
pub(crate) fn load_engine(
    model: &ModelArg,
    device: &DeviceArgs,
    context: Option<usize>,
    existing: Option<&ModelDevice>,
) -> Result<(Engine, f64), String> {
    let clock = Stopwatch::start();
    let bytes = model.read()?;
    let (target, why) = match existing {
        Some(target) => (target.clone(), None),
        None => device.backend.device()?,
    };
    let options = LoadOptions { context_length: context, path: Some(device.path(&target)), ..LoadOptions::default() };
    let engine = Engine::load_shared(&bytes, &target, options, |_| {})
        .map_err(|e| format!("{}: {e}", model.path().display()))?;
    // Said once the model runs: a file that does not load gets its one error line alone.
    if let Some(why) = why {
        eprintln!("[nucleus] running on the CPU engine: {why}");
    }
    Ok((engine, clock.elapsed_ms()))
}

fn generate(args: &GenerateArgs) -> Result<(), String> {
    let (mut engine, load_ms) = load_engine(&args.model, &args.device, args.context, None)?;
    if let Some(beams) = args.beams {
        return beam_search(&mut engine, args, beams);
    }
    let seed = args.seed.unwrap_or_else(random_seed);
    let request = GenerateRequest {
        prompt: args.prompt(),
        max_tokens: args.max_tokens,
        sampling: args.sampling(seed)?,
        stop: args.stop.clone(),
        ignore_eos: args.ignore_eos,
        top_logprobs: args.top_logprobs,
        explain_top_n: if args.explain { args.top_logprobs.max(1) } else { 0 },
        return_logits: false,
        forced_tokens: Vec::new(),
        speculative: args.speculative_lookup.map(|max_draft| PromptLookup { max_draft, ngram: args.lookup_ngram }),
        response_format: args.response_format()?,
    };
    let title = engine.info().title(Some(&args.model.path().to_string_lossy()));
    let device = engine.model().device().describe();
    let mut generation = engine.generate(request).map_err(|e| e.to_string())?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    while let Some(step) = pollster::block_on(generation.next_step()).map_err(|e| e.to_string())? {
        if args.json {
            writeln!(out, "{}", serde_json::to_string(&step).expect("steps serialize")).map_err(|e| e.to_string())?;
        } else {
            write!(out, "{}", step.text).map_err(|e| e.to_string())?;
            out.flush().map_err(|e| e.to_string())?;
        }
    }
    let result = generation.result();
    let finish_reason = result.finish_reason.as_ref().map_or("stopped", |r| r.as_str());
    if args.json {
        let summary = Summary {
            model: title,
            device,
            finish_reason,
            text: &result.text,
            seed,
            usage: result.usage,
            timing: SummaryTiming { load_ms, timing: result.timing },
            transfer: result.transfer,
            speculation: result.speculation,
        };
        writeln!(out, "{}", serde_json::to_string(&summary).expect("summary serializes")).map_err(|e| e.to_string())?;
    } else {
        writeln!(out).map_err(|e| e.to_string())?;
        eprintln!(
            "[{title} on {device} | {} | {} prompt + {} generated tokens | load {:.0} ms, prefill {:.1} tok/s, decode {:.1} tok/s | seed {seed}]",
            finish_reason,
            result.usage.prompt_tokens,
            result.usage.completion_tokens,
            load_ms,
            result.timing.prefill_tokens_per_s,
            result.timing.decode_tokens_per_s,
        );
        let speculation = result.speculation;
        if speculation.verify_passes > 0 {
            eprintln!(
                "[speculative: {} of {} drafted tokens accepted ({:.0} %), {:.2} tokens per decode pass]",
                speculation.accepted_tokens,
                speculation.drafted_tokens,
                speculation.acceptance_rate * 100.0,
                speculation.tokens_per_pass,
            );
        }
    }
    Ok(())
}

/// The last `--json` line.
#[derive(Serialize)]
struct Summary<'a> {
    /// The model as a person names it ([`nucleus_engine::ModelInfo::title`]).
    model: String,
    /// What it ran on ([`nucleus_engine::ModelDevice::describe`]): says when that is a CPU
    /// emulation of a GPU.
    device: String,
    finish_reason: &'a str,
    text: &'a str,
    seed: u64,
    usage: Usage,
    timing: SummaryTiming,
    transfer: Transfer,
    speculation: SpeculationStats,
}

#[derive(Serialize)]
struct SummaryTiming {
    load_ms: f64,
    #[serde(flatten)]
    timing: Timing,
}

fn beam_search(engine: &mut Engine, args: &GenerateArgs, beams: usize) -> Result<(), String> {
    let request = BeamRequest {
        prompt: args.prompt(),
        beams,
        length_penalty: args.length_penalty,
        max_tokens: args.max_tokens,
        ignore_eos: args.ignore_eos,
    };
    let output = pollster::block_on(engine.beam_search(&request)).map_err(|e| e.to_string())?;
    if args.json {
        println!("{}", serde_json::to_string(&output).expect("beam output serializes"));
    } else {
        for (rank, h) in output.hypotheses.iter().enumerate() {
            println!(
                "#{} score {:.4} logprob {:.4} ({}, {} tokens)\n{}\n",
                rank + 1,
                h.score,
                h.logprob,
                h.finish_reason.as_str(),
                h.tokens.len(),
                h.text
            );
        }
    }
    Ok(())
}

fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0),
    );
    hasher.finish()
}
