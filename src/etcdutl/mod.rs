//! The commands beside the server, as etcd keeps its own in etcdutl (and etcdctl's
//! make-mirror): `mem_etcd snapshot restore|status|export` ([`snapshot`]), `mem_etcd check
//! copy` ([`check`]) and `mem_etcd follow` ([`follow`], with its [`lag`] and [`auth_sync`]),
//! which reach stores as etcdctl does ([`client`]). `main` dispatches to them before it
//! parses the server's flags.

mod auth_sync;
pub mod check;
pub mod client;
pub mod follow;
mod lag;
pub mod snapshot;
