//! A sliding-window block's cache as a ring: which rows it holds and where each position goes.
//!
//! A local block of Gemma 3 attends to its query's position and the `window − 1` before it, so
//! its cache needs no row older than that: it keeps [`WindowRing::slots`] rows, the window's
//! `window − 1` and [`RING_SLACK`] more, and position `p` goes to row `p mod slots`. The global
//! blocks keep every position. On Gemma 3 1B (22 of 26 blocks local, a 512-position window)
//! that is 256 MiB of f32 keys and values at its 32,768-position context instead of 1.6 GiB.
//!
//! The slack is what lets a pass write its rows before it reads them (a pass of up to
//! `RING_SLACK` tokens never overwrites a row its own queries still see) and lets the cache go
//! back that far for free: a rejected draft, a repeated prompt's last token. Going back further
//! than the ring holds needs a checkpoint of the window's rows (`state.rs`: the same policy as a
//! recurrent state's), or the tokens from the start again.
//!
//! This type is the policy alone (slots, which position is where, what is still held); each
//! engine keeps its rows where it computes: the CPU engine in memory (`cpu.rs`, each row past
//! the first lap written twice so that a window's rows are consecutive), the fused path in the
//! block's KV buffer of `slots` rows (`fused.rs`; its kernels read row `p mod slots`).

use std::ops::Range;

/// Rows a ring keeps beyond its window: the longest pass that writes its rows before reading
/// them, and how far the cache goes back without a checkpoint. The fused path's passes are at
/// most this long.
pub const RING_SLACK: usize = 128;

/// The ring of one model's local blocks (they share one window): its size, and the oldest
/// position whose row it still holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowRing {
    window: usize,
    /// Every position from this one to the last written has its row in the ring.
    oldest: usize,
}

impl WindowRing {
    /// The ring of a window of `window` positions (at least 1: the configuration checks it).
    pub fn new(window: usize) -> Self {
        assert!(window > 0, "a window holds at least its query's own position");
        Self { window, oldest: 0 }
    }

    /// Rows it keeps: the `window − 1` before a query, and [`RING_SLACK`] more.
    pub fn slots(&self) -> usize {
        self.window - 1 + RING_SLACK
    }

    /// The row position `position` goes to.
    pub fn slot(&self, position: usize) -> usize {
        position % self.slots()
    }

    /// The rows holding `positions` (at most `slots` of them), in order: one range, or two where
    /// they wrap around the ring's end.
    pub fn rows(&self, positions: Range<usize>) -> impl Iterator<Item = Range<usize>> {
        let slots = self.slots();
        debug_assert!(positions.len() <= slots);
        let first = self.slot(positions.start);
        let before_the_end = positions.len().min(slots - first);
        [first..first + before_the_end, 0..positions.len() - before_the_end].into_iter().filter(|rows| !rows.is_empty())
    }

    /// The positions a query at `position` sees besides its own.
    pub fn window_before(&self, position: usize) -> Range<usize> {
        position.saturating_sub(self.window - 1)..position
    }

    /// Whether the ring holds every row a query at `position` sees before its own, so that the
    /// cache can go on from there.
    pub fn holds_window_before(&self, position: usize) -> bool {
        self.oldest <= self.window_before(position).start
    }

    /// The rows of the positions before `end` were written (a pass ended there).
    pub fn wrote_up_to(&mut self, end: usize) {
        self.oldest = self.oldest.max(end.saturating_sub(self.slots()));
    }

    /// The rows of the window before `position` were put back (a checkpoint), nothing older.
    pub fn restored_at(&mut self, position: usize) {
        self.oldest = self.window_before(position).start;
    }

    /// Every row forgotten: the cache starts again from position 0.
    pub fn clear(&mut self) {
        self.oldest = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_holds_the_window_and_its_slack_and_goes_back_as_far_as_that() {
        let mut ring = WindowRing::new(8);
        assert_eq!(ring.slots(), 7 + RING_SLACK);
        assert_eq!((ring.slot(3), ring.slot(ring.slots() + 3)), (3, 3));
        assert_eq!((ring.window_before(3), ring.window_before(20)), (0..3, 13..20));
        ring.wrote_up_to(ring.slots());
        // Nothing is overwritten yet: any position can be gone back to.
        assert!(ring.holds_window_before(0));
        let end = 1000;
        ring.wrote_up_to(end);
        // The rows of the last `slots` positions are held: going back `RING_SLACK` is free.
        assert!(ring.holds_window_before(end - RING_SLACK));
        assert!(!ring.holds_window_before(end - RING_SLACK - 1));
        // Going back keeps what is held; writing again from there moves the oldest row on.
        ring.wrote_up_to(end - 10);
        assert!(ring.holds_window_before(end - RING_SLACK));
        ring.restored_at(500);
        assert!(ring.holds_window_before(500) && !ring.holds_window_before(499));
        ring.clear();
        assert!(ring.holds_window_before(0));
        // Where positions lie: in one range of rows, or two around the end.
        let slots = ring.slots();
        for positions in [3..10, slots + 3..slots + 10] {
            let mut rows = ring.rows(positions);
            assert_eq!((rows.next(), rows.next()), (Some(3..10), None));
        }
        assert_eq!(ring.rows(slots - 2..slots + 5).collect::<Vec<_>>(), [slots - 2..slots, 0..5]);
        assert_eq!(ring.rows(5..5).count(), 0);
    }
}
