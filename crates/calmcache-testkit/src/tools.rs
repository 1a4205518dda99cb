//! Command-line tools from Debian packages that a test runs as they are
//! (`promtool` from `prometheus`, `systemd-analyze` from `systemd`,
//! `dpkg-deb`): found on `PATH`, or the test is skipped with a note on
//! stderr, except under `CI=true`, where a missing tool fails the test (CI
//! never passes a test it did not run). `./scripts/test` installs them.

use std::io::Write;
use std::path::PathBuf;

/// `program` on `PATH`, or `None` after printing why the calling test
/// skips (panics instead under `CI=true`). `package` is the Debian
/// package that provides it.
pub fn debian_tool(program: &str, package: &str) -> Option<PathBuf> {
    if let Some(found) = on_path(program) {
        return Some(found);
    }
    // libtest names each test's thread after the test.
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    let message = format!(
        "skipped: `{program}` not found on PATH (Debian package {package}; \
         ./scripts/test installs it) [{test}]"
    );
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{message} (CI=true: a test may not skip)");
    }
    // Straight to fd 2: libtest captures `eprintln!` of a passing test.
    let _ = writeln!(std::io::stderr(), "{message}");
    None
}

fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
