//! The RoPE angle tables both paths rotate with: `(cos, sin)` of `position · θ_i` for every
//! position of the context and every pair `i < head_dim / 2`, with
//! `θ_i = base^(−2i/head_dim) / factor_i`, computed in f64 and rounded to f32 once.
//!
//! One table per distinct base (Gemma 3's local blocks rotate with base 10,000, its global ones
//! with the file's); `factor_i` is Llama 3's `rope_freqs.weight`, 1 without it.

use nucleus_gguf::GgufFile;

use crate::architecture::Role;
use crate::{ModelConfig, ModelError};

pub(crate) struct RopeTables {
    /// Position-major `[context, head_dim / 2]` pairs, one table per base.
    pub tables: Vec<Vec<(f32, f32)>>,
    /// The table of each block.
    pub block_table: Vec<usize>,
}

impl RopeTables {
    pub(crate) fn new(file: &GgufFile, config: &ModelConfig) -> Result<Self, ModelError> {
        let factors = frequency_factors(file, config)?;
        let mut bases: Vec<f64> = Vec::new();
        let block_table = (0..config.block_count)
            .map(|block| {
                let base = config.block_attention(block).rope_base;
                bases.iter().position(|&b| b == base).unwrap_or_else(|| {
                    bases.push(base);
                    bases.len() - 1
                })
            })
            .collect();
        let tables = bases.iter().map(|&base| angles(config, base, factors.as_deref())).collect();
        Ok(Self { tables, block_table })
    }

    /// Tables a configuration needs (one per distinct base), before the file is read.
    #[cfg(feature = "gpu")]
    pub(crate) fn count(config: &ModelConfig) -> usize {
        let mut bases: Vec<f64> = (0..config.block_count).map(|b| config.block_attention(b).rope_base).collect();
        bases.sort_by(f64::total_cmp);
        bases.dedup();
        bases.len()
    }

    /// Bytes of one position's row in one table as the fused path uploads it (f32 pairs).
    #[cfg(feature = "gpu")]
    pub(crate) fn position_bytes(config: &ModelConfig) -> u64 {
        (config.rope_dims / 2) as u64 * 8
    }
}

/// `rope_freqs.weight`, when the file has it: `head_dim / 2` positive factors.
fn frequency_factors(file: &GgufFile, config: &ModelConfig) -> Result<Option<Vec<f32>>, ModelError> {
    let name = Role::RopeFrequencies.tensor_name(0);
    let Some(info) = file.tensor(&name) else { return Ok(None) };
    let half = config.rope_dims as u64 / 2;
    if info.dims != [half] {
        return Err(ModelError::WrongShape { name, expected: vec![half], found: info.dims.clone() });
    }
    let factors = file.dequantize(&name)?;
    if let Some(bad) = factors.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
        return Err(ModelError::Invalid(format!("{name} holds {bad}, not a positive factor")));
    }
    Ok(Some(factors))
}

fn angles(config: &ModelConfig, base: f64, factors: Option<&[f32]>) -> Vec<(f32, f32)> {
    let half = config.rope_dims / 2;
    let theta: Vec<f64> = (0..half)
        .map(|i| {
            let factor = factors.map_or(1.0, |f| f64::from(f[i]));
            base.powf(-2.0 * i as f64 / config.rope_dims as f64) / factor
        })
        .collect();
    let mut angles = Vec::with_capacity(config.context_length * half);
    for position in 0..config.context_length {
        angles.extend(theta.iter().map(|&t| {
            let angle = position as f64 * t;
            (angle.cos() as f32, angle.sin() as f32)
        }));
    }
    angles
}
