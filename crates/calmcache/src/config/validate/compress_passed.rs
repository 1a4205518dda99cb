//! A route's `compress_passed`, `compress_passed_types` and
//! `compress_passed_min_length` -> [`PassedCompression`]: codings calmcache
//! makes on the fly (gzip only), media ranges, a byte count. Reports and
//! carries on, like the rest of validation.

use super::Checker;
use crate::config::defaults::route;
use crate::config::error::Problem;
use crate::config::raw::RawRoute;
use crate::http::compress::Coding;
use crate::http::compress_passed::{MediaRange, PassedCompression};

impl Checker {
    /// The three keys of `raw`, under the route's `path`.
    pub(super) fn compress_passed(&mut self, path: &str, raw: &RawRoute) -> PassedCompression {
        let at = |key: &str| format!("{path}.{key}");
        let types = match &raw.compress_passed_types {
            Some(types) => self.media_ranges(&at("compress_passed_types"), types),
            None => route::COMPRESS_PASSED_TYPES
                .iter()
                .filter_map(|t| MediaRange::parse(t))
                .collect(),
        };
        let min_length = self.count(
            &at("compress_passed_min_length"),
            raw.compress_passed_min_length,
            route::COMPRESS_PASSED_MIN_LENGTH as usize,
            0,
        ) as u64;
        PassedCompression {
            codings: self.passed_codings(&at("compress_passed"), &raw.compress_passed),
            types,
            min_length,
        }
    }

    /// `compress_passed`: gzip, once (br is made only for stored objects).
    fn passed_codings(&mut self, path: &str, raw: &[String]) -> Vec<Coding> {
        let mut codings: Vec<Coding> = Vec::new();
        for (i, text) in raw.iter().enumerate() {
            let at = format!("{path}[{i}]");
            match Coding::parse(text) {
                Some(coding) if codings.contains(&coding) => {
                    self.report(Problem::new(at, format!("{text:?} is listed twice")));
                }
                Some(Coding::Gzip) => codings.push(Coding::Gzip),
                Some(Coding::Br) => {
                    let problem = Problem::new(at, "br is not made on the fly, only gzip");
                    self.report(problem.hint(
                        "brotli at a useful quality costs several times gzip level 1's CPU per \
                         byte, on every request; use compress = [\"br\"] for stored objects",
                    ));
                }
                None => {
                    let problem =
                        Problem::new(at, format!("{text:?} is not a coding calmcache can make"));
                    self.report(problem.hint(r#"expected "gzip""#));
                }
            }
        }
        codings
    }

    /// `compress_passed_types`: `type/subtype`, `type/*` or `*`, none twice.
    fn media_ranges(&mut self, path: &str, raw: &[String]) -> Vec<MediaRange> {
        self.distinct(path, raw, MediaRange::parse, |at, text| {
            let problem = Problem::new(at, format!("{text:?} is not a media type"));
            problem.hint(r#"write e.g. "text/html", "text/*" or "*" (no parameters)"#)
        })
    }
}
