//! Alarms and the space quota (etcd's `v3alarm` and `storage/quota`).
//!
//! `--quota-backend-bytes` bounds the memory the store holds (its own estimate, the figure
//! Status reports as the db size). A write that would take the store past it raises the
//! NOSPACE alarm and fails with etcd's "database space exceeded". While the alarm is active
//! every write that adds data (a put, a txn with a put in the branch that costs more, a lease
//! grant) fails the same way, even after compaction frees space, until an operator disarms it
//! (`etcdctl alarm disarm`): etcd's contract, which keeps a cluster from flapping at the edge
//! of its quota. Reads, deletes, compaction and lease revocation go on, so space can be freed.
//!
//! Costs are etcd's: 256 bytes plus key and value per put, 64 per lease.
//! Alarms are not persisted: after a restart the first write over the quota raises it again.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::error::Error;
use crate::mvcc::Store;
use crate::proto::etcdserverpb as pb;

/// etcd's default quota, used when the flag is 0.
pub const DEFAULT_QUOTA_BYTES: i64 = 2 << 30;
/// etcd's estimate of what a put adds besides its key and value.
const PUT_OVERHEAD: usize = 256;
/// etcd's estimate of what a lease adds.
const LEASE_OVERHEAD: usize = 64;

#[derive(Debug)]
pub struct Alarms {
    /// Active alarms, as (member id, `pb::AlarmType`), in the order raised. Few (one per type
    /// and member); locked only to raise, clear or list them.
    active: Mutex<Vec<(u64, i32)>>,
    /// Whether a NOSPACE alarm is in `active`: read by every write, without the lock.
    nospace: AtomicBool,
    /// Whether a CORRUPT alarm is in `active` (any member's): read by every write, without the
    /// lock; while it is raised writes are refused, as etcd's corrupt applier refuses them.
    corrupt: AtomicBool,
    /// The quota in bytes; `None`: no quota (the flag was negative).
    quota: Option<i64>,
    /// This member, which raises the alarms.
    member: u64,
}

impl Alarms {
    /// The alarms of `member`, with `--quota-backend-bytes` (0: etcd's 2 GiB, negative: none).
    pub fn new(quota_flag: i64, member: u64) -> Self {
        let quota = match quota_flag {
            q if q < 0 => None,
            0 => Some(DEFAULT_QUOTA_BYTES),
            q => Some(q),
        };
        Self {
            active: Mutex::new(Vec::new()),
            nospace: AtomicBool::new(false),
            corrupt: AtomicBool::new(false),
            quota,
            member,
        }
    }

    /// The quota Status reports (0 when there is none, as etcd's passthrough quota).
    pub fn quota_bytes(&self) -> i64 {
        self.quota.unwrap_or(0)
    }

    /// Refuses a write that adds `cost` bytes while NOSPACE is raised, or that would take the
    /// store past the quota (raising NOSPACE). Writes that add nothing always pass.
    pub fn check_space(&self, store: &Store, cost: usize) -> Result<(), Error> {
        if cost == 0 {
            return Ok(());
        }
        if self.nospace.load(Ordering::Relaxed) {
            return Err(Error::NoSpace);
        }
        if let Some(q) = self.quota
            && (store.size_bytes() + cost) as i64 >= q
        {
            if self.activate(self.member, pb::AlarmType::Nospace as i32).is_some() {
                tracing::warn!(
                    quota_bytes = q,
                    size_bytes = store.size_bytes(),
                    "alarm: NOSPACE raised: writes that add data are refused until compaction \
                     frees space and the alarm is disarmed"
                );
            }
            return Err(Error::NoSpace);
        }
        Ok(())
    }

    /// Whether NOSPACE is raised (a cluster's apply refuses writes that add data then, on every
    /// member alike).
    pub fn nospace_raised(&self) -> bool {
        self.nospace.load(Ordering::Relaxed)
    }

    /// Refuses a write while CORRUPT is raised: etcd's corrupt applier answers puts, deletes,
    /// txns, compactions, lease grants and revocations so (reads and alarms go on, so that an
    /// operator can look and disarm).
    pub fn check_corrupt(&self) -> Result<(), Error> {
        if self.corrupt.load(Ordering::Relaxed) {
            return Err(Error::Corrupt);
        }
        Ok(())
    }

    /// Replaces every alarm (a snapshot installed).
    pub fn replace(&self, alarms: &[(u64, i32)]) {
        let mut a = self.active.lock();
        *a = alarms.to_vec();
        self.sync(&a);
    }

    /// Whether a write adding `cost` bytes would take the store past the quota (the check of
    /// [`check_space`](Self::check_space) without raising the alarm: a cluster member
    /// proposes the alarm instead, so that every member raises it).
    pub fn exceeds_quota(&self, store: &Store, cost: usize) -> bool {
        cost > 0 && self.quota.is_some_and(|q| (store.size_bytes() + cost) as i64 >= q)
    }

    /// This member's id (the member alarms it raises are raised for).
    pub fn member(&self) -> u64 {
        self.member
    }

    /// The active alarms of type `alarm` (every alarm for NONE).
    pub fn get(&self, alarm: i32) -> Vec<(u64, i32)> {
        let none = pb::AlarmType::None as i32;
        self.active.lock().iter().copied().filter(|a| alarm == none || a.1 == alarm).collect()
    }

    /// Raises `alarm` for `member`; returns it if it was not raised already.
    pub fn activate(&self, member: u64, alarm: i32) -> Option<(u64, i32)> {
        if alarm == pb::AlarmType::None as i32 {
            return None;
        }
        let mut a = self.active.lock();
        if a.contains(&(member, alarm)) {
            return None;
        }
        a.push((member, alarm));
        self.sync(&a);
        if alarm == pb::AlarmType::Corrupt as i32 {
            tracing::error!(
                member = %format!("{member:x}"),
                "alarm: CORRUPT raised: this member's store differs from the leader's; writes are \
                 refused until an operator checks the members and disarms it"
            );
        }
        Some((member, alarm))
    }

    /// Clears `alarm` of `member`; returns it if it was raised.
    pub fn deactivate(&self, member: u64, alarm: i32) -> Option<(u64, i32)> {
        let mut a = self.active.lock();
        let at = a.iter().position(|x| *x == (member, alarm))?;
        let gone = a.remove(at);
        self.sync(&a);
        match pb::AlarmType::try_from(alarm) {
            Ok(pb::AlarmType::Nospace) => tracing::info!("alarm: NOSPACE disarmed"),
            Ok(pb::AlarmType::Corrupt) => {
                tracing::info!(member = %format!("{member:x}"), "alarm: CORRUPT disarmed")
            }
            _ => {}
        }
        Some(gone)
    }

    fn sync(&self, active: &[(u64, i32)]) {
        let nospace = active.iter().any(|a| a.1 == pb::AlarmType::Nospace as i32);
        self.nospace.store(nospace, Ordering::Relaxed);
        let corrupt = active.iter().any(|a| a.1 == pb::AlarmType::Corrupt as i32);
        self.corrupt.store(corrupt, Ordering::Relaxed);
    }

    /// The first active alarm not in `excluded` (names as etcd spells them: NOSPACE, CORRUPT),
    /// for `/health`.
    pub fn first_not_excluded(&self, excluded: &[&str]) -> Option<&'static str> {
        self.active.lock().iter().map(|a| alarm_name(a.1)).find(|n| !excluded.contains(n))
    }
}

/// etcd's name of an alarm type.
pub fn alarm_name(alarm: i32) -> &'static str {
    pb::AlarmType::try_from(alarm).map_or("UNKNOWN", |a| a.as_str_name())
}

/// What a put adds, by etcd's estimate.
pub fn put_cost(r: &pb::PutRequest) -> usize {
    PUT_OVERHEAD + r.key.len() + r.value.len()
}

/// What a txn adds: its costlier branch's puts, nested txns included.
pub fn txn_cost(r: &pb::TxnRequest) -> usize {
    let branch = |ops: &[pb::RequestOp]| -> usize {
        ops.iter()
            .map(|op| match &op.request {
                Some(pb::request_op::Request::RequestPut(p)) => put_cost(p),
                Some(pb::request_op::Request::RequestTxn(t)) => txn_cost(t),
                _ => 0,
            })
            .sum()
    };
    branch(&r.success).max(branch(&r.failure))
}

/// What a lease grant adds.
pub fn lease_cost() -> usize {
    LEASE_OVERHEAD
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOSPACE: i32 = pb::AlarmType::Nospace as i32;
    const NONE: i32 = pb::AlarmType::None as i32;

    #[test]
    fn alarms_activate_once_and_clear_by_member_and_type() {
        let a = Alarms::new(0, 7);
        assert_eq!(a.quota_bytes(), DEFAULT_QUOTA_BYTES);
        assert_eq!(a.activate(7, NONE), None);
        assert_eq!(a.activate(7, NOSPACE), Some((7, NOSPACE)));
        assert_eq!(a.activate(7, NOSPACE), None);
        assert_eq!(a.get(NONE), [(7, NOSPACE)]);
        assert_eq!(a.first_not_excluded(&[]), Some("NOSPACE"));
        assert_eq!(a.first_not_excluded(&["NOSPACE"]), None);
        assert_eq!(a.deactivate(8, NOSPACE), None);
        assert_eq!(a.deactivate(7, NOSPACE), Some((7, NOSPACE)));
        assert!(a.get(NONE).is_empty());
    }

    #[test]
    fn costs_are_etcds() {
        let put = |k: &str, v: &str| pb::PutRequest {
            key: k.as_bytes().to_vec().into(),
            value: v.as_bytes().to_vec().into(),
            ..Default::default()
        };
        assert_eq!(put_cost(&put("ab", "cde")), 261);
        let op = |p| pb::RequestOp { request: Some(pb::request_op::Request::RequestPut(p)) };
        let t = pb::TxnRequest {
            success: vec![op(put("a", "")), op(put("b", ""))],
            failure: vec![op(put("c", "0123456789"))],
            ..Default::default()
        };
        assert_eq!(txn_cost(&t), 514);
        assert_eq!(txn_cost(&pb::TxnRequest::default()), 0);
    }
}
