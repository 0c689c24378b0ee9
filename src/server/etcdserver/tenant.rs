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

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::config::TenantSpec;
use crate::error::{Error, Result};
use crate::mvcc::Store;
use crate::proto::etcdserverpb as pb;
use crate::server::etcdserver::alarm;

/// One tenant: its prefix, its quota and its counters.
#[derive(Debug)]
pub struct Tenant {
    /// The prefix without its leading slash (`tenant-a`): the `tenant` label on `/metrics`,
    /// one per declared tenant, so the labels' number is bounded by the flags.
    pub name: String,
    /// The prefix with a trailing slash (`/tenant-a/`): a key is the tenant's when it starts
    /// with it (and with no longer tenant's prefix).
    pub prefix: Bytes,
    /// Bytes the tenant's partitions may hold; `None`: no quota.
    pub quota: Option<u64>,
    /// Ranges and writes this member served for it (counted where they enter, relaxed: each
    /// is only a figure for `/metrics`).
    pub reads: AtomicU64,
    pub writes: AtomicU64,
}

/// Every tenant of this member, ordered by prefix.
#[derive(Debug, Default)]
pub struct Tenants {
    list: Vec<Tenant>,
}

impl Tenants {
    pub fn new(specs: &[TenantSpec]) -> Self {
        let mut list: Vec<Tenant> = specs
            .iter()
            .map(|s| Tenant {
                name: s.prefix.trim_start_matches('/').to_string(),
                prefix: Bytes::from(format!("{}/", s.prefix)),
                quota: (s.quota_bytes > 0).then_some(s.quota_bytes),
                reads: AtomicU64::new(0),
                writes: AtomicU64::new(0),
            })
            .collect();
        list.sort_by(|a, b| a.prefix.cmp(&b.prefix));
        Self { list }
    }

    /// Every tenant, ordered by prefix.
    pub fn iter(&self) -> impl Iterator<Item = &Tenant> {
        self.list.iter()
    }

    /// The tenant `key` belongs to: the one with the longest prefix of it.
    pub fn of(&self, key: &[u8]) -> Option<&Tenant> {
        if self.list.is_empty() {
            return None;
        }
        // Prefixes of `key` sort at or before it; of nested prefixes the longer sorts later.
        let end = self.list.partition_point(|t| t.prefix[..] <= *key);
        self.list[..end].iter().rev().find(|t| key.starts_with(&t.prefix))
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

    fn tenants(prefixes: &[&str]) -> Tenants {
        let specs: Vec<TenantSpec> =
            prefixes.iter().map(|p| TenantSpec { prefix: p.to_string(), quota_bytes: 0 }).collect();
        Tenants::new(&specs)
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
