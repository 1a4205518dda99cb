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

/// Levenshtein distance in characters (insert, delete, substitute).
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    // One row of the classic table; `row[j]` = distance(a[..i], b[..j]).
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}
