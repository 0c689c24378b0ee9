//! Clusters of 3 or 5 members next to etcd's: replication, membership, failover and faults,
//! growth from a member alone, discovery. `harness` starts and drives them.

mod discovery;
mod failover;
mod faults;
mod force_new_cluster;
pub mod grow;
pub mod harness;
mod membership;
mod replication;
