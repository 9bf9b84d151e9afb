//! Finishing a step from the GPU's top-K candidates: whenever `decide_from_candidates` answers,
//! it must answer exactly what the full path would.

mod common;

use std::collections::BTreeMap;

use common::{adjusted, processed_order};
use nucleus_sampler::{
    CandidateRule, CandidateSet, OwnedCandidateSet, PenaltyHistory, SUM_EXP_RELATIVE_TOLERANCE, Sampler, SamplerError,
    SamplerRng, SamplingParams, adjust_logits, decide_from_candidates, process,
};

fn pick<T: Copy>(rng: &mut SamplerRng, items: &[T]) -> T {
    items[(rng.next_u64() % items.len() as u64) as usize]
}

/// Roughly normal, from the sum of four uniforms.
fn normalish(rng: &mut SamplerRng) -> f64 {
    (0..4).map(|_| rng.next_f64()).sum::<f64>() - 2.0
}

/// A random row: several shapes (flat, peaked, very peaked), quantised for ties sometimes,
/// with some -inf (occasionally almost all).
fn random_row(rng: &mut SamplerRng) -> Vec<f32> {
    let vocab = 50 + (rng.next_u64() % 4951) as usize;
    let scale = pick(rng, &[0.5, 1.0, 2.0, 4.0]);
    let mut row: Vec<f32> = (0..vocab).map(|_| (normalish(rng) * scale * 2.0) as f32).collect();
    // Peaks: a few tokens well above the rest.
    let peaks = pick(rng, &[0usize, 1, 2, 3, 8]);
    for _ in 0..peaks {
        let id = (rng.next_u64() % vocab as u64) as usize;
        row[id] += (4.0 + 10.0 * rng.next_f64()) as f32;
    }
    // Ties: round to halves.
    if rng.next_f64() < 0.3 {
        for x in &mut row {
            *x = (*x * 2.0).round() / 2.0;
        }
    }
    // -inf: none, some, or all but a few.
    let neg_inf = pick(rng, &[0.0, 0.0, 0.1, 0.5, 0.995]);
    for x in &mut row {
        if rng.next_f64() < neg_inf {
            *x = f32::NEG_INFINITY;
        }
    }
    if row.iter().all(|&x| x == f32::NEG_INFINITY) {
        row[0] = 0.0;
    }
    row
}

/// The candidate set as the GPU builds it: processed order, first K, max, and S in f32 (std
/// `exp` of `(x - max) * (1/T)` in f32, summed in one of several orders).
fn gpu_candidates(row: &[f32], k: usize, temperature: f64, order: u64) -> OwnedCandidateSet {
    let mut ids = processed_order(row);
    ids.truncate(k.min(row.len()));
    let adjusted_logits: Vec<f32> = ids.iter().map(|&id| row[id as usize] + 0.0).collect();
    let max = adjusted_logits[0];
    let sum_exp = if temperature == 0.0 {
        1.0
    } else {
        let inv_t = (1.0 / temperature) as f32;
        let terms: Vec<f32> =
            row.iter().map(|&x| if x == f32::NEG_INFINITY { 0.0 } else { ((x - max) * inv_t).exp() }).collect();
        match order % 3 {
            0 => terms.iter().sum(),
            1 => terms.iter().rev().sum(),
            // Blocks of 16 strided by 256, then the block sums in order (as the kernel does).
            _ => {
                let mut lanes = [0.0f32; 256];
                for (i, &t) in terms.iter().enumerate() {
                    lanes[i % 256] += t;
                }
                lanes.iter().sum()
            }
        }
    };
    OwnedCandidateSet { ids, adjusted_logits, max, sum_exp, vocab_size: row.len() }
}

#[derive(Default, Debug)]
struct Tally {
    cases: u64,
    decided: u64,
}

impl Tally {
    fn add(&mut self, decided: bool) {
        self.cases += 1;
        self.decided += u64::from(decided);
    }

    fn rate(&self) -> f64 {
        self.decided as f64 / self.cases.max(1) as f64
    }
}

#[test]
fn candidates_agree_with_the_full_path_whenever_they_decide() {
    let mut rng = SamplerRng::from_seed(2024);
    let mut tallies: BTreeMap<&'static str, Tally> = BTreeMap::new();
    let mut rules: BTreeMap<String, u64> = BTreeMap::new();
    let mut draws_checked = 0u64;
    let cases = 12_000;
    for case in 0..cases {
        let row = random_row(&mut rng);
        let params = SamplingParams {
            temperature: pick(&mut rng, &[0.0, 0.5, 0.8, 1.0, 1.5]),
            top_k: pick(&mut rng, &[0, 1, 5, 40]),
            top_p: pick(&mut rng, &[1.0, 0.9, 0.95, 0.5]),
            min_p: pick(&mut rng, &[0.0, 0.05, 0.1]),
            typical_p: pick(&mut rng, &[1.0, 0.9]),
            ..SamplingParams::default()
        };
        let k = pick(&mut rng, &[1, 20, 64, 256]);
        let owned = if case % 4 == 3 {
            OwnedCandidateSet::reference(&row, k, params.temperature).unwrap()
        } else {
            gpu_candidates(&row, k, params.temperature, rng.next_u64())
        };
        let mut owned = owned;
        if case % 3 == 1 {
            // An S off by up to 90% of the tolerated error (a worse GPU reduction): answers
            // may be fewer, never wrong.
            let error = (2.0 * rng.next_f64() - 1.0) * 0.9 * SUM_EXP_RELATIVE_TOLERANCE;
            owned.sum_exp = (f64::from(owned.sum_exp) * (1.0 + error)) as f32;
        }
        let set = owned.as_set();
        let full = process(&adjusted(&row), &params).unwrap();
        let decided = decide_from_candidates(&set, &params).unwrap();

        if let Some(dist) = &decided {
            assert_eq!(
                dist.kept_ids(),
                full.kept_ids(),
                "case {case}: kept ids differ ({:?}, k {k}, vocab {})",
                params,
                row.len()
            );
            for _ in 0..20 {
                let u = rng.next_f64();
                let id = dist.draw(u);
                assert_eq!(id, full.draw(u), "case {case}: draw({u}) differs");
                assert_eq!(dist.final_logprob(id), full.final_logprob(id));
                draws_checked += 1;
            }
            // Boundaries of [0, 1) too.
            for u in [0.0, 1.0 - f64::EPSILON] {
                assert_eq!(dist.draw(u), full.draw(u));
            }
            let argmax = full.argmax();
            assert_eq!(dist.argmax(), argmax);
            let p = dist.temperature_prob(argmax).unwrap();
            let expected = full.prob(argmax);
            assert!((p - expected).abs() <= 1e-4 * expected, "case {case}: temperature prob {p} vs {expected}");
            *rules.entry(format!("{:?}", dist.rule())).or_default() += 1;
        }

        // Classify the case.
        let finite = set.adjusted_logits.iter().filter(|x| x.is_finite()).count();
        let complete = finite < set.len() || set.len() == row.len();
        let is = decided.is_some();
        tallies.entry("all").or_default().add(is);
        if params.temperature == 0.0 {
            tallies.entry("greedy").or_default().add(is);
        } else if complete {
            tallies.entry("complete").or_default().add(is);
        } else if params.top_k > 0 && params.top_k <= set.len() {
            tallies.entry("top_k <= candidates").or_default().add(is);
        } else if params.top_p < 1.0 {
            // With top-k off: whether the candidates carry clearly more than top_p of the
            // row's mass (then the cut lies inside them, and only an S-rounding margin can make
            // it undecidable). With top_k > K the total top-p divides by (the top-k tokens'
            // weight) is not known from the candidates, so no rate is expected there.
            let candidate_mass: f64 = set.ids.iter().map(|&id| full.prob(id)).sum();
            let reachable = candidate_mass >= params.top_p + 1e-3;
            let name = match (params.top_k, params.top_p == 0.9, reachable) {
                (0, true, true) => "top_p 0.9, reachable",
                (0, false, true) => "other top_p, reachable",
                (0, _, false) => "top_p, not reachable",
                _ => "top_p, top_k > candidates",
            };
            tallies.entry(name).or_default().add(is);
        } else if params.min_p > 0.0 {
            tallies.entry("min_p only").or_default().add(is);
        } else if params.typical_p < 1.0 {
            tallies.entry("typical_p only").or_default().add(is);
            assert!(!is, "typical-p alone cannot be decided on an incomplete set");
        } else {
            tallies.entry("no truncation").or_default().add(is);
            assert!(!is, "no truncation cannot be decided on an incomplete set");
        }
    }
    for (name, tally) in &tallies {
        eprintln!("{name:>26}: {:>5}/{:<5} decidable ({:.1}%)", tally.decided, tally.cases, 100.0 * tally.rate());
    }
    eprintln!("rules: {rules:?}; draws checked: {draws_checked}");
    // Never trivially None.
    assert_eq!(tallies["greedy"].rate(), 1.0);
    assert_eq!(tallies["complete"].rate(), 1.0);
    assert_eq!(tallies["top_k <= candidates"].rate(), 1.0);
    assert!(tallies["top_p 0.9, reachable"].rate() > 0.9);
    assert!(tallies["other top_p, reachable"].rate() > 0.9);
    assert!(tallies["all"].rate() > 0.5);
}

#[test]
fn near_boundary_top_p_is_decided_exactly_or_not_at_all() {
    // Two dominant tokens whose mass sits right at top_p: the answer may be None but never
    // wrong, whatever S's rounding.
    let mut rng = SamplerRng::from_seed(7);
    let mut decided = 0;
    for case in 0..2000 {
        let vocab = 3000;
        let mut row: Vec<f32> = (0..vocab).map(|_| (normalish(&mut rng) - 6.0) as f32).collect();
        row[10] = 8.0;
        row[20] = 8.0 - (0.001 * f64::from(case % 100)) as f32;
        row[30] = 7.0;
        let params =
            SamplingParams { temperature: 1.0, top_p: pick(&mut rng, &[0.5, 0.9, 0.95]), ..SamplingParams::default() };
        let mut set = gpu_candidates(&row, 64, 1.0, rng.next_u64());
        let error = (2.0 * rng.next_f64() - 1.0) * 0.9 * SUM_EXP_RELATIVE_TOLERANCE;
        set.sum_exp = (f64::from(set.sum_exp) * (1.0 + error)) as f32;
        let full = process(&adjusted(&row), &params).unwrap();
        if let Some(dist) = decide_from_candidates(&set.as_set(), &params).unwrap() {
            decided += 1;
            assert_eq!(dist.kept_ids(), full.kept_ids(), "case {case}");
            for _ in 0..20 {
                let u = rng.next_f64();
                assert_eq!(dist.draw(u), full.draw(u));
            }
        }
    }
    assert!(decided > 1000, "decided {decided} of 2000");
}

/// A peaked row for step `step`: a few strong tokens that move with the step, a noisy tail;
/// every fourth row is flat (top-p then needs more than the candidates).
fn step_logits(rng: &mut SamplerRng, vocab: usize, step: usize) -> Vec<f32> {
    let flat = step % 4 == 3;
    let mut row: Vec<f32> = (0..vocab).map(|_| (normalish(rng) * if flat { 0.3 } else { 2.0 }) as f32).collect();
    if !flat {
        for j in 0..3 {
            let id = (step * 37 + j * 101) % vocab;
            row[id] += 9.0 - 2.0 * j as f32;
        }
    }
    row
}

#[test]
fn a_seeded_run_is_the_same_with_and_without_candidates() {
    let vocab = 2000;
    let params = SamplingParams { temperature: 0.8, top_p: 0.95, seed: 99, ..SamplingParams::default() };
    let mut with = Sampler::new(params.clone(), vocab).unwrap();
    let mut without = Sampler::new(params, vocab).unwrap();
    let mut rows = SamplerRng::from_seed(5);
    let (mut via_candidates, mut fallbacks) = (0, 0);
    for step in 0..32 {
        let logits = step_logits(&mut rows, vocab, step);
        let set = gpu_candidates(&logits, 64, 0.8, step as u64);
        let a = match with.sample_candidates(&set.as_set()).unwrap() {
            Some(step) => {
                via_candidates += 1;
                assert!(step.explanation.is_none());
                step
            }
            None => {
                fallbacks += 1;
                with.sample(&logits, None, 0).unwrap()
            }
        };
        let b = without.sample(&logits, None, 0).unwrap();
        assert_eq!(a.id, b.id, "step {step}");
        assert_eq!(a.uniform, b.uniform, "step {step}");
        assert_eq!(a.logprob, b.logprob, "step {step}");
        with.accept(a.id).unwrap();
        without.accept(b.id).unwrap();
    }
    eprintln!("{via_candidates} of 32 steps via candidates, {fallbacks} fallbacks");
    assert!(via_candidates > 0);
    assert!(fallbacks > 0, "the run should exercise the fallback too");
}

#[test]
fn a_penalised_run_with_gpu_adjustments_is_the_same() {
    // Dyadic logits and penalties, so the f32 adjustments are exact and the GPU path must
    // reproduce the full path bit for bit.
    let vocab = 1000;
    let params = SamplingParams {
        temperature: 1.0,
        top_k: 40,
        top_p: 0.9,
        min_p: 0.05,
        repetition_penalty: 2.0,
        presence_penalty: 0.5,
        frequency_penalty: 0.25,
        penalty_last_n: 8,
        penalize_prompt: true,
        logit_bias: [(3, 1.5), (7, f64::NEG_INFINITY)].into(),
        seed: 3,
        ..SamplingParams::default()
    };
    let mut with = Sampler::new(params.clone(), vocab).unwrap();
    let mut without = Sampler::new(params, vocab).unwrap();
    with.set_prompt(&[3, 5, 5, 9]).unwrap();
    without.set_prompt(&[3, 5, 5, 9]).unwrap();
    let mut rows = SamplerRng::from_seed(11);
    let mut via_candidates = 0;
    for step in 0..40 {
        let raw: Vec<f32> = (0..vocab)
            .map(|_| {
                let x = ((normalish(&mut rows) * 16.0).round() / 8.0) as f32;
                x + if rows.next_f64() < 0.01 { 6.0 } else { 0.0 }
            })
            .collect();
        let mut gpu = raw.clone();
        for adjustment in with.gpu_adjustments().unwrap() {
            gpu[adjustment.id as usize] = adjustment.apply(gpu[adjustment.id as usize]);
        }
        let set = gpu_candidates(&gpu, 64, 1.0, step);
        let a = match with.sample_candidates(&set.as_set()).unwrap() {
            Some(step) => {
                via_candidates += 1;
                step
            }
            None => with.sample(&raw, None, 0).unwrap(),
        };
        let b = without.sample(&raw, None, 0).unwrap();
        assert_eq!((a.id, a.uniform, a.logprob), (b.id, b.uniform, b.logprob));
        with.accept(a.id).unwrap();
        without.accept(b.id).unwrap();
    }
    assert!(via_candidates > 30, "{via_candidates} of 40 via candidates");
}

#[test]
fn gpu_adjustments_reproduce_stages_one_and_two() {
    let vocab = 300;
    let mut rng = SamplerRng::from_seed(17);
    for round in 0..20 {
        let row: Vec<f32> = (0..vocab).map(|_| (normalish(&mut rng) * 6.0) as f32).collect();
        let prompt: Vec<u32> = (0..12).map(|_| (rng.next_u64() % 40) as u32).collect();
        let generated: Vec<u32> = (0..round).map(|_| (rng.next_u64() % 40) as u32).collect();
        let params = SamplingParams {
            repetition_penalty: 1.3,
            presence_penalty: 0.4,
            frequency_penalty: 0.2,
            penalty_last_n: pick(&mut rng, &[0, 6, 64]),
            penalize_prompt: round % 2 == 0,
            logit_bias: [(1, 2.5), (2, -1.25), (5, f64::NEG_INFINITY), (250, 0.7)].into(),
            ..SamplingParams::default()
        };
        let mut sampler = Sampler::new(params.clone(), vocab).unwrap();
        sampler.set_prompt(&prompt).unwrap();
        for &id in &generated {
            sampler.accept(id).unwrap();
        }
        let adjustments = sampler.gpu_adjustments().unwrap();
        assert!(adjustments.windows(2).all(|w| w[0].id < w[1].id));
        let mut gpu = row.clone();
        for a in &adjustments {
            // The formula written out, not `apply`: this test is its check.
            let v = gpu[a.id as usize] + a.bias;
            let v = v * if v > 0.0 { a.scale_positive } else { a.scale_non_positive };
            gpu[a.id as usize] = v + a.offset;
            assert_eq!(gpu[a.id as usize], a.apply(row[a.id as usize]));
        }
        let history = PenaltyHistory { prompt: &prompt, generated: &generated };
        let full = adjust_logits(&row, &params, history, None).unwrap();
        for (id, (&g, &f)) in gpu.iter().zip(full.values()).enumerate() {
            if f == f64::NEG_INFINITY {
                assert_eq!(g, f32::NEG_INFINITY, "token {id}");
            } else {
                assert!((f64::from(g) - f).abs() <= 1e-5, "round {round}, token {id}: gpu {g} vs full {f}");
            }
        }
        // Something was actually adjusted beyond the bias.
        assert!(adjustments.len() > 4);
    }
}

#[test]
fn dry_makes_the_gpu_path_unavailable() {
    let params = SamplingParams { dry_multiplier: 0.8, ..SamplingParams::default() };
    let mut sampler = Sampler::new(params, 10).unwrap();
    assert!(!sampler.gpu_path_available());
    assert!(matches!(sampler.gpu_adjustments(), Err(SamplerError::GpuPathUnavailable { .. })));
    let set = CandidateSet { ids: &[0], adjusted_logits: &[1.0], max: 1.0, sum_exp: 1.0, vocab_size: 10 };
    assert!(matches!(sampler.sample_candidates(&set), Err(SamplerError::GpuPathUnavailable { .. })));
}

#[test]
fn none_consumes_no_random_number() {
    let params = SamplingParams { seed: 1, ..SamplingParams::default() };
    let mut sampler = Sampler::new(params.clone(), 100).unwrap();
    let row: Vec<f32> = (0..100).map(|i| (i % 7) as f32).collect();
    let set = gpu_candidates(&row, 20, 1.0, 0);
    // No truncation: undecidable.
    assert!(sampler.sample_candidates(&set.as_set()).unwrap().is_none());
    let after = sampler.rng_mut().next_u64();
    assert_eq!(after, SamplerRng::from_seed(1).next_u64());
    // Greedy: decided, and one number consumed.
    let mut greedy = Sampler::new(SamplingParams { temperature: 0.0, ..params }, 100).unwrap();
    let step = greedy.sample_candidates(&set.as_set()).unwrap().unwrap();
    assert_eq!(step.id, 6);
    assert_eq!(step.logprob, 0.0);
    let mut fresh = SamplerRng::from_seed(1);
    fresh.next_u64();
    assert_eq!(greedy.rng_mut().next_u64(), fresh.next_u64());
}

#[test]
fn complete_sets_give_exact_temperature_probs() {
    let row = [0.5f32, f32::NEG_INFINITY, 2.0, 2.0, -1.0];
    let params = SamplingParams { temperature: 0.7, typical_p: 0.5, ..SamplingParams::default() };
    let set = gpu_candidates(&row, 256, 0.7, 0);
    let dist = decide_from_candidates(&set.as_set(), &params).unwrap().unwrap();
    assert_eq!(dist.rule(), CandidateRule::Complete);
    let full = process(&adjusted(&row), &params).unwrap();
    for id in 0..5u32 {
        assert_eq!(dist.temperature_prob(id), Some(full.prob(id)));
        assert_eq!(dist.final_prob(id), full.final_prob(id));
    }
    // K = 3 of 4 finite: the -inf is not listed, so not complete; typical-p alone: None.
    let set = gpu_candidates(&row, 3, 0.7, 0);
    assert!(decide_from_candidates(&set.as_set(), &params).unwrap().is_none());
}

#[test]
fn top_p_set_right_at_a_cumulative_mass_is_never_decided_wrongly() {
    // top_p a hair below the mass of the first n tokens: the full path cuts at n, and an S
    // that is off by less than the tolerance would move the cut without the margins.
    let mut rng = SamplerRng::from_seed(31);
    let (mut near, mut near_decided, mut far, mut far_decided) = (0, 0, 0, 0);
    for case in 0..1500 {
        let vocab = 500 + (rng.next_u64() % 2500) as usize;
        let mut row: Vec<f32> = (0..vocab).map(|_| (normalish(&mut rng) * 2.0 - 4.0) as f32).collect();
        for j in 0..6 {
            row[(j * 97 + case) % vocab] += (8.0 - j as f64) as f32;
        }
        let temperature = pick(&mut rng, &[0.5, 1.0, 1.5]);
        let plain = process(&adjusted(&row), &SamplingParams { temperature, ..SamplingParams::default() }).unwrap();
        let mut set = gpu_candidates(&row, 64, temperature, rng.next_u64());
        let n = 1 + (rng.next_u64() % 40) as usize;
        let mass: f64 = set.ids[..n].iter().map(|&id| plain.prob(id)).sum();
        let gap = pick(&mut rng, &[1e-7, 1e-6, 1e-5, 1e-3]);
        let top_p = mass - gap;
        if !(top_p > 0.0 && mass < 0.999) {
            continue;
        }
        let sign = if rng.next_u64().is_multiple_of(2) { 1.0 } else { -1.0 };
        set.sum_exp = (f64::from(set.sum_exp) * (1.0 + sign * 0.9 * SUM_EXP_RELATIVE_TOLERANCE)) as f32;
        let params = SamplingParams { temperature, top_p, ..SamplingParams::default() };
        let full = process(&adjusted(&row), &params).unwrap();
        let decided = decide_from_candidates(&set.as_set(), &params).unwrap();
        if gap < 1e-4 {
            near += 1;
        } else {
            far += 1;
        }
        if let Some(dist) = decided {
            if gap < 1e-4 {
                near_decided += 1;
            } else {
                far_decided += 1;
            }
            assert_eq!(dist.kept_ids(), full.kept_ids(), "case {case}, gap {gap}");
            for _ in 0..20 {
                let u = rng.next_f64();
                assert_eq!(dist.draw(u), full.draw(u));
            }
        }
    }
    eprintln!("near the boundary: {near_decided}/{near} decided; far: {far_decided}/{far}");
    assert!(far_decided * 10 > far * 9, "{far_decided}/{far}");
}
