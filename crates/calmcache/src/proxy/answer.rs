//! One answer to one request, and what it was: the response, and who counts
//! it how. Every path of the request (cache, fetch, pass, tunnel, refusal)
//! returns one [`Answer`]; `handle` records it once, where it leaves (route
//! and zone counters, the latency histogram of its class, the access log's
//! class).
//!
//! Must not count anything itself, nor build responses (`respond.rs` does).

use calmcache_core::{AnswerClass, CacheStatus, Report};
use http::Response;

use crate::http::body::ResponseBody;
use crate::proxy::state::Route;
use crate::telemetry::stats::Activity;

/// A response and what happened to produce it.
pub(crate) struct Answer<'r> {
    /// What the client gets.
    pub resp: Response<ResponseBody>,
    /// Who counts it, and how.
    pub told: Told<'r>,
    /// Among a route's `zones`, the one its key was placed in (its index
    /// among the generation's zones), which counts the answer too.
    pub placed: Option<usize>,
}

/// How an answer is counted.
#[derive(Clone, Copy)]
pub(crate) enum Told<'r> {
    /// Answered on a route as the report says: counted in the route's
    /// counters (and the zone it was placed in), timed in its class's
    /// latency histogram.
    Answered(&'r Activity, Report),
    /// Refused (at the edge, no route, or a request body that broke off):
    /// the access log shows `bypass`; the histograms, whose counts are the
    /// routes' answers, do not. A route that had already sent the request
    /// on still counts it.
    Refused(Option<(&'r Activity, Report)>),
    /// Not an answer of the cache (a `PURGE`): no class.
    Unclassed,
    /// Refused by one of the route's `limits` (proxy/limit.rs), the origin
    /// untouched: counted in the route's `limited`; the access log shows
    /// `bypass`, the histograms nothing.
    Limited(&'r Activity),
}

impl<'r> Answer<'r> {
    /// `resp`, answered on `route` as `report` says.
    pub(crate) fn answered(
        route: &'r Route,
        report: &Report,
        resp: Response<ResponseBody>,
    ) -> Self {
        Answer {
            resp,
            told: Told::Answered(&route.activity, *report),
            placed: None,
        }
    }

    /// `resp`, answered on a route whose counters are `activity` (a route
    /// that answers itself: proxy/answering/).
    pub(crate) fn counted(
        activity: &'r Activity,
        report: &Report,
        resp: Response<ResponseBody>,
    ) -> Self {
        Answer {
            resp,
            told: Told::Answered(activity, *report),
            placed: None,
        }
    }

    /// `resp`, a refusal no route counts.
    pub(crate) fn refused(resp: Response<ResponseBody>) -> Self {
        Answer {
            resp,
            told: Told::Refused(None),
            placed: None,
        }
    }

    /// `resp`, with no class.
    pub(crate) fn unclassed(resp: Response<ResponseBody>) -> Self {
        Answer {
            resp,
            told: Told::Unclassed,
            placed: None,
        }
    }
}

impl Told<'_> {
    /// The class the access log shows, if any.
    pub(crate) fn class(&self) -> Option<AnswerClass> {
        match self {
            Told::Answered(_, report) => Some(report.status.class()),
            Told::Refused(_) | Told::Limited(_) => Some(CacheStatus::Bypass.class()),
            Told::Unclassed => None,
        }
    }
}
