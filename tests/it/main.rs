//! Integration tests for mem_etcd. See support.rs for the harness and the environment knobs.

#[macro_use]
mod support;

mod api;
mod cluster;
mod kubernetes;
mod operations;
mod security;
mod storage;
mod tenancy;
mod tools;
