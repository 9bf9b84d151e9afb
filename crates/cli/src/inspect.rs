//! `nucleus inspect`: what a GGUF file holds, without loading the weights.

use std::collections::BTreeMap;
use std::path::Path;

use nucleus_gguf::{GgufFile, GgufHeader, SharedBytes};
use nucleus_model::{HostPlan, MemoryPlan, ModelConfig};
use nucleus_tokenizer::Tokenizer;

/// What the model will hold at its whole context and at 4,096 positions, on the CPU engine (the
/// process's memory: the file, read in place, and the rest) and on the fused path (the GPU): the
/// plan a load checks, from the header alone.
fn print_memory_plan(header: &GgufHeader, config: &ModelConfig) {
    let mib = |bytes: u64| bytes as f64 / 1048576.0;
    let shorter = (config.context_length > 4096).then_some(4096);
    for context in std::iter::once(config.context_length).chain(shorter) {
        let config = ModelConfig { context_length: context, ..config.clone() };
        match HostPlan::new(header, &config, context) {
            Ok(host) => println!(
                "  memory at {context} positions: CPU engine {:.1} MiB (file {:.1}, KV cache {:.1}, \
                 state, vectors and logits {:.1}){}",
                mib(host.total_bytes()),
                mib(host.file),
                mib(host.kv_cache),
                mib(host.recurrent_state + host.vectors + host.logits),
                match MemoryPlan::fused(header, &config, context) {
                    Ok(gpu) => format!("; fused path {:.1} MiB on the GPU", mib(gpu.total_bytes())),
                    Err(e) => format!("; fused path: {e}"),
                }
            ),
            Err(e) => println!("  memory: {e}"),
        }
    }
}

pub fn run(path: &Path, bytes: &SharedBytes) -> Result<(), String> {
    let file = GgufFile::parse_shared(bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    println!(
        "file          {} ({:.1} MB, GGUF v{}, {} tensors, {} metadata keys)",
        path.display(),
        bytes.len() as f64 / 1e6,
        file.version,
        file.tensors.len(),
        file.metadata.len()
    );
    for key in ["general.name", "general.architecture", "general.size_label", "general.license", "general.file_type"] {
        if let Some(value) = file.get(key) {
            println!("{key:<26}{value}");
        }
    }

    println!("\narchitecture");
    match ModelConfig::from_gguf(&file) {
        Ok(c) => {
            let tied = file.tensor("output.weight").is_none();
            println!(
                "  blocks {}, embedding {}, ffn {}, heads {} (kv {}, head dim {}), vocab {}, context {}",
                c.block_count,
                c.embedding_length,
                c.feed_forward_length,
                c.head_count,
                c.head_count_kv,
                c.head_dim,
                c.vocab_size,
                c.context_length
            );
            println!(
                "  rope base {} over {} dims (scaling: {}), rms eps {:e}, output {}",
                c.rope_freq_base,
                c.rope_dims,
                c.rope_scaling,
                c.rms_norm_eps,
                if tied { "tied to the token embedding" } else { "own output.weight" }
            );
            if let Some(delta) = &c.delta_net {
                let recurrent = c.block_count - c.attention_blocks();
                println!(
                    "  Gated DeltaNet in {recurrent} of {} blocks: {} key heads, {} value heads of {}, conv kernel {}; \
                     state {:.1} KiB per block, {:.2} MiB in all, whatever the context",
                    c.block_count,
                    delta.key_heads,
                    delta.value_heads,
                    delta.head_dim,
                    delta.conv_kernel,
                    delta.state_bytes() as f64 / 1024.0,
                    c.recurrent_state_bytes() as f64 / 1048576.0
                );
            }
            // A local block's ring holds its slots at most (the fused path's; the line below
            // says the CPU engine's).
            let ring_rows = c.window_ring().map_or(c.context_length, |ring| ring.slots().min(c.context_length));
            let kv_bytes = c.kv_token_bytes() * c.context_length as u64
                - (c.ring_blocks() * (c.context_length - ring_rows)) as u64 * c.kv_position_bytes();
            println!(
                "  KV cache {} bytes per token ({} attention blocks), {:.1} MiB at the full context{}",
                c.kv_token_bytes(),
                c.attention_blocks(),
                kv_bytes as f64 / 1048576.0,
                match c.skipped_mtp_blocks {
                    0 => String::new(),
                    n => format!("; {n} multi-token-prediction block(s) not run"),
                }
            );
            if let Some(ring) = c.window_ring() {
                let local = c.ring_blocks();
                println!(
                    "  the {local} local blocks keep a ring of their window instead: {} rows each ({} before a \
                     query and {} of slack) on the fused path, at most twice as many on the CPU engine (each \
                     written twice so that a window's rows are consecutive)",
                    ring.slots(),
                    ring.slots() - nucleus_model::RING_SLACK,
                    nucleus_model::RING_SLACK
                );
            }
            match nucleus_model::parameter_count(&file, &c) {
                Ok(n) => println!("  parameters {n} ({:.1} MB as f32 on the device)", n as f64 * 4.0 / 1e6),
                Err(e) => println!("  not loadable: {e}"),
            }
            print_memory_plan(&file, &c);
        }
        Err(e) => println!("  not loadable: {e}"),
    }

    println!("\ntensors by type");
    let mut by_type: BTreeMap<String, (usize, u64, u64)> = BTreeMap::new();
    for t in &file.tensors {
        let entry = by_type.entry(t.ggml_type.to_string()).or_default();
        entry.0 += 1;
        entry.1 += t.element_count();
        entry.2 += t.byte_len();
    }
    for (ty, (count, elements, bytes)) in by_type {
        println!(
            "  {ty:<6} {count:>4} tensors {elements:>12} elements {:>9.1} MB ({:.2} bits/weight)",
            bytes as f64 / 1e6,
            bytes as f64 * 8.0 / elements as f64
        );
    }
    if let Some(first) = file.tensors.first() {
        println!("  e.g. {} {:?} {}", first.name, first.dims, first.ggml_type);
    }

    println!("\ntokenizer");
    match Tokenizer::from_gguf(&file) {
        Ok(t) => {
            let merges = file.get_array("tokenizer.ggml.merges").map(|m| m.len()).unwrap_or(0);
            let controls = (0..t.vocab_size() as u32).filter(|&id| t.is_control(id)).count();
            println!(
                "  model {}, pre-tokenizer {}, {} tokens ({} control), {} merges",
                file.get_str("tokenizer.ggml.model").unwrap_or("?"),
                t.pre_tokenizer_name(),
                t.vocab_size(),
                controls,
                merges
            );
            let show = |id: Option<u32>| id.map_or("none".to_string(), |i| format!("{i} {:?}", t.token_text(i)));
            println!("  bos {}, eos {}, adds bos: {}", show(t.bos_id()), show(t.eos_id()), t.adds_bos());
            let eog: Vec<String> =
                t.end_of_generation_ids().iter().map(|&i| format!("{i} {:?}", t.token_text(i))).collect();
            println!("  end of generation: {}", eog.join(", "));
            println!("  chat template: {}", if t.chat_template().is_some() { "yes" } else { "no" });
        }
        Err(e) => println!("  not usable: {e}"),
    }
    Ok(())
}
