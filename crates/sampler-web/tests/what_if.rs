//! The what-if natively, on the reference prompts' logits rows: the explanations it gives are
//! recorded in `tests/fixtures/sampler-what-if.json`, which the same module built for wasm32 must
//! reproduce byte for byte in Node (`tests/wasm/sampler-what-if.mjs`, run by `./build.sh test`). After
//! changing the sampler, run `NUCLEUS_UPDATE_FIXTURES=1 cargo test -p nucleus-sampler-web`.

use nucleus_sampler::json::sorted_keys;
use nucleus_sampler::{RemovedBy, SamplingParams, TokenSet, log_softmax, process, top_k_ids};
use nucleus_sampler_web::{WhatIfError, estimated_row, to_json, what_if};
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
            let params = SamplingParams::from_json(&options.to_string(), logits.len()).unwrap();
            // The text the page receives, kept as text: the wasm module must give it byte for byte.
            let explanation = to_json(&what_if(&logits, &params, None, TOP_N, None).unwrap());
            cases.push(json!({ "row": name, "options": options, "topN": TOP_N, "explanation": explanation }));
        }
    }
    let file = json!({
        "about": "Written by crates/sampler-web/tests/what_if.rs from the native sampler; the wasm module must give the same (tests/wasm/sampler-what-if.mjs). Do not edit.",
        "cases": cases,
    });
    serde_json::to_string_pretty(&sorted_keys(file)).unwrap() + "\n"
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
    let explanation = what_if(&logits, &params, None, TOP_N, None).unwrap();
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
fn a_constrained_step_s_allowed_set_masks_the_others_before_temperature() {
    let logits = row("capital");
    let params = SamplingParams { temperature: 0.7, ..SamplingParams::default() };
    let plain = what_if(&logits, &params, None, TOP_N, None).unwrap();
    // Forbid the most probable token and one other: the rest keep their order and share the mass.
    let forbidden = [plain.candidates[0].id, plain.candidates[2].id];
    let mut allowed = TokenSet::full(logits.len());
    forbidden.iter().for_each(|&id| allowed.remove(id));
    let masked = what_if(&logits, &params, None, TOP_N, Some(&allowed)).unwrap();
    let forbidden_mass: f64 = plain.candidates.iter().filter(|c| forbidden.contains(&c.id)).map(|c| c.final_prob).sum();
    for candidate in &masked.candidates {
        if forbidden.contains(&candidate.id) {
            assert_eq!((candidate.kept, candidate.final_prob), (false, 0.0));
            assert_eq!(candidate.removed_by, Some(RemovedBy::Mask), "{candidate:?}");
        } else if let Some(before) = plain.candidates.iter().find(|c| c.id == candidate.id) {
            assert!((candidate.final_prob - before.final_prob / (1.0 - forbidden_mass)).abs() < 1e-9);
        }
    }
    assert_eq!(masked.chosen.id, plain.candidates[1].id, "the argmax of what the mask left");
    let short = TokenSet::full(3);
    assert!(matches!(what_if(&logits, &params, None, TOP_N, Some(&short)), Err(WhatIfError::Row(_))));
}

#[test]
fn a_row_the_sampler_cannot_take_is_refused() {
    let nan = what_if(&[0.0, f32::NAN], &SamplingParams::default(), None, TOP_N, None).unwrap_err();
    assert!(matches!(nan, WhatIfError::Row(_)), "{nan}");
    let outside = what_if(&[0.0, 1.0], &SamplingParams::default(), Some(2), TOP_N, None).unwrap_err();
    assert!(matches!(outside, WhatIfError::Row(_)), "{outside}");
}

/// The reference row's top 64 and its log-sum-exp: what a step reports.
fn top_64(logits: &[f32]) -> (Vec<u32>, Vec<f32>, f64) {
    let ids = top_k_ids(logits, 64);
    let top: Vec<f32> = ids.iter().map(|&id| logits[id as usize]).collect();
    let log_sum_exp = f64::from(top[0]) - log_softmax(logits).unwrap()[ids[0] as usize];
    (ids, top, log_sum_exp)
}

#[test]
fn the_top_candidates_and_the_rest_give_the_step_s_own_probabilities_at_temperature_1() {
    let logits = row("capital");
    let (ids, top, log_sum_exp) = top_64(&logits);
    let estimated = estimated_row(&ids, &top, log_sum_exp, logits.len()).unwrap();
    let exact = what_if(&logits, &SamplingParams::default(), None, 64, None).unwrap();
    let from_top = what_if(&estimated, &SamplingParams::default(), None, 64, None).unwrap();
    for (a, b) in exact.candidates.iter().zip(&from_top.candidates) {
        assert_eq!((a.id, a.rank), (b.id, b.rank));
        assert!((a.prob - b.prob).abs() < 1e-9, "{} {} vs {}", a.id, a.prob, b.prob);
    }
    // A truncation that ends inside the candidates keeps the same tokens with the same weights.
    for params in [
        SamplingParams { top_p: 0.9, ..SamplingParams::default() },
        SamplingParams { top_k: 10, ..SamplingParams::default() },
        SamplingParams { min_p: 0.05, ..SamplingParams::default() },
    ] {
        let exact = what_if(&logits, &params, None, 64, None).unwrap();
        let from_top = what_if(&estimated, &params, None, 64, None).unwrap();
        assert_eq!(exact.stages, from_top.stages);
        assert_eq!(exact.chosen.id, from_top.chosen.id);
        assert!((exact.chosen.prob - from_top.chosen.prob).abs() < 1e-9);
    }
    // Elsewhere the rest is an estimate, and the candidates still lead the order.
    let hot = SamplingParams { temperature: 1.5, ..SamplingParams::default() };
    let from_top = what_if(&estimated, &hot, None, 64, None).unwrap();
    assert_eq!(from_top.candidates.iter().map(|c| c.id).collect::<Vec<_>>(), ids);
}

#[test]
fn candidates_that_cannot_make_a_row_are_refused() {
    let cases: [(&[u32], &[f32], usize); 4] =
        [(&[0, 0], &[1.0, 2.0], 8), (&[9], &[1.0], 8), (&[1, 2], &[1.0], 8), (&[1], &[f32::NAN], 8)];
    for (ids, logits, vocab) in cases {
        assert!(matches!(estimated_row(ids, logits, 3.0, vocab), Err(WhatIfError::Row(_))), "{ids:?} {logits:?}");
    }
    // All the mass in the candidates: the rest is impossible.
    let row = estimated_row(&[0], &[0.0], 0.0, 3).unwrap();
    assert_eq!(row, [0.0, f32::NEG_INFINITY, f32::NEG_INFINITY]);
}
