//! HTTP beside gRPC on the client port (etcd's `etcdhttp` and its gateway).
//!
//! - `http`: the router in front of gRPC: probes, `/version`, `/metrics`, the gateway.
//! - `metrics`: what `/metrics` reports (the gRPC call counters it reports are the member's,
//!   `crate::metrics::grpc`, counted by `http`).
//! - `gateway`: etcd's JSON gateway (`/v3/...`); `websocket`: its streaming calls.

pub mod gateway;
pub mod http;
pub mod metrics;
pub mod websocket;
