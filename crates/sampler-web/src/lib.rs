//! The sampler alone, for the page: a second, small wasm module (no model, no Burn, no GPU) so
//! that what the page shows about a step comes from the same Rust code that chose the token,
//! also in a browser without WebGPU (a recorded run replayed from its trace).
//!
//! [`what_if`] re-runs the sampler's stages on a step's logits row with other settings: bias and
//! the mask (a constrained step's allowed set) as in the engine, then temperature and truncation
//! ([`nucleus_sampler::process`]), and returns the step's [`Explanation`] (the data the inspector
//! draws). Penalties need the generation's history, which a what-if does not have: the row it
//! takes is the one they were applied to, or the raw row when there were none.
//!
//! A step usually reports only its top candidates, not the whole row: [`estimated_row`] makes a
//! row of them and the rest of the vocabulary (see there for what is exact and what estimated).
//!
//! [`trace`] reads a recorded run (a trace), which the page replays with these functions.
//!
//! The options are the JS API's sampling options, read by the sampler's one reader of that
//! spelling ([`SamplingParams::from_json`]). On wasm32 the module exports
//! `whatIf(logits, options, chosen, topN, allowedWords)`, which returns the explanation as JSON text with the
//! JS API's camelCase keys (`bindings`), `estimateRow(ids, logits, logSumExp, vocabSize)` and
//! `readTrace(text)` with `traceHeader()`.

pub mod trace;

use nucleus_sampler::{
    Explanation, OptionError, PenaltyHistory, SamplerError, SamplingParams, TokenMask, TokenSet, adjust_logits,
    camel_keys, explain, process,
};

/// Why a what-if was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WhatIfError {
    /// The options are not the sampling options, or a value is out of range: the error names
    /// the option as JS spells it.
    #[error(transparent)]
    Options(#[from] OptionError),
    /// The row cannot be sampled from (a NaN logit, an empty row, a chosen id outside it), or
    /// the candidates cannot make one.
    #[error("{0}")]
    Row(String),
}

impl From<SamplerError> for WhatIfError {
    fn from(error: SamplerError) -> Self {
        WhatIfError::Row(error.to_string())
    }
}

/// The explanation of a step whose logits are `logits` under the sampling options `params`:
/// every candidate's probability after temperature, whether each truncation kept it, and its
/// probability in the final distribution. `chosen` is the token the explanation reports as
/// chosen (the step's own; by default the most probable token); `top_n` how many candidates it
/// lists by each ranking (at most [`nucleus_sampler::MAX_EXPLAIN_TOP_N`]). `allowed`, a
/// constrained step's allowed set, masks the others where the engine did (after bias, before
/// temperature).
pub fn what_if(
    logits: &[f32],
    params: &SamplingParams,
    chosen: Option<u32>,
    top_n: usize,
    allowed: Option<&TokenSet>,
) -> Result<Explanation, WhatIfError> {
    if let Some(allowed) = allowed
        && allowed.vocab_size() != logits.len()
    {
        return Err(WhatIfError::Row(format!(
            "the allowed set covers {} tokens but the row has {}",
            allowed.vocab_size(),
            logits.len()
        )));
    }
    let mask = allowed.map(|set| set as &dyn TokenMask);
    let adjusted = adjust_logits(logits, params, PenaltyHistory::default(), mask)?;
    let distribution = process(&adjusted, params)?;
    let chosen = chosen.unwrap_or_else(|| distribution.argmax());
    Ok(explain(logits, &adjusted, &distribution, chosen, top_n)?)
}

/// A whole-vocabulary row from a step's top candidates (`ids` and their raw `logits`, any
/// order) and the full row's log-sum-exp (a candidate's logit minus its log-probability):
/// each candidate at its own logit, every other token at one logit, chosen so that the rest's
/// total probability at temperature 1 is exact, and below the smallest candidate's (which no
/// token outside the top can exceed).
///
/// So at temperature 1 every candidate's probability, and every truncation that ends inside
/// the candidates, is exact (up to that one logit held as an f32: a relative 1e-7 of the rest's
/// mass); at other temperatures the rest's share is an estimate (the true
/// rest is spread out, not flat). With no mass left for the rest its tokens are impossible
/// (`-inf`).
pub fn estimated_row(
    ids: &[u32],
    logits: &[f32],
    log_sum_exp: f64,
    vocab_size: usize,
) -> Result<Vec<f32>, WhatIfError> {
    if ids.len() != logits.len() {
        return Err(WhatIfError::Row(format!("{} candidate ids but {} logits", ids.len(), logits.len())));
    }
    if !log_sum_exp.is_finite() || logits.iter().any(|l| !l.is_finite()) {
        return Err(WhatIfError::Row("the candidates' logits and their log-sum-exp must be finite".into()));
    }
    let mut row = vec![f32::NAN; vocab_size];
    for (&id, &logit) in ids.iter().zip(logits) {
        let slot = row.get_mut(id as usize).ok_or_else(|| {
            WhatIfError::Row(format!("candidate id {id} is outside the vocabulary (ids 0..{vocab_size})"))
        })?;
        if !slot.is_nan() {
            return Err(WhatIfError::Row(format!("candidate id {id} is given twice")));
        }
        *slot = logit;
    }
    let rest_count = vocab_size - ids.len();
    if rest_count == 0 {
        return Ok(row);
    }
    let candidate_mass: f64 = logits.iter().map(|&l| (f64::from(l) - log_sum_exp).exp()).sum();
    let rest_mass = 1.0 - candidate_mass;
    let smallest = logits.iter().copied().fold(f32::INFINITY, f32::min);
    let rest = if rest_mass > 0.0 {
        let flat = (log_sum_exp + (rest_mass / rest_count as f64).ln()) as f32;
        // Strictly below the smallest candidate, so every candidate keeps its place in the order.
        flat.min(smallest.next_down())
    } else {
        f32::NEG_INFINITY
    };
    for slot in row.iter_mut().filter(|slot| slot.is_nan()) {
        *slot = rest;
    }
    Ok(row)
}

/// The explanation as the page receives it: JSON text with the JS API's camelCase keys (those of
/// a step's `explain`), each number written as its own type would (an f32 logit as the shortest
/// f32 that reads back).
pub fn to_json(explanation: &Explanation) -> String {
    // Plain numbers and strings: serialising cannot fail.
    serde_json::to_value(explanation).map(|value| camel_keys(value).to_string()).unwrap_or_default()
}

#[cfg(target_arch = "wasm32")]
mod bindings {
    use js_sys::Reflect;
    use nucleus_sampler::{SamplingParams, TokenSet};
    use wasm_bindgen::prelude::*;

    use super::WhatIfError;

    /// `whatIf(logits: Float32Array, options: string, chosen?: number, topN: number,
    /// allowedWords?: Uint32Array): string`: the explanation as JSON; `allowedWords` is a
    /// constrained step's allowed set, one bit per token (`ceil(vocab / 32)` words). Errors are JS
    /// `Error`s with `code` `bad-options` (and `option` naming it) for the options, `bad-row` for
    /// the logits and the allowed set.
    #[wasm_bindgen(js_name = whatIf)]
    pub fn what_if(
        logits: &[f32],
        options: &str,
        chosen: Option<u32>,
        top_n: usize,
        allowed_words: Option<Vec<u32>>,
    ) -> Result<String, JsValue> {
        let params = SamplingParams::from_json(options, logits.len()).map_err(|e| to_js(e.into()))?;
        let allowed = match allowed_words {
            Some(words) if words.len() != logits.len().div_ceil(32) => {
                let message = format!(
                    "allowedWords has {} words; a row of {} needs {}",
                    words.len(),
                    logits.len(),
                    logits.len().div_ceil(32)
                );
                return Err(to_js(WhatIfError::Row(message)));
            }
            words => words.map(|words| TokenSet::from_u32_words(logits.len(), &words)),
        };
        let explanation = super::what_if(logits, &params, chosen, top_n, allowed.as_ref()).map_err(to_js)?;
        Ok(super::to_json(&explanation))
    }

    /// `estimateRow(ids: Uint32Array, logits: Float32Array, logSumExp: number, vocabSize: number):
    /// Float32Array`: a whole row from a step's top candidates (see `estimated_row`).
    #[wasm_bindgen(js_name = estimateRow)]
    pub fn estimate_row(ids: &[u32], logits: &[f32], log_sum_exp: f64, vocab_size: usize) -> Result<Vec<f32>, JsValue> {
        super::estimated_row(ids, logits, log_sum_exp, vocab_size).map_err(to_js)
    }

    /// `readTrace(text: string): string`: the trace, checked whole, as JSON; a trace that is
    /// not one is a JS `Error` with `code` `bad-trace` and `path` naming what is wrong.
    #[wasm_bindgen(js_name = readTrace)]
    pub fn read_trace(text: &str) -> Result<String, JsValue> {
        let trace = crate::trace::read_trace(text).map_err(|error| {
            let js = js_sys::Error::new(&error.to_string());
            let _ = Reflect::set(&js, &"code".into(), &"bad-trace".into());
            let _ = Reflect::set(&js, &"path".into(), &error.path.as_str().into());
            JsValue::from(js)
        })?;
        // Plain data: serialising cannot fail.
        Ok(serde_json::to_string(&trace).unwrap_or_default())
    }

    /// `traceHeader(): string`: the `format`, `version` and `generator` (the package's version) a
    /// trace written now carries, as JSON.
    #[wasm_bindgen(js_name = traceHeader)]
    pub fn trace_header() -> String {
        crate::trace::header().to_string()
    }

    fn to_js(error: WhatIfError) -> JsValue {
        let js = js_sys::Error::new(&error.to_string());
        // Setting a property on a fresh Error object cannot fail.
        match &error {
            WhatIfError::Options(options) => {
                let _ = Reflect::set(&js, &"code".into(), &"bad-options".into());
                let _ = Reflect::set(&js, &"option".into(), &options.option.as_str().into());
            }
            WhatIfError::Row(_) => {
                let _ = Reflect::set(&js, &"code".into(), &"bad-row".into());
            }
        }
        js.into()
    }
}
