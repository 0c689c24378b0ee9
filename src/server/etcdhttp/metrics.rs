//! `/metrics`: etcd's metric names where the meaning matches, so that etcd dashboards and
//! alerts work, plus mem_etcd's own (`mem_etcd_*`): keys and bytes per partition, WAL batching,
//! leases. Gauges are read from the store, hub, lessor and WAL when scraped; the gRPC call
//! counters are `metrics::grpc`'s, kept by the member and counted by `etcdhttp::http` in front
//! of every route, and only reported here.
//!
//! Where mem_etcd counts differently from etcd: `etcd_mvcc_{range,put,delete,txn}_total` count
//! client calls of each kind (etcd counts its internal reads too), and the db size metrics are
//! the store's estimate of the memory it holds.
//!
//! Every name of etcd's basic list is served, so that what scrapes etcd finds them all; where
//! mem_etcd has nothing that the metric measures (Go's garbage collector, bbolt's internals, the
//! v2 store, the gRPC proxy), it says so with 0 or an empty histogram, never a made-up figure
//! (deploy/README.md lists them).

use std::fmt::Write;
use std::sync::atomic::Ordering;

use crate::metrics::grpc::{CLIENT_VERSIONS, CODES, METHODS};
use crate::metrics::{CLIENT_GRPC_BYTES, Histogram, SnapshotStats, header, label, single};
use crate::server::etcdserver::member::Member;

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

/// A member alone's figures under the Raft names: it became the leader once, at start, and
/// commits each change as it applies it (no consensus to wait for, so none pending or failed).
fn alone_proposals(o: &mut String, shared: &Member) {
    let applied = shared.metrics.applies.load(Ordering::Relaxed);
    single(
        o,
        "etcd_server_leader_changes_seen_total",
        "The number of leader changes seen.",
        "counter",
        1,
    );
    single(
        o,
        "etcd_server_proposals_committed_total",
        "The total number of consensus proposals committed.",
        "gauge",
        applied,
    );
    single(
        o,
        "etcd_server_proposals_applied_total",
        "The total number of consensus proposals applied.",
        "gauge",
        applied,
    );
    single(
        o,
        "etcd_server_proposals_pending",
        "The current number of pending proposals to commit.",
        "gauge",
        0,
    );
    single(
        o,
        "etcd_server_proposals_failed_total",
        "The total number of failed proposals seen.",
        "counter",
        0,
    );
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
    match shared.raft() {
        Some(r) => raft_metrics(o, r),
        None => alone_proposals(o, shared),
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
        wal_durations(o, &st.write_seconds, &st.commit_seconds);
    } else {
        // No WAL: empty histograms keep dashboards' queries valid.
        Histogram::seconds().render(
            o,
            "etcd_disk_wal_fsync_duration_seconds",
            "The latency distributions of fsync called by WAL.",
        );
        single(
            o,
            "etcd_disk_wal_write_bytes_total",
            "Total number of bytes written in WAL.",
            "gauge",
            0,
        );
        wal_durations(o, &Histogram::seconds(), &Histogram::seconds());
    }
    etcd_basic(o, shared);

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
    per_method(
        o,
        "grpc_server_msg_received_total",
        "Total number of RPC stream messages received on the server.",
        &g.msg_received,
    );
    per_method(
        o,
        "grpc_server_msg_sent_total",
        "Total number of gRPC stream messages sent by the server.",
        &g.msg_sent,
    );
    if shared.config.extensive_metrics() {
        let name = "grpc_server_handling_seconds";
        header(
            o,
            name,
            "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
            "histogram",
        );
        for (i, (service, method, kind)) in METHODS.iter().enumerate() {
            let h = &g.handling[i];
            if h.count() > 0 {
                let labels = format!(
                    "grpc_method=\"{method}\",grpc_service=\"{service}\",grpc_type=\"{}\"",
                    kind.label()
                );
                h.render_series(o, name, &labels);
            }
        }
    }
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

/// A counter per gRPC method, with go-grpc-prometheus' labels (the methods called so far).
fn per_method(o: &mut String, name: &str, help: &str, counts: &[std::sync::atomic::AtomicU64]) {
    header(o, name, help, "counter");
    for (i, (service, method, kind)) in METHODS.iter().enumerate() {
        let n = counts[i].load(Ordering::Relaxed);
        if n > 0 {
            let _ = writeln!(
                o,
                "{name}{{grpc_method=\"{method}\",grpc_service=\"{service}\",grpc_type=\"{}\"}} {n}",
                kind.label()
            );
        }
    }
}

/// The WAL's write and commit durations (etcd's WAL write and backend commit).
fn wal_durations(o: &mut String, write: &Histogram, commit: &Histogram) {
    write.render(
        o,
        "etcd_disk_wal_write_duration_seconds",
        "The latency distributions of write called by WAL.",
    );
    commit.render(
        o,
        "etcd_disk_backend_commit_duration_seconds",
        "The latency distributions of commit called by backend.",
    );
}

/// The rest of etcd's basic metrics.
fn etcd_basic(o: &mut String, shared: &Member) {
    use std::sync::atomic::Ordering::Relaxed;
    let m = &shared.metrics;
    let empty = Histogram::seconds;
    let id = shared.member_id;

    // Server.
    single(
        o,
        "etcd_debugging_auth_revision",
        "The current revision of auth store.",
        "gauge",
        shared.auth.revision(),
    );
    header(
        o,
        "etcd_server_id",
        "Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID.",
        "gauge",
    );
    let _ = writeln!(o, "etcd_server_id{{server_id=\"{id:x}\"}} 1");
    // mem_etcd is not built with Go: "none", and 0 (it is not running with that version).
    header(
        o,
        "etcd_server_go_version",
        "Which Go version server is running with. 1 for 'server_go_version' label with current version.",
        "gauge",
    );
    let _ = writeln!(o, "etcd_server_go_version{{server_go_version=\"none\"}} 0");
    m.render_durations(o);
    single(
        o,
        "etcd_server_slow_apply_total",
        "The total number of slow apply requests (likely overloaded from slow disk).",
        "counter",
        m.slow_applies.load(Relaxed),
    );
    header(
        o,
        "etcd_server_client_requests_total",
        "The total number of client requests per client version.",
        "counter",
    );
    let g = &shared.grpc_stats;
    for (t, kind) in ["unary", "stream"].iter().enumerate() {
        for (v, version) in CLIENT_VERSIONS.iter().enumerate() {
            let n = g.client_requests[t][v].load(Relaxed);
            if n > 0 {
                let _ = writeln!(
                    o,
                    "etcd_server_client_requests_total{{client_api_version=\"{version}\",type=\"{kind}\"}} {n}"
                );
            }
        }
    }
    single(
        o,
        "etcd_server_health_success",
        "The total number of successful health checks",
        "counter",
        m.health_success.load(Relaxed),
    );
    single(
        o,
        "etcd_server_health_failures",
        "The total number of failed health checks",
        "counter",
        m.health_failures.load(Relaxed),
    );
    single(
        o,
        "etcd_server_learner_promote_successes",
        "The total number of successful learner promotions while this member is leader.",
        "counter",
        m.learner_promotions.load(Relaxed),
    );
    single(
        o,
        "etcd_server_snapshot_apply_in_progress_total",
        "1 if the server is applying the incoming snapshot. 0 if none.",
        "gauge",
        m.snapshot_installing.load(Relaxed),
    );
    // Raft's heartbeats and read indexes are openraft's, which counts neither failure.
    single(
        o,
        "etcd_server_heartbeat_send_failures_total",
        "The total number of leader heartbeat send failures (likely overloaded from slow disk).",
        "counter",
        0,
    );
    single(
        o,
        "etcd_server_slow_read_indexes_total",
        "The total number of pending read indexes not in sync with leader's or timed out read index requests.",
        "counter",
        0,
    );
    single(
        o,
        "etcd_server_read_indexes_failed_total",
        "The total number of failed read indexes seen.",
        "counter",
        0,
    );

    // Leases.
    let ls = &shared.lessor.stats;
    single(
        o,
        "etcd_debugging_lease_granted_total",
        "The total number of granted leases.",
        "counter",
        ls.granted.load(Relaxed),
    );
    single(
        o,
        "etcd_debugging_lease_renewed_total",
        "The number of renewed leases seen by the leader.",
        "counter",
        ls.renewed.load(Relaxed),
    );
    single(
        o,
        "etcd_debugging_lease_revoked_total",
        "The total number of revoked leases.",
        "counter",
        m.leases_revoked.load(Relaxed),
    );
    ls.ttls.render(o, "etcd_debugging_lease_ttl_total", "Bucketed histogram of lease TTLs.");
    single(
        o,
        "etcd_debugging_server_lease_expired_total",
        "The total number of expired leases.",
        "counter",
        ls.expired.load(Relaxed),
    );

    // MVCC.
    single(
        o,
        "etcd_debugging_mvcc_events_total",
        "Total number of events sent by this member.",
        "counter",
        m.watch_events.load(Relaxed),
    );
    // The hub queues revisions per watcher, not events: it has no count of events to send.
    single(
        o,
        "etcd_debugging_mvcc_pending_events_total",
        "Total number of pending events to be sent.",
        "gauge",
        0,
    );
    single(
        o,
        "etcd_debugging_mvcc_total_put_size_in_bytes",
        "The total size of put kv pairs seen by this member.",
        "gauge",
        m.put_bytes.load(Relaxed),
    );
    // A compaction frees the versions of every partition in one step, in memory: that step is
    // the index compaction; there is no separate database compaction pausing between batches.
    m.compaction_ms.render(
        o,
        "etcd_debugging_mvcc_index_compaction_pause_duration_milliseconds",
        "Bucketed histogram of index compaction pause duration.",
    );
    m.compaction_ms.render(
        o,
        "etcd_debugging_mvcc_db_compaction_total_duration_milliseconds",
        "Bucketed histogram of db compaction total duration.",
    );
    Histogram::millis().render(
        o,
        "etcd_debugging_mvcc_db_compaction_pause_duration_milliseconds",
        "Bucketed histogram of db compaction pause duration.",
    );
    single(
        o,
        "etcd_debugging_mvcc_db_compaction_last",
        "The unix time of the last db compaction. Resets to 0 on start.",
        "gauge",
        m.compaction_last.load(Relaxed),
    );
    single(
        o,
        "etcd_debugging_mvcc_db_compaction_keys_total",
        "Total number of db keys compacted.",
        "counter",
        0,
    );
    single(
        o,
        "etcd_mvcc_db_open_read_transactions",
        "The number of currently open read transactions",
        "gauge",
        0,
    );
    m.hash_seconds.render(
        o,
        "etcd_mvcc_hash_duration_seconds",
        "The latency distribution of storage hash operation.",
    );
    m.hash_rev_seconds.render(
        o,
        "etcd_mvcc_hash_rev_duration_seconds",
        "The latency distribution of storage hash by revision operation.",
    );

    // Disk and snapshots.
    m.defrag_seconds.render(
        o,
        "etcd_disk_backend_defrag_duration_seconds",
        "The latency distribution of backend defragmentation.",
    );
    single(
        o,
        "etcd_disk_defrag_inflight",
        "Whether or not defrag is active on the member. 1 means active, 0 means not.",
        "gauge",
        0,
    );
    m.snapshot_seconds.render(
        o,
        "etcd_disk_backend_snapshot_duration_seconds",
        "The latency distribution of backend snapshots.",
    );
    for (name, help) in [
        (
            "etcd_debugging_disk_backend_commit_rebalance_duration_seconds",
            "The latency distributions of commit.rebalance called by bboltdb backend.",
        ),
        (
            "etcd_debugging_disk_backend_commit_spill_duration_seconds",
            "The latency distributions of commit.spill called by bboltdb backend.",
        ),
        (
            "etcd_debugging_disk_backend_commit_write_duration_seconds",
            "The latency distributions of commit.write called by bboltdb backend.",
        ),
        (
            "etcd_snap_db_fsync_duration_seconds",
            "The latency distributions of fsyncing .snap.db file",
        ),
        (
            "etcd_snap_db_save_total_duration_seconds",
            "The total latency distributions of v3 snapshot save",
        ),
    ] {
        empty().render(o, name, help);
    }
    // A member alone's snapshots are its WAL's; a cluster member (no WAL) has the Raft ones.
    let snaps: &SnapshotStats = shared.store.wal().map_or(&m.snapshots, |w| &w.stats.snapshots);
    snaps.marshal_seconds.render(
        o,
        "etcd_debugging_snap_save_marshalling_duration_seconds",
        "The marshalling cost distributions of save called by snapshot.",
    );
    snaps.save_seconds.render(
        o,
        "etcd_debugging_snap_save_total_duration_seconds",
        "The total latency distributions of save called by snapshot.",
    );
    snaps.fsync_seconds.render(
        o,
        "etcd_snap_fsync_duration_seconds",
        "The latency distributions of fsync called by snap.",
    );

    // etcd's v2 store and gRPC proxy, neither of which mem_etcd has.
    single(o, "etcd_debugging_store_expires_total", "Total number of expired keys.", "counter", 0);
    single(
        o,
        "etcd_debugging_store_watch_requests_total",
        "Total number of incoming watch requests (new or reestablished).",
        "counter",
        0,
    );
    single(o, "etcd_debugging_store_watchers", "Count of currently active watchers.", "gauge", 0);
    header(
        o,
        "etcd_debugging_store_writes_total",
        "Total number of writes (e.g. set/compareAndDelete) seen by this member.",
        "counter",
    );
    let _ = writeln!(o, "etcd_debugging_store_writes_total{{action=\"set\"}} 0");
    for (name, help, kind) in [
        ("etcd_grpc_proxy_cache_hits_total", "Total number of cache hits", "gauge"),
        ("etcd_grpc_proxy_cache_keys_total", "Total number of keys/ranges cached", "gauge"),
        ("etcd_grpc_proxy_cache_misses_total", "Total number of cache misses", "gauge"),
        ("etcd_grpc_proxy_events_coalescing_total", "Total number of events coalescing", "counter"),
        (
            "etcd_grpc_proxy_watchers_coalescing_total",
            "Total number of current watchers coalescing",
            "gauge",
        ),
    ] {
        single(o, name, help, kind, 0);
    }

    // Network.
    single(
        o,
        "etcd_network_client_grpc_received_bytes_total",
        "The total number of bytes received from grpc clients.",
        "counter",
        CLIENT_GRPC_BYTES.received.load(Relaxed),
    );
    single(
        o,
        "etcd_network_client_grpc_sent_bytes_total",
        "The total number of bytes sent to grpc clients.",
        "counter",
        CLIENT_GRPC_BYTES.sent.load(Relaxed),
    );
    header(o, "etcd_network_known_peers", "The current number of known peers.", "gauge");
    let members: Vec<u64> =
        shared.raft().map_or_else(|| vec![id], |r| r.membership().1.into_keys().collect());
    for peer in &members {
        let _ = writeln!(o, "etcd_network_known_peers{{Local=\"{id:x}\",Remote=\"{peer:x}\"}} 1");
    }
    header(
        o,
        "etcd_network_active_peers",
        "The current number of active peer connections.",
        "gauge",
    );
    if let Some(r) = shared.raft() {
        for peer in members.iter().filter(|p| **p != id) {
            let active = usize::from(r.active_since(*peer).is_some());
            let _ = writeln!(
                o,
                "etcd_network_active_peers{{Local=\"{id:x}\",Remote=\"{peer:x}\"}} {active}"
            );
        }
    }

    // The process.
    let (fds, fd_limit) = crate::metrics::file_descriptors();
    single(o, "os_fd_used", "The number of used file descriptors.", "gauge", fds);
    single(o, "os_fd_limit", "The file descriptor limit.", "gauge", fd_limit);
    single(
        o,
        "promhttp_metric_handler_requests_in_flight",
        "Current number of scrapes being served.",
        "gauge",
        m.scrapes_in_flight.load(Relaxed),
    );
    header(
        o,
        "promhttp_metric_handler_requests_total",
        "Total number of scrapes by HTTP status code.",
        "counter",
    );
    let _ = writeln!(
        o,
        "promhttp_metric_handler_requests_total{{code=\"200\"}} {}",
        m.scrapes.load(Relaxed)
    );
    let _ = writeln!(o, "promhttp_metric_handler_requests_total{{code=\"500\"}} 0");
    let _ = writeln!(o, "promhttp_metric_handler_requests_total{{code=\"503\"}} 0");
    go_runtime(o);
}

/// Go's runtime metrics, which etcd's registry carries: mem_etcd's nearest figures where it
/// has one (tasks for goroutines, OS threads, worker threads, resident memory), and 0 for the
/// garbage collector and Go's allocator, which it does not have.
fn go_runtime(o: &mut String) {
    header(
        o,
        "go_gc_duration_seconds",
        "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.",
        "summary",
    );
    for q in ["0", "0.25", "0.5", "0.75", "1"] {
        let _ = writeln!(o, "go_gc_duration_seconds{{quantile=\"{q}\"}} 0");
    }
    let _ = writeln!(o, "go_gc_duration_seconds_sum 0");
    let _ = writeln!(o, "go_gc_duration_seconds_count 0");
    single(
        o,
        "go_gc_gogc_percent",
        "Heap size target percentage configured by the user, otherwise 100. This value is set by the GOGC environment variable, and the runtime/debug.SetGCPercent function. Sourced from /gc/gogc:percent",
        "gauge",
        0,
    );
    // Go's value when no limit is set.
    single(
        o,
        "go_gc_gomemlimit_bytes",
        "Go runtime memory limit configured by the user, otherwise math.MaxInt64. This value is set by the GOMEMLIMIT environment variable, and the runtime/debug.SetMemoryLimit function. Sourced from /gc/gomemlimit:bytes",
        "gauge",
        i64::MAX,
    );
    header(o, "go_info", "Information about the Go environment.", "gauge");
    let _ = writeln!(o, "go_info{{version=\"none\"}} 0");
    let (tasks, workers) = tokio::runtime::Handle::try_current()
        .map_or((0, 0), |rt| (rt.metrics().num_alive_tasks(), rt.metrics().num_workers()));
    single(o, "go_goroutines", "Number of goroutines that currently exist.", "gauge", tasks);
    single(
        o,
        "go_threads",
        "Number of OS threads created.",
        "gauge",
        crate::metrics::proc_field("/proc/self/status", "Threads:"),
    );
    single(
        o,
        "go_sched_gomaxprocs_threads",
        "The current runtime.GOMAXPROCS setting, or the number of operating system threads that can execute user-level Go code simultaneously. Sourced from /sched/gomaxprocs:threads",
        "gauge",
        workers,
    );
    single(
        o,
        "go_memstats_sys_bytes",
        "Number of bytes obtained from system. Equals to /memory/classes/total:byte.",
        "gauge",
        crate::metrics::resident_bytes(),
    );
    for (name, help, kind) in GO_MEMSTATS {
        single(o, name, help, kind, 0);
    }
}

/// Go's allocator and collector statistics, which mem_etcd (Rust, mimalloc) does not have.
const GO_MEMSTATS: &[(&str, &str, &str)] = &[
    (
        "go_memstats_alloc_bytes",
        "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes.",
        "gauge",
    ),
    (
        "go_memstats_alloc_bytes_total",
        "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes.",
        "counter",
    ),
    (
        "go_memstats_buck_hash_sys_bytes",
        "Number of bytes used by the profiling bucket hash table. Equals to /memory/classes/profiling/buckets:bytes.",
        "gauge",
    ),
    (
        "go_memstats_frees_total",
        "Total number of heap objects frees. Equals to /gc/heap/frees:objects + /gc/heap/tiny/allocs:objects.",
        "counter",
    ),
    (
        "go_memstats_gc_sys_bytes",
        "Number of bytes used for garbage collection system metadata. Equals to /memory/classes/metadata/other:bytes.",
        "gauge",
    ),
    (
        "go_memstats_heap_alloc_bytes",
        "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes.",
        "gauge",
    ),
    (
        "go_memstats_heap_idle_bytes",
        "Number of heap bytes waiting to be used. Equals to /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.",
        "gauge",
    ),
    (
        "go_memstats_heap_inuse_bytes",
        "Number of heap bytes that are in use. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes",
        "gauge",
    ),
    (
        "go_memstats_heap_objects",
        "Number of currently allocated objects. Equals to /gc/heap/objects:objects.",
        "gauge",
    ),
    (
        "go_memstats_heap_released_bytes",
        "Number of heap bytes released to OS. Equals to /memory/classes/heap/released:bytes.",
        "gauge",
    ),
    (
        "go_memstats_heap_sys_bytes",
        "Number of heap bytes obtained from system. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes + /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.",
        "gauge",
    ),
    (
        "go_memstats_last_gc_time_seconds",
        "Number of seconds since 1970 of last garbage collection.",
        "gauge",
    ),
    (
        "go_memstats_mallocs_total",
        "Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects.",
        "counter",
    ),
    (
        "go_memstats_mcache_inuse_bytes",
        "Number of bytes in use by mcache structures. Equals to /memory/classes/metadata/mcache/inuse:bytes.",
        "gauge",
    ),
    (
        "go_memstats_mcache_sys_bytes",
        "Number of bytes used for mcache structures obtained from system. Equals to /memory/classes/metadata/mcache/inuse:bytes + /memory/classes/metadata/mcache/free:bytes.",
        "gauge",
    ),
    (
        "go_memstats_mspan_inuse_bytes",
        "Number of bytes in use by mspan structures. Equals to /memory/classes/metadata/mspan/inuse:bytes.",
        "gauge",
    ),
    (
        "go_memstats_mspan_sys_bytes",
        "Number of bytes used for mspan structures obtained from system. Equals to /memory/classes/metadata/mspan/inuse:bytes + /memory/classes/metadata/mspan/free:bytes.",
        "gauge",
    ),
    (
        "go_memstats_next_gc_bytes",
        "Number of heap bytes when next garbage collection will take place. Equals to /gc/heap/goal:bytes.",
        "gauge",
    ),
    (
        "go_memstats_other_sys_bytes",
        "Number of bytes used for other system allocations. Equals to /memory/classes/other:bytes.",
        "gauge",
    ),
    (
        "go_memstats_stack_inuse_bytes",
        "Number of bytes obtained from system for stack allocator in non-CGO environments. Equals to /memory/classes/heap/stacks:bytes.",
        "gauge",
    ),
    (
        "go_memstats_stack_sys_bytes",
        "Number of bytes obtained from system for stack allocator. Equals to /memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes.",
        "gauge",
    ),
];
