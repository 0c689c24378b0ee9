//! etcd's own storage format, read and written so that data can move between etcd and
//! mem_etcd with its revisions: etcd keeps its state in a bbolt database (`member/snap/db`),
//! and `etcdctl snapshot save` writes one. mem_etcd never stores data this way; it reads an
//! etcd snapshot into a data directory (`mem_etcd snapshot restore`) and writes one from a
//! mem_etcd backup (`mem_etcd snapshot export`), for `etcdutl snapshot restore`.
//!
//! - [`bbolt`]: the page format.
//! - [`schema`]: etcd's buckets in mem_etcd's terms.

pub mod bbolt;
pub mod schema;
