//! An upstream's `balance` and `hash_key` -> [`Balance`]. Reports and
//! carries on, like the rest of validation.

use super::Checker;
use crate::config::error::Problem;
use crate::config::key_template::KeyTemplate;
use crate::config::raw::RawUpstream;
use crate::config::{suggest, Balance};

/// The spellings of `balance`.
const MODES: [&str; 3] = ["round_robin", "least_conn", "hash"];

impl Checker {
    /// `balance` (default round robin) and `hash_key` (with `"hash"`
    /// only, and needed there), under the upstream's `path`.
    pub(super) fn balance(&mut self, path: &str, raw: &RawUpstream) -> Balance {
        let at = |key: &str| format!("{path}.{key}");
        let mode = raw.balance.as_deref().unwrap_or("round_robin");
        let balance = match mode {
            "round_robin" => Balance::RoundRobin,
            "least_conn" => Balance::LeastConn,
            "hash" => return self.hash(&at("hash_key"), raw.hash_key.as_deref()),
            other => {
                let problem = Problem::new(at("balance"), format!("unknown balance {other:?}"));
                self.report(problem.hint(suggest::names_hint("modes", other, &MODES)));
                Balance::RoundRobin
            }
        };
        if raw.hash_key.is_some() {
            let problem = Problem::new(at("hash_key"), "is only read with balance = \"hash\"");
            self.report(problem.hint(r#"add balance = "hash", or remove hash_key"#));
        }
        balance
    }

    fn hash(&mut self, path: &str, raw: Option<&str>) -> Balance {
        let Some(text) = raw else {
            self.missing(path, r#"hash_key = "$request_uri""#);
            return Balance::RoundRobin;
        };
        match KeyTemplate::parse(text) {
            Ok(template) => Balance::Hash(template),
            Err(message) => {
                let hint = r#"a key template, e.g. "$request_uri" or "$host$uri""#;
                self.report(Problem::new(path, message).hint(hint));
                Balance::RoundRobin
            }
        }
    }
}
