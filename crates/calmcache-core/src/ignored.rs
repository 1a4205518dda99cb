//! Response fields a route tells the cache to disregard when it decides
//! whether an answer is stored and for how long: NGINX's
//! `proxy_ignore_headers`, as a route's `ignore_headers`.
//!
//! Owns the names that may be ignored ([`IgnorableField`]) and a route's set
//! of them ([`IgnoredFields`], a `Copy` bit set: reading it on a fill costs
//! nothing). What ignoring each one means is decided in `freshness.rs`,
//! the one place storability is decided; this module only names them.

/// A response field whose caching meaning a route may disregard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IgnorableField {
    /// `Set-Cookie`: the answer is stored despite it, and the stored copy
    /// never holds it (only the client whose request fetched it gets it).
    SetCookie,
    /// `Cache-Control` (the field of that name; RFC 9213 targeted fields
    /// such as `CDN-Cache-Control` are still obeyed): the lifetime comes
    /// from the route's `ttl` or heuristics, and `no-store`/`private`/
    /// `no-cache` no longer prevent storing.
    CacheControl,
    /// `Expires`: never gives a lifetime.
    Expires,
    /// `Vary`: one stored answer for every client, whatever its headers;
    /// the stored copy holds no `Vary` (it no longer varies).
    Vary,
    /// `X-Accel-Expires`: calmcache does not read it, so ignoring it
    /// changes nothing; accepted so an NGINX line carries over as written.
    XAccelExpires,
}

impl IgnorableField {
    /// Every ignorable field, in the order `check` lists them.
    pub const ALL: [IgnorableField; 5] = [
        IgnorableField::SetCookie,
        IgnorableField::CacheControl,
        IgnorableField::Expires,
        IgnorableField::Vary,
        IgnorableField::XAccelExpires,
    ];

    /// The field's name as NGINX and the config spell it.
    pub fn name(self) -> &'static str {
        match self {
            IgnorableField::SetCookie => "Set-Cookie",
            IgnorableField::CacheControl => "Cache-Control",
            IgnorableField::Expires => "Expires",
            IgnorableField::Vary => "Vary",
            IgnorableField::XAccelExpires => "X-Accel-Expires",
        }
    }

    /// The field named `name` (field names are case-insensitive, RFC 9110
    /// §5.1), or `None` when it is not one a route may ignore.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(name.trim()))
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// The set of fields a route ignores; empty by default (every field means
/// what RFC 9111 says).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IgnoredFields {
    bits: u8,
}

impl IgnoredFields {
    /// No field ignored.
    pub const NONE: IgnoredFields = IgnoredFields { bits: 0 };

    /// The set with `field` added.
    pub fn with(self, field: IgnorableField) -> Self {
        IgnoredFields {
            bits: self.bits | field.bit(),
        }
    }

    /// Whether `field` is ignored.
    pub fn contains(self, field: IgnorableField) -> bool {
        self.bits & field.bit() != 0
    }

    /// True when nothing is ignored.
    pub fn is_empty(self) -> bool {
        self.bits == 0
    }

    /// The ignored fields, in [`IgnorableField::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = IgnorableField> {
        IgnorableField::ALL
            .into_iter()
            .filter(move |f| self.contains(*f))
    }
}

impl FromIterator<IgnorableField> for IgnoredFields {
    fn from_iter<I: IntoIterator<Item = IgnorableField>>(iter: I) -> Self {
        iter.into_iter()
            .fold(IgnoredFields::NONE, IgnoredFields::with)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_case_insensitively() {
        for field in IgnorableField::ALL {
            assert_eq!(IgnorableField::from_name(field.name()), Some(field));
            let lower = field.name().to_ascii_lowercase();
            assert_eq!(IgnorableField::from_name(&lower), Some(field));
        }
        assert_eq!(IgnorableField::from_name("Last-Modified"), None);
        assert_eq!(IgnorableField::from_name(""), None);
    }

    #[test]
    fn a_set_holds_what_was_added() {
        let set: IgnoredFields = [IgnorableField::Vary, IgnorableField::SetCookie]
            .into_iter()
            .collect();
        assert!(set.contains(IgnorableField::Vary));
        assert!(!set.contains(IgnorableField::Expires));
        let listed: Vec<_> = set.iter().collect();
        assert_eq!(listed, [IgnorableField::SetCookie, IgnorableField::Vary]);
        assert!(IgnoredFields::default().is_empty());
    }
}
