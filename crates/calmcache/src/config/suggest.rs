//! "Did you mean" hints for misspelt names and keys.
//!
//! Owns the edit distance and the threshold for a near miss. It must not
//! decide whether a name is wrong; callers ask only after a lookup failed.

/// The hint for a name that is not among `names`: a near-miss suggestion if
/// there is one, then the names that exist, e.g.
/// `did you mean "ssd"? zones: disk, ssd`.
pub(crate) fn names_hint(plural: &str, name: &str, names: &[&str]) -> String {
    if names.is_empty() {
        return format!("no {plural} are defined");
    }
    let listed = format!("{plural}: {}", names.join(", "));
    match closest(name, names.iter().copied()) {
        Some(near) => format!("did you mean {near:?}? {listed}"),
        None => listed,
    }
}

/// The candidate nearest to `name`, if it is close enough to be a typo:
/// at most one edit per three characters (at least one), ignoring case.
pub(crate) fn closest<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let wanted = name.to_lowercase();
    let limit = (wanted.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|candidate| (edit_distance(&wanted, &candidate.to_lowercase()), candidate))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Edit distance in characters: insert, delete, substitute, or swap two
/// neighbours (optimal string alignment), so `hots` is one edit from `host`.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rows of the classic table: `row[j]` = distance(a[..i], b[..j]),
    // `prev` for i - 1 and `prev2` for i - 2 (for swaps).
    let mut prev2: Vec<usize> = Vec::new();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut row = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (prev[j - 1] + cost).min(prev[j] + 1).min(row[j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(prev2[j - 2] + 1);
            }
            row[j] = best;
        }
        prev2 = std::mem::replace(&mut prev, row);
    }
    prev[b.len()]
}
