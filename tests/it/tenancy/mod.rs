//! Hosted control planes sharing one store (`--tenant`, issue 50), each isolation property next
//! to what one shared etcd 3.6 does in the same steps: the space quota (`quota`).

mod quota;
