//! `fleet.secret_file`: the fleet secret, read and checked with the config
//! (start, `calmcache check`, reload). The file holds one secret per line:
//! the first signs and verifies, an optional second is accepted too (a
//! rotation: see the README's fleet section). Blank lines and the
//! whitespace around a line are ignored; a missing, unreadable or empty
//! file, more than two secrets, or one shorter than [`SECRET_MIN`] bytes is
//! a config problem at `fleet.secret_file`.

use super::Checker;
use crate::config::error::Problem;
use crate::config::FleetSecret;

/// The shortest secret taken, in bytes: 32 bytes (256 bits) as HMAC-SHA-256
/// wants its key (RFC 2104 §3: "less than L bytes is strongly discouraged").
pub(crate) const SECRET_MIN: usize = 32;

const PATH: &str = "fleet.secret_file";
const HINT: &str = "e.g. `openssl rand -hex 32 > /etc/calmcache/fleet.secret` (64 hex digits), \
                    the same file on every node, readable by calmcache only";

impl Checker {
    /// The secrets in the file at `path`, or `None` (reported) when it
    /// cannot be used.
    pub(super) fn fleet_secret(&mut self, path: &str) -> Option<FleetSecret> {
        let text = match std::fs::read(path) {
            Ok(text) => text,
            Err(e) => {
                self.report(Problem::new(PATH, format!("cannot read {path}: {e}")).hint(HINT));
                return None;
            }
        };
        match secrets_in(&text) {
            Ok(secret) => Some(secret),
            Err(why) => {
                self.report(Problem::new(PATH, format!("{path}: {why}")).hint(HINT));
                None
            }
        }
    }
}

/// The secrets of a secret file's contents, or what is wrong with them.
pub(crate) fn secrets_in(text: &[u8]) -> Result<FleetSecret, String> {
    let lines: Vec<&[u8]> = text
        .split(|&b| b == b'\n')
        .map(<[u8]>::trim_ascii)
        .filter(|line| !line.is_empty())
        .collect();
    for (n, line) in lines.iter().enumerate() {
        if line.len() < SECRET_MIN {
            return Err(format!(
                "the secret on line {} has {} bytes; a secret needs at least {SECRET_MIN}",
                n + 1,
                line.len()
            ));
        }
    }
    match lines[..] {
        [] => Err("empty: it must hold the fleet secret (one line)".to_string()),
        [current] => Ok(FleetSecret {
            current: current.to_vec(),
            also_accepted: None,
        }),
        [current, other] => Ok(FleetSecret {
            current: current.to_vec(),
            also_accepted: (other != current).then(|| other.to_vec()),
        }),
        _ => Err(format!(
            "{} secrets; at most two: the one that signs, and one more accepted during a rotation",
            lines.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::config::{Config, ConfigError};

    const FLEET: &str = r#"
[server]
listen = ["127.0.0.1:0"]

[upstreams.app]
servers = ["127.0.0.1:8081"]

[[routes]]
upstream = "app"

[fleet]
redis = "redis://127.0.0.1:6379"
"#;

    /// The config with `secret_file = path`: its secret, or its problems.
    fn with_secret_file(path: &std::path::Path) -> Result<Config, Vec<String>> {
        let text = format!("{FLEET}secret_file = {:?}\n", path.display().to_string());
        match Config::from_toml(&text, "test.toml") {
            Ok(config) => Ok(config),
            Err(ConfigError::Invalid { problems, .. }) => Err(problems
                .iter()
                .map(|p| format!("{}: {}", p.path, p.message))
                .collect()),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_secret_file_s_problems_are_config_problems_at_its_path() {
        let dir = std::env::temp_dir().join(format!(
            "calmcache-fleet-secret-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let good = file("good", &format!("{A}\n"));
        let config = with_secret_file(&good).unwrap();
        let secret = config.fleet.as_ref().unwrap().secret.as_ref().unwrap();
        assert_eq!(secret.current, A.as_bytes());
        assert!(config.warnings().iter().all(|w| w.path != PATH));
        for (path, says) in [
            (dir.join("missing"), "cannot read"),
            (dir.clone(), "cannot read"),
            (file("empty", ""), "empty"),
            (
                file("short", "abc\n"),
                "has 3 bytes; a secret needs at least 32",
            ),
            (file("three", &format!("{A}\n{B}\n{A}!\n")), "3 secrets"),
        ] {
            let problems = with_secret_file(&path).unwrap_err();
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(
                problems[0].starts_with("fleet.secret_file: ") && problems[0].contains(says),
                "{}: {problems:?}",
                path.display()
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn fleet_mode_without_a_secret_is_warned_about() {
        let config = Config::from_toml(FLEET, "test.toml").unwrap();
        let warned: Vec<_> = config
            .warnings()
            .into_iter()
            .filter(|w| w.path == PATH)
            .collect();
        assert_eq!(warned.len(), 1);
        assert!(
            warned[0].message.contains("anyone who can write to Redis"),
            "{warned:?}"
        );
    }

    const A: &str = "0123456789abcdef0123456789abcdef";
    const B: &str = "fedcba9876543210fedcba9876543210";

    #[test]
    fn one_or_two_secrets_blank_lines_and_spaces_ignored() {
        let one = secrets_in(format!("{A}\n").as_bytes()).unwrap();
        assert_eq!(one.current, A.as_bytes());
        assert_eq!(one.also_accepted, None);
        let two = secrets_in(format!("\n  {B}\r\n\n{A}  \n").as_bytes()).unwrap();
        assert_eq!(two.current, B.as_bytes());
        assert_eq!(two.also_accepted.as_deref(), Some(A.as_bytes()));
        let same = secrets_in(format!("{A}\n{A}\n").as_bytes()).unwrap();
        assert_eq!(same.also_accepted, None);
    }

    #[test]
    fn empty_short_or_too_many_say_what_is_wrong() {
        for (text, says) in [
            (String::new(), "empty"),
            ("\n \n".to_string(), "empty"),
            ("short\n".to_string(), "line 1 has 5 bytes"),
            (format!("{A}\n{}\n", &B[..31]), "line 2 has 31 bytes"),
            (format!("{A}\n{B}\n{A}x\n"), "3 secrets; at most two"),
        ] {
            let err = secrets_in(text.as_bytes()).unwrap_err();
            assert!(err.contains(says), "{text:?}: {err}");
        }
    }
}
