//! `/metrics`: etcd's metric names where the meaning matches, so that etcd dashboards and
//! alerts work, plus mem_etcd's own (`mem_etcd_*`): keys and bytes per partition, WAL batching,
//! leases. Gauges are read from the store, hub, lessor and WAL when scraped; the gRPC counters
//! are kept here, updated by the HTTP layer for every call.
//!
//! Where mem_etcd counts differently from etcd: `etcd_mvcc_{range,put,delete,txn}_total` count
//! client calls of each kind (etcd counts its internal reads too), and the db size metrics are
//! the store's estimate of the memory it holds.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use super::grpc_stats::{CODES, METHODS};
use super::member::Member;
use crate::metrics::{Histogram, header, label, single};

/// A cluster member's Raft figures, with etcd's names.
fn raft_metrics(o: &mut String, r: &crate::raft::RaftNode) {
    use std::sync::atomic::Ordering::Relaxed;
    let status = r.status();
    let (last_index, applied) = (status.last_index, status.applied_index);
    single(
        o,
        "etcd_server_leader_changes_seen_total",
        "The number of leader changes seen.",
        "counter",
        r.leader_changes.load(Relaxed) as usize,
    );
    single(
        o,
        "etcd_server_proposals_committed_total",
        "The total number of consensus proposals committed.",
        "gauge",
        r.committed_index() as usize,
    );
    single(
        o,
        "etcd_server_proposals_applied_total",
        "The total number of consensus proposals applied.",
        "gauge",
        applied as usize,
    );
    single(
        o,
        "etcd_server_proposals_pending",
        "The current number of pending proposals to commit.",
        "gauge",
        r.proposals_pending.load(Relaxed) as usize,
    );
    single(
        o,
        "etcd_server_proposals_failed_total",
        "The total number of failed proposals seen.",
        "counter",
        r.proposals_failed.load(Relaxed) as usize,
    );
    single(
        o,
        "mem_etcd_raft_last_log_index",
        "The index of this member's last Raft log entry.",
        "gauge",
        last_index as usize,
    );
    r.peer_stats().render(o);
}

/// The whole `/metrics` page.
pub fn render(shared: &Member) -> String {
    let mut out = String::with_capacity(16 << 10);
    let o = &mut out;
    let store = &shared.store;
    // A member alone always leads.
    let (has_leader, is_leader, is_learner) = shared.raft().map_or((true, true, false), |r| {
        let role = *r.role().borrow();
        (role.leader.is_some(), role.is_leader, role.is_learner)
    });
    single(
        o,
        "etcd_server_has_leader",
        "Whether or not a leader exists. 1 is existence, 0 is not.",
        "gauge",
        usize::from(has_leader),
    );
    single(
        o,
        "etcd_server_is_leader",
        "Whether or not this member is a leader. 1 if is, 0 otherwise.",
        "gauge",
        usize::from(is_leader),
    );
    single(
        o,
        "etcd_server_is_learner",
        "Whether or not this member is a learner. 1 if is, 0 otherwise.",
        "gauge",
        usize::from(is_learner),
    );
    if let Some(r) = shared.raft() {
        raft_metrics(o, r);
    }
    let v = &shared.config.emulated_version;
    header(
        o,
        "etcd_server_version",
        "Which version is running. 1 for 'server_version' label with current version.",
        "gauge",
    );
    let _ = writeln!(o, "etcd_server_version{{server_version=\"{}\"}} 1", label(v));
    let minor = shared.config.cluster_version();
    header(
        o,
        "etcd_cluster_version",
        "Which version is running. 1 for 'cluster_version' label with current cluster version",
        "gauge",
    );
    let _ = writeln!(o, "etcd_cluster_version{{cluster_version=\"{}\"}} 1", label(&minor));
    let size = store.size_bytes();
    single(
        o,
        "etcd_mvcc_db_total_size_in_bytes",
        "Total size of the underlying database physically allocated in bytes.",
        "gauge",
        size,
    );
    single(
        o,
        "etcd_mvcc_db_total_size_in_use_in_bytes",
        "Total size of the underlying database logically in use in bytes.",
        "gauge",
        size,
    );
    single(
        o,
        "etcd_server_quota_backend_bytes",
        "Current backend storage quota size in bytes.",
        "gauge",
        shared.alarms.quota_bytes(),
    );
    single(
        o,
        "etcd_debugging_mvcc_keys_total",
        "Total number of keys.",
        "gauge",
        store.live_keys(),
    );
    single(
        o,
        "etcd_debugging_mvcc_current_revision",
        "The current revision of store.",
        "gauge",
        store.current_revision(),
    );
    // etcd reports -1 before the first compaction.
    let compacted = store.compact_revision();
    single(
        o,
        "etcd_debugging_mvcc_compact_revision",
        "The revision of the last compaction in store.",
        "gauge",
        if compacted == 0 { -1 } else { compacted },
    );
    let g = &shared.grpc_stats;
    for (name, method, help) in [
        ("etcd_mvcc_range_total", "Range", "Total number of ranges seen by this member."),
        ("etcd_mvcc_put_total", "Put", "Total number of puts seen by this member."),
        ("etcd_mvcc_delete_total", "DeleteRange", "Total number of deletes seen by this member."),
        ("etcd_mvcc_txn_total", "Txn", "Total number of txns seen by this member."),
    ] {
        single(o, name, help, "counter", g.handled_total(method));
    }
    let (streams, watchers, slow) = shared.hub.counts();
    single(
        o,
        "etcd_debugging_mvcc_watch_stream_total",
        "Total number of watch streams.",
        "gauge",
        streams,
    );
    single(o, "etcd_debugging_mvcc_watcher_total", "Total number of watchers.", "gauge", watchers);
    single(
        o,
        "etcd_debugging_mvcc_slow_watcher_total",
        "Total number of unsynced slow watchers.",
        "gauge",
        slow,
    );
    single(o, "mem_etcd_leases", "Leases alive.", "gauge", shared.lessor.len());
    // Every connection, watch stream, keep-alive stream and snapshot runs as a task. A task
    // that outlives its client (a stream nobody ends, a send that waits for good) holds memory
    // and keeps the store's state alive with nothing else to show for it; this count is how
    // the hostile-input tests (and operators) see such a leak.
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        single(
            o,
            "mem_etcd_runtime_alive_tasks",
            "Tasks alive in mem_etcd's async runtime (mem_etcd's own, not an etcd metric): \
             connections, streams and background loops. Growth with no clients is a leak.",
            "gauge",
            rt.metrics().num_alive_tasks(),
        );
    }

    header(
        o,
        "mem_etcd_partition_keys",
        "Live keys per partition (Kubernetes resource prefix; \"\" is the default partition).",
        "gauge",
    );
    let parts = store.partition_stats();
    for (prefix, keys, _) in &parts {
        let _ = writeln!(
            o,
            "mem_etcd_partition_keys{{prefix=\"{}\"}} {keys}",
            label(&String::from_utf8_lossy(prefix))
        );
    }
    header(
        o,
        "mem_etcd_partition_bytes",
        "Bytes of keys, values and index held per partition.",
        "gauge",
    );
    for (prefix, _, bytes) in &parts {
        let _ = writeln!(
            o,
            "mem_etcd_partition_bytes{{prefix=\"{}\"}} {bytes}",
            label(&String::from_utf8_lossy(prefix))
        );
    }

    if let Some(w) = store.wal() {
        let st = &w.stats;
        st.fsync_seconds.render(
            o,
            "etcd_disk_wal_fsync_duration_seconds",
            "The latency distributions of fsync called by WAL.",
        );
        single(
            o,
            "etcd_disk_wal_write_bytes_total",
            "Total number of bytes written in WAL.",
            "gauge",
            st.bytes.load(Ordering::Relaxed),
        );
        single(
            o,
            "mem_etcd_wal_batches_total",
            "WAL batches written (one write per file touched, then one fdatasync in fsync mode).",
            "counter",
            st.batches.load(Ordering::Relaxed),
        );
        single(
            o,
            "mem_etcd_wal_revisions_total",
            "Revisions written to the WAL.",
            "counter",
            st.revisions.load(Ordering::Relaxed),
        );
        st.batch_revisions.render(
            o,
            "mem_etcd_wal_batch_revisions",
            "Revisions per WAL batch (group commit).",
        );
    } else {
        // No WAL: an empty histogram keeps dashboards' queries valid.
        Histogram::seconds().render(
            o,
            "etcd_disk_wal_fsync_duration_seconds",
            "The latency distributions of fsync called by WAL.",
        );
    }

    header(
        o,
        "grpc_server_started_total",
        "Total number of RPCs started on the server.",
        "counter",
    );
    for (i, (service, method, kind)) in METHODS.iter().enumerate() {
        let n = g.started[i].load(Ordering::Relaxed);
        if n > 0 {
            let _ = writeln!(
                o,
                "grpc_server_started_total{{grpc_method=\"{method}\",grpc_service=\"{service}\",grpc_type=\"{}\"}} {n}",
                kind.label()
            );
        }
    }
    header(
        o,
        "grpc_server_handled_total",
        "Total number of RPCs completed on the server, regardless of success or failure.",
        "counter",
    );
    for (i, (service, method, kind)) in METHODS.iter().enumerate() {
        for (c, code) in CODES.iter().enumerate() {
            let n = g.handled[i * CODES.len() + c].load(Ordering::Relaxed);
            if n > 0 {
                let _ = writeln!(
                    o,
                    "grpc_server_handled_total{{grpc_code=\"{code}\",grpc_method=\"{method}\",grpc_service=\"{service}\",grpc_type=\"{}\"}} {n}",
                    kind.label()
                );
            }
        }
    }
    out
}
