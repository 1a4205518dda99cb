//! NGINX sizes and times as calmcache writes them.
//!
//! Owns the unit conversion: NGINX sizes are bytes or `k`/`m`/`g` (powers
//! of 1024, either case), calmcache's are `B`/`KiB`/`MiB`/`GiB`/`TiB`;
//! NGINX times combine `ms s m h d w M y` (`1h30m`, a bare number is
//! seconds), calmcache's are one number and `ms`/`s`/`m`/`h`/`d`.

/// `700m` -> `"700MiB"`, `80G` -> `"80GiB"`, `4096` -> `"4KiB"`; `None` when
/// it is not an NGINX size.
pub(crate) fn size(text: &str) -> Option<String> {
    let (digits, unit) = split_number(text)?;
    let n: u64 = digits.parse().ok()?;
    let bytes = match unit {
        "" => n,
        "k" | "K" => n.checked_mul(1 << 10)?,
        "m" | "M" => n.checked_mul(1 << 20)?,
        "g" | "G" => n.checked_mul(1 << 30)?,
        _ => return None,
    };
    Some(bytes_text(bytes))
}

/// Bytes in the largest unit that divides them exactly (`700MiB`).
fn bytes_text(bytes: u64) -> String {
    let (n, unit) = crate::config::largest_unit(bytes);
    format!("{n}{unit}")
}

/// Milliseconds of an NGINX time (`600s`, `24h`, `1h30m`, `500ms`, `10`),
/// or `None` when it is not one.
pub(crate) fn millis(text: &str) -> Option<u64> {
    let mut rest = text;
    let mut total: u64 = 0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits_len == 0 {
            return None;
        }
        let n: u64 = rest[..digits_len].parse().ok()?;
        rest = &rest[digits_len..];
        let (scale, len) = if rest.starts_with("ms") {
            (1, 2)
        } else {
            let unit = rest.chars().next();
            let scale = match unit {
                None => 1000,
                Some('s') => 1000,
                Some('m') => 60_000,
                Some('h') => 3_600_000,
                Some('d') => 86_400_000,
                Some('w') => 7 * 86_400_000,
                Some('M') => 30 * 86_400_000,
                Some('y') => 365 * 86_400_000,
                Some(_) => return None,
            };
            (scale, usize::from(unit.is_some()))
        };
        rest = &rest[len..];
        total = total.checked_add(n.checked_mul(scale)?)?;
    }
    Some(total)
}

/// An NGINX time as a calmcache duration: `"600s"` -> `"10m"`, `"1h30m"` ->
/// `"90m"`; `None` when it is not a time.
pub(crate) fn duration(text: &str) -> Option<String> {
    millis(text).map(duration_text)
}

/// Milliseconds in the largest unit that divides them exactly.
pub(crate) fn duration_text(ms: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ];
    if ms == 0 {
        return "0s".to_owned();
    }
    for (unit, scale) in UNITS {
        if ms.is_multiple_of(scale) {
            return format!("{}{unit}", ms / scale);
        }
    }
    format!("{ms}ms")
}

fn split_number(text: &str) -> Option<(&str, &str)> {
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    (end > 0).then(|| text.split_at(end))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(size("700m").as_deref(), Some("700MiB"));
        assert_eq!(size("80G").as_deref(), Some("80GiB"));
        assert_eq!(size("10k").as_deref(), Some("10KiB"));
        assert_eq!(size("1024m").as_deref(), Some("1GiB"));
        assert_eq!(size("1000").as_deref(), Some("1000B"));
        assert_eq!(size("5x"), None);
        assert_eq!(size("m"), None);
    }

    #[test]
    fn durations() {
        assert_eq!(duration("600s").as_deref(), Some("10m"));
        assert_eq!(duration("24h").as_deref(), Some("1d"));
        assert_eq!(duration("1h30m").as_deref(), Some("90m"));
        assert_eq!(duration("1s").as_deref(), Some("1s"));
        assert_eq!(duration("500ms").as_deref(), Some("500ms"));
        assert_eq!(duration("75").as_deref(), Some("75s"));
        assert_eq!(duration("1w").as_deref(), Some("7d"));
        assert_eq!(duration("0").as_deref(), Some("0s"));
        assert_eq!(duration("x"), None);
        assert_eq!(duration("5q"), None);
    }
}
