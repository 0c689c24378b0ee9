//! Command-line configuration, with etcd's flag names and `ETCD_*` environment variables so
//! mem_etcd can stand in for etcd in scripts, manifests and test frameworks.
//!
//! - [`flags`]: the flags as clap parses them, grouped by concern ([`Flags`]).
//! - [`compat`]: etcd's tables: flags with no effect here, deprecated names, feature gates.
//! - [`loader`]: Go's flag syntax, the `ETCD_*` variables and the YAML `--config-file`.
//! - [`runtime`]: the [`Config`] the server runs with, derived once from the flags.
//! - [`options`]: what that configuration means for Raft, the member's ids, auto-compaction.

pub mod compat;
pub mod flags;
pub mod loader;
pub mod options;
pub mod runtime;
#[cfg(test)]
mod tests;

pub use crate::duration::parse_duration;
pub use compat::{feature_gate_default, go_bool};
pub use flags::member::ClusterState;
pub use flags::storage::{AutoCompactionMode, TenantSpec};
pub use flags::tls::TlsVersion;
pub use flags::{DEFAULT_SNAPSHOT_CATCHUP_ENTRIES, DEFAULT_WARNING_UNARY_REQUEST_DURATION, Flags};
pub(crate) use loader::go_style;
pub use loader::{LoadError, Loaded, command, from_flags, load};
pub use options::{AutoCompaction, Founders};
pub use runtime::{AutoTls, Config, DefaultHost, data_dir};
