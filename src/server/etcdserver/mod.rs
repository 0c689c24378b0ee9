//! The member (etcd's `etcdserver`): the state its services share and every change of it.
//!
//! - `member`: the member itself (etcd's `EtcdServer`); `bootstrap/`: opening it from its data
//!   directory and starting its Raft node, starting on an etcd member's data directory
//!   (`etcd_data_dir`), etcd's `--force-new-cluster` (`force_new_cluster`).
//! - `submit`: the one entry point of changes of state; `apply/`: applying them (in place on a
//!   member alone, from the Raft log in a cluster), and their permission checks (`auth`, etcd's
//!   `apply_auth`); `convert`: wire types to the store's.
//! - `alarm`: alarms and the space quota; `tenant`: hosted control planes sharing the store,
//!   each with its own quota and figures; `compactor`: auto-compaction; `blocking`: long
//!   store walks off the async runtime.
//! - `grow`: a member alone growing into a cluster; `forward`: what the leader serves of the
//!   requests other members forward to it.

pub(crate) mod alarm;
pub(crate) mod apply;
pub(crate) mod blocking;
pub(crate) mod bootstrap;
pub(crate) mod compactor;
pub(crate) mod convert;
pub(crate) mod forward;
pub(crate) mod grow;
pub(crate) mod leader;
pub mod lessor;
pub mod member;
pub(crate) mod membership;
pub(crate) mod submit;
pub(crate) mod tenant;
