//! Between members (etcd's `rafthttp`): what one member's node sends another and how it gets
//! there.
//!
//! - [`network`]: the client side: openraft's network over gRPC, one channel per peer, the
//!   `Append` stream, and what each peer's traffic counts;
//! - [`peer`]: the server side: the peer gRPC service, which hands what arrives to the node;
//! - [`stream`]: the `Append` and `Forward` streams, both sides: the messages of every write as
//!   length-prefixed frames on connections of their own;
//! - [`codec`]: openraft's types on the wire;
//! - [`stamp`]: the caller's cluster and member ids on every call and stream, and their check;
//! - [`tls`]: peer TLS (`--peer-*` flags);
//! - [`probing`]: which peers are reachable, and since when;
//! - [`faults`]: network faults injected by tests.

pub mod codec;
pub mod faults;
pub mod network;
pub mod peer;
pub mod probing;
pub mod stamp;
pub mod stream;
pub mod tls;
