//! The gRPC server: etcd's v3 services over tonic (etcd's `etcdserver/api/v3rpc`).
//!
//! Services are thin: check the request and who sent it, then read the store, or hand a change
//! of state to [`submit`] (which applies it in place on a member alone and proposes it in a
//! cluster), fill the header, translate errors through [`status`]. Methods this server does not
//! know answer UNIMPLEMENTED.

pub mod alarm;
pub mod apply;
pub mod apply_auth;
pub mod auth;
pub mod blocking;
pub mod bootstrap;
pub mod cluster;
pub mod codec;
pub mod compactor;
pub mod concurrency;
pub mod convert;
pub mod discovery;
pub mod election;
pub mod etcd_data_dir;
pub mod force_new_cluster;
pub mod forward;
pub mod gateway;
pub mod grow;
pub mod grpc_stats;
pub mod health;
pub mod http;
pub mod kv;
pub mod lease;
pub mod lock;
pub mod maintenance;
pub mod member;
pub mod metrics;
pub mod request_stats;
pub mod serve;
pub mod status;
pub mod submit;
pub mod tls;
pub mod watch;
pub mod websocket;

pub use member::Member;
pub use serve::{Listener, serve};
