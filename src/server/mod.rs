//! A member and how it serves, in etcd's rooms (etcd's `server/`):
//!
//! - [`etcdserver`]: the member (etcd's `EtcdServer`): opening it, the one entry point of
//!   every change of state and the apply path behind it, alarms, auto-compaction, membership
//!   and lease renewals wherever they land, growing from one member into a cluster.
//! - [`v3rpc`]: the gRPC services (etcd's `api/v3rpc`, `v3lock`, `v3election`): thin handlers
//!   that check a request, call the member and fill the header; the one table of errors to
//!   gRPC statuses. They never see Raft.
//! - [`etcdhttp`]: HTTP beside gRPC on the client port (probes, `/version`, `/metrics`, the
//!   JSON gateway and its WebSocket streams).
//! - [`embed`]: listeners and the services on them, the tasks beside them, v3 discovery.
//!
//! Imports point down this list's reverse: `embed` → `etcdhttp` → `v3rpc` → `etcdserver`.

pub mod embed;
pub(crate) mod etcdhttp;
pub mod etcdserver;
pub(crate) mod v3rpc;
