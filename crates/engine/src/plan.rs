//! What loading a model will take, from its header alone: the context it will run, the path it
//! will take, the memory in the process (the browser's wasm memory) and on the GPU. The browser
//! asks with a download's first bytes, before the rest arrives; every load checks the same plan
//! before anything is uploaded: one owner for "does it fit".

use nucleus_gguf::GgufHeader;
use nucleus_model::{HostPlan, ModelConfig, ModelDevice, ModelError, Path};
#[cfg(feature = "gpu")]
use nucleus_model::{MemoryLimits, MemoryPlan, streamed_staging_bytes};
use nucleus_tokenizer::Tokenizer;
use serde::Serialize;

use crate::{EngineError, LoadOptions};

/// What a load will take (camelCase in JSON, as the JS API reads it).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadPlan {
    pub file_bytes: u64,
    /// Positions it will run (asked, or the trained context).
    pub context_length: usize,
    pub trained_context_length: usize,
    /// The path it will take (`cpu`, `fused`, `burn`).
    pub path: &'static str,
    /// Memory in the process (the browser's wasm memory): everything on the CPU engine (the
    /// file, its matrices read in place); on the fused path in the browser the header and the
    /// largest tensor it takes whole (the file streams to the GPU, most weights piece by piece),
    /// natively the file's mapped copy.
    pub host_bytes: u64,
    /// Memory on the GPU (the fused path's buffers; 0 on the CPU engine, not planned on the
    /// Burn-op path).
    pub device_bytes: u64,
    /// The KV cache at the whole context, and the recurrent state (the same on every path).
    pub kv_cache_bytes: u64,
    pub state_bytes: u64,
}

/// The limit on the process's memory a plan is checked against, and its name in an error
/// ("this browser's WebAssembly memory").
#[derive(Debug, Clone, Copy)]
pub struct HostLimit<'a> {
    pub bytes: u64,
    pub name: &'a str,
}

/// The context a load runs: `options.context_length` checked against the trained one.
pub(crate) fn context_length(trained: &ModelConfig, options: &LoadOptions) -> Result<usize, EngineError> {
    match options.context_length {
        None => Ok(trained.context_length),
        Some(n) if (1..=trained.context_length).contains(&n) => Ok(n),
        Some(n) => Err(EngineError::bad_option("context_length", format!("1..={}", trained.context_length), n)),
    }
}

/// The plan of loading `header` on `device` as `options` ask, refused as the load would be
/// (an unsupported architecture or tokenizer, a context beyond the trained one, a buffer the GPU
/// cannot hold, more than `memory_budget`) and, with `host_limit`, when the process's memory
/// would not hold it. Where the CPU engine's memory would not hold the trained context and no
/// context was asked for, the plan is for the most positions that fit (Qwen3.5's 262,144
/// positions of KV cache are 6 GiB; a browser's WebAssembly memory 4 GiB): a chat never reaches
/// them, and the load runs rather than failing.
pub fn plan(
    header: &GgufHeader,
    device: &ModelDevice,
    options: &LoadOptions,
    host_limit: Option<HostLimit<'_>>,
) -> Result<LoadPlan, EngineError> {
    let trained = ModelConfig::from_gguf(header)?;
    let context = context_length(&trained, options)?;
    let config = ModelConfig { context_length: context, ..trained.clone() };
    Tokenizer::from_gguf(header)?;
    let planned = checked(header, &config, device, options, host_limit, trained.context_length);
    match (planned, host_limit) {
        (Err(EngineError::Model(ModelError::OutOfMemory(why))), Some(limit))
            if options.context_length.is_none()
                && options.path.unwrap_or_else(|| Path::default_for(device, &config)) == Path::Cpu =>
        {
            let fits = HostPlan::new(header, &config, context)?.max_context_length(limit.bytes).min(context);
            if fits == 0 {
                return Err(ModelError::OutOfMemory(why).into());
            }
            let config = ModelConfig { context_length: fits, ..config };
            checked(header, &config, device, options, host_limit, trained.context_length)
        }
        (planned, _) => planned,
    }
}

/// [`plan`] for a configuration already read (the load's own check).
pub(crate) fn checked(
    header: &GgufHeader,
    config: &ModelConfig,
    device: &ModelDevice,
    options: &LoadOptions,
    host_limit: Option<HostLimit<'_>>,
    trained_context_length: usize,
) -> Result<LoadPlan, EngineError> {
    let context = config.context_length;
    let path = options.path.unwrap_or_else(|| Path::default_for(device, config));
    let host = HostPlan::new(header, config, context)?;
    // The fused path's buffers, and what a streamed load of it holds of the file at once.
    let (device_bytes, staging_bytes): (u64, Option<u64>) = match path {
        #[cfg(feature = "gpu")]
        Path::Fused => {
            let plan = MemoryPlan::fused(header, config, context)?;
            if let Some(gpu) = device.gpu() {
                plan.check(&MemoryLimits::of_device(&gpu.limits(), options.memory_budget)).map_err(|refused| {
                    // What would fit: a shorter context (the GPU's check names it) or the other backend.
                    let cpu = host.as_the_other_backend(host_limit.map(|limit| (limit.bytes, limit.name)));
                    match (refused, cpu) {
                        (ModelError::OutOfMemory(why), Some(cpu)) => ModelError::OutOfMemory(format!("{why}; {cpu}")),
                        (refused, _) => refused,
                    }
                })?;
            }
            (plan.total_bytes(), Some(streamed_staging_bytes(header, config)?))
        }
        _ => (0, None),
    };
    // In the browser (a host limit) the fused path takes each tensor as it arrives and keeps none
    // of the file (`Engine::stream`): the header, and the largest tensor it takes whole.
    let streamed = staging_bytes.filter(|_| host_limit.is_some());
    let host_bytes = if path == Path::Cpu {
        host.total_bytes()
    } else if let Some(staging_bytes) = streamed {
        header.data_offset + staging_bytes
    } else {
        header.file_len
    };
    if let Some(limit) = host_limit {
        // The file is in that memory on the CPU engine, its cache and tables beside it.
        if path == Path::Cpu && header.file_len <= limit.bytes {
            host.check(limit.bytes, limit.name)?;
        } else if streamed.is_none() && header.file_len > limit.bytes {
            return Err(ModelError::OutOfMemory(format!(
                "the file ({:.1} MiB) does not fit in {} ({:.1} MiB)",
                header.file_len as f64 / 1048576.0,
                limit.name,
                limit.bytes as f64 / 1048576.0
            ))
            .into());
        }
    }
    Ok(LoadPlan {
        file_bytes: header.file_len,
        context_length: context,
        trained_context_length,
        path: path.as_str(),
        host_bytes,
        device_bytes,
        kv_cache_bytes: host.kv_cache,
        state_bytes: config.recurrent_state_bytes(),
    })
}
