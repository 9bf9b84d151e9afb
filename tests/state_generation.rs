//! Generation on caches that cannot simply forget positions: everything that goes back in a
//! cache (a second chat turn, a repeated prompt, a fork, a rejected draft) or copies it (beams)
//! must give the tokens and logits a cold run gives.
//! - A model with recurrent blocks (the tiny Qwen3.5), on the CPU engine and on the fused path:
//!   a Gated DeltaNet state cannot forget positions (it goes back to a checkpoint and runs the
//!   tokens after it again).
//! - A model with local blocks (the tiny Gemma 3, a window of 8), on the CPU engine and on the
//!   fused path, past the ring its local blocks keep (`window.rs`: 135 rows): within the ring's
//!   slack it goes back for free, further through a checkpoint of the window's rows; and it gives
//!   the tokens of Burn's path, which keeps every row.

use nucleus_engine::{BeamRequest, Engine, GenerateRequest, LoadOptions, Prompt, PromptLookup, Step};
use nucleus_gguf::GgufFile;
use nucleus_model::{KvCache, LinearKernel, Logits, Model, ModelConfig, Path, RING_SLACK};
use nucleus_sampler::{FinishReason, SamplingParams};
use nucleus_tests::{TINY_QWEN35, burn_cpu_device, cpu_device, max_abs_diff, run, tiny_family, wgpu_device};
use nucleus_tokenizer::ChatMessage;

/// The tiny Qwen3.5 on each engine that runs it: the CPU engine (its state in memory) and the
/// fused path on lavapipe (its state and checkpoints in GPU buffers).
fn engines() -> [Engine; 2] {
    let (bytes, _) = tiny_family(TINY_QWEN35);
    let options = LoadOptions { context_length: Some(512), ..LoadOptions::default() };
    [(cpu_device(), "cpu"), (wgpu_device(), "fused")].map(|(device, path)| {
        let engine = Engine::load(&bytes, &device, options).unwrap();
        assert_eq!(engine.info().path, path);
        engine
    })
}

fn greedy(prompt: Prompt, max_tokens: usize) -> GenerateRequest {
    let mut request = GenerateRequest::new(prompt);
    request.sampling = SamplingParams::greedy();
    request.max_tokens = max_tokens;
    request.ignore_eos = true;
    request
}

fn ids(steps: &[Step]) -> Vec<u32> {
    steps.iter().map(|s| s.id).collect()
}

/// The worst difference between two steps' top candidates' logits, rank by rank. The ids are the
/// same at every rank but where two candidates tie within 1e-4 (a pass of several rows sums in
/// another order than a decode step: near-ties may swap).
fn logit_gap(a: &Step, b: &Step) -> f32 {
    assert_eq!(a.top.len(), b.top.len());
    for (rank, (x, y)) in a.top.iter().zip(&b.top).enumerate() {
        assert!(
            x.id == y.id || (x.logit - y.logit).abs() < 1e-4,
            "rank {rank}: {} ({}) against {} ({})",
            x.id,
            x.logit,
            y.id,
            y.logit
        );
    }
    a.top.iter().zip(&b.top).map(|(x, y)| (x.logit - y.logit).abs()).fold(0.0, f32::max)
}

#[test]
fn the_engine_reports_the_state_and_generates_the_reference_tokens() {
    for mut engine in engines() {
        let info = engine.info().clone();
        // 6 Gated DeltaNet blocks of 6 heads: a 16 × 16 matrix each and 3 inputs of 160 channels.
        assert_eq!(info.state_bytes, 6 * 4 * (6 * 16 * 16 + 3 * 160));
        // Only the 2 attention blocks keep rows: keys and values of 2 heads of 32.
        assert_eq!(info.kv_bytes_per_token, 2 * 2 * 2 * 32 * 4);
        assert_eq!((info.architecture.as_str(), info.skipped_blocks), ("qwen35", 0));
        let (_, reference) = tiny_family(TINY_QWEN35);
        for (name, case) in &reference.logit_cases {
            let (steps, _) = run(&mut engine, greedy(Prompt::Text(case.text.clone()), case.greedy.len()));
            assert_eq!(ids(&steps), case.greedy, "{name}");
            assert!((steps[0].top[0].logit - case.top20[0].logit).abs() < 1e-3, "{name}");
        }
        assert!(engine.cache().needs_checkpoints() && engine.cache().recurrent_state_bytes() > 0);
    }
}

#[test]
fn a_second_chat_turn_goes_back_to_a_checkpoint_and_gives_a_cold_runs_tokens() {
    let message = |role: &str, content: &str| ChatMessage { role: role.into(), content: content.into() };
    for mut engine in engines() {
        let mut turns = vec![message("user", "What is the capital of France? Answer in a word or two, please.")];
        let (_, first) = run(&mut engine, greedy(Prompt::Chat(turns.clone()), 6));
        turns.push(message("assistant", &first.text));
        turns.push(message("user", "And of Italy?"));
        let (warm, second) = run(&mut engine, greedy(Prompt::Chat(turns.clone()), 6));
        // Part of the first turn came from the cache; what the state could not keep ran again.
        assert!(second.usage.cached_prompt_tokens > 0, "{:?}", second.usage);
        assert!(second.usage.cached_prompt_tokens <= first.usage.prompt_tokens + first.usage.completion_tokens);
        engine.clear_cache();
        let (cold, cold_result) = run(&mut engine, greedy(Prompt::Chat(turns), 6));
        assert_eq!(cold_result.usage.cached_prompt_tokens, 0);
        assert_eq!(ids(&warm), ids(&cold));
        let worst = warm.iter().zip(&cold).map(|(a, b)| logit_gap(a, b)).fold(0.0, f32::max);
        assert!(worst < 1e-4, "the cached turn's logits differ from a cold run's by {worst}");
    }
}

#[test]
fn a_repeated_prompt_and_a_fork_give_a_cold_runs_tokens() {
    for mut engine in engines() {
        // The reference's ChatML prompt, as text: 17 tokens.
        let (_, reference) = tiny_family(TINY_QWEN35);
        let prompt = Prompt::Text(reference.logit_cases["chat"].text.clone());
        let prompt_len = engine.prompt_tokens(&prompt).unwrap().len();
        // Reported (as the page asks): on the fused path in chunks, one ending right before the
        // last token; on the CPU engine in one pass, split there by the checkpoint.
        let chunk = nucleus_engine::prefill_chunk_len(prompt_len);
        assert_eq!(chunk, prompt_len - 1, "the prompt is one token longer than its first chunk");
        let mut generation = engine.generate(greedy(prompt.clone(), 8)).unwrap();
        let mut parent = Vec::new();
        while let Some(step) = pollster::block_on(generation.next_step_reporting(&mut |_| {})).unwrap() {
            parent.push(step);
        }
        let (again, result) = run(&mut engine, greedy(prompt.clone(), 8));
        assert_eq!(ids(&again), ids(&parent));
        // Only the last token ran again: the state before it was kept.
        assert_eq!(result.usage.cached_prompt_tokens, prompt_len - 1, "{:?}", result.usage);
        // Fork at step 3: the parent's first two tokens, then step 3's second candidate.
        let at = 2;
        let mut fork = greedy(prompt, 8);
        fork.forced_tokens = [&ids(&parent)[..at], &[parent[at].top[1].id]].concat();
        let (warm, _) = run(&mut engine, fork.clone());
        engine.clear_cache();
        let (cold, _) = run(&mut engine, fork);
        assert_eq!(ids(&warm), ids(&cold));
        assert!(logit_gap(&warm[0], &cold[0]) < 1e-4);
    }
}

#[test]
fn speculative_lookup_rolls_the_state_back_and_gives_plain_decodings_tokens() {
    for mut engine in engines() {
        // The random model never repeats what it read, so nothing would be drafted: a bias makes it
        // say " of" (in the prompt) over and over. Lookup then drafts what followed " of" in the
        // prompt (rejected: the state goes back and replays) and, once " of of" is in the context,
        // more " of"s (accepted).
        let prompt = Prompt::Text("The capital of France is".into());
        let of = engine.prompt_tokens(&Prompt::Text(" of".into())).unwrap()[0];
        assert!(engine.prompt_tokens(&prompt).unwrap().contains(&of));
        let mut plain_request = greedy(prompt, 24);
        plain_request.sampling.logit_bias.insert(of, 50.0);
        let (plain, plain_result) = run(&mut engine, plain_request.clone());
        engine.clear_cache();
        let speculative = GenerateRequest { speculative: Some(PromptLookup::default()), ..plain_request.clone() };
        let (steps, result) = run(&mut engine, speculative);
        assert_eq!(ids(&steps), ids(&plain));
        assert_eq!(result.text, plain_result.text);
        for (a, b) in steps.iter().zip(&plain) {
            assert!((a.logprob - b.logprob).abs() < 1e-4, "step {}: {} vs {}", a.index, a.logprob, b.logprob);
            assert!(logit_gap(a, b) < 1e-4, "step {}", a.index);
        }
        let stats = result.speculation;
        assert!(stats.accepted_tokens > 0 && stats.accepted_tokens < stats.drafted_tokens, "{stats:?}");
        // After the rollbacks the cache holds this generation: the same request again reuses it.
        let (again, again_result) = run(&mut engine, plain_request);
        assert_eq!(ids(&again), ids(&plain));
        assert!(again_result.usage.cached_prompt_tokens > 0);
    }
}

#[test]
fn beams_keep_a_state_each_and_one_beam_is_greedy() {
    for mut engine in engines() {
        let prompt = Prompt::Text("The capital of France is".into());
        let request =
            |beams| BeamRequest { prompt: prompt.clone(), beams, length_penalty: 1.0, max_tokens: 6, ignore_eos: true };
        let one = pollster::block_on(engine.beam_search(&request(1))).unwrap();
        let (plain, _) = run(&mut engine, greedy(prompt.clone(), 6));
        assert_eq!(one.hypotheses[0].tokens, ids(&plain));
        let three = pollster::block_on(engine.beam_search(&request(3))).unwrap();
        assert!(three.hypotheses.windows(2).all(|w| w[0].score >= w[1].score));
        assert_eq!(three, pollster::block_on(engine.beam_search(&request(3))).unwrap());
        // The beams' states were copies: the engine's own generation is unchanged after them.
        let (after, result) = run(&mut engine, greedy(prompt, 6));
        assert_eq!(ids(&after), ids(&plain));
        assert_eq!(result.finish_reason, Some(FinishReason::Length));
    }
}

/// The tiny Gemma 3 with linear RoPE scaling: local blocks with a window of 8 beside a global one.
const TINY_GEMMA: &str = "gemma3-linear";

/// The tiny Gemma 3 on `path` at its whole context (256): the CPU engine in memory, the fused
/// path on lavapipe (their local blocks keep a ring), Burn's path on its CPU backend.
fn gemma_engine(path: Path) -> Engine {
    let (bytes, _) = tiny_family(TINY_GEMMA);
    let device = match path {
        Path::Cpu => cpu_device(),
        Path::Fused => wgpu_device(),
        _ => burn_cpu_device(),
    };
    Engine::load(&bytes, &device, LoadOptions { path: Some(path), ..LoadOptions::default() }).unwrap()
}

/// The engines whose local blocks keep a ring.
const RING_PATHS: [Path; 2] = [Path::Cpu, Path::Fused];

/// The rows the tiny Gemma's ring holds.
fn gemma_ring_slots() -> usize {
    let (bytes, _) = tiny_family(TINY_GEMMA);
    let config = ModelConfig::from_gguf(&GgufFile::parse(&bytes).unwrap()).unwrap();
    config.window_ring().expect("Gemma 3 has local blocks").slots()
}

/// A text prompt of at least `tokens` tokens: a story that counts, then `tail`.
fn counting_prompt(engine: &Engine, tokens: usize, tail: &str) -> Prompt {
    let mut count = 1;
    loop {
        let numbers: Vec<String> = (1..=count).map(|n| n.to_string()).collect();
        let prompt = Prompt::Text(format!("Once upon a time a small model counted: {}.{tail}", numbers.join(", ")));
        if engine.prompt_tokens(&prompt).unwrap().len() >= tokens {
            return prompt;
        }
        count += 1;
    }
}

#[test]
fn past_its_ring_a_local_blocks_cache_gives_the_tokens_of_one_that_keeps_every_row() {
    let slots = gemma_ring_slots();
    assert_eq!(slots, 8 - 1 + RING_SLACK);
    let mut burn = gemma_engine(Path::BurnOps(LinearKernel::BurnMatmul));
    // A prompt longer than the ring (its pass writes the ring's last rows), then decode steps
    // that wrap around it again.
    let prompt = counting_prompt(&burn, slots + 10, "");
    let prompt_len = burn.prompt_tokens(&prompt).unwrap().len();
    let (every_row, _) = run(&mut burn, greedy(prompt.clone(), 40));
    assert_eq!(burn.info().kv_window, None, "Burn's path keeps every row");
    let config = ModelConfig::from_gguf(&GgufFile::parse(&tiny_family(TINY_GEMMA).0).unwrap()).unwrap();
    let row = config.kv_position_bytes();
    let local = config.ring_blocks() as u64;
    let global = config.block_count as u64 - local;
    for path in RING_PATHS {
        let mut engine = gemma_engine(path);
        let (ring, _) = run(&mut engine, greedy(prompt.clone(), 40));
        assert_eq!(ids(&ring), ids(&every_row), "{path:?}");
        for (a, b) in ring.iter().zip(&every_row) {
            assert!((a.top[0].logit - b.top[0].logit).abs() < 1e-3, "{path:?}, step {}", a.index);
        }
        // The checkpoint the prefill keeps before the prompt's last token: the window's 7 rows.
        let positions = engine.cache().len();
        assert_eq!(positions, prompt_len + 39);
        let (checkpoints, checkpoint_bytes) = engine.cache().checkpoints();
        assert_eq!((checkpoints, checkpoint_bytes), (vec![prompt_len - 1], local * 7 * row), "{path:?}");
        // The global block keeps every position. The CPU engine's local blocks a ring of twice
        // its slots at most (each row past the first lap written twice: at this short context,
        // as many rows as positions); the fused path's its slots, in a buffer of the context's
        // 256 positions for the global block.
        let rows = match path {
            Path::Cpu => global * positions as u64 + local * positions.min(2 * slots) as u64,
            _ => global * 256 + local * slots as u64,
        };
        assert_eq!(engine.cache().device_bytes(), rows * row + checkpoint_bytes, "{path:?}");
        // What the model says of it: the ring's rows on this path, and so the cache's rows at
        // these positions (the CPU engine's grow with them: its rows are exactly that).
        let window = engine.info().kv_window.expect("the local blocks keep a ring");
        let ring_rows = if path == Path::Cpu { 2 * slots } else { slots };
        assert_eq!((window.rows, window.bytes_per_token), (ring_rows, local * row), "{path:?}");
        assert_eq!(
            engine.info().kv_bytes(positions),
            (global * positions as u64 + local * positions.min(ring_rows) as u64) * row
        );
        if path == Path::Cpu {
            assert_eq!(engine.info().kv_bytes(positions) + checkpoint_bytes, engine.cache().device_bytes());
        }
    }
}

#[test]
fn past_its_ring_a_repeated_prompt_and_a_fork_give_a_cold_runs_tokens() {
    let fork = |prompt: &Prompt, parent: &[Step], at: usize| {
        // The parent's first `at` tokens, then the next step's second candidate, then 8 more.
        let mut fork = greedy(prompt.clone(), at + 9);
        fork.forced_tokens = [&ids(parent)[..at], &[parent[at].top[1].id]].concat();
        fork
    };
    let same_as_cold = |engine: &mut Engine, path: Path, warm: Vec<Step>, fork: GenerateRequest| {
        engine.clear_cache();
        let (cold, _) = run(engine, fork);
        assert_eq!(ids(&warm), ids(&cold));
        assert_eq!(warm.len(), 8);
        let worst = warm.iter().zip(&cold).map(|(a, b)| logit_gap(a, b)).fold(0.0, f32::max);
        assert!(worst < 1e-4, "{path:?}: the fork's logits differ from a cold run's by {worst}");
    };
    for path in RING_PATHS {
        let mut engine = gemma_engine(path);
        let prompt = counting_prompt(&engine, 90, "");
        let prompt_len = engine.prompt_tokens(&prompt).unwrap().len();
        // 150 tokens: going back to the prompt is further than the ring's slack.
        let (parent, _) = run(&mut engine, greedy(prompt.clone(), 150));
        assert!(parent.len() > RING_SLACK);
        // A fork at 140 goes back 9 positions: within the ring.
        let at_140 = fork(&prompt, &parent, 140);
        let (warm_140, _) = run(&mut engine, at_140.clone());
        // The prompt again, from 149 positions past it: the window before the prompt's last token
        // was kept, only that token ran again.
        let (again, result) = run(&mut engine, greedy(prompt.clone(), 10));
        assert_eq!(ids(&again), ids(&parent)[..10]);
        assert_eq!(result.usage.cached_prompt_tokens, prompt_len - 1, "{:?}", result.usage);
        // A fork at 5 goes back 4 positions from there: within the slack, nothing is restored (the
        // whole prompt is still held; from the checkpoint, its last token would run again).
        let at_5 = fork(&prompt, &parent, 5);
        let (warm_5, result) = run(&mut engine, at_5.clone());
        assert_eq!(result.usage.cached_prompt_tokens, prompt_len, "{:?}", result.usage);
        same_as_cold(&mut engine, path, warm_140, at_140);
        same_as_cold(&mut engine, path, warm_5, at_5);
    }
}

#[test]
fn past_its_ring_speculative_lookup_and_beams_give_plain_decodings_tokens() {
    for path in RING_PATHS {
        let mut engine = gemma_engine(path);
        // As for Qwen3.5: a bias makes the model say " of" over and over; lookup drafts what
        // followed " of" in the prompt (rejected: the ring goes back within its slack) and more
        // " of"s (accepted), 60 tokens past a 90-token prompt (past the ring's 135 rows).
        let prompt = counting_prompt(&engine, 90, " The capital of France is");
        let of = engine.prompt_tokens(&Prompt::Text(" of".into())).unwrap()[0];
        let mut plain_request = greedy(prompt.clone(), 60);
        plain_request.sampling.logit_bias.insert(of, 50.0);
        let (plain, _) = run(&mut engine, plain_request.clone());
        engine.clear_cache();
        let (steps, result) =
            run(&mut engine, GenerateRequest { speculative: Some(PromptLookup::default()), ..plain_request });
        assert_eq!(ids(&steps), ids(&plain));
        let worst = steps.iter().zip(&plain).map(|(a, b)| logit_gap(a, b)).fold(0.0, f32::max);
        assert!(worst < 1e-4, "{path:?}: speculative decoding's logits differ from plain decoding's by {worst}");
        let stats = result.speculation;
        assert!(stats.accepted_tokens > 0 && stats.accepted_tokens < stats.drafted_tokens, "{stats:?}");

        // Beams over a prompt past the ring: each beam's copy of the ring goes on from there.
        let prompt = counting_prompt(&engine, gemma_ring_slots() + 5, "");
        let request =
            |beams| BeamRequest { prompt: prompt.clone(), beams, length_penalty: 1.0, max_tokens: 6, ignore_eos: true };
        let one = pollster::block_on(engine.beam_search(&request(1))).unwrap();
        let (greedy_steps, _) = run(&mut engine, greedy(prompt.clone(), 6));
        assert_eq!(one.hypotheses[0].tokens, ids(&greedy_steps));
        let three = pollster::block_on(engine.beam_search(&request(3))).unwrap();
        assert_eq!(three, pollster::block_on(engine.beam_search(&request(3))).unwrap());
        let (after, _) = run(&mut engine, greedy(prompt, 6));
        assert_eq!(ids(&after), ids(&greedy_steps));
    }
}

/// The model's own contract: going back within the slack keeps the position; past the ring it
/// goes to the latest checkpoint at or before it (or the start), and the tokens run again from
/// there give the logits of a cold pass.
#[test]
fn a_ring_goes_back_within_its_slack_or_to_a_checkpoint() {
    let (bytes, _) = tiny_family(TINY_GEMMA);
    let file = GgufFile::parse(&bytes).unwrap();
    for (device, path) in [(cpu_device(), Path::Cpu), (wgpu_device(), Path::Fused)] {
        let model = Model::load(&file, &device, path).unwrap();
        let vocab = model.config().vocab_size as u32;
        let tokens: Vec<u32> = (0..250u32).map(|i| (i * 7919 + 13) % vocab).collect();
        let pass = |cache: &mut KvCache, tokens: &[u32]| {
            pollster::block_on(model.forward(tokens, cache, Logits::Last).unwrap().read()).unwrap().remove(0)
        };
        let cold = |tokens: &[u32]| pass(&mut model.new_cache(256).unwrap(), tokens);
        let mut cache = model.new_cache(256).unwrap();
        // Passes of one token, of a few, and one longer than the slack.
        pass(&mut cache, &tokens[..60]);
        cache.checkpoint();
        for start in 60..70 {
            pass(&mut cache, &tokens[start..start + 1]);
        }
        pass(&mut cache, &tokens[70..85]);
        pass(&mut cache, &tokens[85..240]);
        // Within the slack: kept as asked.
        assert_eq!(cache.truncate(240 - RING_SLACK), 240 - RING_SLACK);
        let logits = pass(&mut cache, &tokens[240 - RING_SLACK..200]);
        assert!(max_abs_diff(&logits, &cold(&tokens[..200])) < 1e-4);
        // Past the ring (it holds the rows from 105 on): back to the checkpoint at 60, then the
        // tokens to 100 again.
        assert_eq!(cache.truncate(100), 60);
        let logits = pass(&mut cache, &tokens[60..100]);
        assert!(max_abs_diff(&logits, &cold(&tokens[..100])) < 1e-4);
        // Before the checkpoint: from the start.
        pass(&mut cache, &tokens[100..250]);
        assert_eq!(cache.truncate(40), 0);
        let logits = pass(&mut cache, &tokens[..40]);
        assert!(max_abs_diff(&logits, &cold(&tokens[..40])) < 1e-4);

        // Going back within the slack to before a checkpoint, then other tokens: the checkpoint
        // held the first tokens' rows, and is gone.
        let mut cache = model.new_cache(256).unwrap();
        pass(&mut cache, &tokens[..60]);
        cache.checkpoint();
        pass(&mut cache, &tokens[60..80]);
        assert_eq!(cache.truncate(58), 58);
        let mut other = tokens.clone();
        other[58..].iter_mut().for_each(|t| *t = (*t + 1) % vocab);
        let logits = pass(&mut cache, &other[58..240]);
        assert!(max_abs_diff(&logits, &cold(&other[..240])) < 1e-4);
        assert_eq!(cache.truncate(70), 0);
    }
}
