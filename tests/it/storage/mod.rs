//! What a member keeps: the WAL across crashes and restarts, snapshots and backups, and the
//! history checker over one server and a cluster.

pub mod durability;
mod history;
mod snapshot;
