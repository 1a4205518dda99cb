//! The man page and the shell completions, generated from the CLI's clap
//! definition (`main.rs` owns it and passes it in): `calmcache manpage`
//! (hidden; `scripts/package` puts its output in the Debian package) and
//! `calmcache completions <bash|zsh|fish|...>`. The page has clap's sections
//! (name, synopsis, description, options, commands) and the ones a daemon's
//! page needs after them: FILES, SIGNALS, ENVIRONMENT, EXIT STATUS and SEE
//! ALSO ([`SECTIONS`]), pointing to the manual the package installs under
//! `/usr/share/doc/calmcache/`.
//!
//! Owns nothing else: what the commands do is `main.rs`'s, and
//! `docs/reference/cli.md` says the same in Markdown (a test here checks
//! that every name [`SECTIONS`] lists appears there).

use std::io::Write;
use std::process::ExitCode;

/// The shells `calmcache completions` writes for.
pub use clap_complete::Shell;

/// One entry of a man page section: a tag (a file, a signal, a variable,
/// an exit code) and what it means.
type Entry = (&'static str, &'static str);

/// The sections after clap's, in order: the facts of `main.rs` (signals,
/// exit codes), `config/` (the token variable), the unit and the package.
pub(crate) const SECTIONS: [(&str, &[Entry]); 5] = [
    (
        "FILES",
        &[
            ("/etc/calmcache/calmcache.toml", "The config the packaged systemd unit serves (a conffile, mode 0640, group calmcache). Check an edit with calmcache check -c FILE, apply it with systemctl reload calmcache."),
            ("/usr/share/doc/calmcache/config.example.toml", "Every key, with its default where it has one."),
            ("/usr/share/doc/calmcache/README.md", "What calmcache is, how to install it, and a quick start in front of a site."),
            ("/usr/share/doc/calmcache/docs/index.md", "The manual: the guide's chapters (caching, refresh policies, zones and disks, purge, fleet, security, operations, production, migrating from NGINX) and the reference pages under docs/reference/: config.md (every key and its default), cli.md, metrics.md, cache-status.md, admin-api.md."),
            ("/usr/lib/systemd/system/calmcache.service", "The systemd unit (Type=notify): runs calmcache serve as the calmcache user; it may write only under /var/cache/calmcache and /var/log/calmcache."),
            ("/var/cache/calmcache", "Where disk zones go under the packaged unit (created by the package)."),
            ("/usr/share/calmcache/grafana/calmcache.json", "A Grafana dashboard for the /metrics families."),
            ("/usr/share/calmcache/prometheus/alerts.yml", "Prometheus alert rules."),
        ],
    ),
    (
        "SIGNALS",
        &[
            ("SIGHUP", "serve: read the config file again, as POST /reload does (a config with problems is refused, logged, and the running one kept; no connection is dropped). systemctl reload sends it."),
            ("SIGUSR1", "serve: reopen the access log file (for logrotate's postrotate)."),
            ("SIGTERM, SIGINT", "Stop: the listeners stop accepting, requests in flight and WebSocket tunnels get [server] shutdown_timeout (default 30s) to finish, then the process exits 0. demo --fleet also stops on SIGHUP (a closed terminal), with its redis-server."),
        ],
    ),
    (
        "ENVIRONMENT",
        &[
            ("CALMCACHE_ADMIN_TOKEN", "The admin listener's bearer token, when the config has neither [admin] token nor token_file."),
            ("CALMCACHE_LOG", "Which log lines are written to stderr, as a tracing filter (info by default; debug, or calmcache=debug,warn)."),
            ("NO_COLOR", "When set and not empty, log lines carry no colour codes (they have none unless stderr is a terminal)."),
            ("NOTIFY_SOCKET", "Set by systemd for a Type=notify unit: calmcache reports there when it is ready (every listener bound, the disk zones' loaders started), reloading and stopping."),
        ],
    ),
    (
        "EXIT STATUS",
        &[
            ("0", "Success: serve stopped on SIGTERM or SIGINT, check found no problem, reload was applied."),
            ("1", "A failure only running can find: serve could not start (a port taken, a zone directory used by another calmcache) or failed; reload was refused or the admin listener could not be reached; import-nginx could not write its output."),
            ("2", "A config problem (check, serve and reload print every problem with its TOML path; the unit does not restart on it), an NGINX config import-nginx cannot parse, reload with no [admin] listener, or a command line that does not parse."),
        ],
    ),
    (
        "SEE ALSO",
        &[
            ("/usr/share/doc/calmcache/docs/reference/cli.md", "These commands, their options and the above, in Markdown."),
            ("systemctl(1), journalctl(1)", "Running it as a service: systemctl reload calmcache, journalctl -u calmcache."),
        ],
    ),
];

/// Writes `calmcache.1` (roff) for `cli` to stdout.
pub fn print_manpage(cli: clap::Command) -> ExitCode {
    let mut page = Vec::new();
    let rendered = render_manpage(cli, &mut page);
    finish(rendered.and_then(|()| std::io::stdout().lock().write_all(&page)))
}

/// clap's sections, then [`SECTIONS`], then the version.
fn render_manpage(cli: clap::Command, page: &mut Vec<u8>) -> std::io::Result<()> {
    let man = clap_mangen::Man::new(cli);
    man.render_title(page)?;
    man.render_name_section(page)?;
    man.render_synopsis_section(page)?;
    man.render_description_section(page)?;
    man.render_options_section(page)?;
    man.render_subcommands_section(page)?;
    for (title, entries) in SECTIONS {
        write_section(page, title, entries)?;
    }
    man.render_version_section(page)
}

/// One roff section: `.SH TITLE`, then a tagged paragraph (`.TP`) per entry.
fn write_section(page: &mut Vec<u8>, title: &str, entries: &[Entry]) -> std::io::Result<()> {
    writeln!(page, ".SH {title}")?;
    for (tag, text) in entries {
        writeln!(page, ".TP\n\\fB{}\\fR\n{}", roff_text(tag), roff_text(text))?;
    }
    Ok(())
}

/// `text` as roff body text: backslashes and hyphens escaped, and a zero
/// width break before a leading `.` or `'` (which would start a request).
fn roff_text(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    match escaped.chars().next() {
        Some('.' | '\'') => format!("\\&{escaped}"),
        _ => escaped,
    }
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

    #[test]
    fn the_page_has_the_daemon_sections_after_the_commands() {
        let cli = clap::Command::new("calmcache")
            .version("1.0")
            .subcommand(clap::Command::new("serve").about("Run the proxy"));
        let mut page = Vec::new();
        super::render_manpage(cli, &mut page).unwrap();
        let page = String::from_utf8(page).unwrap();
        let at = |needle: &str| {
            page.find(needle)
                .unwrap_or_else(|| panic!("{needle}: {page}"))
        };
        let order = [
            at(".SH NAME"),
            at(".SH SUBCOMMANDS"),
            at(".SH FILES"),
            at(".SH SIGNALS"),
            at(".SH ENVIRONMENT"),
            at(".SH EXIT STATUS"),
            at(".SH SEE ALSO"),
            at(".SH VERSION"),
        ];
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{page}");
        assert!(page.contains("\\fBSIGHUP\\fR"), "{page}");
        assert!(
            page.contains("/usr/share/doc/calmcache/docs/index.md"),
            "{page}"
        );
    }

    #[test]
    fn roff_text_escapes_what_roff_would_read_as_requests() {
        assert_eq!(super::roff_text(".a-b\\c"), "\\&.a\\-b\\ec");
        assert_eq!(super::roff_text("plain"), "plain");
    }

    /// Every file, signal, variable and exit code of the page is named in
    /// docs/reference/cli.md, so the Markdown and the page say the same.
    #[test]
    fn the_cli_reference_names_every_entry_of_the_page() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/reference/cli.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let missing: Vec<&str> = super::SECTIONS
            .iter()
            .flat_map(|(_, entries)| entries.iter().map(|(tag, _)| *tag))
            .filter(|tag| {
                !tag.split(", ")
                    .all(|name| doc.contains(&format!("`{name}`")))
            })
            .collect();
        assert!(
            missing.is_empty(),
            "docs/reference/cli.md lacks {missing:?}"
        );
        // The package installs the manual there (`[package.metadata.deb]`).
        assert!(doc.contains("/usr/share/doc/calmcache/docs/"));
    }
}
