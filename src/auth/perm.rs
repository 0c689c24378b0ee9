//! Key-range permission checks (etcd's `range_perm_cache.go`): a user's permissions from all
//! their roles, merged into disjoint intervals per kind, so that a request's range is allowed
//! exactly when the union of the granted ranges covers it.

/// The end of an interval: a key (exclusive), or no end at all (`"\0"` as a range end).
type End = Option<Vec<u8>>;

/// Granted ranges of one kind, sorted by start, disjoint and not touching.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Intervals(Vec<(Vec<u8>, End)>);

/// The interval of a permission or request: `range_end` empty is the one key, `"\0"` every key
/// from `key` on.
fn interval(key: &[u8], range_end: &[u8]) -> (Vec<u8>, End) {
    if range_end.is_empty() {
        let mut next = key.to_vec();
        next.push(0);
        return (key.to_vec(), Some(next));
    }
    if range_end == [0] {
        return (key.to_vec(), None);
    }
    (key.to_vec(), Some(range_end.to_vec()))
}

/// `a <= b` for ends, where no end is above every key.
fn end_ge(a: &End, b: &End) -> bool {
    match (a, b) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(a), Some(b)) => a >= b,
    }
}

impl Intervals {
    /// Merges `ranges` (key, range_end as in a permission).
    pub fn build<'a>(ranges: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Self {
        let mut all: Vec<(Vec<u8>, End)> =
            ranges.into_iter().map(|(k, e)| interval(k, e)).collect();
        all.sort();
        let mut out: Vec<(Vec<u8>, End)> = Vec::with_capacity(all.len());
        for (start, end) in all {
            if let Some(last) = out.last_mut() {
                // Overlapping or touching: one interval.
                let touches = match &last.1 {
                    None => true,
                    Some(e) => start <= *e,
                };
                if touches {
                    if !end_ge(&last.1, &end) {
                        last.1 = end;
                    }
                    continue;
                }
            }
            out.push((start, end));
        }
        Intervals(out)
    }

    /// Whether the request range (key, range_end as in a request) is covered.
    pub fn covers(&self, key: &[u8], range_end: &[u8]) -> bool {
        let (start, end) = interval(key, range_end);
        // An empty or inverted range covers nothing; etcd's interval check then finds it
        // outside every granted interval too, unless it starts inside one.
        let i = self.0.partition_point(|(s, _)| *s <= start);
        if i == 0 {
            return false;
        }
        let (_, e) = &self.0[i - 1];
        match e {
            None => true,
            Some(e) if start >= *e => false,
            Some(_) => end_ge(e, &end),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(r: &[(&str, &str)]) -> Intervals {
        Intervals::build(r.iter().map(|(k, e)| (k.as_bytes(), e.as_bytes())))
    }

    #[test]
    fn points_prefixes_and_open_ends() {
        let p = iv(&[("a", ""), ("foo", "fop"), ("z", "\0")]);
        assert!(p.covers(b"a", b""));
        assert!(!p.covers(b"a", b"b"), "a single key does not cover a range");
        assert!(p.covers(b"foo", b""));
        assert!(p.covers(b"foo/bar", b""));
        assert!(p.covers(b"foo", b"fop"));
        assert!(!p.covers(b"foo", b"foq"));
        assert!(!p.covers(b"fo", b""));
        assert!(p.covers(b"zz", b"\0"));
        assert!(!p.covers(b"y", b"\0"));
    }

    #[test]
    fn touching_ranges_merge() {
        let p = iv(&[("a", "c"), ("c", "e"), ("b", "d")]);
        assert!(p.covers(b"a", b"e"));
        assert!(!p.covers(b"a", b"f"));
        assert!(!Intervals::default().covers(b"a", b""));
    }
}
