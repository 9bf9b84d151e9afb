//! The sampling options a person sets with a slider: the playground's controls.
//!
//! [`SamplingParams`](crate::SamplingParams) is the list of options, their JS names (its serde
//! form) and their defaults; this table adds only what a slider needs: a label, a range to slide
//! over (a comfortable part of the valid range, which [`SamplingParams::validate`](crate::SamplingParams::validate)
//! owns), a step, the value that turns the stage off and a hint. The page reads it from
//! `www/sampling-knobs.json`, which `tests/knobs.rs` writes from this table and the defaults and
//! keeps current.

use serde::Serialize;

/// One slider.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Knob {
    /// The option's name in the JS API (a key of `SamplingParams`' serde form).
    pub key: &'static str,
    /// What the page calls it.
    pub label: &'static str,
    /// The slider's lowest value.
    pub min: f64,
    /// The slider's highest value.
    pub max: f64,
    /// The slider's step.
    pub step: f64,
    /// The value at which the stage does nothing (shown as "off"), if there is one.
    pub off: Option<f64>,
    /// A few words beside the label.
    pub hint: &'static str,
}

/// The playground's sliders: temperature and truncation first (what the page's "what if"
/// re-applies to a step), then the penalties.
pub const KNOBS: &[Knob] = &[
    Knob { key: "temperature", label: "Temperature", min: 0.0, max: 2.0, step: 0.05, off: None, hint: "0 = greedy" },
    Knob { key: "topK", label: "Top-k", min: 0.0, max: 100.0, step: 1.0, off: Some(0.0), hint: "0 = off" },
    Knob { key: "topP", label: "Top-p", min: 0.05, max: 1.0, step: 0.01, off: Some(1.0), hint: "1 = off" },
    Knob { key: "minP", label: "Min-p", min: 0.0, max: 0.5, step: 0.01, off: Some(0.0), hint: "0 = off" },
    Knob { key: "typicalP", label: "Typical-p", min: 0.05, max: 1.0, step: 0.01, off: Some(1.0), hint: "1 = off" },
    Knob {
        key: "repetitionPenalty",
        label: "Repetition penalty",
        min: 1.0,
        max: 2.0,
        step: 0.05,
        off: Some(1.0),
        hint: "1 = off",
    },
    Knob {
        key: "presencePenalty",
        label: "Presence penalty",
        min: -2.0,
        max: 2.0,
        step: 0.1,
        off: Some(0.0),
        hint: "0 = off",
    },
    Knob {
        key: "frequencyPenalty",
        label: "Frequency penalty",
        min: -2.0,
        max: 2.0,
        step: 0.1,
        off: Some(0.0),
        hint: "0 = off",
    },
];
