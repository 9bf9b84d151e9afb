//! Beam search: deterministic, model-agnostic, with its search tree as data.
//!
//! The caller drives it: [`BeamSearch::live_beams`] lists the live beams, the caller runs its
//! model on each and passes one row of log-probabilities per beam to [`BeamSearch::step`]
//! (use [`crate::math::log_softmax`] on logits). [`beam_search`] does the loop for a
//! per-sequence closure.
//!
//! # Rules
//!
//! * Live beams are ranked by their summed log-probability; finished hypotheses by
//!   `score = logprob / len^α` (`len` = generated tokens including the end token, `α` =
//!   `length_penalty`; α > 0 favours longer sequences, α < 0 shorter ones).
//! * Each step considers the `B·(1 + number of end ids)` best continuations over all beams
//!   (ties: lower beam index, then lower token id). Walking them best first: an end token ranked
//!   among the first `B` finishes a hypothesis (one ranked lower is pruned, as in Hugging Face);
//!   any other token becomes a live beam until there are `B`; the rest are pruned.
//! * At most the best `B` finished hypotheses are kept. The search ends when no beam is live,
//!   when `max_new_tokens` is reached (live beams then finish with reason "length"), or when `B`
//!   hypotheses are finished and no live beam can still beat the worst of them (the exact
//!   bound: log-probabilities only decrease, and the best length factor is the maximum length
//!   for α > 0, the next length for α <= 0).

use serde::Serialize;

use crate::error::{SamplerError, out_of_range};
use crate::math::{exp, ln, top_k_ids};
use crate::stop::FinishReason;

/// Beam search settings.
#[derive(Debug, Clone, PartialEq)]
pub struct BeamSearchParams {
    /// Number of beams `B`, >= 1.
    pub beam_width: usize,
    /// Length penalty `α` (finite): hypothesis score is `logprob / len^α`.
    pub length_penalty: f64,
    /// Longest generation, >= 1.
    pub max_new_tokens: usize,
    /// End-of-generation token ids.
    pub eos_token_ids: Vec<u32>,
}

impl BeamSearchParams {
    /// Checks the ranges; errors name the CLI parameter (`beams`, `length_penalty`, ...).
    pub fn validate(&self) -> Result<(), SamplerError> {
        if self.beam_width == 0 {
            return Err(out_of_range("beams", ">= 1", 0));
        }
        if !self.length_penalty.is_finite() {
            return Err(out_of_range("length_penalty", "finite", self.length_penalty));
        }
        if self.max_new_tokens == 0 {
            return Err(out_of_range("max_new_tokens", ">= 1", 0));
        }
        Ok(())
    }
}

/// `len^α`, portable.
fn length_factor(len: usize, alpha: f64) -> f64 {
    if alpha == 0.0 {
        1.0
    } else if alpha == 1.0 {
        len as f64
    } else {
        exp(alpha * ln(len as f64))
    }
}

/// What became of a node of the search tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeStatus {
    /// The empty sequence the search starts from.
    Root,
    /// Became a live beam at its step.
    Kept,
    /// Considered and not kept (or a finished hypothesis later pushed out of the best `B`, or a
    /// live beam abandoned when the search ended early).
    Pruned,
    /// A finished hypothesis among the results.
    Finished,
}

/// One node of the search tree: a sequence that was considered.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BeamNode {
    /// Index in [`BeamTrace::nodes`].
    pub id: usize,
    /// The node it extends (`None` for the root).
    pub parent: Option<usize>,
    /// Step at which it was considered (0 for the root, then 1, 2, ...).
    pub step: usize,
    /// The token it appends (`None` for the root).
    pub token: Option<u32>,
    /// Log-probability of that token.
    pub token_logprob: f64,
    /// Summed log-probability of the sequence.
    pub logprob: f64,
    /// Length-penalised score, for finished hypotheses.
    pub score: Option<f64>,
    /// What became of it.
    pub status: NodeStatus,
}

/// The node ids decided at one step.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct BeamStepTrace {
    /// The step (1-based).
    pub step: usize,
    /// New live beams.
    pub kept: Vec<usize>,
    /// New finished hypotheses.
    pub finished: Vec<usize>,
    /// Considered and pruned.
    pub pruned: Vec<usize>,
}

/// The whole search tree, for a visualisation.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct BeamTrace {
    /// Every considered sequence; node 0 is the root.
    pub nodes: Vec<BeamNode>,
    /// Per-step decisions.
    pub steps: Vec<BeamStepTrace>,
}

/// A live beam.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Beam {
    /// Generated tokens so far.
    pub tokens: Vec<u32>,
    /// Summed log-probability.
    pub logprob: f64,
    /// Its node in the trace.
    pub node: usize,
}

/// A finished hypothesis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hypothesis {
    /// Generated tokens, including the end token when it finished by one.
    pub tokens: Vec<u32>,
    /// Summed log-probability.
    pub logprob: f64,
    /// `logprob / len^α`.
    pub score: f64,
    /// `eos` or `length`.
    pub finish_reason: FinishReason,
    /// Its node in the trace.
    pub node: usize,
}

/// What [`BeamSearch::finish`] and [`beam_search`] return.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BeamSearchResult {
    /// The best hypotheses (at most `B`), best score first.
    pub hypotheses: Vec<Hypothesis>,
    /// The search tree.
    pub trace: BeamTrace,
}

/// A beam search in progress; see the module doc.
#[derive(Debug, Clone)]
pub struct BeamSearch {
    params: BeamSearchParams,
    live: Vec<Beam>,
    finished: Vec<Hypothesis>,
    trace: BeamTrace,
    step: usize,
    done: bool,
}

impl BeamSearch {
    /// Starts a search from the empty sequence (one live beam).
    pub fn new(params: BeamSearchParams) -> Result<Self, SamplerError> {
        params.validate()?;
        let root = BeamNode {
            id: 0,
            parent: None,
            step: 0,
            token: None,
            token_logprob: 0.0,
            logprob: 0.0,
            score: None,
            status: NodeStatus::Root,
        };
        Ok(Self {
            params,
            live: vec![Beam { tokens: Vec::new(), logprob: 0.0, node: 0 }],
            finished: Vec::new(),
            trace: BeamTrace { nodes: vec![root], steps: Vec::new() },
            step: 0,
            done: false,
        })
    }

    /// The live beams, in rank order; [`Self::step`] wants one row per beam, in this order.
    pub fn live_beams(&self) -> &[Beam] {
        &self.live
    }

    /// Whether the search has ended.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The finished hypotheses so far, best first.
    pub fn finished(&self) -> &[Hypothesis] {
        &self.finished
    }

    /// Advances one step. `log_probs[b]` holds the log-probability of every token after live
    /// beam `b` (all rows the same length; finite or -inf). Does nothing once done.
    pub fn step<R: AsRef<[f32]>>(&mut self, log_probs: &[R]) -> Result<(), SamplerError> {
        if self.done {
            return Ok(());
        }
        if log_probs.len() != self.live.len() {
            return Err(SamplerError::LengthMismatch {
                what: "beam search rows (one per live beam)",
                expected: self.live.len(),
                got: log_probs.len(),
            });
        }
        let vocab_size = log_probs.first().map_or(0, |r| r.as_ref().len());
        for row in log_probs {
            let row = row.as_ref();
            if row.len() != vocab_size {
                return Err(SamplerError::LengthMismatch {
                    what: "beam search row length",
                    expected: vocab_size,
                    got: row.len(),
                });
            }
            crate::math::validate_logits(row)?;
        }
        for &eos in &self.params.eos_token_ids {
            if eos as usize >= vocab_size {
                return Err(SamplerError::TokenOutOfVocabulary { id: eos, vocab_size });
            }
        }

        let width = self.params.beam_width;
        let considered = width * (1 + self.params.eos_token_ids.len());
        // (score, beam index, token, token log-prob)
        let mut candidates: Vec<(f64, usize, u32, f64)> = Vec::new();
        for (b, row) in log_probs.iter().enumerate() {
            let row = row.as_ref();
            for id in top_k_ids(row, considered) {
                let lp = f64::from(row[id as usize]);
                if lp > f64::NEG_INFINITY {
                    candidates.push((self.live[b].logprob + lp, b, id, lp));
                }
            }
        }
        candidates.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
        candidates.truncate(considered);

        self.step += 1;
        let length = self.step;
        let mut trace = BeamStepTrace { step: length, ..BeamStepTrace::default() };
        let mut next_live: Vec<Beam> = Vec::new();
        for (rank, &(logprob, b, token, token_logprob)) in candidates.iter().enumerate() {
            let parent = &self.live[b];
            let node = self.trace.nodes.len();
            let is_eos = self.params.eos_token_ids.contains(&token);
            let mut tokens = parent.tokens.clone();
            tokens.push(token);
            let (status, score) = if is_eos {
                if rank < width {
                    let score = logprob / length_factor(length, self.params.length_penalty);
                    self.finished.push(Hypothesis { tokens, logprob, score, finish_reason: FinishReason::Eos, node });
                    trace.finished.push(node);
                    (NodeStatus::Finished, Some(score))
                } else {
                    trace.pruned.push(node);
                    (NodeStatus::Pruned, None)
                }
            } else if next_live.len() < width {
                next_live.push(Beam { tokens, logprob, node });
                trace.kept.push(node);
                (NodeStatus::Kept, None)
            } else {
                trace.pruned.push(node);
                (NodeStatus::Pruned, None)
            };
            self.trace.nodes.push(BeamNode {
                id: node,
                parent: Some(parent.node),
                step: length,
                token: Some(token),
                token_logprob,
                logprob,
                score,
                status,
            });
        }
        self.live = next_live;

        if length >= self.params.max_new_tokens {
            for beam in std::mem::take(&mut self.live) {
                let score = beam.logprob / length_factor(length, self.params.length_penalty);
                let node = &mut self.trace.nodes[beam.node];
                node.status = NodeStatus::Finished;
                node.score = Some(score);
                self.finished.push(Hypothesis {
                    tokens: beam.tokens,
                    logprob: beam.logprob,
                    score,
                    finish_reason: FinishReason::Length,
                    node: beam.node,
                });
            }
            self.done = true;
        }
        self.keep_best_finished();
        self.trace.steps.push(trace);

        if self.live.is_empty() {
            self.done = true;
        } else if !self.done && self.finished.len() >= width {
            let worst = self.finished.last().map_or(f64::NEG_INFINITY, |h| h.score);
            let best_length = if self.params.length_penalty > 0.0 { self.params.max_new_tokens } else { length + 1 };
            let factor = length_factor(best_length, self.params.length_penalty);
            let attainable = self.live.iter().map(|b| b.logprob / factor).fold(f64::NEG_INFINITY, f64::max);
            if worst >= attainable {
                for beam in std::mem::take(&mut self.live) {
                    self.trace.nodes[beam.node].status = NodeStatus::Pruned;
                }
                self.done = true;
            }
        }
        Ok(())
    }

    /// Sorts the finished hypotheses best first and drops all but the best `B`.
    fn keep_best_finished(&mut self) {
        self.finished.sort_by(|x, y| y.score.total_cmp(&x.score).then(x.node.cmp(&y.node)));
        for dropped in self.finished.drain(self.params.beam_width.min(self.finished.len())..) {
            self.trace.nodes[dropped.node].status = NodeStatus::Pruned;
        }
    }

    /// Ends the search (whether or not it is done) and returns the best hypotheses and the
    /// trace. Live beams of an unfinished search are not included.
    pub fn finish(self) -> BeamSearchResult {
        BeamSearchResult { hypotheses: self.finished, trace: self.trace }
    }
}

/// Runs a whole beam search. `next_log_probs(tokens)` returns the log-probabilities of the
/// next token after the generated `tokens` (the prompt is the closure's business).
pub fn beam_search<E, F>(params: BeamSearchParams, mut next_log_probs: F) -> Result<BeamSearchResult, E>
where
    F: FnMut(&[u32]) -> Result<Vec<f32>, E>,
    E: From<SamplerError>,
{
    let mut search = BeamSearch::new(params)?;
    while !search.is_done() {
        let rows =
            search.live_beams().iter().map(|beam| next_log_probs(&beam.tokens)).collect::<Result<Vec<_>, E>>()?;
        search.step(&rows)?;
    }
    Ok(search.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u32 = 0;
    const B: u32 = 1;
    const C: u32 = 2;
    const X: u32 = 3;
    const EOS: u32 = 5;

    /// The toy model where greedy loses: A (.40) then at best .50; B (.35) then .90.
    fn toy(tokens: &[u32]) -> Result<Vec<f32>, SamplerError> {
        let probs: [f32; 6] = match tokens {
            [] => [0.40, 0.35, 0.25, 0.0, 0.0, 0.0],
            [A] => [0.0, 0.0, 0.0, 0.50, 0.30, 0.20],
            [B] => [0.0, 0.0, 0.0, 0.90, 0.10, 0.0],
            [C] => [0.0, 0.0, 0.0, 0.40, 0.40, 0.20],
            _ => [0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
        };
        Ok(probs.iter().map(|p| p.ln()).collect())
    }

    fn params(width: usize) -> BeamSearchParams {
        BeamSearchParams { beam_width: width, length_penalty: 1.0, max_new_tokens: 10, eos_token_ids: vec![EOS] }
    }

    #[test]
    fn beam_two_finds_what_greedy_misses() {
        let greedy = beam_search(params(1), toy).unwrap();
        assert_eq!(greedy.hypotheses.len(), 1);
        assert_eq!(greedy.hypotheses[0].tokens, vec![A, X, EOS]);
        assert!((greedy.hypotheses[0].logprob.exp() - 0.20).abs() < 1e-6);

        let beam = beam_search(params(2), toy).unwrap();
        let best = &beam.hypotheses[0];
        assert_eq!(best.tokens, vec![B, X, EOS]);
        assert!((best.logprob.exp() - 0.315).abs() < 1e-6);
        assert_eq!(best.finish_reason, FinishReason::Eos);
        assert!((best.score - best.logprob / 3.0).abs() < 1e-12);
        assert_eq!(beam.hypotheses[1].tokens, vec![A, X, EOS]);

        // The tree: step 1 keeps A and B and prunes C; step 2 keeps B X and A X.
        let step1 = &beam.trace.steps[0];
        let token = |n: usize| beam.trace.nodes[n].token.unwrap();
        assert_eq!(step1.kept.iter().map(|&n| token(n)).collect::<Vec<_>>(), vec![A, B]);
        assert_eq!(step1.pruned.iter().map(|&n| token(n)).collect::<Vec<_>>(), vec![C]);
        let step2 = &beam.trace.steps[1];
        let kept2: Vec<Vec<u32>> =
            step2.kept.iter().map(|&n| vec![token(beam.trace.nodes[n].parent.unwrap()), token(n)]).collect();
        assert_eq!(kept2, vec![vec![B, X], vec![A, X]]);
        assert_eq!(beam.trace.nodes[0].status, NodeStatus::Root);
        let json = serde_json::to_string(&beam.trace).unwrap();
        assert!(json.contains("\"status\":\"pruned\""));
    }

    #[test]
    fn length_limit_finishes_live_beams() {
        let p = BeamSearchParams { max_new_tokens: 2, ..params(2) };
        let result = beam_search(p, toy).unwrap();
        assert_eq!(result.hypotheses[0].tokens, vec![B, X]);
        assert_eq!(result.hypotheses[0].finish_reason, FinishReason::Length);
        assert_eq!(result.hypotheses.len(), 2);
    }

    #[test]
    fn length_penalty_changes_the_winner() {
        // A short hypothesis (EOS at once, p = .3) against a long one (.6 then .6 then EOS).
        let model = |tokens: &[u32]| -> Result<Vec<f32>, SamplerError> {
            let probs: [f32; 3] = match tokens.len() {
                0 => [0.7, 0.0, 0.3],
                1 | 2 => [0.6, 0.4, 0.0],
                _ => [0.0, 0.0, 1.0],
            };
            Ok(probs.iter().map(|p| p.ln()).collect())
        };
        let run = |alpha: f64| {
            let p =
                BeamSearchParams { beam_width: 2, length_penalty: alpha, max_new_tokens: 6, eos_token_ids: vec![2] };
            beam_search(p, model).unwrap().hypotheses[0].tokens.clone()
        };
        // Raw: .3 vs .7·.6·.6 = .252: the short one wins without a length penalty...
        assert_eq!(run(0.0), vec![2]);
        // ...and the long one wins once scores are divided by length.
        assert_eq!(run(1.0), vec![0, 0, 0, 2]);
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(BeamSearch::new(params(0)).unwrap_err().to_string(), "beams must be >= 1, got 0");
        let mut search = BeamSearch::new(params(2)).unwrap();
        assert!(search.step(&[vec![0.0f32; 6], vec![0.0; 6]]).is_err());
        assert!(search.step(&[vec![f32::NAN; 6]]).is_err());
        assert!(search.step(&[vec![0.0f32; 3]]).is_err(), "EOS id outside the rows");
    }
}
