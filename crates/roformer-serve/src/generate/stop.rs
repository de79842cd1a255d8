//! From the growing decoded text to the pieces a client may see: `stop` strings cut the text
//! (the stop itself is not sent, as OpenAI's), and a piece is sent only once no stop string
//! can still begin inside it.
//!
//! Each step is handed the whole text decoded so far. Its complete prefix (up to the last
//! whole character: a byte-level token can end inside one, which decodes to U+FFFD) is what
//! may be sent; of that, the longest suffix that is the start of some stop string is held back
//! until the next tokens show whether the stop follows.

/// What one step lets through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Text to send now (possibly empty); generation goes on.
    Send(String),
    /// A stop string appeared: the text before it that was not yet sent; generation ends.
    Stop(String),
}

/// The stop strings and how much of the text has been let through.
#[derive(Debug, Clone)]
pub struct StopScan {
    stops: Vec<String>,
    sent: usize,
}

impl StopScan {
    /// A scan for `stops` (empty strings are ignored).
    pub fn new(stops: Vec<String>) -> StopScan {
        StopScan {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            sent: 0,
        }
    }

    /// One step on `text`, the whole text decoded so far.
    pub fn step(&mut self, text: &str) -> Step {
        let complete = text.trim_end_matches('\u{FFFD}');
        if let Some(at) = self.first_stop(complete) {
            return Step::Stop(self.take(complete, at.max(self.sent)));
        }
        let held = self.held_back(complete);
        Step::Send(self.take(complete, complete.len() - held))
    }

    /// The rest of `text` once generation ended without a stop string (at the length limit
    /// or the end-of-sequence token): everything not yet sent.
    pub fn finish(&mut self, text: &str) -> String {
        self.take(text, text.len())
    }

    /// `text[sent..end]`, marked sent (empty when `end` is not past `sent` or not on a
    /// character boundary).
    fn take(&mut self, text: &str, end: usize) -> String {
        let piece = text.get(self.sent..end).unwrap_or("").to_owned();
        self.sent = self.sent.max(end);
        piece
    }

    /// Byte offset of the earliest stop string in `text`.
    fn first_stop(&self, text: &str) -> Option<usize> {
        self.stops
            .iter()
            .filter_map(|s| text.find(s.as_str()))
            .min()
    }

    /// Length of the longest suffix of `text` that is a proper prefix of a stop string.
    fn held_back(&self, text: &str) -> usize {
        text.char_indices()
            .map(|(i, _)| i)
            .filter(|&i| i >= self.sent)
            .find(|&i| {
                let tail = &text[i..];
                self.stops
                    .iter()
                    .any(|s| s.len() > tail.len() && s.starts_with(tail))
            })
            .map_or(0, |i| text.len() - i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(stops: &[&str]) -> StopScan {
        StopScan::new(stops.iter().map(|s| (*s).to_owned()).collect())
    }

    #[test]
    fn without_stops_everything_complete_is_sent_at_once() {
        let mut s = scan(&[]);
        assert_eq!(s.step("ab"), Step::Send("ab".into()));
        assert_eq!(s.step("abc\u{FFFD}"), Step::Send("c".into()));
        assert_eq!(s.step("abcé"), Step::Send("é".into()));
        assert_eq!(s.finish("abcé!"), "!");
    }

    #[test]
    fn a_possible_start_of_a_stop_is_held_until_it_is_decided() {
        let mut s = scan(&["END", "\n\n"]);
        assert_eq!(s.step("hi E"), Step::Send("hi ".into()));
        assert_eq!(s.step("hi EN"), Step::Send(String::new()));
        assert_eq!(s.step("hi ENx"), Step::Send("ENx".into()));
        assert_eq!(s.step("hi ENx\n"), Step::Send(String::new()));
        assert_eq!(s.step("hi ENx\n\nmore"), Step::Stop(String::new()));
    }

    #[test]
    fn the_stop_and_what_follows_it_are_cut() {
        let mut s = scan(&["the"]);
        assert_eq!(s.step("a t"), Step::Send("a ".into()));
        assert_eq!(s.step("a the end"), Step::Stop("".into()));
        let mut s = scan(&["x", "the"]);
        assert_eq!(s.step("one the two x"), Step::Stop("one ".into()));
    }

    #[test]
    fn held_text_is_sent_at_the_end_and_nothing_twice() {
        let mut s = scan(&["stop"]);
        assert_eq!(s.step("go st"), Step::Send("go ".into()));
        assert_eq!(s.finish("go st"), "st");
        assert_eq!(s.finish("go st"), "");
    }

    #[test]
    fn empty_stop_strings_are_ignored() {
        let mut s = scan(&[""]);
        assert_eq!(s.step("abc"), Step::Send("abc".into()));
    }
}
