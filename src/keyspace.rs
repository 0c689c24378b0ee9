//! The shape of the key space: which partition a key belongs to, and key ranges.
//!
//! Kubernetes stores each resource under `/registry/[group/]resource/`; a partition per resource
//! keeps unrelated kinds from sharing locks and maps. Partitioning is only an optimisation: a
//! range may cross any number of partitions and still comes back sorted and counted exactly.
//! Several kube-apiservers may share the store, each under its own `--etcd-prefix` (hosted
//! control planes: `/tenant-a`, `/tenant-b`); each prefix's resources get partitions of their
//! own. With tenants that come and go at run time (`--tenants-from-auth`) every top-level
//! segment counts as such a prefix, so a tenant's keys land in partitions of their own from
//! its first write, and the partition of a key never changes while the store runs.

use bytes::Bytes;

/// Decides the partition prefix of a key.
#[derive(Clone, Debug)]
pub struct Keyspace {
    /// The Kubernetes storage prefixes, each with a trailing slash (`/registry/`), longest
    /// first: of two nested prefixes the inner one owns the keys below it. Looked through in
    /// turn on every write: a handful of prefixes costs a few byte compares.
    registries: Vec<Bytes>,
    /// Every top-level segment (`/<x>/`) is a storage prefix too, for the keys no listed prefix
    /// holds: tenants appear at run time, and a key's partition must be the same before and
    /// after its tenant does (its history lives there).
    top_level: bool,
}

impl Keyspace {
    /// `prefixes` are kube-apiserver's `--etcd-prefix`es (default `/registry`); `top_level`:
    /// see [`Keyspace::top_level`](Self).
    pub fn new(prefixes: &[impl AsRef<str>], top_level: bool) -> Self {
        let mut registries: Vec<Bytes> = prefixes
            .iter()
            .map(|p| Bytes::from(format!("{}/", p.as_ref().trim_end_matches('/'))))
            .collect();
        registries.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        registries.dedup();
        Self { registries, top_level }
    }

    /// The resource prefix `key` lives under (`/registry/pods/`, `/registry/example.com/widgets/`),
    /// or `None` for keys outside any resource, which share the default partition.
    ///
    /// A first segment containing a dot is an API group and the resource is the next segment;
    /// the prefix must be followed by more key bytes (the bare `/registry/pods/` is not an object).
    pub fn partition_of<'k>(&self, key: &'k [u8]) -> Option<&'k [u8]> {
        self.resource_prefix(key).filter(|p| p.len() < key.len())
    }

    /// Like [`partition_of`](Self::partition_of), but also for the bare prefix itself
    /// (`/registry/pods/`), as the start of a range or watch over a whole resource.
    pub fn resource_prefix<'k>(&self, key: &'k [u8]) -> Option<&'k [u8]> {
        let registry = match self.registries.iter().find(|r| key.starts_with(r)) {
            Some(r) => r.len(),
            None if self.top_level && key.first() == Some(&b'/') => {
                // `/<x>/`, with a segment of at least one byte.
                1 + key[1..].iter().position(|&b| b == b'/').filter(|&at| at > 0)? + 1
            }
            None => return None,
        };
        let rest = &key[registry..];
        let first = rest.iter().position(|&b| b == b'/')?;
        if first == 0 {
            return None;
        }
        let mut end = first + 1;
        if rest[..first].contains(&b'.') {
            let second = rest[end..].iter().position(|&b| b == b'/')?;
            if second == 0 {
                return None;
            }
            end += second + 1;
        }
        Some(&key[..registry + end])
    }
}

/// The smallest key greater than every key that starts with `prefix` (etcd's `GetPrefixRangeEnd`);
/// `None` when no such key exists (the prefix is all 0xff).
pub fn prefix_end(prefix: &[u8]) -> Option<Bytes> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.last_mut() {
        if *last < 0xff {
            *last += 1;
            return Some(Bytes::from(end));
        }
        end.pop();
    }
    None
}

/// A half-open key interval `[start, end)`; `end == None` means unbounded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRange {
    pub start: Bytes,
    pub end: Option<Bytes>,
    /// True when the request named a single key (empty `range_end`).
    pub single: bool,
}

impl KeyRange {
    /// Builds a range from etcd's `(key, range_end)` pair: an empty `range_end` means the single
    /// key, `"\0"` means every key from `key` on.
    pub fn from_request(key: &[u8], range_end: &[u8]) -> Self {
        let start = Bytes::copy_from_slice(key);
        match range_end {
            [] => Self { start, end: None, single: true },
            [0] => Self { start, end: None, single: false },
            end => Self { start, end: Some(Bytes::copy_from_slice(end)), single: false },
        }
    }

    /// A range covering exactly one key.
    pub fn single(key: Bytes) -> Self {
        Self { start: key, end: None, single: true }
    }

    /// Whether `key` lies in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        if self.single {
            return key == &self.start[..];
        }
        key >= &self.start[..] && self.end.as_ref().is_none_or(|e| key < &e[..])
    }

    /// True when nothing can match (an end at or below the start).
    pub fn is_empty(&self) -> bool {
        !self.single && self.end.as_ref().is_some_and(|e| e[..] <= self.start[..])
    }

    /// Whether the range meets the interval of keys starting with `prefix`.
    pub fn meets_prefix(&self, prefix: &[u8]) -> bool {
        if self.is_empty() {
            return false;
        }
        if self.single {
            return self.start.starts_with(prefix);
        }
        // [start, end) meets [prefix, prefix_end) unless it ends before or starts after it.
        let ends_before = self.end.as_ref().is_some_and(|e| e[..] <= *prefix);
        let starts_after = match prefix_end(prefix) {
            Some(pe) => self.start[..] >= pe[..],
            None => false,
        };
        !ends_before && !starts_after
    }

    /// Whether `key` is below the range's upper bound (keys are visited in ascending order, so
    /// the first key for which this is false ends a scan).
    pub fn below_end(&self, key: &[u8]) -> bool {
        if self.single {
            return key <= &self.start[..];
        }
        self.end.as_ref().is_none_or(|e| key < &e[..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The partition prefix of `key`, as text.
    fn partition<'k>(ks: &Keyspace, key: &'k str) -> Option<&'k str> {
        ks.partition_of(key.as_bytes()).map(|p| std::str::from_utf8(p).expect("a text key"))
    }

    #[test]
    fn partitions_follow_kubernetes_resources() {
        let ks = Keyspace::new(&["/registry"], false);
        let p = |k| partition(&ks, k);
        assert_eq!(p("/registry/pods/default/a"), Some("/registry/pods/"));
        assert_eq!(p("/registry/leases/kube-node-lease/n1"), Some("/registry/leases/"));
        assert_eq!(p("/registry/example.com/widgets/ns/w"), Some("/registry/example.com/widgets/"));
        assert_eq!(p("/registry/pods"), None, "the bare resource key is not an object");
        assert_eq!(p("/registry/pods/"), None);
        assert_eq!(p("/registry/health"), None);
        assert_eq!(p("/registry/example.com/widgets"), None);
        assert_eq!(p("compact_rev_key"), None);
        assert_eq!(p("/other/pods/x"), None);
        let custom = Keyspace::new(&["/kube/"], false);
        assert_eq!(custom.partition_of(b"/kube/pods/x"), Some(&b"/kube/pods/"[..]));
    }

    #[test]
    fn each_storage_prefix_partitions_its_own_resources() {
        let ks = Keyspace::new(&["/registry", "/tenant-a/", "/t", "/t/inner", "/registry"], false);
        let p = |k| partition(&ks, k);
        assert_eq!(p("/registry/pods/ns/a"), Some("/registry/pods/"));
        assert_eq!(p("/tenant-a/pods/ns/a"), Some("/tenant-a/pods/"));
        assert_eq!(p("/tenant-a/example.com/widgets/ns/w"), Some("/tenant-a/example.com/widgets/"));
        assert_eq!(p("/tenant-b/pods/ns/a"), None, "an undeclared prefix: the default partition");
        assert_eq!(p("/tenant-ab/pods/ns/a"), None, "a prefix is a whole segment");
        // Nested prefixes: the inner one owns its keys, the outer one the rest.
        assert_eq!(p("/t/inner/pods/x"), Some("/t/inner/pods/"));
        assert_eq!(p("/t/pods/x"), Some("/t/pods/"));
        assert_eq!(ks.resource_prefix(b"/tenant-a/pods/"), Some(&b"/tenant-a/pods/"[..]));
        assert_eq!(ks.registries.len(), 4, "duplicates dropped: {:?}", ks.registries);
    }

    #[test]
    fn every_top_level_segment_partitions_its_resources_when_tenants_come_from_auth() {
        let ks = Keyspace::new(&["/registry", "/t/inner"], true);
        let p = |k| partition(&ks, k);
        assert_eq!(p("/registry/pods/ns/a"), Some("/registry/pods/"));
        assert_eq!(p("/tenant-c/pods/ns/a"), Some("/tenant-c/pods/"));
        assert_eq!(p("/tenant-c/example.com/widgets/ns/w"), Some("/tenant-c/example.com/widgets/"));
        assert_eq!(p("/t/inner/pods/x"), Some("/t/inner/pods/"), "a listed prefix wins");
        assert_eq!(p("/t/other/x"), Some("/t/other/"));
        assert_eq!(p("/tenant-c/pods/"), None, "the bare resource key is not an object");
        assert_eq!(p("/tenant-c/compact_rev_key"), None);
        assert_eq!(p("//pods/x"), None, "an empty segment");
        assert_eq!(p("compact_rev_key"), None);
        assert_eq!(p("/x"), None);
        assert_eq!(ks.resource_prefix(b"/tenant-c/pods/"), Some(&b"/tenant-c/pods/"[..]));
    }

    #[test]
    fn prefix_end_increments_the_last_byte_below_ff() {
        assert_eq!(prefix_end(b"/registry/pods/").unwrap(), Bytes::from_static(b"/registry/pods0"));
        assert_eq!(prefix_end(b"a\xff").unwrap(), Bytes::from_static(b"b"));
        assert_eq!(prefix_end(b"\xff\xff"), None);
    }

    #[test]
    fn ranges_meet_prefixes() {
        let r = KeyRange::from_request(b"/registry/", b"/registry0");
        assert!(r.meets_prefix(b"/registry/pods/"));
        let r = KeyRange::from_request(b"/registry/pods/", b"/registry/pods0");
        assert!(r.meets_prefix(b"/registry/pods/"));
        assert!(!r.meets_prefix(b"/registry/leases/"));
        let all = KeyRange::from_request(b"\0", b"\0");
        assert!(all.meets_prefix(b"/registry/pods/"));
        assert!(KeyRange::from_request(b"b", b"a").is_empty());
        assert!(
            KeyRange::single(Bytes::from_static(b"/registry/pods/x"))
                .meets_prefix(b"/registry/pods/")
        );
    }
}
