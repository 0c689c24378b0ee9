//! The permission checks of changes of keys and leases (etcd's `authApplierV3`): run where the
//! change is applied, against the auth state in force there. A cluster member runs them as it
//! applies a request from the log (`etcdserver::apply`), so that every member decides alike; a
//! member alone runs them just before its write, holding the auth state's write gate until
//! the write is applied (`etcdserver::submit`). Only while auth is enabled: the callers check the
//! flag first (one atomic load).

use crate::auth::AuthInfo;
use crate::error::Result;
use crate::proto::etcdserverpb as pb;
use crate::server::etcdserver::member::Member;

/// A lease's keys may be written by `who` (root may always): attaching to it or revoking it.
fn check_lease(s: &Member, who: Option<&AuthInfo>, id: i64) -> Result<()> {
    if id == 0 {
        return Ok(());
    }
    let Some(ttl) = s.lessor.time_to_live(id, true) else { return Ok(()) };
    if s.auth.check_admin(who).is_ok() {
        return Ok(());
    }
    for k in &ttl.keys {
        s.auth.check_range(who, k, b"", true)?;
    }
    Ok(())
}

pub fn check_put(s: &Member, who: Option<&AuthInfo>, r: &pb::PutRequest) -> Result<()> {
    s.auth.check_range(who, &r.key, b"", true)?;
    check_lease(s, who, r.lease)?;
    if r.prev_kv {
        s.auth.check_range(who, &r.key, b"", false)?;
    }
    Ok(())
}

pub fn check_delete(s: &Member, who: Option<&AuthInfo>, r: &pb::DeleteRangeRequest) -> Result<()> {
    s.auth.check_range(who, &r.key, &r.range_end, true)?;
    if r.prev_kv {
        s.auth.check_range(who, &r.key, &r.range_end, false)?;
    }
    Ok(())
}

pub fn check_txn(s: &Member, who: Option<&AuthInfo>, t: &pb::TxnRequest) -> Result<()> {
    use pb::request_op::Request as Op;
    for c in &t.compare {
        s.auth.check_range(who, &c.key, &c.range_end, false)?;
    }
    for op in t.success.iter().chain(&t.failure) {
        match &op.request {
            Some(Op::RequestRange(r)) => s.auth.check_range(who, &r.key, &r.range_end, false)?,
            Some(Op::RequestPut(p)) => check_put(s, who, p)?,
            Some(Op::RequestDeleteRange(d)) => check_delete(s, who, d)?,
            Some(Op::RequestTxn(t)) => check_txn(s, who, t)?,
            None => {}
        }
    }
    Ok(())
}

pub fn check_lease_revoke(s: &Member, who: Option<&AuthInfo>, id: i64) -> Result<()> {
    if !s.auth.is_enabled() {
        return Ok(());
    }
    // etcd's check at apply: only when the lease exists; revision and user are checked by
    // the key checks (or by the admin check).
    if s.auth.check_admin(who).is_err() {
        let ttl = s.lessor.time_to_live(id, true);
        for k in ttl.iter().flat_map(|t| &t.keys) {
            s.auth.check_range(who, k, b"", true)?;
        }
    }
    Ok(())
}
