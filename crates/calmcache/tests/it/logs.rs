//! The process log (issue 16): colour codes only on a terminal. Regression:
//! `calmcache serve 2>file` and `| logger` got ANSI escapes in every line.
//!
//! The binary is run so that it logs through `tracing` and exits at once: a
//! config whose only certificate has no names (a warning logged at start)
//! and a listen port held by the test (the start fails, exit 1).

use std::path::Path;
use std::process::{Command, Output};

use crate::scratch;
use calmcache_testkit::tls::Leaf;

const BIN: &str = env!("CARGO_BIN_EXE_calmcache");

/// A config that logs a warning at start, then cannot bind `taken`.
fn warning_then_exit(dir: &Path, taken: u16) -> std::path::PathBuf {
    let leaf = Leaf::self_signed_without_names(dir, "bare", "localhost");
    let path = dir.join("calmcache.toml");
    let text = format!(
        "[server]\nlisten = [\"127.0.0.1:{taken}\"]\ntls_listen = [\"127.0.0.1:0\"]\n\
         [[server.tls]]\ncert = {:?}\nkey = {:?}\n\
         [upstreams.o]\nservers = [\"127.0.0.1:1\"]\n[[routes]]\nupstream = \"o\"\n",
        leaf.cert.display().to_string(),
        leaf.key.display().to_string()
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Asserts the run logged the start-up warning and failed to bind.
fn assert_logged(out: &Output, text: &str) {
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("WARN"), "{text}");
    assert!(text.contains("the certificate has no DNS names"), "{text}");
}

#[test]
fn log_lines_to_a_pipe_have_no_colour_codes() {
    let dir = scratch("logs-pipe");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let config = warning_then_exit(&dir, taken.local_addr().unwrap().port());
    // `output()` hands the child a pipe for stderr. NO_COLOR unset: the
    // pipe alone must turn colour off.
    let out = Command::new(BIN)
        .args(["serve", "--config", config.to_str().unwrap()])
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_logged(&out, &stderr);
    assert!(
        !out.stderr.contains(&0x1b),
        "an ESC byte in log lines on a pipe:\n{stderr:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `script` (util-linux, in Debian's essential bsdutils) runs `command`
/// on a pseudo-terminal; its output is what the terminal showed. `None`
/// (after a note) when it is missing outside CI.
fn on_a_terminal(command: &str, no_color: Option<&str>) -> Option<Output> {
    let mut script = Command::new("script");
    script.args(["-q", "-e", "-c", command, "/dev/null"]);
    match no_color {
        Some(value) => script.env("NO_COLOR", value),
        None => script.env_remove("NO_COLOR"),
    };
    match script.output() {
        Ok(out) => Some(out),
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("`script` (Debian package bsdutils) cannot run: {e}")
        }
        Err(e) => {
            eprintln!("skipped: `script` (bsdutils) cannot run: {e} [log colour on a terminal]");
            None
        }
    }
}

#[test]
fn log_lines_on_a_terminal_are_coloured_unless_no_color_is_set() {
    let dir = scratch("logs-tty");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let config = warning_then_exit(&dir, taken.local_addr().unwrap().port());
    let command = format!("{BIN} serve --config {}", config.display());
    let Some(coloured) = on_a_terminal(&command, None) else {
        return;
    };
    let shown = String::from_utf8_lossy(&coloured.stdout).into_owned();
    assert_logged(&coloured, &shown);
    assert!(
        coloured.stdout.contains(&0x1b),
        "no colour on a terminal:\n{shown:?}"
    );
    // NO_COLOR (any non-empty value) turns it off there too.
    let plain = on_a_terminal(&command, Some("1")).unwrap();
    let shown = String::from_utf8_lossy(&plain.stdout).into_owned();
    assert_logged(&plain, &shown);
    assert!(
        !plain.stdout.contains(&0x1b),
        "colour despite NO_COLOR:\n{shown:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
