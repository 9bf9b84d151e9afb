//! The what-if natively, on the reference prompts' logits rows: the explanations it gives are
//! recorded in `tests/fixtures/sampler-what-if.json`, which the same module built for wasm32 must
//! reproduce byte for byte in Node (`tests/wasm/sampler-what-if.mjs`, run by `./build.sh test`). After
//! changing the sampler, run `NUCLEUS_UPDATE_FIXTURES=1 cargo test -p nucleus-sampler-web`.

use nucleus_sampler::{SamplingParams, process};
use nucleus_sampler_web::{WhatIfError, parse_options, to_json, what_if};
use serde_json::{Value, json};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures");
const ROWS: [&str; 3] = ["capital", "chat", "once"];
const TOP_N: usize = 8;

fn row(name: &str) -> Vec<f32> {
    let path = format!("{FIXTURES}/smollm2-135m-instruct-q4_1-{name}-last-logits.f32");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
}

/// Settings a reader of the inspector tries: each stage alone and together, greedy, a bias.
fn option_cases() -> Vec<Value> {
    vec![
        json!({}),
        json!({ "temperature": 0 }),
        json!({ "temperature": 0.7, "topP": 0.9 }),
        json!({ "temperature": 1.5, "topK": 10 }),
        json!({ "minP": 0.05 }),
        json!({ "temperature": 0.8, "typicalP": 0.5 }),
        json!({ "temperature": 0.6, "topK": 40, "topP": 0.95, "minP": 0.02 }),
        json!({ "logitBias": { "7042": "-Infinity", "198": 2.5 } }),
    ]
}

fn generated() -> String {
    let mut cases = Vec::new();
    for name in ROWS {
        let logits = row(name);
        for options in option_cases() {
            let params = parse_options(&options.to_string()).unwrap();
            // The text the page receives, kept as text: the wasm module must give it byte for byte.
            let explanation = to_json(&what_if(&logits, &params, None, TOP_N).unwrap());
            cases.push(json!({ "row": name, "options": options, "topN": TOP_N, "explanation": explanation }));
        }
    }
    let file = json!({
        "about": "Written by crates/sampler-web/tests/what_if.rs from the native sampler; the wasm module must give the same (tests/wasm/sampler-what-if.mjs). Do not edit.",
        "cases": cases,
    });
    serde_json::to_string_pretty(&file).unwrap() + "\n"
}

#[test]
fn the_recorded_explanations_are_the_native_sampler_s() {
    let path = format!("{FIXTURES}/sampler-what-if.json");
    let expected = generated();
    if std::env::var_os("NUCLEUS_UPDATE_FIXTURES").is_some() {
        std::fs::write(&path, &expected).unwrap();
    }
    let found = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        found == expected,
        "{path} is not what the sampler gives; run NUCLEUS_UPDATE_FIXTURES=1 cargo test -p nucleus-sampler-web"
    );
}

#[test]
fn the_explanation_is_the_sampler_s_own_distribution() {
    let logits = row("capital");
    let params = SamplingParams { temperature: 0.7, top_p: 0.9, ..SamplingParams::default() };
    let explanation = what_if(&logits, &params, None, TOP_N).unwrap();
    let adjusted =
        nucleus_sampler::adjust_logits(&logits, &params, nucleus_sampler::PenaltyHistory::default(), None).unwrap();
    let distribution = process(&adjusted, &params).unwrap();
    assert_eq!(explanation.chosen.id, 7042, "\" Paris\"");
    assert_eq!(explanation.kept_count, distribution.kept_ids().len());
    for candidate in &explanation.candidates {
        assert_eq!(candidate.final_prob, distribution.final_prob(candidate.id));
        assert_eq!(candidate.kept, distribution.is_kept(candidate.id));
    }
    let kept: f64 = explanation.candidates.iter().map(|c| c.final_prob).sum();
    assert!(kept <= 1.0 + 1e-12);
}

#[test]
fn unknown_and_bad_options_are_refused_by_name() {
    let unknown = parse_options(r#"{"temperature": 0.5, "topQ": 0.9}"#).unwrap_err();
    assert_eq!(unknown, WhatIfError::BadOptions { option: "topQ".into(), message: "not a sampling option".into() });
    let malformed = parse_options(r#"{"topP": "high"}"#).unwrap_err();
    assert!(matches!(&malformed, WhatIfError::BadOptions { message, .. } if message.contains("invalid type")));
    let params = parse_options(r#"{"topP": 1.5}"#).unwrap();
    let error = what_if(&row("capital"), &params, None, TOP_N).unwrap_err();
    assert!(error.to_string().contains("top_p"), "{error}");
    let nan = what_if(&[0.0, f32::NAN], &SamplingParams::default(), None, TOP_N).unwrap_err();
    assert!(matches!(nan, WhatIfError::Sampler(_)), "{nan}");
}
