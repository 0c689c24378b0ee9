//! Auth and TLS: the etcdctl auth battery, every RPC as every kind of caller, the listeners
//! and certificates.

mod auth;
mod auth_matrix;
pub mod tls;
