//! Table-driven cases: each [`Case`] names the RFC section it checks and runs
//! a few [`Step`]s (one request each, with expectations) on a path of its own,
//! so cases never interfere. [`run`] plays every case against one proxy and
//! origin in two phases: every case's `steps`, then, after one shared wait
//! (for objects to go stale), every case's `after` steps. A failing case stops
//! at its first failed expectation; the others go on, and the test fails at
//! the end listing every failed case with its section and name.
//!
//! Paths and header values are templates: `{p}` is the case's own path
//! (`/<tag>/<n>-<name>`), so `"{p}?x=1"` or `"Location: {p}/moved"` stay
//! inside the case; `{host}` is the proxy's `host:port`.

use std::fmt::Write as _;
use std::io::Read as _;
use std::time::Duration;

use calmcache_testkit::proxy::RunningProxy;
use calmcache_testkit::{request, Origin, Reply};
use http::Method;

/// Steering headers that take one value: a step's own replaces the case's.
const SINGLE: [&str; 7] = [
    "x-origin-cache-control",
    "x-origin-status",
    "x-origin-body",
    "x-origin-body-bytes",
    "x-origin-delay-ms",
    "x-origin-set-cookie",
    "x-origin-ignore-conditionals",
];

/// What a reply (or the origin, after it) must show.
pub enum Expect {
    /// The status code.
    Status(u16),
    /// The body, exactly.
    Body(String),
    /// No body at all.
    EmptyBody,
    /// The body is the body of an earlier step of this case (0-based, across phases).
    SameBodyAs(usize),
    /// The body differs from an earlier step's.
    OtherBodyThan(usize),
    /// A header's (first) value, exactly.
    Header(&'static str, String),
    /// A header's values, joined with ", ", contain this text (case-insensitive).
    HeaderContains(&'static str, String),
    /// The header is absent.
    NoHeader(&'static str),
    /// `Age` is present and within these seconds.
    AgeBetween(u64, u64),
    /// Our `Cache-Status` member has `hit`.
    Hit,
    /// Our `Cache-Status` member has no `hit`.
    NotHit,
    /// Our member has this parameter with this value, e.g. `("fwd", "uri-miss")`.
    Param(&'static str, &'static str),
    /// Our member has this parameter, e.g. `stored`.
    Has(&'static str),
    /// Our member lacks this parameter.
    Lacks(&'static str),
    /// Our member has this parameter and its value contains this text (a
    /// template: `{p}` is the case's path).
    ParamContains(&'static str, &'static str),
    /// Our member's `ttl`, in seconds, is within these bounds.
    TtlBetween(f64, f64),
    /// Our member's `ttl` is an integer.
    TtlInteger,
    /// The origin has seen this many requests for this path (a template).
    OriginHits(&'static str, u64),
    /// The origin's latest request for this path carried this header, with
    /// this exact value when one is given.
    OriginSaw(&'static str, &'static str, Option<String>),
    /// The origin's latest request for this path lacked this header.
    OriginDidNotSee(&'static str, &'static str),
    /// The origin's latest request for this path used this method.
    OriginMethod(&'static str, Method),
    /// Decoded by its `Content-Encoding` (br, gzip or none), the body is the
    /// decoded body of an earlier step.
    DecodesToBodyOf(usize),
    /// Anything else: a description and a check.
    Check(&'static str, fn(&Reply) -> Result<(), String>),
}

/// One request of a case and what its reply must show.
pub struct Step {
    method: Method,
    path: String,
    headers: Vec<(String, String)>,
    expect: Vec<Expect>,
}

/// A GET of the case's path.
pub fn get() -> Step {
    method(Method::GET)
}

/// A HEAD of the case's path.
pub fn head() -> Step {
    method(Method::HEAD)
}

/// A request of the case's path with any method.
pub fn method(method: Method) -> Step {
    Step {
        method,
        path: "{p}".into(),
        headers: Vec::new(),
        expect: Vec::new(),
    }
}

impl Step {
    /// Another path (a template: `{p}` is the case's path).
    pub fn at(mut self, path: impl Into<String>) -> Step {
        self.path = path.into();
        self
    }

    /// A request header.
    pub fn h(mut self, name: &str, value: impl Into<String>) -> Step {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    /// The origin answers with `Cache-Control: value`.
    pub fn cc(self, value: &str) -> Step {
        self.h("x-origin-cache-control", value)
    }

    /// The origin adds this field line (`Name: value`) to its answer.
    pub fn respond(self, line: impl Into<String>) -> Step {
        self.h("x-origin-header", line)
    }

    /// The origin answers with this status.
    pub fn status(self, status: u16) -> Step {
        self.h("x-origin-status", status.to_string())
    }

    /// The reply (or the origin after it) must show this.
    pub fn expect(mut self, e: Expect) -> Step {
        self.expect.push(e);
        self
    }

    /// Shorthand: the reply is a hit and the origin saw `n` requests for `{p}`.
    pub fn hit(self, n: u64) -> Step {
        self.expect(Expect::Hit)
            .expect(Expect::OriginHits("{p}", n))
    }

    /// Shorthand: the reply is not a hit and the origin saw `n` requests for `{p}`.
    pub fn fetched(self, n: u64) -> Step {
        self.expect(Expect::NotHit)
            .expect(Expect::OriginHits("{p}", n))
    }

    fn describe(&self, base: &str) -> String {
        let mut s = format!("{} {}", self.method, self.path.replace("{p}", base));
        for (k, v) in &self.headers {
            let _ = write!(s, " [{k}: {v}]");
        }
        s
    }
}

/// One behaviour, from one RFC section, on a path of its own.
pub struct Case {
    section: &'static str,
    name: &'static str,
    common: Vec<(String, String)>,
    steps: Vec<Step>,
    after: Vec<Step>,
}

impl Case {
    /// A case; `section` is e.g. `"RFC 9111 §4.2.1"`.
    pub fn new(section: &'static str, name: &'static str) -> Case {
        Case {
            section,
            name,
            common: Vec::new(),
            steps: Vec::new(),
            after: Vec::new(),
        }
    }

    /// A request header on every step (a step's own steering header of the
    /// single-valued kind replaces it; `x-origin-header` lines add up).
    pub fn h(mut self, name: &str, value: impl Into<String>) -> Case {
        self.common.push((name.to_string(), value.into()));
        self
    }

    /// The origin answers every step with `Cache-Control: value`.
    pub fn cc(self, value: &str) -> Case {
        self.h("x-origin-cache-control", value)
    }

    /// The origin adds this field line to every answer.
    pub fn respond(self, line: impl Into<String>) -> Case {
        self.h("x-origin-header", line)
    }

    /// A step of the first phase.
    pub fn step(mut self, step: Step) -> Case {
        self.steps.push(step);
        self
    }

    /// Two GETs: the first fetched, the second a hit with the same body.
    pub fn reused(self) -> Case {
        self.step(get().fetched(1))
            .step(get().hit(1).expect(Expect::SameBodyAs(0)))
    }

    /// Two GETs, both fetched from the origin: nothing was reused.
    pub fn not_reused(self) -> Case {
        self.step(get().fetched(1)).step(get().fetched(2))
    }

    /// A step of the second phase, after the shared wait.
    pub fn after(mut self, step: Step) -> Case {
        self.after.push(step);
        self
    }

    fn label(&self) -> String {
        format!("[{}] {}", self.section, self.name)
    }
}

struct Ctx<'a> {
    proxy: &'a RunningProxy,
    origin: &'a Origin,
    base: String,
    replies: Vec<Reply>,
}

/// Plays `cases` against `proxy` and `origin` (see the module doc) and fails
/// listing every failed case. `wait` separates the two phases and is only
/// slept when some case has `after` steps.
pub async fn run(
    tag: &str,
    proxy: &RunningProxy,
    origin: &Origin,
    cases: Vec<Case>,
    wait: Duration,
) {
    assert!(cases.len() <= 200, "a bounded table");
    let total = cases.len();
    let mut ctxs: Vec<Ctx<'_>> = cases
        .iter()
        .enumerate()
        .map(|(i, case)| Ctx {
            proxy,
            origin,
            base: format!("/{tag}/{i}-{}", slug(case.name)),
            replies: Vec::new(),
        })
        .collect();
    let mut failures: Vec<Option<String>> = vec![None; total];
    for (i, case) in cases.iter().enumerate() {
        if let Err(e) = play(case, &case.steps, &mut ctxs[i]).await {
            failures[i] = Some(e);
        }
    }
    if cases.iter().any(|c| !c.after.is_empty()) {
        tokio::time::sleep(wait).await;
        for (i, case) in cases.iter().enumerate() {
            if failures[i].is_none() {
                if let Err(e) = play(case, &case.after, &mut ctxs[i]).await {
                    failures[i] = Some(e);
                }
            }
        }
    }
    let failed: Vec<String> = cases
        .iter()
        .zip(failures)
        .filter_map(|(case, f)| f.map(|f| format!("{}: {f}", case.label())))
        .collect();
    assert!(
        failed.is_empty(),
        "{tag}: {} of {total} cases failed:\n  {}",
        failed.len(),
        failed.join("\n  ")
    );
}

async fn play(case: &Case, steps: &[Step], ctx: &mut Ctx<'_>) -> Result<(), String> {
    for step in steps {
        let n = ctx.replies.len();
        let host = ctx.proxy.host();
        let headers: Vec<(String, String)> = merge(&case.common, &step.headers)
            .into_iter()
            .map(|(k, v)| (k, v.replace("{p}", &ctx.base).replace("{host}", &host)))
            .collect();
        let borrowed: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let path = step.path.replace("{p}", &ctx.base);
        let reply = request(step.method.clone(), &ctx.proxy.url(&path), &borrowed).await;
        for e in &step.expect {
            if let Err(why) = check(e, &reply, ctx) {
                return Err(format!(
                    "step {n} ({}): {why}\n      got {} {:?} Cache-Status {:?} body {:?}",
                    step.describe(&ctx.base),
                    reply.status.as_u16(),
                    interesting_headers(&reply),
                    reply.cache_status(),
                    truncate(&reply.body),
                ));
            }
        }
        ctx.replies.push(reply);
    }
    Ok(())
}

fn merge(common: &[(String, String)], own: &[(String, String)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = common
        .iter()
        .filter(|(k, _)| {
            let single = SINGLE.iter().any(|s| s.eq_ignore_ascii_case(k));
            !(single && own.iter().any(|(o, _)| o.eq_ignore_ascii_case(k)))
        })
        .cloned()
        .collect();
    out.extend(own.iter().cloned());
    out
}

fn check(e: &Expect, r: &Reply, ctx: &Ctx<'_>) -> Result<(), String> {
    let cs = r.cache_status_params();
    let ensure = |ok: bool, why: String| if ok { Ok(()) } else { Err(why) };
    let last_request = |path: &str| {
        let path = path.replace("{p}", &ctx.base);
        ctx.origin
            .requests_for(&path)
            .pop()
            .ok_or_else(|| format!("the origin saw no request for {path}"))
    };
    match e {
        Expect::Status(s) => ensure(r.status.as_u16() == *s, format!("expected status {s}")),
        Expect::Body(b) => ensure(r.body == *b, format!("expected body {b:?}")),
        Expect::EmptyBody => ensure(r.bytes.is_empty(), "expected no body".into()),
        Expect::SameBodyAs(i) => {
            let earlier = &ctx.replies.get(*i).ok_or("no such step")?.body;
            ensure(
                r.body == *earlier,
                format!("expected the body of step {i}, {:?}", truncate(earlier)),
            )
        }
        Expect::OtherBodyThan(i) => {
            let earlier = &ctx.replies.get(*i).ok_or("no such step")?.body;
            ensure(
                r.body != *earlier,
                format!("expected another body than step {i}'s"),
            )
        }
        Expect::Header(name, value) => ensure(
            r.has_header(name) && r.header(name) == value,
            format!("expected {name}: {value}, got {:?}", r.header_all(name)),
        ),
        Expect::HeaderContains(name, value) => ensure(
            r.header_all(name)
                .join(", ")
                .to_ascii_lowercase()
                .contains(&value.to_ascii_lowercase()),
            format!(
                "expected {name} to contain {value:?}, got {:?}",
                r.header_all(name)
            ),
        ),
        Expect::NoHeader(name) => ensure(
            !r.has_header(name),
            format!("expected no {name}, got {:?}", r.header_all(name)),
        ),
        Expect::AgeBetween(lo, hi) => {
            let age: Option<u64> = r.header("age").trim().parse().ok();
            ensure(
                age.is_some_and(|a| (*lo..=*hi).contains(&a)),
                format!("expected Age in {lo}..={hi}, got {:?}", r.header_all("age")),
            )
        }
        Expect::Hit => ensure(cs.has("hit"), "expected a hit".into()),
        Expect::NotHit => ensure(!cs.has("hit"), "expected no hit".into()),
        Expect::Param(k, v) => ensure(
            cs.param(k) == Some(*v),
            format!("expected Cache-Status {k}={v}"),
        ),
        Expect::Has(k) => ensure(cs.has(k), format!("expected Cache-Status {k}")),
        Expect::Lacks(k) => ensure(!cs.has(k), format!("expected no Cache-Status {k}")),
        Expect::ParamContains(k, v) => {
            let v = v.replace("{p}", &ctx.base);
            ensure(
                cs.param(k).is_some_and(|got| got.contains(&v)),
                format!("expected Cache-Status {k} containing {v:?}"),
            )
        }
        Expect::TtlBetween(lo, hi) => ensure(
            cs.ttl().is_some_and(|t| (*lo..=*hi).contains(&t)),
            format!("expected ttl in {lo}..={hi}"),
        ),
        Expect::TtlInteger => ensure(cs.ttl_is_integer(), "expected an integer ttl".into()),
        Expect::OriginHits(path, n) => {
            let path = path.replace("{p}", &ctx.base);
            let seen = ctx.origin.hits_for(&path);
            ensure(
                seen == *n,
                format!("expected the origin to have seen {n} requests for {path}, it saw {seen}"),
            )
        }
        Expect::OriginSaw(path, name, value) => {
            let req = last_request(path)?;
            let got = req.header(name);
            let ok = match value {
                Some(v) => got == Some(v.as_str()),
                None => req.has_header(name),
            };
            ensure(
                ok,
                format!(
                    "expected the origin's last request to carry {name}{}, it had {:?} (request headers {:?})",
                    value.as_ref().map(|v| format!(": {v}")).unwrap_or_default(),
                    got,
                    request_header_names(&req),
                ),
            )
        }
        Expect::OriginDidNotSee(path, name) => {
            let req = last_request(path)?;
            ensure(
                !req.has_header(name),
                format!(
                    "expected the origin's last request without {name}, it had {:?}",
                    req.header(name)
                ),
            )
        }
        Expect::OriginMethod(path, m) => {
            let req = last_request(path)?;
            ensure(
                req.method == *m,
                format!(
                    "expected the origin's last request to be a {m}, it was a {}",
                    req.method
                ),
            )
        }
        Expect::DecodesToBodyOf(i) => {
            let earlier = ctx.replies.get(*i).ok_or("no such step")?;
            let (now, then) = (decoded(r)?, decoded(earlier)?);
            ensure(
                now == then,
                format!(
                    "decoded, {} bytes unlike the {} of step {i}",
                    now.len(),
                    then.len()
                ),
            )
        }
        Expect::Check(what, f) => f(r).map_err(|e| format!("{what}: {e}")),
    }
}

/// The body decoded by its `Content-Encoding`: none, `br` or `gzip`.
pub fn decoded(r: &Reply) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let result = match r.header("content-encoding") {
        "" | "identity" => return Ok(r.bytes.to_vec()),
        "br" => brotli::Decompressor::new(&r.bytes[..], 4096).read_to_end(&mut out),
        "gzip" => flate2::read::GzDecoder::new(&r.bytes[..]).read_to_end(&mut out),
        other => return Err(format!("unexpected Content-Encoding {other:?}")),
    };
    result.map_err(|e| format!("cannot decode {}: {e}", r.header("content-encoding")))?;
    Ok(out)
}

fn request_header_names(req: &calmcache_testkit::RecordedRequest) -> Vec<String> {
    req.headers
        .keys()
        .map(|k| k.as_str())
        .filter(|k| !k.starts_with("x-origin-"))
        .map(str::to_string)
        .collect()
}

fn interesting_headers(r: &Reply) -> Vec<String> {
    r.headers
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "cache-status" | "date" | "x-forwarded-for"))
        .map(|(k, v)| format!("{k}: {}", String::from_utf8_lossy(v.as_bytes())))
        .collect()
}

fn truncate(s: &str) -> String {
    let mut out: String = s.chars().take(60).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

fn slug(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    while s.contains("--") {
        s = s.replace("--", "-");
    }
    s.trim_matches('-').to_string()
}
