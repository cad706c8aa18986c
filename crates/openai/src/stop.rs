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
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    text: String,
    sent: usize,
}

impl StopMatcher {
    /// A matcher for `stops`; empty sequences are ignored.
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            text: String::new(),
            sent: 0,
        }
    }

    /// Appends `piece` and returns what may be sent now.
    pub fn push(&mut self, piece: &str) -> StopStep {
        if self.stops.is_empty() {
            return StopStep::Continue(piece.to_owned());
        }
        // Only a match ending inside the new piece can be new; search from just far
        // enough back to catch one that started in held-back text.
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let mut from = self.text.len().saturating_sub(longest);
        while !self.text.is_char_boundary(from) {
            from -= 1;
        }
        self.text.push_str(piece);
        let earliest = self
            .stops
            .iter()
            .filter_map(|s| self.text[from..].find(s.as_str()).map(|p| from + p))
            .min();
        if let Some(at) = earliest {
            let out = self.text[self.sent.min(at)..at].to_owned();
            self.sent = self.text.len();
            return StopStep::Stopped(out);
        }
        let hold = self
            .stops
            .iter()
            .map(|s| {
                (1..s.len())
                    .rev()
                    .find(|&k| s.is_char_boundary(k) && self.text.ends_with(&s[..k]))
                    .unwrap_or(0)
            })
            .max()
            .unwrap_or(0);
        let until = (self.text.len() - hold).max(self.sent);
        let out = self.text[self.sent..until].to_owned();
        self.sent = until;
        StopStep::Continue(out)
    }

    /// Releases held-back text when generation ends without a stop sequence.
    pub fn flush(&mut self) -> String {
        let out = self.text[self.sent..].to_owned();
        self.sent = self.text.len();
        out
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

    #[test]
    fn held_text_is_not_sent_twice() {
        let mut m = StopMatcher::new(vec!["xyz".into()]);
        assert_eq!(m.push("ax"), StopStep::Continue("a".into()));
        assert_eq!(m.push("y"), StopStep::Continue(String::new()));
        assert_eq!(m.push("q"), StopStep::Continue("xyq".into()));
        assert_eq!(m.flush(), "");
    }
}
