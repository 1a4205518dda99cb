//! The document: the routes nesting.rs plans (NGINX's location selection as
//! first-match routes), written with their keys, in the groups
//! `server_names` plans; the upstream each route sends to, a `try_files
//! ... @name` location's being the named location's; a location with no
//! handler at all serves NGINX's default root (a file route, then 404).

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
        self.known_listeners(&mut routes);
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
        for (_, section) in self.limits.sections.drain(..) {
            doc.sections.push(section);
        }
        doc.sections.extend(routes);
        if let Some(log) = self.access_log.take() {
            doc.sections.push(log);
        }
        doc
    }

    /// Keeps in each route's `listeners` the addresses `[server]` listens
    /// on (a `listen` not carried over is none), dropping the key where
    /// none is left.
    fn known_listeners(&self, routes: &mut [Section]) {
        let mut known: Vec<Value> = Vec::new();
        for key in ["listen", "tls_listen"] {
            if let Some(Value::List(l)) = self.server.get(key) {
                known.extend(l.iter().cloned());
            }
        }
        for route in routes {
            let Some(entry) = route.entries.iter_mut().find(|e| e.key == "listeners") else {
                continue;
            };
            let Value::List(l) = &mut entry.value else {
                continue;
            };
            let before = l.len();
            l.retain(|a| known.contains(a));
            if l.is_empty() {
                route.entries.retain(|e| e.key != "listeners");
                route.note(
                    "None of this server's listen addresses is carried over: its routes serve \
                     every listener.",
                );
            } else if l.len() < before {
                route.note("Listen addresses not carried over are left out of listeners.");
            }
        }
    }

    /// Every server's routes in the groups that pick NGINX's server by Host
    /// (see server_names), each group's routes restricted to its hosts.
    pub(super) fn host_groups(&mut self, servers: &[Server], routes: &mut Vec<Section>) {
        let default = servers.iter().position(|s| s.default).unwrap_or(0);
        let names: Vec<&Names> = servers.iter().map(|s| &s.names).collect();
        let (mut groups, notes) = server_names::plan(&names, default);
        let defaults = defaults_by_address(servers);
        let by_listener = servers.windows(2).any(|w| w[0].listens != w[1].listens);
        self.host_notes(servers, by_listener);
        self.top.extend(notes);
        if by_listener {
            groups.extend(other_default_groups(servers, default, &defaults));
        }
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
            if by_listener {
                // A catch-all group serves only the addresses its server is
                // the default of; a named group every address of its server.
                let addrs = match &group.hosts {
                    None if !defaults[group.server].is_empty() => &defaults[group.server],
                    _ => &server.listens,
                };
                let list = Value::List(addrs.iter().cloned().map(Value::Str).collect());
                for route in &mut routes[first..] {
                    route.set_first("listeners", list.clone());
                }
            }
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

    /// The top comments that say how the import picks NGINX's server
    /// block: by Host, and by listen address when the servers' differ.
    fn host_notes(&mut self, servers: &[Server], by_listener: bool) {
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
        if by_listener {
            self.top.push(
                "The server blocks listen on different addresses: NGINX chooses among the servers \
                 of the address a request came in on, so each server's routes carry its listen \
                 addresses as listeners. A Host no server of an address names goes to the default \
                 server's routes, which serve only its own addresses (NGINX has a default server \
                 per address)."
                    .into(),
            );
        }
    }

    /// The routes of one server, in the order that picks NGINX's location
    /// (see nesting).
    pub(super) fn server_routes(&mut self, server: &Server, routes: &mut Vec<Section>) {
        if server.ret.is_some()
            || server
                .locations
                .iter()
                .all(|l| l.modifier == Modifier::Named)
        {
            if let (Some(ret), false) = (&server.ret, server.locations.is_empty()) {
                self.top.push(format!(
                    "`{}` ({}) is in the server's rewrite phase: it answers every request of \
                     server ({}) before a location is chosen, so none of its locations is reached.",
                    ret.text(),
                    ret.pos,
                    server.pos.as_ref().map_or("-".to_owned(), Pos::to_string)
                ));
            }
            let loc = Location {
                modifier: Modifier::Prefix,
                pattern: "/".into(),
                settings: server.settings.clone(),
                pass: None,
                try_named: None,
                ret: server.ret.clone(),
                internal: None,
                files: None,
                handler: None,
                directive: None,
                pos: server.pos.clone().unwrap_or(Pos {
                    file: "-".into(),
                    line: 0,
                }),
                notes: vec!["This server has no location: one route for every path.".into()],
                nested: Vec::new(),
            };
            self.location_routes(&loc, Vec::new(), Written::First, routes);
            self.unused_named(server, &HashSet::new());
            return;
        }
        let (planned, notes) = nesting::plan(&server.locations);
        self.top.extend(notes);
        let mut written = HashSet::new();
        let mut used_named = HashSet::new();
        for p in planned {
            let mut notes = Vec::new();
            let m = match nesting::keys(&p.conds, &mut notes) {
                Ok(Some(m)) => m,
                Ok(None) => continue, // conditions no path meets
                Err(why) => {
                    self.top.push(format!(
                        "not carried over: location {} ({}): {why}",
                        p.loc.pattern, p.loc.pos
                    ));
                    continue;
                }
            };
            if let Some(d) = &p.loc.directive {
                ledger::carried(d);
            }
            let first = written.insert(p.loc.pos.to_string());
            let when = if first {
                Written::First
            } else {
                Written::Again
            };
            let start = routes.len();
            match self.via_named(server, p.loc, &mut used_named) {
                Some(loc) => {
                    self.file_route(p.loc, &m, routes);
                    self.location_routes(&loc, m, when, routes)
                }
                None => self.location_routes(p.loc, m, when, routes),
            }
            if let Some(route) = routes.get_mut(start) {
                route.comments.extend(notes);
            }
        }
        self.unused_named(server, &used_named);
    }

    /// For a location with `try_files ... @name` and no proxy_pass: the
    /// named location's upstream and settings under this location's
    /// conditions, the files part left to a comment.
    fn via_named(
        &mut self,
        server: &Server,
        loc: &Location,
        used: &mut HashSet<String>,
    ) -> Option<Location> {
        let try_files = loc
            .try_named
            .as_ref()
            .filter(|_| loc.pass.is_none() && loc.ret.is_none())?;
        let name = try_files.args.last()?;
        let mut notes = loc.notes.clone();
        let Some(named) = server
            .locations
            .iter()
            .find(|l| l.modifier == Modifier::Named && l.pattern == *name)
        else {
            notes.push(note_skipped(
                try_files,
                &format!("this server has no location {name}"),
            ));
            return None;
        };
        used.insert(name.clone());
        ledger::carried(try_files);
        if let Some(d) = &named.directive {
            ledger::carried(d);
        }
        let files: Vec<&str> = try_files.args[..try_files.args.len() - 1]
            .iter()
            .map(String::as_str)
            .collect();
        notes.push(format!(
            "From `{}` ({}): every request of this location goes to location {name} ({}), its              upstream and cache settings. The files part ({}) is the file route before this one \
             when a `root` is in effect and it is `$uri` (or `$uri $uri/`); otherwise it is not \
             carried over.",
            try_files.text(),
            try_files.pos,
            named.pos,
            files.join(" ")
        ));
        notes.extend(named.notes.iter().cloned());
        Some(Location {
            modifier: loc.modifier,
            pattern: loc.pattern.clone(),
            settings: named.settings.clone(),
            pass: named.pass.clone(),
            try_named: None,
            ret: named.ret.clone(),
            internal: loc.internal.clone(),
            files: None,
            handler: named.handler.clone(),
            directive: loc.directive.clone(),
            pos: loc.pos.clone(),
            notes,
            nested: Vec::new(),
        })
    }

    /// `try_files $uri [$uri/] @name` with a `root` in effect: a file
    /// route under the location's conditions, falling through to the
    /// named location's route written after it.
    fn file_route(&mut self, loc: &Location, m: &[RouteRegex], routes: &mut Vec<Section>) {
        let Some(try_files) = &loc.try_named else {
            return;
        };
        let files = &try_files.args[..try_files.args.len().saturating_sub(1)];
        if !matches!(files, [a] if a == "$uri")
            && !matches!(files, [a, b] if a == "$uri" && b == "$uri/")
        {
            return;
        }
        let Some(root) = loc.settings.last("root") else {
            return;
        };
        let Some(dir) = root.args.first().filter(|d| !d.contains('$')) else {
            return self.top.push(note_skipped(root, "a root with variables"));
        };
        let mut route = Section::new("[[routes]]");
        route.note(format!(
            "location {} ({}): the files of `{}` ({}) from `{}` ({}); a path with no file goes on \
             to the next route.",
            describe(loc),
            loc.pos,
            try_files.text(),
            try_files.pos,
            root.text(),
            root.pos
        ));
        for m in m {
            route.set(m.key(), Value::Str(m.regex().to_owned()));
        }
        route.set("root", Value::Str(self.absolute(dir)));
        if let Some(index) = loc.settings.last("index") {
            route.set(
                "index",
                Value::List(index.args.iter().cloned().map(Value::Str).collect()),
            );
        }
        internal(loc, &mut route);
        // What NGINX applies to the files it serves here: add_header,
        // expires, gzip, error_page (the location's limits ride on the
        // named location's route, which proxies).
        headers::response_rules(&mut route, &loc.settings, false);
        cache::gzip(&mut route, &loc.settings);
        pages::error_pages(&mut route, &loc.settings, pages::Serves::Itself);
        routes.push(route);
    }

    /// Named locations no `try_files` reaches get a comment.
    fn unused_named(&mut self, server: &Server, used: &HashSet<String>) {
        for n in &server.locations {
            if n.modifier == Modifier::Named && !used.contains(&n.pattern) {
                if let Some(d) = &n.directive {
                    self.top.push(note_skipped(
                        d,
                        "no try_files of a location sends requests to it (an error_page to @name and other \
                         internal redirects are not carried over)",
                    ));
                }
            }
        }
    }

    /// The route (or, for a `map`-chosen zone, routes) of one location.
    pub(super) fn location_routes(
        &mut self,
        loc: &Location,
        m: Vec<RouteRegex>,
        when: Written,
        routes: &mut Vec<Section>,
    ) {
        let mut notes = match when {
            Written::First => loc.notes.clone(),
            Written::Again => vec![format!(
                "Again location {} ({}), under the conditions NGINX tries it in here; the comments \
                 of its first route apply.",
                describe(loc),
                loc.pos
            )],
        };
        match self.answering_route(loc, &m, &mut notes) {
            Some(mut route) => {
                self.answering_keys(loc, when, &mut route);
                route.comments.extend(notes);
                routes.push(route);
            }
            None => self.proxied_routes(loc, m, when, notes, routes),
        }
    }

    /// The route of a location that answers itself: a `return`, a file
    /// route of its own `root`/`alias`/`try_files =404`, or NGINX's
    /// default root for a location with no handler; `None` for one that
    /// proxies.
    fn answering_route(
        &mut self,
        loc: &Location,
        m: &[RouteRegex],
        notes: &mut Notes,
    ) -> Option<Section> {
        if let Some(ret) = self.answers_itself(loc, notes) {
            let mut route = Section::new("[[routes]]");
            route.note(format!("location {} ({})", describe(loc), loc.pos));
            for m in m {
                route.set(m.key(), Value::Str(m.regex().to_owned()));
            }
            route.set("return", ret);
            return Some(route);
        }
        if let Some(route) = self.bare_files(loc, m, notes) {
            return Some(route);
        }
        answers_from_default_root(loc).then(|| self.default_root_route(loc, m))
    }

    /// The routes of a location that proxies: one, or one per `map`
    /// entry of its zone; the first carries the location's comments.
    fn proxied_routes(
        &mut self,
        loc: &Location,
        m: Vec<RouteRegex>,
        when: Written,
        mut notes: Notes,
        routes: &mut Vec<Section>,
    ) {
        let upstream = self.upstream_for(loc, &mut notes);
        let mut choice = match loc.settings.last("proxy_cache") {
            Some(d) => self.zones.choice(d, &mut notes),
            None => Choice::Off,
        };
        if choice != Choice::Off {
            if let Some(why) = cache::stores_nothing(&loc.settings) {
                notes.push(why);
                choice = Choice::Off;
            }
        }
        let plan = plan(m, choice, &mut notes);
        let first = routes.len();
        for (i, (m, choice)) in plan.into_iter().enumerate() {
            let mut route = self.proxied_route(loc, &upstream, &m, &choice);
            if i == 0 {
                route
                    .comments
                    .insert(0, format!("location {} ({})", describe(loc), loc.pos));
            } else {
                // The first route of the location carries the explanations.
                route.comments.clear();
                route.note(format!(
                    "location {} ({}), map entry {i}",
                    describe(loc),
                    loc.pos
                ));
                route.note("The comments of the first route of this location apply here too.");
                route.entries.iter_mut().for_each(|e| e.comments.clear());
            }
            routes.push(route);
        }
        let route = &mut routes[first];
        if when == Written::First {
            cache::others(route, &loc.settings);
        }
        route.comments.extend(notes);
    }

    /// One route of a proxying location: its conditions, upstream, zone
    /// and what the location's directives say about caching, headers,
    /// gzip, error pages, limits and WebSocket.
    fn proxied_route(
        &mut self,
        loc: &Location,
        upstream: &str,
        m: &[RouteRegex],
        choice: &Choice,
    ) -> Section {
        let proxy_host = loc
            .pass
            .as_ref()
            .and_then(|p| upstreams::target(p).ok())
            .map(|t| t.proxy_host());
        let mut route = Section::new("[[routes]]");
        for m in m {
            route.set(m.key(), Value::Str(m.regex().to_owned()));
        }
        route.set("upstream", Value::Str(upstream.to_owned()));
        let inactive = self.zone_keys(&mut route, choice);
        if let Some(inactive) = inactive {
            cache::caching_keys(&mut route, &loc.settings, upstream, inactive);
        }
        internal(loc, &mut route);
        cache::gzip(&mut route, &loc.settings);
        headers::rules(
            &mut route,
            &loc.settings,
            inactive.is_some(),
            proxy_host.as_deref(),
        );
        pages::error_pages(&mut route, &loc.settings, pages::Serves::Proxied);
        self.limits.route(&mut route, &loc.settings);
        if let Some((ws, why)) = cache::websocket(&loc.settings) {
            route.set("websocket", Value::Bool(ws)).note(why);
        }
        route
    }

    /// The keys of a route that answers itself (a `return`, a file route)
    /// from its location: `internal`, response header rules, gzip, error
    /// pages; limits are commented (calmcache limits routes that proxy).
    fn answering_keys(&mut self, loc: &Location, when: Written, route: &mut Section) {
        internal(loc, route);
        headers::response_rules(route, &loc.settings, false);
        cache::gzip(route, &loc.settings);
        pages::error_pages(route, &loc.settings, pages::Serves::Itself);
        if when == Written::First {
            for d in ["limit_req", "limit_conn"]
                .iter()
                .flat_map(|n| loc.settings.unmarked(n))
            {
                route.note(note_skipped(
                    d,
                    "calmcache limits the routes that proxy; this one answers itself",
                ));
            }
        }
    }

    /// A location that answers from NGINX's default root (`html` under its
    /// prefix): a file route answering 404 for a path with no file, as
    /// NGINX does.
    fn default_root_route(&mut self, loc: &Location, m: &[RouteRegex]) -> Section {
        let mut files = Section::new("[[routes]]");
        files.note(format!(
            "location {} ({}): no proxy_pass, return, root, alias or try_files: NGINX serves \
             the files of its default root, html under its prefix (here {}), and 404 for a \
             path with no file (absent = \"404\"); check the directory.",
            describe(loc),
            loc.pos,
            self.absolute("html")
        ));
        for m in m {
            files.set(m.key(), Value::Str(m.regex().to_owned()));
        }
        files.set("root", Value::Str(self.absolute("html")));
        if let Some(index) = loc.settings.last("index") {
            files.set(
                "index",
                Value::List(index.args.iter().cloned().map(Value::Str).collect()),
            );
        }
        files.set("absent", Value::Str("404".into()));
        files
    }

    /// The route's `zone` or `zones` for `choice`, and the longest
    /// `inactive` of them (`None`: the route does not cache).
    fn zone_keys(&self, route: &mut Section, choice: &Choice) -> Option<u64> {
        match choice {
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
        }
    }

    /// A location's `return`, when calmcache can say it: then the route
    /// answers itself and its `proxy_pass` is never reached.
    fn answers_itself(&mut self, loc: &Location, notes: &mut Notes) -> Option<Value> {
        let ret = loc.ret.as_ref()?;
        match answers::return_table(ret) {
            Ok(table) => {
                ledger::carried(ret);
                notes.push(format!("From `{}` ({}).", ret.text(), ret.pos));
                if let Some(pass) = &loc.pass {
                    notes.push(note_skipped(
                        pass,
                        "never reached: NGINX's return answers first (rewrite phase)",
                    ));
                }
                Some(table)
            }
            Err(why) => {
                notes.push(note_skipped(ret, &why));
                None
            }
        }
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
            Ok(t) => {
                ledger::carried(pass);
                t
            }
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

/// `internal` on every route of an internal location: clients get 404.
fn internal(loc: &Location, route: &mut Section) {
    if let Some(d) = &loc.internal {
        ledger::carried(d);
        route.set("internal", Value::Bool(true)).note(format!(
            "From `{}` ({}): a client's request gets 404; error_pages reach it.",
            d.text(),
            d.pos
        ));
    }
}

/// Directives in a location's block that answer or steer a request some
/// other way than the default root's files.
const NOT_DEFAULT_ROOT: [&str; 13] = [
    "try_files",
    "alias",
    "rewrite",
    "if",
    "error_page",
    "fastcgi_pass",
    "uwsgi_pass",
    "scgi_pass",
    "grpc_pass",
    "memcached_pass",
    "empty_gif",
    "stub_status",
    "return",
];

/// Whether NGINX answers `loc` from its default root: a `location` block
/// with no `proxy_pass`, `return`, `root` (its own or inherited) or other
/// handler (NOT_DEFAULT_ROOT). One with `proxy_*` directives of its own
/// (`proxy_cache` with no `proxy_pass`) is read as a proxy whose origin the
/// config does not say: the PLACEHOLDER upstream, as before.
fn answers_from_default_root(loc: &Location) -> bool {
    let Some(block) = loc.directive.as_ref().and_then(|d| d.block.as_ref()) else {
        return false;
    };
    loc.pass.is_none()
        && loc.ret.is_none()
        && loc.try_named.is_none()
        && loc.settings.last("root").is_none()
        && !block
            .iter()
            .any(|d| NOT_DEFAULT_ROOT.contains(&d.name.as_str()) || d.name.starts_with("proxy_"))
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
    own: Vec<RouteRegex>,
    choice: Choice,
    notes: &mut Notes,
) -> Vec<(Vec<RouteRegex>, Choice)> {
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

/// Whether a location's routes are its first (with its comments) or a
/// repeat under other conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Written {
    First,
    Again,
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
        Modifier::Named => loc.pattern.clone(),
    }
}

/// For each server, the listen addresses it is NGINX's default server of:
/// on each address, the server marked `default_server`, else the first
/// server listening there.
fn defaults_by_address(servers: &[Server]) -> Vec<Vec<String>> {
    let mut of = vec![Vec::new(); servers.len()];
    let mut addrs: Vec<&String> = servers.iter().flat_map(|s| &s.listens).collect();
    addrs.sort();
    addrs.dedup();
    for addr in addrs {
        let on = |s: &Server| s.listens.contains(addr);
        let pick = servers
            .iter()
            .position(|s| on(s) && s.default)
            .or_else(|| servers.iter().position(on));
        if let Some(i) = pick {
            of[i].push(addr.clone());
        }
    }
    of
}

/// A catch-all group for every server that is the default of some address
/// but not `default` (whose group server_names::plan wrote): NGINX has a
/// default server per address, so a Host no server of that address names
/// goes to it (issue 28: the TLS server of a redirect-to-HTTPS pair).
fn other_default_groups(
    servers: &[Server],
    default: usize,
    defaults: &[Vec<String>],
) -> Vec<server_names::Group> {
    let mut groups = Vec::new();
    for (i, addrs) in defaults.iter().enumerate() {
        if i == default || addrs.is_empty() {
            continue;
        }
        groups.push(server_names::Group {
            server: i,
            hosts: None,
            note: format!(
                "{}, the default server of {} (NGINX's for every other Host on these \
                 addresses): no hosts.",
                servers[i].names.label,
                addrs.join(" ")
            ),
        });
    }
    groups
}
