//! What a recurrent block remembers, and how a cache that cannot forget rows goes back.
//!
//! An attention block's cache is rows per position: going back to position `p` is forgetting
//! the rows after it. A Gated DeltaNet block's is a fixed-size state that every token rewrites
//! (its last `kernel − 1` inputs to the convolution and a matrix per value head): the state at
//! an earlier position cannot be recovered from the state now. So a cache with recurrent blocks
//! keeps [`Checkpoints`]: copies of the state at a few positions. Going back to `p` restores
//! the latest checkpoint at or before `p` (position 0 is the zero state, always there), and the
//! engine runs the tokens between again: nothing after the checkpoint is trusted, and a
//! rejected draft never leaves its writes in the state. Two kinds:
//! - *kept*: where the engine asks, during a prefill: before the context's last token (a
//!   repeated prompt or a fork goes back there) and where a chat's conversation so far ends
//!   (its next turn goes back there); at most [`MAX_CHECKPOINTS`], the oldest dropped first;
//! - *rollback*: one, taken by the model before every pass of more than one token (a
//!   speculative verification pass, a prefill chunk), replaced by the next: a rejected draft
//!   goes back to it.
//!
//! What it costs: each checkpoint is one copy of every recurrent block's state (18.6 MiB for
//! Qwen3.5-0.8B: 18 blocks of 1 MiB of matrices and 72 KiB of convolution inputs), at most
//! `MAX_CHECKPOINTS + 1` of them; and going back runs again the tokens between the checkpoint
//! and the position asked for, at prefill speed (a rejected draft: the accepted ones, at most a
//! draft's length; a chat's next turn: the previous generation prompt and answer). The engine
//! reports those tokens as prefilled, not as reused from the cache.
//!
//! A local block's ring (`window.rs`) is the same kind of cache once it has dropped rows: going
//! back further than its slack needs the window's rows before the position, so the CPU engine
//! keeps them in its kept checkpoints too (Gemma 3 270M: 15 blocks of 511 rows of 2 KiB, 15
//! MiB a copy once the context passes the window). A ring needs no rollback checkpoint: a
//! verification pass is within its slack.
//!
//! The policy (which positions, how many, which comes back) is [`Checkpoints`]'s alone, for
//! every engine; a copy is a [`Snapshot`] of wherever the state lives: memory on the CPU engine
//! (`cpu.rs`, the states and the windows' rows), one GPU buffer on the fused path (copied in
//! the queue's order).

/// Most kept checkpoints a cache holds (besides its one rollback checkpoint); the oldest is
/// dropped first. A generation keeps two; four keep the last two generations' worth.
pub const MAX_CHECKPOINTS: usize = 4;

/// One recurrent block's state, f32: the convolution's last inputs and the delta rule's
/// matrices (`crates/cpu/src/delta_net.rs` has their layouts).
#[derive(Debug, Clone, PartialEq)]
pub struct RecurrentState {
    pub conv: Vec<f32>,
    pub matrices: Vec<f32>,
}

impl RecurrentState {
    /// The state at a sequence's start: zeros.
    pub fn zeros(conv: usize, matrices: usize) -> Self {
        Self { conv: vec![0.0; conv], matrices: vec![0.0; matrices] }
    }

    pub fn bytes(&self) -> u64 {
        4 * (self.conv.len() + self.matrices.len()) as u64
    }

    pub(crate) fn reset(&mut self) {
        self.conv.fill(0.0);
        self.matrices.fill(0.0);
    }
}

/// A copy of a cache's recurrent state, held where the state lives: host memory on the CPU
/// engine, a GPU buffer on the fused path (which copies it there, in the queue's order).
pub trait Snapshot {
    /// Bytes it holds.
    fn bytes(&self) -> u64;
}

impl Snapshot for Vec<RecurrentState> {
    fn bytes(&self) -> u64 {
        self.iter().map(RecurrentState::bytes).sum()
    }
}

/// Copies of a cache's recurrent states at some positions: the kept ones (newest last) and the
/// rollback one. Which positions, how many and in what order they are given back is decided
/// here once for every engine; the copying is the caller's (`save` makes a snapshot of the
/// state now, reusing a dropped one's memory when it is given one).
#[derive(Debug)]
pub struct Checkpoints<S> {
    kept: Vec<(usize, S)>,
    rollback: Option<(usize, S)>,
}

impl<S> Default for Checkpoints<S> {
    fn default() -> Self {
        Self { kept: Vec::new(), rollback: None }
    }
}

impl<S: Snapshot> Checkpoints<S> {
    /// Makes the state at `position` (a snapshot from `save`) the rollback checkpoint, in place of
    /// the last one, whose memory `save` may reuse.
    pub fn record_rollback(&mut self, position: usize, save: impl FnOnce(Option<S>) -> S) {
        let old = self.rollback.take().map(|(_, snapshot)| snapshot);
        self.rollback = Some((position, save(old)));
    }

    /// Keeps the state at `position` (a snapshot from `save`; once per position), dropping the
    /// oldest beyond [`MAX_CHECKPOINTS`], whose memory `save` may reuse. Position 0 is the zero
    /// state: nothing to keep.
    pub fn record(&mut self, position: usize, save: impl FnOnce(Option<S>) -> S) {
        if position == 0 || self.kept.iter().any(|(p, _)| *p == position) {
            return;
        }
        let dropped = (self.kept.len() == MAX_CHECKPOINTS).then(|| self.kept.remove(0).1);
        self.kept.push((position, save(dropped)));
    }

    /// The latest checkpoint at or before `position`, to put back (`None`: the zero state);
    /// checkpoints after it are dropped.
    pub fn restore(&mut self, position: usize) -> Option<(usize, &S)> {
        self.forget_after(position);
        self.kept.last().into_iter().chain(&self.rollback).max_by_key(|(p, _)| *p).map(|(p, s)| (*p, s))
    }

    /// Drops the checkpoints after `position`: the cache went back there without one (a ring
    /// that still held the rows), and what follows will be other tokens.
    pub fn forget_after(&mut self, position: usize) {
        self.kept.retain(|(p, _)| *p <= position);
        if self.rollback.as_ref().is_some_and(|(p, _)| *p > position) {
            self.rollback = None;
        }
    }

    /// Forgets every checkpoint (the cache was cleared).
    pub fn clear(&mut self) {
        self.kept.clear();
        self.rollback = None;
    }

    /// Positions of the kept checkpoints, oldest first, then the rollback one's.
    pub fn positions(&self) -> Vec<usize> {
        self.kept.iter().chain(&self.rollback).map(|(p, _)| *p).collect()
    }

    pub fn bytes(&self) -> u64 {
        self.kept.iter().chain(&self.rollback).map(|(_, snapshot)| snapshot.bytes()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(value: f32) -> Vec<RecurrentState> {
        vec![RecurrentState { conv: vec![value; 2], matrices: vec![value; 4] }]
    }

    /// Puts `now` back to the latest checkpoint at or before `position` (zeros if none), as an
    /// engine does, and returns its position.
    fn restore(
        checkpoints: &mut Checkpoints<Vec<RecurrentState>>,
        position: usize,
        now: &mut [RecurrentState],
    ) -> usize {
        match checkpoints.restore(position) {
            Some((at, saved)) => {
                now.clone_from_slice(saved);
                at
            }
            None => {
                now.iter_mut().for_each(RecurrentState::reset);
                0
            }
        }
    }

    #[test]
    fn going_back_restores_the_latest_checkpoint_at_or_before_the_position() {
        let mut checkpoints = Checkpoints::<Vec<RecurrentState>>::default();
        for position in [0, 10, 20, 30] {
            checkpoints.record(position, |_| state(position as f32));
        }
        assert_eq!(checkpoints.positions(), [10, 20, 30]);
        let mut now = state(99.0);
        assert_eq!(restore(&mut checkpoints, 25, &mut now), 20);
        assert_eq!(now, state(20.0));
        // The one after the position is gone; the earlier ones stay.
        assert_eq!(checkpoints.positions(), [10, 20]);
        assert_eq!(restore(&mut checkpoints, 9, &mut now), 0);
        assert_eq!(now, state(0.0));
        assert!(checkpoints.positions().is_empty());
    }

    #[test]
    fn at_most_max_checkpoints_are_kept_the_oldest_dropped_first() {
        let mut checkpoints = Checkpoints::<Vec<RecurrentState>>::default();
        let mut reused = 0;
        for position in 1..=MAX_CHECKPOINTS + 2 {
            for value in [1.0, 2.0] {
                checkpoints.record(position, |old| {
                    reused += usize::from(old.is_some());
                    state(value)
                });
            }
        }
        assert_eq!(checkpoints.positions(), (3..=MAX_CHECKPOINTS + 2).collect::<Vec<_>>());
        // The dropped ones' memory is offered to the next copy.
        assert_eq!(reused, 2);
        assert_eq!(checkpoints.bytes(), MAX_CHECKPOINTS as u64 * 24);
        let mut now = state(5.0);
        assert_eq!(restore(&mut checkpoints, MAX_CHECKPOINTS + 2, &mut now), MAX_CHECKPOINTS + 2);
        // Recorded once per position: the first copy is the one kept.
        assert_eq!(now, state(1.0));
    }

    #[test]
    fn the_one_rollback_checkpoint_is_replaced_and_the_kept_ones_stay() {
        let mut checkpoints = Checkpoints::<Vec<RecurrentState>>::default();
        checkpoints.record(5, |_| state(5.0));
        for position in [8, 12, 20] {
            checkpoints.record_rollback(position, |_| state(position as f32));
        }
        assert_eq!(checkpoints.positions(), [5, 20]);
        let mut now = state(99.0);
        // Going back past the rollback checkpoint: the kept one.
        assert_eq!(restore(&mut checkpoints, 19, &mut now), 5);
        assert_eq!((&now, checkpoints.positions()), (&state(5.0), vec![5]));
        checkpoints.record_rollback(30, |_| state(30.0));
        assert_eq!(restore(&mut checkpoints, 31, &mut now), 30);
        assert_eq!(now, state(30.0));
    }
}
