//! The URL catalog of `bench/fleet-many`, shared by its origin
//! (`catalog-origin`) and its client (`fleetload`) so both agree, without
//! talking, on what every URL is: its path, its size, whether it varies on
//! `Accept-Language`, and every byte of its body.
//!
//! URL `id` (0-based; the client's Zipf rank `id + 1`) is `/s{id % 10}/{id}`:
//! ten sections a prefix purge can take one at a time. Every 20th id
//! (`id % 20 == 19`) is large (between `large_min` and `large_max` bytes),
//! the rest small (1-64 KiB); every 10th (`id % 10 == 3`) varies on
//! `Accept-Language`. Sizes come from a fixed hash of the id, so a run is
//! the same catalog every time. The two kinds are spread evenly over the
//! popularity ranks: 5% of the URLs and about 5% of the requests are large.
//!
//! A body is a window of one fixed pseudo-random pattern, starting at an
//! offset hashed from the path and the variant: the client checks every
//! byte (a body of another URL, another variant, cut short or padded fails)
//! with a `memcmp` per chunk, cheap at gigabytes per second.
//! It owns no I/O; it must not know the products under test.

use std::sync::OnceLock;

/// Bytes in the pattern period (a prime, so windows of different offsets
/// never line up by chance).
pub const PATTERN_LEN: usize = 65_521;

/// Sections `/s0/` .. `/s9/`.
pub const SECTIONS: u64 = 10;

/// The languages a client picks from for a Vary'd URL (index 0 for the
/// others: the variant of a URL that does not vary).
pub const LANGS: [&str; 3] = ["en", "de", "fr"];

/// What the catalog holds.
#[derive(Clone, Copy, Debug)]
pub struct Catalog {
    /// URLs in the catalog.
    pub urls: u64,
    /// Smallest large body, bytes.
    pub large_min: u64,
    /// Largest large body, bytes.
    pub large_max: u64,
}

/// The catalog's command-line options, the same in the origin and the
/// client (each must build the same catalog).
#[derive(clap::Args, Clone, Copy, Debug)]
pub struct CatalogArgs {
    /// URLs in the catalog
    #[arg(long, default_value_t = 10_000)]
    pub urls: u64,
    /// Smallest large body, MiB
    #[arg(long, default_value_t = 5)]
    pub large_min_mib: u64,
    /// Largest large body, MiB
    #[arg(long, default_value_t = 50)]
    pub large_max_mib: u64,
}

impl CatalogArgs {
    /// The catalog these options describe.
    pub fn catalog(&self) -> Catalog {
        Catalog {
            urls: self.urls,
            large_min: self.large_min_mib << 20,
            large_max: self.large_max_mib.max(self.large_min_mib) << 20,
        }
    }
}

/// One URL of the catalog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    /// Its id (`/s{id % 10}/{id}`).
    pub id: u64,
    /// Body bytes.
    pub size: u64,
    /// Whether it answers `Vary: Accept-Language`.
    pub vary: bool,
    /// Over `large_min`: one of the 5% of large bodies.
    pub large: bool,
}

impl Catalog {
    /// The URL `id`, or `None` past the catalog.
    pub fn item(&self, id: u64) -> Option<Item> {
        if id >= self.urls {
            return None;
        }
        let h = mix(id);
        let large = id % 20 == 19;
        let size = if large {
            let span = self.large_max.saturating_sub(self.large_min) + 1;
            self.large_min + h % span
        } else {
            1024 + h % (63 * 1024 + 1)
        };
        Some(Item {
            id,
            size,
            vary: id % 10 == 3,
            large,
        })
    }

    /// The URL whose path is `path` (`/s{k}/{id}`, `k == id % 10`).
    pub fn parse(&self, path: &str) -> Option<Item> {
        let rest = path.strip_prefix("/s")?;
        let (section, id) = rest.split_once('/')?;
        let id: u64 = id.parse().ok()?;
        let section: u64 = section.parse().ok()?;
        (section == id % SECTIONS).then_some(())?;
        self.item(id)
    }
}

impl Item {
    /// Its path.
    pub fn path(&self) -> String {
        format!("/s{}/{}", self.id % SECTIONS, self.id)
    }

    /// The variant the origin serves for an `Accept-Language` value: the
    /// index in [`LANGS`] (0 for anything else, and always 0 when the URL
    /// does not vary).
    pub fn variant(&self, accept_language: Option<&str>) -> usize {
        if !self.vary {
            return 0;
        }
        accept_language
            .and_then(|l| LANGS.iter().position(|x| *x == l.trim()))
            .unwrap_or(0)
    }

    /// Where the body of `variant` starts in the pattern.
    pub fn offset(&self, variant: usize) -> usize {
        (mix(self.id ^ ((variant as u64 + 1) << 40)) % PATTERN_LEN as u64) as usize
    }
}

/// The pattern twice over, so any window of up to [`PATTERN_LEN`] bytes at
/// any offset is one contiguous slice.
pub fn pattern() -> &'static [u8] {
    static PATTERN: OnceLock<Vec<u8>> = OnceLock::new();
    PATTERN.get_or_init(|| {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let one: Vec<u8> = (0..PATTERN_LEN)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        [one.as_slice(), one.as_slice()].concat()
    })
}

/// The body bytes `[at, at + len)` of a body starting at pattern `offset`
/// (`len <= PATTERN_LEN`).
pub fn window(offset: usize, at: u64, len: usize) -> &'static [u8] {
    let start = (offset + (at % PATTERN_LEN as u64) as usize) % PATTERN_LEN;
    &pattern()[start..start + len.min(PATTERN_LEN)]
}

/// Checks a chunk received at body position `at` against the pattern.
pub fn chunk_matches(offset: usize, at: u64, chunk: &[u8]) -> bool {
    let mut done = 0;
    while done < chunk.len() {
        let len = (chunk.len() - done).min(PATTERN_LEN);
        if window(offset, at + done as u64, len) != &chunk[done..done + len] {
            return false;
        }
        done += len;
    }
    true
}

/// A fixed 64-bit mix (splitmix64's finaliser).
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAT: Catalog = Catalog {
        urls: 10_000,
        large_min: 5 << 20,
        large_max: 50 << 20,
    };

    #[test]
    fn five_percent_large_ten_percent_vary() {
        let items: Vec<Item> = (0..CAT.urls).filter_map(|i| CAT.item(i)).collect();
        assert_eq!(items.iter().filter(|i| i.large).count(), 500);
        assert_eq!(items.iter().filter(|i| i.vary).count(), 1000);
        for i in &items {
            if i.large {
                assert!((5 << 20..=50 << 20).contains(&i.size));
            } else {
                assert!((1024..=64 * 1024).contains(&i.size));
            }
        }
        assert!(CAT.item(10_000).is_none());
    }

    #[test]
    fn paths_round_trip_and_bad_ones_are_refused() {
        let it = CAT.item(1234).expect("in the catalog");
        assert_eq!(it.path(), "/s4/1234");
        assert_eq!(CAT.parse("/s4/1234"), Some(it));
        for bad in ["/s3/1234", "/s4/x", "/x/1", "/s4/99999", "/s4/1234/"] {
            assert_eq!(CAT.parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn bodies_of_other_urls_or_variants_do_not_match() {
        let a = CAT.item(13).expect("in the catalog");
        assert!(a.vary);
        let body: Vec<u8> = (0..200_000u64)
            .step_by(1000)
            .flat_map(|at| window(a.offset(1), at, 1000).to_vec())
            .collect();
        assert!(chunk_matches(a.offset(1), 0, &body));
        assert!(chunk_matches(a.offset(1), 1000, &body[1000..]));
        assert!(!chunk_matches(a.offset(2), 0, &body));
        assert!(!chunk_matches(
            CAT.item(12).expect("in the catalog").offset(0),
            0,
            &body
        ));
        assert_eq!(a.variant(Some("de")), 1);
        assert_eq!(CAT.item(12).expect("in the catalog").variant(Some("de")), 0);
    }
}
