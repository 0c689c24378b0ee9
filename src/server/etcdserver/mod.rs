//! The member (etcd's `etcdserver`): the state its services share and every change of it.
//!
//! - `member`: the member itself (etcd's `EtcdServer`); `bootstrap`: opening it from its data
//!   directory and starting its Raft node; `etcd_data_dir`: starting on an etcd member's data
//!   directory; `force_new_cluster`: etcd's `--force-new-cluster`.
//! - `submit`: the one entry point of changes of state; `apply`: applying them (in place on a
//!   member alone, from the Raft log in a cluster); `apply_auth`: their permission checks;
//!   `convert`: wire types to the store's.
//! - `alarm`: alarms and the space quota; `compactor`: auto-compaction; `blocking`: long
//!   store walks off the async runtime.
//! - `grow`: a member alone growing into a cluster; `forward`: what the leader serves of the
//!   requests other members forward to it.

pub mod alarm;
pub mod apply;
pub mod apply_auth;
pub mod blocking;
pub mod bootstrap;
pub mod compactor;
pub mod convert;
pub mod etcd_data_dir;
pub mod force_new_cluster;
pub mod forward;
pub mod grow;
pub mod leader;
pub mod lessor;
pub mod member;
pub mod membership;
pub mod submit;
