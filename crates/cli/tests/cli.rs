//! The `nucleus` binary end to end: its output on the real model, and one clear error line with a
//! non-zero exit for each kind of bad input.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn nucleus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nucleus")).args(args).output().expect("run nucleus")
}

/// The reference model (see `tests/support.rs` for how it is found; a missing model fails).
fn model() -> String {
    let path = match std::env::var_os("NUCLEUS_MODEL") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/nucleus/models/SmolLM2-135M-Instruct.Q4_1.gguf"),
    };
    assert!(
        path.is_file(),
        "the reference model is missing at {}: run ./build.sh model or set NUCLEUS_MODEL",
        path.display()
    );
    path.to_string_lossy().into_owned()
}

/// A file in this run's temporary folder, removed (with the folder, once empty) when dropped:
/// the patched models are the reference model's size, too big to leave behind on every run.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, bytes: &[u8]) -> Self {
        let dir = std::env::temp_dir().join(format!("nucleus-cli-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        Self(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 temporary path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        // Fails while another test's file is still there; the last one removes the folder.
        let _ = self.0.parent().map(std::fs::remove_dir);
    }
}

/// Asserts a failure whose stderr is one line starting with "error: " and containing `needle`.
fn assert_error(output: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "expected failure, got success; stderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line expected, got: {stderr}");
    assert!(stderr.starts_with("error: ") && stderr.contains(needle), "expected {needle:?} in: {stderr}");
}

fn reference() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/smollm2-135m-instruct-q4_1.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn ids(value: &Value) -> Vec<u64> {
    value.as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect()
}

#[test]
fn tokenize_parses_special_tokens() {
    let reference = reference();
    let chat = &reference["logit_cases"]["chat"];
    let output = nucleus(&["tokenize", "--model", &model(), chat["text"].as_str().unwrap()]);
    assert!(output.status.success());
    let printed: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(ids(&printed), ids(&chat["ids"]));
}

#[test]
fn generate_json_greedy_chat_matches_reference() {
    let reference = reference();
    let expected = ids(&reference["logit_cases"]["chat"]["greedy32"]);
    let output = nucleus(&[
        "generate",
        "--model",
        &model(),
        "--backend",
        "cpu",
        "--chat",
        "What is 2+2?",
        "--temperature",
        "0",
        "--max-tokens",
        "6",
        "--json",
        "--explain",
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<Value> =
        String::from_utf8(output.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 7, "6 tokens and a summary");
    let mut text = String::new();
    for (i, line) in lines[..6].iter().enumerate() {
        assert_eq!(line["index"], i);
        assert_eq!(line["id"].as_u64().unwrap(), expected[i], "token {i}");
        let top = line["top"].as_array().unwrap();
        assert_eq!(top.len(), 20);
        assert_eq!(top[0]["id"], line["id"], "greedy picks the top raw logit");
        assert!(top.windows(2).all(|w| w[0]["logit"].as_f64() >= w[1]["logit"].as_f64()));
        assert!((top[0]["logprob"].as_f64().unwrap() - line["logprob"].as_f64().unwrap()).abs() < 1e-9);
        let explain = &line["explain"];
        assert_eq!(explain["chosen"]["id"], line["id"]);
        assert_eq!(explain["chosen"]["rank"], 1, "ranks are 1-based");
        assert_eq!(explain["candidates"][0]["text"], top[0]["text"]);
        for field in ["id", "text", "logit", "adjusted_logit", "prob", "kept", "final_prob"] {
            assert!(explain["candidates"][0].get(field).is_some(), "explain candidate lacks {field}");
        }
        // Greedy: the temperature distribution is a point mass on the argmax.
        assert_eq!(explain["entropy"].as_f64(), Some(0.0));
        assert_eq!(explain["candidates"][0]["final_prob"].as_f64(), Some(1.0));
        assert!(explain["mass_outside"].as_f64().is_some());
        text.push_str(line["text"].as_str().unwrap());
    }
    let summary = &lines[6];
    // Named from the file (SmolLM2-135M-Instruct.Q4_1.gguf by default), not general.name.
    assert!(
        summary["model"].as_str().unwrap().ends_with(" · llama · Q4_1 · 98 MB · 49,152 tokens"),
        "{}",
        summary["model"]
    );
    // No GPU here: the summary says the adapter is a CPU emulation (or that it ran on the CPU).
    let device = summary["device"].as_str().unwrap();
    assert!(device.contains("a CPU emulation of a GPU") || device.starts_with("the CPU"), "{device}");
    assert_eq!(summary["finish_reason"], "length");
    assert_eq!(summary["text"].as_str().unwrap(), text);
    assert_eq!(summary["usage"]["prompt_tokens"], 37);
    assert_eq!(summary["usage"]["completion_tokens"], 6);
    for key in ["load_ms", "prefill_ms", "prefill_tokens_per_s", "decode_tokens_per_s"] {
        assert!(summary["timing"][key].as_f64().unwrap() > 0.0, "{key}");
    }
}

#[test]
fn stop_string_ends_generation_and_is_not_printed() {
    let output = nucleus(&[
        "generate",
        "--model",
        &model(),
        "--backend",
        "cpu",
        "--prompt",
        "The capital of France is",
        "--temperature",
        "0",
        "--max-tokens",
        "10",
        "--stop",
        ".",
        "--json",
        "--top-logprobs",
        "0",
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).unwrap();
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(summary["finish_reason"], "stop");
    assert_eq!(summary["text"], " Paris");
}

#[test]
fn missing_file() {
    assert_error(
        &nucleus(&["inspect", "--model", "/nonexistent/model.gguf"]),
        "cannot read model file /nonexistent/model.gguf",
    );
}

#[test]
fn not_a_gguf() {
    let file = TempFile::new("not-a-model.gguf", b"<html>404 Not Found</html>");
    assert_error(&nucleus(&["generate", "--model", file.path(), "--prompt", "hi"]), "not a GGUF file");
}

#[test]
fn truncated_file_names_a_tensor() {
    let bytes = std::fs::read(model()).unwrap();
    let file = TempFile::new("truncated.gguf", &bytes[..bytes.len() / 2]);
    assert_error(
        &nucleus(&["generate", "--model", file.path(), "--prompt", "hi", "--backend", "cpu"]),
        "truncated GGUF file: tensor 'blk.",
    );
}

/// Replaces the first occurrence of `from` with `to` (same length).
fn patched(from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut bytes = std::fs::read(model()).unwrap();
    let at = bytes.windows(from.len()).position(|w| w == from).expect("pattern present");
    bytes[at..at + to.len()].copy_from_slice(to);
    bytes
}

#[test]
fn unsupported_architecture_is_named() {
    // general.architecture: string of length 5, "llama".
    let bytes = patched(b"\x05\x00\x00\x00\x00\x00\x00\x00llama", b"\x05\x00\x00\x00\x00\x00\x00\x00gemma");
    let file = TempFile::new("gemma.gguf", &bytes);
    assert_error(
        &nucleus(&["generate", "--model", file.path(), "--prompt", "hi", "--backend", "cpu"]),
        "unsupported architecture 'gemma'",
    );
}

#[test]
fn unsupported_quant_type_is_named() {
    // The tensor table entry of blk.0.attn_q.weight: name, 2 dims (576, 576), type Q4_1 (3).
    let mut entry = b"blk.0.attn_q.weight\x02\x00\x00\x00".to_vec();
    entry.extend(576u64.to_le_bytes());
    entry.extend(576u64.to_le_bytes());
    let mut with_type = entry.clone();
    with_type.extend(3u32.to_le_bytes());
    entry.extend(20u32.to_le_bytes()); // IQ4_NL: 32-element blocks like Q4_1 but smaller, so still inside the file
    let file = TempFile::new("iq2.gguf", &patched(&with_type, &entry));
    assert_error(
        &nucleus(&["generate", "--model", file.path(), "--prompt", "hi", "--backend", "cpu"]),
        "tensor 'blk.0.attn_q.weight' has type IQ4_NL, which this build cannot dequantize",
    );
    // The fused path (wgpu) names it too, before any computation: never wrong numbers.
    assert_error(
        &nucleus(&["generate", "--model", file.path(), "--prompt", "hi", "--backend", "wgpu", "--path", "fused"]),
        "tensor 'blk.0.attn_q.weight' has type IQ4_NL, which the fused kernels cannot read",
    );
}

#[test]
fn prompt_longer_than_the_context() {
    assert_error(
        &nucleus(&[
            "generate",
            "--model",
            &model(),
            "--backend",
            "cpu",
            "--context",
            "8",
            "--prompt",
            "one two three four five six seven eight nine ten",
        ]),
        "the prompt has 10 tokens but the context holds 8",
    );
}

#[test]
fn invalid_sampling_parameter_is_named() {
    assert_error(
        &nucleus(&["generate", "--model", &model(), "--backend", "cpu", "--prompt", "hi", "--top-p", "1.5"]),
        "top_p must be in (0, 1], got 1.5",
    );
    assert_error(
        &nucleus(&["generate", "--model", &model(), "--backend", "cpu", "--prompt", "hi", "--logit-bias", "99999=1"]),
        "99999",
    );
}

#[test]
fn inspect_describes_the_model() {
    let output = nucleus(&["inspect", "--model", &model()]);
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    for needle in [
        "blocks 30, embedding 576, ffn 1536, heads 9 (kv 3, head dim 64), vocab 49152, context 8192",
        "Q4_1",
        "Q8_0",
        "pre-tokenizer smollm",
        "end of generation: 0 \"<|endoftext|>\", 2 \"<|im_end|>\"",
    ] {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }
    // The tiny Gemma 3: five local blocks with a window of 8 keep a ring.
    let gemma = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/tiny/gemma3-linear.gguf");
    let text = String::from_utf8(nucleus(&["inspect", "--model", gemma]).stdout).unwrap();
    let ring = "the 5 local blocks keep a ring of their window instead: 135 rows each (7 before a query and 128 \
                of slack) on the fused path, at most twice as many on the CPU engine";
    assert!(text.contains(ring), "{ring:?} not in:\n{text}");
}

/// `bench --kernel-times` on the tiny Qwen3 (lavapipe): a table of the fused path's kernels for
/// the prefill and per decode token, each kernel of a Qwen3 block named; on the CPU engine, an
/// error naming the flag.
#[test]
fn bench_times_each_kernel_of_the_fused_path() {
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/tiny/qwen3.gguf");
    let args = ["bench", "--model", model, "--prompt-tokens", "8", "--gen-tokens", "3", "--runs", "1"];
    let quick = ["--long-context", "0", "--no-tail", "--speculative-lookup", "0", "--kernel-times"];
    let fused = [&args[..], &["--backend", "wgpu", "--path", "fused"], &quick[..]].concat();
    let output = nucleus(&fused);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let table = stdout.split("GPU time per kernel").nth(1).expect("the kernel table");
    let (prefill, decode) = table.split_once("decode, per token (2 steps)").expect("a decode table of two steps");
    assert!(prefill.contains("prefill of 8 tokens and the first token"), "{table}");
    for kernel in ["embed", "attn_qkv_norm", "attention", "matvec_residual", "ffn_gate_up", "lm_head"] {
        assert!(prefill.contains(kernel) && decode.contains(kernel), "{kernel} in {table}");
    }
    let cpu = [&args[..], &["--backend", "cpu"], &quick[..]].concat();
    assert_error(&nucleus(&cpu), "--kernel-times");
}

/// `bench --json` on the CPU engine: what the machine reads from memory a second and the bytes a
/// decode token reads (the tiny Qwen3, whose output layer is its own tensor, reads one row of its
/// embedding: every tensor of the file but that one), and the limit they make, printed.
#[test]
fn the_cpu_bench_prints_the_memory_limit() {
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/tiny/qwen3.gguf");
    let args = ["bench", "--model", model, "--backend", "cpu", "--prompt-tokens", "4", "--gen-tokens", "2"];
    let quick = ["--runs", "1", "--long-context", "0", "--no-tail", "--speculative-lookup", "0", "--json"];
    let output = nucleus(&[&args[..], &quick[..]].concat());
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("the memory's limit, decode"), "{stdout}");
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let bandwidth = &summary["memoryBandwidth"];
    for key in ["oneThreadBytesPerS", "allThreadsBytesPerS"] {
        assert!(bandwidth[key].as_f64().is_some_and(|rate| rate > 1e8), "{key}: {bandwidth}");
    }
    let bytes = std::fs::read(model).unwrap();
    let file = nucleus_gguf::GgufFile::parse(&bytes).unwrap();
    assert!(file.tensors.iter().any(|t| t.name == "output.weight"), "the tiny Qwen3's output layer is its own");
    let read: u64 = file.tensors.iter().filter(|t| t.name != "token_embd.weight").map(|t| t.byte_len()).sum();
    assert_eq!(summary["reports"][0]["readBytesPerToken"], read);
}
