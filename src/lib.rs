//! # mem_etcd
//!
//! An in-memory, etcd v3 compatible storage server, built to be kube-apiserver's datastore.
//!
//! ## Architecture
//!
//! Dependencies point one way: `server` → (`raft`, `watch`, `lease`, `auth`) → `mvcc` → `wal`,
//! and everything → (`revision`, `keyspace`, `error`, `metrics`, `tls`, `duration`, `humanize`,
//! `data_dir`); `raft` uses only `wal`'s file framing below it. The storage layers never see
//! gRPC types; `raft` sees requests only as bytes and reaches the store through the
//! [`raft::StateMachine`] the server implements. No two source files import each other
//! (`.ci/import_cycles.sh` checks it in CI, and that no room of `server` imports one above it).
//!
//! - [`server`]: a member and how it serves, in etcd's four rooms, each importing only those
//!   below it: `embed` → `etcdhttp` → `v3rpc` → `etcdserver`.
//!   - `etcdserver`: the member (`etcdserver::member`, etcd's `EtcdServer`: the state its
//!     services share), how it is opened and its Raft node started (`etcdserver::bootstrap`,
//!     `etcd_data_dir`, `force_new_cluster`), and `etcdserver::submit`, the one entry point of
//!     every change of state (a client's, and the server's own: lease expiry, auto-compaction),
//!     which applies it in place through the store's parallel write path on a member alone,
//!     and on a cluster member proposes it to Raft, every member applying it from the log
//!     (`etcdserver::apply`); both roads give the same answer. Beside it, what only the member
//!     knows of Raft: membership (`membership`, growing from one member with `grow`), leases'
//!     renewals and expiry where the deadlines are kept (`lessor`), the leader a watch asks for
//!     (`leader`), what the leader serves of the requests members forward to it (`forward`),
//!     alarms and the space quota (`alarm`), auto-compaction (`compactor`).
//!   - `v3rpc`: the gRPC services (KV, Watch, Lease, Maintenance, Cluster, Auth, and etcd's Lock
//!     and Election, made of KV, Lease and Watch calls in `v3rpc::concurrency` as etcd's are)
//!     over tonic. Each handler checks the request and who sent it, then reads the store or
//!     calls the member, and fills the response header; it never sees Raft. Errors are
//!     translated through the one table in `error` (`v3rpc::status` makes them statuses).
//!   - `etcdhttp`: the HTTP endpoints beside gRPC and the gRPC call counting in front of the
//!     routes (`etcdhttp::http`, `etcdhttp::metrics` over `metrics::grpc`), the JSON gateway.
//!   - `embed`: the listeners (TLS for https ones from `tls`), the services on them and the
//!     tasks beside them (`embed::serve`), v3 discovery.
//!
//!   Maintenance.Snapshot streams the store at one revision (`mvcc::backup`) as an etcd
//!   snapshot.db (`backend::schema`; `mem_etcd snapshot restore` and `etcdutl` turn it into a
//!   data directory).
//! - [`raft`]: replication for a cluster of members (openraft): the Raft log (the WAL of a
//!   cluster member), snapshots of the store, the peer transport, membership, and the one road
//!   to the leader (`RaftNode::at_leader`: one deadline and retry policy, one peer call, and
//!   a call to a leader that another member replaced ended at once) for every request only
//!   the leader can serve: proposals, read indexes, lease renewals and
//!   TimeToLive, membership changes, and the corruption checks (`raft::corrupt`: members
//!   compare their stores' hashes). A member alone runs without it until it grows into a
//!   cluster (its first MemberAdd).
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
//!   `mvcc::LeaseIndex`); a write with a lease attaches its key under the key's partition lock,
//!   before it gets its revision, and a revocation (a client's or an expiry) removes the lease
//!   and deletes every key attached to it in one revision, under those keys' partition locks,
//!   through the store's write path: nothing attaches to a lease once its keys are going.
//! - [`auth`]: users, roles, key-range permissions, the auth revision, simple and JWT tokens
//!   (etcd's `server/auth`); the server checks requests against it only while auth is enabled,
//!   and changes it through the same entry point as writes (`etcdserver::submit`: the Raft log in
//!   a cluster).
//! - [`wal`]: the write-ahead log of a member alone under `--data-dir`: one stream of segment
//!   files per partition plus `_meta` (leases, compactions), written by one thread with group
//!   commit (buffered: acknowledged once written to the OS; fsync: once fdatasync'd), snapshots
//!   that bound restart time and disk use, and recovery that rebuilds the store at exactly one
//!   revision.
//! - [`backend`]: etcd's own storage format (a bbolt database with etcd's buckets): written
//!   page by page for Maintenance.Snapshot, read from an etcd snapshot.db or data directory, so
//!   data moves between etcd and mem_etcd with its revisions; never used to serve.
//! - [`data_dir`]: the layout of `--data-dir` and the atomic replacement of its small files,
//!   used by `wal`, `raft` and `server` alike.
//! - [`utc`]: calendar dates and etcd's log timestamps from the system clock.
//! - [`proxy`]: etcd's two proxies, which the binary also runs (`mem_etcd gateway start`, a
//!   TCP pipe to the cluster's client endpoints; `mem_etcd grpc-proxy start`, which passes each
//!   gRPC call through to one). They are clients of a cluster, hold no data, and reuse only
//!   `tls` and `raft::tls` for their connections.
//! - [`humanize`]: sizes as etcd's log lines write them (`1.0 GB`).
//!
//! ## The write path
//! validate → copy each put's key and value into the buffer its version keeps → lock
//! partitions → evaluate compares → allocate revision → apply → unlock → make the events →
//! encode WAL records → complete → hand to the WAL in revision order → written (and synced) →
//! publish (event log, then watchers) → move the read watermark → reply. Only what must be
//! ordered runs in the sections writers pass one at a time (a partition's lock, the in-order
//! hand-off, the WAL writer); benches/README.md, "The serial ceiling", measures them.
//! See [`mvcc::store`] for why this is linearizable without a global lock.
//!
//! In a cluster one floor goes on top, and the Raft log takes the WAL's place below: validate →
//! propose (every member sends the proposals waiting on it to the leader as one request,
//! `raft::batch`, on its long-lived `Forward` stream, `raft::forward`; the leader appends them
//! as one batch) → sent to each follower on a long-lived `Append` stream, a connection of its own
//! carrying length-prefixed frames (`raft::rafthttp::stream`), a few batches in flight
//! (`raft::rafthttp::network`) → appended on a majority, written or
//! fdatasync'd per each member's `--wal-mode` → committed → applied on every member, in log order,
//! through the same path (lock, evaluate, allocate, apply, complete; the store keeps no WAL of its
//! own), each batch of entries published to readers and watchers at once when it is applied → reply
//! from the member the client called, once it has applied. A compaction's apply only sets its
//! revision; its walks of the whole store run on a thread of their own
//! (`mvcc::Store::set_compaction`), so no entry after it waits for them.
//!
//! **Why the request, not its outcome, is replicated.** The other sound design keeps the
//! leader's parallel apply and replicates the WAL records it produces; but then a leader that
//! loses leadership holds applied revisions that were never committed and must undo them, and
//! revision order must be kept equal to log order across an asynchronous hand-off. Replicating
//! the request, as etcd does, means every member evaluates the same requests in the same order
//! from the same state, so revisions are assigned once, in log order, identically everywhere,
//! and nothing uncommitted is ever applied: there is nothing to undo. Applying in log order is
//! sequential, but the apply is a few microseconds of a write's cost; the gRPC and Raft work
//! around it is what a cluster spends. A member alone keeps the parallel path and pays nothing
//! for this floor.
//!
//! **A member alone grows into a cluster** on its first MemberAdd (`etcdserver::grow`): the store
//! stops applying client writes directly (the one cost to a member alone: a relaxed load of a
//! flag under the partition locks its writes already hold; a write refused there is handed back
//! and proposed instead), its other writes wait on a gate, and once the writes under way are in
//! its WAL its state at that revision becomes the founding Raft snapshot of a one-member cluster
//! with the same ids; Raft starts on the running server without reloading it, and from then on
//! the floor above is in place. The member file is written last, so a crash restarts either the
//! member alone (from its WAL) or the cluster member (from Raft, retiring the WAL).
//!
//! ## Invariants
//! - Revisions start at 1, increase by one per write txn, and are never reused, also across
//!   restarts (recovery yields the state of one revision R; writing resumes at R + 1) and, in a
//!   cluster, across leader changes (revisions are assigned by applying the log, in order).
//! - Every member of a cluster holds the same revisions, histories and events: each applies
//!   the same committed requests in the same order, deterministically.
//! - No reader or watcher sees a write before the WAL wrote it; in fsync mode, before it is
//!   on disk. In a cluster, before a majority holds it (written or synced per their modes);
//!   a write is reported successful only once committed and applied.
//! - A reader never sees revision R before every write at or below R is applied.
//! - A linearizable read on any member reflects every write acknowledged before it began (a
//!   read index confirmed by a quorum); a serializable read is served from the member's
//!   applied state.
//! - A watch gets every matching event once, in revision order, a revision never split.
//! - Every request gets etcd's answer: same codes, messages, revisions and counts.

pub(crate) mod auth;
pub(crate) mod backend;
pub mod config;
pub(crate) mod data_dir;
pub mod duration;
pub mod error;
pub mod etcdutl;
pub mod humanize;
pub(crate) mod keyspace;
pub(crate) mod lease;
pub(crate) mod metrics;
pub mod mvcc;
pub mod netutil;
pub mod proxy;
pub mod raft;
pub(crate) mod revision;
pub mod server;
pub mod tls;
pub mod utc;
pub mod wal;
pub(crate) mod watch;

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
    /// etcd's Lock service (`v3rpc::lock`).
    pub mod v3lockpb {
        tonic::include_proto!("v3lockpb");
    }
    /// etcd's Election service (`v3rpc::election`).
    pub mod v3electionpb {
        tonic::include_proto!("v3electionpb");
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
