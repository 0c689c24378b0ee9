//! Integration tests for mem_etcd. See support.rs for the harness and the environment knobs.

#[macro_use]
mod support;

mod auth;
mod auth_matrix;
mod cluster;
mod cluster_harness;
mod consistency;
mod deploy;
mod differential;
mod discovery;
mod durability;
mod etcdctl;
mod failover;
mod faults;
mod flags;
mod force_new_cluster;
mod gateway;
mod grow;
mod history;
mod hostile;
mod k8s_e2e;
mod k8s_shapes;
mod kubeadm;
mod kv;
mod lease;
mod limits;
mod lock_election;
mod membership;
mod model;
mod operations;
mod proxy;
mod services;
mod snapshot;
mod tls;
mod txn;
mod watch;
mod watch_diff;
mod watch_stress;
