//! Hosted control planes sharing one store (`--tenant`, `--tenants-from-auth`; issue 50), each
//! isolation property next to what one shared etcd 3.6 does in the same steps: a tenant's own
//! compaction under auth (`compaction`), the space quota (`quota`), removing a tenant while
//! another writes (`removal`), tenants that come and go with their users (`runtime`).

mod compaction;
mod quota;
mod removal;
mod runtime;
