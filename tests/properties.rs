//! Property tests on the real model (proptest on stable Rust: coverage by many random cases; see
//! ARCHITECTURE.md for why not cargo-fuzz): the tokenizer round-trips any text, a corrupted real
//! header is a value or an error, never a panic, and so are any generation options JS can send.

use std::sync::LazyLock;

use nucleus_engine::GenerateRequest;
use nucleus_gguf::GgufFile;
use nucleus_model::ModelConfig;
use nucleus_sampler::SamplingParams;
use nucleus_tests::model_bytes;
use nucleus_tokenizer::Tokenizer;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

static TOKENIZER: LazyLock<Tokenizer> =
    LazyLock::new(|| Tokenizer::from_gguf(&GgufFile::parse(model_bytes()).unwrap()).unwrap());
static VOCAB: LazyLock<usize> = LazyLock::new(|| TOKENIZER.vocab_size());

/// The option names JS may send: every sampling option (their serde names) and the request's own.
static OPTION_NAMES: LazyLock<Vec<String>> = LazyLock::new(|| {
    let Value::Object(sampling) = serde_json::to_value(SamplingParams::default()).unwrap() else { unreachable!() };
    let request = ["prompt", "messages", "maxTokens", "stop", "ignoreEos", "topLogprobs", "explain", "returnLogits"];
    sampling.keys().cloned().chain(request.map(String::from)).chain(["temprature".to_string()]).collect()
});

/// Any text, with the pieces tokenizers get wrong mixed in: control tokens written out, runs of
/// spaces and newlines, digits, accents, CJK, emoji, and any Unicode at all.
fn any_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        prop::sample::select(vec![
            "<|im_start|>",
            "<|im_end|>",
            "<|endoftext|>",
            "<|im_start",
            "  ",
            "\n\n",
            "\t",
            "1234",
            "é",
            "日本語",
            "🦀",
            "\r\n",
        ])
        .prop_map(String::from),
        "[a-zA-Z ]{0,8}",
        any::<String>(),
    ];
    prop::collection::vec(piece, 0..6).prop_map(|pieces| pieces.concat())
}

/// Any JSON value, nested a little.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        prop_oneof![Just(f64::MAX), Just(f64::MIN_POSITIVE), Just(-0.0), Just(1.0), Just(0.0)].prop_map(Value::from),
        prop_oneof![Just("-Infinity".to_string()), Just("NaN".to_string()), "\\PC{0,12}"].prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[0-9a-z]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Options as JS sends them: a prompt most of the time, then known names with any values.
fn any_options() -> impl Strategy<Value = Value> {
    (
        prop::option::weighted(0.8, "\\PC{1,24}"),
        prop::collection::vec((prop::sample::select(OPTION_NAMES.clone()), any_json()), 0..6),
    )
        .prop_map(|(prompt, entries)| {
            let mut options = Map::new();
            if let Some(prompt) = prompt {
                options.insert("prompt".into(), json!(prompt));
            }
            options.extend(entries);
            Value::Object(options)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_text_round_trips_through_the_tokenizer(text in any_text()) {
        let ids = TOKENIZER.encode(&text).unwrap();
        prop_assert_eq!(TOKENIZER.decode(&ids), text);
    }

    #[test]
    fn any_bytes_tokenize_without_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let text = String::from_utf8_lossy(&bytes);
        let ids = TOKENIZER.encode(&text).unwrap();
        prop_assert!(ids.iter().all(|&id| (id as usize) < *VOCAB));
    }

    #[test]
    fn generation_options_from_js_are_a_request_or_an_error_naming_an_option(options in any_options()) {
        match GenerateRequest::from_json(&options.to_string(), *VOCAB) {
            Ok(request) => {
                let _ = request.validate(*VOCAB);
            }
            Err(error) => prop_assert!(!error.option.is_empty() && !error.message.is_empty(), "{error:?}"),
        }
    }
}

proptest! {
    // Each case copies the 98 MB file: fewer cases.
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn the_real_header_survives_any_corruption(
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let data_offset = GgufFile::parse(model_bytes()).unwrap().data_offset as usize;
        let mut bytes = model_bytes().to_vec();
        for (at, value) in flips {
            bytes[at.index(data_offset)] = value;
        }
        if let Ok(file) = GgufFile::parse(&bytes) {
            let _ = ModelConfig::from_gguf(&file);
            let _ = Tokenizer::from_gguf(&file);
        }
    }
}
