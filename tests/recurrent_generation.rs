//! Generation on a model with recurrent blocks (the tiny Qwen3.5): everything that goes back in
//! a cache (a second chat turn, a fork, a rejected draft) or copies it (beams) must give the
//! tokens and logits a cold run gives, though a Gated DeltaNet state cannot forget positions
//! (it goes back to a checkpoint and runs the tokens after it again). On the CPU engine and on
//! the fused path alike.

use nucleus_engine::{BeamRequest, Engine, GenerateRequest, LoadOptions, Prompt, PromptLookup, Step};
use nucleus_sampler::{FinishReason, SamplingParams};
use nucleus_tests::{TINY_QWEN35, cpu_device, run, tiny_family, wgpu_device};
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
        assert!(engine.cache().is_recurrent());
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
