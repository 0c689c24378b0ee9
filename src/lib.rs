//! # mem_etcd
//!
//! An in-memory, etcd v3 compatible storage server, built to be kube-apiserver's datastore.
//!
//! ## Architecture
//! Dependencies point one way: `server` → (`watch`, `lease`) → `mvcc` → `wal`, and everything
//! → (`revision`, `keyspace`, `error`, `metrics`). The storage layers never see gRPC types.
//!
//! - [`server`]: the gRPC services (KV, Watch, Lease, Maintenance, Cluster, Auth) over tonic.
//!   Each handler converts the wire request into the store's types, calls the store, fills the
//!   response header, and translates errors through the single table in `server::status`.
//!   Around them: TLS for https listeners (`server::tls`), the HTTP endpoints and gRPC call
//!   counting in front of the routes (`server::http`, `server::metrics`), alarms and the space
//!   quota checked before writes that add data (`server::alarm`), auto-compaction
//!   (`server::compactor`), and Maintenance.Snapshot, which streams a backup the store takes at
//!   one revision (`mvcc::backup`, in the format of `wal::backup`; `mem_etcd snapshot restore`
//!   turns it into a data directory).
//! - [`mvcc`]: the store. The key space is split into partitions, one per Kubernetes resource
//!   (`/registry/[group/]resource/`, see [`keyspace`]) plus a default one; each partition has a
//!   hash map for point lookups, an ordered index with live counts for ranges and exact counts,
//!   and every key's versions since the last compaction, plus a log of which key each revision
//!   changed, from which the event log rebuilds any revision's events since the compaction.
//! - [`revision`]: the revision clock. Writers allocate revisions while holding their
//!   partitions' locks and apply in parallel; completed revisions are published in order, and
//!   readers read at the committed watermark, below which every write is applied and published.
//! - [`watch`]: the watch hub, told about each committed revision (through
//!   `mvcc::CommitObserver`): live fan-out to synced watchers, catch-up from the event log for
//!   the others, progress notifications.
//! - [`lease`]: the lessor, told by the store which keys are attached to which lease (through
//!   `mvcc::LeaseIndex`); expired leases' keys are deleted through the store's write path.
//! - [`wal`]: the write-ahead log under `--data-dir`: one stream of segment files per
//!   partition plus `_meta` (leases, compactions), written by one thread with group commit
//!   (buffered: acknowledged once written to the OS; fsync: once fdatasync'd), snapshots that
//!   bound restart time and disk use, and recovery that rebuilds the store at exactly one
//!   revision.
//!
//! ## The write path
//! validate → lock partitions → evaluate compares → allocate revision → apply → encode WAL
//! records → complete → hand to the WAL in revision order → written (and synced) → publish
//! (event log, then watchers) → move the read watermark → reply.
//! See [`mvcc::store`] for why this is linearizable without a global lock.
//!
//! ## Invariants
//! - Revisions start at 1, increase by one per write txn, and are never reused, also across
//!   restarts (recovery yields the state of one revision R; writing resumes at R + 1).
//! - No reader or watcher sees a write before the WAL wrote it; in fsync mode, before it is
//!   on disk.
//! - A reader never sees revision R before every write at or below R is applied.
//! - A watch gets every matching event once, in revision order, a revision never split.
//! - Every request gets etcd's answer: same codes, messages, revisions and counts.

pub mod config;
pub mod error;
pub mod keyspace;
pub mod lease;
pub mod metrics;
pub mod mvcc;
pub mod raft;
pub mod revision;
pub mod server;
pub mod snapshot_cmd;
pub mod wal;
pub mod watch;

/// Generated etcd API types (from `proto/`, compiled by `build.rs`).
#[allow(clippy::all, missing_debug_implementations)]
pub mod proto {
    pub mod mvccpb {
        tonic::include_proto!("mvccpb");
    }
    pub mod authpb {
        tonic::include_proto!("authpb");
    }
    pub mod etcdserverpb {
        tonic::include_proto!("etcdserverpb");
    }
    /// The Watch server again, answering with pre-encoded events (see `build.rs`).
    pub mod wire {
        include!(concat!(env!("OUT_DIR"), "/wire/etcdserverpb.rs"));
    }
    /// mem_etcd's peer protocol (`proto/memetcd/raftpb.proto`).
    pub mod memetcdpb {
        include!(concat!(env!("OUT_DIR"), "/peer/memetcdpb.rs"));
    }
}
