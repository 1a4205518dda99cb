//! A route's freshness and refresh keys: `ttl`, `override_origin`,
//! `heuristic_*`, `stale_*`, `ignore_headers` -> [`RouteFreshness`];
//! `refresh`, `per_beta`, `lock_timeout`, `sus_stale`, `hit_for_miss` ->
//! [`RouteRefresh`]. Called by `routes.rs` for each route; reports and
//! carries on like the rest of validation.

use std::collections::BTreeMap;
use std::time::Duration;

use calmcache_core::{IgnorableField, IgnoredFields, RefreshMode};

use super::Checker;
use crate::config::defaults::route;
use crate::config::error::{toml_key, Problem};
use crate::config::raw::{RawRoute, Text};
use crate::config::{suggest, RouteFreshness, RouteRefresh, TtlTable};

const REFRESH_MODES: [RefreshMode; 4] = [
    RefreshMode::None,
    RefreshMode::Lock,
    RefreshMode::Per,
    RefreshMode::Sus,
];

impl Checker {
    /// `ttl`, `override_origin`, `heuristic_*`, `stale_*`, `ignore_headers`.
    pub(super) fn route_freshness(&mut self, path: &str, raw: &RawRoute) -> RouteFreshness {
        let at = |key: &str| format!("{path}.{key}");
        let fraction = raw.heuristic_fraction;
        RouteFreshness {
            ttl: self.ttl(&at("ttl"), &raw.ttl),
            override_origin: raw.override_origin.unwrap_or(route::OVERRIDE_ORIGIN),
            heuristic_fraction: self.heuristic_fraction(&at("heuristic_fraction"), fraction),
            heuristic_max: self.duration(
                &at("heuristic_max"),
                raw.heuristic_max.as_ref(),
                route::HEURISTIC_MAX,
            ),
            stale_while_revalidate: self.duration(
                &at("stale_while_revalidate"),
                raw.stale_while_revalidate.as_ref(),
                route::STALE_WHILE_REVALIDATE,
            ),
            stale_if_error: self.duration(
                &at("stale_if_error"),
                raw.stale_if_error.as_ref(),
                route::STALE_IF_ERROR,
            ),
            stale_if_busy: self.duration(
                &at("stale_if_busy"),
                raw.stale_if_busy.as_ref(),
                route::STALE_IF_BUSY,
            ),
            ignore_headers: self.ignore_headers(&at("ignore_headers"), &raw.ignore_headers),
        }
    }

    /// `refresh`, `per_beta`, `lock_timeout`, `sus_stale`, `hit_for_miss`.
    pub(super) fn route_refresh(&mut self, path: &str, raw: &RawRoute) -> RouteRefresh {
        let at = |key: &str| format!("{path}.{key}");
        RouteRefresh {
            mode: self.refresh(&at("refresh"), raw.refresh.as_deref()),
            per_beta: self.per_beta(&at("per_beta"), raw.per_beta),
            lock_timeout: self.duration(
                &at("lock_timeout"),
                raw.lock_timeout.as_ref(),
                route::LOCK_TIMEOUT,
            ),
            sus_stale: self.duration(&at("sus_stale"), raw.sus_stale.as_ref(), route::SUS_STALE),
            hit_for_miss: self.duration(
                &at("hit_for_miss"),
                raw.hit_for_miss.as_ref(),
                route::HIT_FOR_MISS,
            ),
        }
    }

    /// `ignore_headers`: the fields NGINX's `proxy_ignore_headers` may name
    /// that calmcache reads, none listed twice.
    fn ignore_headers(&mut self, path: &str, raw: &[String]) -> IgnoredFields {
        let mut fields = IgnoredFields::NONE;
        for (i, text) in raw.iter().enumerate() {
            let at = format!("{path}[{i}]");
            match IgnorableField::from_name(text) {
                Some(field) if fields.contains(field) => {
                    self.report(Problem::new(at, format!("{text:?} is listed twice")));
                }
                Some(field) => fields = fields.with(field),
                None => {
                    let names: Vec<&str> = IgnorableField::ALL.iter().map(|f| f.name()).collect();
                    let message = format!(
                        "{text:?} is not a field a route can ignore (fields: {})",
                        names.join(", ")
                    );
                    self.report(Problem::new(at, message));
                }
            }
        }
        fields
    }

    fn ttl(&mut self, path: &str, raw: &BTreeMap<String, Text>) -> TtlTable {
        let mut table = TtlTable::default();
        for (key, value) in raw {
            let at = format!("{path}.{}", toml_key(key));
            let ttl = self.duration(&at, Some(value), Duration::ZERO);
            if key == "any" {
                table.any = Some(ttl);
                continue;
            }
            match key.parse::<u16>() {
                Ok(status @ 100..=599) => {
                    table.by_status.insert(status, ttl);
                }
                _ => {
                    let problem = Problem::new(at, format!("{key:?} is not a status code"));
                    self.report(problem.hint(r#"keys are status codes 100 to 599, or "any""#));
                }
            }
        }
        table
    }

    fn heuristic_fraction(&mut self, path: &str, raw: Option<f64>) -> f64 {
        let fraction = raw.unwrap_or(route::HEURISTIC_FRACTION);
        if (0.0..=1.0).contains(&fraction) {
            // `abs` turns -0.0 into 0.0, so no caller sees a negative zero.
            return fraction.abs();
        }
        let problem = Problem::new(path, format!("{fraction} is outside 0..=1"));
        self.report(problem.hint("0.1 is the usual fraction; 0 turns heuristic freshness off"));
        route::HEURISTIC_FRACTION
    }

    fn refresh(&mut self, path: &str, raw: Option<&str>) -> RefreshMode {
        let Some(text) = raw else {
            return route::REFRESH;
        };
        if let Some(mode) = REFRESH_MODES.iter().find(|mode| mode.as_str() == text) {
            return *mode;
        }
        let modes: Vec<&str> = REFRESH_MODES.iter().map(|mode| mode.as_str()).collect();
        let problem = Problem::new(path, format!("unknown refresh mode {text:?}"));
        self.report(problem.hint(suggest::names_hint("modes", text, &modes)));
        route::REFRESH
    }

    fn per_beta(&mut self, path: &str, raw: Option<f64>) -> f64 {
        let beta = raw.unwrap_or(route::PER_BETA);
        if beta.is_finite() && beta > 0.0 {
            return beta;
        }
        let problem = Problem::new(path, format!("must be a finite number above 0, got {beta}"));
        self.report(problem.hint("1.0 is the XFetch default; above 1 refreshes earlier"));
        route::PER_BETA
    }
}
