//! Stop-sequence matching for streamed text, shared by every backend.
//!
//! A stop sequence may arrive split over several tokens, so text that could be the
//! start of one is held back until the next piece settles it; the stop sequence
//! itself is never emitted.

/// Outcome of feeding one piece of generated text to a [`StopMatcher`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopStep {
    /// No stop sequence yet; send this text (possibly empty while holding back).
    Continue(String),
    /// A stop sequence matched; send this last text and end with `finish_reason: stop`.
    Stopped(String),
}

/// Incremental detector of stop sequences over a stream of text pieces.
///
/// Runs one Knuth–Morris–Pratt automaton per stop sequence over the bytes, so each
/// piece costs O(piece length × number of stops) however long the stops are, and
/// only not-yet-sent text is kept. When several stops end at the same byte the
/// longest wins; otherwise the first to complete wins.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<Pattern>,
    pending: String,
}

/// One stop sequence with its KMP failure table and current match length.
#[derive(Debug, Clone)]
struct Pattern {
    bytes: Vec<u8>,
    /// `fail[i]`: length of the longest proper border of `bytes[..=i]`.
    fail: Vec<usize>,
    /// Length of the longest prefix of `bytes` that is a suffix of the text so far.
    state: usize,
}

impl Pattern {
    fn new(stop: String) -> Self {
        let bytes = stop.into_bytes();
        let mut fail = vec![0; bytes.len()];
        let mut k = 0;
        for i in 1..bytes.len() {
            while k > 0 && bytes[i] != bytes[k] {
                k = fail[k - 1];
            }
            if bytes[i] == bytes[k] {
                k += 1;
            }
            fail[i] = k;
        }
        Self {
            bytes,
            fail,
            state: 0,
        }
    }

    /// Feeds one byte; true when the whole stop sequence now ends here.
    fn advance(&mut self, b: u8) -> bool {
        if self.state == self.bytes.len() {
            self.state = self.fail[self.state - 1];
        }
        while self.state > 0 && self.bytes[self.state] != b {
            self.state = self.fail[self.state - 1];
        }
        if self.bytes[self.state] == b {
            self.state += 1;
        }
        self.state == self.bytes.len()
    }
}

impl StopMatcher {
    /// A matcher for `stops`; empty sequences are ignored.
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            stops: stops
                .into_iter()
                .filter(|s| !s.is_empty())
                .map(Pattern::new)
                .collect(),
            pending: String::new(),
        }
    }

    /// Appends `piece` and returns what may be sent now.
    pub fn push(&mut self, piece: &str) -> StopStep {
        if self.stops.is_empty() {
            return StopStep::Continue(piece.to_owned());
        }
        let base = self.pending.len();
        self.pending.push_str(piece);
        for (i, &b) in piece.as_bytes().iter().enumerate() {
            let mut longest = 0;
            for p in &mut self.stops {
                if p.advance(b) {
                    longest = longest.max(p.bytes.len());
                }
            }
            if longest > 0 {
                // Text that could start a stop is held back, so the match starts
                // inside `pending`, at a character boundary (both sides are UTF-8).
                let start = (base + i + 1).saturating_sub(longest);
                let out = self.pending.get(..start).unwrap_or_default().to_owned();
                self.pending.clear();
                self.stops.iter_mut().for_each(|p| p.state = 0);
                return StopStep::Stopped(out);
            }
        }
        let hold = self.stops.iter().map(|p| p.state).max().unwrap_or(0);
        let until = self.pending.len().saturating_sub(hold);
        let out = self.pending.get(..until).unwrap_or_default().to_owned();
        self.pending.drain(..out.len());
        StopStep::Continue(out)
    }

    /// Releases held-back text when generation ends without a stop sequence.
    pub fn flush(&mut self) -> String {
        self.stops.iter_mut().for_each(|p| p.state = 0);
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out = String::new();
        for p in pieces {
            match m.push(p) {
                StopStep::Continue(t) => out.push_str(&t),
                StopStep::Stopped(t) => {
                    out.push_str(&t);
                    return (out, true);
                }
            }
        }
        out.push_str(&m.flush());
        (out, false)
    }

    #[test]
    fn stop_split_across_pieces_is_never_emitted() {
        assert_eq!(
            run(&["END"], &["hello E", "N", "D more"]),
            ("hello ".into(), true)
        );
    }

    #[test]
    fn false_start_is_released() {
        assert_eq!(run(&["END"], &["a E", "N", "x"]), ("a ENx".into(), false));
        assert_eq!(run(&["END"], &["a EN"]), ("a EN".into(), false));
    }

    #[test]
    fn earliest_of_several_stops_wins() {
        assert_eq!(run(&["c", "b"], &["abc"]), ("a".into(), true));
    }

    #[test]
    fn no_stops_passes_through_and_multibyte_is_safe() {
        assert_eq!(run(&[], &["é", "ü"]), ("éü".into(), false));
        assert_eq!(run(&["ü!"], &["aé", "ü", "x"]), ("aéüx".into(), false));
        assert_eq!(run(&["ü!"], &["aé", "ü", "!"]), ("aé".into(), true));
    }

    /// Reference: cut the whole text at the first position where any stop ends
    /// (the longest stop if several end there).
    fn naive(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let full: String = pieces.concat();
        for end in 1..=full.len() {
            if !full.is_char_boundary(end) {
                continue;
            }
            let hit = stops
                .iter()
                .filter(|s| !s.is_empty() && full[..end].ends_with(**s))
                .map(|s| s.len())
                .max();
            if let Some(len) = hit {
                return (full[..end - len].to_owned(), true);
            }
        }
        (full, false)
    }

    #[test]
    fn agrees_with_the_naive_reference_on_generated_cases() {
        // Small alphabet with a multibyte letter so that overlaps and false starts abound.
        let alphabet = ["a", "b", "é", "ab", "ba", "aé", ""];
        let stop_sets: [&[&str]; 6] = [
            &["aab"],
            &["abab", "b\u{e9}"],
            &["aaa", "ba"],
            &["\u{e9}a\u{e9}", "abba", "bb"],
            &["a"],
            &["abaab", "aabaa"],
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for stops in stop_sets {
            for _ in 0..300 {
                let n = (next() % 12) as usize;
                let pieces: Vec<&str> = (0..n)
                    .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                    .collect();
                assert_eq!(
                    run(stops, &pieces),
                    naive(stops, &pieces),
                    "{stops:?} {pieces:?}"
                );
            }
        }
    }

    #[test]
    fn long_stop_sequences_stay_cheap_and_correct() {
        let stop = "x".repeat(100_000) + "y";
        let mut m = StopMatcher::new(vec![stop.clone()]);
        for _ in 0..100 {
            assert_eq!(
                m.push(&"x".repeat(1_000)),
                StopStep::Continue(String::new())
            );
        }
        // Only the last 100,000 x's can still start the stop; older ones go out.
        match m.push(&"x".repeat(1_000)) {
            StopStep::Continue(t) => assert_eq!(t.len(), 1_000),
            other => panic!("{other:?}"),
        }
        match m.push("z") {
            StopStep::Continue(t) => assert_eq!(t.len(), 100_001),
            other => panic!("{other:?}"),
        }
        let mut m = StopMatcher::new(vec![stop]);
        assert_eq!(m.push("ab"), StopStep::Continue("ab".into()));
        for _ in 0..100 {
            assert_eq!(
                m.push(&"x".repeat(1_000)),
                StopStep::Continue(String::new())
            );
        }
        assert_eq!(m.push("yz"), StopStep::Stopped(String::new()));
    }

    #[test]
    fn held_text_is_not_sent_twice() {
        let mut m = StopMatcher::new(vec!["xyz".into()]);
        assert_eq!(m.push("ax"), StopStep::Continue("a".into()));
        assert_eq!(m.push("y"), StopStep::Continue(String::new()));
        assert_eq!(m.push("q"), StopStep::Continue("xyq".into()));
        assert_eq!(m.flush(), "");
    }
}
