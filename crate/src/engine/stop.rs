//! Streaming stop-string matching.
//!
//! Generated text arrives piece by piece. Text that might be the start of a stop string is held back until
//! it is known not to be; when a stop string completes, the text before it is released and generation ends.
//! The stop string itself is never emitted.

/// Holds back possible stop-string prefixes from a stream of text pieces.
#[derive(Clone, Debug)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text received but not yet released; never contains a complete stop string.
    held: String,
    stopped: bool,
}

impl StopMatcher {
    /// Empty stop strings are ignored (they would match before any text).
    pub fn new(stops: &[String]) -> Self {
        let stops = stops.iter().filter(|s| !s.is_empty()).cloned().collect();
        StopMatcher { stops, held: String::new(), stopped: false }
    }

    /// Feed the next decoded text piece; returns (text safe to emit now, stopped?).
    /// After a stop, further pieces are ignored and `(_, true)` is returned with no text.
    pub fn push(&mut self, piece: &str) -> (String, bool) {
        if self.stopped {
            return (String::new(), true);
        }
        self.held.push_str(piece);

        // A stop completes in this piece; the earliest-starting one cuts the text.
        if let Some(cut) = self.stops.iter().filter_map(|s| self.held.find(s.as_str())).min() {
            self.held.truncate(cut);
            self.stopped = true;
            return (std::mem::take(&mut self.held), true);
        }

        // Keep the longest tail that could still grow into a stop string; release the rest.
        let keep_from = self.partial_stop_start();
        let tail = self.held.split_off(keep_from);
        (std::mem::replace(&mut self.held, tail), false)
    }

    /// Release held text at the end of generation (no stop hit).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Byte index where the longest suffix of `held` that is a proper prefix of some stop begins
    /// (`held.len()` when there is none).
    fn partial_stop_start(&self) -> usize {
        let held = self.held.as_str();
        // Only suffixes shorter than the longest stop can be prefixes of one.
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let earliest = held.len().saturating_sub(longest.saturating_sub(1));
        held.char_indices()
            .map(|(i, _)| i)
            .filter(|&i| i >= earliest)
            .find(|&i| self.stops.iter().any(|s| s.starts_with(&held[i..])))
            .unwrap_or(held.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::test;

    fn matcher(stops: &[&str]) -> StopMatcher {
        StopMatcher::new(&stops.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    /// Feed all pieces; return what was emitted per piece, whether it stopped, and what finish() released.
    fn run(m: &mut StopMatcher, pieces: &[&str]) -> (Vec<String>, bool, String) {
        let mut emitted = Vec::new();
        for p in pieces {
            let (text, stopped) = m.push(p);
            emitted.push(text);
            if stopped {
                return (emitted, true, String::new());
            }
        }
        (emitted, false, m.finish())
    }

    #[test]
    fn stop_spanning_pieces_is_cut_and_not_emitted() {
        let mut m = matcher(&["<|im_end|>"]);
        let (emitted, stopped, _) = run(&mut m, &["Paris", ".<|im", "_e", "nd|>", "more"]);
        assert!(stopped);
        assert_eq!(emitted, ["Paris", ".", "", ""]);
        assert_eq!(m.push("more"), (String::new(), true));
    }

    #[test]
    fn partial_prefix_is_released_once_it_diverges() {
        let mut m = matcher(&["\nUser:"]);
        let (emitted, stopped, rest) = run(&mut m, &["Hi", "\n", "Us", "ually", " fine\nU"]);
        assert!(!stopped);
        assert_eq!(emitted, ["Hi", "", "", "\nUsually", " fine"]);
        assert_eq!(rest, "\nU");
        // With stop "ab", "aa" releases the first "a" and holds the second, which "b" then completes.
        let mut m = matcher(&["ab"]);
        assert_eq!(m.push("a"), ("".into(), false));
        assert_eq!(m.push("a"), ("a".into(), false));
        assert_eq!(m.push("b!"), ("".into(), true));
    }

    #[test]
    fn multiple_stops_earliest_wins() {
        let mut m = matcher(&["world", "o w", "###"]);
        assert_eq!(m.push("hello world"), ("hell".into(), true));

        // A short stop completing while a longer one is still a prefix ends generation.
        let mut m = matcher(&["abcd", "bc"]);
        assert_eq!(m.push("xa"), ("x".into(), false));
        assert_eq!(m.push("bc"), ("a".into(), true));

        // Holding back covers every stop: "#" could start "###", "wor" could start "world".
        let mut m = matcher(&["world", "###"]);
        assert_eq!(m.push("a #"), ("a ".into(), false));
        assert_eq!(m.push("# wor"), ("## ".into(), false));
        assert_eq!(m.push("m"), ("worm".into(), false));
        assert_eq!(m.push("##"), ("".into(), false));
        assert_eq!(m.push("#"), ("".into(), true));
    }

    #[test]
    fn no_stops_passes_everything_through() {
        let mut m = StopMatcher::new(&[]);
        assert_eq!(
            run(&mut m, &["a", "<|im_end|>", ""]),
            (vec!["a".into(), "<|im_end|>".into(), "".into()], false, String::new())
        );
        let mut m = StopMatcher::new(&[String::new()]);
        assert_eq!(m.push("text"), ("text".into(), false));
    }

    #[test]
    fn unicode_stops_and_text() {
        let mut m = matcher(&["。終", "🦀🦀"]);
        let (emitted, stopped, _) = run(&mut m, &["日本語", "。", "続く🦀", "é🦀", "🦀x"]);
        assert!(stopped);
        assert_eq!(emitted, ["日本語", "", "。続く", "🦀é", ""]);
        // Held multi-byte prefix released intact at the end.
        let mut m = matcher(&["é!"]);
        assert_eq!(m.push("café"), ("caf".into(), false));
        assert_eq!(m.finish(), "é");
        assert_eq!(m.finish(), "");
    }
}
