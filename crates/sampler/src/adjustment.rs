//! One token's stage 1–2 adjustment in the per-token form the GPU applies: the logit bias, the
//! repetition penalty and the presence/frequency penalties of [`crate::adjust_logits`], folded
//! into one map of the logit. The sampler produces them ([`crate::Sampler::gpu_adjustments`]),
//! `nucleus-kernels` packs them for `logit_adjust.wgsl` as they are, and the engine inverts one
//! to recover the raw logit of a token the GPU adjusted.

/// One token's adjustment, applied to its logit `v` as
///
/// ```text
/// v1 = v + bias
/// v2 = v1 · scale_positive        if v1 > 0
///      v1 · scale_non_positive    otherwise
/// v' = v2 + offset
/// ```
///
/// in IEEE f32, each operation rounded on its own (the same on the GPU, in the kernels' CPU
/// reference and in [`LogitAdjustment::apply`]). In the sampler's order: the logit bias
/// (`bias`), the CTRL repetition penalty θ (`scale_positive = 1/θ`, `scale_non_positive = θ`) and
/// the presence/frequency penalties (`offset = −(count·frequency + presence)`).
///
/// `bias` and `offset` are finite or `-inf` (which forbids the token); scales are finite and
/// `> 0` (the kernels validate this before packing).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogitAdjustment {
    /// Token id.
    pub id: u32,
    /// Added first.
    pub bias: f32,
    /// Multiplies a positive biased logit.
    pub scale_positive: f32,
    /// Multiplies a zero or negative biased logit.
    pub scale_non_positive: f32,
    /// Added last.
    pub offset: f32,
}

impl LogitAdjustment {
    /// The identity adjustment of `id` (bias 0, scales 1, offset 0).
    pub fn new(id: u32) -> Self {
        Self { id, bias: 0.0, scale_positive: 1.0, scale_non_positive: 1.0, offset: 0.0 }
    }

    /// Adds `bias` to the logit (`-inf` forbids the token).
    pub fn with_bias(mut self, bias: f32) -> Self {
        self.bias = bias;
        self
    }

    /// Multiplies the (biased) logit by `factor`, whatever its sign.
    pub fn with_scale(mut self, factor: f32) -> Self {
        self.scale_positive = factor;
        self.scale_non_positive = factor;
        self
    }

    /// CTRL / Hugging Face repetition penalty θ: a positive logit is multiplied by `1/θ` (rounded
    /// to f32 once, from f64), any other by `θ`.
    pub fn with_repetition_penalty(mut self, penalty: f64) -> Self {
        self.scale_positive = (1.0 / penalty) as f32;
        self.scale_non_positive = penalty as f32;
        self
    }

    /// Adds `offset` after the scaling (presence/frequency penalties are negative offsets).
    pub fn with_offset(mut self, offset: f32) -> Self {
        self.offset = offset;
        self
    }

    /// True when it changes no logit.
    pub fn is_identity(&self) -> bool {
        *self == Self::new(self.id)
    }

    /// The adjusted logit, in f32 as the GPU computes it.
    pub fn apply(&self, v: f32) -> f32 {
        let biased = v + self.bias;
        let scale = if biased > 0.0 { self.scale_positive } else { self.scale_non_positive };
        biased * scale + self.offset
    }

    /// The raw logit `adjusted` came from: the inverse of [`LogitAdjustment::apply`] (a positive
    /// scale keeps the sign of `v + bias`, so the sign of `adjusted − offset` chooses the
    /// scale). Rounded in f32 like the forward map, so within an ulp or two of the raw logit;
    /// meaningful only for a token that can be chosen (finite bias and offset).
    pub fn invert(&self, adjusted: f32) -> f32 {
        let scaled = adjusted - self.offset;
        let scale = if scaled > 0.0 { self.scale_positive } else { self.scale_non_positive };
        scaled / scale - self.bias
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invert_undoes_apply_within_two_ulps() {
        let adjustments = [
            LogitAdjustment::new(0),
            LogitAdjustment::new(1).with_bias(1.5),
            LogitAdjustment::new(2).with_repetition_penalty(1.3).with_offset(-0.9),
            LogitAdjustment::new(3).with_bias(-2.0).with_repetition_penalty(2.0).with_offset(-0.25),
            LogitAdjustment::new(4).with_scale(0.7),
        ];
        for adjustment in adjustments {
            for raw in [-7.25f32, -1.0, -0.1, 0.0, 0.3, 1.0, 2.5, 13.0] {
                let back = adjustment.invert(adjustment.apply(raw));
                let ulp = f32::EPSILON * raw.abs().max(1.0);
                assert!((back - raw).abs() <= 2.0 * ulp, "{adjustment:?}: {raw} → {back}");
            }
        }
    }

    #[test]
    fn the_repetition_penalty_divides_positive_and_multiplies_other_logits() {
        let penalty = LogitAdjustment::new(9).with_repetition_penalty(2.0);
        assert_eq!((penalty.apply(3.0), penalty.apply(-3.0), penalty.apply(0.0)), (1.5, -6.0, 0.0));
        assert!(LogitAdjustment::new(9).is_identity() && !penalty.is_identity());
    }
}
