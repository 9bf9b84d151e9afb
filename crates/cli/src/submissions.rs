//! Counts the GPU queue submissions of a span of work (native wgpu).
//!
//! wgpu numbers every queue submission, but exposes the number only inside the opaque
//! `SubmissionIndex` that `Queue::submit` returns (and in its `Debug` form). Submitting an empty
//! command list reads the counter; the counter is bumped by that read too, which
//! [`SubmissionCounter::since`] subtracts.

use std::sync::OnceLock;

use burn::tensor::wgpu::wgpu;

static QUEUE: OnceLock<wgpu::Queue> = OnceLock::new();

/// Keeps the queue of the wgpu device the CLI created, for [`SubmissionCounter::new`].
pub fn register_queue(queue: wgpu::Queue) {
    let _ = QUEUE.set(queue);
}

/// Reads the submission counter of the registered queue.
pub struct SubmissionCounter {
    queue: &'static wgpu::Queue,
}

impl SubmissionCounter {
    /// `None` when no wgpu queue was registered, or this wgpu does not number its submissions.
    pub fn new() -> Option<Self> {
        let counter = Self { queue: QUEUE.get()? };
        counter.mark()?;
        Some(counter)
    }

    /// The counter now (one empty submission).
    pub fn mark(&self) -> Option<u64> {
        let index = self.queue.submit(std::iter::empty());
        parse_index(&format!("{index:?}"))
    }

    /// Submissions made since `mark`, not counting the reads of the counter.
    pub fn since(&self, mark: u64) -> Option<u64> {
        Some(self.mark()?.checked_sub(mark)?.saturating_sub(1))
    }
}

/// The number in `SubmissionIndex { index: 17 }`.
fn parse_index(debug: &str) -> Option<u64> {
    let digits: String = debug.chars().skip_while(|c| !c.is_ascii_digit()).take_while(char::is_ascii_digit).collect();
    digits.parse().ok().filter(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_the_debug_form_of_a_submission_index() {
        assert_eq!(super::parse_index("SubmissionIndex { index: 17 }"), Some(17));
        assert_eq!(super::parse_index("SubmissionIndex"), None);
    }
}
