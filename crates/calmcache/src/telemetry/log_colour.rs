//! Whether the process log (stderr) gets ANSI colours: only on a terminal,
//! and not when `NO_COLOR` is set (<https://no-color.org>). A file, a pipe
//! or the journal gets plain lines, so `grep` and log shippers see text.
//!
//! Owns that decision only; `main.rs` builds the subscriber with it.

use std::ffi::OsStr;
use std::io::IsTerminal;

/// True when log lines on stderr should carry colour codes.
pub fn stderr_colour() -> bool {
    colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

/// Colour on a terminal, unless `NO_COLOR` holds something (an empty
/// `NO_COLOR` does not count, as the convention says).
fn colour(terminal: bool, no_color: Option<&OsStr>) -> bool {
    terminal && no_color.is_none_or(OsStr::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        let set = OsStr::new("1");
        let empty = OsStr::new("");
        assert!(colour(true, None));
        assert!(colour(true, Some(empty)));
        assert!(!colour(true, Some(set)));
        assert!(!colour(false, None));
        assert!(!colour(false, Some(set)));
    }
}
