//! The RoPE angle tables every path rotates with: `m · (cos, sin)` of `position · θ_i` for the
//! positions a path needs (the GPU's every position of the context at load, the CPU engine's a
//! pass's) and every pair `i < rope_dims / 2`, computed in f64 and rounded to f32 once.
//! Unscaled, `θ_i = base^(−2i/rope_dims) / factor_i` and `m = 1`; `factor_i` is Llama 3's
//! `rope_freqs.weight`, 1 without it. A file's RoPE scaling ([`RopeScaling`]: linear, YaRN)
//! changes `θ_i` and `m` here and nowhere else: every path reads these tables.
//!
//! One table per distinct [`RopeFrequencies`] (Gemma 3's local blocks rotate with base 10,000
//! and no scaling, its global ones with the file's base and scaling).

use nucleus_gguf::{GgufError, GgufFile, GgufHeader};

use crate::architecture::Role;
use crate::{ModelConfig, ModelError};

/// What one block rotates with: its base and how the file stretches it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeFrequencies {
    pub base: f64,
    pub scaling: RopeScaling,
}

/// How a file stretches RoPE past the context it was first trained on (GGUF
/// `{arch}.rope.scaling.*`, as llama.cpp's converter writes Hugging Face's `rope_scaling`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum RopeScaling {
    #[default]
    None,
    /// Positions divided by `factor`: every `θ_i / factor`.
    Linear { factor: f64 },
    /// YaRN (arXiv 2309.00071): the fast-turning pairs kept, the slow ones divided by the factor,
    /// a linear ramp between, and `cos` and `sin` multiplied by an attention factor.
    Yarn(Yarn),
}

/// YaRN's parameters, defaulted as llama.cpp and transformers default them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Yarn {
    pub factor: f64,
    /// The context the model was trained on before the extension (`original_context_length`).
    pub original_context: usize,
    /// Rotations over the original context above which a pair is kept (`yarn_beta_fast`, 32).
    pub beta_fast: f64,
    /// Rotations below which a pair is wholly interpolated (`yarn_beta_slow`, 1).
    pub beta_slow: f64,
    /// How much of the ramp applies (`yarn_ext_factor`, 1; 0 is plain linear interpolation).
    pub ext_factor: f64,
    /// What `cos` and `sin` are multiplied by: `yarn_attn_factor` when the file has it (Hugging
    /// Face's `attention_factor`), else `0.1 · ln(factor) + 1` (over the same with
    /// `yarn_log_multiplier` as the multiplier of the log, when the file has one), times
    /// `rope.scaling.attn_factor`.
    pub attention_factor: f64,
}

impl RopeScaling {
    /// Reads `{arch}.rope.scaling.*`. A factor without a type is linear (llama.cpp's default);
    /// a factor of 0 or 1, or type `none`, is no scaling. Other types (LongRoPE, dynamic NTK) are
    /// refused by name, as is any value that is not a positive finite number.
    pub(crate) fn from_gguf(file: &GgufHeader, arch: &str, trained_context: usize) -> Result<Self, ModelError> {
        let key = |name: &str| format!("{arch}.rope.scaling.{name}");
        let number = |name: &str| -> Result<Option<f64>, ModelError> {
            let Some(value) = file.get(&key(name)) else { return Ok(None) };
            match value.as_f64() {
                Some(v) if v.is_finite() => Ok(Some(v)),
                _ => Err(ModelError::Invalid(format!("{} is not a finite number", key(name)))),
            }
        };
        let positive = |name: &str| -> Result<Option<f64>, ModelError> {
            match number(name)? {
                Some(v) if v <= 0.0 => Err(ModelError::Invalid(format!("{} is {v}, not a positive number", key(name)))),
                other => Ok(other),
            }
        };
        let kind = match file.get(&key("type")) {
            Some(value) => {
                value.as_str().ok_or_else(|| ModelError::Invalid(format!("{} is not a string", key("type"))))?
            }
            None => "linear",
        };
        let factor = number("factor")?.filter(|&f| f != 0.0).unwrap_or(1.0);
        if factor <= 0.0 {
            return Err(ModelError::Invalid(format!("{} is {factor}, not a positive number", key("factor"))));
        }
        let attn_factor = positive("attn_factor")?.unwrap_or(1.0);
        match kind {
            "none" => Ok(Self::None),
            "linear" if attn_factor != 1.0 => {
                Err(ModelError::Unsupported(format!("linear RoPE scaling with {} = {attn_factor}", key("attn_factor"))))
            }
            "linear" if factor == 1.0 => Ok(Self::None),
            "linear" => Ok(Self::Linear { factor }),
            "yarn" => {
                let original_context = match file.get(&key("original_context_length")) {
                    Some(_) => file.get_u64(&key("original_context_length"))? as usize,
                    None => trained_context,
                };
                if original_context == 0 {
                    return Err(ModelError::Invalid(format!("{} is 0", key("original_context_length"))));
                }
                let ext_factor = number("yarn_ext_factor")?.filter(|&e| e >= 0.0).unwrap_or(1.0);
                let magnitude =
                    |multiplier: f64| if factor <= 1.0 { 1.0 } else { 0.1 * multiplier * factor.ln() + 1.0 };
                let attention_factor = match (positive("yarn_attn_factor")?, number("yarn_log_multiplier")?) {
                    (Some(given), _) => given,
                    _ if ext_factor == 0.0 => 1.0,
                    (None, Some(log_multiplier)) if log_multiplier != 0.0 => magnitude(1.0) / magnitude(log_multiplier),
                    (None, _) => magnitude(1.0),
                };
                Ok(Self::Yarn(Yarn {
                    factor,
                    original_context,
                    beta_fast: number("yarn_beta_fast")?.unwrap_or(32.0),
                    beta_slow: number("yarn_beta_slow")?.unwrap_or(1.0),
                    ext_factor,
                    attention_factor: attention_factor * attn_factor,
                }))
            }
            other => Err(ModelError::Unsupported(format!("RoPE scaling ('{other}')"))),
        }
    }

    /// What `cos` and `sin` are multiplied by.
    fn magnitude(&self) -> f64 {
        match self {
            Self::Yarn(yarn) => yarn.attention_factor,
            _ => 1.0,
        }
    }

    /// The scaled frequency of pair `i` of `dims` rotated dimensions, from its unscaled `theta`.
    fn frequency(&self, theta: f64, i: usize, dims: usize, base: f64) -> f64 {
        match self {
            Self::None => theta,
            Self::Linear { factor } => theta / factor,
            Self::Yarn(yarn) => {
                // The pair that turns `rotations` times over the original context.
                let pair = |rotations: f64| {
                    dims as f64 * (yarn.original_context as f64 / (rotations * 2.0 * std::f64::consts::PI)).ln()
                        / (2.0 * base.ln())
                };
                let low = pair(yarn.beta_fast).floor().max(0.0);
                let high = pair(yarn.beta_slow).ceil().min(dims as f64 - 1.0);
                let ramp = 1.0 - ((i as f64 - low) / (high - low).max(0.001)).clamp(0.0, 1.0);
                let kept = ramp * yarn.ext_factor;
                theta / yarn.factor * (1.0 - kept) + theta * kept
            }
        }
    }
}

impl std::fmt::Display for RopeScaling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::None => write!(f, "none"),
            Self::Linear { factor } => write!(f, "linear ×{factor}"),
            Self::Yarn(yarn) => write!(
                f,
                "YaRN ×{} from {} positions (attention factor {:.4})",
                yarn.factor, yarn.original_context, yarn.attention_factor
            ),
        }
    }
}

/// The RoPE of a model's blocks: per distinct frequencies, each pair's angle per position, from
/// which a table of `(cos, sin)` rows is computed for the positions a caller needs. The GPU and
/// Burn paths upload every position's rows at load; the CPU engine computes a pass's rows as it
/// runs ([`RopeTables::every_table`]: 128 pairs per table and position, microseconds a decode
/// step), which kept 64 MiB of Gemma 3's two tables at 32,768 positions out of its memory.
pub(crate) struct RopeTables {
    /// Per distinct frequencies: each pair's angle per position, and the rows' magnitude.
    rates: Vec<(Vec<f64>, f64)>,
    /// The table of each block.
    pub block_table: Vec<usize>,
}

impl RopeTables {
    pub(crate) fn new(file: &GgufFile, config: &ModelConfig) -> Result<Self, ModelError> {
        let name = Role::RopeFrequencies.tensor_name(0);
        let values = file.tensor(&name).map(|_| file.dequantize(&name)).transpose()?;
        Self::with_factors(file, config, values)
    }

    /// As [`Self::new`], given the values of the file's frequency factors tensor when it has one
    /// (a streamed file's, kept as it passed: [`crate::fused::FusedUpload`]).
    pub(crate) fn with_factors(
        file: &GgufHeader,
        config: &ModelConfig,
        values: Option<Vec<f32>>,
    ) -> Result<Self, ModelError> {
        let factors = frequency_factors(file, config, values)?;
        let (distinct, block_table) = distinct_frequencies(config);
        let rates = distinct.iter().map(|frequencies| rates(config, frequencies, factors.as_deref())).collect();
        Ok(Self { rates, block_table })
    }

    /// Tables a configuration needs (one per distinct frequencies), before the file is read.
    #[cfg(feature = "gpu")]
    pub(crate) fn count(config: &ModelConfig) -> usize {
        distinct_frequencies(config).0.len()
    }

    /// Bytes of one position's row in one table as the fused path uploads it (f32 pairs).
    #[cfg(feature = "gpu")]
    pub(crate) fn position_bytes(config: &ModelConfig) -> u64 {
        (config.rope_dims / 2) as u64 * 8
    }

    /// Table `table`'s `(cos, sin)` pairs for `positions`, position-major `[positions, rope_dims /
    /// 2]`.
    fn rows(&self, table: usize, positions: std::ops::Range<usize>) -> Vec<(f32, f32)> {
        let (theta, magnitude) = &self.rates[table];
        let mut rows = Vec::with_capacity(positions.len() * theta.len());
        for position in positions {
            rows.extend(theta.iter().map(|&t| {
                let angle = position as f64 * t;
                ((magnitude * angle.cos()) as f32, (magnitude * angle.sin()) as f32)
            }));
        }
        rows
    }

    /// Every table's rows for `positions` (a pass's on the CPU engine; the whole context where a
    /// path uploads them at load).
    pub(crate) fn every_table(&self, positions: std::ops::Range<usize>) -> Vec<Vec<(f32, f32)>> {
        (0..self.rates.len()).map(|table| self.rows(table, positions.clone())).collect()
    }
}

/// `rope_freqs.weight`, when the file has it: `head_dim / 2` positive factors.
fn frequency_factors(
    file: &GgufHeader,
    config: &ModelConfig,
    values: Option<Vec<f32>>,
) -> Result<Option<Vec<f32>>, ModelError> {
    let name = Role::RopeFrequencies.tensor_name(0);
    let Some(info) = file.tensor(&name) else { return Ok(None) };
    let half = config.rope_dims as u64 / 2;
    if info.dims != [half] {
        return Err(ModelError::WrongShape { name, expected: vec![half], found: info.dims.clone() });
    }
    let factors = values.ok_or(GgufError::MissingTensor(name.clone()))?;
    if let Some(bad) = factors.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
        return Err(ModelError::Invalid(format!("{name} holds {bad}, not a positive factor")));
    }
    Ok(Some(factors))
}

/// The distinct frequencies of the blocks, and the index of each block's among them.
fn distinct_frequencies(config: &ModelConfig) -> (Vec<RopeFrequencies>, Vec<usize>) {
    let mut distinct: Vec<RopeFrequencies> = Vec::new();
    let block_table = (0..config.block_count)
        .map(|block| {
            let frequencies = config.block_attention(block).rope;
            distinct.iter().position(|&d| d == frequencies).unwrap_or_else(|| {
                distinct.push(frequencies);
                distinct.len() - 1
            })
        })
        .collect();
    (distinct, block_table)
}

/// Each pair's angle per position for `frequencies` (its scaling applied, and `rope_freqs`'
/// factors), and the rows' magnitude (YaRN's attention factor).
fn rates(config: &ModelConfig, frequencies: &RopeFrequencies, factors: Option<&[f32]>) -> (Vec<f64>, f64) {
    let (dims, base, scaling) = (config.rope_dims, frequencies.base, frequencies.scaling);
    let theta = (0..dims / 2)
        .map(|i| {
            let factor = factors.map_or(1.0, |f| f64::from(f[i]));
            scaling.frequency(base.powf(-2.0 * i as f64 / dims as f64) / factor, i, dims, base)
        })
        .collect();
    (theta, scaling.magnitude())
}
