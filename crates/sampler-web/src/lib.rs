//! The sampler alone, for the page: a second, small wasm module (no model, no Burn, no GPU) so
//! that what the page shows about a step comes from the same Rust code that chose the token,
//! also in a browser without WebGPU.
//!
//! [`what_if`] re-runs the sampler's stages on a step's logits row with other settings: bias (and
//! the mask, when there is one) as in the engine, then temperature and truncation
//! ([`nucleus_sampler::process`]), and returns the step's [`Explanation`] (the data the inspector
//! draws). Penalties need the generation's history, which a what-if does not have: the row it
//! takes is the one they were applied to, or the raw row when there were none.
//!
//! The options are the JS API's sampling options ([`SamplingParams`]'s serde form, camelCase),
//! read with unknown keys refused by name. On wasm32 `whatIf(logits, options, chosen, topN)` returns
//! the explanation as JSON text (`bindings`).

use nucleus_sampler::{Explanation, PenaltyHistory, SamplerError, SamplingParams, adjust_logits, explain, process};

/// Why a what-if was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum WhatIfError {
    /// The options are not JSON of the sampling options: `option` names the offending key.
    BadOptions {
        /// The option, in the JS spelling (empty when the JSON itself is malformed).
        option: String,
        /// What is wrong.
        message: String,
    },
    /// The sampler refused the row or the options (an out-of-range value, a NaN logit, ...).
    Sampler(SamplerError),
}

impl std::fmt::Display for WhatIfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WhatIfError::BadOptions { option, message } if option.is_empty() => write!(f, "{message}"),
            WhatIfError::BadOptions { option, message } => write!(f, "{option}: {message}"),
            WhatIfError::Sampler(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for WhatIfError {}

/// Reads the sampling options from their JSON (the JS spelling; missing keys take their
/// defaults), refusing keys that are not sampling options.
pub fn parse_options(json: &str) -> Result<SamplingParams, WhatIfError> {
    let mut unknown = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let params: SamplingParams =
        serde_ignored::deserialize(&mut deserializer, |path| unknown.push(path.to_string()))
            .map_err(|e| WhatIfError::BadOptions { option: String::new(), message: e.to_string() })?;
    if let Some(option) = unknown.into_iter().next() {
        return Err(WhatIfError::BadOptions { option, message: "not a sampling option".into() });
    }
    Ok(params)
}

/// The explanation of a step whose logits are `logits` under the sampling options `params`:
/// every candidate's probability after temperature, whether each truncation kept it, and its
/// probability in the final distribution. `chosen` is the token the explanation reports as
/// chosen (the step's own; by default the most probable token); `top_n` how many candidates it
/// lists by each ranking (at most [`nucleus_sampler::MAX_EXPLAIN_TOP_N`]).
pub fn what_if(
    logits: &[f32],
    params: &SamplingParams,
    chosen: Option<u32>,
    top_n: usize,
) -> Result<Explanation, WhatIfError> {
    let adjusted = adjust_logits(logits, params, PenaltyHistory::default(), None).map_err(WhatIfError::Sampler)?;
    let distribution = process(&adjusted, params).map_err(WhatIfError::Sampler)?;
    let chosen = chosen.unwrap_or_else(|| distribution.argmax());
    explain(logits, &adjusted, &distribution, chosen, top_n).map_err(WhatIfError::Sampler)
}

/// The explanation as the page receives it: JSON text with the sampler's field names, each
/// number written as its own type would (an f32 logit as the shortest f32 that reads back).
pub fn to_json(explanation: &Explanation) -> String {
    // Plain numbers and strings: serialising cannot fail.
    serde_json::to_string(explanation).unwrap_or_default()
}

#[cfg(target_arch = "wasm32")]
mod bindings {
    use js_sys::Reflect;
    use wasm_bindgen::prelude::*;

    use super::WhatIfError;

    /// `whatIf(logits: Float32Array, options: string, chosen?: number, topN: number): string`:
    /// the explanation as JSON. Errors are JS `Error`s with `code` `bad-options` and, for an
    /// unknown option, `option` naming it.
    #[wasm_bindgen(js_name = whatIf)]
    pub fn what_if(logits: &[f32], options: &str, chosen: Option<u32>, top_n: usize) -> Result<String, JsValue> {
        let params = super::parse_options(options).map_err(to_js)?;
        let explanation = super::what_if(logits, &params, chosen, top_n).map_err(to_js)?;
        Ok(super::to_json(&explanation))
    }

    fn to_js(error: WhatIfError) -> JsValue {
        let js = js_sys::Error::new(&error.to_string());
        // Setting a property on a fresh Error object cannot fail.
        let _ = Reflect::set(&js, &"code".into(), &"bad-options".into());
        if let WhatIfError::BadOptions { option, .. } = &error
            && !option.is_empty()
        {
            let _ = Reflect::set(&js, &"option".into(), &option.as_str().into());
        }
        js.into()
    }
}
