//! Stop conditions and streaming text.
//!
//! [`StopStreamer`] turns token bytes into text that is safe to show as it streams: it matches
//! stop strings on the decoded bytes across token boundaries, holds back exactly the suffix
//! that could still begin a stop string (and any incomplete UTF-8 character), never emits a
//! stop string, and releases held text as soon as a match fails ("User" is held while the stop
//! string is "User:", and released when " said" arrives).
//!
//! [`StopTracker`] adds end-of-generation token ids, `ignore_eos` and a token limit, and
//! reports a [`FinishReason`].

use serde::{Serialize, Serializer};

/// Text released by one [`StopStreamer::push`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Emitted {
    /// Text safe to show now (possibly empty).
    pub text: String,
    /// Index (in the list given to [`StopStreamer::new`]) of the stop string that just
    /// matched; the generation should end.
    pub stop: Option<usize>,
}

/// Streams decoded bytes, holding back what could still become a stop string.
///
/// Invariant, before a stop: the concatenation of every emitted text followed by
/// [`Self::held_bytes`] equals the bytes pushed so far (for valid UTF-8 input). At a stop:
/// the emitted texts equal the input up to the start of the stop string. The stop that wins is
/// the one that completes first as bytes arrive (smallest end; for equal ends, the earliest
/// start), so the result does not depend on how the text is split into tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopStreamer {
    /// Non-empty stop strings as bytes, with their index in the caller's list.
    stops: Vec<(usize, Vec<u8>)>,
    pending: Vec<u8>,
    stopped: Option<usize>,
}

impl StopStreamer {
    /// A streamer for `stop_strings` (empty strings are ignored: they would match everywhere).
    pub fn new<S: AsRef<str>>(stop_strings: &[S]) -> Self {
        let stops = stop_strings
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.as_ref().is_empty())
            .map(|(i, s)| (i, s.as_ref().as_bytes().to_vec()))
            .collect();
        Self { stops, pending: Vec::new(), stopped: None }
    }

    /// Adds a token's bytes (a byte-level token may hold part of a UTF-8 character) and
    /// returns the text that can be released. After a stop, returns nothing.
    pub fn push(&mut self, token_bytes: &[u8]) -> Emitted {
        if self.stopped.is_some() {
            return Emitted::default();
        }
        self.pending.extend_from_slice(token_bytes);

        // The occurrence that completes first: smallest end, then smallest start.
        let mut best: Option<(usize, usize, usize)> = None;
        for (index, stop) in &self.stops {
            if let Some(start) = find(&self.pending, stop) {
                let key = (start + stop.len(), start, *index);
                if best.is_none_or(|b| key < b) {
                    best = Some(key);
                }
            }
        }
        if let Some((_, start, index)) = best {
            let text = String::from_utf8_lossy(&self.pending[..start]).into_owned();
            self.pending.clear();
            self.stopped = Some(index);
            return Emitted { text, stop: Some(index) };
        }

        let hold = self.stop_prefix_suffix_len().max(incomplete_utf8_suffix_len(&self.pending));
        let release = self.pending.len() - hold;
        let text = String::from_utf8_lossy(&self.pending[..release]).into_owned();
        self.pending.drain(..release);
        Emitted { text, stop: None }
    }

    /// Releases everything held (the generation ended without a stop string); an incomplete
    /// UTF-8 character becomes U+FFFD. Returns nothing after a stop.
    pub fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        text
    }

    /// The bytes held back right now.
    pub fn held_bytes(&self) -> &[u8] {
        &self.pending
    }

    /// The held bytes as text (lossy).
    pub fn held_text(&self) -> String {
        String::from_utf8_lossy(&self.pending).into_owned()
    }

    /// The index of the stop string that matched, if any.
    pub fn stopped(&self) -> Option<usize> {
        self.stopped
    }

    /// Length of the longest suffix of the pending bytes that is a proper prefix of a stop.
    fn stop_prefix_suffix_len(&self) -> usize {
        let mut longest = 0;
        for (_, stop) in &self.stops {
            let most = (stop.len() - 1).min(self.pending.len());
            for k in (longest + 1..=most).rev() {
                if self.pending.ends_with(&stop[..k]) {
                    longest = k;
                    break;
                }
            }
        }
        longest
    }
}

/// First position of `needle` in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.len() > haystack.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Length of a trailing incomplete (but so far valid) UTF-8 sequence, 0 if none.
fn incomplete_utf8_suffix_len(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(3) {
        let tail = &bytes[bytes.len() - back..];
        if tail[0] & 0xC0 == 0x80 {
            continue; // a continuation byte: the character starts further back
        }
        return match std::str::from_utf8(tail) {
            Err(e) if e.valid_up_to() == 0 && e.error_len().is_none() => back,
            _ => 0,
        };
    }
    0
}

/// Why a generation ended. Serialises as `"eos"`, `"stop"` or `"length"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// The model produced an end-of-generation token.
    Eos,
    /// A stop string matched.
    Stop {
        /// Its index in [`StopConditions::stop_strings`].
        index: usize,
        /// The stop string.
        sequence: String,
    },
    /// The token limit was reached.
    Length,
    /// The output's constraint (a grammar, a JSON schema, a regular expression) is complete:
    /// nothing may follow, or the model ended where the constraint may end. Reported as `stop`,
    /// as the OpenAI API reports structured output that ended.
    Complete,
}

impl FinishReason {
    /// `"eos"`, `"stop"` (a stop string, or a complete constraint) or `"length"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Eos => "eos",
            Self::Stop { .. } => "stop",
            Self::Length => "length",
            Self::Complete => "stop",
        }
    }
}

impl Serialize for FinishReason {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// When a generation ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StopConditions {
    /// The model's end-of-generation token ids.
    pub eos_token_ids: Vec<u32>,
    /// Treat end-of-generation tokens as ordinary tokens.
    pub ignore_eos: bool,
    /// End after this many tokens (`None` = no limit; `Some(0)` = finished before starting).
    pub max_tokens: Option<usize>,
    /// Stop strings, matched on the decoded text.
    pub stop_strings: Vec<String>,
}

/// What one token contributed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenOutput {
    /// Text to show now.
    pub text: String,
    /// Set when the generation has ended.
    pub finish: Option<FinishReason>,
}

/// Applies [`StopConditions`] token by token; see the module doc.
#[derive(Debug, Clone)]
pub struct StopTracker {
    conditions: StopConditions,
    streamer: StopStreamer,
    tokens: usize,
    finished: Option<FinishReason>,
}

impl StopTracker {
    /// A tracker for `conditions`.
    pub fn new(conditions: StopConditions) -> Self {
        let streamer = StopStreamer::new(&conditions.stop_strings);
        let finished = (conditions.max_tokens == Some(0)).then_some(FinishReason::Length);
        Self { conditions, streamer, tokens: 0, finished }
    }

    /// Records token `id` whose decoded bytes are `token_bytes`. Checks, in order: an
    /// end-of-generation id (unless `ignore_eos`; its bytes are not shown, held text is
    /// released), a stop string (text before it is released, the rest dropped), the token
    /// limit (held text is released). After the end, returns no text and the same reason.
    pub fn push_token(&mut self, id: u32, token_bytes: &[u8]) -> TokenOutput {
        if let Some(reason) = &self.finished {
            return TokenOutput { text: String::new(), finish: Some(reason.clone()) };
        }
        self.tokens += 1;
        if !self.conditions.ignore_eos && self.conditions.eos_token_ids.contains(&id) {
            let text = self.streamer.finish();
            return self.end(text, FinishReason::Eos);
        }
        let emitted = self.streamer.push(token_bytes);
        if let Some(index) = emitted.stop {
            let sequence = self.conditions.stop_strings[index].clone();
            return self.end(emitted.text, FinishReason::Stop { index, sequence });
        }
        if self.conditions.max_tokens.is_some_and(|max| self.tokens >= max) {
            let mut text = emitted.text;
            text.push_str(&self.streamer.finish());
            return self.end(text, FinishReason::Length);
        }
        TokenOutput { text: emitted.text, finish: None }
    }

    /// Releases held text when the caller ends the generation for its own reason.
    pub fn flush(&mut self) -> String {
        if self.finished.is_some() {
            return String::new();
        }
        self.streamer.finish()
    }

    /// Why the generation ended, if it has.
    pub fn finished(&self) -> Option<&FinishReason> {
        self.finished.as_ref()
    }

    /// Tokens pushed so far.
    pub fn token_count(&self) -> usize {
        self.tokens
    }

    /// The underlying streamer (for its held text).
    pub fn streamer(&self) -> &StopStreamer {
        &self.streamer
    }

    fn end(&mut self, text: String, reason: FinishReason) -> TokenOutput {
        self.finished = Some(reason.clone());
        TokenOutput { text, finish: Some(reason) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], tokens: &[&[u8]]) -> (Vec<String>, Option<usize>, String) {
        let mut s = StopStreamer::new(stops);
        let mut out = Vec::new();
        let mut stop = None;
        for t in tokens {
            let e = s.push(t);
            out.push(e.text);
            if e.stop.is_some() {
                stop = e.stop;
            }
        }
        let rest = s.finish();
        (out, stop, rest)
    }

    #[test]
    fn user_versus_user_said() {
        // "User" could start "User:", so it is held; " said" breaks the match and releases it.
        let (out, stop, rest) = run(&["User:"], &[b"Hi ", b"User", b" said"]);
        assert_eq!(out, vec!["Hi ", "", "User said"]);
        assert_eq!(stop, None);
        assert_eq!(rest, "");
        // And when it does become "User:", nothing of it is emitted.
        let (out, stop, _) = run(&["User:"], &[b"Hi ", b"User", b": next"]);
        assert_eq!(out, vec!["Hi ", "", ""]);
        assert_eq!(stop, Some(0));
    }

    #[test]
    fn stop_across_tokens_and_inside_a_token() {
        let (out, stop, _) = run(&["###"], &[b"ab#", b"#", b"#cd"]);
        assert_eq!(out.concat(), "ab");
        assert_eq!(stop, Some(0));
        let (out, stop, _) = run(&["stop"], &[b"xx stop yy"]);
        assert_eq!(out, vec!["xx "]);
        assert_eq!(stop, Some(0));
    }

    #[test]
    fn the_first_completed_stop_wins() {
        let (out, stop, _) = run(&["User said", "User"], &[b"a User said"]);
        assert_eq!((out.concat(), stop), ("a ".to_string(), Some(1)));
        let (out, stop, _) = run(&["b", "ab"], &[b"xa", b"b"]);
        assert_eq!((out.concat(), stop), ("x".to_string(), Some(1)));
        let (out, stop, _) = run(&["b", "ab"], &[b"xab"]);
        assert_eq!((out.concat(), stop), ("x".to_string(), Some(1)));
    }

    #[test]
    fn never_streams_half_a_character() {
        let euro = "€".as_bytes(); // e2 82 ac
        let (out, _, rest) = run(&[], &[&euro[..1], &euro[1..2], &euro[2..]]);
        assert_eq!(out, vec!["", "", "€"]);
        assert_eq!(rest, "");
        // Incomplete at the end: finish replaces it.
        let (out, _, rest) = run(&[], &[b"a", &euro[..2]]);
        assert_eq!(out.concat(), "a");
        assert_eq!(rest, "\u{FFFD}");
        // A stop string that starts with a multi-byte character, split across tokens.
        let (out, stop, _) = run(&["€!"], &[b"1", &euro[..2], &euro[2..], b"!"]);
        assert_eq!((out.concat(), stop), ("1".to_string(), Some(0)));
    }

    #[test]
    fn tracker_reports_finish_reasons() {
        let conditions = StopConditions {
            eos_token_ids: vec![0],
            ignore_eos: false,
            max_tokens: Some(3),
            stop_strings: vec!["\n\n".into()],
        };
        let mut t = StopTracker::new(conditions.clone());
        assert_eq!(t.push_token(5, b"Hi\n").text, "Hi");
        let out = t.push_token(0, b"</s>");
        assert_eq!(out.text, "\n");
        assert_eq!(out.finish, Some(FinishReason::Eos));
        assert_eq!(t.push_token(5, b"x").finish, Some(FinishReason::Eos));

        let mut t = StopTracker::new(conditions.clone());
        t.push_token(5, b"Hi\n");
        let out = t.push_token(6, b"\nmore");
        assert_eq!(out.text, "");
        assert_eq!(out.finish, Some(FinishReason::Stop { index: 0, sequence: "\n\n".into() }));

        let mut t = StopTracker::new(StopConditions { ignore_eos: true, ..conditions.clone() });
        t.push_token(0, b"a");
        t.push_token(0, b"b");
        let out = t.push_token(0, b"\n");
        assert_eq!(out.text, "\n");
        assert_eq!(out.finish, Some(FinishReason::Length));

        let t = StopTracker::new(StopConditions { max_tokens: Some(0), ..conditions });
        assert_eq!(t.finished(), Some(&FinishReason::Length));
    }

    #[test]
    fn finish_reason_serialises_as_a_word() {
        assert_eq!(serde_json::to_string(&FinishReason::Eos).unwrap(), "\"eos\"");
        assert_eq!(serde_json::to_string(&FinishReason::Length).unwrap(), "\"length\"");
        let stop = FinishReason::Stop { index: 1, sequence: "x".into() };
        assert_eq!(serde_json::to_string(&stop).unwrap(), "\"stop\"");
    }
}
