//! `www/sampling-knobs.json`, the page's sliders and the sampling defaults, is written from
//! [`KNOBS`] and [`SamplingParams::default`] and must stay so. After changing either, run
//! `NUCLEUS_UPDATE_KNOBS=1 cargo test -p nucleus-sampler --test knobs`.

use nucleus_sampler::SamplingParams;
use nucleus_sampler::json::sorted_keys;
use nucleus_sampler::knobs::KNOBS;
use serde_json::{Value, json};

const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../www/sampling-knobs.json");

fn generated() -> String {
    let file = json!({
        "about": "Generated from crates/sampler (SamplingParams::default and knobs::KNOBS) by crates/sampler/tests/knobs.rs; do not edit.",
        "defaults": SamplingParams::default(),
        "knobs": KNOBS,
    });
    serde_json::to_string_pretty(&sorted_keys(file)).unwrap() + "\n"
}

#[test]
fn the_page_s_knob_file_is_current() {
    let expected = generated();
    if std::env::var_os("NUCLEUS_UPDATE_KNOBS").is_some() {
        std::fs::write(FILE, &expected).unwrap();
    }
    let found = std::fs::read_to_string(FILE).unwrap_or_default();
    assert!(
        found == expected,
        "www/sampling-knobs.json is not what crates/sampler defines; run NUCLEUS_UPDATE_KNOBS=1 cargo test -p nucleus-sampler --test knobs"
    );
}

#[test]
fn every_knob_is_a_sampling_option_whose_default_and_off_value_are_on_its_slider() {
    let Value::Object(defaults) = serde_json::to_value(SamplingParams::default()).unwrap() else { unreachable!() };
    for knob in KNOBS {
        let default = defaults.get(knob.key).and_then(Value::as_f64);
        let default = default.unwrap_or_else(|| panic!("{} is not a numeric sampling option", knob.key));
        assert!(knob.min < knob.max && knob.step > 0.0, "{knob:?}");
        assert!((knob.min..=knob.max).contains(&default), "{}'s default {default} is off its slider", knob.key);
        if let Some(off) = knob.off {
            assert!((knob.min..=knob.max).contains(&off), "{}'s off value is off its slider", knob.key);
            assert_eq!(off, default, "{}: the default turns the stage off", knob.key);
        }
        // The slider's whole range is valid (validate owns the ranges).
        for value in [knob.min, knob.max] {
            let mut options = defaults.clone();
            let value = if value.fract() == 0.0 { json!(value as i64) } else { json!(value) };
            options.insert(knob.key.to_string(), value);
            let params: SamplingParams = serde_json::from_value(Value::Object(options)).unwrap();
            params.validate(10).unwrap_or_else(|e| panic!("{}'s slider reaches an invalid value: {e}", knob.key));
        }
    }
}
