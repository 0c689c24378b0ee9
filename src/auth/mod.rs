//! Authentication and authorization, as etcd's `server/auth`: users with bcrypt-hashed
//! passwords, roles granting read or write on key ranges, the root user and role, the auth
//! revision, and simple tokens. gRPC stays in `v3rpc::auth`, which translates.
//!
//! - [`store`]: users, roles, the enabled flag and the auth revision; the checks every request
//!   goes through;
//! - [`perm`]: a user's key-range permissions, merged for the checks;
//! - [`jwt`]: JWT tokens (simple tokens are the store's);
//! - [`cert`]: the user a client certificate stands for; `der`: the little DER it and [`jwt`]
//!   read;
//! - [`codec`]: the auth state's persisted form (etcd's `authpb`); [`file`]: a member alone's
//!   auth file.

pub mod cert;
pub mod codec;
mod der;
pub mod file;
pub mod jwt;
pub mod perm;
pub mod store;

pub use store::{AuthInfo, AuthState, AuthStore, Op, PermType, Permission};
