//! HTTP beside gRPC on the client port (etcd's `etcdhttp` and its gateway).
//!
//! - `http`: the router in front of gRPC: probes, `/version`, `/metrics`, the gateway.
//! - `metrics`: what `/metrics` reports (the gRPC call counters it reports are the member's,
//!   `crate::metrics::grpc`, counted by `http`).
//! - `gateway`: etcd's JSON gateway (`/v3/...`); `websocket`: its streaming calls.
//! - `upgrade`: a connection's first request, read before tonic: the HTTP/1.1 upgrades this
//!   server answers itself (the gateway's WebSockets, and on a peer listener the leader's
//!   `Append` and `Forward` streams, `raft_streams`).

pub mod gateway;
pub mod http;
pub mod metrics;
pub mod raft_streams;
pub mod upgrade;
pub mod websocket;
