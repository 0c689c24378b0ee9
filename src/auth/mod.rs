//! Authentication and authorization, as etcd's `server/auth`: users with bcrypt-hashed
//! passwords, roles granting read or write on key ranges, the root user and role, the auth
//! revision, and simple tokens. gRPC stays in `v3rpc::auth`, which translates.

pub mod cert;
pub mod codec;
mod der;
pub mod file;
pub mod jwt;
pub mod perm;
pub mod store;

pub use store::{AuthInfo, AuthState, AuthStore, Op, PermType, Permission};
