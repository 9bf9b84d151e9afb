//! A Llama-family language model on Burn, built from the bytes of a GGUF file.
//!
//! The crate does no I/O and never blocks on the device: [`Llama::forward`] only records work and
//! returns the logits as a tensor; reading them is the caller's business ([`read_logits`], async, so
//! the same code runs in the browser, where synchronous reads panic). The backend is chosen by the
//! [`Device`] the model is loaded on (Burn's wgpu backend, or its `flex` CPU backend).
//!
//! Computation, per block, for `S` new tokens at positions `p..p+S` (`d` embedding, `H` heads,
//! `KV` key/value heads, `G = H / KV`, `hd` head dimension, `T = p + S`):
//!
//! ```text
//! h = rms_norm(x) * attn_norm                     x: [S, d]
//! q = rope(h Wqᵀ) [H, S, hd]; k = rope(h Wkᵀ), v = h Wvᵀ  [KV, S, hd]   (RoPE on adjacent pairs)
//! cache[p..T] = k, v;  K, V = cache[0..T]          [KV, T, hd]
//! a = softmax(q Kᵀ / √hd + causal) V             q grouped as [KV, G·S, hd]: head h uses kv head h / G
//! x = x + a Woᵀ
//! x = x + (silu(h' Wgᵀ) ⊙ h' Wuᵀ) Wdᵀ,  h' = rms_norm(x) * ffn_norm
//! ```
//! then `logits = rms_norm(x) * output_norm · Eᵀ` (`E` is `output.weight`, or the token
//! embedding when the file ties them).

mod config;

use burn::tensor::activation::{silu, softmax};
use burn::tensor::{DType, Device, Int, Tensor, TensorData, s};
use nucleus_gguf::{GgufError, GgufFile};
use nucleus_kernels::{KernelError, WeightLayout};

pub use config::{LlamaConfig, SUPPORTED_ARCHITECTURES};
pub use nucleus_kernels::LinearKernel;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("unsupported architecture '{0}' (supported: {supported})", supported = SUPPORTED_ARCHITECTURES.join(", "))]
    UnsupportedArchitecture(String),
    #[error("unsupported model feature: {0}")]
    Unsupported(String),
    #[error("invalid model: {0}")]
    Invalid(String),
    #[error("tensor '{name}' has shape {found:?}, expected {expected:?}")]
    WrongShape { name: String, expected: Vec<u64>, found: Vec<u64> },
    #[error("the sequence needs {needed} positions but the context holds {capacity}")]
    ContextOverflow { needed: usize, capacity: usize },
    #[error("token id {id} is outside the vocabulary of {vocab_size}")]
    TokenOutOfRange { id: u32, vocab_size: usize },
    #[error("no tokens to run")]
    EmptyInput,
    #[error("device: {0}")]
    Device(String),
    #[error(transparent)]
    Kernel(#[from] KernelError),
}

/// Which positions of a forward pass produce logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// Only the last position: `[1, vocab]` (prefill and decode).
    Last,
    /// Every position: `[S, vocab]` (verification of drafted tokens, tests).
    All,
}

struct Block {
    attn_norm: Tensor<2>,
    wq: Tensor<2>,
    wk: Tensor<2>,
    wv: Tensor<2>,
    wo: Tensor<2>,
    ffn_norm: Tensor<2>,
    w_gate: Tensor<2>,
    w_up: Tensor<2>,
    w_down: Tensor<2>,
}

/// A loaded model: f32 weights on one device.
pub struct Llama {
    config: LlamaConfig,
    device: Device,
    token_embedding: Tensor<2>,
    blocks: Vec<Block>,
    output_norm: Tensor<2>,
    /// `[vocab, d]`; the token embedding itself when the file has no `output.weight`.
    output: Tensor<2>,
    tied_output: bool,
    /// `[context, hd/2]` tables of cos and sin of `position · base^(-2i/hd)`.
    rope_cos: Tensor<2>,
    rope_sin: Tensor<2>,
    linear_kernel: LinearKernel,
}

/// Keys and values of every block for the positions seen so far, allocated once.
///
/// Cloning is cheap (tensor handles); the first write to a shared clone copies it, so clones
/// are independent (beam search keeps one per beam).
#[derive(Clone)]
pub struct KvCache {
    /// Per block, `[KV, capacity, hd]`. `Option` only so a block's tensors can be moved out and
    /// updated in place (a cloned handle would force a copy).
    keys: Vec<Option<Tensor<3>>>,
    values: Vec<Option<Tensor<3>>>,
    len: usize,
    capacity: usize,
}

impl KvCache {
    /// Positions filled.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets every position (the memory stays allocated).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Forgets positions from `len` on, so generation can go back (a rejected draft, a shared prefix).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

/// Progress of [`Llama::load`]: tensors uploaded so far, and their bytes in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadProgress {
    pub tensors_done: usize,
    pub tensors_total: usize,
    pub bytes_done: u64,
    pub bytes_total: u64,
}

impl Llama {
    /// Dequantizes the weights of `file` to f32 and uploads them to `device`.
    pub fn load(file: &GgufFile, device: &Device) -> Result<Self, ModelError> {
        Self::load_with_progress(file, device, |_| {})
    }

    /// As [`Llama::load`], calling `progress` after each tensor.
    pub fn load_with_progress(
        file: &GgufFile,
        device: &Device,
        mut progress: impl FnMut(LoadProgress),
    ) -> Result<Self, ModelError> {
        let config = LlamaConfig::from_gguf(file)?;
        let tied_output = file.tensor("output.weight").is_none();
        let d = config.embedding_length as u64;
        let (kv, ffn, vocab) = (config.kv_dim() as u64, config.feed_forward_length as u64, config.vocab_size as u64);

        let mut names: Vec<(String, Vec<u64>)> = vec![("token_embd.weight".into(), vec![d, vocab])];
        for i in 0..config.block_count {
            let b = |n: &str| format!("blk.{i}.{n}");
            names.extend([
                (b("attn_norm.weight"), vec![d]),
                (b("attn_q.weight"), vec![d, d]),
                (b("attn_k.weight"), vec![d, kv]),
                (b("attn_v.weight"), vec![d, kv]),
                (b("attn_output.weight"), vec![d, d]),
                (b("ffn_norm.weight"), vec![d]),
                (b("ffn_gate.weight"), vec![d, ffn]),
                (b("ffn_up.weight"), vec![d, ffn]),
                (b("ffn_down.weight"), vec![ffn, d]),
            ]);
        }
        names.push(("output_norm.weight".into(), vec![d]));
        if !tied_output {
            names.push(("output.weight".into(), vec![d, vocab]));
        }
        let mut status = LoadProgress {
            tensors_done: 0,
            tensors_total: names.len(),
            bytes_done: 0,
            bytes_total: names.iter().filter_map(|(n, _)| file.tensor(n)).map(|t| t.byte_len()).sum(),
        };

        let mut uploaded = names.into_iter().map(|(name, expected)| {
            let info = file.tensor(&name).ok_or_else(|| GgufError::MissingTensor(name.clone()))?;
            if info.dims != expected {
                return Err(ModelError::WrongShape { name, expected, found: info.dims.clone() });
            }
            let values = file.dequantize(&name)?;
            let (rows, cols) = info.matrix_shape();
            let tensor = Tensor::<2>::from_data(TensorData::new(values, [rows, cols]), (device, DType::F32));
            status.tensors_done += 1;
            status.bytes_done += info.byte_len();
            progress(status);
            Ok(tensor)
        });
        let mut next = || uploaded.next().expect("one tensor per name");

        let token_embedding = next()?;
        let mut blocks = Vec::with_capacity(config.block_count);
        for _ in 0..config.block_count {
            blocks.push(Block {
                attn_norm: next()?,
                wq: next()?,
                wk: next()?,
                wv: next()?,
                wo: next()?,
                ffn_norm: next()?,
                w_gate: next()?,
                w_up: next()?,
                w_down: next()?,
            });
        }
        let output_norm = next()?;
        let output = if tied_output { token_embedding.clone() } else { next()? };
        let (rope_cos, rope_sin) = rope_tables(&config, device);
        Ok(Self {
            config,
            device: device.clone(),
            token_embedding,
            blocks,
            output_norm,
            output,
            tied_output,
            rope_cos,
            rope_sin,
            linear_kernel: LinearKernel::BurnMatmul,
        })
    }

    /// The kernel of the linear layers ([`LinearKernel::BurnMatmul`] until set).
    pub fn linear_kernel(&self) -> LinearKernel {
        self.linear_kernel
    }

    /// Chooses the kernel of the linear layers; [`LinearKernel::Wgsl`] needs a wgpu device.
    pub fn set_linear_kernel(&mut self, kernel: LinearKernel) -> Result<(), ModelError> {
        if kernel == LinearKernel::Wgsl && !nucleus_kernels::supports_device(&self.device) {
            return Err(ModelError::Device(format!("the WGSL linear kernel runs on wgpu devices, not {:?}", self.device)));
        }
        self.linear_kernel = kernel;
        Ok(())
    }

    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Whether the output layer is the token embedding.
    pub fn tied_output(&self) -> bool {
        self.tied_output
    }

    /// A cache for up to `capacity` positions (at most the model's context length).
    pub fn new_cache(&self, capacity: usize) -> Result<KvCache, ModelError> {
        if capacity == 0 || capacity > self.config.context_length {
            return Err(ModelError::ContextOverflow { needed: capacity, capacity: self.config.context_length });
        }
        let shape = [self.config.head_count_kv, capacity, self.config.head_dim];
        let zeros = || Some(Tensor::<3>::zeros(shape, (&self.device, DType::F32)));
        Ok(KvCache {
            keys: (0..self.config.block_count).map(|_| zeros()).collect(),
            values: (0..self.config.block_count).map(|_| zeros()).collect(),
            len: 0,
            capacity,
        })
    }

    /// Runs `tokens` at the positions after those already in `cache`, appends their keys and
    /// values, and returns the logits `[1 or S, vocab]` (see [`Logits`]). Prefill is one call with
    /// the whole prompt; decode is one call per token.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache, logits: Logits) -> Result<Tensor<2>, ModelError> {
        let seq = tokens.len();
        if seq == 0 {
            return Err(ModelError::EmptyInput);
        }
        if cache.keys.len() != self.blocks.len() {
            return Err(ModelError::Invalid("the cache was made for another model".into()));
        }
        let start = cache.len;
        let end = start + seq;
        if end > cache.capacity {
            return Err(ModelError::ContextOverflow { needed: end, capacity: cache.capacity });
        }
        if let Some(&id) = tokens.iter().find(|&&id| id as usize >= self.config.vocab_size) {
            return Err(ModelError::TokenOutOfRange { id, vocab_size: self.config.vocab_size });
        }

        let ids: Vec<i32> = tokens.iter().map(|&id| id as i32).collect();
        let ids = Tensor::<1, Int>::from_data(TensorData::new(ids, [seq]), &self.device);
        let mut x = self.token_embedding.clone().select(0, ids);

        let cos = self.rope_cos.clone().slice(s![start..end, ..]).unsqueeze_dim::<3>(0);
        let sin = self.rope_sin.clone().slice(s![start..end, ..]).unsqueeze_dim::<3>(0);
        let mask = (seq > 1).then(|| self.causal_mask(start, seq));

        for (index, block) in self.blocks.iter().enumerate() {
            let h = self.rms_norm(x.clone(), &block.attn_norm);
            let attention = self.attention(h, block, index, cache, start, (&cos, &sin), mask.as_ref())?;
            x = x + attention;
            let h = self.rms_norm(x.clone(), &block.ffn_norm);
            let gate = silu(self.linear(h.clone(), &block.w_gate)?);
            let up = self.linear(h, &block.w_up)?;
            x = x + self.linear(gate * up, &block.w_down)?;
        }
        cache.len = end;

        if logits == Logits::Last && seq > 1 {
            x = x.slice(s![seq - 1..seq, ..]);
        }
        let x = self.rms_norm(x, &self.output_norm);
        self.linear(x, &self.output)
    }

    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        h: Tensor<2>,
        block: &Block,
        index: usize,
        cache: &mut KvCache,
        start: usize,
        (cos, sin): (&Tensor<3>, &Tensor<3>),
        mask: Option<&Tensor<3>>,
    ) -> Result<Tensor<2>, ModelError> {
        let c = &self.config;
        let (seq, end) = (h.dims()[0], start + h.dims()[0]);
        let (heads, kv_heads, hd, group) = (c.head_count, c.head_count_kv, c.head_dim, c.group_size());

        let to_heads = |t: Tensor<2>, n: usize| t.reshape([seq, n, hd]).swap_dims(0, 1);
        let q = rope(to_heads(self.linear(h.clone(), &block.wq)?, heads), cos, sin);
        let k = rope(to_heads(self.linear(h.clone(), &block.wk)?, kv_heads), cos, sin);
        let v = to_heads(self.linear(h, &block.wv)?, kv_heads);

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
        self.linear(out, &block.wo)
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

    fn rms_norm(&self, x: Tensor<2>, weight: &Tensor<2>) -> Tensor<2> {
        let inv_rms = x.clone().square().mean_dim(1).add_scalar(self.config.rms_norm_eps).sqrt().recip();
        x * inv_rms * weight.clone()
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
    let mut cos = Vec::with_capacity(positions * half);
    let mut sin = Vec::with_capacity(positions * half);
    for position in 0..positions {
        for i in 0..half {
            let theta = config.rope_freq_base.powf(-2.0 * i as f64 / config.rope_dims as f64);
            let angle = position as f64 * theta;
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    let upload = |v: Vec<f32>| Tensor::from_data(TensorData::new(v, [positions, half]), (device, DType::F32));
    (upload(cos), upload(sin))
}

/// Reads a logits tensor back as rows of f32. Async: the browser can only read asynchronously.
pub async fn read_logits(logits: Tensor<2>) -> Result<Vec<Vec<f32>>, ModelError> {
    let [rows, cols] = logits.dims();
    let data = logits.into_data_async().await.map_err(|e| ModelError::Device(format!("{e:?}")))?;
    let values = data.as_slice::<f32>().map_err(|e| ModelError::Device(format!("{e:?}")))?;
    Ok((0..rows).map(|r| values[r * cols..(r + 1) * cols].to_vec()).collect())
}
