//! The trace reader: the committed trace reads whole, every kind of damage is refused naming
//! where it is, and the JSON Schema in `www/trace.schema.json` is the one the types give (after
//! changing them, run `NUCLEUS_UPDATE_FIXTURES=1 cargo test -p nucleus-sampler-web`).

use nucleus_sampler::json::sorted_keys;
use nucleus_sampler_web::trace::{FinishReason, TRACE_GENERATOR, TRACE_VERSION, Trace, header, read_trace};
use serde_json::{Value, json};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
/// Recorded by the playground in Chromium (tests/browser/playground.test.mjs checks that an export
/// of the same run gives it again).
const FIXTURE: &str = "www/traces/capital-greedy.json";

fn fixture() -> Value {
    let path = format!("{ROOT}/{FIXTURE}");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))).unwrap()
}

#[test]
fn the_recorded_trace_reads_whole() {
    let trace: Trace = read_trace(&fixture().to_string()).unwrap();
    assert_eq!(trace.version, TRACE_VERSION);
    assert_eq!(trace.model.vocab_size, 49_152);
    assert_eq!(trace.prompt.as_deref(), Some("The capital of France is"));
    assert_eq!(trace.steps[0].id, 7042, "\" Paris\"");
    assert_eq!(trace.steps[0].candidates.ids.len(), 64);
    assert_eq!(trace.finish_reason, FinishReason::Length);
    // Read and written again, it is the same trace.
    assert_eq!(read_trace(&serde_json::to_string(&trace).unwrap()).unwrap(), trace);
}

#[test]
fn a_trace_written_now_carries_the_package_version_and_older_ones_still_read() {
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(TRACE_GENERATOR, format!("nucleus {version}"));
    // The workspace's version is the package's: build.sh writes the JS package's from the same line.
    let manifest = std::fs::read_to_string(format!("{ROOT}/Cargo.toml")).unwrap();
    assert!(
        manifest.contains(&format!("[workspace.package]\nversion = \"{version}\"")),
        "Cargo.toml's workspace version"
    );
    let mut written = fixture();
    for (key, value) in header().as_object().unwrap() {
        written[key] = value.clone();
    }
    assert_eq!(read_trace(&written.to_string()).unwrap().generator.as_deref(), Some(TRACE_GENERATOR));
    // The committed trace predates the field.
    assert_eq!(read_trace(&fixture().to_string()).unwrap().generator, None);
}

/// Each damage, and the path and message the reader gives for it.
#[test]
fn every_kind_of_damage_is_refused_where_it_is() {
    type Damage = fn(&mut Value);
    let cases: [(Damage, &str, &str); 16] = [
        (|t| t["format"] = json!("something-else"), "format", "not a Nucleus trace"),
        (|t| t["version"] = json!(2), "version", "this is a version 2 trace, newer than this page reads (version 1)"),
        (|t| t["version"] = json!("1"), "version", "must be 1"),
        (
            |t| t["steps"][1]["candidates"]["ids"][3] = json!(49_152),
            "steps[1].candidates.ids[3]",
            "49152 is outside the vocabulary",
        ),
        (
            |t| t["steps"][0]["candidates"]["ids"][2] = t["steps"][0]["candidates"]["ids"][1].clone(),
            "steps[0].candidates.ids[2]",
            "is listed twice",
        ),
        (
            |t| {
                t["steps"][0]["candidates"]["texts"].as_array_mut().unwrap().pop();
            },
            "steps[0].candidates",
            "ids, texts and logits must have one length",
        ),
        (|t| t["steps"][0]["candidates"]["logits"][5] = json!(1000.0), "steps[0].candidates.logits[5]", "best first"),
        (|t| t["steps"][0]["logSumExp"] = json!(0.0), "steps[0].logSumExp", "cannot be the log-sum-exp"),
        (|t| t["steps"][0]["candidates"]["logits"][0] = json!("high"), "steps[0].candidates.logits[0]", "invalid type"),
        (|t| t["steps"][0]["logprob"] = json!(0.5), "steps[0].logprob", "must be a log-probability"),
        (|t| t["steps"] = json!([]), "steps", "at least one step"),
        (|t| t["settings"]["topP"] = json!(1.5), "settings.topP", "topP must be in (0, 1], got 1.5"),
        (|t| t["settings"]["topQ"] = json!(0.5), "settings.topQ", "unknown option"),
        (|t| t["model"]["sha256"] = json!("ABC"), "model.sha256", "64 lowercase hex"),
        (|t| t["extra"] = json!(true), "extra", "unknown field `extra`"),
        (|t| t["messages"] = json!([{ "role": "user", "content": "Hi" }]), "messages", "either prompt or messages"),
    ];
    for (damage, path, message) in cases {
        let mut trace = fixture();
        damage(&mut trace);
        let error = read_trace(&trace.to_string()).expect_err(path);
        assert_eq!(error.path, path, "{error}");
        assert!(error.message.contains(message), "{path}: {:?} does not say {message:?}", error.message);
    }
    let not_json = read_trace("{\"format\": ").unwrap_err();
    assert!(not_json.message.starts_with("not JSON"), "{not_json}");
}

#[test]
fn the_json_schema_is_the_one_the_types_give() {
    let path = format!("{ROOT}/www/trace.schema.json");
    let schema = serde_json::to_value(schemars::schema_for!(Trace)).unwrap();
    let expected = serde_json::to_string_pretty(&sorted_keys(schema)).unwrap() + "\n";
    if std::env::var_os("NUCLEUS_UPDATE_FIXTURES").is_some() {
        std::fs::write(&path, &expected).unwrap();
    }
    let found = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(found == expected, "{path} is stale; run NUCLEUS_UPDATE_FIXTURES=1 cargo test -p nucleus-sampler-web");
}
