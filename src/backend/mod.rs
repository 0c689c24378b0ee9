//! etcd's own storage format, read and written so that data can move between etcd and
//! mem_etcd with its revisions: etcd keeps its state in a bbolt database (`member/snap/db`),
//! and `etcdctl snapshot save` writes one. mem_etcd never stores data this way, but its
//! Maintenance.Snapshot streams one (so `etcdutl snapshot status|restore` read what
//! `etcdctl snapshot save` saves from it), it reads one into a data directory
//! (`mem_etcd snapshot restore`), and turns backups older mem_etcds saved in their own format
//! into one (`mem_etcd snapshot export`).
//!
//! - [`bbolt`]: the page format.
//! - [`schema`]: etcd's buckets in mem_etcd's terms.
//! - [`etcd_wal`]: how far etcd's WAL goes, for starting on an etcd data directory.

pub mod bbolt;
pub mod etcd_wal;
pub mod schema;
