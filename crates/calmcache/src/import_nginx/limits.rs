//! `limit_req_zone` / `limit_conn_zone` with the locations' `limit_req` /
//! `limit_conn` as `[limits.NAME]` tables and route `limits`.
//!
//! Owns which carry over: zones keyed by the client address
//! (`$binary_remote_addr`, `$remote_addr`: calmcache's limits key by it),
//! NGINX's refusal status (503 unless `limit_req_status` /
//! `limit_conn_status` says otherwise) and one calmcache limit per zone
//! and per distinct `burst`/`delay` or connection count (NGINX shares one
//! zone's counts between them: commented). It must not write other route
//! keys.

use std::collections::HashMap;

use super::ledger;
use super::note_skipped;
use super::settings::Settings;
use super::toml_out::{key, Section, Value};
use super::tree::Directive;
use super::Notes;

/// The zones read, and the limits written so far.
#[derive(Default)]
pub(crate) struct Limits {
    /// Zone name -> its rate (`None`: a `limit_conn_zone`).
    zones: HashMap<String, (Option<String>, Directive)>,
    /// The `[limits.NAME]` sections, in the order first used.
    pub(crate) sections: Vec<(String, Section)>,
}

impl Limits {
    /// A `limit_req_zone` or `limit_conn_zone` at http level.
    pub(crate) fn zone(&mut self, d: &Directive, notes: &mut Notes) {
        let arg = |p: &str| {
            d.args
                .iter()
                .find_map(|a| a.strip_prefix(p))
                .map(str::to_owned)
        };
        let client = matches!(
            d.args.first().map(String::as_str),
            Some("$binary_remote_addr" | "$remote_addr")
        );
        let Some(name) = arg("zone=").and_then(|z| z.split(':').next().map(str::to_owned)) else {
            return notes.push(note_skipped(d, "no zone="));
        };
        if !client {
            return notes.push(note_skipped(
                d,
                "calmcache's limits key by the client address only",
            ));
        }
        let rate = arg("rate=");
        if d.name == "limit_req_zone" && rate.is_none() {
            return notes.push(note_skipped(d, "no rate="));
        }
        self.zones.insert(name, (rate, d.clone()));
    }

    /// The route's `limits`, from the `limit_req` / `limit_conn` in effect.
    pub(crate) fn route(&mut self, route: &mut Section, s: &Settings) {
        let mut names = Vec::new();
        for d in s.all("limit_req") {
            if let Some(n) = self.req(d, s, route) {
                names.push(Value::Str(n));
            }
        }
        for d in s.all("limit_conn") {
            if let Some(n) = self.conn(d, s, route) {
                names.push(Value::Str(n));
            }
        }
        if !names.is_empty() {
            route.set("limits", Value::List(names));
        }
    }

    fn req(&mut self, d: &Directive, s: &Settings, route: &mut Section) -> Option<String> {
        let zone = d.args.iter().find_map(|a| a.strip_prefix("zone="))?;
        let Some((Some(rate), zd)) = self.zones.get(zone).cloned() else {
            route.note(note_skipped(
                d,
                "its zone is not a limit_req_zone carried over",
            ));
            return None;
        };
        let burst = d
            .args
            .iter()
            .find_map(|a| a.strip_prefix("burst="))
            .and_then(|b| b.parse::<i64>().ok())
            .unwrap_or(0);
        let delay = if d.args.iter().any(|a| a == "nodelay") {
            Value::Str("nodelay".into())
        } else {
            let n = d
                .args
                .iter()
                .find_map(|a| a.strip_prefix("delay="))
                .and_then(|b| b.parse::<i64>().ok())
                .unwrap_or(0);
            Value::Int(n)
        };
        let entries = vec![
            ("rate", Value::Str(rate)),
            ("burst", Value::Int(burst)),
            ("delay", delay),
            ("status", Value::Int(status(s, "limit_req_status"))),
        ];
        Some(self.write(zone, entries, d, &zd, route))
    }

    fn conn(&mut self, d: &Directive, s: &Settings, route: &mut Section) -> Option<String> {
        let [zone, n] = d.args.as_slice() else {
            return None;
        };
        let Some((None, zd)) = self.zones.get(zone.as_str()).cloned() else {
            route.note(note_skipped(
                d,
                "its zone is not a limit_conn_zone carried over",
            ));
            return None;
        };
        let Ok(n) = n.parse::<i64>() else {
            route.note(note_skipped(d, "not a number"));
            return None;
        };
        let entries = vec![
            ("connections", Value::Int(n)),
            ("status", Value::Int(status(s, "limit_conn_status"))),
        ];
        Some(self.write(zone, entries, d, &zd, route))
    }

    /// The limit of `zone` with `entries`: an existing one with the same,
    /// else a new one (`zone`, then `zone_2`, ...).
    fn write(
        &mut self,
        zone: &str,
        entries: Vec<(&str, Value)>,
        d: &Directive,
        zd: &Directive,
        route: &mut Section,
    ) -> String {
        ledger::carried(d);
        ledger::carried(zd);
        let same = |sec: &Section| entries.iter().all(|(k, v)| sec.get(k) == Some(v));
        let mine: Vec<&(String, Section)> = self
            .sections
            .iter()
            .filter(|(n, _)| n == zone || n.starts_with(&format!("{zone}_")))
            .collect();
        if let Some((name, _)) = mine.iter().find(|(_, sec)| same(sec)) {
            route.note(format!("From `{}` ({}).", d.text(), d.pos));
            return name.clone();
        }
        let name = match mine.len() {
            0 => zone.to_owned(),
            n => format!("{zone}_{}", n + 1),
        };
        let mut section = Section::new(format!("[limits.{}]", key(&name)));
        section.note(format!(
            "From `{}` ({}) and `{}` ({}).",
            zd.text(),
            zd.pos,
            d.text(),
            d.pos
        ));
        if !mine.is_empty() {
            section.note(
                "NGINX counts every limit of one zone together; calmcache counts this one apart.",
            );
        }
        for (k, v) in entries {
            section.set(k, v);
        }
        route.note(format!("From `{}` ({}).", d.text(), d.pos));
        self.sections.push((name.clone(), section));
        name
    }
}

/// NGINX's refusal status: `limit_*_status`, else 503.
fn status(s: &Settings, name: &str) -> i64 {
    s.last(name)
        .and_then(|d| d.args.first())
        .and_then(|n| n.parse().ok())
        .unwrap_or(503)
}
