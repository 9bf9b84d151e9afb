//! The forward pass as Burn tensor operations over f32 weights: on any Burn device (the CPU
//! backend, and wgpu with `Path::BurnOps`). It is the reference the fused path is checked
//! against, and the path of devices the fused kernels cannot run on.
//!
//! Per block, for `S` new tokens at positions `p..p+S` (`T = p + S`):
//!
//! ```text
//! h = rms_norm(x) * attn_norm                     x: [S, d]
//! q = rope(h Wqᵀ) [H, S, hd]; k = rope(h Wkᵀ), v = h Wvᵀ  [KV, S, hd]   (RoPE on adjacent pairs)
//! cache[p..T] = k, v;  K, V = cache[0..T]          [KV, T, hd]
//! a = softmax(q Kᵀ / √hd + causal) V             q grouped as [KV, G·S, hd]: head h uses kv head h / G
//! x = x + a Woᵀ
//! x = x + (silu(h' Wgᵀ) ⊙ h' Wuᵀ) Wdᵀ,  h' = rms_norm(x) * ffn_norm
//! ```
//! then `logits = rms_norm(x) * output_norm · Eᵀ`.

use burn::tensor::activation::{silu, softmax};
use burn::tensor::{DType, Device, Int, Tensor, TensorData, s};
use nucleus_gguf::GgufFile;
use nucleus_kernels::{LinearKernel, WeightLayout};

use crate::architecture::{Architecture, FeedForward, Norm, Rope};
use crate::weights::{BlockWeights, ModelWeights};
use crate::{LlamaConfig, LoadProgress, Logits, ModelError, weights};

/// A model as f32 Burn tensors.
pub(crate) struct BurnLlama {
    config: LlamaConfig,
    architecture: &'static Architecture,
    device: Device,
    weights: ModelWeights<Tensor<2>>,
    /// `[context, hd/2]` tables of cos and sin of `position · base^(-2i/hd)`.
    rope_cos: Tensor<2>,
    rope_sin: Tensor<2>,
    linear_kernel: LinearKernel,
}

/// Keys and values of every block, `[KV, capacity, hd]` each, allocated once. Cloning is cheap
/// (tensor handles); the first write to a shared clone copies it, so clones are independent.
#[derive(Clone)]
pub(crate) struct BurnCache {
    /// `Option` only so a block's tensors can be moved out and updated in place (a cloned
    /// handle would force a copy).
    keys: Vec<Option<Tensor<3>>>,
    values: Vec<Option<Tensor<3>>>,
}

impl BurnCache {
    /// Bytes of its keys and values (f32, allocated whole).
    pub(crate) fn bytes(&self) -> u64 {
        let tensors = self.keys.iter().chain(&self.values).flatten();
        tensors.map(|t| t.dims().iter().product::<usize>() as u64 * 4).sum()
    }
}

impl BurnLlama {
    /// Dequantizes the weights of `file` to f32 and uploads them to `device`.
    pub(crate) fn load(
        file: &GgufFile,
        config: &LlamaConfig,
        architecture: &'static Architecture,
        device: &Device,
        linear_kernel: LinearKernel,
        progress: impl FnMut(LoadProgress),
    ) -> Result<Self, ModelError> {
        if linear_kernel == LinearKernel::Wgsl && !nucleus_kernels::supports_device(device) {
            return Err(ModelError::Device(format!("the WGSL linear kernel runs on wgpu devices, not {device:?}")));
        }
        let weights = weights::load(file, architecture, config, progress, |info| {
            let values = file.dequantize(&info.name)?;
            let (rows, cols) = info.matrix_shape();
            Ok(Tensor::<2>::from_data(TensorData::new(values, [rows, cols]), (device, DType::F32)))
        })?;
        let (rope_cos, rope_sin) = rope_tables(config, device);
        Ok(Self {
            config: config.clone(),
            architecture,
            device: device.clone(),
            weights,
            rope_cos,
            rope_sin,
            linear_kernel,
        })
    }

    pub(crate) fn linear_kernel(&self) -> LinearKernel {
        self.linear_kernel
    }

    pub(crate) fn new_cache(&self, capacity: usize) -> BurnCache {
        let shape = [self.config.head_count_kv, capacity, self.config.head_dim];
        let zeros = || Some(Tensor::<3>::zeros(shape, (&self.device, DType::F32)));
        BurnCache {
            keys: (0..self.config.block_count).map(|_| zeros()).collect(),
            values: (0..self.config.block_count).map(|_| zeros()).collect(),
        }
    }

    /// Runs `tokens` at positions `start..`, writes their keys and values into `cache`, and
    /// returns the logits `[1 or S, vocab]`. The caller has checked the tokens and the room.
    pub(crate) fn forward(
        &self,
        tokens: &[u32],
        cache: &mut BurnCache,
        start: usize,
        logits: Logits,
    ) -> Result<Tensor<2>, ModelError> {
        self.forward_keeping(tokens, cache, start, logits, None)
    }

    /// The logit lens of the last of `tokens`, run as [`Self::forward`] runs them: its residual
    /// stream after every block `[blocks, embedding]`, and the output norm and layer applied to
    /// each `[blocks, vocab]`.
    pub(crate) fn logit_lens(
        &self,
        tokens: &[u32],
        cache: &mut BurnCache,
        start: usize,
    ) -> Result<(Tensor<2>, Tensor<2>), ModelError> {
        let mut rows = Vec::with_capacity(self.weights.blocks.len());
        self.forward_keeping(tokens, cache, start, Logits::Last, Some(&mut rows))?;
        let hidden = Tensor::cat(rows, 0);
        let normed = self.norm(self.architecture.block.norm, hidden.clone(), &self.weights.output_norm);
        Ok((hidden, self.linear(normed, self.weights.output())?))
    }

    /// [`Self::forward`], keeping the last row's residual after each block in `lens`.
    fn forward_keeping(
        &self,
        tokens: &[u32],
        cache: &mut BurnCache,
        start: usize,
        logits: Logits,
        mut lens: Option<&mut Vec<Tensor<2>>>,
    ) -> Result<Tensor<2>, ModelError> {
        if cache.keys.len() != self.weights.blocks.len() {
            return Err(ModelError::Invalid("the cache was made for another model".into()));
        }
        let seq = tokens.len();
        let end = start + seq;
        let ids: Vec<i32> = tokens.iter().map(|&id| id as i32).collect();
        let ids = Tensor::<1, Int>::from_data(TensorData::new(ids, [seq]), &self.device);
        let mut x = self.weights.token_embedding.clone().select(0, ids);

        let cos = self.rope_cos.clone().slice(s![start..end, ..]).unsqueeze_dim::<3>(0);
        let sin = self.rope_sin.clone().slice(s![start..end, ..]).unsqueeze_dim::<3>(0);
        let mask = (seq > 1).then(|| self.causal_mask(start, seq));

        let spec = self.architecture.block;
        for (index, block) in self.weights.blocks.iter().enumerate() {
            let h = self.norm(spec.norm, x.clone(), &block.attention_norm);
            let attention = self.attention(h, block, index, cache, start, (&cos, &sin), mask.as_ref())?;
            x = x + attention;
            let h = self.norm(spec.norm, x.clone(), &block.feed_forward_norm);
            x = x + match spec.feed_forward {
                FeedForward::SwiGlu => {
                    let gate = silu(self.linear(h.clone(), &block.gate)?);
                    let up = self.linear(h, &block.up)?;
                    self.linear(gate * up, &block.down)?
                }
            };
            if let Some(rows) = lens.as_deref_mut() {
                rows.push(x.clone().slice(s![seq - 1..seq, ..]));
            }
        }

        if logits == Logits::Last && seq > 1 {
            x = x.slice(s![seq - 1..seq, ..]);
        }
        let x = self.norm(spec.norm, x, &self.weights.output_norm);
        self.linear(x, self.weights.output())
    }

    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        h: Tensor<2>,
        block: &BlockWeights<Tensor<2>>,
        index: usize,
        cache: &mut BurnCache,
        start: usize,
        (cos, sin): (&Tensor<3>, &Tensor<3>),
        mask: Option<&Tensor<3>>,
    ) -> Result<Tensor<2>, ModelError> {
        let c = &self.config;
        let (seq, end) = (h.dims()[0], start + h.dims()[0]);
        let (heads, kv_heads, hd, group) = (c.head_count, c.head_count_kv, c.head_dim, c.group_size());

        let to_heads = |t: Tensor<2>, n: usize| t.reshape([seq, n, hd]).swap_dims(0, 1);
        let rotate = |t: Tensor<3>| match self.architecture.block.rope {
            Rope::AdjacentPairs => rope(t, cos, sin),
        };
        let q = rotate(to_heads(self.linear(h.clone(), &block.query)?, heads));
        let k = rotate(to_heads(self.linear(h.clone(), &block.key)?, kv_heads));
        let v = to_heads(self.linear(h, &block.value)?, kv_heads);

        let keys = cache.keys[index].take().expect("cache present").slice_assign(s![.., start..end, ..], k);
        let values = cache.values[index].take().expect("cache present").slice_assign(s![.., start..end, ..], v);
        let k_all = keys.clone().slice(s![.., 0..end, ..]);
        let v_all = values.clone().slice(s![.., 0..end, ..]);
        cache.keys[index] = Some(keys);
        cache.values[index] = Some(values);

        // Query head h reads kv head h / G: group the G query heads of each kv head as rows.
        let q = q.reshape([kv_heads, group * seq, hd]);
        let mut scores = q.matmul(k_all.swap_dims(1, 2)).div_scalar((hd as f64).sqrt());
        if let Some(mask) = mask {
            scores = scores + mask.clone();
        }
        let out = softmax(scores, 2).matmul(v_all); // [KV, G·S, hd]
        let out = out.reshape([heads, seq, hd]).swap_dims(0, 1).reshape([seq, heads * hd]);
        self.linear(out, &block.attention_output)
    }

    /// `[1, G·S, T]`: 0 where row `(g, i)` (query position `start + i`) may see key `j`, -inf after.
    fn causal_mask(&self, start: usize, seq: usize) -> Tensor<3> {
        let total = start + seq;
        let group = self.config.group_size();
        let mut mask = vec![0f32; group * seq * total];
        for g in 0..group {
            for i in 0..seq {
                let row = &mut mask[(g * seq + i) * total..(g * seq + i + 1) * total];
                row[start + i + 1..].fill(f32::NEG_INFINITY);
            }
        }
        Tensor::from_data(TensorData::new(mask, [1, group * seq, total]), (&self.device, DType::F32))
    }

    fn norm(&self, norm: Norm, x: Tensor<2>, weight: &Tensor<2>) -> Tensor<2> {
        match norm {
            Norm::Rms => {
                let inv_rms = x.clone().square().mean_dim(1).add_scalar(self.config.rms_norm_eps).sqrt().recip();
                x * inv_rms * weight.clone()
            }
        }
    }

    /// `x Wᵀ` for `x: [S, in]` and a GGUF matrix `W: [out, in]`, with the chosen kernel.
    fn linear(&self, x: Tensor<2>, weight: &Tensor<2>) -> Result<Tensor<2>, ModelError> {
        match self.linear_kernel {
            LinearKernel::BurnMatmul => Ok(x.matmul(weight.clone().transpose())),
            LinearKernel::Wgsl => Ok(nucleus_kernels::linear(x, weight.clone(), WeightLayout::OutputsByInputs)?),
        }
    }
}

/// Rotates adjacent pairs `(x[2i], x[2i+1])` of each head by `position · θ_i`, GGUF's layout.
/// `x: [N, S, hd]`, `cos`/`sin`: `[1, S, hd/2]`.
fn rope(x: Tensor<3>, cos: &Tensor<3>, sin: &Tensor<3>) -> Tensor<3> {
    let [n, seq, hd] = x.dims();
    let pairs = x.reshape([n, seq, hd / 2, 2]);
    let even = pairs.clone().slice(s![.., .., .., 0..1]).reshape([n, seq, hd / 2]);
    let odd = pairs.slice(s![.., .., .., 1..2]).reshape([n, seq, hd / 2]);
    let rotated_even = even.clone() * cos.clone() - odd.clone() * sin.clone();
    let rotated_odd = even * sin.clone() + odd * cos.clone();
    Tensor::stack::<4>(vec![rotated_even, rotated_odd], 3).reshape([n, seq, hd])
}

fn rope_tables(config: &LlamaConfig, device: &Device) -> (Tensor<2>, Tensor<2>) {
    let half = config.rope_dims / 2;
    let positions = config.context_length;
    let (cos, sin): (Vec<f32>, Vec<f32>) = crate::rope_angles(config).into_iter().unzip();
    let upload = |v: Vec<f32>| Tensor::from_data(TensorData::new(v, [positions, half]), (device, DType::F32));
    (upload(cos), upload(sin))
}
