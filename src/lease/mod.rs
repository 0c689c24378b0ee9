//! The lessor (etcd's `lease` package): leases, their TTLs and attached keys, and the expiry
//! queue.
//!
//! The lessor only keeps the books; deleting a revoked or expired lease's keys is a write like
//! any other, done through the store in one revision (see `Store::revoke`), by the caller.
//!
//! **Restart.** Grants and revocations are logged (by the Lease service, in the WAL's `_meta`
//! stream) and snapshots list every lease with its TTL. A recovered lease gets its full TTL
//! again from the moment of recovery, as etcd does: remaining TTLs are not persisted, so a
//! restart can only extend a lease, never cut it short.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use bytes::Bytes;
use hashbrown::{HashMap, HashSet};
use parking_lot::Mutex;
use tokio::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::mvcc::LeaseIndex;

/// etcd's largest TTL (`lease.MaxLeaseTTL`).
pub const MAX_TTL: i64 = 9_000_000_000;
/// etcd's smallest TTL with its default timing (1.5 election timeouts, rounded up to seconds).
pub const MIN_TTL: i64 = 2;

#[derive(Debug)]
struct Lease {
    /// The TTL granted (after rounding up to the minimum), in seconds.
    ttl: i64,
    /// When the lease expires unless renewed.
    deadline: Instant,
    /// Keys attached to the lease.
    keys: HashSet<Bytes>,
    /// Expired or revoked, its keys being deleted: it still exists (so puts naming it are not
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
    /// Keys attached to a lease that was already being removed (a put that checked the lease
    /// just before it went); the expiry loop deletes them too.
    orphans: Vec<(i64, Bytes)>,
}

/// Every lease.
#[derive(Debug)]
pub struct Lessor {
    /// One lock for the books: grants, renewals and attach/detach are short and touch a single
    /// lease, and only writes that change a key's lease take it.
    inner: Mutex<Inner>,
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
        Ok(Renewal::Renewed(ttl))
    }

    /// Starts revoking a lease: returns the keys attached to it, to be deleted by the caller,
    /// who then calls [`finish`](Self::finish).
    pub fn revoke(&self, id: i64) -> Result<Vec<Bytes>> {
        let mut g = self.inner.lock();
        let l = g.leases.get_mut(&id).ok_or(Error::LeaseNotFound)?;
        l.revoking = true;
        Ok(l.keys.iter().cloned().collect())
    }

    /// [`revoke`](Self::revoke) for a client's LeaseRevoke on a member alone: `Ok(None)` if
    /// the lease is being revoked already (it expired), which the caller waits out and then
    /// answers "not found", as etcd answers a second revocation in its log.
    pub fn revoke_first(&self, id: i64) -> Result<Option<Vec<Bytes>>> {
        let mut g = self.inner.lock();
        let l = g.leases.get_mut(&id).ok_or(Error::LeaseNotFound)?;
        if l.revoking {
            return Ok(None);
        }
        l.revoking = true;
        Ok(Some(l.keys.iter().cloned().collect()))
    }

    /// Removes a revoked lease once its keys were deleted; returns keys attached to it since
    /// (they must go too).
    pub fn finish(&self, id: i64) -> Vec<Bytes> {
        let mut g = self.inner.lock();
        g.leases.remove(&id).map(|l| l.keys.into_iter().collect()).unwrap_or_default()
    }

    /// Leases whose deadline passed by `now`, marked revoking, with their keys (at most `max`).
    /// The caller deletes the keys and calls [`finish`](Self::finish).
    pub fn expire(&self, now: Instant, max: usize) -> Vec<(i64, Vec<Bytes>)> {
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
                out.push((id, l.keys.iter().cloned().collect()));
            }
        }
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

    fn attach(&self, id: i64, key: &Bytes) {
        let mut g = self.inner.lock();
        match g.leases.get_mut(&id) {
            Some(l) => {
                l.keys.insert(key.clone());
            }
            None => g.orphans.push((id, key.clone())),
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
        l.attach(7, &Bytes::from_static(b"k"));
        tokio::time::advance(Duration::from_secs(3)).await;
        let now = Instant::now();
        assert_eq!(l.expire(now, 10), vec![(100, vec![])]);
        assert_eq!(l.renew(100).unwrap(), Renewal::Expiring, "expired, keys being deleted");
        assert!(l.finish(100).is_empty());
        assert_eq!(l.renew(7).unwrap(), Renewal::Renewed(5));
        tokio::time::advance(Duration::from_secs(4)).await;
        assert!(l.expire(Instant::now(), 10).is_empty(), "renewed at 3 s, due at 8 s");
        assert_eq!(l.time_to_live(7, true).unwrap().keys, vec![Bytes::from_static(b"k")]);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(l.expire(Instant::now(), 10), vec![(7, vec![Bytes::from_static(b"k")])]);
        l.attach(7, &Bytes::from_static(b"late"));
        assert_eq!(l.finish(7).len(), 2, "keys attached while revoking are handed back too");
        assert_eq!(l.leases(), vec![101]);
        assert_eq!(l.renew(7).unwrap_err(), Error::LeaseNotFound);
    }
}
