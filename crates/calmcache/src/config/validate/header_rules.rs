//! `listeners`, `request_headers`, `response_headers` and `expires` route
//! keys -> [`RouteConfig::listeners`] and [`HeaderRules`]; every refusal
//! names its TOML path and the reason (config/header_rules.rs owns the
//! lists of fields no rule may touch).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use http::HeaderName;

use super::Checker;
use crate::config::defaults::route;
use crate::config::error::{toml_key, Problem};
use crate::config::header_rules::{
    may_remove, request_refusal, response_refusal, Cached, Expires, HeaderRules, RequestRules,
    ResponseRules,
};
use crate::config::key_template::KeyTemplate;
use crate::config::raw::{RawRequestHeaders, RawResponseHeaders, Text};
use crate::config::units;
use crate::config::value_template::{Side, ValueTemplate};
use crate::config::{RouteConfig, ServerConfig};

const VALUE_HINT: &str = "variables: those of `key` ($scheme, $host, $uri, $args, $is_args, \
                          $request_uri, $method, $arg_NAME, $http_NAME, $cookie_NAME), \
                          $remote_addr, $server_port; in response_headers also \
                          $upstream_cache_status";
const EXPIRES_HINT: &str = r#"e.g. "1h", "30d", "epoch", "max" or "off""#;

/// A route's raw header keys, taken out of its `[[routes]]` table.
pub(super) struct RawHeaderKeys {
    pub(super) request: Option<RawRequestHeaders>,
    pub(super) response: Option<RawResponseHeaders>,
    pub(super) expires: Option<Text>,
}

/// What the response rules' checks need to know of their route.
struct RouteFacts {
    cached: Cached,
    expires: Expires,
}

impl Checker {
    /// A route's `listeners`, under `path` (`routes[i].listeners`); whether
    /// each is a listener is checked once the server's are known
    /// ([`Checker::route_listeners_exist`]).
    pub(super) fn listener_names(&mut self, path: &str, raw: Option<&[String]>) -> Vec<SocketAddr> {
        let Some(raw) = raw else {
            return Vec::new();
        };
        if raw.is_empty() {
            let problem = Problem::new(path, "an empty list: the route would take no request");
            self.report(problem.hint("leave `listeners` out to take every listener"));
        }
        let mut out = Vec::with_capacity(raw.len());
        for (i, text) in raw.iter().enumerate() {
            match text.trim().parse::<SocketAddr>() {
                Ok(addr) => out.push(addr),
                Err(_) => self.report(
                    Problem::new(format!("{path}[{i}]"), format!("{text:?} is not an address"))
                        .hint(r#"a listener as written in server.listen or server.tls_listen, e.g. "0.0.0.0:80""#),
                ),
            }
        }
        out
    }

    /// Every route's `listeners` names one of `server`'s listeners, and
    /// only one kind of them (two listeners on port 0 share a name).
    pub(super) fn route_listeners_exist(&mut self, routes: &[RouteConfig], server: &ServerConfig) {
        let known: Vec<String> = server
            .listen
            .iter()
            .chain(&server.tls_listen)
            .map(|a| format!("{a:?}"))
            .collect();
        for (r, route) in routes.iter().enumerate() {
            for (i, addr) in route.matching.listeners.iter().enumerate() {
                let plain = server.listen.contains(addr);
                let tls = server.tls_listen.contains(addr);
                let path = format!("routes[{r}].listeners[{i}]");
                let problem = match (plain, tls) {
                    (true, false) | (false, true) => continue,
                    (false, false) => Problem::new(
                        path,
                        format!("\"{addr}\" is neither in server.listen nor in server.tls_listen"),
                    )
                    .hint(format!("listeners: {}", known.join(", "))),
                    (true, true) => Problem::new(
                        path,
                        format!("\"{addr}\" names a plain and a TLS listener (port 0 twice)"),
                    )
                    .hint("give the two listeners different addresses"),
                };
                self.report(problem);
            }
        }
    }

    /// A route's header rules, under `path` (`routes[i]`).
    pub(super) fn header_rules(
        &mut self,
        path: &str,
        raw: RawHeaderKeys,
        key: &KeyTemplate,
        cached: Cached,
    ) -> HeaderRules {
        let expires = self.expires(&format!("{path}.expires"), raw.expires.as_ref());
        let facts = RouteFacts { cached, expires };
        HeaderRules {
            request: self.request_rules(&format!("{path}.request_headers"), raw.request, key),
            response: self.response_rules(
                &format!("{path}.response_headers"),
                raw.response,
                &facts,
            ),
        }
    }

    fn request_rules(
        &mut self,
        path: &str,
        raw: Option<RawRequestHeaders>,
        key: &KeyTemplate,
    ) -> RequestRules {
        let Some(raw) = raw else {
            return RequestRules::default();
        };
        let refuse = |name: &HeaderName| request_refusal(name, key);
        let set = self.field_values(&format!("{path}.set"), &raw.set, Side::Request, &refuse);
        let mut remove = self.field_names(&format!("{path}.remove"), &raw.remove, &refuse);
        // NGINX: `proxy_set_header X ""` is not passed at all.
        let (cleared, set): (Vec<_>, Vec<_>) = set.into_iter().partition(|(_, v)| v.is_empty());
        remove.extend(cleared.into_iter().map(|(name, _)| name));
        self.set_and_removed(path, set.iter().map(|(n, _)| n), &remove);
        RequestRules { set, remove }
    }

    fn response_rules(
        &mut self,
        path: &str,
        raw: Option<RawResponseHeaders>,
        facts: &RouteFacts,
    ) -> ResponseRules {
        let Some(raw) = raw else {
            return ResponseRules {
                expires: facts.expires,
                ..ResponseRules::default()
            };
        };
        let refuse = |name: &HeaderName| response_refusal(name, facts.cached, facts.expires);
        let add = self.field_values(&format!("{path}.add"), &raw.add, Side::Response, &refuse);
        let always = self.field_values(
            &format!("{path}.always"),
            &raw.always,
            Side::Response,
            &refuse,
        );
        let may = |name: &HeaderName| refuse(name).filter(|_| !may_remove(name));
        let remove = self.field_names(&format!("{path}.remove"), &raw.remove, &may);
        for (name, _) in &add {
            if always.iter().any(|(other, _)| other == name) {
                let problem = Problem::new(
                    format!("{path}.always.{}", toml_key(name.as_str())),
                    format!("{name} is in both `add` and `always`"),
                );
                self.report(problem.hint("`always` covers every status: keep it there only"));
            }
        }
        self.set_and_removed(path, add.iter().chain(&always).map(|(n, _)| n), &remove);
        ResponseRules {
            add,
            always,
            remove,
            expires: facts.expires,
        }
    }

    /// `name = "value"` entries under `path`, each name a field name no
    /// `refuse` reason forbids and once only (names are case-insensitive).
    fn field_values(
        &mut self,
        path: &str,
        raw: &BTreeMap<String, String>,
        side: Side,
        refuse: &dyn Fn(&HeaderName) -> Option<&'static str>,
    ) -> Vec<(HeaderName, ValueTemplate)> {
        let mut out: Vec<(HeaderName, ValueTemplate)> = Vec::with_capacity(raw.len());
        for (text, value) in raw {
            let at = format!("{path}.{}", toml_key(text));
            let Some(name) = self.field_name(&at, text, refuse) else {
                continue;
            };
            if out.iter().any(|(other, _)| *other == name) {
                self.report(Problem::new(
                    at,
                    format!("{name} is given twice (names ignore case)"),
                ));
                continue;
            }
            match ValueTemplate::parse(value, side) {
                Ok(template) => out.push((name, template)),
                Err(e) => self.report(Problem::new(at, e).hint(VALUE_HINT)),
            }
        }
        out
    }

    /// A `remove` list under `path`.
    fn field_names(
        &mut self,
        path: &str,
        raw: &[String],
        refuse: &dyn Fn(&HeaderName) -> Option<&'static str>,
    ) -> Vec<HeaderName> {
        let mut out: Vec<HeaderName> = Vec::with_capacity(raw.len());
        for (i, text) in raw.iter().enumerate() {
            if let Some(name) = self.field_name(&format!("{path}[{i}]"), text, refuse) {
                if !out.contains(&name) {
                    out.push(name);
                }
            }
        }
        out
    }

    fn field_name(
        &mut self,
        path: &str,
        text: &str,
        refuse: &dyn Fn(&HeaderName) -> Option<&'static str>,
    ) -> Option<HeaderName> {
        let Ok(name) = HeaderName::from_bytes(text.as_bytes()) else {
            let problem = Problem::new(path, format!("{text:?} is not a header field name"));
            self.report(problem.hint("letters, digits and !#$%&'*+-.^_`|~ only, e.g. X-Real-IP"));
            return None;
        };
        if let Some(why) = refuse(&name) {
            self.report(Problem::new(
                path,
                format!("{text} may not be changed: {why}"),
            ));
            return None;
        }
        Some(name)
    }

    /// A field both given a value and removed under `path`.
    fn set_and_removed<'n>(
        &mut self,
        path: &str,
        set: impl Iterator<Item = &'n HeaderName>,
        remove: &[HeaderName],
    ) {
        for name in set.filter(|n| remove.contains(n)) {
            let problem = Problem::new(
                format!("{path}.remove"),
                format!("{name} is both given a value and removed"),
            );
            self.report(problem.hint("keep one of the two"));
        }
    }

    /// `expires`: `"off"`, `"epoch"`, `"max"` or a duration.
    fn expires(&mut self, path: &str, raw: Option<&Text>) -> Expires {
        let text = match raw {
            None => route::EXPIRES,
            Some(Text::Str(text)) => text.trim(),
            Some(Text::Number(number)) => {
                let problem = Problem::new(path, format!("{number} is not a duration"));
                self.report(problem.hint(EXPIRES_HINT));
                return Expires::Off;
            }
        };
        match text {
            "off" => Expires::Off,
            "epoch" => Expires::Epoch,
            "max" => Expires::Max,
            _ => match units::parse_duration(text) {
                Ok(d) => Expires::After(d),
                Err(bad) => {
                    self.report(Problem::new(path, bad.message).hint(EXPIRES_HINT));
                    Expires::Off
                }
            },
        }
    }
}
