//! The forward pass as Burn tensor operations over f32 weights: on any Burn device (the CPU
//! backend, and wgpu with `Path::BurnOps`). It is the reference the fused path is checked
//! against, and the path of devices the fused kernels cannot run on.
//!
//! Per block, for `S` new tokens at positions `p..p+S` (`T = p + S`), with the family's variants
//! in brackets ([`BlockSpec`](crate::BlockSpec)):
//!
//! ```text
//! h = rms_norm(x) * attn_norm                             x: [S, d]
//! q = h Wqᵀ [+ bq], k = h Wkᵀ [+ bk], v = h Wvᵀ [+ bv]     as heads [H, S, hd], [KV, S, hd]
//! [q = rms_norm(q) * q_norm, k = rms_norm(k) * k_norm]    per head
//! q, k = rope(q), rope(k)                                 adjacent pairs or halves, the block's base
//! cache[p..T] = k, v;  K, V = cache[lo..T]                lo: the first key a local block's window keeps
//! a = softmax(q Kᵀ / √hd + mask) V                       q grouped as [KV, G·S, hd]: head h uses kv head h / G
//! x = x + [rms_norm](a Woᵀ) [* post_attn_norm]
//! x = x + [rms_norm](down(act(h' Wgᵀ) ⊙ h' Wuᵀ)) [* post_ffw_norm],  h' = rms_norm(x) * ffn_norm
//! ```
//! with `x` starting as the token embedding [times √d], and `logits = rms_norm(x) * output_norm · Eᵀ`.
//!
//! The vocabulary-sized matrices (the token embedding, the output layer) are held in row ranges
//! that each fit one storage binding of the device (`weights::vocabulary_parts`): on lavapipe,
//! whose bindings hold 128 MiB, Gemma 3's f32 embedding (640 MiB) is five tensors.

use burn::tensor::activation::{silu, softmax};
use burn::tensor::{DType, Device, Int, Tensor, TensorData, s};
use nucleus_gguf::{GgufFile, TensorInfo};
use nucleus_kernels::{LinearKernel, WeightLayout};

use crate::architecture::{Architecture, FeedForward, Norm, Role, Rope};
use crate::rope::RopeTables;
use crate::weights::{BlockWeights, ModelWeights};
use crate::{LoadProgress, Logits, ModelConfig, ModelError, weights};

/// A weight as f32 tensors `[rows, cols]`: one, or consecutive row ranges of it.
pub(crate) struct BurnWeight {
    parts: Vec<Tensor<2>>,
}

impl BurnWeight {
    /// The weight whole (every weight but the vocabulary-sized ones is one part).
    fn whole(&self) -> &Tensor<2> {
        &self.parts[0]
    }

    fn bytes(&self) -> u64 {
        self.parts.iter().map(|p| p.dims().iter().product::<usize>() as u64 * 4).sum()
    }
}

/// A model as f32 Burn tensors.
pub(crate) struct BurnModel {
    config: ModelConfig,
    architecture: &'static Architecture,
    device: Device,
    weights: ModelWeights<BurnWeight>,
    /// Per distinct RoPE base, `[context, hd/2]` tables of cos and sin.
    rope: Vec<(Tensor<2>, Tensor<2>)>,
    rope_of_block: Vec<usize>,
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

impl BurnModel {
    /// Dequantizes the weights of `file` to f32 and uploads them to `device`; `max_binding`: the
    /// most bytes one tensor may take (a storage binding of a wgpu device; `None`: no limit).
    pub(crate) fn load(
        file: &GgufFile,
        config: &ModelConfig,
        device: &Device,
        max_binding: Option<u64>,
        linear_kernel: LinearKernel,
        progress: impl FnMut(LoadProgress),
    ) -> Result<Self, ModelError> {
        if linear_kernel == LinearKernel::Wgsl && !nucleus_kernels::supports_device(device) {
            return Err(ModelError::Device(format!("the WGSL linear kernel runs on wgpu devices, not {device:?}")));
        }
        if config.delta_net.is_some() || config.rope_dims != config.head_dim {
            return Err(ModelError::Unsupported(format!(
                "the Burn-op path does not compute {}'s Gated DeltaNet blocks and partial RoPE: the CPU engine and the fused path run it",
                config.architecture
            )));
        }
        let weights =
            weights::load(file, config, progress, |role, info| upload(file, role, info, device, max_binding))?;
        let tables = RopeTables::new(file, config)?;
        let half = config.rope_dims / 2;
        let rope = tables
            .every_table(0..config.context_length)
            .into_iter()
            .map(|table| {
                let (cos, sin): (Vec<f32>, Vec<f32>) = table.into_iter().unzip();
                let upload = |v: Vec<f32>| {
                    Tensor::from_data(TensorData::new(v, [config.context_length, half]), (device, DType::F32))
                };
                (upload(cos), upload(sin))
            })
            .collect();
        Ok(Self {
            config: config.clone(),
            architecture: config.architecture(),
            device: device.clone(),
            weights,
            rope,
            rope_of_block: tables.block_table,
            linear_kernel,
        })
    }

    pub(crate) fn linear_kernel(&self) -> LinearKernel {
        self.linear_kernel
    }

    /// Bytes of the weights on the device.
    pub(crate) fn weight_bytes(&self) -> u64 {
        self.weights.all().map(BurnWeight::bytes).sum()
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
        self.forward_keeping(tokens, cache, start, logits, None, None)
    }

    /// Runs `tokens` as [`Self::forward`] does and returns block `block`'s attention weights
    /// after the softmax `[kv_heads, group · S, T − lo]` (row `(kv, g·S + i)`: head `kv·G + g`,
    /// query `start + i`; column `j`: key `lo + j`) with `lo`.
    pub(crate) fn attention_weights(
        &self,
        tokens: &[u32],
        cache: &mut BurnCache,
        start: usize,
        block: usize,
    ) -> Result<(Tensor<3>, usize), ModelError> {
        let mut kept = None;
        self.forward_keeping(tokens, cache, start, Logits::Last, None, Some((block, &mut kept)))?;
        kept.ok_or_else(|| ModelError::Invalid(format!("block {block} does not attend")))
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
        self.forward_keeping(tokens, cache, start, Logits::Last, Some(&mut rows), None)?;
        let hidden = Tensor::cat(rows, 0);
        let normed = self.norm(hidden.clone(), &self.weights.output_norm);
        Ok((hidden, self.linear(normed, self.weights.output())?))
    }

    /// [`Self::forward`], keeping the last row's residual after each block in `lens`, and with
    /// `weights` (a block, a place) that block's attention weights and their first key.
    fn forward_keeping(
        &self,
        tokens: &[u32],
        cache: &mut BurnCache,
        start: usize,
        logits: Logits,
        mut lens: Option<&mut Vec<Tensor<2>>>,
        mut weights: Option<(usize, &mut Option<(Tensor<3>, usize)>)>,
    ) -> Result<Tensor<2>, ModelError> {
        if cache.keys.len() != self.weights.blocks.len() {
            return Err(ModelError::Invalid("the cache was made for another model".into()));
        }
        let seq = tokens.len();
        let mut x = self.embed(tokens);
        let scale = self.config.embedding_scale();
        if scale != 1.0 {
            x = x.mul_scalar(scale);
        }

        let spec = self.architecture.block;
        for (index, block) in self.weights.blocks.iter().enumerate() {
            let h = self.norm(x.clone(), &block.attention_norm);
            let keep = weights.as_mut().filter(|(block, _)| *block == index).map(|(_, kept)| &mut **kept);
            let attention = self.attention(h, block, index, cache, start, keep)?;
            x = x + self.post_norm(attention, block.post_attention_norm.as_ref());
            let h = self.norm(x.clone(), &block.feed_forward_norm);
            let gate = self.linear(h.clone(), &block.gate)?;
            let gate = match spec.feed_forward {
                FeedForward::SwiGlu => silu(gate),
                FeedForward::GeGluTanh => gelu_tanh(gate),
            };
            let up = self.linear(h, &block.up)?;
            let down = self.linear(gate * up, &block.down)?;
            x = x + self.post_norm(down, block.post_feed_forward_norm.as_ref());
            if let Some(rows) = lens.as_deref_mut() {
                rows.push(x.clone().slice(s![seq - 1..seq, ..]));
            }
        }

        if logits == Logits::Last && seq > 1 {
            x = x.slice(s![seq - 1..seq, ..]);
        }
        let x = self.norm(x, &self.weights.output_norm);
        self.linear(x, self.weights.output())
    }

    /// Rows `tokens` of the token embedding `[S, d]`, from whichever part holds each.
    fn embed(&self, tokens: &[u32]) -> Tensor<2> {
        let table = &self.weights.token_embedding;
        let seq = tokens.len();
        let mut begin = 0;
        let mut rows: Option<Tensor<2>> = None;
        for part in &table.parts {
            let len = part.dims()[0];
            let range = begin..begin + len;
            begin += len;
            if !tokens.iter().any(|&id| range.contains(&(id as usize))) {
                continue;
            }
            // Every token reads a row of this part (clamped); those of other parts are zeroed.
            let local: Vec<i32> = tokens
                .iter()
                .map(|&id| (id as usize).clamp(range.start, range.end - 1) - range.start)
                .map(|i| i as i32)
                .collect();
            let ids = Tensor::<1, Int>::from_data(TensorData::new(local, [seq]), &self.device);
            let mut gathered = part.clone().select(0, ids);
            if table.parts.len() > 1 {
                let keep: Vec<f32> =
                    tokens.iter().map(|&id| f32::from(u8::from(range.contains(&(id as usize))))).collect();
                gathered = gathered * Tensor::from_data(TensorData::new(keep, [seq, 1]), (&self.device, DType::F32));
            }
            rows = Some(match rows {
                None => gathered,
                Some(sum) => sum + gathered,
            });
        }
        rows.expect("the caller checked every id against the vocabulary")
    }

    fn attention(
        &self,
        h: Tensor<2>,
        block: &BlockWeights<BurnWeight>,
        index: usize,
        cache: &mut BurnCache,
        start: usize,
        keep: Option<&mut Option<(Tensor<3>, usize)>>,
    ) -> Result<Tensor<2>, ModelError> {
        let c = &self.config;
        let spec = self.architecture.block;
        let (seq, end) = (h.dims()[0], start + h.dims()[0]);
        let (heads, kv_heads, hd, group) = (c.head_count, c.head_count_kv, c.head_dim, c.group_size());
        let attention = c.block_attention(index);
        let (cos, sin) = &self.rope[self.rope_of_block[index]];
        let cos = cos.clone().slice(s![start..end, ..]).unsqueeze_dim::<3>(0);
        let sin = sin.clone().slice(s![start..end, ..]).unsqueeze_dim::<3>(0);

        let project = |weight: &BurnWeight, bias: Option<&BurnWeight>, n: usize| -> Result<Tensor<3>, ModelError> {
            let mut y = self.linear(h.clone(), weight)?;
            if let Some(bias) = bias {
                y = y + bias.whole().clone();
            }
            Ok(y.reshape([seq, n, hd]).swap_dims(0, 1))
        };
        let head_norm = |t: Tensor<3>, weight: Option<&BurnWeight>| match weight {
            Some(weight) => rms_norm(t, weight.whole().clone().unsqueeze_dim::<3>(0), c.rms_norm_eps),
            None => t,
        };
        let rotate = |t: Tensor<3>| rope(spec.rope, t, &cos, &sin);
        let block = block.attention().expect("load refuses models with blocks that do not attend");
        let q = rotate(head_norm(project(&block.query, block.query_bias.as_ref(), heads)?, block.query_norm.as_ref()));
        let k = rotate(head_norm(project(&block.key, block.key_bias.as_ref(), kv_heads)?, block.key_norm.as_ref()));
        let v = project(&block.value, block.value_bias.as_ref(), kv_heads)?;

        let keys = cache.keys[index].take().expect("cache present").slice_assign(s![.., start..end, ..], k);
        let values = cache.values[index].take().expect("cache present").slice_assign(s![.., start..end, ..], v);
        // The first key any of the new queries sees: a local block's window drops the older ones.
        let lo = attention.window.map_or(0, |window| (start + 1).saturating_sub(window));
        let k_all = keys.clone().slice(s![.., lo..end, ..]);
        let v_all = values.clone().slice(s![.., lo..end, ..]);
        cache.keys[index] = Some(keys);
        cache.values[index] = Some(values);

        // Query head h reads kv head h / G: group the G query heads of each kv head as rows.
        let q = q.reshape([kv_heads, group * seq, hd]);
        let mut scores = q.matmul(k_all.swap_dims(1, 2)).div_scalar((hd as f64).sqrt());
        if let Some(mask) = self.mask(start, seq, lo, attention.window) {
            scores = scores + mask;
        }
        let weights = softmax(scores, 2);
        if let Some(keep) = keep {
            *keep = Some((weights.clone(), lo));
        }
        let out = weights.matmul(v_all); // [KV, G·S, hd]
        let out = out.reshape([heads, seq, hd]).swap_dims(0, 1).reshape([seq, heads * hd]);
        self.linear(out, &block.output)
    }

    /// `[1, G·S, T − lo]`: 0 where row `(g, i)` (query position `start + i`) may see key `lo + j`,
    /// `-inf` where the key comes after it or, with a window, is `window` or more positions
    /// before it. `None` when every row sees every key.
    fn mask(&self, start: usize, seq: usize, lo: usize, window: Option<usize>) -> Option<Tensor<3>> {
        let total = start + seq - lo;
        let hidden = |i: usize, key: usize| key > start + i || window.is_some_and(|w| start + i - key >= w);
        if !(0..seq).any(|i| (lo..start + seq).any(|key| hidden(i, key))) {
            return None;
        }
        let group = self.config.group_size();
        let mut mask = vec![0f32; group * seq * total];
        for g in 0..group {
            for i in 0..seq {
                let row = &mut mask[(g * seq + i) * total..(g * seq + i + 1) * total];
                for (j, value) in row.iter_mut().enumerate() {
                    if hidden(i, lo + j) {
                        *value = f32::NEG_INFINITY;
                    }
                }
            }
        }
        Some(Tensor::from_data(TensorData::new(mask, [1, group * seq, total]), (&self.device, DType::F32)))
    }

    fn norm(&self, x: Tensor<2>, weight: &BurnWeight) -> Tensor<2> {
        match self.architecture.block.norm {
            Norm::Rms => rms_norm(x, weight.whole().clone(), self.config.rms_norm_eps),
        }
    }

    /// A sub-layer's output as it joins the residual stream: normalised when the family has
    /// norms after its sub-layers.
    fn post_norm(&self, y: Tensor<2>, weight: Option<&BurnWeight>) -> Tensor<2> {
        match weight {
            Some(weight) => self.norm(y, weight),
            None => y,
        }
    }

    /// `x Wᵀ` for `x: [S, in]` and a GGUF matrix `W: [out, in]` (its parts' outputs side by side),
    /// with the chosen kernel.
    fn linear(&self, x: Tensor<2>, weight: &BurnWeight) -> Result<Tensor<2>, ModelError> {
        let one = |w: &Tensor<2>| -> Result<Tensor<2>, ModelError> {
            match self.linear_kernel {
                LinearKernel::BurnMatmul => Ok(x.clone().matmul(w.clone().transpose())),
                LinearKernel::Wgsl => Ok(nucleus_kernels::linear(x.clone(), w.clone(), WeightLayout::OutputsByInputs)?),
            }
        };
        match weight.parts.as_slice() {
            [whole] => one(whole),
            parts => Ok(Tensor::cat(parts.iter().map(one).collect::<Result<Vec<_>, _>>()?, 1)),
        }
    }
}

/// Dequantizes one tensor and uploads it: in row ranges that each fit `max_binding` for the
/// vocabulary-sized matrices, whole otherwise.
fn upload(
    file: &GgufFile,
    role: Role,
    info: &TensorInfo,
    device: &Device,
    max_binding: Option<u64>,
) -> Result<BurnWeight, ModelError> {
    let values = file.dequantize(&info.name)?;
    let (rows, cols) = info.matrix_shape();
    let row_bytes = cols as u64 * 4;
    let ranges = match (role, max_binding) {
        (Role::TokenEmbedding | Role::Output, Some(limit)) => weights::vocabulary_parts(rows, row_bytes, limit)?,
        _ => std::iter::once(0..rows).collect(),
    };
    let parts = ranges
        .into_iter()
        .map(|range| {
            let data = values[range.start * cols..range.end * cols].to_vec();
            Tensor::<2>::from_data(TensorData::new(data, [range.len(), cols]), (device, DType::F32))
        })
        .collect();
    Ok(BurnWeight { parts })
}

/// `x / sqrt(mean(x²) + eps) · γ` over the last dimension; `weight` broadcasts over the others.
fn rms_norm<const D: usize>(x: Tensor<D>, weight: Tensor<D>, eps: f64) -> Tensor<D> {
    let inv_rms = x.clone().square().mean_dim(D - 1).add_scalar(eps).sqrt().recip();
    x * inv_rms * weight
}

/// GELU in its tanh form: `0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³)))`.
fn gelu_tanh(g: Tensor<2>) -> Tensor<2> {
    let inner =
        (g.clone() + g.clone().powi_scalar(3).mul_scalar(0.044715)).mul_scalar((2.0 / std::f64::consts::PI).sqrt());
    g.mul_scalar(0.5) * inner.tanh().add_scalar(1.0)
}

/// Rotates each head's pairs (adjacent, or the two halves) by `position · θ_i`.
/// `x: [N, S, hd]`, `cos`/`sin`: `[1, S, hd/2]`.
fn rope(kind: Rope, x: Tensor<3>, cos: &Tensor<3>, sin: &Tensor<3>) -> Tensor<3> {
    let [n, seq, hd] = x.dims();
    let (first, second) = match kind {
        Rope::AdjacentPairs => {
            let pairs = x.reshape([n, seq, hd / 2, 2]);
            (
                pairs.clone().slice(s![.., .., .., 0..1]).reshape([n, seq, hd / 2]),
                pairs.slice(s![.., .., .., 1..2]).reshape([n, seq, hd / 2]),
            )
        }
        Rope::Halves => (x.clone().slice(s![.., .., 0..hd / 2]), x.slice(s![.., .., hd / 2..hd])),
    };
    let rotated_first = first.clone() * cos.clone() - second.clone() * sin.clone();
    let rotated_second = first * sin.clone() + second * cos.clone();
    match kind {
        Rope::AdjacentPairs => Tensor::stack::<4>(vec![rotated_first, rotated_second], 3).reshape([n, seq, hd]),
        Rope::Halves => Tensor::cat(vec![rotated_first, rotated_second], 2),
    }
}
