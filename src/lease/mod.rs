//! The lessor (etcd's `lease` package): leases, their TTLs and attached keys, and the expiry
//! queue.
//!
//! The lessor only keeps the books; a revoked or expired lease's keys are deleted by the store,
//! which removes the lease in the same step (see `Store::revoke_lease`).
//!
//! **Restart.** A member alone's grants and revocations are logged (by `etcdserver::submit`, in the
//! WAL's `_meta` stream) and snapshots list every lease with its TTL. A recovered lease gets its
//! full TTL again from the moment of recovery, as etcd does: remaining TTLs are not persisted, so a
//! restart can only extend a lease, never cut it short.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use hashbrown::{HashMap, HashSet};
use parking_lot::Mutex;
use tokio::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::metrics::Histogram;
use crate::mvcc::LeaseIndex;

/// etcd's largest TTL (`lease.MaxLeaseTTL`).
pub const MAX_TTL: i64 = 9_000_000_000;
/// etcd's smallest TTL with its default timing (1.5 election timeouts, rounded up to seconds).
pub const MIN_TTL: i64 = 2;
/// How long a renewal or revocation of a lease being revoked waits for that revocation.
pub const REVOCATION_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct Lease {
    /// The TTL granted (after rounding up to the minimum), in seconds.
    ttl: i64,
    /// When the lease expires unless renewed.
    deadline: Instant,
    /// Keys attached to the lease.
    keys: HashSet<Bytes>,
    /// Expired or revoked, its revocation under way: it still exists (so puts naming it are not
    /// refused, as in etcd until the revocation is applied) but can no longer be renewed.
    revoking: bool,
}

#[derive(Debug)]
struct Inner {
    leases: HashMap<i64, Lease>,
    /// Expiry queue: (deadline, id), earliest first. Renewals push a new entry and leave the
    /// old one, which is skipped when popped because it no longer matches the lease's deadline
    /// (no search through the heap, no scan of all leases per tick).
    queue: BinaryHeap<Reverse<(Instant, i64)>>,
    /// The next id to try for a grant without one.
    next_id: i64,
    /// Recovered keys whose lease is gone (see `LeaseIndex::attach`); the expiry loop deletes
    /// them.
    orphans: Vec<(i64, Bytes)>,
}

/// Every lease.
#[derive(Debug)]
pub struct Lessor {
    /// One lock for the books: grants, renewals and attach/detach are short and touch a single
    /// lease, and only writes that change a key's lease take it.
    inner: Mutex<Inner>,
    /// Grants, renewals and expiries, for `/metrics`.
    pub stats: LeaseStats,
}

/// What the lessor counts (etcd's `etcd_debugging_lease_*` and expired leases).
#[derive(Debug)]
pub struct LeaseStats {
    pub granted: AtomicU64,
    pub renewed: AtomicU64,
    /// Leases found past their deadline (each is then revoked).
    pub expired: AtomicU64,
    /// The TTL of every lease granted.
    pub ttls: Histogram,
}

/// The outcome of a renewal.
#[derive(Debug, PartialEq, Eq)]
pub enum Renewal {
    /// Renewed to this TTL.
    Renewed(i64),
    /// Past its deadline or being revoked: gone once its keys are deleted.
    Expiring,
}

/// What LeaseTimeToLive reports.
#[derive(Debug, PartialEq, Eq)]
pub struct TimeToLive {
    pub granted_ttl: i64,
    /// Whole seconds left (truncated, as etcd reports).
    pub remaining: i64,
    pub keys: Vec<Bytes>,
}

impl Lessor {
    /// A lessor whose generated ids start from `seed` (made unique per member and start time
    /// by the caller); ids are positive and never handed out twice by this process.
    pub fn new(seed: i64) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(Inner {
                leases: HashMap::new(),
                queue: BinaryHeap::new(),
                next_id: seed.max(1),
                orphans: Vec::new(),
            }),
            stats: LeaseStats {
                granted: AtomicU64::new(0),
                renewed: AtomicU64::new(0),
                expired: AtomicU64::new(0),
                ttls: crate::metrics::ttls(),
            },
        })
    }

    /// Grants a lease: `id == 0` picks a fresh id. Returns (id, effective TTL).
    pub fn grant(&self, id: i64, ttl: i64) -> Result<(i64, i64)> {
        if ttl > MAX_TTL {
            return Err(Error::LeaseTtlTooLarge);
        }
        let ttl = ttl.max(MIN_TTL);
        let mut g = self.inner.lock();
        let id = if id == 0 {
            while g.next_id <= 0 || g.leases.contains_key(&g.next_id) {
                g.next_id = g.next_id.wrapping_add(1).max(1);
            }
            g.next_id
        } else if g.leases.contains_key(&id) {
            return Err(Error::LeaseExists);
        } else {
            id
        };
        if id == g.next_id {
            g.next_id = g.next_id.wrapping_add(1).max(1);
        }
        let deadline = Instant::now() + Duration::from_secs(ttl as u64);
        g.leases.insert(id, Lease { ttl, deadline, keys: HashSet::new(), revoking: false });
        g.queue.push(Reverse((deadline, id)));
        drop(g);
        self.stats.granted.fetch_add(1, Ordering::Relaxed);
        self.stats.ttls.observe(ttl as f64);
        Ok((id, ttl))
    }

    /// An id no lease has, for a grant without one that is proposed to a cluster (the lease
    /// is created when the proposal is applied, on every member, with this id).
    pub fn fresh_id(&self) -> i64 {
        let mut g = self.inner.lock();
        while g.next_id <= 0 || g.leases.contains_key(&g.next_id) {
            g.next_id = g.next_id.wrapping_add(1).max(1);
        }
        let id = g.next_id;
        g.next_id = g.next_id.wrapping_add(1).max(1);
        id
    }

    /// This member became the cluster's leader: every lease gets its full TTL from now, as
    /// etcd's lessor `Promote` does, so no lease expires because of the election (a follower's
    /// deadlines were never kept up to date: renewals go to the leader).
    pub fn promote(&self) {
        let mut g = self.inner.lock();
        let now = Instant::now();
        for l in g.leases.values_mut() {
            l.deadline = now + Duration::from_secs(l.ttl as u64);
            l.revoking = false;
        }
        let fresh = g.leases.iter().map(|(&id, l)| Reverse((l.deadline, id))).collect();
        g.queue = fresh;
    }

    /// A lease whose revocation could not be proposed (no quorum for a moment): expired again
    /// after `after`, unless revoked or renewed meanwhile.
    pub fn retry_expiry(&self, id: i64, after: Duration) {
        let mut g = self.inner.lock();
        let Some(l) = g.leases.get_mut(&id) else { return };
        l.revoking = false;
        l.deadline = Instant::now() + after;
        let deadline = l.deadline;
        g.queue.push(Reverse((deadline, id)));
    }

    /// This member stopped leading: leases it had started to expire are only revoked if the
    /// new leader decides so.
    pub fn demote(&self) {
        for l in self.inner.lock().leases.values_mut() {
            l.revoking = false;
        }
    }

    /// Replaces every lease with `leases` (id, TTL), without keys (a snapshot installed into
    /// the store; the store then attaches its keys again).
    pub fn reset(&self, leases: &[(i64, i64)]) {
        let mut g = self.inner.lock();
        g.leases.clear();
        g.queue.clear();
        g.orphans.clear();
        let deadline = Instant::now() + Duration::from_secs(MAX_TTL as u64 / 1000);
        for &(id, ttl) in leases {
            let ttl = ttl.max(MIN_TTL);
            let expires =
                Instant::now().checked_add(Duration::from_secs(ttl as u64)).unwrap_or(deadline);
            g.leases.insert(
                id,
                Lease { ttl, deadline: expires, keys: HashSet::new(), revoking: false },
            );
            g.queue.push(Reverse((expires, id)));
        }
    }

    /// Renews a lease to its full TTL and returns the TTL. `LeaseNotFound` if it does not exist,
    /// `Renewal::Expiring` if it is past its deadline or being revoked: etcd then waits until
    /// the revocation has deleted the keys and answers "not found" (see [`Self::exists`]).
    pub fn renew(&self, id: i64) -> Result<Renewal> {
        let mut g = self.inner.lock();
        let now = Instant::now();
        let l = g.leases.get_mut(&id).ok_or(Error::LeaseNotFound)?;
        if l.revoking || l.deadline <= now {
            return Ok(Renewal::Expiring);
        }
        l.deadline = now + Duration::from_secs(l.ttl as u64);
        let (deadline, ttl) = (l.deadline, l.ttl);
        g.queue.push(Reverse((deadline, id)));
        // Renewals leave stale entries behind; rebuild before they outnumber the leases.
        if g.queue.len() > 2 * g.leases.len() + 1024 {
            let fresh = g.leases.iter().map(|(&id, l)| Reverse((l.deadline, id))).collect();
            g.queue = fresh;
        }
        drop(g);
        self.stats.renewed.fetch_add(1, Ordering::Relaxed);
        Ok(Renewal::Renewed(ttl))
    }

    /// Starts a client's revocation of a lease on a member alone (the store then revokes it):
    /// false if it is being revoked already (it expired), which the caller waits out and then
    /// answers "not found", as etcd answers a second revocation in its log.
    pub fn revoke_first(&self, id: i64) -> Result<bool> {
        let mut g = self.inner.lock();
        let l = g.leases.get_mut(&id).ok_or(Error::LeaseNotFound)?;
        if l.revoking {
            return Ok(false);
        }
        l.revoking = true;
        Ok(true)
    }

    /// Leases whose deadline passed by `now`, marked revoking (at most `max`); the caller has
    /// the store revoke them.
    pub fn expire(&self, now: Instant, max: usize) -> Vec<i64> {
        let mut g = self.inner.lock();
        let mut out = Vec::new();
        while out.len() < max {
            let Some(&Reverse((deadline, id))) = g.queue.peek() else { break };
            if deadline > now {
                break;
            }
            g.queue.pop();
            // A renewed lease left this entry behind; its current deadline is elsewhere.
            if let Some(l) = g.leases.get_mut(&id).filter(|l| l.deadline == deadline && !l.revoking)
            {
                l.revoking = true;
                out.push(id);
            }
        }
        self.stats.expired.fetch_add(out.len() as u64, Ordering::Relaxed);
        out
    }

    /// When the earliest lease expires, if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.inner.lock().queue.peek().map(|Reverse((d, _))| *d)
    }

    /// Keys attached to leases that were gone by the time they were attached, by lease.
    pub fn take_orphans(&self) -> Vec<(i64, Bytes)> {
        std::mem::take(&mut self.inner.lock().orphans)
    }

    /// Whether lease `id` still exists (revoking leases included).
    pub fn contains(&self, id: i64) -> bool {
        self.inner.lock().leases.contains_key(&id)
    }

    /// Waits (at most [`REVOCATION_WAIT`]) until lease `id` is gone: one being revoked, by
    /// whoever revokes it (a renewal or a second revocation is answered once its keys are gone,
    /// as etcd's renew waits for the revocation).
    pub async fn wait_gone(&self, id: i64) {
        let give_up = Instant::now() + REVOCATION_WAIT;
        while self.contains(id) && Instant::now() < give_up {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    pub fn time_to_live(&self, id: i64, with_keys: bool) -> Option<TimeToLive> {
        let g = self.inner.lock();
        let l = g.leases.get(&id)?;
        let left = l.deadline.saturating_duration_since(Instant::now());
        let mut keys: Vec<Bytes> =
            if with_keys { l.keys.iter().cloned().collect() } else { vec![] };
        keys.sort();
        Some(TimeToLive { granted_ttl: l.ttl, remaining: left.as_secs() as i64, keys })
    }

    /// Every lease id, soonest expiry first (the order etcd lists them in).
    pub fn leases(&self) -> Vec<i64> {
        let mut ids: Vec<(Instant, i64)> =
            self.inner.lock().leases.iter().map(|(&id, l)| (l.deadline, id)).collect();
        ids.sort();
        ids.into_iter().map(|(_, id)| id).collect()
    }

    /// Every lease with its granted TTL (for snapshots).
    pub fn snapshot(&self) -> Vec<(i64, i64)> {
        let mut v: Vec<(i64, i64)> =
            self.inner.lock().leases.iter().map(|(&id, l)| (id, l.ttl)).collect();
        v.sort_unstable();
        v
    }

    pub fn len(&self) -> usize {
        self.inner.lock().leases.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl LeaseIndex for Lessor {
    fn exists(&self, id: i64) -> bool {
        self.inner.lock().leases.contains_key(&id)
    }

    fn reserve(&self, id: i64, key: &[u8]) -> bool {
        let mut g = self.inner.lock();
        let Some(l) = g.leases.get_mut(&id) else { return false };
        // A copy, not the request's view into its decode buffer (which it would pin).
        if !l.keys.contains(key) {
            l.keys.insert(Bytes::copy_from_slice(key));
        }
        true
    }

    fn keys(&self, id: i64) -> Option<Vec<Bytes>> {
        self.inner.lock().leases.get(&id).map(|l| l.keys.iter().cloned().collect())
    }

    fn remove_if(
        &self,
        id: i64,
        decide: &mut dyn FnMut(&[Bytes]) -> bool,
    ) -> Option<(bool, Vec<Bytes>)> {
        let mut g = self.inner.lock();
        let keys: Vec<Bytes> = g.leases.get(&id)?.keys.iter().cloned().collect();
        let removed = decide(&keys);
        if removed {
            g.leases.remove(&id);
        }
        Some((removed, keys))
    }

    fn attach_recovered(&self, id: i64, keys: Vec<Bytes>) {
        if !self.exists(id) {
            self.inner.lock().orphans.extend(keys.into_iter().map(|k| (id, k)));
            return;
        }
        // The set is hashed before the lock is taken, so that leases attach in parallel.
        let set: HashSet<Bytes> = keys.into_iter().collect();
        let mut g = self.inner.lock();
        match g.leases.get_mut(&id) {
            Some(l) if l.keys.is_empty() => l.keys = set,
            Some(l) => l.keys.extend(set),
            None => g.orphans.extend(set.into_iter().map(|k| (id, k))),
        }
    }

    fn detach(&self, id: i64, key: &Bytes) {
        if let Some(l) = self.inner.lock().leases.get_mut(&id) {
            l.keys.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn grants_round_up_expire_in_order_and_renewals_postpone_expiry() {
        let l = Lessor::new(100);
        assert_eq!(l.grant(0, 1).unwrap(), (100, MIN_TTL), "TTL rounds up to the minimum");
        assert_eq!(l.grant(0, 10).unwrap().0, 101);
        assert_eq!(l.grant(101, 5).unwrap_err(), Error::LeaseExists);
        assert_eq!(l.grant(7, MAX_TTL + 1).unwrap_err(), Error::LeaseTtlTooLarge);
        assert_eq!(l.grant(7, 5).unwrap(), (7, 5));
        l.attach_recovered(7, vec![Bytes::from_static(b"k")]);
        tokio::time::advance(Duration::from_secs(3)).await;
        let now = Instant::now();
        assert_eq!(l.expire(now, 10), vec![100]);
        assert_eq!(l.renew(100).unwrap(), Renewal::Expiring, "expired, being revoked");
        assert_eq!(l.revoke_first(100), Ok(false), "its expiry revokes it");
        assert_eq!(l.remove_if(100, &mut |keys| keys.is_empty()), Some((true, vec![])));
        assert_eq!(l.renew(7).unwrap(), Renewal::Renewed(5));
        tokio::time::advance(Duration::from_secs(4)).await;
        assert!(l.expire(Instant::now(), 10).is_empty(), "renewed at 3 s, due at 8 s");
        assert_eq!(l.time_to_live(7, true).unwrap().keys, vec![Bytes::from_static(b"k")]);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(l.expire(Instant::now(), 10), vec![7]);
        assert!(l.reserve(7, b"late"), "a lease being revoked still takes keys");
        let mut seen = 0;
        let left = l.remove_if(7, &mut |keys| {
            seen = keys.len();
            false
        });
        assert_eq!((seen, left.map(|(removed, _)| removed)), (2, Some(false)), "not removed");
        assert_eq!(l.keys(7).map(|k| k.len()), Some(2));
        assert_eq!(
            l.remove_if(7, &mut |_| true).map(|(removed, k)| (removed, k.len())),
            Some((true, 2))
        );
        assert!(!l.reserve(7, b"after"), "gone: refused, and not attached");
        assert!(l.remove_if(7, &mut |_| true).is_none());
        assert_eq!(l.leases(), vec![101]);
        assert_eq!(l.renew(7).unwrap_err(), Error::LeaseNotFound);
    }

    /// Puts attaching new keys to a lease race its revocation through the store, on threads,
    /// with keys in several partitions: each put lands below the revocation's revision (and its
    /// key goes in that revision) or is refused, and no key of the lease is left.
    #[test]
    fn a_revocation_racing_puts_with_its_lease_takes_every_key_in_its_revision() {
        use crate::mvcc::{PutRequest, RangeRequest, Refused, Store, StoreConfig};
        let all = |store: &Store, revision: i64| {
            let r = RangeRequest {
                key: Bytes::from_static(b"\0"),
                range_end: Bytes::from_static(b"\0"),
                revision,
                ..Default::default()
            };
            store.range(&r).expect("range").kvs
        };
        for round in 0..40u64 {
            let store = Arc::new(Store::new(StoreConfig::default()));
            let l = Lessor::new(1);
            store.set_lease_index(l.clone());
            let (id, _) = l.grant(0, 60).unwrap();
            let writers: Vec<_> = (0..4)
                .map(|w| {
                    let store = store.clone();
                    std::thread::spawn(move || {
                        let mut acked = Vec::new();
                        for i in 0..100_000 {
                            let key = match i % 3 {
                                0 => format!("/plain/{w}-{i}"),
                                n => format!("/registry/r{n}/ns/{w}-{i}"),
                            };
                            let value = Bytes::from_static(b"v");
                            let put = PutRequest {
                                key: key.into(),
                                value,
                                lease: id,
                                ..Default::default()
                            };
                            match store.put(put, 32) {
                                Ok(a) => acked.push(a.response.revision),
                                Err(Refused::Error(Error::LeaseNotFound)) => return acked,
                                Err(e) => panic!("put: {e:?}"),
                            }
                        }
                        panic!("no put refused after the revocation");
                    })
                })
                .collect();
            std::thread::sleep(std::time::Duration::from_micros(100 * (round % 8)));
            let at = store.revoke_lease(id).expect("the lease exists").response;
            let mut acked: Vec<i64> =
                writers.into_iter().flat_map(|w| w.join().expect("writer")).collect();
            acked.sort();
            assert!(
                acked.iter().all(|&r| r < at),
                "round {round}: puts {acked:?}, revoked at {at}"
            );
            store.wait_visible_blocking(store.allocated_revision());
            let before = all(&store, at - 1);
            assert_eq!(before.len(), acked.len(), "round {round}: every acknowledged key");
            assert!(all(&store, at).is_empty(), "round {round}: every key went at {at}");
            assert!(!l.exists(id) && l.take_orphans().is_empty());
        }
    }
}
