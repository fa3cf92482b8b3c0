//! Generated ids back to text, as they arrive.
//!
//! [`Detokenizer`] decodes a window of the ids twice, with and without the
//! newest, and passes on the difference, but only once the new text does
//! not end in U+FFFD and the newest visible token is not a byte-fallback
//! token: a run of byte tokens is decoded as one UTF-8 sequence, so a byte
//! that starts a character decodes to U+FFFD until the rest arrive, and a
//! later byte can turn the whole run invalid (one U+FFFD per byte, even for
//! bytes that looked like ASCII alone). Holding the run until a text token
//! (or the end) makes the pieces join to exactly what one decode of all the
//! ids gives. The window restarts after each emitted piece, so a step
//! decodes a few tokens, not the whole output.
//!
//! [`StopStrings`] then holds back any tail that may be the start of a stop
//! string, so that neither the stop string nor anything after it is printed,
//! even when it is split across tokens.
use super::tokenizer::{TokenKind, Tokenizer};
use anyhow::Result;

/// Turns ids into text (special tokens left out).
pub trait Decode {
    /// The text of `ids`.
    fn decode_text(&self, ids: &[u32]) -> Result<String>;
    /// What `id` contributes to that text.
    fn kind(&self, id: u32) -> TokenKind;
}

impl Decode for Tokenizer {
    fn decode_text(&self, ids: &[u32]) -> Result<String> {
        self.decode(ids, true)
    }

    fn kind(&self, id: u32) -> TokenKind {
        Tokenizer::kind(self, id)
    }
}

/// Incremental decoding of a growing id sequence.
pub struct Detokenizer<'t> {
    tok: &'t dyn Decode,
    ids: Vec<u32>,
    /// Start of the decode window (the tokens before `read` are context
    /// whose text was already passed on).
    prefix: usize,
    /// Tokens up to here have been passed on as text.
    read: usize,
}

impl<'t> Detokenizer<'t> {
    /// A detokenizer over `tok`.
    pub fn new(tok: &'t dyn Decode) -> Self {
        Detokenizer { tok, ids: Vec::new(), prefix: 0, read: 0 }
    }

    /// Adds `id` and returns the text that is now complete (often empty).
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.ids.push(id);
        // Invisible tokens vanish from the decoder's input, so the byte run
        // they sit in is still open.
        let last_visible = self.ids[self.read..].iter().rev().map(|&i| self.tok.kind(i)).find(|k| *k != TokenKind::Invisible);
        if last_visible == Some(TokenKind::Byte) {
            return Ok(String::new());
        }
        let before = self.tok.decode_text(&self.ids[self.prefix..self.read])?;
        let now = self.tok.decode_text(&self.ids[self.prefix..])?;
        if now.len() > before.len() && !now.ends_with('\u{fffd}') && now.starts_with(&before) {
            let piece = now[before.len()..].to_string();
            self.prefix = self.read;
            self.read = self.ids.len();
            return Ok(piece);
        }
        Ok(String::new())
    }

    /// What is still held back when the run ends (an incomplete character
    /// comes out as U+FFFD, as a one-shot decode would show it).
    pub fn finish(&mut self) -> Result<String> {
        let before = self.tok.decode_text(&self.ids[self.prefix..self.read])?;
        let now = self.tok.decode_text(&self.ids[self.prefix..])?;
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        // Past what was already passed on; should the decoder have rewritten
        // it (it does not for Gemma's), past the part both decodes share.
        let common = now.char_indices().zip(before.chars()).take_while(|((_, a), b)| a == b).count();
        let at = now.char_indices().nth(common).map_or(now.len(), |(i, _)| i);
        Ok(now[at..].to_string())
    }
}

/// Cuts the text at the first stop string.
#[derive(Clone, Debug, Default)]
pub struct StopStrings {
    stops: Vec<String>,
    /// Text received and not yet passed on.
    held: String,
    stopped: bool,
}

impl StopStrings {
    /// Stops at any of `stops` (empty strings are ignored).
    pub fn new(stops: &[String]) -> Self {
        StopStrings { stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(), held: String::new(), stopped: false }
    }

    /// Whether a stop string was seen.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Adds `text`; returns what may be printed now. After a stop string,
    /// returns the text before it and then nothing ever again.
    pub fn push(&mut self, text: &str) -> String {
        if self.stopped {
            return String::new();
        }
        self.held.push_str(text);
        // Held text holds no complete stop string (it would have stopped), so
        // the earliest match is the first one to look for.
        if let Some(at) = self.stops.iter().filter_map(|s| self.held.find(s.as_str())).min() {
            self.stopped = true;
            let out = self.held[..at].to_string();
            self.held.clear();
            return out;
        }
        let keep = self.stops.iter().map(|s| partial_suffix(&self.held, s)).max().unwrap_or(0);
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        out
    }

    /// The held tail at the end of the run (it never became a stop string).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// Bytes of the longest suffix of `text` that is a proper prefix of `stop`
/// (on character boundaries of both).
fn partial_suffix(text: &str, stop: &str) -> usize {
    stop.char_indices().map(|(i, _)| i).filter(|&n| n > 0 && text.ends_with(&stop[..n])).max().unwrap_or(0)
}

/// Ids in, printable text out: a [`Detokenizer`] then [`StopStrings`].
pub struct TextStream<'t> {
    detok: Detokenizer<'t>,
    stops: StopStrings,
    /// Everything passed on so far.
    pub text: String,
}

impl<'t> TextStream<'t> {
    /// A stream decoding with `tok`, cut at `stops`.
    pub fn new(tok: &'t dyn Decode, stops: &[String]) -> Self {
        TextStream { detok: Detokenizer::new(tok), stops: StopStrings::new(stops), text: String::new() }
    }

    /// Adds a generated id; returns the text to print now.
    pub fn push(&mut self, id: u32) -> Result<String> {
        let piece = self.detok.push(id)?;
        let out = self.stops.push(&piece);
        self.text.push_str(&out);
        Ok(out)
    }

    /// Whether a stop string ended the text.
    pub fn stopped(&self) -> bool {
        self.stops.stopped()
    }

    /// The rest, at the end of the run.
    pub fn finish(&mut self) -> Result<String> {
        if self.stops.stopped() {
            return Ok(String::new());
        }
        let tail = self.detok.finish()?;
        let mut out = self.stops.push(&tail);
        out.push_str(&self.stops.finish());
        self.text.push_str(&out);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::test_data;

    fn tok() -> Tokenizer {
        Tokenizer::from_bytes(&test_data("tokenizer.json"), "t").unwrap()
    }

    // Test-vocabulary ids (tests/data/gemma-shape/README.md).
    const fn byte(b: u8) -> u32 {
        6 + b as u32
    }
    const H: u32 = 264;
    const BANG: u32 = 275;
    const HELLO: u32 = 279;
    const SP_WOR: u32 = 282;
    const L: u32 = 266;
    const D: u32 = 270;
    const EOS: u32 = 1;

    fn pieces(ids: &[u32]) -> Vec<String> {
        let t = tok();
        let mut d = Detokenizer::new(&t);
        let mut v: Vec<String> = ids.iter().map(|&i| d.push(i).unwrap()).collect();
        v.push(d.finish().unwrap());
        v
    }

    #[test]
    fn incomplete_utf8_is_held_until_its_last_byte() {
        // "hé🙂!": é is C3 A9, 🙂 is F0 9F 99 82, each byte its own token.
        // A run of byte tokens comes out with the next text token (or at the end).
        let ids = [H, byte(0xC3), byte(0xA9), byte(0xF0), byte(0x9F), byte(0x99), byte(0x82), BANG];
        assert_eq!(pieces(&ids), ["h", "", "", "", "", "", "", "é🙂!", ""]);
        let ids = [H, byte(0xC3), byte(0xA9)];
        assert_eq!(pieces(&ids), ["h", "", "", "é"]);
    }

    #[test]
    fn spaces_and_special_tokens() {
        // ▁wor decodes with its leading space; <eos> prints nothing.
        assert_eq!(pieces(&[HELLO, SP_WOR, L, D, EOS]), ["hello", " wor", "l", "d", "", ""]);
    }

    #[test]
    fn a_dangling_byte_at_the_end_comes_out_as_replacement() {
        assert_eq!(pieces(&[H, byte(0xE2)]), ["h", "", "\u{fffd}"]);
    }

    #[test]
    fn a_later_byte_can_spoil_an_earlier_one() {
        // <0x3E> alone is ">", but <0x3E><0x8B> is one invalid run: two U+FFFD,
        // also across a special token (skipped, so the bytes meet).
        assert_eq!(pieces(&[L, byte(0x3E), byte(0x8B), L]).concat(), "l\u{fffd}\u{fffd}l");
        assert_eq!(pieces(&[L, byte(0x3E), 5, byte(0x8B)]).concat(), "l\u{fffd}\u{fffd}");
        assert_eq!(pieces(&[L, byte(0x3E), L]), ["l", "", ">l", ""]);
    }

    #[test]
    fn pieces_always_join_to_the_one_shot_decode() {
        // Random id sequences over the whole test vocabulary, specials included.
        let t = tok();
        let mut rng = switchyard_model::sampling::Rng::new(99);
        for _ in 0..300 {
            let n = 1 + (rng.next_u64() % 12) as usize;
            let ids: Vec<u32> = (0..n).map(|_| (rng.next_u64() % 291) as u32).collect();
            let joined: String = pieces(&ids).concat();
            assert_eq!(joined, t.decode(&ids, true).unwrap(), "ids {ids:?}");
        }
    }

    fn stop_run(chunks: &[&str], stops: &[&str]) -> (Vec<String>, bool, String) {
        let mut s = StopStrings::new(&stops.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let out: Vec<String> = chunks.iter().map(|c| s.push(c)).collect();
        let stopped = s.stopped();
        (out, stopped, s.finish())
    }

    #[test]
    fn a_stop_string_split_across_pieces_stops_and_is_not_printed() {
        // "lo wo" spans "hello" and " wor": "lo" is held after the first piece.
        let (out, stopped, rest) = stop_run(&["hello", " wor", "ld"], &["lo wo"]);
        assert_eq!(out, ["hel", "", ""]);
        assert!(stopped && rest.is_empty());
    }

    #[test]
    fn held_text_is_released_when_it_stops_matching() {
        let (out, stopped, rest) = stop_run(&["ab", "c", "ax", "a"], &["abd"]);
        assert_eq!(out, ["", "abc", "ax", ""]);
        assert!(!stopped);
        assert_eq!(rest, "a");
    }

    #[test]
    fn the_earliest_of_several_stops_wins() {
        let (out, stopped, _) = stop_run(&["one two three"], &["three", "two"]);
        assert_eq!((out, stopped), (vec!["one ".to_string()], true));
        // A stop string inside one piece: the text after it is dropped too.
        let (out, _, _) = stop_run(&["a", "bSTOPc", "d"], &["STOP"]);
        assert_eq!(out, ["a", "b", ""]);
        // Multi-byte stops are held on character boundaries.
        let (out, stopped, _) = stop_run(&["xé", "🙂y"], &["é🙂"]);
        assert_eq!((out, stopped), (vec!["x".to_string(), String::new()], true));
    }

    #[test]
    fn text_stream_stops_on_a_string_made_of_tokens() {
        let t = tok();
        let mut s = TextStream::new(&t, &["o w".to_string()]);
        let out: Vec<String> = [HELLO, SP_WOR, L].iter().map(|&i| s.push(i).unwrap()).collect();
        assert_eq!(out, ["hell", "", ""]);
        assert!(s.stopped());
        assert_eq!((s.finish().unwrap(), s.text.as_str()), (String::new(), "hell"));
        // Without a stop the whole text comes out.
        let mut s = TextStream::new(&t, &[]);
        for i in [HELLO, SP_WOR, L, D, byte(0xC3)] {
            s.push(i).unwrap();
        }
        assert_eq!(s.finish().unwrap(), "\u{fffd}");
        assert_eq!(s.text, "hello world\u{fffd}");
    }
}
