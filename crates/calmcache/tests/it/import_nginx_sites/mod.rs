//! The real-world shaped fixtures side by side (issue 28, "Done when"):
//! each of tests/fixtures/nginx/world-*.conf and issue28-nested-avatar.conf
//! is localised (ports picked here, the testkit's certificate, unix socket,
//! cache and root paths under a temp dir), run in a real NGINX (Debian's
//! /usr/sbin/nginx), imported with `calmcache import-nginx` from the same
//! localised text and run in calmcache, each proxy before an origin of its
//! own (`SiteOrigin`: TCP and unix socket, counting requests per path).
//!
//! A generated table of rows (listener x host x path x request variant,
//! the paths sampling every location of the fixture: prefix, regex, `^~`,
//! named fallback, internal, a static file present and absent, a traversal
//! attempt) is sent three times per row, to NGINX and to calmcache in
//! turn, and compared per row: status, body (gunzipped), Location,
//! Content-Encoding, X-Cache-Status, Set-Cookie and the origin requests the
//! row caused.
//! Every row must be equal except those on `known::KNOWN`, a short list of
//! differences each with its reason. The table is printed (`cargo test -p
//! calmcache --test it import_nginx_sites -- --nocapture`) and shown in
//! docs/migrating-from-nginx.md.

mod known;
mod wire;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use calmcache_testkit::tls::TestCa;

use super::import_nginx::{nginx_available, start_nginx, Nginx};
use crate::scratch;
use known::{known, KNOWN};
use wire::{send, start_calm, Side};

/// Which of a site's listeners a row's requests reach.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Listener {
    /// The fixture's `listen 127.0.0.1:8080`.
    Plain,
    /// The fixture's `listen 127.0.0.1:8443 ssl`, with the testkit's
    /// certificate (SNI: the row's host).
    Tls,
}

/// What a row's requests carry besides Host.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Variant {
    /// Nothing more.
    Plain,
    /// `Accept-Encoding: gzip`.
    Gzip,
    /// `Cookie: session=1` (the microcache's bypass).
    Session,
}

/// One fixture and the table it is run over.
struct Site {
    file: &'static str,
    /// Files it includes, relative to it (localised alongside).
    includes: &'static [&'static str],
    hosts: &'static [&'static str],
    listeners: &'static [Listener],
    variants: &'static [Variant],
    /// Samples of every location (see each site's comments).
    paths: &'static [&'static str],
    /// Files in the root (and the alias directory `static/`).
    files: &'static [&'static str],
}

const SITES: [Site; 4] = [
    Site {
        file: "world-forum.conf",
        includes: &["conf.d/forum-cache.conf"],
        hosts: &["forum.example", "unknown.example"],
        listeners: &[Listener::Plain],
        variants: &[Variant::Plain, Variant::Gzip],
        paths: &[
            "/",                         // location /: try_files on a directory
            "/robots.txt",               // location /: a file of the root
            "/t/topic/1",                // location /: no file, @forum
            "/t/topic/1?sc=1",           // @forum, the origin sets a cookie
            "/uploads/a.png",            // regex in regex: cached 10m
            "/uploads/B.JPG",            // the nested ~* is case-insensitive
            "/uploads/doc.pdf",          // ~ ^/uploads/ only: not cached
            "/letter_avatar/u/1.png",    // the avatar regex: cached
            "/user_avatar/u/2.png?sc=1", // cached with a Set-Cookie
            "/assets/app.js",            // ^~ /assets/: no proxy_cache_valid
            "/assets/logo.png",          // ^~ wins over the image regex
            "/img/x.png",                // no regex at top level: location /
            "/../etc/passwd",            // traversal
            "/assets/../robots.txt",     // dot segments resolved
        ],
        files: &["robots.txt"],
    },
    Site {
        file: "world-social.conf",
        includes: &[],
        hosts: &["social.example", "unknown.example"],
        listeners: &[Listener::Plain, Listener::Tls],
        variants: &[Variant::Plain, Variant::Gzip],
        paths: &[
            "/",                                 // location /: try_files, directory
            "/robots.txt",                       // a file of the root
            "/@user/1",                          // no file: @proxy, cached 7d
            "/@user/2?sc=1",                     // @proxy with Set-Cookie ignored
            "/gone?st=410",                      // proxy_cache_valid 410 24h
            "/api/v1/timelines/home?cc=private", // @proxy, origin says private
            "/api/v1/streaming/user",            // ^~: the streaming upstream
            "/backups/db.tar",                   // internal regex
            "/system/media/a.png",               // internal regex
            "/sw.js",                            // try_files $uri =404, present
            "/.well-known/acme-challenge/tok",   // the plain server's prefix
            "/%2e%2e/%2e%2e/etc/passwd",         // encoded traversal
        ],
        files: &["robots.txt", "sw.js", "500.html"],
    },
    Site {
        file: "world-microcache-unix.conf",
        includes: &[],
        hosts: &["app.example"],
        listeners: &[Listener::Plain],
        variants: &[Variant::Plain, Variant::Gzip, Variant::Session],
        paths: &[
            "/",                     // location /: unix socket, 1s microcache
            "/page?cc=no-store",     // the origin forbids storing
            "/static/app.css",       // alias: a file
            "/static/absent.css",    // alias: no file
            "/static/../etc/passwd", // traversal out of the alias
        ],
        files: &["static/app.css"],
    },
    Site {
        file: "issue28-nested-avatar.conf",
        includes: &[],
        hosts: &["forum.example"],
        listeners: &[Listener::Plain],
        variants: &[Variant::Plain],
        paths: &[
            "/letter_avatar/x.png", // avatar regex: cached
            "/uploads/a.png",       // nested image regex: not cached
            "/uploads/a.txt",       // uploads only
            "/other",               // location /
        ],
        files: &[],
    },
];

/// What a row compares.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Column {
    Status,
    /// The body, the origin's `host=` and NGINX's or calmcache's page
    /// signature line taken out.
    Body,
    /// The Host the origin received (`host=` in its body).
    Host,
    Location,
    Encoding,
    XCacheStatus,
    /// The Set-Cookie sent (a stored one replayed shows).
    SetCookie,
    OriginRequests,
}

/// One answer, reduced to what the table compares.
#[derive(Clone, PartialEq, Debug)]
struct Answer {
    status: u16,
    body: String,
    location: String,
    encoding: String,
    x_cache_status: String,
    set_cookie: String,
    /// calmcache's Cache-Status (shown with a difference, not compared).
    cache_status: String,
}

impl Answer {
    fn get(&self, column: Column) -> String {
        match column {
            Column::Status => self.status.to_string(),
            Column::Body => normalised(&self.body),
            Column::Host => origin_host(&self.body).to_owned(),
            Column::Location => self.location.clone(),
            Column::Encoding => self.encoding.clone(),
            Column::XCacheStatus => self.x_cache_status.clone(),
            Column::SetCookie => self.set_cookie.clone(),
            Column::OriginRequests => String::new(),
        }
    }
}

/// The Host in an origin's body (`-` for a body not the origin's).
fn origin_host(body: &str) -> &str {
    body.split_whitespace()
        .find_map(|w| w.strip_prefix("host="))
        .unwrap_or("-")
}

/// `body` without the origin's `host=` (its own column) and without the
/// signature line of an error page (`<hr><center>nginx/1.22.1</center>`,
/// `<hr><center>calmcache</center>`): which proxy answered is not a
/// difference.
fn normalised(body: &str) -> String {
    body.lines()
        .filter(|l| !l.starts_with("<hr><center>"))
        .map(|l| {
            l.split(' ')
                .filter(|w| !w.starts_with("host="))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One row of the table.
struct Row {
    listener: Listener,
    host: &'static str,
    path: &'static str,
    variant: Variant,
}

impl Row {
    fn label(&self) -> String {
        format!(
            "{:?} {} {} {:?}",
            self.listener, self.host, self.path, self.variant
        )
    }

    fn headers(&self) -> Vec<(&'static str, &'static str)> {
        let mut h = vec![("host", self.host)];
        match self.variant {
            Variant::Plain => {}
            Variant::Gzip => h.push(("accept-encoding", "gzip")),
            Variant::Session => h.push(("cookie", "session=1")),
        }
        h
    }
}

fn rows(site: &Site) -> Vec<Row> {
    let mut rows = Vec::new();
    for &listener in site.listeners {
        for &host in site.hosts {
            for &variant in site.variants {
                for &path in site.paths {
                    rows.push(Row {
                        listener,
                        host,
                        path,
                        variant,
                    });
                }
            }
        }
    }
    rows
}

// ---- the table ----

/// What a row showed on one proxy.
struct Seen {
    answers: Vec<Answer>,
    origin_requests: u64,
}

/// A row's first difference in `column`, as text.
fn differs(n: &Seen, c: &Seen, column: Column) -> Option<String> {
    if column == Column::OriginRequests {
        return (n.origin_requests != c.origin_requests).then(|| {
            format!(
                "origin requests: nginx {} calmcache {}",
                n.origin_requests, c.origin_requests
            )
        });
    }
    (0..n.answers.len()).find_map(|i| {
        let (a, b) = (n.answers[i].get(column), c.answers[i].get(column));
        (a != b).then(|| {
            let (x, y) = first_different_lines(&a, &b);
            let why = &c.answers[i].cache_status;
            format!("#{i} {column:?}: nginx {x:?} calmcache {y:?} ({why})")
        })
    })
}

/// The first line where `a` and `b` differ, from each (at most 70
/// characters).
fn first_different_lines(a: &str, b: &str) -> (String, String) {
    let (mut x, mut y) = (a.split('\n'), b.split('\n'));
    loop {
        match (x.next(), y.next()) {
            (Some(l), Some(m)) if l == m => continue,
            (l, m) => {
                let cut = |s: Option<&str>| s.unwrap_or("<end>").chars().take(70).collect();
                return (cut(l), cut(m));
            }
        }
    }
}

const COLUMNS: [Column; 8] = [
    Column::Status,
    Column::Body,
    Column::Host,
    Column::Location,
    Column::Encoding,
    Column::XCacheStatus,
    Column::SetCookie,
    Column::OriginRequests,
];

/// Per site: rows, rows equal, rows differing only as `KNOWN` allows, and
/// the text of every other difference.
#[derive(Default)]
struct Tally {
    rows: usize,
    equal: usize,
    known: usize,
    unexpected: Vec<String>,
    /// Per entry of `KNOWN`: the rows it excused, and the first of them.
    known_used: HashMap<usize, (usize, String)>,
}

impl Tally {
    fn add(&mut self, site: &Site, row: &Row, n: &Seen, c: &Seen) {
        self.rows += 1;
        let diffs: Vec<(Column, String)> = COLUMNS
            .iter()
            .filter_map(|&col| differs(n, c, col).map(|d| (col, d)))
            .collect();
        if diffs.is_empty() {
            self.equal += 1;
            return;
        }
        let mut excused = Vec::new();
        for (col, d) in &diffs {
            let line = format!("{}: {d}", row.label());
            match known(site, row, *col) {
                Some(k) => excused.push((k, line)),
                None => self.unexpected.push(line),
            }
        }
        if excused.len() < diffs.len() {
            return;
        }
        self.known += 1;
        excused.dedup_by_key(|(k, _)| *k);
        for (k, line) in excused {
            self.known_used.entry(k).or_insert((0, line)).0 += 1;
        }
    }
}

async fn run_site(site: &Site) -> Tally {
    let dir = scratch(&format!("sites-{}", site.file.trim_end_matches(".conf")));
    let ca = TestCa::new(&dir.join("ca"));
    let leaf = ca.leaf("site", site.hosts);
    let client = ca.client(&[b"http/1.1"]);
    let nginx_side = Side::new(dir.join("nginx"), site).await;
    let nginx_conf = nginx_side.write_localised(site, &leaf.cert, &leaf.key);
    let text = std::fs::read_to_string(&nginx_conf).unwrap();
    let nginx: Nginx = start_nginx(&nginx_side.dir, &text, nginx_side.ports.plain).await;
    // Ports are picked free and bound later: another test can take one in
    // between. A calmcache that could not bind gets fresh ports (3 tries).
    let mut tries = 0;
    let (calm_side, calm) = loop {
        tries += 1;
        let side = Side::new(dir.join(format!("calmcache-{tries}")), site).await;
        let conf = side.write_localised(site, &leaf.cert, &leaf.key);
        match start_calm(&conf, &side.dir).await {
            Ok(calm) => break (side, calm),
            Err(e) if tries < 3 => {
                eprintln!("{}: calmcache did not start ({e:#}); again", site.file)
            }
            Err(e) => panic!("{}: calmcache did not start: {e:#}", site.file),
        }
    };
    let mut tally = Tally::default();
    for row in rows(site) {
        let (n, c) = run_row(&nginx_side, &calm_side, &client, &row).await;
        tally.add(site, &row, &n, &c);
    }
    calm.shutdown(Duration::from_secs(1)).await;
    drop(nginx);
    let _ = std::fs::remove_dir_all(&dir);
    tally
}

/// Sends `row` three times, to NGINX then calmcache each time; the origin
/// requests counted are those for the row's path (dot segments resolved),
/// so a refresh behind another row's answer is that row's.
async fn run_row(
    nginx: &Side,
    calm: &Side,
    client: &Arc<rustls::ClientConfig>,
    row: &Row,
) -> (Seen, Seen) {
    let (n0, c0) = (
        nginx.origin.for_path(row.path),
        calm.origin.for_path(row.path),
    );
    let mut n = Vec::new();
    let mut c = Vec::new();
    for _ in 0..3 {
        n.push(send(nginx.ports, client, row).await);
        c.push(send(calm.ports, client, row).await);
    }
    (
        Seen {
            answers: n,
            origin_requests: nginx.origin.for_path(row.path) - n0,
        },
        Seen {
            answers: c,
            origin_requests: calm.origin.for_path(row.path) - c0,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_world_sites_answer_as_nginx_does() {
    if !nginx_available() {
        return;
    }
    let mut report = String::new();
    let mut unexpected = 0;
    let mut used = vec![0; KNOWN.len()];
    writeln!(
        report,
        "| fixture | rows | equal | known differences | other |"
    )
    .unwrap();
    writeln!(report, "|---|---:|---:|---:|---:|").unwrap();
    let mut details = String::new();
    for site in &SITES {
        let tally = run_site(site).await;
        writeln!(
            report,
            "| {} | {} | {} | {} | {} |",
            site.file,
            tally.rows,
            tally.equal,
            tally.known,
            tally.rows - tally.equal - tally.known
        )
        .unwrap();
        for line in &tally.unexpected {
            writeln!(details, "  DIFFERS {line}").unwrap();
        }
        let mut excused: Vec<_> = tally.known_used.into_iter().collect();
        excused.sort_by_key(|(k, _)| *k);
        for (k, (rows, first)) in excused {
            used[k] += rows;
            writeln!(
                details,
                "  known ({rows} rows) {}\n    e.g. {first}",
                KNOWN[k].why.label()
            )
            .unwrap();
        }
        unexpected += tally.unexpected.len();
    }
    let mut stale = 0;
    for (k, n) in used.iter().enumerate() {
        if *n == 0 {
            stale += 1;
            writeln!(
                details,
                "  KNOWN[{k}] ({}) excused no row: remove it",
                KNOWN[k].site
            )
            .unwrap();
        }
    }
    println!("{report}{details}");
    assert_eq!(
        unexpected, 0,
        "differences not on KNOWN:\n{report}{details}"
    );
    // The list stays as short as the differences: an entry nothing needs
    // any more is a difference fixed, and must go.
    assert_eq!(stale, 0, "KNOWN entries that excuse nothing:\n{details}");
}
