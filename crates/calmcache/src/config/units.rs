//! Duration and size literals: `"500ms"`, `"1.5s"`, `"2h"`, `"1d"`, `"256MiB"`.
//!
//! Owns the grammar of those literals and the wording of their errors. It
//! knows nothing about TOML paths: `validate.rs` attaches the path to the
//! [`BadValue`] returned here.

use std::time::Duration;

/// A value that does not parse, and what to tell the user about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadValue {
    pub(crate) message: String,
    pub(crate) hint: String,
}

impl BadValue {
    fn new(message: String, hint: &str) -> Self {
        BadValue {
            message,
            hint: hint.to_owned(),
        }
    }
}

/// The hint for anything that is not a duration.
pub(crate) const DURATION_HINT: &str = r#"write e.g. "60s", "500ms""#;
/// The hint for anything that is not a size.
pub(crate) const SIZE_HINT: &str = r#"write e.g. "64MiB", "512KiB""#;

const NANOS_PER_MS: u128 = 1_000_000;
const NANOS_PER_SEC: u128 = 1_000 * NANOS_PER_MS;
// Digits past this many after the point are below a nanosecond even for
// days (1e-14 d = 0.864 ns); the product (below 1e14 * 8.64e13) fits a u128.
const MAX_FRACTION_DIGITS: usize = 14;

/// 1 KiB, the unit sizes are usually written in.
pub(crate) const KIB: u64 = 1 << 10;
/// 1 MiB.
pub(crate) const MIB: u64 = 1 << 20;
/// 1 GiB.
pub(crate) const GIB: u64 = 1 << 30;
/// 1 TiB: disk zones on large drives are written in it (`max_size = "2TiB"`).
pub(crate) const TIB: u64 = 1 << 40;

/// Parses a non-negative decimal number followed by `ms`, `s`, `m`, `h` or
/// `d` (24 hours), e.g. `"0.5s"`. Arithmetic is exact to the nanosecond (no float rounding).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, BadValue> {
    let not_a_duration = |hint: &str| BadValue::new(format!("{text:?} is not a duration"), hint);
    let (number, unit) = split_unit(text);
    if number.starts_with('-') {
        return Err(BadValue::new(
            format!("{text:?} is negative"),
            r#"durations are zero or more, e.g. "0s""#,
        ));
    }
    let unit_nanos = match unit {
        "ms" => NANOS_PER_MS,
        "s" => NANOS_PER_SEC,
        "m" => 60 * NANOS_PER_SEC,
        "h" => 3_600 * NANOS_PER_SEC,
        "d" => 86_400 * NANOS_PER_SEC,
        "" => return Err(not_a_duration(DURATION_HINT)),
        _ => {
            let hint = format!("units are ms, s, m, h, d; {DURATION_HINT}");
            return Err(not_a_duration(&hint));
        }
    };
    let nanos = decimal_times(number, unit_nanos).ok_or_else(|| not_a_duration(DURATION_HINT))?;
    let secs = u64::try_from(nanos / NANOS_PER_SEC).map_err(|_| too_large(text))?;
    // The remainder is below NANOS_PER_SEC, so it fits a u32.
    let subsec = u32::try_from(nanos % NANOS_PER_SEC).map_err(|_| too_large(text))?;
    Ok(Duration::new(secs, subsec))
}

/// Parses a whole number followed by `B`, `KiB`, `MiB`, `GiB` or `TiB`, e.g. `"256MiB"`.
/// Decimal units (`KB`, `MB`, `GB`) are refused rather than guessed at.
pub(crate) fn parse_size(text: &str) -> Result<u64, BadValue> {
    let not_a_size = |hint: &str| BadValue::new(format!("{text:?} is not a size"), hint);
    let (number, unit) = split_unit(text);
    let multiplier = match unit {
        "B" => 1,
        "KiB" => KIB,
        "MiB" => MIB,
        "GiB" => GIB,
        "TiB" => TIB,
        "" => return Err(not_a_size(SIZE_HINT)),
        _ if is_decimal_unit(unit) => return Err(not_a_size("use KiB/MiB/GiB/TiB")),
        _ => {
            let hint = format!("units are B, KiB, MiB, GiB, TiB; {SIZE_HINT}");
            return Err(not_a_size(&hint));
        }
    };
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        let hint = format!("sizes are whole numbers; {SIZE_HINT}");
        return Err(not_a_size(&hint));
    }
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .ok_or_else(|| too_large(text))
}

/// `bytes` in the largest binary unit that divides it exactly, e.g. `256 MiB`.
pub(crate) fn format_size(bytes: u64) -> String {
    let (n, unit) = largest_unit(bytes);
    format!("{n} {unit}")
}

/// `bytes` as a count of the largest binary unit that divides it exactly:
/// `(256, "MiB")`; `(bytes, "B")` when none does (and for 0).
pub(crate) fn largest_unit(bytes: u64) -> (u64, &'static str) {
    let units = [(TIB, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")];
    units
        .iter()
        // Not `is_multiple_of`: that needs Rust 1.87, the workspace says 1.80.
        .find(|(unit, _)| bytes != 0 && bytes / unit * unit == bytes)
        .map_or((bytes, "B"), |&(unit, name)| (bytes / unit, name))
}

/// Splits `"1.5 s"` into `("1.5", "s")`: the number is everything up to the
/// first character that cannot be part of one; spaces around the unit are allowed.
fn split_unit(text: &str) -> (&str, &str) {
    let text = text.trim();
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(end);
    (number, unit.trim_start())
}

/// `number` (digits with an optional fraction) times `unit`, exactly, or
/// `None` if `number` is malformed or the product overflows.
fn decimal_times(number: &str, unit: u128) -> Option<u128> {
    let (whole, fraction) = match number.split_once('.') {
        Some((whole, fraction)) if !fraction.is_empty() => (whole, fraction),
        Some(_) => return None,
        None => (number, ""),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) {
        return None;
    }
    let fraction = &fraction[..fraction.len().min(MAX_FRACTION_DIGITS)];
    let whole_part = whole.parse::<u128>().ok()?.checked_mul(unit)?;
    if fraction.is_empty() {
        return Some(whole_part);
    }
    let scale = 10u128.pow(u32::try_from(fraction.len()).ok()?);
    let fraction_part = fraction.parse::<u128>().ok()? * unit / scale;
    whole_part.checked_add(fraction_part)
}

/// 1000-based or abbreviated units people write out of habit.
fn is_decimal_unit(unit: &str) -> bool {
    let lower = unit.to_ascii_lowercase();
    matches!(
        lower.as_str(),
        "k" | "kb" | "m" | "mb" | "g" | "gb" | "t" | "tb" | "kib" | "mib" | "gib" | "tib"
    )
}

fn too_large(text: &str) -> BadValue {
    BadValue::new(format!("{text:?} is too large"), "write a smaller value")
}
