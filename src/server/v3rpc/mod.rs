//! The gRPC services (etcd's `etcdserver/api/v3rpc`, `v3lock`, `v3election`).
//!
//! Handlers are thin: check the request and who sent it (`auth`), then read the store or call
//! the member (`etcdserver`), fill the header, and translate errors through the one table in
//! `status`. They never see whether their member is alone or in a cluster. Methods this server
//! does not know answer UNIMPLEMENTED.
//!
//! - `kv`, `watch`, `lease`, `maintenance`, `cluster`, `auth`: etcd's six services;
//!   `request_stats`: the slow-request log line of KV calls.
//! - `lock`, `election`: etcd's Lock and Election, made of KV, Lease and Watch calls
//!   (`concurrency`).
//! - `health`: gRPC's health service; `codec`: the protobuf codec every service uses.
//! - `floor`: a KV that answers without a store, served only to measure the stack's own cost.

pub mod auth;
pub mod cluster;
pub mod codec;
pub mod concurrency;
pub mod election;
pub mod floor;
pub mod health;
pub mod kv;
pub mod lease;
pub mod lock;
pub mod maintenance;
pub mod request_stats;
pub mod status;
pub mod watch;
