//! Conversions between the wire types (generated from etcd's protos) and the store's types.
//! Keys and values are `Bytes` on both sides, so nothing is copied.

use crate::error::{Error, Result};
use crate::mvcc;
use crate::proto::etcdserverpb as pb;
use crate::proto::mvccpb;

pub fn range_request(r: pb::RangeRequest) -> Result<mvcc::RangeRequest> {
    use pb::range_request::{SortOrder as O, SortTarget as T};
    let sort_order = match O::try_from(r.sort_order).map_err(|_| Error::InvalidSortOption)? {
        O::None => mvcc::SortOrder::None,
        O::Ascend => mvcc::SortOrder::Ascend,
        O::Descend => mvcc::SortOrder::Descend,
    };
    let sort_target = match T::try_from(r.sort_target).map_err(|_| Error::InvalidSortOption)? {
        T::Key => mvcc::SortTarget::Key,
        T::Version => mvcc::SortTarget::Version,
        T::Create => mvcc::SortTarget::Create,
        T::Mod => mvcc::SortTarget::Mod,
        T::Value => mvcc::SortTarget::Value,
    };
    Ok(mvcc::RangeRequest {
        key: r.key,
        range_end: r.range_end,
        limit: r.limit,
        revision: r.revision,
        sort_order,
        sort_target,
        serializable: r.serializable,
        keys_only: r.keys_only,
        count_only: r.count_only,
        min_mod_revision: r.min_mod_revision,
        max_mod_revision: r.max_mod_revision,
        min_create_revision: r.min_create_revision,
        max_create_revision: r.max_create_revision,
    })
}

pub fn put_request(p: pb::PutRequest) -> mvcc::PutRequest {
    mvcc::PutRequest {
        key: p.key,
        value: p.value,
        lease: p.lease,
        prev_kv: p.prev_kv,
        ignore_value: p.ignore_value,
        ignore_lease: p.ignore_lease,
    }
}

pub fn delete_request(d: pb::DeleteRangeRequest) -> mvcc::DeleteRangeRequest {
    mvcc::DeleteRangeRequest { key: d.key, range_end: d.range_end, prev_kv: d.prev_kv }
}

fn compare(c: pb::Compare) -> mvcc::Compare {
    use pb::compare::{CompareResult as R, CompareTarget as T, TargetUnion as U};
    // The operand is read according to `target`; a union of another kind counts as zero (or an
    // empty value), as in etcd.
    let n = |want: fn(&U) -> Option<i64>| c.target_union.as_ref().and_then(want).unwrap_or(0);
    let target = match T::try_from(c.target) {
        Ok(T::Version) => mvcc::CompareTarget::Version(n(|u| match u {
            U::Version(v) => Some(*v),
            _ => None,
        })),
        Ok(T::Create) => mvcc::CompareTarget::Create(n(|u| match u {
            U::CreateRevision(v) => Some(*v),
            _ => None,
        })),
        Ok(T::Mod) => mvcc::CompareTarget::Mod(n(|u| match u {
            U::ModRevision(v) => Some(*v),
            _ => None,
        })),
        Ok(T::Lease) => mvcc::CompareTarget::Lease(n(|u| match u {
            U::Lease(v) => Some(*v),
            _ => None,
        })),
        Ok(T::Value) => mvcc::CompareTarget::Value(match &c.target_union {
            Some(U::Value(v)) => v.clone(),
            _ => Default::default(),
        }),
        Err(_) => mvcc::CompareTarget::Unknown,
    };
    let result = match R::try_from(c.result) {
        Ok(R::Equal) => mvcc::CompareResult::Equal,
        Ok(R::Greater) => mvcc::CompareResult::Greater,
        Ok(R::Less) => mvcc::CompareResult::Less,
        Ok(R::NotEqual) => mvcc::CompareResult::NotEqual,
        Err(_) => mvcc::CompareResult::Unknown,
    };
    mvcc::Compare { key: c.key, range_end: c.range_end, target, result }
}

fn request_op(op: pb::RequestOp) -> Result<mvcc::RequestOp> {
    use pb::request_op::Request as R;
    Ok(match op.request {
        Some(R::RequestRange(r)) => mvcc::RequestOp::Range(range_request(r)?),
        Some(R::RequestPut(p)) => mvcc::RequestOp::Put(put_request(p)),
        Some(R::RequestDeleteRange(d)) => mvcc::RequestOp::DeleteRange(delete_request(d)),
        Some(R::RequestTxn(t)) => mvcc::RequestOp::Txn(txn_request(t)?),
        None => mvcc::RequestOp::Empty,
    })
}

pub fn txn_request(t: pb::TxnRequest) -> Result<mvcc::TxnRequest> {
    Ok(mvcc::TxnRequest {
        compare: t.compare.into_iter().map(compare).collect(),
        success: t.success.into_iter().map(request_op).collect::<Result<_>>()?,
        failure: t.failure.into_iter().map(request_op).collect::<Result<_>>()?,
    })
}

// Back to the wire: a member alone's write handed back by the store while the member grows
// into a cluster (`mvcc::Refused::Closed`) is proposed to Raft as the client sent it.

pub fn put_back(p: mvcc::PutRequest) -> pb::PutRequest {
    pb::PutRequest {
        key: p.key,
        value: p.value,
        lease: p.lease,
        prev_kv: p.prev_kv,
        ignore_value: p.ignore_value,
        ignore_lease: p.ignore_lease,
    }
}

pub fn delete_back(d: mvcc::DeleteRangeRequest) -> pb::DeleteRangeRequest {
    pb::DeleteRangeRequest { key: d.key, range_end: d.range_end, prev_kv: d.prev_kv }
}

fn range_back(r: mvcc::RangeRequest) -> pb::RangeRequest {
    use pb::range_request::{SortOrder as O, SortTarget as T};
    pb::RangeRequest {
        key: r.key,
        range_end: r.range_end,
        limit: r.limit,
        revision: r.revision,
        sort_order: match r.sort_order {
            mvcc::SortOrder::None => O::None,
            mvcc::SortOrder::Ascend => O::Ascend,
            mvcc::SortOrder::Descend => O::Descend,
        } as i32,
        sort_target: match r.sort_target {
            mvcc::SortTarget::Key => T::Key,
            mvcc::SortTarget::Version => T::Version,
            mvcc::SortTarget::Create => T::Create,
            mvcc::SortTarget::Mod => T::Mod,
            mvcc::SortTarget::Value => T::Value,
        } as i32,
        serializable: r.serializable,
        keys_only: r.keys_only,
        count_only: r.count_only,
        min_mod_revision: r.min_mod_revision,
        max_mod_revision: r.max_mod_revision,
        min_create_revision: r.min_create_revision,
        max_create_revision: r.max_create_revision,
    }
}

fn compare_back(c: mvcc::Compare) -> pb::Compare {
    use pb::compare::{CompareResult as R, CompareTarget as T, TargetUnion as U};
    // A target or result outside the enum converts back to one outside it again.
    let (target, union) = match c.target {
        mvcc::CompareTarget::Version(v) => (T::Version as i32, Some(U::Version(v))),
        mvcc::CompareTarget::Create(v) => (T::Create as i32, Some(U::CreateRevision(v))),
        mvcc::CompareTarget::Mod(v) => (T::Mod as i32, Some(U::ModRevision(v))),
        mvcc::CompareTarget::Value(v) => (T::Value as i32, Some(U::Value(v))),
        mvcc::CompareTarget::Lease(v) => (T::Lease as i32, Some(U::Lease(v))),
        mvcc::CompareTarget::Unknown => (-1, None),
    };
    let result = match c.result {
        mvcc::CompareResult::Equal => R::Equal as i32,
        mvcc::CompareResult::Greater => R::Greater as i32,
        mvcc::CompareResult::Less => R::Less as i32,
        mvcc::CompareResult::NotEqual => R::NotEqual as i32,
        mvcc::CompareResult::Unknown => -1,
    };
    pb::Compare { key: c.key, range_end: c.range_end, target, result, target_union: union }
}

fn request_op_back(op: mvcc::RequestOp) -> pb::RequestOp {
    use pb::request_op::Request as R;
    let request = match op {
        mvcc::RequestOp::Range(r) => Some(R::RequestRange(range_back(r))),
        mvcc::RequestOp::Put(p) => Some(R::RequestPut(put_back(p))),
        mvcc::RequestOp::DeleteRange(d) => Some(R::RequestDeleteRange(delete_back(d))),
        mvcc::RequestOp::Txn(t) => Some(R::RequestTxn(txn_back(t))),
        mvcc::RequestOp::Empty | mvcc::RequestOp::DeleteLeased { .. } => None,
    };
    pb::RequestOp { request }
}

pub fn txn_back(t: mvcc::TxnRequest) -> pb::TxnRequest {
    pb::TxnRequest {
        compare: t.compare.into_iter().map(compare_back).collect(),
        success: t.success.into_iter().map(request_op_back).collect(),
        failure: t.failure.into_iter().map(request_op_back).collect(),
    }
}

pub fn kv(kv: mvcc::KeyValue) -> mvccpb::KeyValue {
    mvccpb::KeyValue {
        key: kv.key,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
        value: kv.value,
        lease: kv.lease,
    }
}

/// A header with only the revision: what etcd puts in responses nested inside a txn.
fn nested_header(revision: i64) -> Option<pb::ResponseHeader> {
    Some(pb::ResponseHeader { revision, ..Default::default() })
}

pub fn range_response(r: mvcc::RangeResponse) -> pb::RangeResponse {
    pb::RangeResponse {
        header: nested_header(r.revision),
        kvs: r.kvs.into_iter().map(kv).collect(),
        more: r.more,
        count: r.count,
    }
}

pub fn put_response(r: mvcc::PutResponse) -> pb::PutResponse {
    pb::PutResponse { header: nested_header(r.revision), prev_kv: r.prev_kv.map(kv) }
}

pub fn delete_response(r: mvcc::DeleteRangeResponse) -> pb::DeleteRangeResponse {
    pb::DeleteRangeResponse {
        header: nested_header(r.revision),
        deleted: r.deleted,
        prev_kvs: r.prev_kvs.into_iter().map(kv).collect(),
    }
}

pub fn txn_response(r: mvcc::TxnResponse) -> pb::TxnResponse {
    use pb::response_op::Response as R;
    pb::TxnResponse {
        header: nested_header(r.revision),
        succeeded: r.succeeded,
        responses: r
            .responses
            .into_iter()
            .map(|op| pb::ResponseOp {
                response: Some(match op {
                    mvcc::ResponseOp::Range(r) => R::ResponseRange(range_response(r)),
                    mvcc::ResponseOp::Put(r) => R::ResponsePut(put_response(r)),
                    mvcc::ResponseOp::DeleteRange(r) => R::ResponseDeleteRange(delete_response(r)),
                    mvcc::ResponseOp::Txn(r) => R::ResponseTxn(txn_response(r)),
                }),
            })
            .collect(),
    }
}

/// A change of auth state in the log's form (passwords already hashed), as the auth store
/// applies it.
pub fn auth_op(r: crate::proto::memetcdpb::AuthRequest) -> Option<crate::auth::Op> {
    use crate::auth::{Op, PermType, Permission};
    use crate::proto::memetcdpb::auth_request::Op as A;
    Some(match r.op? {
        A::Enable(_) => Op::Enable,
        A::Disable(_) => Op::Disable,
        A::UserAdd(u) => Op::UserAdd {
            name: u.name,
            hash: u.hashed_password.into_bytes(),
            no_password: u.options.is_some_and(|o| o.no_password),
        },
        A::UserDelete(u) => Op::UserDelete { name: u.name },
        A::UserChangePassword(u) => {
            Op::UserChangePassword { name: u.name, hash: u.hashed_password.into_bytes() }
        }
        A::UserGrantRole(g) => Op::UserGrantRole { user: g.user, role: g.role },
        A::UserRevokeRole(g) => Op::UserRevokeRole { name: g.name, role: g.role },
        A::RoleAdd(r) => Op::RoleAdd { name: r.name },
        A::RoleDelete(r) => Op::RoleDelete { role: r.role },
        A::RoleGrantPermission(g) => Op::RoleGrantPermission {
            name: g.name,
            perm: g.perm.map(|p| Permission {
                perm_type: PermType::from_i32(p.perm_type),
                key: p.key.to_vec(),
                range_end: p.range_end.to_vec(),
            }),
        },
        A::RoleRevokePermission(r) => Op::RoleRevokePermission {
            role: r.role,
            key: r.key.to_vec(),
            range_end: r.range_end.to_vec(),
        },
        A::Authenticate(a) => Op::Authenticate { name: a.name, token: a.token },
    })
}
