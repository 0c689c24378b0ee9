//! Operating the server (issue 8), in rooms: auto-compaction (`compaction`), the HTTP endpoints
//! beside gRPC (`http`), /metrics (`metrics`), what maintenance sees (`maintenance`), etcd's log
//! lines (`logs`), and the benchmarks' floor server (`floor`).

mod compaction;
mod floor;
mod http;
mod logs;
mod maintenance;
mod metrics;

pub use http::http_get;
pub use metrics::{ETCD_BASIC_METRICS, has_family};
