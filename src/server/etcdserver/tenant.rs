//! Hosted control planes sharing the store (`--tenant`): each tenant is one kube-apiserver's
//! `--etcd-prefix`, whose resources get partitions of their own (the store's keyspace holds
//! the prefix beside `--registry-prefix`'s), a space quota of its own, and figures of its own
//! on `/metrics`. etcd has no such notion: its quota is the whole store's, so one tenant that
//! fills it stops every tenant's writes.
//!
//! A tenant over its quota gets etcd's NOSPACE error ("etcdserver: mvcc: database space
//! exceeded") for its writes that add data, and no alarm is raised: the others write on, and
//! the tenant writes again once compaction brought it under its quota. The check runs where
//! the request enters, before it is applied or proposed, as etcd's quota check runs before
//! its proposal; a member's own `--tenant` flags decide it, so nothing of it enters the log.
//!
//! With `--tenants-from-auth` tenants also come and go with the auth state, which every member
//! holds alike (replicated in a cluster, persisted on a member alone): a user that owns one
//! prefix and nothing else makes it a tenant (`AuthStore::sole_prefixes`). The list is derived
//! again, off the write path, on the first request after a change of users or roles.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;

use bytes::Bytes;

use crate::auth::{AuthInfo, AuthStore};
use crate::config::TenantSpec;
use crate::error::{Error, Result};
use crate::mvcc::Store;
use crate::proto::etcdserverpb as pb;
use crate::server::etcdserver::alarm;

/// kube-apiserver's compactor coordinates through this key, outside its `--etcd-prefix`: on a
/// shared store every kube-apiserver would share it, and a tenant's user may not touch it. A
/// tenant's user sees a key of its own there instead ([`Tenant::own_compact_rev_key`]).
pub const COMPACT_REV_KEY: &[u8] = b"compact_rev_key";

/// One tenant: its prefix, its quota and its counters.
#[derive(Debug)]
pub struct Tenant {
    /// The prefix without its slashes (`tenant-a`): the `tenant` label on `/metrics`, one per
    /// tenant, so the labels' number is bounded by the flags and the auth state's users.
    pub name: String,
    /// The prefix with a trailing slash (`/tenant-a/`): a key is the tenant's when it starts
    /// with it (and with no longer tenant's prefix).
    pub prefix: Bytes,
    /// Bytes the tenant's partitions may hold; `None`: no quota.
    pub quota: Option<u64>,
    /// Declared by `--tenant` (else derived from the auth state).
    pub declared: bool,
    /// Ranges and writes this member served for it (counted where they enter, relaxed: each
    /// is only a figure for `/metrics`).
    pub reads: AtomicU64,
    pub writes: AtomicU64,
}

impl Tenant {
    /// `prefix` with its trailing slash.
    fn new(prefix: Bytes, quota: u64, declared: bool) -> Self {
        let name = String::from_utf8_lossy(&prefix).trim_matches('/').to_string();
        Self {
            name,
            prefix,
            quota: (quota > 0).then_some(quota),
            declared,
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        }
    }

    /// The tenant's own `compact_rev_key`: under its prefix, outside its resources.
    pub fn own_compact_rev_key(&self) -> Bytes {
        let mut k = self.prefix.to_vec();
        k.extend_from_slice(COMPACT_REV_KEY);
        k.into()
    }

    /// Points a txn's compares and operations on `compact_rev_key` at the tenant's own.
    pub fn own_txn(&self, t: &mut pb::TxnRequest) {
        let own = self.own_compact_rev_key();
        let mine = |k: &mut Bytes| {
            if k[..] == *COMPACT_REV_KEY {
                *k = own.clone();
            }
        };
        for c in &mut t.compare {
            if c.range_end.is_empty() {
                mine(&mut c.key);
            }
        }
        for op in t.success.iter_mut().chain(t.failure.iter_mut()) {
            match &mut op.request {
                Some(pb::request_op::Request::RequestRange(r)) if r.range_end.is_empty() => {
                    mine(&mut r.key)
                }
                Some(pb::request_op::Request::RequestPut(p)) => mine(&mut p.key),
                Some(pb::request_op::Request::RequestDeleteRange(d)) if d.range_end.is_empty() => {
                    mine(&mut d.key)
                }
                Some(pb::request_op::Request::RequestTxn(t)) => self.own_txn(t),
                _ => {}
            }
        }
    }

    /// Shows the tenant's own `compact_rev_key` under its shared name in a txn's answer.
    pub fn shown_txn(&self, r: &mut pb::TxnResponse) {
        let own = self.own_compact_rev_key();
        for op in &mut r.responses {
            match &mut op.response {
                Some(pb::response_op::Response::ResponseRange(r)) => {
                    for kv in r.kvs.iter_mut().filter(|kv| kv.key == own) {
                        kv.key = Bytes::from_static(COMPACT_REV_KEY);
                    }
                }
                Some(pb::response_op::Response::ResponseTxn(t)) => self.shown_txn(t),
                _ => {}
            }
        }
    }
}

/// Whether a txn names `compact_rev_key` anywhere (what makes it worth finding its sender's
/// tenant).
pub fn names_compact_rev_key(t: &pb::TxnRequest) -> bool {
    let is = |k: &[u8]| k == COMPACT_REV_KEY;
    t.compare.iter().any(|c| is(&c.key))
        || t.success.iter().chain(&t.failure).any(|op| match &op.request {
            Some(pb::request_op::Request::RequestRange(r)) => is(&r.key),
            Some(pb::request_op::Request::RequestPut(p)) => is(&p.key),
            Some(pb::request_op::Request::RequestDeleteRange(d)) => is(&d.key),
            Some(pb::request_op::Request::RequestTxn(t)) => names_compact_rev_key(t),
            None => false,
        })
}

/// The tenants of this member: `--tenant`'s, and with `--tenants-from-auth` those the auth
/// state makes. Requests ask it through the auth store they were checked against.
#[derive(Debug, Default)]
pub struct Tenants {
    /// `--tenant`'s alone, the list in force when tenants do not come from auth: the hot
    /// path then reads it with no lock.
    fixed: Arc<TenantList>,
    from_auth: Option<FromAuth>,
}

/// Tenants derived from the auth state.
#[derive(Debug)]
struct FromAuth {
    /// The quota of a tenant no `--tenant` declares (`--tenant-quota-backend-bytes`).
    quota: u64,
    /// The list in force, and the `AuthStore::changes` it was derived at: read by every
    /// request that asks about tenants, written by the first after a change of users or
    /// roles (rare), so a lock that readers share.
    current: RwLock<(u64, Arc<TenantList>)>,
}

impl Tenants {
    /// `from_auth`: `--tenants-from-auth`'s quota for the tenants it derives, if set.
    pub fn new(specs: &[TenantSpec], from_auth: Option<u64>) -> Self {
        let fixed = Arc::new(TenantList::new(
            specs
                .iter()
                .map(|s| {
                    Arc::new(Tenant::new(
                        Bytes::from(format!("{}/", s.prefix)),
                        s.quota_bytes,
                        true,
                    ))
                })
                .collect(),
        ));
        let from_auth = from_auth
            .map(|quota| FromAuth { quota, current: RwLock::new((u64::MAX, fixed.clone())) });
        Self { fixed, from_auth }
    }

    /// The tenants in force now (for `/metrics`).
    pub fn list(&self, auth: &AuthStore) -> Arc<TenantList> {
        match &self.from_auth {
            None => self.fixed.clone(),
            Some(d) => self.current(d, auth),
        }
    }

    /// Runs `f` on the tenants in force.
    fn with<R>(&self, auth: &AuthStore, f: impl FnOnce(&TenantList) -> R) -> R {
        match &self.from_auth {
            None => f(&self.fixed),
            Some(d) => f(&self.current(d, auth)),
        }
    }

    /// The tenants derived from the auth state, derived again first if it changed since.
    fn current(&self, d: &FromAuth, auth: &AuthStore) -> Arc<TenantList> {
        let changes = auth.changes();
        let list = {
            let cur = d.current.read();
            (cur.0 == changes).then(|| cur.1.clone())
        };
        list.unwrap_or_else(|| {
            let mut cur = d.current.write();
            if cur.0 != changes {
                // Tenants that stay keep their counters.
                let keep = |prefix: &[u8], quota: u64, declared: bool| {
                    cur.1
                        .list
                        .iter()
                        .find(|t| t.prefix[..] == *prefix && t.declared == declared)
                        .filter(|t| t.quota == (quota > 0).then_some(quota))
                        .cloned()
                        .unwrap_or_else(|| {
                            Arc::new(Tenant::new(Bytes::copy_from_slice(prefix), quota, declared))
                        })
                };
                let mut list: Vec<Arc<Tenant>> = self
                    .fixed
                    .list
                    .iter()
                    .map(|t| keep(&t.prefix, t.quota.unwrap_or(0), true))
                    .collect();
                for prefix in auth.sole_prefixes() {
                    if !self.fixed.list.iter().any(|t| t.prefix[..] == prefix[..]) {
                        list.push(keep(&prefix, d.quota, false));
                    }
                }
                *cur = (changes, Arc::new(TenantList::new(list)));
            }
            cur.1.clone()
        })
    }

    /// See [`TenantList::owned_by`].
    pub fn owned_by(&self, auth: &AuthStore, who: Option<&AuthInfo>) -> Option<Arc<Tenant>> {
        who?;
        self.with(auth, |l| l.owned_by(auth, who).cloned())
    }

    /// See [`TenantList::read`].
    pub fn read(&self, auth: &AuthStore, key: &[u8]) {
        self.with(auth, |l| l.read(key));
    }

    /// See [`TenantList::wrote`].
    pub fn wrote(&self, auth: &AuthStore, key: &[u8]) {
        self.with(auth, |l| l.wrote(key));
    }

    /// See [`TenantList::check_put`].
    pub fn check_put(&self, auth: &AuthStore, store: &Store, req: &pb::PutRequest) -> Result<()> {
        self.with(auth, |l| l.check_put(store, req))
    }

    /// See [`TenantList::check_txn`].
    pub fn check_txn(&self, auth: &AuthStore, store: &Store, req: &pb::TxnRequest) -> Result<()> {
        self.with(auth, |l| l.check_txn(store, req))
    }
}

/// The tenants in force at one moment, ordered by prefix.
#[derive(Debug, Default)]
pub struct TenantList {
    list: Vec<Arc<Tenant>>,
}

impl TenantList {
    fn new(mut list: Vec<Arc<Tenant>>) -> Self {
        list.sort_by(|a, b| a.prefix.cmp(&b.prefix));
        Self { list }
    }

    /// Every tenant, ordered by prefix.
    pub fn iter(&self) -> impl Iterator<Item = &Tenant> {
        self.list.iter().map(|t| &**t)
    }

    /// The tenant `key` belongs to: the one with the longest prefix of it.
    pub fn of(&self, key: &[u8]) -> Option<&Tenant> {
        if self.list.is_empty() {
            return None;
        }
        // Prefixes of `key` sort at or before it; of nested prefixes the longer sorts later.
        let end = self.list.partition_point(|t| t.prefix[..] <= *key);
        self.list[..end].iter().rev().find(|t| key.starts_with(&t.prefix)).map(|t| &**t)
    }

    /// The tenant whose prefix `who` owns and nothing else (see `AuthStore::owns_only`): the
    /// user of that tenant's kube-apiserver. `None` while auth is disabled.
    pub fn owned_by(&self, auth: &AuthStore, who: Option<&AuthInfo>) -> Option<&Arc<Tenant>> {
        if self.list.is_empty() || who.is_none() {
            return None;
        }
        self.list.iter().find(|t| {
            let end = crate::keyspace::prefix_end(&t.prefix).unwrap_or_default();
            auth.owns_only(who, &t.prefix, &end)
        })
    }

    /// Counts a range (or watch-free read) of `key` as its tenant's.
    pub fn read(&self, key: &[u8]) {
        if let Some(t) = self.of(key) {
            t.reads.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a write to `key` as its tenant's.
    pub fn wrote(&self, key: &[u8]) {
        if let Some(t) = self.of(key) {
            t.writes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Bytes the tenant's partitions hold: those under its prefix that no longer tenant's
    /// prefix owns.
    pub fn bytes(&self, store: &Store, tenant: &Tenant) -> usize {
        store.bytes_under(&tenant.prefix, |partition| {
            self.of(partition).is_some_and(|t| std::ptr::eq(t, tenant))
        })
    }

    /// Refuses a put that would take its tenant past its quota.
    pub fn check_put(&self, store: &Store, req: &pb::PutRequest) -> Result<()> {
        self.check(store, &mut [(&req.key[..], alarm::put_cost(req))].into_iter())
    }

    /// Refuses a txn whose puts would take a tenant past its quota (each branch on its own,
    /// as etcd costs the costlier one).
    pub fn check_txn(&self, store: &Store, req: &pb::TxnRequest) -> Result<()> {
        if self.list.iter().all(|t| t.quota.is_none()) {
            return Ok(());
        }
        for branch in [&req.success, &req.failure] {
            let mut puts = Vec::new();
            branch_puts(branch, &mut puts);
            self.check(store, &mut puts.into_iter())?;
        }
        Ok(())
    }

    /// Refuses writes of `(key, cost)` that would take a tenant past its quota.
    fn check(&self, store: &Store, puts: &mut dyn Iterator<Item = (&[u8], usize)>) -> Result<()> {
        // A few puts per request: a small list of (tenant, cost) rather than a map.
        let mut costs: Vec<(&Tenant, usize)> = Vec::new();
        for (key, cost) in puts {
            let Some(t) = self.of(key).filter(|t| t.quota.is_some()) else { continue };
            match costs.iter_mut().find(|(c, _)| std::ptr::eq(*c, t)) {
                Some((_, sum)) => *sum += cost,
                None => costs.push((t, cost)),
            }
        }
        for (t, cost) in costs {
            let quota = t.quota.expect("filtered") as usize;
            if self.bytes(store, t) + cost >= quota {
                return Err(Error::NoSpace);
            }
        }
        Ok(())
    }
}

/// The puts of a txn branch, nested txns' branches included, as (key, cost).
fn branch_puts<'r>(ops: &'r [pb::RequestOp], out: &mut Vec<(&'r [u8], usize)>) {
    for op in ops {
        match &op.request {
            Some(pb::request_op::Request::RequestPut(p)) => out.push((&p.key, alarm::put_cost(p))),
            Some(pb::request_op::Request::RequestTxn(t)) => {
                branch_puts(&t.success, out);
                branch_puts(&t.failure, out);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenants(prefixes: &[&str]) -> Arc<TenantList> {
        let specs: Vec<TenantSpec> =
            prefixes.iter().map(|p| TenantSpec { prefix: p.to_string(), quota_bytes: 0 }).collect();
        Tenants::new(&specs, None).fixed
    }

    #[test]
    fn a_key_belongs_to_the_longest_tenant_prefix_of_it() {
        let t = tenants(&["/b", "/a", "/a/inner", "/a-z"]);
        let of = |k: &str| t.of(k.as_bytes()).map(|t| t.name.as_str());
        assert_eq!(of("/a/pods/x"), Some("a"));
        assert_eq!(of("/a/inner/pods/x"), Some("a/inner"));
        assert_eq!(of("/a/innerx/pods"), Some("a"));
        assert_eq!(of("/a-z/pods/x"), Some("a-z"));
        assert_eq!(of("/b/leases/x"), Some("b"));
        assert_eq!(of("/a"), None);
        assert_eq!(of("/ab/pods"), None);
        assert_eq!(of("/c/pods"), None);
        assert_eq!(of(""), None);
        assert!(tenants(&[]).of(b"/a/pods/x").is_none());
    }
}
