//! A set of key intervals answering "which intervals contain this key" in O(log n + matches).
//!
//! Intervals are kept sorted by start; an implicit balanced tree over that array (each segment's
//! middle element is its node) records the largest end in every subtree, so a lookup descends
//! only into subtrees that can still reach past the key. Watch creates and cancels rebuild it
//! (O(n log n)); writes, far more frequent, only query it.

use bytes::Bytes;

/// An upper bound; `None` is beyond every key.
type End = Option<Bytes>;

fn end_above(end: &End, key: &[u8]) -> bool {
    end.as_ref().is_none_or(|e| &e[..] > key)
}

fn max_end(a: &End, b: &End) -> End {
    match (a, b) {
        (None, _) | (_, None) => None,
        (Some(x), Some(y)) => Some(if x >= y { x.clone() } else { y.clone() }),
    }
}

#[derive(Debug)]
pub struct IntervalSet<T> {
    /// (start, end, value), sorted by start.
    items: Vec<(Bytes, End, T)>,
    /// `max[mid]`: the largest end in the segment whose middle is `mid`.
    max: Vec<End>,
}

impl<T> Default for IntervalSet<T> {
    fn default() -> Self {
        Self { items: Vec::new(), max: Vec::new() }
    }
}

impl<T: PartialEq + Copy> IntervalSet<T> {
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Adds `[start, end)`.
    pub fn insert(&mut self, start: Bytes, end: End, value: T) {
        let at = self.items.partition_point(|(s, _, _)| *s <= start);
        self.items.insert(at, (start, end, value));
        self.rebuild();
    }

    /// Removes every interval holding `value`.
    pub fn remove(&mut self, value: T) {
        self.items.retain(|(_, _, v)| *v != value);
        self.rebuild();
    }

    /// Calls `f` with the value of every interval containing `key`.
    pub fn stab(&self, key: &[u8], f: &mut impl FnMut(T)) {
        self.stab_in(0, self.items.len(), key, f);
    }

    fn stab_in(&self, lo: usize, hi: usize, key: &[u8], f: &mut impl FnMut(T)) {
        if lo >= hi {
            return;
        }
        let mid = lo + (hi - lo) / 2;
        if !end_above(&self.max[mid], key) {
            return;
        }
        self.stab_in(lo, mid, key, f);
        let (start, end, v) = &self.items[mid];
        if &start[..] <= key {
            if end_above(end, key) {
                f(*v);
            }
            // Everything right of `mid` starts at or after it, so only then can it match.
            self.stab_in(mid + 1, hi, key, f);
        }
    }

    fn rebuild(&mut self) {
        self.max = vec![Some(Bytes::new()); self.items.len()];
        self.build(0, self.items.len());
    }

    fn build(&mut self, lo: usize, hi: usize) -> End {
        if lo >= hi {
            return Some(Bytes::new());
        }
        let mid = lo + (hi - lo) / 2;
        let left = self.build(lo, mid);
        let right = self.build(mid + 1, hi);
        let m = max_end(&max_end(&left, &right), &self.items[mid].1);
        self.max[mid] = m.clone();
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stabbing_matches_a_linear_scan() {
        let mut set = IntervalSet::default();
        let mut all = Vec::new();
        let mut x: u64 = 99;
        for id in 0..300u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let a = (x >> 40) % 1000;
            let len = (x >> 20) % 200 + 1;
            let start = Bytes::from(format!("k{a:04}"));
            let end =
                if id % 17 == 0 { None } else { Some(Bytes::from(format!("k{:04}", a + len))) };
            set.insert(start.clone(), end.clone(), id);
            all.push((start, end, id));
        }
        for id in (0..300).step_by(7) {
            set.remove(id);
            all.retain(|(_, _, v)| *v != id);
        }
        for k in 0..1100 {
            let key = format!("k{k:04}");
            let mut got = Vec::new();
            set.stab(key.as_bytes(), &mut |v| got.push(v));
            got.sort();
            let mut want: Vec<u32> = all
                .iter()
                .filter(|(s, e, _)| &s[..] <= key.as_bytes() && end_above(e, key.as_bytes()))
                .map(|(_, _, v)| *v)
                .collect();
            want.sort();
            assert_eq!(got, want, "key {key}");
        }
    }
}
