//! Quoting untrusted text in messages.
//!
//! Names and values in a checkpoint (a `model_type`, a tensor name, a shard
//! file name, a directory name) end up in error messages printed to a
//! terminal. Raw, an ESC byte in them can retitle or clear the terminal, move
//! the cursor over earlier output, or a bidi override can make a line read
//! differently from what it says. Every message that quotes input goes
//! through [`escape`]; the library's [`crate::Error`] applies it to its
//! whole text, and the binary applies it again where it prints, so a message
//! assembled elsewhere (a backend, an I/O error) is covered too.
use std::borrow::Cow;
use std::fmt;

/// Whether `c` must not reach a terminal raw: C0 and C1 control characters,
/// DEL, and the Unicode characters that reorder or break lines.
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every unsafe character written as a Rust escape (`\n`, `\t`,
/// `\u{1b}`). Text with nothing to escape is returned as is, so applying it
/// twice changes nothing: the output holds no unsafe character.
pub fn escape(s: &str) -> Cow<'_, str> {
    escape_keeping(s, false)
}

/// As [`escape`], but line breaks (`\n`) stay: for multi-line text this
/// program wrote itself (usage messages) that quotes input somewhere inside.
pub fn escape_lines(s: &str) -> Cow<'_, str> {
    escape_keeping(s, true)
}

fn escape_keeping(s: &str, newlines: bool) -> Cow<'_, str> {
    let keep = |c: char| !is_unsafe(c) || (newlines && c == '\n');
    if s.chars().all(keep) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if keep(c) {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
    }
    Cow::Owned(out)
}

/// Displays its text escaped, for `format!("{}", Escaped(name))`.
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&escape(self.0))
    }
}

/// Most characters of one quoted value kept in a message.
pub const CLIP_CHARS: usize = 80;

/// `s` escaped and, past [`CLIP_CHARS`] characters, cut short with a note
/// of its full length: a 100 MB string in a config field must not become a
/// 100 MB error message.
pub fn clip(s: &str) -> String {
    match s.char_indices().nth(CLIP_CHARS) {
        None => escape(s).into_owned(),
        Some((cut, _)) => format!("{}… ({} bytes in all)", escape(&s[..cut]), s.len()),
    }
}

/// A path for a message: lossily decoded (a non-UTF-8 byte shows as U+FFFD)
/// and escaped.
pub fn path(p: &std::path::Path) -> String {
    escape(&p.to_string_lossy()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_written_out() {
        assert_eq!(escape("a\u{1b}]0;pwned\u{7}b"), "a\\u{1b}]0;pwned\\u{7}b");
        assert_eq!(escape("line\nbreak\ttab\r"), "line\\nbreak\\ttab\\r");
        assert_eq!(escape("\u{9b}2J del\u{7f}"), "\\u{9b}2J del\\u{7f}");
        assert_eq!(escape("evil\u{202e}txt.exe"), "evil\\u{202e}txt.exe");
    }

    #[test]
    fn plain_text_is_borrowed_and_escaping_is_idempotent() {
        assert!(matches!(escape("layers.0.q_proj ünïcode → fine"), Cow::Borrowed(_)));
        let once = escape("x\u{1b}[2Jy").into_owned();
        assert_eq!(escape(&once), once);
        assert!(!once.chars().any(is_unsafe));
    }

    #[test]
    fn long_values_are_clipped_at_a_char_boundary() {
        let long = "é".repeat(1000);
        let c = clip(&long);
        assert!(c.starts_with(&"é".repeat(CLIP_CHARS)) && c.ends_with("… (2000 bytes in all)"), "{c}");
        assert_eq!(clip("short\u{7}"), "short\\u{7}");
    }

    #[test]
    fn escape_lines_keeps_only_newlines() {
        assert_eq!(escape_lines("usage:\n  a\u{1b}b\r\n"), "usage:\n  a\\u{1b}b\\r\n");
    }
}
