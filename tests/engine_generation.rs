//! The generation loop on the real model: streaming, stop strings, cache reuse, seeded sampling.

use nucleus_engine::{
    BeamRequest, Engine, GenerateRequest, GgufError, GgufHeader, HostLimit, LoadOptions, Prompt, PromptLookup,
    ResponseFormat, Step, plan,
};
use nucleus_gguf::GgmlType;
use nucleus_sampler::{FinishReason, SamplingParams, Verdict};
use nucleus_tests::{cpu_device, model_bytes, reference, run, tiny_family, wgpu_device};
use nucleus_tokenizer::ChatMessage;

fn engine() -> Engine {
    Engine::load(model_bytes(), &cpu_device(), LoadOptions { context_length: Some(512), ..LoadOptions::default() })
        .unwrap()
}

fn greedy_request(text: &str, max_tokens: usize) -> GenerateRequest {
    let mut request = GenerateRequest::new(Prompt::Text(text.to_string()));
    request.sampling = SamplingParams::greedy();
    request.max_tokens = max_tokens;
    request
}

#[test]
fn greedy_generation_streams_the_reference_tokens_and_text() {
    let mut engine = engine();
    let case = &reference().logit_cases["capital"];
    let (steps, result) = run(&mut engine, greedy_request(&case.text, 32));
    let ids: Vec<u32> = steps.iter().map(|s| s.id).collect();
    assert_eq!(ids, case.greedy);
    assert_eq!(result.finish_reason, Some(FinishReason::Eos), "the reference ends on <|im_end|>");
    let streamed: String = steps.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(streamed, result.text);
    // The end-of-generation token is not shown.
    assert_eq!(result.text, engine.tokenizer().decode(&ids[..ids.len() - 1]));
    assert_eq!(result.usage.completion_tokens, ids.len());
    assert_eq!(steps[0].top[0].text, " Paris");
    assert!((steps[0].top[0].logit - case.top20[0].logit).abs() < 1e-3);
}

#[test]
fn a_repeated_prompt_reuses_the_cache_and_gives_the_same_tokens() {
    let mut engine = engine();
    let case = &reference().logit_cases["once"];
    let (first, first_result) = run(&mut engine, greedy_request(&case.text, 6));
    let (second, second_result) = run(&mut engine, greedy_request(&case.text, 6));
    assert_eq!(first_result.usage.cached_prompt_tokens, 0);
    assert_eq!(second_result.usage.cached_prompt_tokens, case.ids.len() - 1);
    assert_eq!(first.iter().map(|s| s.id).collect::<Vec<_>>(), second.iter().map(|s| s.id).collect::<Vec<_>>());
    // A prompt that extends the generated text continues from the cache too.
    let continued = format!("{}{}", case.text, first_result.text);
    let (_, third) = run(&mut engine, greedy_request(&continued, 2));
    assert!(third.usage.cached_prompt_tokens >= case.ids.len(), "{:?}", third.usage);
}

#[test]
fn seeded_sampling_is_reproducible() {
    let mut engine = engine();
    let sampled = |engine: &mut Engine, seed: u64| {
        let mut request = GenerateRequest::new(Prompt::Text("Once upon a time".into()));
        request.max_tokens = 12;
        request.ignore_eos = true;
        request.sampling = SamplingParams { temperature: 0.8, top_p: 0.95, seed, ..SamplingParams::default() };
        run(engine, request).0.iter().map(|s| s.id).collect::<Vec<_>>()
    };
    let a = sampled(&mut engine, 7);
    assert_eq!(a, sampled(&mut engine, 7));
    assert_ne!(a, sampled(&mut engine, 8), "another seed gives another continuation");
}

#[test]
fn stop_strings_and_length() {
    let mut engine = engine();
    let mut request = greedy_request("The capital of France is", 10);
    request.stop = vec!["\n\n".into()];
    let (steps, result) = run(&mut engine, request);
    assert_eq!(result.text, " Paris.");
    assert!(matches!(result.finish_reason, Some(FinishReason::Stop { index: 0, .. })));
    assert_eq!(steps.last().unwrap().finish_reason, result.finish_reason);
    let (steps, result) = run(&mut engine, greedy_request("The capital of France is", 3));
    assert_eq!((steps.len(), result.finish_reason), (3, Some(FinishReason::Length)));
}

#[test]
fn invalid_requests_are_refused_with_the_parameter_named() {
    let mut engine = engine();
    let mut request = greedy_request("hi", 0);
    assert_eq!(
        engine.generate(request.clone()).err().unwrap().to_string(),
        "invalid option max_tokens: must be >= 1, got 0"
    );
    request.max_tokens = 4;
    request.top_logprobs = 300;
    assert_eq!(engine.generate(request.clone()).err().unwrap().code(), "bad-options");
    request.top_logprobs = 5;
    request.sampling.temperature = -1.0;
    assert!(engine.generate(request).err().unwrap().to_string().contains("temperature"));
    let long = "word ".repeat(600);
    let err = engine.generate(greedy_request(&long, 4)).err().unwrap();
    assert_eq!(err.code(), "context-overflow");
}

#[test]
fn beam_search_on_the_model_is_deterministic_and_scores_its_hypotheses() {
    let mut engine = engine();
    let request = BeamRequest {
        prompt: Prompt::Text("The capital of France is".into()),
        beams: 3,
        length_penalty: 1.0,
        max_tokens: 4,
        ignore_eos: false,
    };
    let output = pollster::block_on(engine.beam_search(&request)).unwrap();
    assert!(!output.hypotheses.is_empty() && output.hypotheses.len() <= 3);
    for h in &output.hypotheses {
        assert!((h.score - h.logprob / (h.tokens.len() as f64)).abs() < 1e-9);
    }
    assert!(output.hypotheses.windows(2).all(|w| w[0].score >= w[1].score));
    // Greedy's first token, " Paris", leads the best beam here too.
    assert_eq!(output.hypotheses[0].tokens[0], 7042);
    let again = pollster::block_on(engine.beam_search(&request)).unwrap();
    assert_eq!(output, again);
}

#[test]
fn stopping_early_keeps_the_text_so_far_and_the_engine_usable() {
    let mut engine = engine();
    let mut request = greedy_request("The capital of France is", 10);
    request.stop = vec![".\n\nThe capital".into()];
    let mut generation = engine.generate(request).unwrap();
    let first = pollster::block_on(generation.next_step()).unwrap().unwrap();
    let second = pollster::block_on(generation.next_step()).unwrap().unwrap();
    assert_eq!(first.text, " Paris");
    assert_eq!(second.text, "", "'.' could begin the stop string: held back");
    assert_eq!(generation.stop(), ".", "stopping releases the held text");
    assert!(pollster::block_on(generation.next_step()).unwrap().is_none());
    let result = generation.result();
    assert_eq!((result.text.as_str(), result.finish_reason, result.usage.completion_tokens), (" Paris.", None, 2));
    let (steps, _) = run(&mut engine, greedy_request("The capital of France is", 1));
    assert_eq!(steps[0].id, 7042);
}

#[test]
fn an_owned_generation_state_steps_like_a_borrowed_one_and_refuses_an_interleaved_step() {
    let mut engine = engine();
    let case = &reference().logit_cases["capital"];
    let mut state = engine.start(greedy_request(&case.text, 3)).unwrap();
    let mut ids = Vec::new();
    while let Some(step) = pollster::block_on(engine.step(&mut state)).unwrap() {
        ids.push(step.id);
    }
    assert_eq!(ids, case.greedy[..3]);
    assert_eq!(state.result().usage.completion_tokens, 3);

    // A second generation that runs between two steps of the first takes the cache: the first
    // is refused with `busy` instead of continuing on the wrong keys and values.
    let mut first = engine.start(greedy_request(&case.text, 4)).unwrap();
    pollster::block_on(engine.step(&mut first)).unwrap().unwrap();
    let (other, _) = run(&mut engine, greedy_request("Once upon a time", 1));
    assert_eq!(other.len(), 1);
    let err = pollster::block_on(engine.step(&mut first)).unwrap_err();
    assert_eq!(err.code(), "busy");
}

/// The CPU engine reports a prompt block by block within its one pass (in chunks, each pass would
/// read every weight again; the GPU paths' chunks: `decode_tail.rs`).
#[test]
fn a_prefill_reported_block_by_block_is_one_pass_with_the_unreported_ones_logits() {
    let mut engine = engine();
    let case = &reference().logit_cases["chat"];
    let request = greedy_request(&case.text, 3);
    let mut progress = Vec::new();
    let mut generation = engine.generate(request.clone()).unwrap();
    let mut reported = Vec::new();
    while let Some(step) = pollster::block_on(generation.next_step_reporting(&mut |p| progress.push(p.done))).unwrap() {
        reported.push(step);
    }
    let (total, blocks) = (case.ids.len(), engine.model().config().block_count);
    assert!(total > blocks, "a token or more per block: every block's report moves on");
    let expected: Vec<usize> = (1..blocks).map(|block| total * block / blocks).chain([total]).collect();
    assert_eq!(progress, expected, "a report after each block, then the end");
    engine.clear_cache();
    let (plain, _) = run(&mut engine, request);
    assert_eq!(reported.iter().map(|s| s.id).collect::<Vec<_>>(), plain.iter().map(|s| s.id).collect::<Vec<_>>());
    let logits = |steps: &[Step]| steps[0].top.iter().map(|t| t.logit).collect::<Vec<_>>();
    assert_eq!(logits(&reported), logits(&plain), "the same one pass");
}

#[test]
fn a_second_chat_turn_prefills_only_its_new_tokens_and_gives_a_cold_runs_logits() {
    use nucleus_tokenizer::ChatMessage;
    let message = |role: &str, content: &str| ChatMessage { role: role.into(), content: content.into() };
    let chat = |messages: Vec<ChatMessage>| {
        let mut request = GenerateRequest::new(Prompt::Chat(messages));
        request.sampling = SamplingParams::greedy();
        request.max_tokens = 12;
        request
    };
    let mut engine = engine();
    let mut turns =
        vec![message("system", "You answer in one short sentence."), message("user", "What is the capital of France?")];
    let (_, first) = run(&mut engine, chat(turns.clone()));
    turns.push(message("assistant", &first.text));
    turns.push(message("user", "And of Italy?"));
    let second_prompt = engine.prompt_tokens(&Prompt::Chat(turns.clone())).unwrap();
    let (warm, second) = run(&mut engine, chat(turns.clone()));
    // The first turn's prompt and answer are in the cache: only the new message is prefilled.
    assert!(
        second.usage.cached_prompt_tokens > first.usage.prompt_tokens,
        "{:?} after {:?}",
        second.usage,
        first.usage
    );
    assert!(second.usage.cached_prompt_tokens < second_prompt.len());
    engine.clear_cache();
    let (cold, cold_result) = run(&mut engine, chat(turns));
    assert_eq!(cold_result.usage.cached_prompt_tokens, 0);
    assert_eq!(warm.iter().map(|s| s.id).collect::<Vec<_>>(), cold.iter().map(|s| s.id).collect::<Vec<_>>());
    let worst = warm[0].top.iter().zip(&cold[0].top).map(|(a, b)| (a.logit - b.logit).abs()).fold(0.0, f32::max);
    assert!(worst < 1e-4, "the cached turn's logits differ from a cold run's by {worst}");
}

#[test]
fn a_generation_that_fills_the_context_ends_with_length_and_keeps_its_text() {
    let options = LoadOptions { context_length: Some(16), ..LoadOptions::default() };
    let mut engine = Engine::load(model_bytes(), &cpu_device(), options).unwrap();
    let case = &reference().logit_cases["once"];
    let mut request = greedy_request(&case.text, 100);
    request.ignore_eos = true;
    let (steps, result) = run(&mut engine, request);
    assert_eq!(result.finish_reason, Some(FinishReason::Length));
    // The prompt and every generated token but the last fill the 16 positions.
    assert_eq!(steps.len(), 16 - case.ids.len() + 1);
    assert_eq!(result.text, steps.iter().map(|s| s.text.as_str()).collect::<String>());
    // A prompt that does not fit is refused before any work, with both counts named.
    let error = engine.generate(greedy_request(&"and then ".repeat(10), 1)).err().expect("too long");
    assert_eq!(error.code(), "context-overflow");
    assert!(error.to_string().contains("tokens but the context holds 16"), "{error}");
}

#[test]
fn a_fork_forces_its_token_runs_only_that_token_and_continues_as_a_cold_run_would() {
    let mut engine = engine();
    let case = &reference().logit_cases["once"];
    let (parent, _) = run(&mut engine, greedy_request(&case.text, 8));
    let ids: Vec<u32> = parent.iter().map(|s| s.id).collect();
    // Fork at step 3: the parent's first two tokens, then step 3's second candidate.
    let at = 2;
    let alternative = parent[at].top[1].id;
    assert_ne!(alternative, ids[at]);
    let mut fork = greedy_request(&case.text, 8);
    fork.forced_tokens = [&ids[..at], &[alternative]].concat();
    let mut generation = engine.generate(fork.clone()).unwrap();
    let mut progress = Vec::new();
    let mut steps = Vec::new();
    while let Some(step) = pollster::block_on(generation.next_step_reporting(&mut |p| progress.push(p))).unwrap() {
        steps.push(step);
    }
    let warm = generation.result();
    // The cache held the prompt and the parent's tokens: only the forced token was run.
    let context = case.ids.len() + at + 1;
    assert_eq!(progress.last().map(|p| (p.done, p.total, p.cached)), Some((context, context, context - 1)));
    assert_eq!(steps[0].index, at + 1, "steps are numbered after the forced tokens");
    assert_eq!(steps.len(), 8 - (at + 1));
    assert_eq!(warm.usage.completion_tokens, 8);
    let output: Vec<u32> = fork.forced_tokens.iter().copied().chain(steps.iter().map(|s| s.id)).collect();
    assert_eq!(warm.text, engine.tokenizer().decode(&output), "the text begins with the forced tokens'");

    // A cold run of the same fork (nothing cached) gives the same tokens and logits.
    engine.clear_cache();
    let (cold, cold_result) = run(&mut engine, fork.clone());
    assert_eq!(cold.iter().map(|s| s.id).collect::<Vec<_>>(), steps.iter().map(|s| s.id).collect::<Vec<_>>());
    let worst = steps[0].top.iter().zip(&cold[0].top).map(|(a, b)| (a.logit - b.logit).abs()).fold(0.0, f32::max);
    assert!(worst < 1e-4, "the forked step's logits differ from a cold run's by {worst}");
    assert_eq!(cold_result.text, warm.text);

    // A forced end-of-generation token ends the fork before any step; a forced id outside the
    // vocabulary is refused.
    fork.forced_tokens = vec![ids[0], engine.tokenizer().end_of_generation_ids()[0]];
    let (none, ended) = run(&mut engine, fork.clone());
    assert!(none.is_empty());
    assert_eq!((ended.finish_reason, ended.usage.completion_tokens), (Some(FinishReason::Eos), 2));
    fork.forced_tokens = vec![49_152];
    assert_eq!(engine.generate(fork).err().expect("out of the vocabulary").code(), "bad-options");
}

#[test]
fn the_logit_lens_of_a_step_ends_on_its_distribution_and_reuses_the_cache() {
    use nucleus_engine::LensRequest;
    let mut engine = engine();
    let case = &reference().logit_cases["capital"];
    let (steps, _) = run(&mut engine, greedy_request(&case.text, 3));
    let prompt = Prompt::Text(case.text.clone());
    // Step 2: the context is the prompt and the first token, which the cache holds but for it.
    let request = LensRequest { prompt: prompt.clone(), generated: vec![steps[0].id], candidates: 5 };
    let lens = pollster::block_on(engine.logit_lens(&request)).unwrap();
    assert_eq!((lens.context_tokens, lens.cached_tokens), (case.ids.len() + 1, case.ids.len()));
    assert_eq!(lens.layers.len(), 30);
    assert_eq!(
        lens.candidates.iter().map(|c| c.id).collect::<Vec<_>>(),
        steps[1].top[..5].iter().map(|c| c.id).collect::<Vec<_>>()
    );
    let last = lens.layers.last().unwrap();
    for (i, candidate) in steps[1].top[..5].iter().enumerate() {
        assert!((last.probs[i] - candidate.logprob.exp()).abs() < 1e-5, "candidate {i}");
        assert_eq!(lens.candidates[i].prob, last.probs[i]);
    }
    assert_eq!(last.top.id, steps[1].id);
    // The first step's lens: " Paris" is the answer only near the top of the stack.
    let first =
        pollster::block_on(engine.logit_lens(&LensRequest { prompt, generated: vec![], candidates: 3 })).unwrap();
    assert_eq!(first.candidates[0].text, " Paris");
    assert_ne!(first.layers[0].top.text, " Paris");
    // The cache stays usable: the same greedy run again gives the same tokens.
    let (again, _) = run(&mut engine, greedy_request(&case.text, 3));
    assert_eq!(again.iter().map(|s| s.id).collect::<Vec<_>>(), steps.iter().map(|s| s.id).collect::<Vec<_>>());
    let bad = LensRequest { prompt: Prompt::Text("a".into()), generated: vec![], candidates: 0 };
    assert_eq!(pollster::block_on(engine.logit_lens(&bad)).unwrap_err().code(), "bad-options");
}

/// Scoring a greedy generation's prompt and output (as text, tokenized again to the same ids)
/// ranks every generated token first with the log-probability the generation reported, on the
/// CPU engine and the fused path, and the same given as the prompt and the generated ids; the
/// prompt's own tokens are rated too, the first one not; the total and the perplexity follow from
/// them; a generation after it reuses the scored text.
#[test]
fn scoring_a_greedy_generation_ranks_each_token_first_with_the_generations_logprobs() {
    use nucleus_engine::ScoreRequest;
    let case = &reference().logit_cases["capital"];
    let options = LoadOptions { context_length: Some(512), ..LoadOptions::default() };
    for device in [cpu_device(), wgpu_device()] {
        let mut engine = Engine::load(model_bytes(), &device, options).unwrap();
        let path = engine.info().path;
        let (steps, result) = run(&mut engine, greedy_request(&case.text, 12));
        let text = format!("{}{}", case.text, result.text);
        let report = pollster::block_on(engine.score(&ScoreRequest::new(Prompt::Text(text.clone())))).unwrap();
        let ids: Vec<u32> = report.tokens.iter().map(|t| t.id).collect();
        assert_eq!(ids, [case.ids.as_slice(), &steps.iter().map(|s| s.id).collect::<Vec<_>>()].concat(), "{path}");
        assert!(report.tokens[0].prob.is_none() && report.tokens[0].top.is_empty(), "{path}: nothing predicts it");
        for (step, scored) in steps.iter().zip(&report.tokens[case.ids.len()..]) {
            assert_eq!(scored.rank, Some(1), "{path}: step {}", step.index);
            let logprob = scored.logprob.unwrap();
            assert!(
                (logprob - step.logprob).abs() < 1e-4,
                "{path}: step {}: {logprob} vs {}",
                step.index,
                step.logprob
            );
            assert_eq!(scored.top.len(), 5);
            assert_eq!(scored.top[0].id, step.id);
        }
        let total: f64 = report.tokens.iter().filter_map(|t| t.logprob).sum();
        assert_eq!(report.predicted_tokens, ids.len() - 1);
        assert!((report.total_logprob - total).abs() < 1e-9);
        let perplexity = (-total / (ids.len() - 1) as f64).exp();
        assert!((report.perplexity.unwrap() - perplexity).abs() < 1e-9 * perplexity);
        // The same run given as the prompt and the generated ids (no tokenization of the output)
        // scores the same; every distribution has an entropy, 0 only where the model is certain.
        let generated = ScoreRequest {
            generated: steps.iter().map(|s| s.id).collect(),
            ..ScoreRequest::new(Prompt::Text(case.text.clone()))
        };
        let by_ids = pollster::block_on(engine.score(&generated)).unwrap();
        assert_eq!(by_ids.tokens, report.tokens, "{path}");
        assert!(report.tokens[1..].iter().all(|t| t.entropy.is_some_and(|h| h >= 0.0)), "{path}");
        // A prompt token the model did not expect is ranked below the first.
        assert!(report.tokens[1..case.ids.len()].iter().any(|t| t.rank > Some(1)), "{path}");
        // The scored text stays in the cache: the same greedy run gives the same tokens.
        let (again, _) = run(&mut engine, greedy_request(&case.text, 12));
        assert_eq!(again.iter().map(|s| s.id).collect::<Vec<_>>(), steps.iter().map(|s| s.id).collect::<Vec<_>>());
        let bad = ScoreRequest { top_k: 21, ..ScoreRequest::new(Prompt::Text(text.clone())) };
        assert_eq!(pollster::block_on(engine.score(&bad)).unwrap_err().code(), "bad-options");
    }
}

/// A prompt whose continuation repeats what it holds: prompt lookup drafts well on it.
const REPETITIVE: &str = "fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\nfn sub(a: i32, b: i32) -> i32 {\n    a - b\n}\n\n\
                          fn mul(a: i32, b: i32) -> i32 {\n";

/// Runs `request` plainly and with speculative decoding by prompt lookup, and checks what must
/// hold of any pair: the same tokens, text and finish reason, each step's raw log-probability and
/// candidates the same, and the draft reports adding up to the stats. Returns the speculative
/// run's stats.
fn same_with_speculation(engine: &mut Engine, request: GenerateRequest) -> nucleus_engine::SpeculationStats {
    let (plain, plain_result) = run(engine, request.clone());
    let speculative_request = GenerateRequest { speculative: Some(PromptLookup::default()), ..request };
    let (steps, result) = run(engine, speculative_request);
    let ids = |steps: &[Step]| steps.iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(ids(&steps), ids(&plain));
    assert_eq!((&result.text, &result.finish_reason), (&plain_result.text, &plain_result.finish_reason));
    for (a, b) in steps.iter().zip(&plain) {
        assert_eq!(a.index, b.index);
        assert!((a.logprob - b.logprob).abs() < 1e-4, "step {}: {} vs {}", a.index, a.logprob, b.logprob);
        assert_eq!(ids_of(&a.top), ids_of(&b.top), "step {}", a.index);
        assert_eq!(a.text, b.text);
    }
    let stats = result.speculation;
    assert_eq!(plain_result.speculation.verify_passes, 0);
    assert_eq!(plain_result.speculation.decode_passes, plain.len() - 1);
    // Each pass's report: the accepted drafts are the next steps' tokens, then one more token.
    let (mut drafted, mut accepted, mut passes) = (0, 0, 0);
    for (i, step) in steps.iter().enumerate() {
        let Some(report) = &step.draft else { continue };
        passes += 1;
        drafted += report.tokens.len();
        accepted += report.accepted;
        let verdicts: Vec<Verdict> = report.tokens.iter().map(|t| t.verdict).collect();
        assert!(verdicts[..report.accepted].iter().all(|&v| v == Verdict::Accepted), "{verdicts:?}");
        let yielded = &steps[i..(i + report.accepted + 1).min(steps.len())];
        for (token, step) in report.tokens.iter().zip(yielded).take(report.accepted) {
            assert_eq!(token.id, step.id);
        }
        if let Some(rejected) = report.tokens.get(report.accepted)
            && yielded.len() > report.accepted
        {
            assert_eq!(rejected.verdict, Verdict::Rejected);
            assert_ne!(rejected.id, yielded[report.accepted].id, "a rejected draft is replaced by another token");
        }
    }
    assert_eq!((passes, drafted, accepted), (stats.verify_passes, stats.drafted_tokens, stats.accepted_tokens));
    assert_eq!(stats.decode_passes, steps.len() - 1 - stats.accepted_tokens, "each accepted draft saves a pass");
    stats
}

fn ids_of(top: &[nucleus_engine::TopCandidate]) -> Vec<u32> {
    top.iter().map(|c| c.id).collect()
}

#[test]
fn speculative_greedy_decoding_gives_plain_decodings_tokens_in_fewer_passes() {
    let mut engine = engine();
    for (name, case) in &reference().logit_cases {
        let mut request = greedy_request(&case.text, case.greedy.len());
        request.speculative = Some(PromptLookup::default());
        let (steps, _) = run(&mut engine, request);
        assert_eq!(steps.iter().map(|s| s.id).collect::<Vec<_>>(), case.greedy, "{name}");
    }
    let stats =
        same_with_speculation(&mut engine, GenerateRequest { ignore_eos: true, ..greedy_request(REPETITIVE, 24) });
    assert!(stats.acceptance_rate > 0.5 && stats.tokens_per_pass > 1.5, "{stats:?}");
    // Penalties see each drafted position's own history.
    let mut penalised = greedy_request(REPETITIVE, 16);
    penalised.sampling.repetition_penalty = 1.3;
    same_with_speculation(&mut engine, penalised);
    // The cache was rolled back to the accepted tokens: the same prompt again reuses it and
    // gives the same tokens.
    let (again, result) = run(&mut engine, greedy_request(REPETITIVE, 16));
    let (cold, _) = run(&mut self::engine(), greedy_request(REPETITIVE, 16));
    assert!(result.usage.cached_prompt_tokens > 0);
    assert_eq!(again.iter().map(|s| s.id).collect::<Vec<_>>(), cold.iter().map(|s| s.id).collect::<Vec<_>>());
}

#[test]
fn speculative_decoding_on_the_fused_path_verifies_drafts_in_one_pass() {
    let options = LoadOptions { context_length: Some(256), ..LoadOptions::default() };
    let mut engine = Engine::load(model_bytes(), &wgpu_device(), options).unwrap();
    assert_eq!(engine.info().path, "fused");
    let mut request = GenerateRequest { ignore_eos: true, ..greedy_request(REPETITIVE, 20) };
    request.sampling.repetition_penalty = 1.1;
    let stats = same_with_speculation(&mut engine, request);
    assert!(stats.accepted_tokens > 0, "{stats:?}");
    // Sampled: the same seed gives the same tokens (the acceptance rule draws from the same stream).
    let sampled = |engine: &mut Engine| {
        let mut request = GenerateRequest::new(Prompt::Text(REPETITIVE.into()));
        request.max_tokens = 12;
        request.ignore_eos = true;
        request.sampling = SamplingParams { temperature: 0.7, seed: 11, ..SamplingParams::default() };
        request.speculative = Some(PromptLookup { max_draft: 6, ngram: 2 });
        run(engine, request).0.iter().map(|s| s.id).collect::<Vec<_>>()
    };
    assert_eq!(sampled(&mut engine), sampled(&mut engine));
}

/// A chat request constrained by `format`, sampled at T = 1 with `seed`.
fn constrained(message: &str, format: ResponseFormat, seed: u64, max_tokens: usize) -> GenerateRequest {
    let mut request = GenerateRequest::new(Prompt::Chat(vec![ChatMessage::user(message)]));
    request.max_tokens = max_tokens;
    request.sampling = SamplingParams { temperature: 1.0, seed, ..SamplingParams::default() };
    request.response_format = Some(format);
    request
}

/// The schema of the constrained JSON test: a string, an integer in a range and an enum.
fn person_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "name": { "type": "string", "maxLength": 12 },
            "age": { "type": "integer", "minimum": 18, "maximum": 99 },
            "colour": { "enum": ["red", "green", "blue"] }
        },
        "required": ["name", "age", "colour"],
        "additionalProperties": false
    })
}

/// Whether `value` is valid under [`person_schema`] (checked here by hand, independently of the
/// constraint engine).
fn is_person(value: &serde_json::Value) -> bool {
    let Some(object) = value.as_object() else { return false };
    let name = object.get("name").and_then(|n| n.as_str()).is_some_and(|n| n.chars().count() <= 12);
    let age = object.get("age").and_then(|a| a.as_i64()).is_some_and(|a| (18..=99).contains(&a));
    let colour = object.get("colour").and_then(|c| c.as_str()).is_some_and(|c| ["red", "green", "blue"].contains(&c));
    object.len() == 3 && name && age && colour
}

#[test]
fn twenty_sampled_generations_under_a_json_schema_all_parse_and_validate() {
    let mut engine = engine();
    for seed in 0..20 {
        let request =
            constrained("Describe a person as JSON.", ResponseFormat::JsonSchema { schema: person_schema() }, seed, 64);
        let (steps, result) = run(&mut engine, request);
        assert_eq!(result.finish_reason, Some(FinishReason::Complete), "seed {seed}: {:?}", result.text);
        let value: serde_json::Value =
            serde_json::from_str(&result.text).unwrap_or_else(|e| panic!("seed {seed}: {e}: {:?}", result.text));
        assert!(is_person(&value), "seed {seed}: {value}");
        assert!(steps.iter().all(|s| s.constraint.is_some()));
    }
}

#[test]
fn a_regex_is_matched_exactly_and_the_mask_is_the_grammars() {
    let mut engine = engine();
    // Sampled at T = 1: each output is a phone number and nothing else.
    for seed in 0..3 {
        let format = ResponseFormat::Regex { pattern: r"\d{3}-\d{4}".into() };
        let (_, result) = run(&mut engine, constrained("My phone number is", format, seed, 16));
        let text = result.text.as_bytes();
        assert_eq!(result.finish_reason, Some(FinishReason::Complete));
        assert!(
            text.len() == 8 && text[3] == b'-' && text.iter().enumerate().all(|(i, b)| i == 3 || b.is_ascii_digit()),
            "{:?}",
            result.text
        );
    }
    // The first step of `(yes|no)`: the allowed tokens are exactly those whose bytes begin
    // "yes" or "no" (found here by scanning the vocabulary).
    let format = ResponseFormat::Regex { pattern: "(yes|no)".into() };
    let mut request = constrained("Is the sky blue?", format, 1, 8);
    request.explain_top_n = 20;
    request.top_logprobs = 20;
    let (steps, result) = run(&mut engine, request);
    let tokenizer = engine.tokenizer();
    let expected: Vec<u32> = (0..tokenizer.vocab_size() as u32)
        .filter(|&id| {
            let bytes = tokenizer.token_bytes(id);
            !tokenizer.is_control(id) && !bytes.is_empty() && (b"yes".starts_with(bytes) || b"no".starts_with(bytes))
        })
        .collect();
    let report = steps[0].constraint.as_ref().unwrap();
    assert_eq!(report.allowed, expected.len(), "{expected:?}");
    let forbidden: Vec<u32> = steps[0].top.iter().map(|c| c.id).filter(|id| !expected.contains(id)).collect();
    assert_eq!(report.forbidden, forbidden);
    assert!(!forbidden.is_empty(), "the model's own top candidates include tokens the grammar forbids");
    // The raw top list stays the model's; the explanation marks the forbidden ones as masked.
    let plain = run(
        &mut engine,
        GenerateRequest { response_format: None, ..constrained("Is the sky blue?", ResponseFormat::JsonObject, 1, 1) },
    )
    .0;
    assert_eq!(ids_of(&steps[0].top), ids_of(&plain[0].top));
    let explained = &steps[0].explain.as_ref().unwrap().candidates;
    for candidate in explained {
        let masked = candidate.candidate.removed_by == Some(nucleus_sampler::RemovedBy::Mask);
        assert_eq!(masked, !expected.contains(&candidate.candidate.id), "{candidate:?}");
    }
    let removed = report.removed_mass.unwrap();
    let kept: f64 =
        expected.iter().map(|&id| plain[0].top.iter().find(|c| c.id == id).map_or(0.0, |c| c.logprob.exp())).sum();
    assert!(removed > 0.0 && removed <= 1.0 - kept + 1e-9, "{removed} vs kept {kept}");
    assert!(["yes", "no"].contains(&result.text.as_str()), "{:?}", result.text);
    assert_eq!(result.finish_reason, Some(FinishReason::Complete));
}

#[test]
fn a_bad_response_format_is_refused_before_any_token_and_an_unfinished_one_ends_with_length() {
    let mut engine = engine();
    for (format, kind) in [
        (ResponseFormat::JsonSchema { schema: serde_json::json!({ "type": "nonsense" }) }, "json_schema"),
        (ResponseFormat::Regex { pattern: "(unclosed".into() }, "regex"),
        (ResponseFormat::Grammar { lark: "start: undefined_rule".into() }, "grammar"),
    ] {
        let error = engine.generate(constrained("Hi", format, 0, 8)).err().expect(kind);
        assert_eq!(error.code(), "bad-options", "{error}");
        assert!(error.to_string().contains(&format!("the {kind} does not compile")), "{error}");
    }
    // Two tokens cannot make a phone number: the text so far, finish `length`.
    let format = ResponseFormat::Regex { pattern: r"\d{3}-\d{4}".into() };
    let (steps, result) = run(&mut engine, constrained("My phone number is", format, 0, 2));
    assert_eq!((steps.len(), result.finish_reason), (2, Some(FinishReason::Length)));
    assert!(!result.text.is_empty() && result.text.bytes().all(|b| b.is_ascii_digit()), "{:?}", result.text);
}

#[test]
fn a_constrained_step_on_the_gpu_decode_tail_masks_as_the_whole_row_does() {
    let options = LoadOptions { context_length: Some(256), ..LoadOptions::default() };
    let mut gpu = Engine::load(model_bytes(), &wgpu_device(), options).unwrap();
    let mut cpu = engine();
    let format = ResponseFormat::JsonSchema { schema: person_schema() };
    let request = GenerateRequest {
        sampling: SamplingParams { temperature: 0.8, top_p: 0.95, seed: 5, ..SamplingParams::default() },
        ..constrained("Describe a person as JSON.", format, 5, 24)
    };
    let (on_tail, tail_result) = run(&mut gpu, request.clone());
    let (on_cpu, _) = run(&mut cpu, request.clone());
    assert!(tail_result.transfer.tail_steps > 0, "{:?}", tail_result.transfer);
    assert_eq!(ids_of_steps(&on_tail), ids_of_steps(&on_cpu));
    for (a, b) in on_tail.iter().zip(&on_cpu) {
        let (a, b) = (a.constraint.as_ref().unwrap(), b.constraint.as_ref().unwrap());
        assert_eq!((a.allowed, &a.forbidden), (b.allowed, &b.forbidden));
        assert!(b.removed_mass.is_some(), "the whole row gives the mass the mask removed");
    }
    // At T = 0.8 the tail's statistics cannot give it (a step the tail could not settle read
    // its row, and has it).
    assert!(on_tail.iter().any(|s| s.constraint.as_ref().unwrap().removed_mass.is_none()));
    // At temperature 1 with the mask the only adjustment they can: the masked row's statistics
    // against the raw row's give the whole row's figure.
    let request = GenerateRequest {
        sampling: SamplingParams { temperature: 1.0, top_k: 40, seed: 5, ..SamplingParams::default() },
        ..request
    };
    let (on_tail, tail_result) = run(&mut gpu, request.clone());
    let (on_cpu, _) = run(&mut cpu, request);
    assert_eq!(tail_result.transfer.full_read_steps, 0, "{:?}", tail_result.transfer);
    assert_eq!(ids_of_steps(&on_tail), ids_of_steps(&on_cpu));
    for (a, b) in on_tail.iter().zip(&on_cpu) {
        let (a, b) = (a.constraint.as_ref().unwrap(), b.constraint.as_ref().unwrap());
        let (a, b) = (a.removed_mass.unwrap(), b.removed_mass.unwrap());
        assert!((a - b).abs() < 1e-4, "{a} on the tail, {b} from the row");
    }
}

fn ids_of_steps(steps: &[Step]) -> Vec<u32> {
    steps.iter().map(|s| s.id).collect()
}

/// A load is planned from the file's first bytes (the browser asks before downloading the rest):
/// a prefix that ends inside the header asks for more; the whole header gives the whole file's
/// plan; past a memory limit an asked context is refused naming the most that fits, and without
/// one the plan is for that many positions; a file larger than the limit is refused whatever the
/// context. The tiny Qwen3.5: its header holds a 248,320-token vocabulary.
#[test]
fn a_load_is_planned_from_the_files_first_bytes() {
    let (bytes, _) = nucleus_tests::tiny_family(nucleus_tests::TINY_QWEN35);
    let whole = nucleus_gguf::GgufFile::parse(&bytes).unwrap();
    let (header_len, file_len) = (whole.data_offset as usize, bytes.len() as u64);
    match GgufHeader::parse(&bytes[..header_len / 2], file_len) {
        Err(GgufError::Truncated { needed, len, .. }) => assert!(len == header_len as u64 / 2 && needed > len),
        other => panic!("half a header parsed: {other:?}"),
    }
    let header = GgufHeader::parse(&bytes[..header_len], file_len).unwrap();
    let (device, unasked) = (cpu_device(), LoadOptions::default());
    let planned = plan(&header, &device, &unasked, None).unwrap();
    assert_eq!(planned, plan(whole.header(), &device, &unasked, None).unwrap());
    assert_eq!((planned.path, planned.file_bytes, planned.context_length), ("cpu", file_len, 1024));
    assert!(planned.host_bytes > file_len + planned.kv_cache_bytes + planned.state_bytes, "{planned:?}");
    // A position costs its keys and values alone: the CPU engine computes a pass's RoPE rows.
    let half =
        plan(&header, &device, &LoadOptions { context_length: Some(512), ..LoadOptions::default() }, None).unwrap();
    assert_eq!(planned.host_bytes - half.host_bytes, planned.kv_cache_bytes - half.kv_cache_bytes);

    let limit = HostLimit { bytes: planned.host_bytes - 1, name: "the test's limit" };
    let asked = LoadOptions { context_length: Some(1024), ..LoadOptions::default() };
    let refused = plan(&header, &device, &asked, Some(limit)).unwrap_err();
    assert_eq!(refused.code(), "out-of-memory");
    assert!(
        refused.to_string().ends_with("more than the test's limit (31.8 MiB): contextLength 1023 or less would fit"),
        "{refused}"
    );
    let capped = plan(&header, &device, &unasked, Some(limit)).unwrap();
    assert_eq!((capped.context_length, capped.trained_context_length), (1023, 1024));
    assert!(capped.host_bytes <= limit.bytes);

    let smaller = HostLimit { bytes: file_len - 1, name: "the test's limit" };
    let too_big = plan(&header, &device, &unasked, Some(smaller)).unwrap_err();
    assert!(too_big.to_string().contains("does not fit in the test's limit"), "{too_big}");
}

/// The browser's WebGPU load reads its file a chunk at a time (`Engine::stream`): a model streamed
/// in chunks, its download starting again from the first byte half-way, is the model loaded whole
/// (the same tokens and logits, bit for bit, the same info), its weights written to the GPU piece
/// by piece (chunks of an odd length: pieces that end between a queue write's 4 bytes), holding
/// no more of the file at once than the largest tensor it takes whole. Llama 3 has RoPE factors
/// in a tensor of their own; Gemma 3 ties its output layer, norms its queries and keys and its
/// sub-layers' outputs.
#[test]
fn a_model_streamed_a_chunk_at_a_time_is_the_model_loaded_whole() {
    let device = wgpu_device();
    for name in ["llama3", "gemma3-linear"] {
        let (bytes, _) = tiny_family(name);
        let header = || GgufHeader::parse(&bytes, bytes.len() as u64).unwrap();
        let mut stream =
            Engine::stream(header(), &device, LoadOptions::default(), None).unwrap().expect("the fused path");
        // The blocks of quantized weights go to the GPU piece by piece (the largest, 9 to 11 KB,
        // over two or three chunks); the tensors the load converts (f16 to f32: the token
        // embedding, the largest) or keeps on the host (the norms) are staged, whole.
        let (quantized, converted): (Vec<_>, Vec<_>) = header()
            .tensors
            .into_iter()
            .partition(|t| !matches!(t.ggml_type, GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16));
        assert!(quantized.iter().any(|t| t.byte_len() > 2 * 4_099), "{name}");
        let staging = stream.staging_bytes();
        assert_eq!(staging, converted.iter().map(|t| t.byte_len()).max().unwrap(), "{name}");
        // The browser's plan (a host limit) counts the header and that staging, not the file: a
        // file larger than the limit streams.
        let limit = HostLimit { bytes: bytes.len() as u64 - 1, name: "the test's limit" };
        let planned = plan(&header(), &device, &LoadOptions::default(), Some(limit)).unwrap();
        assert_eq!((planned.path, planned.host_bytes), ("fused", header().data_offset + staging));
        let (half, chunk) = (bytes.len() / 2, 4_099);
        for (start, end) in [(0, half), (0, bytes.len())] {
            for offset in (start..end).step_by(chunk) {
                stream.read(offset as u64, &bytes[offset..(offset + chunk).min(end)]).unwrap();
            }
        }
        let progress = stream.progress();
        assert_eq!((progress.tensors_done, progress.bytes_done), (progress.tensors_total, progress.bytes_total));
        let mut streamed = stream.finish().unwrap();
        let mut whole = Engine::load(&bytes, &device, LoadOptions::default()).unwrap();
        assert_eq!(serde_json::to_string(streamed.info()).unwrap(), serde_json::to_string(whole.info()).unwrap());
        let mut request = greedy_request("Once upon a time", 8);
        request.ignore_eos = true;
        let (a, _) = run(&mut streamed, request.clone());
        let (b, _) = run(&mut whole, request);
        let logits = |steps: &[Step]| -> Vec<(u32, u32)> {
            steps.iter().flat_map(|s| s.top.iter().map(|c| (c.id, c.logit.to_bits()))).collect()
        };
        assert_eq!(logits(&a), logits(&b), "{name}");
    }
    // A file that ends before its last tensor is refused by what is missing; bytes after a gap
    // are refused as they come.
    let (bytes, _) = tiny_family("llama3");
    let header = || GgufHeader::parse(&bytes, bytes.len() as u64).unwrap();
    let mut short = Engine::stream(header(), &device, LoadOptions::default(), None).unwrap().unwrap();
    short.read(0, &bytes[..bytes.len() - 100]).unwrap();
    let error = short.finish().err().expect("a file cut short");
    assert!(error.to_string().contains("truncated"), "{error}");
    let mut gap = Engine::stream(header(), &device, LoadOptions::default(), None).unwrap().unwrap();
    assert!(gap.read(100, &bytes[100..200]).is_err());
    // The CPU engine reads its weights where they lie in the whole file: it does not stream.
    assert!(Engine::stream(header(), &cpu_device(), LoadOptions::default(), None).unwrap().is_none());
}
