//! The etcd API as a member alone serves it: each service field by field, next to a real etcd
//! where it can be, a model of etcd's MVCC store, and hostile input.

mod consistency;
mod differential;
mod hostile;
pub mod kv;
mod lease;
mod limits;
mod lock_election;
pub mod model;
mod services;
mod txn;
pub mod watch;
mod watch_diff;
mod watch_stress;
