//! The man page and the shell completions, generated from the CLI's clap
//! definition (`main.rs` owns it and passes it in): `calmcache manpage`
//! (hidden; `scripts/package` puts its output in the Debian package) and
//! `calmcache completions <bash|zsh|fish|...>`.
//!
//! Owns nothing else: what the commands do is `main.rs`'s.

use std::io::Write;
use std::process::ExitCode;

/// The shells `calmcache completions` writes for.
pub use clap_complete::Shell;

/// Writes `calmcache.1` (roff) for `cli` to stdout.
pub fn print_manpage(cli: clap::Command) -> ExitCode {
    let mut page = Vec::new();
    let rendered = clap_mangen::Man::new(cli).render(&mut page);
    finish(rendered.and_then(|()| std::io::stdout().lock().write_all(&page)))
}

/// Writes `shell`'s completion script for `cli` to stdout.
pub fn print_completions(shell: Shell, mut cli: clap::Command) -> ExitCode {
    let name = cli.get_name().to_owned();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cli, name, &mut script);
    finish(std::io::stdout().lock().write_all(&script))
}

fn finish(written: std::io::Result<()>) -> ExitCode {
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("calmcache: cannot write to stdout: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    #[test]
    fn a_page_and_a_script_name_the_subcommands() {
        let cli = clap::Command::new("calmcache")
            .about("A caching reverse proxy")
            .subcommand(clap::Command::new("serve").about("Run the proxy"));
        let mut page = Vec::new();
        clap_mangen::Man::new(cli.clone())
            .render(&mut page)
            .unwrap();
        let page = String::from_utf8(page).unwrap();
        assert!(page.contains(".TH calmcache 1"), "{page}");
        assert!(page.contains("serve"), "{page}");
        let mut script = Vec::new();
        clap_complete::generate(
            super::Shell::Bash,
            &mut cli.clone(),
            "calmcache",
            &mut script,
        );
        assert!(String::from_utf8(script).unwrap().contains("serve"));
    }
}
