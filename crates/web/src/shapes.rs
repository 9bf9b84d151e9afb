//! The JSON the JS API hands out: the engine's values with camelCase keys, as JS expects them.

use nucleus_engine::{AttentionReport, BeamOutput, GenerationResult, LensReport, ModelInfo, ScoreReport, Step};
use nucleus_sampler::{FinishReason, camel_keys};
use serde::Serialize;
use serde_json::{Map, Value, json};

/// A step: `{ index, id, token, text, logprob, top: [{ id, text, logit, logprob }], explain?, finishReason?,
/// draft?, constraint? }` (`draft`: `{ tokens: [{ id, text, targetProb, verdict }], accepted }` on the first
/// step of a speculative verification pass; verdicts `accepted`, `rejected`, `not_reached`; `constraint`:
/// `{ forbidden, allowed, removedMass, allowedWords? }` when the request has a response format).
pub fn step(step: &Step) -> Value {
    let mut value = camel_keys(to_value(step));
    if let (Some(reason), Value::Object(map)) = (&step.finish_reason, &mut value) {
        insert_finish_reason(map, Some(reason));
    }
    value
}

/// A generation's outcome: `{ text, finishReason, usage, timing, transfer, speculation }`. A generation that
/// ended without a finish reason was aborted.
pub fn result(result: &GenerationResult) -> Value {
    let mut value = camel_keys(to_value(result));
    if let Value::Object(map) = &mut value {
        insert_finish_reason(map, result.finish_reason.as_ref());
        if let Some(Value::Object(transfer)) = map.get_mut("transfer") {
            transfer.insert("bytesPerToken".into(), json!(result.transfer.bytes_per_token()));
        }
    }
    value
}

/// `lm.info` without the adapter (the worker adds what WebGPU says about it); `path` is how the
/// forward pass runs (`"fused"` on WebGPU); `title` names the model for people, from `file_name`
/// (the model's URL) when given.
pub fn info(info: &ModelInfo, file_name: Option<&str>) -> Value {
    let mut value = camel_keys(to_value(info));
    value["title"] = Value::String(info.title(file_name));
    value
}

/// A logit lens: `{ candidates: [{ id, text, prob }], layers: [{ layer, probs, top }],
/// contextTokens, cachedTokens, bytesRead }`.
pub fn lens(report: &LensReport) -> Value {
    camel_keys(to_value(report))
}

/// A scored text: `{ tokens: [{ id, text, special, prob?, logprob?, rank?, top: [{ id, text,
/// logit, logprob }] }], predictedTokens, totalLogprob, perplexity?, next, bytesRead, elapsedMs }`.
pub fn score(report: &ScoreReport) -> Value {
    camel_keys(to_value(report))
}

/// One layer's attention over a text: `{ tokens: [{ id, text, special }], layer, head?, heads,
/// layers, window?, rows: [{ position, weights }], bytesRead, elapsedMs }`.
pub fn attention(report: &AttentionReport) -> Value {
    camel_keys(to_value(report))
}

/// A beam search: `{ hypotheses: [{ tokens, text, logprob, score, finishReason }], trace: { nodes:
/// [{ id, parent, step, token, text, tokenLogprob, logprob, score, status }], steps }, promptTokens }`;
/// each node of the trace with its token's text (`text_of`, the tokenizer's).
pub fn beams(output: &BeamOutput, text_of: impl Fn(u32) -> String) -> Value {
    let mut value = camel_keys(to_value(output));
    if let Some(Value::Array(nodes)) = value.pointer_mut("/trace/nodes") {
        for (node, traced) in nodes.iter_mut().zip(&output.trace.nodes) {
            node["text"] = traced.token.map_or(Value::Null, |id| Value::String(text_of(id)));
        }
    }
    value
}

fn insert_finish_reason(map: &mut Map<String, Value>, reason: Option<&FinishReason>) {
    let (name, sequence) = match reason {
        None => ("abort", None),
        Some(FinishReason::Stop { sequence, .. }) => ("stop", Some(sequence.clone())),
        Some(reason) => (reason.as_str(), None),
    };
    map.insert("finishReason".into(), json!(name));
    if let Some(sequence) = sequence {
        map.insert("stopSequence".into(), json!(sequence));
    }
}

fn to_value(value: &impl Serialize) -> Value {
    serde_json::to_value(value).expect("engine values serialise")
}

#[cfg(test)]
mod tests {
    use super::*;
    use nucleus_engine::{DraftReport, DraftedToken, MaskReport, SpeculationStats, TopCandidate, Usage};
    use nucleus_sampler::Verdict;

    #[test]
    fn keys_are_camel_case_and_finish_reasons_are_js_names() {
        let step = Step {
            index: 3,
            id: 2,
            token: "<|im_end|>".into(),
            text: String::new(),
            logprob: -0.5,
            top: vec![TopCandidate { id: 2, text: "<|im_end|>".into(), logit: 20.0, logprob: -0.5 }],
            explain: None,
            finish_reason: Some(FinishReason::Stop { index: 0, sequence: "END".into() }),
            draft: Some(DraftReport {
                tokens: vec![DraftedToken {
                    id: 2,
                    text: "<|im_end|>".into(),
                    target_prob: 0.5,
                    verdict: Verdict::Accepted,
                }],
                accepted: 1,
            }),
            constraint: Some(MaskReport { forbidden: vec![7], allowed: 2, removed_mass: None, allowed_words: None }),
            logits: Some(vec![0.0; 3]),
        };
        let value = super::step(&step);
        assert_eq!(value["finishReason"], "stop");
        assert_eq!(value["stopSequence"], "END");
        assert_eq!(value["top"][0]["logprob"], -0.5);
        assert!(value.get("finish_reason").is_none());
        assert_eq!(value["draft"]["tokens"][0]["targetProb"], 0.5);
        assert_eq!(value["draft"]["tokens"][0]["verdict"], "accepted");
        assert!(value.get("logits").is_none(), "the row travels as a Float32Array, not JSON");
        assert_eq!(value["constraint"], serde_json::json!({ "forbidden": [7], "allowed": 2, "removedMass": null }));

        let result = GenerationResult {
            text: "x".into(),
            finish_reason: None,
            usage: Usage { prompt_tokens: 4, completion_tokens: 2, cached_prompt_tokens: 1 },
            timing: nucleus_engine::Timing {
                prefill_ms: 10.0,
                prefill_tokens_per_s: 300.0,
                ttft_ms: 10.0,
                decode_ms: 5.0,
                decode_tokens_per_s: 200.0,
            },
            transfer: nucleus_engine::Transfer { readback_bytes: 1056, tail_steps: 2, full_read_steps: 0 },
            speculation: SpeculationStats { tokens_per_pass: 2.5, ..SpeculationStats::default() },
        };
        let value = super::result(&result);
        assert_eq!(value["finishReason"], "abort", "no finish reason: aborted");
        assert_eq!(value["usage"]["cachedPromptTokens"], 1);
        assert_eq!(value["timing"]["prefillTokensPerS"], 300.0);
        assert_eq!(value["transfer"]["bytesPerToken"], 528.0);
        assert_eq!(value["speculation"]["tokensPerPass"], 2.5);
    }

    #[test]
    fn info_is_camel_case_and_names_the_path() {
        let info = ModelInfo {
            name: "m".into(),
            basename: None,
            size_label: Some("1M".into()),
            quantization: "Q8_0".into(),
            architecture: "llama".into(),
            vocab_size: 7,
            chat_template: false,
            context_length: 16,
            parameters: 100,
            file_bytes: 400,
            path: "fused",
            weight_bytes: 360,
            kv_bytes_per_token: 48,
            kv_window: Some(nucleus_engine::KvWindow { rows: 135, bytes_per_token: 32 }),
            state_bytes: 64,
            skipped_blocks: 1,
        };
        let value = super::info(&info, Some("https://example.org/tiny-q8_0.gguf"));
        assert_eq!(value["title"], "tiny · llama · Q8_0 · 0 MB · 7 tokens");
        assert_eq!(value["chatTemplate"], false);
        assert_eq!(value["sizeLabel"], "1M");
        assert_eq!(value["vocabSize"], 7);
        assert_eq!(value["fileBytes"], 400);
        assert_eq!(value["path"], "fused");
        assert_eq!(value["weightBytes"], 360);
        assert_eq!(value["kvBytesPerToken"], 48);
        assert_eq!(value["kvWindow"], serde_json::json!({ "rows": 135, "bytesPerToken": 32 }));
        assert_eq!(value["stateBytes"], 64);
        assert_eq!(value["skippedBlocks"], 1);
    }
}
