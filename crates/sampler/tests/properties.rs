//! Property tests: invariants that must hold for any logits and parameters.

mod common;

use common::{adjusted, processed_order};
use nucleus_sampler::{Sampler, SamplingParams, StopStreamer, explain, process};
use proptest::prelude::*;

fn logits_strategy() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-30.0f32..30.0, 1..300)
}

/// Small integer logits, so ties are common.
fn tied_logits_strategy() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec((-3i32..4).prop_map(|x| x as f32), 1..40)
}

fn params_strategy() -> impl Strategy<Value = SamplingParams> {
    (
        0.05f64..4.0,
        0usize..12,
        prop_oneof![Just(1.0), 0.01f64..1.0],
        prop_oneof![Just(0.0), 0.0f64..0.6],
        prop_oneof![Just(1.0), 0.05f64..1.0],
        any::<u64>(),
    )
        .prop_map(|(temperature, top_k, top_p, min_p, typical_p, seed)| SamplingParams {
            temperature,
            top_k,
            top_p,
            min_p,
            typical_p,
            seed,
            ..Default::default()
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn probabilities_sum_to_one(logits in logits_strategy(), params in params_strategy()) {
        let a = adjusted(&logits);
        let dist = process(&a, &params).unwrap();
        let probs = dist.probs();
        let finals = dist.final_probs();
        prop_assert!(probs.iter().chain(&finals).all(|&p| (0.0..=1.0).contains(&p)));
        prop_assert!((probs.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        prop_assert!((finals.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        prop_assert!(!dist.kept_ids().is_empty());
        prop_assert!(dist.entropy() >= 0.0 && dist.entropy() <= (logits.len() as f64).ln() + 1e-9);

        // The explanation agrees with the distribution.
        let chosen = dist.draw(0.5);
        prop_assert!(dist.is_kept(chosen));
        let e = explain(&logits, &a, &dist, chosen, 20).unwrap();
        prop_assert!(e.candidates.windows(2).all(|w| w[0].rank < w[1].rank));
        prop_assert!(e.candidates.windows(2).all(|w| w[0].cumulative <= w[1].cumulative + 1e-15));
        prop_assert!(e.candidates.iter().all(|c| c.kept == dist.is_kept(c.id)));
        prop_assert!(e.mass_outside >= 0.0 && e.mass_outside <= 1.0);
        prop_assert_eq!(e.chosen.id, chosen);
    }

    #[test]
    fn top_p_keeps_the_smallest_prefix_reaching_p(logits in logits_strategy(), top_p in 0.01f64..1.0) {
        let params = SamplingParams { top_p, ..Default::default() };
        let dist = process(&adjusted(&logits), &params).unwrap();
        let order = processed_order(&logits);
        let n = dist.kept_ids().len();
        // The kept set is a prefix of the processed order...
        let mut prefix = order[..n].to_vec();
        prefix.sort_unstable();
        prop_assert_eq!(prefix.as_slice(), dist.kept_ids());
        // ...whose mass reaches p, while one token fewer does not.
        let mass: f64 = order[..n].iter().map(|&id| dist.prob(id)).sum();
        prop_assert!(mass >= top_p - 1e-12, "mass {} < p {}", mass, top_p);
        let without_last = mass - dist.prob(order[n - 1]);
        prop_assert!(n == 1 || without_last < top_p + 1e-12, "{} tokens already reach p", n - 1);
    }

    #[test]
    fn truncations_only_remove(logits in logits_strategy(), params in params_strategy()) {
        let a = adjusted(&logits);
        let untruncated = process(&a, &SamplingParams { temperature: params.temperature, ..Default::default() }).unwrap();
        let dist = process(&a, &params).unwrap();
        prop_assert_eq!(untruncated.kept_ids().len(), logits.len());
        // Survivors keep their relative probabilities: final / prob is one constant.
        let ratios: Vec<f64> = dist
            .kept_ids()
            .iter()
            .filter(|&&id| dist.prob(id) > 0.0)
            .map(|&id| dist.final_prob(id) / dist.prob(id))
            .collect();
        for r in &ratios {
            prop_assert!((r / ratios[0] - 1.0).abs() < 1e-9);
            prop_assert!(*r >= 1.0 - 1e-12, "renormalising never lowers a survivor");
        }
        // Adding a filter never brings a token back.
        let fewer_filters = SamplingParams { typical_p: 1.0, min_p: 0.0, ..params.clone() };
        let wider = process(&a, &fewer_filters).unwrap();
        for id in dist.kept_ids() {
            prop_assert!(wider.is_kept(*id));
        }
        let top_k_only = SamplingParams { top_p: 1.0, typical_p: 1.0, min_p: 0.0, ..params.clone() };
        let widest = process(&a, &top_k_only).unwrap();
        for id in wider.kept_ids() {
            prop_assert!(widest.is_kept(*id));
        }
    }

    #[test]
    fn greedy_equals_argmax(logits in tied_logits_strategy(), seed in any::<u64>(), t in 0.1f64..3.0) {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let argmax = logits.iter().position(|&z| z == max).unwrap() as u32;
        let mut greedy = Sampler::new(SamplingParams { seed, ..SamplingParams::greedy() }, logits.len()).unwrap();
        prop_assert_eq!(greedy.sample(&logits, None, 0).unwrap().id, argmax);
        // top-k 1 is greedy at any temperature.
        let params = SamplingParams { seed, temperature: t, top_k: 1, ..Default::default() };
        let mut top1 = Sampler::new(params, logits.len()).unwrap();
        prop_assert_eq!(top1.sample(&logits, None, 0).unwrap().id, argmax);
    }

    #[test]
    fn streamer_emitted_plus_held_is_the_text_up_to_the_stop(
        pieces in prop::collection::vec(prop::sample::select(vec!["a", "b", "U", "s", "e", "r", ":", " ", "\n", "é", "€", "😀"]), 0..40),
        stops in prop::collection::vec(
            prop::collection::vec(prop::sample::select(vec!["a", "b", "U", "s", ":", "é", "€", "😀", "\n"]), 1..4).prop_map(|v| v.concat()),
            0..3),
        cuts in prop::collection::vec(0usize..6, 0..60),
    ) {
        let text: String = pieces.concat();
        let bytes = text.as_bytes();
        // Reference: the stop that completes first (smallest end, then earliest start).
        let mut first_stop: Option<(usize, usize)> = None; // (end, start)
        for stop in &stops {
            let s = stop.as_bytes();
            if let Some(start) = bytes.windows(s.len()).position(|w| w == s) {
                let candidate = (start + s.len(), start);
                if first_stop.is_none_or(|f| candidate < f) {
                    first_stop = Some(candidate);
                }
            }
        }

        // Split the bytes at arbitrary places (possibly inside a character).
        let mut chunks: Vec<&[u8]> = Vec::new();
        let mut at = 0;
        for cut in cuts {
            if at >= bytes.len() { break; }
            let end = (at + cut).min(bytes.len());
            chunks.push(&bytes[at..end]);
            at = end;
        }
        chunks.push(&bytes[at..]);

        let mut streamer = StopStreamer::new(&stops);
        let mut emitted = String::new();
        let mut pushed = 0usize;
        let mut stopped = false;
        for chunk in chunks {
            let out = streamer.push(chunk);
            pushed += chunk.len();
            prop_assert!(!out.text.contains('\u{FFFD}'), "half a character was streamed");
            emitted.push_str(&out.text);
            if out.stop.is_some() {
                stopped = true;
                break;
            }
            // Before a stop: emitted + held is exactly what was pushed.
            let mut joined = emitted.as_bytes().to_vec();
            joined.extend_from_slice(streamer.held_bytes());
            prop_assert_eq!(joined.as_slice(), &bytes[..pushed]);
            // What is held could still start a stop string or complete a character, and no
            // more than that is held.
            let held = streamer.held_bytes();
            let stop_prefix = stops.iter().map(|s| {
                let s = s.as_bytes();
                (0..s.len()).rev().find(|&k| bytes[..pushed].ends_with(&s[..k])).unwrap_or(0)
            }).max().unwrap_or(0);
            let partial_char = std::str::from_utf8(&bytes[..pushed]).err().map_or(0, |e| pushed - e.valid_up_to());
            prop_assert_eq!(held.len(), stop_prefix.max(partial_char));
        }
        match first_stop {
            Some((_, start)) => {
                prop_assert!(stopped);
                prop_assert_eq!(emitted.as_str(), &text[..start]);
            }
            None => {
                prop_assert!(!stopped);
                emitted.push_str(&streamer.finish());
                prop_assert_eq!(emitted, text);
            }
        }
    }
}
