//! The model on the real GGUF against the independent float64 reference, on every path: the fused
//! kernels over the quantized weights (wgpu), Burn's operations on wgpu (with either kernel for the
//! linear layers) and on the CPU backend. Every last-position logit within 1e-3, the top-20 order,
//! 32 greedy tokens, and prefill+decode equal to a full recompute within 1e-4.

use nucleus_gguf::GgufFile;
use nucleus_model::{DeviceLogits, LinearKernel, Llama, Logits, MAX_ROWS, ModelDevice, Path};
use nucleus_tests::{LogitCase, cpu_device, max_abs_diff, model_bytes, reference, top_ids, wgpu_device};

const LOGIT_TOLERANCE: f32 = 1e-3;
const RECOMPUTE_TOLERANCE: f32 = 1e-4;

fn read(logits: DeviceLogits) -> Vec<Vec<f32>> {
    pollster::block_on(logits.read()).unwrap()
}

fn last_logits(model: &Llama, tokens: &[u32]) -> Vec<f32> {
    let mut cache = model.new_cache(tokens.len()).unwrap();
    read(model.forward(tokens, &mut cache, Logits::Last).unwrap()).remove(0)
}

fn argmax(values: &[f32]) -> u32 {
    top_ids(values, 1)[0]
}

/// Prefill, then greedy decode until 32 tokens or an end of generation (ids 0 and 2), as the
/// reference did. Returns the tokens and the logits that chose the last one.
fn greedy(model: &Llama, prompt: &[u32], steps: usize) -> (Vec<u32>, Vec<f32>) {
    let mut cache = model.new_cache(prompt.len() + steps).unwrap();
    let mut logits = read(model.forward(prompt, &mut cache, Logits::Last).unwrap()).remove(0);
    let mut tokens = Vec::new();
    loop {
        let next = argmax(&logits);
        tokens.push(next);
        if tokens.len() == steps || next == 0 || next == 2 {
            return (tokens, logits);
        }
        logits = read(model.forward(&[next], &mut cache, Logits::Last).unwrap()).remove(0);
    }
}

fn check_backend(name: &str, device: ModelDevice, path: Path) {
    let file = GgufFile::parse(model_bytes()).unwrap();
    let started = std::time::Instant::now();
    let model = Llama::load(&file, &device, path).unwrap();
    println!(
        "[{name}] loaded in {:.2?}, weights {:.1} MiB",
        started.elapsed(),
        model.memory().weight_bytes as f64 / 1048576.0
    );
    let reference = reference();
    let mut failures = Vec::new();
    for (case_name, case) in &reference.logit_cases {
        let started = std::time::Instant::now();
        let ours = last_logits(&model, &case.ids);
        let expected = case.last_logits();
        let max_diff = max_abs_diff(&ours, &expected);
        let reference_top: Vec<u32> = case.top20.iter().map(|t| t.id).collect();
        let our_top = top_ids(&ours, 20);
        println!(
            "[{name}] {case_name:8} max |dlogit| = {max_diff:.2e} over {} ids; top-20 order {}; prefill {:.2?}",
            ours.len(),
            if our_top == reference_top { "identical" } else { "DIFFERS" },
            started.elapsed()
        );
        if max_diff > LOGIT_TOLERANCE {
            failures.push(format!("{case_name}: max |dlogit| {max_diff} > {LOGIT_TOLERANCE}"));
        }
        if our_top != reference_top {
            failures.push(format!("{case_name}: top-20 {our_top:?} != reference {reference_top:?}"));
        }
        check_greedy_and_recompute(name, case_name, &model, case, &mut failures);
    }
    assert!(failures.is_empty(), "[{name}] {}", failures.join("\n"));
}

fn check_greedy_and_recompute(
    name: &str,
    case_name: &str,
    model: &Llama,
    case: &LogitCase,
    failures: &mut Vec<String>,
) {
    let started = std::time::Instant::now();
    let (tokens, decode_logits) = greedy(model, &case.ids, case.greedy32.len().max(32));
    let elapsed = started.elapsed();
    let same = tokens == case.greedy32;
    println!(
        "[{name}] {case_name:8} greedy {} tokens {} ({:.1} tok/s)",
        tokens.len(),
        if same { "identical" } else { "DIFFER" },
        tokens.len() as f64 / elapsed.as_secs_f64()
    );
    if !same {
        failures.push(format!("{case_name}: greedy {tokens:?} != reference {:?}", case.greedy32));
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
    check_backend("fused", wgpu_device(), Path::Fused);
}

#[test]
fn wgpu_burn_ops_match_reference() {
    check_backend("wgpu, burn matmul", wgpu_device(), Path::BurnOps(LinearKernel::BurnMatmul));
}

/// The linear layers in `shaders/linear.wgsl` (the kernel of CPU adapters on the Burn path)
/// instead of Burn's matmul.
#[test]
fn wgpu_burn_ops_with_the_wgsl_linear_kernel_match_reference() {
    check_backend("wgpu, linear.wgsl", wgpu_device(), Path::BurnOps(LinearKernel::Wgsl));
}

#[test]
fn cpu_matches_reference() {
    check_backend("cpu", cpu_device(), Path::BurnOps(LinearKernel::BurnMatmul));
}

#[test]
fn the_wgpu_only_paths_are_refused_on_the_cpu_backend() {
    let file = GgufFile::parse(model_bytes()).unwrap();
    let error = Llama::load(&file, &cpu_device(), Path::BurnOps(LinearKernel::Wgsl)).err().unwrap();
    assert!(error.to_string().contains("runs on wgpu devices"), "{error}");
    let error = Llama::load(&file, &cpu_device(), Path::Fused).err().unwrap();
    assert!(error.to_string().contains("runs on wgpu devices"), "{error}");
}

/// The fused path with the fused weights only: the model file's 98 MB, not 555 MiB of f32.
#[test]
fn fused_weights_stay_quantized_on_the_gpu() {
    let file = GgufFile::parse(model_bytes()).unwrap();
    let model = Llama::load(&file, &wgpu_device(), Path::Fused).unwrap();
    let bytes = model.memory().weight_bytes;
    println!("[fused] weights on the GPU: {bytes} bytes ({:.1} MiB)", bytes as f64 / 1048576.0);
    assert!(bytes <= 110 * 1024 * 1024, "{bytes} bytes of weights");
    assert!(bytes as usize <= model_bytes().len(), "no more than the file holds");
}

/// A prompt longer than one pass (and than the cache's first allocation) gives the logits of
/// the same tokens run in other cuts: one call, or two calls where the second grows the cache.
#[test]
fn fused_prefill_in_several_passes_and_a_growing_cache_agree() {
    let file = GgufFile::parse(model_bytes()).unwrap();
    let model = Llama::load(&file, &wgpu_device(), Path::Fused).unwrap();
    let ids = &reference().logit_cases["chat"].ids;
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
    assert!(diff < RECOMPUTE_TOLERANCE, "{diff}");
    assert_eq!(top_ids(&whole, 20), top_ids(&split, 20));
}

fn check_all_positions(device: ModelDevice, path: Path) {
    let file = GgufFile::parse(model_bytes()).unwrap();
    let model = Llama::load(&file, &device, path).unwrap();
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
    check_all_positions(cpu_device(), Path::BurnOps(LinearKernel::BurnMatmul));
    check_all_positions(wgpu_device(), Path::Fused);
}

#[test]
fn context_overflow_and_bad_tokens_are_errors() {
    let file = GgufFile::parse(model_bytes()).unwrap();
    for (device, path) in [(cpu_device(), Path::BurnOps(LinearKernel::BurnMatmul)), (wgpu_device(), Path::Fused)] {
        check_errors(&file, &device, path);
    }
}

fn check_errors(file: &GgufFile, device: &ModelDevice, path: Path) {
    let model = Llama::load(file, device, path).unwrap();
    let mut cache = model.new_cache(4).unwrap();
    let err = model.forward(&[1, 2, 3, 4, 5], &mut cache, Logits::Last).err().unwrap();
    assert_eq!(err.to_string(), "the sequence needs 5 positions but the context holds 4");
    let err = model.forward(&[49_152], &mut cache, Logits::Last).err().unwrap();
    assert_eq!(err.to_string(), "token id 49152 is outside the vocabulary of 49152");
    assert!(model.new_cache(8193).is_err());
    assert_eq!(cache.len(), 0, "a failed forward leaves the cache untouched");
}

/// The logit lens on both paths that run on wgpu: each block's row is the CPU reference's final
/// norm and output layer of that block's residual; the last row is the pass's own logits (and the
/// reference's); the two paths' residuals agree at every depth; " Paris" wins only at the end.
#[test]
fn the_logit_lens_reads_each_blocks_residual_through_the_head_and_ends_on_the_passs_logits() {
    use nucleus_kernels::reference::lm_head;
    let file = GgufFile::parse(model_bytes()).unwrap();
    let gamma = file.dequantize("output_norm.weight").unwrap();
    let head = file.dequantize("token_embd.weight").unwrap();
    let case = &reference().logit_cases["capital"];
    let paris = case.top20[0].id;
    let mut residuals = Vec::new();
    for path in [Path::Fused, Path::BurnOps(LinearKernel::BurnMatmul)] {
        let model = Llama::load(&file, &wgpu_device(), path).unwrap();
        let blocks = model.config().block_count;
        let mut cache = model.new_cache(case.ids.len() + 1).unwrap();
        // The prompt but its last token first: the lens then runs one token over a filled cache.
        let (context, last) = case.ids.split_at(case.ids.len() - 1);
        model.forward(context, &mut cache, Logits::Last).unwrap();
        let lens = pollster::block_on(model.logit_lens(last, &mut cache)).unwrap();
        assert_eq!(cache.len(), case.ids.len());
        assert_eq!((lens.hidden.len(), lens.logits.len()), (blocks, blocks));
        let own = last_logits(&model, &case.ids);
        let last_row = lens.logits.last().unwrap();
        assert!(max_abs_diff(last_row, &own) < RECOMPUTE_TOLERANCE, "{path:?}: the last row is not the pass's logits");
        assert!(
            max_abs_diff(last_row, &case.last_logits()) < LOGIT_TOLERANCE,
            "{path:?}: the last row against the reference"
        );
        for layer in [0, blocks / 2, blocks - 1] {
            let expected: Vec<f32> = lm_head(&lens.hidden[layer], &gamma, model.config().rms_norm_eps, &head)
                .into_iter()
                .map(|v| v as f32)
                .collect();
            let diff = max_abs_diff(&lens.logits[layer], &expected);
            assert!(
                diff < LOGIT_TOLERANCE,
                "{path:?}: layer {}: the head of its residual differs by {diff}",
                layer + 1
            );
        }
        assert_eq!(argmax(last_row), paris);
        assert_ne!(argmax(&lens.logits[0]), paris, "the first block does not know the answer yet");
        residuals.push(lens.hidden);
    }
    for (layer, (fused, burn)) in residuals[0].iter().zip(&residuals[1]).enumerate() {
        let scale = fused.iter().fold(1.0f32, |m, v| m.max(v.abs()));
        let diff = max_abs_diff(fused, burn);
        assert!(
            diff < 1e-4 * scale,
            "block {}: the paths' residuals differ by {diff} (largest value {scale})",
            layer + 1
        );
    }
}
