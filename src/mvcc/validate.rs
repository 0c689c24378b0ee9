//! Request validation, before anything touches the store (etcd's `v3rpc/key.go` checks).

use std::collections::HashSet;

use bytes::Bytes;

use super::request::{RequestOp, TxnRequest};
use crate::error::{Error, Result};
use crate::keyspace::KeyRange;

pub fn check_range_key(key: &[u8]) -> Result<()> {
    if key.is_empty() { Err(Error::EmptyKey) } else { Ok(()) }
}

pub fn check_put(p: &super::request::PutRequest) -> Result<()> {
    check_range_key(&p.key)?;
    if p.ignore_value && !p.value.is_empty() {
        return Err(Error::ValueProvided);
    }
    if p.ignore_lease && p.lease != 0 {
        return Err(Error::LeaseProvided);
    }
    Ok(())
}

/// Shape checks of a txn, recursively: op counts against `max_ops` (nested txns get what is left
/// of the budget, as in etcd), keys present, and then the duplicate-key rule.
pub fn check_txn(t: &TxnRequest, max_ops: usize) -> Result<()> {
    check_txn_shape(t, max_ops as i64)?;
    check_intervals(&t.success)?;
    check_intervals(&t.failure)?;
    Ok(())
}

fn check_txn_shape(t: &TxnRequest, max_ops: i64) -> Result<()> {
    let opc = t.compare.len().max(t.success.len()).max(t.failure.len()) as i64;
    if opc > max_ops {
        return Err(Error::TooManyOps);
    }
    for c in &t.compare {
        check_range_key(&c.key)?;
    }
    for op in t.success.iter().chain(&t.failure) {
        match op {
            RequestOp::Range(r) => check_range_key(&r.key)?,
            RequestOp::Put(p) => check_put(p)?,
            RequestOp::DeleteRange(d) => check_range_key(&d.key)?,
            RequestOp::Txn(t) => check_txn_shape(t, max_ops - opc)?,
            RequestOp::Empty => return Err(Error::KeyNotFound),
            RequestOp::DeleteLeased { .. } => {}
        }
    }
    Ok(())
}

/// Puts and deletes of one branch, including those of nested txns.
#[derive(Default)]
struct Writes {
    puts: HashSet<Bytes>,
    dels: Vec<KeyRange>,
}

impl Writes {
    fn deletes(&self, key: &[u8]) -> bool {
        self.dels.iter().any(|d| d.contains(key))
    }
}

/// etcd's duplicate rule: no key is put twice or both put and deleted in one branch (a key put
/// in both branches of one nested txn is fine, since only one branch runs).
fn check_intervals(ops: &[RequestOp]) -> Result<Writes> {
    let mut w = Writes::default();
    for op in ops {
        if let RequestOp::DeleteRange(d) = op {
            // Taken literally, as etcd's interval check does: a `"\0"` end is not "to the end of
            // the key space" here, so such a delete overlaps nothing.
            w.dels.push(if d.range_end.is_empty() {
                KeyRange::single(d.key.clone())
            } else {
                KeyRange { start: d.key.clone(), end: Some(d.range_end.clone()), single: false }
            });
        }
    }
    for op in ops {
        let RequestOp::Txn(t) = op else { continue };
        let then = check_intervals(&t.success)?;
        let otherwise = check_intervals(&t.failure)?;
        for k in &then.puts {
            if w.puts.contains(k) || w.deletes(k) {
                return Err(Error::DuplicateKey);
            }
        }
        for k in &otherwise.puts {
            if (w.puts.contains(k) && !then.puts.contains(k)) || w.deletes(k) {
                return Err(Error::DuplicateKey);
            }
        }
        w.puts.extend(then.puts);
        w.puts.extend(otherwise.puts);
        w.dels.extend(then.dels);
        w.dels.extend(otherwise.dels);
    }
    for op in ops {
        let RequestOp::Put(p) = op else { continue };
        if w.puts.contains(&p.key) || w.deletes(&p.key) {
            return Err(Error::DuplicateKey);
        }
        w.puts.insert(p.key.clone());
    }
    Ok(w)
}
