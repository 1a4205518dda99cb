//! The document: NGINX's location selection turned into first-match routes
//! (exact, `^~`, regex in file order, other prefixes longest first), in the
//! groups `server_names` plans, and the upstream each route sends to.

use super::*;

impl Converter<'_> {
    /// Builds the document once everything is read.
    pub(super) fn document(mut self, main: &str) -> Doc {
        let mut routes = Vec::new();
        let servers = std::mem::take(&mut self.servers);
        self.host_groups(&servers, &mut routes);
        let mut doc = Doc::default();
        doc.header.push(format!(
            "calmcache config imported from the NGINX config {main} by `calmcache import-nginx`."
        ));
        doc.header.push("Check it with `calmcache check -c FILE`. Comments say what was not carried over and why, and where calmcache behaves differently.".into());
        doc.header.push(String::new());
        doc.header.extend(std::mem::take(&mut self.top));
        self.finish_server();
        doc.sections
            .push(std::mem::replace(&mut self.server, Section::new("")));
        doc.sections.append(&mut self.tls);
        let used: HashSet<String> = routes
            .iter()
            .filter_map(|r: &Section| match r.get("upstream") {
                Some(Value::Str(u)) => Some(u.clone()),
                _ => None,
            })
            .collect();
        for (name, mut section) in self.upstream_blocks.drain(..) {
            if !used.contains(&name) {
                section.note("No proxy_pass uses this upstream.");
            }
            doc.sections.push(section);
        }
        for (_, section) in self.direct.drain(..) {
            doc.sections.push(section);
        }
        if self.placeholder {
            let mut section = Section::new(format!("[upstreams.{PLACEHOLDER}]"));
            section.note(
                "PLACEHOLDER: the NGINX config does not say where (some) requests go (no proxy_pass); \
                 write your origin's address here.",
            );
            section.set(
                "servers",
                Value::List(vec![Value::Str("127.0.0.1:8080".into())]),
            );
            doc.sections.push(section);
        }
        for (_, section, _) in self.zones.zones.drain(..) {
            doc.sections.push(section);
        }
        doc.sections.extend(routes);
        if let Some(log) = self.access_log.take() {
            doc.sections.push(log);
        }
        doc
    }

    /// Every server's routes in the groups that pick NGINX's server by Host
    /// (see server_names), each group's routes restricted to its hosts.
    pub(super) fn host_groups(&mut self, servers: &[Server], routes: &mut Vec<Section>) {
        let default = servers.iter().position(|s| s.default).unwrap_or(0);
        let names: Vec<&Names> = servers.iter().map(|s| &s.names).collect();
        let (groups, notes) = server_names::plan(&names, default);
        if servers.len() > 1 {
            self.top.push(
                "NGINX chooses a server block by Host: the routes carry each server's server_name \
                 as hosts, in the order that makes the first match NGINX's choice (exact names, then \
                 wildcards, longest first, then the default server for every other Host). A server \
                 can appear in several groups."
                    .into(),
            );
        } else if servers.iter().any(|s| s.names.usable()) {
            self.top.push(
                "server_name: NGINX answers every Host with the only server block, so its routes \
                 have no hosts."
                    .into(),
            );
        }
        if servers.windows(2).any(|w| w[0].listens != w[1].listens) {
            self.top.push(
                "The server blocks listen on different addresses: NGINX chooses among the servers \
                 of the address a request came in on, calmcache's routes serve every listener."
                    .into(),
            );
        }
        self.top.extend(notes);
        // Each server's routes are built once (their notes written once),
        // then copied into every group it is in.
        let mut built: Vec<Option<Vec<Section>>> = vec![None; servers.len()];
        for group in groups {
            let server = &servers[group.server];
            let first = routes.len();
            let own = match &built[group.server] {
                Some(own) => own.clone(),
                None => {
                    let mut own = Vec::new();
                    self.server_routes(server, &mut own);
                    built[group.server] = Some(own.clone());
                    own
                }
            };
            routes.extend(own);
            let Some(hosts) = group.hosts else {
                if let Some(route) = routes.get_mut(first).filter(|_| !group.note.is_empty()) {
                    route.comments.insert(0, group.note);
                }
                continue;
            };
            let list = Value::List(hosts.into_iter().map(Value::Str).collect());
            for route in &mut routes[first..] {
                route.set_first("hosts", list.clone());
            }
            if let Some(route) = routes.get_mut(first) {
                route.comments.insert(0, group.note);
                if !covers_every_path(server) {
                    route.comments.insert(
                        1,
                        "This server has no location for every path: a path none of its \
                         locations match goes on to the routes below, where NGINX would answer it \
                         from this server (usually 404)."
                            .into(),
                    );
                }
            }
        }
    }

    /// The routes of one server, in the order that picks NGINX's location.
    pub(super) fn server_routes(&mut self, server: &Server, routes: &mut Vec<Section>) {
        if server.locations.is_empty() {
            let loc = Location {
                modifier: Modifier::Prefix,
                pattern: "/".into(),
                settings: server.settings.clone(),
                pass: None,
                pos: server.pos.clone().unwrap_or(Pos {
                    file: "-".into(),
                    line: 0,
                }),
                notes: vec!["This server has no location: one route for every path.".into()],
            };
            self.location_routes(&loc, None, routes);
            return;
        }
        let (order, notes) = order(&server.locations);
        self.top.extend(notes);
        for i in order {
            let loc = &server.locations[i];
            let m = match loc.modifier {
                Modifier::Exact => Ok(Some(pathre::exact(&loc.pattern))),
                Modifier::NoRegex | Modifier::Prefix if loc.pattern == "/" => Ok(None),
                Modifier::NoRegex | Modifier::Prefix => Ok(Some(pathre::prefix(&loc.pattern))),
                Modifier::Regex { case_insensitive } => {
                    pathre::location(&loc.pattern, case_insensitive).map(Some)
                }
            };
            match m {
                Ok(m) => self.location_routes(loc, m, routes),
                Err(why) => self.top.push(format!(
                    "not carried over: location {} ({}): {why}",
                    loc.pattern, loc.pos
                )),
            }
        }
    }

    /// The route (or, for a `map`-chosen zone, routes) of one location.
    pub(super) fn location_routes(
        &mut self,
        loc: &Location,
        m: Option<RouteRegex>,
        routes: &mut Vec<Section>,
    ) {
        let mut notes = loc.notes.clone();
        let upstream = self.upstream_for(loc, &mut notes);
        let choice = match loc.settings.last("proxy_cache") {
            Some(d) => self.zones.choice(d, &mut notes),
            None => Choice::Off,
        };
        let plan = plan(m, choice, &mut notes);
        let first = routes.len();
        for (i, (m, choice)) in plan.into_iter().enumerate() {
            let mut route = Section::new("[[routes]]");
            if i == 0 {
                route.note(format!("location {} ({})", describe(loc), loc.pos));
            } else {
                route.note(format!(
                    "location {} ({}), map entry {i}",
                    describe(loc),
                    loc.pos
                ));
            }
            for m in m {
                route.set(m.key(), Value::Str(m.regex().to_owned()));
            }
            route.set("upstream", Value::Str(upstream.clone()));
            let inactive = match &choice {
                Choice::One(z) => {
                    route.set("zone", Value::Str(z.clone()));
                    Some(self.zones.inactive(z))
                }
                Choice::Hash(zs) => {
                    route.set(
                        "zones",
                        Value::List(zs.iter().cloned().map(Value::Str).collect()),
                    );
                    zs.iter().map(|z| self.zones.inactive(z)).max()
                }
                Choice::Off | Choice::ByMatch(..) => None,
            };
            if let Some(inactive) = inactive {
                cache::caching_keys(&mut route, &loc.settings, &upstream, inactive);
            }
            if let Some((ws, why)) = cache::websocket(&loc.settings) {
                route.set("websocket", Value::Bool(ws)).note(why);
            }
            if i > 0 {
                // The first route of the location carries the explanations.
                route.comments.truncate(1);
                route.note("The comments of the first route of this location apply here too.");
                route.entries.iter_mut().for_each(|e| e.comments.clear());
            }
            routes.push(route);
        }
        let route = &mut routes[first];
        cache::others(route, &loc.settings);
        route.comments.extend(notes);
    }

    /// The upstream a location sends to (a placeholder without proxy_pass).
    pub(super) fn upstream_for(&mut self, loc: &Location, notes: &mut Notes) -> String {
        let Some(pass) = &loc.pass else {
            notes.push(
                "No proxy_pass: NGINX answers these requests itself (files, return, ...); calmcache \
                 only proxies, so they go to the placeholder upstream."
                    .into(),
            );
            self.placeholder = true;
            return PLACEHOLDER.into();
        };
        let target = match upstreams::target(pass) {
            Ok(t) => t,
            Err(why) => {
                notes.push(note_skipped(pass, &why));
                self.placeholder = true;
                return PLACEHOLDER.into();
            }
        };
        if let Some(uri) = &target.uri {
            if uri != "/" || loc.pattern != "/" {
                notes.push(format!(
                    "`{}` ({}): NGINX replaces the matched location prefix with {uri}; calmcache sends the \
                     request's path unchanged.",
                    pass.text(),
                    pass.pos
                ));
            }
        }
        let block = self
            .upstream_blocks
            .iter()
            .position(|(n, _)| *n == target.host);
        let (name, section) = match block {
            Some(i) => {
                let (name, section) = &mut self.upstream_blocks[i];
                (name.clone(), section)
            }
            None => {
                let name = upstreams::direct_name(&target.host);
                if !self.direct.iter().any(|(n, _)| *n == name) {
                    self.direct
                        .push((name.clone(), upstreams::direct(&target, pass)));
                }
                let (_, section) = self
                    .direct
                    .iter_mut()
                    .find(|(n, _)| *n == name)
                    .expect("just added");
                (name, section)
            }
        };
        upstreams::location_keys(section, &loc.settings, target.tls, notes);
        if block.is_none() {
            // A direct upstream has the scheme in its server string.
            section.entries.retain(|e| e.key != "tls");
        }
        name
    }
}

/// Whether some location of `server` matches every path (NGINX's `location /`).
pub(super) fn covers_every_path(server: &Server) -> bool {
    server.locations.is_empty()
        || server
            .locations
            .iter()
            .any(|l| matches!(l.modifier, Modifier::Prefix | Modifier::NoRegex) && l.pattern == "/")
}

/// The routes of one location: its own regex (`path`) and, for a
/// `map`-chosen zone, one route per map entry, the location's `path` beside
/// the entry's `match`; then the default zone. Two regexes for the same key
/// (a location and a map on `$uri`) cannot share a route: the default only.
pub(super) fn plan(
    m: Option<RouteRegex>,
    choice: Choice,
    notes: &mut Notes,
) -> Vec<(Vec<RouteRegex>, Choice)> {
    let own: Vec<RouteRegex> = m.into_iter().collect();
    let Choice::ByMatch(entries, default) = choice else {
        return vec![(own, choice)];
    };
    let mut plan = Vec::new();
    let clash = entries
        .iter()
        .any(|(entry, _)| own.iter().any(|m| m.key() == entry.key()));
    if clash {
        notes.push(
            "The map's entries and this location both match the path, which one calmcache route \
             cannot hold twice: this location caches in the map's default zone only."
                .into(),
        );
    } else {
        for (entry, zone) in entries {
            let mut both = own.clone();
            both.push(entry);
            plan.push((both, zone));
        }
    }
    plan.push((own, *default));
    plan
}

/// `= /x`, `^~ /x`, `~ re`, `/x`.
pub(super) fn describe(loc: &Location) -> String {
    match loc.modifier {
        Modifier::Exact => format!("= {}", loc.pattern),
        Modifier::NoRegex => format!("^~ {}", loc.pattern),
        Modifier::Prefix => loc.pattern.clone(),
        Modifier::Regex {
            case_insensitive: false,
        } => format!("~ {}", loc.pattern),
        Modifier::Regex {
            case_insensitive: true,
        } => format!("~* {}", loc.pattern),
    }
}

/// Location indexes in first-match order (see the module doc), and notes
/// where the order cannot be exact.
pub(super) fn order(locs: &[Location]) -> (Vec<usize>, Notes) {
    let mut notes = Vec::new();
    let by = |m: fn(&Modifier) -> bool| -> Vec<usize> {
        (0..locs.len()).filter(|&i| m(&locs[i].modifier)).collect()
    };
    let exact = by(|m| *m == Modifier::Exact);
    let mut no_regex = by(|m| *m == Modifier::NoRegex);
    let regex = by(|m| matches!(m, Modifier::Regex { .. }));
    let mut prefix = by(|m| *m == Modifier::Prefix);
    // A plain prefix that extends a ^~ one is the longest match for its paths,
    // so regexes would come first there; it must also come before the ^~ route.
    let extends: Vec<usize> = prefix
        .iter()
        .copied()
        .filter(|&q| {
            no_regex.iter().any(|&p| {
                locs[q].pattern.len() > locs[p].pattern.len()
                    && locs[q].pattern.starts_with(&locs[p].pattern)
            })
        })
        .collect();
    for &q in &extends {
        if !regex.is_empty() {
            notes.push(format!(
                "location {} ({}) extends a ^~ location: it comes before the ^~ route, so the regex \
                 locations are not tried for its paths as NGINX would (calmcache's regexes have no \
                 look-ahead to express it).",
                locs[q].pattern, locs[q].pos
            ));
        }
    }
    prefix.retain(|q| !extends.contains(q));
    no_regex.extend(extends);
    let longest_first =
        |v: &mut Vec<usize>| v.sort_by_key(|&i| std::cmp::Reverse(locs[i].pattern.len()));
    longest_first(&mut no_regex);
    longest_first(&mut prefix);
    let mut out = exact;
    out.extend(no_regex);
    out.extend(regex);
    out.extend(prefix);
    (out, notes)
}
