//! Secrets written inline in the config file, and whether the file lets
//! others read them: `check` (and the proxy at start and reload) warns when
//! a file readable by every user holds the admin token, the fleet's Redis
//! password, or a Redis URL with a password in it (`warnings.rs` words it).
//!
//! Every secret a config takes has a file form that keeps it out of the
//! config: `admin.token_file`, `fleet.password_file` (also for the password
//! of a `redis://` URL: the URL then carries the user alone), and
//! `CALMCACHE_ADMIN_TOKEN` for the token. Upstream TLS keys are files
//! already (`tls_client_key`).

use std::path::Path;

use super::raw::RawConfig;

/// Where a config's secrets are exposed: the TOML paths of the secrets
/// written inline, and the mode of the file they came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InlineSecrets {
    /// TOML paths of the keys holding a secret inline (`admin.token`,
    /// `fleet.password`, `fleet.redis[1]`), in file order.
    pub paths: Vec<String>,
    /// The config file's permission bits (`None`: not read from a file).
    pub file_mode: Option<u32>,
}

impl InlineSecrets {
    /// The secrets `raw` holds inline (the file mode is added by
    /// [`InlineSecrets::with_file`]).
    pub(crate) fn of(raw: &RawConfig) -> InlineSecrets {
        let mut paths = Vec::new();
        if raw.admin.as_ref().is_some_and(|a| a.token.is_some()) {
            paths.push("admin.token".to_owned());
        }
        if let Some(fleet) = &raw.fleet {
            if fleet.password.is_some() {
                paths.push("fleet.password".to_owned());
            }
            let urls: Vec<(String, &String)> = match &fleet.redis {
                None => Vec::new(),
                Some(super::raw::RawRedisNodes::One(url)) => vec![("fleet.redis".into(), url)],
                Some(super::raw::RawRedisNodes::Cluster(urls)) => urls
                    .iter()
                    .enumerate()
                    .map(|(i, url)| (format!("fleet.redis[{i}]"), url))
                    .collect(),
            };
            // A URL that changes when its password is redacted carries one.
            paths.extend(
                urls.into_iter()
                    .filter(|(_, url)| super::redact_url(url) != **url)
                    .map(|(path, _)| path),
            );
        }
        InlineSecrets {
            paths,
            file_mode: None,
        }
    }

    /// Notes the mode of `file`, the config these secrets were read from.
    pub(crate) fn with_file(mut self, file: &Path) -> InlineSecrets {
        use std::os::unix::fs::PermissionsExt;
        self.file_mode = std::fs::metadata(file)
            .ok()
            .map(|m| m.permissions().mode() & 0o7777);
        self
    }

    /// The file's mode when every user can read it and it holds a secret
    /// inline (the bit `check` warns about: 0o004).
    pub fn readable_by_others(&self) -> Option<u32> {
        self.file_mode
            .filter(|mode| mode & 0o004 != 0 && !self.paths.is_empty())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn secrets(text: &str) -> InlineSecrets {
        let parsed = super::super::parse::parse(text).unwrap();
        InlineSecrets::of(&parsed.raw)
    }

    #[test]
    fn each_inline_secret_is_named_by_its_path() {
        let s = secrets(
            "[admin]\ntoken = \"t\"\n[fleet]\npassword = \"p\"\n\
             redis = [\"redis://a:6379\", \"redis://u:pw@b:6379\", \"redis://:pw@c:6379\"]\n",
        );
        assert_eq!(
            s.paths,
            [
                "admin.token",
                "fleet.password",
                "fleet.redis[1]",
                "fleet.redis[2]"
            ]
        );
    }

    #[test]
    fn file_forms_and_urls_without_passwords_are_not_secrets_inline() {
        let s = secrets(
            "[admin]\ntoken_file = \"/x\"\n[fleet]\npassword_file = \"/y\"\n\
             redis = \"redis://user@a:6379\"\n",
        );
        assert!(s.paths.is_empty(), "{:?}", s.paths);
        let exposed = InlineSecrets {
            paths: Vec::new(),
            file_mode: Some(0o644),
        };
        assert_eq!(exposed.readable_by_others(), None);
    }

    #[test]
    fn only_a_file_every_user_can_read_exposes_them() {
        let with = |mode| InlineSecrets {
            paths: vec!["admin.token".into()],
            file_mode: Some(mode),
        };
        assert_eq!(with(0o644).readable_by_others(), Some(0o644));
        assert_eq!(with(0o604).readable_by_others(), Some(0o604));
        assert_eq!(with(0o640).readable_by_others(), None);
        assert_eq!(with(0o600).readable_by_others(), None);
    }
}
