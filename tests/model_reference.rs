//! The models on their real GGUF files against the independent float64 references, on every path:
//! the fused kernels over the quantized weights (wgpu), Burn's operations on wgpu (with either
//! kernel for the linear layers) and on the CPU backend. Every last-position logit within 1e-3,
//! the top-20 order (neighbours closer than 1e-3 may swap), the greedy tokens, and prefill+decode
//! equal to a full recompute within 1e-4 (Burn's operations on wgpu: the real files' logits only,
//! see `BURN_WGPU`). SmolLM2-135M (Llama) and Gemma 3 270M; tiny Llama 3, Qwen2, Qwen3 and Qwen3.5
//! files.

use nucleus_gguf::{GgufFile, SharedBytes};
use nucleus_model::{AttentionHeads, DeviceLogits, LinearKernel, Logits, MAX_ROWS, Model, ModelDevice, Path};
use nucleus_tests::{
    GEMMA3, LogitCase, Reference, SMOLLM2, TINY_FAMILIES, TINY_QWEN35, TINY_ROPE_SCALING, burn_cpu_device, cpu_device,
    gemma_bytes, max_abs_diff, model_bytes, reference, tiny_attention, tiny_family, top_ids, wgpu_device,
};
use nucleus_tokenizer::Tokenizer;

const LOGIT_TOLERANCE: f32 = 1e-3;
const RECOMPUTE_TOLERANCE: f32 = 1e-4;

fn read(logits: DeviceLogits) -> Vec<Vec<f32>> {
    pollster::block_on(logits.read()).unwrap()
}

fn last_logits(model: &Model, tokens: &[u32]) -> Vec<f32> {
    let mut cache = model.new_cache(tokens.len()).unwrap();
    read(model.forward(tokens, &mut cache, Logits::Last).unwrap()).remove(0)
}

fn argmax(values: &[f32]) -> u32 {
    top_ids(values, 1)[0]
}

/// Prefill, then greedy decode until `steps` tokens or an end of generation, as the reference
/// did. Returns the tokens and the logits that chose the last one.
fn greedy(model: &Model, prompt: &[u32], steps: usize, ends: &[u32]) -> (Vec<u32>, Vec<f32>) {
    let mut cache = model.new_cache(prompt.len() + steps).unwrap();
    let mut logits = read(model.forward(prompt, &mut cache, Logits::Last).unwrap()).remove(0);
    let mut tokens = Vec::new();
    loop {
        let next = argmax(&logits);
        tokens.push(next);
        if tokens.len() == steps || ends.contains(&next) {
            return (tokens, logits);
        }
        logits = read(model.forward(&[next], &mut cache, Logits::Last).unwrap()).remove(0);
    }
}

/// Whether `ours` orders the reference's top 20 as the reference does, neighbours whose reference
/// logits are closer than the logit tolerance allowed to swap.
fn same_top20(ours: &[f32], case: &LogitCase) -> bool {
    let our_top = top_ids(ours, 20);
    let reference_top: Vec<u32> = case.top20.iter().map(|t| t.id).collect();
    if our_top == reference_top {
        return true;
    }
    let logit_of = |id: u32| case.top20.iter().find(|t| t.id == id).map(|t| t.logit);
    our_top.iter().zip(&reference_top).all(|(&a, &b)| {
        a == b || matches!((logit_of(a), logit_of(b)), (Some(x), Some(y)) if (x - y).abs() < LOGIT_TOLERANCE)
    })
}

/// What a check runs: the reference cases named (all when empty), each case's last-position
/// logits and top 20, and, with `decode`, its greedy tokens and the recompute.
#[derive(Clone, Copy)]
struct Scope {
    cases: &'static [&'static str],
    decode: bool,
}

/// Every case, the decode steps too.
const EVERY_CASE: Scope = Scope { cases: &[], decode: true };

/// Burn's operations on wgpu over a real file: the prefill's logits only. Its decode steps are
/// the same cache code as on Burn's CPU backend (every case of both real files there) and on wgpu
/// for the tiny families (every path); on lavapipe a real model's steps through Burn's f32
/// weights were most of this file's 1,712 s: SmolLM2's tests took 599 and 574 s (either linear
/// kernel), Gemma's 172 s; their prefills alone take 89, 76 and 25 s.
const BURN_WGPU: Scope = Scope { cases: &[], decode: false };

/// The default model on `path`.
fn check_backend(name: &str, device: ModelDevice, path: Path, scope: Scope) {
    check_model(name, device, path, SMOLLM2.file_name, model_bytes(), &SMOLLM2.reference(), scope);
}

/// Gemma 3 270M on `path`.
fn check_gemma(name: &str, device: ModelDevice, path: Path, scope: Scope) {
    check_model(name, device, path, GEMMA3.file_name, gemma_bytes(), &GEMMA3.reference(), scope);
}

fn check_model(
    name: &str,
    device: ModelDevice,
    path: Path,
    file_name: &str,
    bytes: &[u8],
    reference: &Reference,
    scope: Scope,
) {
    let file = GgufFile::parse(bytes).unwrap();
    let ends = Tokenizer::from_gguf(&file).unwrap().end_of_generation_ids().to_vec();
    let started = std::time::Instant::now();
    let model = Model::load(&file, &device, path).unwrap();
    println!(
        "[{name}] {file_name} loaded in {:.2?}, weights {:.1} MiB",
        started.elapsed(),
        model.memory().weight_bytes as f64 / 1048576.0
    );
    let mut failures = Vec::new();
    for (case_name, case) in
        reference.logit_cases.iter().filter(|(n, _)| scope.cases.is_empty() || scope.cases.contains(&n.as_str()))
    {
        let started = std::time::Instant::now();
        let ours = last_logits(&model, &case.ids);
        let expected = case.last_logits();
        let max_diff = max_abs_diff(&ours, &expected);
        let same_order = same_top20(&ours, case);
        println!(
            "[{name}] {case_name:8} {} tokens: max |dlogit| = {max_diff:.2e} over {} ids; top-20 order {}; prefill {:.2?}",
            case.ids.len(),
            ours.len(),
            if same_order { "identical" } else { "DIFFERS" },
            started.elapsed()
        );
        if max_diff > LOGIT_TOLERANCE {
            failures.push(format!("{case_name}: max |dlogit| {max_diff} > {LOGIT_TOLERANCE}"));
        }
        if !same_order {
            let reference_top: Vec<u32> = case.top20.iter().map(|t| t.id).collect();
            failures.push(format!("{case_name}: top-20 {:?} != reference {reference_top:?}", top_ids(&ours, 20)));
        }
        if scope.decode {
            check_greedy_and_recompute(name, case_name, &model, case, &ends, &mut failures);
        }
    }
    assert!(failures.is_empty(), "[{name}] {}", failures.join("\n"));
}

fn check_greedy_and_recompute(
    name: &str,
    case_name: &str,
    model: &Model,
    case: &LogitCase,
    ends: &[u32],
    failures: &mut Vec<String>,
) {
    let started = std::time::Instant::now();
    let (tokens, decode_logits) = greedy(model, &case.ids, case.greedy.len(), ends);
    let elapsed = started.elapsed();
    let same = tokens == case.greedy;
    println!(
        "[{name}] {case_name:8} greedy {} tokens {} ({:.1} tok/s)",
        tokens.len(),
        if same { "identical" } else { "DIFFER" },
        tokens.len() as f64 / elapsed.as_secs_f64()
    );
    if !same {
        failures.push(format!("{case_name}: greedy {tokens:?} != reference {:?}", case.greedy));
        return;
    }
    // The logits that chose the last token came from prefill + decode; recompute them in one pass.
    let mut full = case.ids.clone();
    full.extend_from_slice(&tokens[..tokens.len() - 1]);
    let recomputed = last_logits(model, &full);
    let diff = max_abs_diff(&decode_logits, &recomputed);
    println!(
        "[{name}] {case_name:8} prefill+decode vs full recompute over {} positions: max |dlogit| = {diff:.2e}",
        full.len()
    );
    if diff > RECOMPUTE_TOLERANCE {
        failures.push(format!("{case_name}: prefill+decode differs from recompute by {diff}"));
    }
}

/// The default path on wgpu: our kernels over the GGUF blocks.
#[test]
fn fused_path_matches_reference() {
    check_backend("fused", wgpu_device(), Path::Fused, EVERY_CASE);
}

#[test]
fn wgpu_burn_ops_match_reference() {
    check_backend("wgpu, burn matmul", wgpu_device(), Path::BurnOps(LinearKernel::BurnMatmul), BURN_WGPU);
}

/// The linear layers in `shaders/linear.wgsl` (the kernel of CPU adapters on the Burn path)
/// instead of Burn's matmul.
#[test]
fn wgpu_burn_ops_with_the_wgsl_linear_kernel_match_reference() {
    check_backend("wgpu, linear.wgsl", wgpu_device(), Path::BurnOps(LinearKernel::Wgsl), BURN_WGPU);
}

/// The CPU engine: our kernels over the GGUF blocks, no GPU.
#[test]
fn cpu_engine_matches_reference() {
    check_backend("cpu engine", cpu_device(), Path::Cpu, EVERY_CASE);
}

#[test]
fn burn_cpu_matches_reference() {
    check_backend("burn cpu", burn_cpu_device(), Path::BurnOps(LinearKernel::BurnMatmul), EVERY_CASE);
}

/// Gemma 3 on the CPU engine, every case, the long one (713 tokens, past the 512-token window of
/// the local blocks) included.
#[test]
fn gemma_cpu_engine_matches_reference() {
    check_gemma("gemma, cpu engine", cpu_device(), Path::Cpu, EVERY_CASE);
}

/// Gemma 3 on Burn's CPU backend, every case: the long one (713 tokens) is past the 512-token
/// sliding window of the local blocks, so only a correct window gives its logits.
#[test]
fn gemma_burn_cpu_matches_reference() {
    check_gemma("gemma, burn cpu", burn_cpu_device(), Path::BurnOps(LinearKernel::BurnMatmul), EVERY_CASE);
}

/// Gemma 3 in the fused kernels on lavapipe; the long prompt too when NUCLEUS_LONG_PROMPTS is set
/// (minutes on an emulated GPU; the window itself is in the attention kernel's parity test).
#[test]
fn gemma_fused_path_matches_reference() {
    let cases: &[&str] = if std::env::var_os("NUCLEUS_LONG_PROMPTS").is_some() { &[] } else { &["capital", "story"] };
    check_gemma("gemma, fused", wgpu_device(), Path::Fused, Scope { cases, ..EVERY_CASE });
}

/// Llama 3 (`rope_freqs`), Qwen2 (Q/K/V biases) and Qwen3 (per-head Q/K norms, heads wider than
/// the embedding) as tiny models against transformers' float64 logits on the weights their GGUF
/// holds: every path, every case, the greedy tokens and the recompute.
#[test]
fn tiny_families_match_transformers_on_every_path() {
    for family in TINY_FAMILIES {
        check_tiny_on_every_path(family);
    }
}

/// RoPE scaling as files carry it, on tiny models against transformers' float64 logits: YaRN
/// (Qwen2) and linear on Gemma 3's global block only, every path, every case, the greedy tokens
/// and the recompute. The cases run past the local blocks' window of 8.
#[test]
fn rope_scaling_matches_transformers_on_every_path() {
    for family in TINY_ROPE_SCALING {
        check_tiny_on_every_path(family);
    }
}

fn check_tiny_on_every_path(family: &str) {
    let (bytes, reference) = tiny_family(family);
    let file = format!("{family}.gguf");
    let paths = [
        ("cpu engine", cpu_device(), Path::Cpu),
        ("burn cpu", burn_cpu_device(), Path::BurnOps(LinearKernel::BurnMatmul)),
        ("fused", wgpu_device(), Path::Fused),
        ("wgpu, burn matmul", wgpu_device(), Path::BurnOps(LinearKernel::BurnMatmul)),
        ("wgpu, linear.wgsl", wgpu_device(), Path::BurnOps(LinearKernel::Wgsl)),
    ];
    for (name, device, path) in paths {
        check_model(&format!("{family}, {name}"), device, path, &file, &bytes, &reference, EVERY_CASE);
    }
}

/// Qwen3.5 (Gated DeltaNet blocks with their state beside gated attention with partial RoPE;
/// the real vocabulary) on the CPU engine and the fused path against transformers' float64
/// logits: every case (one prompt over a chunk boundary of the CPU engine's chunked delta rule),
/// the greedy tokens (decode steps from the state) and the recompute. The Burn-op path refuses
/// it, naming what runs it.
#[test]
fn tiny_qwen35_matches_transformers_on_the_cpu_engine_and_the_fused_path() {
    let (bytes, reference) = tiny_family(TINY_QWEN35);
    assert!(reference.logit_cases["long"].ids.len() > nucleus_cpu::delta_net::CHUNK);
    check_model("qwen35, cpu engine", cpu_device(), Path::Cpu, "qwen35.gguf", &bytes, &reference, EVERY_CASE);
    check_model("qwen35, fused", wgpu_device(), Path::Fused, "qwen35.gguf", &bytes, &reference, EVERY_CASE);
    let file = GgufFile::parse(&bytes).unwrap();
    let refusals = [
        ("burn cpu", burn_cpu_device(), Path::BurnOps(LinearKernel::BurnMatmul)),
        ("wgpu, linear.wgsl", wgpu_device(), Path::BurnOps(LinearKernel::Wgsl)),
    ];
    for (name, device, path) in refusals {
        let error = Model::load(&file, &device, path).err().expect("refused").to_string();
        assert!(error.contains("Gated DeltaNet") && error.contains("CPU engine"), "{name}: {error}");
    }
}

/// Scoring a reference prompt followed by its greedy tokens rates the reference's distribution
/// at the prompt's last position (log-sum-exp, the first greedy token's log-probability and the
/// top list's, within 1e-3 of the reference's log-softmax, and its entropy) and ranks every greedy token first
/// (second only behind a near-tie, within 1e-4, that a pass of several rows may order
/// differently from a decode step). Every path, the tiny families, Qwen3.5 (its state carried
/// from pass to pass), SmolLM2 and Gemma 3 (a 262k vocabulary, the fused path's records only).
#[test]
fn scoring_a_text_rates_each_position_like_the_reference_on_every_path() {
    let check = |name: &str, model: &Model, case: &LogitCase| {
        let text = [case.ids.as_slice(), case.greedy.as_slice()].concat();
        let mut cache = model.new_cache(text.len()).unwrap();
        let scores = pollster::block_on(model.score(&text, &mut cache, 5)).unwrap();
        assert_eq!((scores.rows.len(), cache.len()), (text.len(), text.len()), "{name}");
        let expected = case.last_logits();
        let max = expected.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let lse = f64::from(max) + expected.iter().map(|&x| (f64::from(x) - f64::from(max)).exp()).sum::<f64>().ln();
        let log_p = |id: u32| f64::from(expected[id as usize]) - lse;
        let row = &scores.rows[case.ids.len() - 1];
        let next = row.target.expect("a token follows");
        assert_eq!(next.id, case.greedy[0], "{name}");
        assert!((row.log_prob(next.logit) - log_p(next.id)).abs() < 1e-3, "{name}: {row:?}");
        let entropy: f64 = -(0..expected.len() as u32).map(|id| log_p(id).exp() * log_p(id)).sum::<f64>();
        assert!((row.entropy - entropy).abs() < 1e-3, "{name}: entropy {} vs the reference's {entropy}", row.entropy);
        for &(id, logit) in &row.top {
            assert!((row.log_prob(logit) - log_p(id)).abs() < 1e-3, "{name}: top {id} {logit}, {row:?}");
        }
        assert_eq!(row.top.len(), 5, "{name}");
        for (offset, row) in scores.rows[case.ids.len() - 1..].iter().enumerate() {
            let Some(next) = row.target else {
                assert_eq!(offset, case.greedy.len(), "{name}: only the last position rates nothing");
                continue;
            };
            let near_tie = next.rank == 2 && row.top[0].1 - next.logit <= 1e-4;
            assert!(next.rank == 1 || near_tie, "{name}: greedy token {offset} ranked {}: {row:?}", next.rank);
            assert_eq!(next.logit, if next.rank == 1 { row.top[0].1 } else { row.top[1].1 }, "{name}");
        }
        println!("[{name}] scored {} tokens, {} bytes read", text.len(), scores.bytes_read);
        scores.bytes_read
    };
    for family in TINY_FAMILIES.into_iter().chain([TINY_QWEN35]) {
        let (bytes, reference) = tiny_family(family);
        let file = GgufFile::parse(&bytes).unwrap();
        // The longest case: Qwen3.5's runs over two passes, its state carried between them.
        let case = reference.logit_cases.values().max_by_key(|case| case.ids.len()).unwrap();
        let mut paths = vec![("cpu engine", cpu_device(), Path::Cpu), ("fused", wgpu_device(), Path::Fused)];
        if family != TINY_QWEN35 {
            paths.push(("burn cpu", burn_cpu_device(), Path::BurnOps(LinearKernel::BurnMatmul)));
        }
        for (name, device, path) in paths {
            check(&format!("{family}, {name}"), &Model::load(&file, &device, path).unwrap(), case);
        }
    }
    for (model_file, bytes, case) in [(SMOLLM2, model_bytes(), "capital"), (GEMMA3, gemma_bytes(), "capital")] {
        let file = GgufFile::parse(bytes).unwrap();
        let case = &model_file.reference().logit_cases[case];
        let text = case.ids.len() + case.greedy.len();
        let cpu = check(
            &format!("{}, cpu engine", model_file.file_name),
            &Model::load(&file, &cpu_device(), Path::Cpu).unwrap(),
            case,
        );
        assert_eq!(cpu, 0, "the CPU engine's rows are in memory");
        let fused = Model::load(&file, &wgpu_device(), Path::Fused).unwrap();
        let read = check(&format!("{}, fused", model_file.file_name), &fused, case);
        assert_eq!(read, (text * nucleus_kernels::score_words(5) * 4) as u64, "only the records are read");
    }
}

/// A block's attention weights for `rows` of `tokens` read from a fresh cache.
fn attention_rows(
    model: &Model,
    tokens: &[u32],
    block: usize,
    heads: AttentionHeads,
    rows: std::ops::Range<usize>,
) -> Vec<Vec<f32>> {
    let mut cache = model.new_cache(tokens.len()).unwrap();
    let map = pollster::block_on(model.attention(tokens, &mut cache, block, heads, rows.clone())).unwrap();
    assert_eq!((map.first, map.rows.len(), cache.len()), (rows.start, rows.len(), tokens.len()));
    map.rows
}

/// Every row of an attention read sums to 1 within 1e-5 and holds one weight per position up
/// to its own (nothing past the causal edge), zero before `window` positions back.
fn check_rows(rows: &[Vec<f32>], first: usize, window: Option<usize>, what: &str) {
    for (i, row) in rows.iter().enumerate() {
        let position = first + i;
        assert_eq!(row.len(), position + 1, "{what}: row {position}");
        let sum: f64 = row.iter().map(|&w| f64::from(w)).sum();
        assert!((sum - 1.0).abs() < 1e-5, "{what}: row {position} sums to {sum}");
        if let Some(window) = window {
            let before = (position + 1).saturating_sub(window);
            assert!(row[..before].iter().all(|&w| w == 0.0), "{what}: row {position} attends before its window");
        }
    }
}

/// The attention weights of every layer and head (and their mean) of the tiny families on every
/// path against transformers' `output_attentions` in float64: within 1e-4, each row summing to 1.
#[test]
fn attention_weights_match_transformers_on_every_path() {
    for family in TINY_FAMILIES {
        let (bytes, _) = tiny_family(family);
        let reference = tiny_attention(family);
        let file = GgufFile::parse(&bytes).unwrap();
        let paths = [
            ("cpu engine", cpu_device(), Path::Cpu),
            ("burn cpu", burn_cpu_device(), Path::BurnOps(LinearKernel::BurnMatmul)),
            ("fused", wgpu_device(), Path::Fused),
            ("wgpu, linear.wgsl", wgpu_device(), Path::BurnOps(LinearKernel::Wgsl)),
        ];
        for (name, device, path) in paths {
            let model = Model::load(&file, &device, path).unwrap();
            let n = reference.ids.len();
            let mut worst = 0.0f64;
            for (block, heads) in reference.layers.iter().enumerate() {
                for (head, expected) in heads.iter().enumerate() {
                    let rows = attention_rows(&model, &reference.ids, block, AttentionHeads::One(head), 0..n);
                    check_rows(&rows, 0, None, &format!("{family}, {name}, layer {block} head {head}"));
                    for (row, expected) in rows.iter().zip(expected) {
                        for (&w, &e) in row.iter().zip(expected) {
                            worst = worst.max((f64::from(w) - e).abs());
                        }
                    }
                }
                // The mean of the heads, for the last rows only.
                let mean = attention_rows(&model, &reference.ids, block, AttentionHeads::Mean, n - 3..n);
                for (i, row) in mean.iter().enumerate() {
                    let position = n - 3 + i;
                    for (key, &w) in row.iter().enumerate() {
                        let e = heads.iter().map(|head| head[position][key]).sum::<f64>() / heads.len() as f64;
                        worst = worst.max((f64::from(w) - e).abs());
                    }
                }
            }
            println!("[{family}, {name}] attention weights of {n} positions: max |dw| = {worst:.2e}");
            assert!(worst < 1e-4, "{family}, {name}: attention weights off by {worst}");
        }
    }
}

/// Gemma 3's local layers see only their window: on the 713-token reference prompt (past the
/// 512-position window) a local layer's last rows are zero before it and a global layer's are
/// not, on the CPU engine; on the fused path a short prompt's rows equal the CPU engine's.
/// Qwen3.5's Gated DeltaNet layers have no attention to read; its attention layers' weights
/// agree on both paths.
#[test]
fn windows_and_recurrent_layers_show_in_attention_reads() {
    let file = GgufFile::parse(gemma_bytes()).unwrap();
    let config = nucleus_model::ModelConfig::from_gguf(&file).unwrap();
    let window = config.sliding_window.expect("Gemma 3 has local layers");
    let (local, global) = (0, (0..config.block_count).find(|&b| config.block_attention(b).window.is_none()).unwrap());
    let long = &GEMMA3.reference().logit_cases["long"].ids;
    assert!(long.len() > window);
    let cpu = Model::load(&file, &cpu_device(), Path::Cpu).unwrap();
    let n = long.len();
    let rows = attention_rows(&cpu, long, local, AttentionHeads::Mean, n - 2..n);
    check_rows(&rows, n - 2, Some(window), "gemma local layer");
    let rows = attention_rows(&cpu, long, global, AttentionHeads::One(1), n - 2..n);
    check_rows(&rows, n - 2, None, "gemma global layer");
    assert!(rows[1][..n - window].iter().any(|&w| w > 0.0), "a global layer sees past the window");
    let short = &GEMMA3.reference().logit_cases["story"].ids;
    let fused = Model::load(&file, &wgpu_device(), Path::Fused).unwrap();
    let all = 0..short.len();
    let (on_cpu, on_gpu) = (
        attention_rows(&cpu, short, local, AttentionHeads::Mean, all.clone()),
        attention_rows(&fused, short, local, AttentionHeads::Mean, all),
    );
    check_rows(&on_gpu, 0, Some(window), "gemma fused");
    assert!(max_abs_diff(&on_cpu.concat(), &on_gpu.concat()) < 1e-4);

    let (bytes, reference) = tiny_family(TINY_QWEN35);
    let file = GgufFile::parse(&bytes).unwrap();
    let config = nucleus_model::ModelConfig::from_gguf(&file).unwrap();
    let ids = &reference.logit_cases["chat"].ids;
    let attending = (0..config.block_count).find(|&b| config.mixer(b) == nucleus_model::Mixer::Attention).unwrap();
    let recurrent = (0..config.block_count).find(|&b| config.mixer(b) != nucleus_model::Mixer::Attention).unwrap();
    let mut reads = Vec::new();
    for (device, path) in [(cpu_device(), Path::Cpu), (wgpu_device(), Path::Fused)] {
        let model = Model::load(&file, &device, path).unwrap();
        let rows = attention_rows(&model, ids, attending, AttentionHeads::One(0), 0..ids.len());
        check_rows(&rows, 0, None, "qwen35");
        reads.push(rows.concat());
        let mut cache = model.new_cache(ids.len()).unwrap();
        let refused = pollster::block_on(model.attention(ids, &mut cache, recurrent, AttentionHeads::Mean, 0..1));
        assert!(refused.unwrap_err().to_string().contains("fixed-size state"));
    }
    assert!(max_abs_diff(&reads[0], &reads[1]) < 1e-4, "qwen35: the paths differ");
}

/// Gemma 3 in Burn's operations on lavapipe, whose 128 MiB bindings hold its f32 embedding in five
/// parts.
#[test]
fn gemma_wgpu_burn_ops_match_reference() {
    check_gemma(
        "gemma, wgpu, burn matmul",
        wgpu_device(),
        Path::BurnOps(LinearKernel::BurnMatmul),
        Scope { cases: &["capital"], ..BURN_WGPU },
    );
}

#[test]
fn each_path_is_refused_on_a_device_it_does_not_run_on() {
    let file = GgufFile::parse(model_bytes()).unwrap();
    let refusals = [
        (burn_cpu_device(), Path::BurnOps(LinearKernel::Wgsl), "runs on wgpu devices"),
        (burn_cpu_device(), Path::Fused, "runs on wgpu devices"),
        (cpu_device(), Path::Fused, "runs on wgpu devices"),
        (cpu_device(), Path::BurnOps(LinearKernel::BurnMatmul), "runs on a Burn device"),
        (burn_cpu_device(), Path::Cpu, "runs on ModelDevice::cpu()"),
        (wgpu_device(), Path::Cpu, "runs on ModelDevice::cpu()"),
    ];
    for (device, path, needle) in refusals {
        let error = Model::load(&file, &device, path).err().unwrap();
        assert!(error.to_string().contains(needle), "{path:?} on {}: {error}", device.describe());
    }
}

/// The fused path with the fused weights only: the model file's 98 MB, not 555 MiB of f32.
#[test]
fn fused_weights_stay_quantized_on_the_gpu() {
    let file = GgufFile::parse(model_bytes()).unwrap();
    let model = Model::load(&file, &wgpu_device(), Path::Fused).unwrap();
    let bytes = model.memory().weight_bytes;
    println!("[fused] weights on the GPU: {bytes} bytes ({:.1} MiB)", bytes as f64 / 1048576.0);
    assert!(bytes <= 110 * 1024 * 1024, "{bytes} bytes of weights");
    assert!(bytes as usize <= model_bytes().len(), "no more than the file holds");
}

/// A prompt longer than one pass (and than the cache's first allocation) gives the logits of
/// the same tokens run in other cuts: one call, or two calls where the second grows the cache.
/// The tiny Qwen3.5 (1,024 positions): its attention blocks' rows and its recurrent blocks' state
/// both carried from pass to pass (SmolLM2's 300 positions took 370 s on lavapipe).
#[test]
fn fused_prefill_in_several_passes_and_a_growing_cache_agree() {
    // The recurrent state sums 300 positions in other cuts (the delta rule's chunks start at
    // other positions): 1.1e-4 here and 1.3e-4 on the CPU engine, logits up to 9.
    const CUTS_TOLERANCE: f32 = 3e-4;
    let (bytes, reference) = tiny_family(TINY_QWEN35);
    let file = GgufFile::parse(&bytes).unwrap();
    let model = Model::load(&file, &wgpu_device(), Path::Fused).unwrap();
    let ids = &reference.logit_cases["long"].ids;
    let tokens: Vec<u32> = ids.iter().copied().cycle().take(2 * MAX_ROWS + 44).collect();
    let whole = last_logits(&model, &tokens);
    let mut cache = model.new_cache(1024).unwrap();
    drop(model.forward(&tokens[..200], &mut cache, Logits::Last).unwrap());
    let split = read(model.forward(&tokens[200..], &mut cache, Logits::Last).unwrap()).remove(0);
    let diff = max_abs_diff(&whole, &split);
    println!(
        "[fused] {} tokens in 3 passes vs 200 + {} (cache grown): max |dlogit| = {diff:.2e}",
        tokens.len(),
        tokens.len() - 200
    );
    assert!(diff < CUTS_TOLERANCE, "{diff}");
    assert_eq!(top_ids(&whole, 20), top_ids(&split, 20));
}

fn check_all_positions(device: ModelDevice, path: Path) {
    let file = GgufFile::parse(model_bytes()).unwrap();
    let model = Model::load(&file, &device, path).unwrap();
    let ids = &reference().logit_cases["capital"].ids;
    let mut cache = model.new_cache(ids.len()).unwrap();
    let all = read(model.forward(ids, &mut cache, Logits::All).unwrap());
    assert_eq!(all.len(), ids.len());
    // Same computation, different matrix shapes for the output layer: equal to float rounding.
    let last = last_logits(&model, ids);
    let diff = max_abs_diff(all.last().unwrap(), &last);
    assert!(diff < RECOMPUTE_TOLERANCE, "{path:?}: last row differs by {diff}");
    // Row i is the prediction after token i: row 0 equals a one-token prefill.
    let diff = max_abs_diff(&all[0], &last_logits(&model, &ids[..1]));
    assert!(diff < RECOMPUTE_TOLERANCE, "{path:?}: first row differs by {diff}");
}

#[test]
fn all_position_logits_equal_last_position_logits() {
    check_all_positions(cpu_device(), Path::Cpu);
    check_all_positions(burn_cpu_device(), Path::BurnOps(LinearKernel::BurnMatmul));
    check_all_positions(wgpu_device(), Path::Fused);
}

#[test]
fn context_overflow_and_bad_tokens_are_errors() {
    let file = GgufFile::parse(model_bytes()).unwrap();
    let paths = [
        (cpu_device(), Path::Cpu),
        (burn_cpu_device(), Path::BurnOps(LinearKernel::BurnMatmul)),
        (wgpu_device(), Path::Fused),
    ];
    for (device, path) in paths {
        check_errors(&file, &device, path);
    }
}

fn check_errors(file: &GgufFile, device: &ModelDevice, path: Path) {
    let model = Model::load(file, device, path).unwrap();
    let mut cache = model.new_cache(4).unwrap();
    let err = model.forward(&[1, 2, 3, 4, 5], &mut cache, Logits::Last).err().unwrap();
    assert_eq!(err.to_string(), "the sequence needs 5 positions but the context holds 4");
    let err = model.forward(&[49_152], &mut cache, Logits::Last).err().unwrap();
    assert_eq!(err.to_string(), "token id 49152 is outside the vocabulary of 49152");
    assert!(model.new_cache(8193).is_err());
    assert_eq!(cache.len(), 0, "a failed forward leaves the cache untouched");
}

/// The logit lens on the fused, Burn-op (wgpu) and CPU-engine paths: each block's statistics, top candidates and
/// followed logits are the CPU reference's final norm and output layer of that block's residual;
/// the last block's are the pass's own logits (and the reference's); the two paths' residuals
/// agree at every depth; " Paris" wins only at the end. The fused path reads back only what the
/// lens shows (never blocks × vocabulary).
#[test]
fn the_logit_lens_reads_each_blocks_residual_through_the_head_and_ends_on_the_passs_logits() {
    use nucleus_kernels::reference::lm_head;
    const CANDIDATES: usize = 10;
    let file = GgufFile::parse(model_bytes()).unwrap();
    let gamma = file.dequantize("output_norm.weight").unwrap();
    let head = file.dequantize("token_embd.weight").unwrap();
    let case = &reference().logit_cases["capital"];
    let paris = case.top20[0].id;
    let mut residuals = Vec::new();
    let paths = [
        (wgpu_device(), Path::Fused),
        (wgpu_device(), Path::BurnOps(LinearKernel::BurnMatmul)),
        (cpu_device(), Path::Cpu),
    ];
    for (device, path) in paths {
        let model = Model::load(&file, &device, path).unwrap();
        let (blocks, dim, vocab) =
            (model.config().block_count, model.config().embedding_length, model.config().vocab_size);
        let mut cache = model.new_cache(case.ids.len() + 1).unwrap();
        // The prompt but its last token first: the lens then runs one token over a filled cache.
        let (context, last) = case.ids.split_at(case.ids.len() - 1);
        model.forward(context, &mut cache, Logits::Last).unwrap();
        let lens = pollster::block_on(model.logit_lens(last, &mut cache, CANDIDATES)).unwrap();
        let read = lens.bytes_read;
        if path == Path::Fused {
            let expected = blocks * (dim + 4 + 3 * CANDIDATES) * 4;
            println!("[lens] the fused lens read {read} bytes (the rows would be {})", blocks * vocab * 4);
            assert_eq!(read, expected as u64, "residuals and the per-block records only");
        }
        assert_eq!(cache.len(), case.ids.len());
        assert_eq!((lens.hidden.len(), lens.layers.len()), (blocks, blocks));
        // The reference: the CPU's norm and head of every residual, reduced the same way.
        let rows: Vec<Vec<f32>> = lens
            .hidden
            .iter()
            .map(|row| lm_head(row, &gamma, model.config().rms_norm_eps, &head).into_iter().map(|v| v as f32).collect())
            .collect();
        let expected = nucleus_model::LogitLens::from_rows(lens.hidden.clone(), &rows, CANDIDATES);
        for (layer, (ours, theirs)) in lens.layers.iter().zip(&expected.layers).enumerate() {
            let what = format!("{path:?}: block {}", layer + 1);
            assert!((ours.log_sum_exp - theirs.log_sum_exp).abs() < f64::from(LOGIT_TOLERANCE), "{what}: log-sum-exp");
            assert_eq!(ours.top[0].0, theirs.top[0].0, "{what}: its own top token");
            assert!(max_abs_diff(&ours.tracked, &theirs.tracked) < LOGIT_TOLERANCE, "{what}: the followed logits");
        }
        let own = last_logits(&model, &case.ids);
        let final_layer = lens.layers.last().unwrap();
        let at = |row: &[f32]| final_layer.top.iter().map(|&(id, _)| row[id as usize]).collect::<Vec<f32>>();
        assert_eq!(final_layer.top.iter().map(|&(id, _)| id).collect::<Vec<_>>(), top_ids(&own, CANDIDATES));
        assert!(max_abs_diff(&final_layer.tracked, &at(&own)) < RECOMPUTE_TOLERANCE, "{path:?}: not the pass's logits");
        assert!(
            max_abs_diff(&final_layer.tracked, &at(&case.last_logits())) < LOGIT_TOLERANCE,
            "{path:?}: the last block against the reference"
        );
        assert_eq!(final_layer.top[0].0, paris);
        assert_ne!(lens.layers[0].top[0].0, paris, "the first block does not know the answer yet");
        residuals.push(lens.hidden);
    }
    for other in &residuals[1..] {
        for (layer, (fused, theirs)) in residuals[0].iter().zip(other).enumerate() {
            let scale = fused.iter().fold(1.0f32, |m, v| m.max(v.abs()));
            let diff = max_abs_diff(fused, theirs);
            assert!(
                diff < 1e-4 * scale,
                "block {}: the paths' residuals differ by {diff} (largest value {scale})",
                layer + 1
            );
        }
    }
}

/// Gemma 3's lens on the fused path (two output-layer parts on lavapipe, 262,144 entries): the
/// last block's candidates are the reference's top ones, and " Paris" forms late.
#[test]
fn gemma_logit_lens_on_the_fused_path_reads_only_what_it_shows() {
    let file = GgufFile::parse(gemma_bytes()).unwrap();
    let case = &GEMMA3.reference().logit_cases["capital"];
    let model = Model::load(&file, &wgpu_device(), Path::Fused).unwrap();
    let mut cache = model.new_cache(case.ids.len()).unwrap();
    let lens = pollster::block_on(model.logit_lens(&case.ids, &mut cache, 10)).unwrap();
    assert_eq!(lens.bytes_read, (18 * (640 + 4 + 30) * 4) as u64, "18 blocks' residuals and records, no row");
    let last = lens.layers.last().unwrap();
    let reference_top: Vec<u32> = case.top20.iter().take(10).map(|t| t.id).collect();
    assert_eq!(last.top.iter().map(|&(id, _)| id).collect::<Vec<_>>(), reference_top);
    for (&(_, logit), expected) in last.top.iter().zip(&case.top20) {
        assert!((logit - expected.logit).abs() < LOGIT_TOLERANCE, "{logit} against {}", expected.logit);
    }
    let paris = 9079;
    let depth = lens.layers.iter().position(|layer| layer.top.iter().any(|&(id, _)| id == paris));
    println!("[lens] Gemma 3: ' Paris' first among a block's top 10 after block {}", depth.map_or(0, |d| d + 1));
    assert!(depth.is_some_and(|d| d > 0), "' Paris' forms after the first block");
}

/// A Gemma 3 decode step on the fused path: eight dispatches per block (its norms after the
/// sub-layers fused with their residual additions), `embed` and `lm_head` once per part of the
/// embedding (two on lavapipe's 128 MiB bindings), the decode tail's three, all in one queue
/// submission with one queue write. Counted on a GPU handle of the model's own (its counters).
#[test]
fn gemma_decode_step_is_eight_dispatches_per_block_in_one_submission() {
    use nucleus_kernels::LogitAdjustments;
    use nucleus_kernels::TailRequest;
    let shared = wgpu_device();
    let gpu = shared.gpu().unwrap();
    let own = ModelDevice::from_parts(shared.burn().unwrap().clone(), Some(gpu.retuned(gpu.tuning())));
    let file = GgufFile::parse(gemma_bytes()).unwrap();
    let model = Model::load(&file, &own, Path::Fused).unwrap();
    let case = &GEMMA3.reference().logit_cases["capital"];
    let mut cache = model.new_cache(case.ids.len() + 1).unwrap();
    let adjustments = LogitAdjustments::new();
    let request = TailRequest { adjustments: &adjustments, temperature: 1.0, k: 8, raw_top_k: None };
    let prefill = model.forward(&case.ids, &mut cache, Logits::Last).unwrap();
    let (tail, _) = pollster::block_on(prefill.decode_tail(&request)).unwrap();
    let counters = own.gpu().unwrap().counters();
    let step = model.forward(&[tail.ids[0]], &mut cache, Logits::Last).unwrap();
    let (next, _) = pollster::block_on(step.decode_tail(&request)).unwrap();
    let calls = own.gpu().unwrap().counters() - counters;
    let limits = gpu.limits();
    let row_bytes = 640 / 32 * 34;
    let parts = nucleus_model::vocabulary_parts(
        262_144,
        row_bytes,
        limits.max_storage_buffer_binding_size.min(limits.max_buffer_size),
    )
    .unwrap()
    .len() as u64;
    println!(
        "[gemma, fused] decode step: {} dispatches ({parts} embedding parts), {} submission, {} queue write, {} bytes read",
        calls.dispatches, calls.submissions, calls.buffer_writes, calls.bytes_read
    );
    assert_eq!(calls.dispatches, parts + 18 * 8 + parts + 3);
    assert_eq!((calls.submissions, calls.buffer_writes), (1, 1));
    assert_eq!(next.ids[0], case.greedy[1], "the step's token is the reference's second");
}

/// `bytes` with the u32 metadata value of `key` set to `value` (the key's string, its type 4,
/// then the value).
fn with_u32(bytes: &[u8], key: &str, value: u32) -> Vec<u8> {
    with_value(bytes, key, 4, &value.to_le_bytes())
}

/// `bytes` with the value of metadata `key` (of GGUF type `kind`) replaced by `value`, of the
/// same length: a string value here is its length (u64) and its bytes.
fn with_value(bytes: &[u8], key: &str, kind: u32, value: &[u8]) -> Vec<u8> {
    let mut pattern = (key.len() as u64).to_le_bytes().to_vec();
    pattern.extend_from_slice(key.as_bytes());
    pattern.extend_from_slice(&kind.to_le_bytes());
    let at = bytes.windows(pattern.len()).position(|w| w == pattern).expect("the key, of that type") + pattern.len();
    let mut patched = bytes.to_vec();
    patched[at..at + value.len()].copy_from_slice(value);
    patched
}

/// A file parsed shared (the CLI's memory map, the browser's downloaded bytes) gives the CPU
/// engine its matrices where they lie: none copied, the same logits as from a copy.
#[test]
fn the_cpu_engine_reads_a_shared_files_matrices_where_they_lie() {
    let (bytes, reference) = tiny_family("qwen3");
    let shared = SharedBytes::new(bytes.clone());
    let file = GgufFile::parse_shared(&shared).unwrap();
    let in_place = Model::load(&file, &cpu_device(), Path::Cpu).unwrap();
    let copied = Model::load(&GgufFile::parse(&bytes).unwrap(), &cpu_device(), Path::Cpu).unwrap();
    let matrices: u64 = file.tensors.iter().filter(|t| t.dims.len() == 2).map(|t| t.byte_len()).sum();
    assert_eq!(in_place.memory().in_file_bytes, matrices);
    assert_eq!(copied.memory().in_file_bytes, 0);
    assert_eq!(in_place.memory().weight_bytes, copied.memory().weight_bytes);
    let ids = &reference.logit_cases["count"].ids;
    assert_eq!(last_logits(&in_place, ids), last_logits(&copied, ids));
}

/// RoPE scaling that no path computes, or values no scaling can use, are refused by name
/// before anything is loaded.
#[test]
fn unusable_rope_scaling_is_refused_by_name() {
    let (bytes, _) = tiny_family("qwen2-yarn");
    let string = |text: &str| [(text.len() as u64).to_le_bytes().as_slice(), text.as_bytes()].concat();
    let cases = [
        (
            with_value(&bytes, "qwen2.rope.scaling.type", 8, &string("long")),
            "unsupported model feature: RoPE scaling ('long')",
        ),
        (
            with_value(&bytes, "qwen2.rope.scaling.factor", 6, &(-4f32).to_le_bytes()),
            "qwen2.rope.scaling.factor is -4, not a positive number",
        ),
        (
            with_value(&bytes, "qwen2.rope.scaling.factor", 6, &f32::NAN.to_le_bytes()),
            "qwen2.rope.scaling.factor is not a finite number",
        ),
        (with_u32(&bytes, "qwen2.rope.scaling.original_context_length", 0), "original_context_length is 0"),
    ];
    for (patched, expected) in cases {
        let file = GgufFile::parse(&patched).unwrap();
        let error = Model::load(&file, &cpu_device(), Path::Cpu).err().expect("refused").to_string();
        assert!(error.contains(expected), "{error:?} does not say {expected:?}");
    }
}

/// A Qwen3.5 file whose shapes do not hold together is refused by name before anything is
/// loaded, and so are Qwen3.5's relatives with other blocks.
#[test]
fn inconsistent_qwen35_files_are_refused_by_name() {
    let (bytes, _) = tiny_family(TINY_QWEN35);
    let refusal = |bytes: &[u8]| {
        let file = GgufFile::parse(bytes).unwrap();
        Model::load(&file, &cpu_device(), Path::Cpu).err().expect("refused").to_string()
    };
    let mut missing_a = bytes.clone();
    let name = b"\x0b\0\0\0\0\0\0\0blk.0.ssm_a";
    let at = missing_a.windows(name.len()).position(|w| w == name).expect("the tensor's name");
    missing_a[at + name.len() - 1] = b'x';
    let cases = [
        (
            with_u32(&bytes, "qwen35.ssm.time_step_rank", 5),
            "5 Gated DeltaNet value heads are not a multiple of its 2 key heads",
        ),
        (
            with_u32(&bytes, "qwen35.ssm.conv_kernel", 3),
            "tensor 'blk.0.ssm_conv1d.weight' has shape [4, 160], expected [3, 160]",
        ),
        (with_u32(&bytes, "qwen35.ssm.inner_size", 80), "inner size 80 is not its 6 value heads of state size 16"),
        (with_u32(&bytes, "qwen35.ssm.state_size", 12), "inner size 96 is not its 6 value heads of state size 12"),
        (missing_a, "blk.0.ssm_a"),
    ];
    for (patched, expected) in cases {
        let error = refusal(&patched);
        assert!(error.contains(expected), "{error:?} does not say {expected:?}");
    }
    for relative in ["qwen3next", "qwen35moe"] {
        let error = nucleus_model::ModelError::UnsupportedArchitecture(relative.into()).to_string();
        assert!(error.contains(relative) && error.contains("qwen35") && error.contains("supported"), "{error}");
    }
}
