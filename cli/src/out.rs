//! Where the binary's output goes, and what happens when it cannot go there.
//!
//! `println!` panics when stdout is a closed pipe (`switchyard kernels | head
//! -1`) or a full disk, so every subcommand writes through [`print()`]
//! instead: a reader that went away becomes [`StdoutClosed`], which `main`
//! turns into a quiet exit with status [`EXIT_STDOUT_CLOSED`]; any other
//! write failure is an error naming stdout. Messages go through [`diag`],
//! which escapes control characters (they may quote a file name or a config
//! value) and ignores a failure to write them: there is nowhere left to
//! report it, and a panic would be worse.
use std::io::{ErrorKind, Write};
use switchyard_model::text;

/// Exit status when stdout's reader closes it early: the status a shell
/// reports for a program killed by SIGPIPE (128 + 13), which is what
/// `| head` does to programs that do not catch it. Non-zero, because the
/// output was cut short; no message, because the reader chose to stop.
pub const EXIT_STDOUT_CLOSED: u8 = 141;

/// stdout's reader closed it (EPIPE): stop quietly.
#[derive(Debug)]
pub struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout was closed by its reader")
    }
}

impl std::error::Error for StdoutClosed {}

/// What a failed write to stdout means for the caller.
pub fn stdout_error(e: std::io::Error) -> anyhow::Error {
    if e.kind() == ErrorKind::BrokenPipe {
        anyhow::Error::new(StdoutClosed)
    } else {
        anyhow::Error::new(e).context("writing to stdout")
    }
}

/// Writes `text` to stdout and flushes it.
pub fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).map_err(stdout_error)
}

/// Writes generated text to stdout and flushes it (so that it appears token
/// by token). On a terminal, control characters other than line breaks and
/// tabs are written as escapes: the model's output is untrusted text, and
/// an escape sequence in it must not drive the terminal. Into a pipe or a
/// file the text goes exactly as generated.
pub fn print_text(piece: &str, terminal: bool) -> anyhow::Result<()> {
    if !terminal || !piece.chars().any(|c| text::is_unsafe(c) && c != '\n' && c != '\t') {
        return print(piece);
    }
    let mut s = String::with_capacity(piece.len() + 8);
    for c in piece.chars() {
        if text::is_unsafe(c) && c != '\n' && c != '\t' {
            s.extend(c.escape_default());
        } else {
            s.push(c);
        }
    }
    print(&s)
}

/// Writes a message line to stderr, control characters escaped.
pub fn diag(msg: &str) {
    let mut line = text::escape(msg).into_owned();
    line.push('\n');
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// As [`diag`] for multi-line text (usage messages): line breaks stay.
pub fn diag_lines(msg: &str) {
    let _ = std::io::stderr().lock().write_all(text::escape_lines(msg).as_bytes());
}

/// The exit status for an error that ended a subcommand, after reporting it:
/// quiet for [`StdoutClosed`], the message on stderr for anything else.
pub fn report(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<StdoutClosed>().is_some() {
        return EXIT_STDOUT_CLOSED;
    }
    diag(&format!("error: {e:#}"));
    1
}
