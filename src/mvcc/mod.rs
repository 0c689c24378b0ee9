//! The multi-version key-value store (etcd's `storage/mvcc`).
//!
//! - [`key_index`]: one key's versions (etcd's keyIndex, with the values inline);
//! - [`kv_buf`]: one version's key and value in one shared allocation;
//! - [`index`]: a partition's ordered key index with live counts (etcd's treeIndex);
//! - [`partition`]: one resource's keys: hash map, ordered index, histories;
//! - [`store`]: the partitions, the revision clock and the one write path;
//! - [`request`]: the KV API's requests and responses, free of any wire format;
//! - [`validate`]: etcd's request checks;
//! - [`event`]: a change to a key as watchers see it;
//! - [`event_log`]: every committed revision's events, for watchers;
//! - [`crc_combine`]: joining CRCs of versions into HashKV's hash;
//! - [`persist`]: recovery from the WAL into the store, and snapshots of the store;
//! - [`backup`]: backups of the store at one revision (Raft snapshots, Maintenance.Snapshot);
//! - `tests`: store tests that attack the invariants.

pub mod backup;
pub mod crc_combine;
pub mod event;
pub mod event_log;
pub mod index;
pub mod key_index;
pub mod kv_buf;
pub mod partition;
pub mod persist;
pub mod request;
pub mod store;
pub mod validate;

pub use event::{Event, EventKind, RevisionEvents};
pub use event_log::{CommitObserver, EventLog};
pub use request::*;
pub use store::LeaseIndex;
pub use store::{Applied, Compacted, HistoryPin, Refused, Store, StoreConfig};

#[cfg(test)]
mod tests;
