//! The tools around the server: etcdctl next to etcd's, the JSON gateway and etcd's proxies,
//! the flags, the files in `deploy/`.

mod deploy;
pub mod etcdctl;
pub mod flags;
pub mod gateway;
mod proxy;
