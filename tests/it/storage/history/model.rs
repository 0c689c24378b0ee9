//! The model the history is checked against: etcd's MVCC store and lessor as the checker
//! sees them, the requests and their outcomes, and one step of the model per operation.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::api::watch::prefix_end;
use crate::support::*;

pub(super) const PREFIX: &str = "/registry/pods/ns/";

/// What the model keeps of a key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Val {
    pub(super) value: Vec<u8>,
    pub(super) create: i64,
    pub(super) modr: i64,
    pub(super) version: i64,
    pub(super) lease: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct State {
    pub(super) kvs: BTreeMap<Vec<u8>, Val>,
    pub(super) rev: i64,
    pub(super) compacted: i64,
    /// Leases granted and not yet revoked or expired.
    pub(super) leases: BTreeSet<i64>,
}

impl State {
    pub(super) fn hash64(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.hash(&mut h);
        h.finish()
    }

    pub(super) fn kv(&self, key: &[u8]) -> Option<Kv> {
        self.kvs.get(key).map(|v| Kv {
            key: key.to_vec(),
            value: v.value.clone(),
            create_revision: v.create,
            mod_revision: v.modr,
            version: v.version,
            lease: v.lease,
        })
    }

    /// A page of `[start, end of PREFIX)`: (kvs, count, more).
    pub(super) fn page(&self, start: &[u8], limit: i64) -> (Vec<Kv>, i64, bool) {
        let end = prefix_end(PREFIX.as_bytes());
        let all: Vec<Kv> = self
            .kvs
            .range(start.to_vec()..end)
            .map(|(k, _)| self.kv(k).expect("listed key"))
            .collect();
        let count = all.len() as i64;
        let kvs: Vec<Kv> = all.into_iter().take(limit as usize).collect();
        let more = (kvs.len() as i64) < count;
        (kvs, count, more)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Req {
    /// Txn: create_revision == 0 ? put : range.
    Create {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    /// Txn: mod_revision == seen ? put : range.
    Update {
        key: Vec<u8>,
        seen: i64,
        value: Vec<u8>,
    },
    /// Txn: mod_revision == seen ? delete : range.
    Delete {
        key: Vec<u8>,
        seen: i64,
    },
    /// A linearizable Range of one key.
    Get {
        key: Vec<u8>,
    },
    /// A serializable Range of one key (the member's own applied state): not part of the
    /// linearizability search, checked after it (see [`super::checker::check_serializable_reads`]).
    SerialGet {
        key: Vec<u8>,
    },
    /// A Range from `start` to the end of the prefix; `rev` 0 is the current revision.
    List {
        start: Vec<u8>,
        rev: i64,
        limit: i64,
    },
    Compact {
        rev: i64,
    },
    /// Txn: create_revision == 0 ? put with the lease : range (as the apiserver creates an
    /// Event or a Lease object with a TTL).
    CreateWithLease {
        key: Vec<u8>,
        value: Vec<u8>,
        lease: i64,
    },
    /// LeaseGrant with the client's choice of id.
    Grant {
        id: i64,
    },
    /// LeaseRevoke: the lease and its keys go, the keys in one revision.
    Revoke {
        id: i64,
    },
    /// Not a request: the server expiring a lease, which it may do any time from the lease's
    /// TTL after its grant on (or not within the run). Added to the history for every grant,
    /// with an unknown outcome.
    Expire {
        id: i64,
    },
    /// Txn: every key's create_revision == 0 ? put them all : range each. Kubernetes writes
    /// one key per txn; this is here so watches see revisions with several events.
    CreateAll {
        keys: Vec<Vec<u8>>,
        value: Vec<u8>,
    },
}

impl Req {
    pub(super) fn is_write(&self) -> bool {
        matches!(
            self,
            Req::Create { .. }
                | Req::Update { .. }
                | Req::Delete { .. }
                | Req::Compact { .. }
                | Req::CreateAll { .. }
                | Req::CreateWithLease { .. }
                | Req::Grant { .. }
                | Req::Revoke { .. }
                | Req::Expire { .. }
        )
    }

    /// The keys a txn writes, in its operations' order.
    pub(super) fn keys(&self) -> Vec<Vec<u8>> {
        match self {
            Req::Create { key, .. }
            | Req::Update { key, .. }
            | Req::Delete { key, .. }
            | Req::CreateWithLease { key, .. } => vec![key.clone()],
            Req::CreateAll { keys, .. } => keys.clone(),
            _ => Vec::new(),
        }
    }
}

/// The fields of an answer the model predicts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Resp {
    pub(super) rev: i64,
    pub(super) succeeded: bool,
    pub(super) kvs: Vec<Kv>,
    pub(super) count: i64,
    pub(super) more: bool,
    pub(super) deleted: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ErrKind {
    Compacted,
    FutureRev,
    LeaseNotFound,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Out {
    Ok(Resp),
    Err(ErrKind),
    /// No answer (a timeout or a transport error): a write may or may not have taken effect.
    Unknown,
    /// Refused because the WAL could not be written (a full disk): the write never takes
    /// effect. Such operations are left out of the search; their values are unique, so one
    /// that took effect anyway shows as a value no operation wrote.
    Refused,
}

/// One recorded operation; times are nanoseconds since the run began.
#[derive(Clone, Debug)]
pub(super) struct Op {
    pub(super) client: usize,
    pub(super) call: u64,
    /// `u64::MAX` when the outcome is unknown: the operation may take effect any time after
    /// its call, or never.
    pub(super) ret: u64,
    pub(super) req: Req,
    pub(super) out: Out,
}

/// What etcd does with `req` in state `s`: the next state and the answer.
pub(super) fn apply(s: &State, req: &Req) -> (State, Result<Resp, ErrKind>) {
    let mut n = s.clone();
    let failed = |key: &[u8]| {
        let kvs: Vec<Kv> = s.kv(key).into_iter().collect();
        Resp { rev: s.rev, count: kvs.len() as i64, kvs, ..Default::default() }
    };
    let put_leased = |n: &mut State, key: &[u8], value: &[u8], lease: i64| {
        n.rev += 1;
        let prev = s.kvs.get(key);
        n.kvs.insert(
            key.to_vec(),
            Val {
                value: value.to_vec(),
                create: prev.map_or(n.rev, |p| p.create),
                modr: n.rev,
                version: prev.map_or(1, |p| p.version + 1),
                lease,
            },
        );
        Resp { rev: n.rev, succeeded: true, ..Default::default() }
    };
    let put = |n: &mut State, key: &[u8], value: &[u8]| put_leased(n, key, value, 0);
    // A lease's end: it goes, and its keys with it, in one revision (none if it had no keys).
    let end_lease = |n: &mut State, id: i64| {
        n.leases.remove(&id);
        let before = n.kvs.len();
        n.kvs.retain(|_, v| v.lease != id);
        if n.kvs.len() < before {
            n.rev += 1;
        }
        Resp { rev: n.rev, ..Default::default() }
    };
    let r = match req {
        Req::Create { key, value } => {
            if s.kvs.contains_key(key) {
                Ok(failed(key))
            } else {
                Ok(put(&mut n, key, value))
            }
        }
        // The lease is checked only when the put is the branch taken, as etcd does.
        Req::CreateWithLease { key, value, lease } => {
            if s.kvs.contains_key(key) {
                Ok(failed(key))
            } else if !s.leases.contains(lease) {
                Err(ErrKind::LeaseNotFound)
            } else {
                Ok(put_leased(&mut n, key, value, *lease))
            }
        }
        // etcd reads a grant's header revision as it applies it: the revision it took effect at.
        Req::Grant { id } => {
            n.leases.insert(*id);
            Ok(Resp { rev: s.rev, ..Default::default() })
        }
        Req::Revoke { id } | Req::Expire { id } => {
            if s.leases.contains(id) {
                Ok(end_lease(&mut n, *id))
            } else {
                Err(ErrKind::LeaseNotFound)
            }
        }
        Req::Update { key, seen, value } => {
            if s.kvs.get(key).is_some_and(|v| v.modr == *seen) {
                Ok(put(&mut n, key, value))
            } else {
                Ok(failed(key))
            }
        }
        Req::Delete { key, seen } => {
            if s.kvs.get(key).is_some_and(|v| v.modr == *seen) {
                n.rev += 1;
                n.kvs.remove(key);
                Ok(Resp { rev: n.rev, succeeded: true, deleted: 1, ..Default::default() })
            } else {
                Ok(failed(key))
            }
        }
        Req::Get { key } | Req::SerialGet { key } => {
            let kvs: Vec<Kv> = s.kv(key).into_iter().collect();
            Ok(Resp { rev: s.rev, count: kvs.len() as i64, kvs, ..Default::default() })
        }
        Req::List { start, rev, limit } => {
            if *rev > s.rev {
                Err(ErrKind::FutureRev)
            } else if *rev > 0 && *rev < s.compacted {
                Err(ErrKind::Compacted)
            } else if *rev > 0 {
                // The data of a pinned read is checked against the state at `rev`, outside
                // the search (see check_pinned_reads); only the header is the current state's.
                Ok(Resp { rev: s.rev, ..Default::default() })
            } else {
                let (kvs, count, more) = s.page(start, *limit);
                Ok(Resp { rev: s.rev, kvs, count, more, ..Default::default() })
            }
        }
        Req::CreateAll { keys, value } => {
            if keys.iter().all(|k| !s.kvs.contains_key(k)) {
                n.rev += 1;
                for k in keys {
                    let v = Val {
                        value: value.clone(),
                        create: n.rev,
                        modr: n.rev,
                        version: 1,
                        lease: 0,
                    };
                    n.kvs.insert(k.clone(), v);
                }
                Ok(Resp { rev: n.rev, succeeded: true, ..Default::default() })
            } else {
                let kvs: Vec<Kv> = keys.iter().filter_map(|k| s.kv(k)).collect();
                Ok(Resp { rev: s.rev, count: kvs.len() as i64, kvs, ..Default::default() })
            }
        }
        Req::Compact { rev } => {
            if *rev <= s.compacted {
                Err(ErrKind::Compacted)
            } else if *rev > s.rev {
                Err(ErrKind::FutureRev)
            } else {
                n.compacted = *rev;
                Ok(Resp { rev: s.rev, ..Default::default() })
            }
        }
    };
    (n, r)
}

/// Can `op` take effect in state `s`? The state after it if so.
pub(super) fn step(s: &State, op: &Op) -> Option<State> {
    let (n, want) = apply(s, &op.req);
    let ok = match (&op.out, &want) {
        (Out::Unknown, _) => true,
        (Out::Err(got), Err(w)) => got == w,
        (Out::Ok(got), Ok(w)) => match &op.req {
            Req::List { rev, .. } if *rev > 0 => got.rev == w.rev,
            // etcd reads the header revision of a compaction after applying it, so writes that
            // land meanwhile may be in it (etcdserver's Compact); it can never be older. A
            // revocation's is read as it is applied (its `newHeader`): exactly the revision
            // its keys went at, or the current one when it had none.
            Req::Compact { .. } => got.rev >= w.rev,
            _ => got == w,
        },
        _ => false,
    };
    ok.then_some(n)
}
