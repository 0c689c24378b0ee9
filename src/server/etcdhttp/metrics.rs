//! `/metrics`: etcd's metric names where the meaning matches, so that etcd dashboards and
//! alerts work, plus mem_etcd's own (`mem_etcd_*`): keys and bytes per partition, WAL batching,
//! leases. Gauges are read from the store, hub, lessor and WAL when scraped; the gRPC call
//! counters are `metrics::grpc`'s, kept by the member and counted by `etcdhttp::http` in front
//! of every route, and only reported here. The page is built as metric families
//! (`metrics::Page`), which the `prometheus` crate writes in Prometheus' text format.
//!
//! Where mem_etcd counts differently from etcd: `etcd_mvcc_{range,put,delete,txn}_total` count
//! client calls of each kind (etcd counts its internal reads too), and the db size metrics are
//! the store's estimate of the memory it holds.
//!
//! Every name of etcd's basic list is served, so that what scrapes etcd finds them all; where
//! mem_etcd has nothing that the metric measures (Go's garbage collector, bbolt's internals, the
//! v2 store, the gRPC proxy), it says so with 0 or an empty histogram, never a made-up figure
//! (deploy/README.md lists them).

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus::proto;

use crate::metrics::grpc::{CLIENT_VERSIONS, CODES, METHODS};
use crate::metrics::{CLIENT_GRPC_BYTES, Histogram, MetricType, Page, SnapshotStats};
use crate::server::etcdserver::member::Member;

/// A cluster member's Raft figures, with etcd's names.
fn raft_metrics(o: &mut Page, r: &crate::raft::RaftNode) {
    use std::sync::atomic::Ordering::Relaxed;
    let status = r.status();
    let (last_index, applied) = (status.last_index, status.applied_index);
    o.counter(
        "etcd_server_leader_changes_seen_total",
        "The number of leader changes seen.",
        r.leader_changes.load(Relaxed),
    );
    o.gauge(
        "etcd_server_proposals_committed_total",
        "The total number of consensus proposals committed.",
        r.committed_index(),
    );
    o.gauge(
        "etcd_server_proposals_applied_total",
        "The total number of consensus proposals applied.",
        applied,
    );
    o.gauge(
        "etcd_server_proposals_pending",
        "The current number of pending proposals to commit.",
        r.proposals_pending.load(Relaxed),
    );
    o.counter(
        "etcd_server_proposals_failed_total",
        "The total number of failed proposals seen.",
        r.proposals_failed.load(Relaxed),
    );
    o.gauge(
        "mem_etcd_raft_last_log_index",
        "The index of this member's last Raft log entry.",
        last_index,
    );
    r.peer_stats().report(o);
}

/// A member alone's figures under the Raft names: it became the leader once, at start, and
/// commits each change as it applies it (no consensus to wait for, so none pending or failed).
fn alone_proposals(o: &mut Page, shared: &Member) {
    let applied = shared.metrics.applies.load(Ordering::Relaxed);
    o.counter("etcd_server_leader_changes_seen_total", "The number of leader changes seen.", 1);
    o.gauge(
        "etcd_server_proposals_committed_total",
        "The total number of consensus proposals committed.",
        applied,
    );
    o.gauge(
        "etcd_server_proposals_applied_total",
        "The total number of consensus proposals applied.",
        applied,
    );
    o.gauge(
        "etcd_server_proposals_pending",
        "The current number of pending proposals to commit.",
        0,
    );
    o.counter(
        "etcd_server_proposals_failed_total",
        "The total number of failed proposals seen.",
        0,
    );
}

/// The whole `/metrics` page.
pub fn render(shared: &Member) -> String {
    let mut page = Page::default();
    let o = &mut page;
    let store = &shared.store;
    // A member alone always leads.
    let (has_leader, is_leader, is_learner) = shared.raft().map_or((true, true, false), |r| {
        let role = *r.role().borrow();
        (role.leader.is_some(), role.is_leader, role.is_learner)
    });
    o.gauge(
        "etcd_server_has_leader",
        "Whether or not a leader exists. 1 is existence, 0 is not.",
        has_leader,
    );
    o.gauge(
        "etcd_server_is_leader",
        "Whether or not this member is a leader. 1 if is, 0 otherwise.",
        is_leader,
    );
    o.gauge(
        "etcd_server_is_learner",
        "Whether or not this member is a learner. 1 if is, 0 otherwise.",
        is_learner,
    );
    match shared.raft() {
        Some(r) => raft_metrics(o, r),
        None => alone_proposals(o, shared),
    }
    let v = &shared.config.emulated_version;
    o.family(
        "etcd_server_version",
        "Which version is running. 1 for 'server_version' label with current version.",
        MetricType::GAUGE,
    );
    o.sample(&[("server_version", v)], 1);
    let minor = shared.config.cluster_version();
    o.family(
        "etcd_cluster_version",
        "Which version is running. 1 for 'cluster_version' label with current cluster version",
        MetricType::GAUGE,
    );
    o.sample(&[("cluster_version", &minor)], 1);
    let size = store.size_bytes();
    o.gauge(
        "etcd_mvcc_db_total_size_in_bytes",
        "Total size of the underlying database physically allocated in bytes.",
        size,
    );
    o.gauge(
        "etcd_mvcc_db_total_size_in_use_in_bytes",
        "Total size of the underlying database logically in use in bytes.",
        size,
    );
    o.gauge(
        "etcd_server_quota_backend_bytes",
        "Current backend storage quota size in bytes.",
        shared.alarms.quota_bytes(),
    );
    o.gauge("etcd_debugging_mvcc_keys_total", "Total number of keys.", store.live_keys());
    o.gauge(
        "etcd_debugging_mvcc_current_revision",
        "The current revision of store.",
        store.current_revision(),
    );
    // etcd reports -1 before the first compaction.
    let compacted = store.compact_revision();
    o.gauge(
        "etcd_debugging_mvcc_compact_revision",
        "The revision of the last compaction in store.",
        if compacted == 0 { -1 } else { compacted },
    );
    let g = &shared.grpc_stats;
    for (name, method, help) in [
        ("etcd_mvcc_range_total", "Range", "Total number of ranges seen by this member."),
        ("etcd_mvcc_put_total", "Put", "Total number of puts seen by this member."),
        ("etcd_mvcc_delete_total", "DeleteRange", "Total number of deletes seen by this member."),
        ("etcd_mvcc_txn_total", "Txn", "Total number of txns seen by this member."),
    ] {
        o.counter(name, help, g.handled_total(method));
    }
    let (streams, watchers, slow) = shared.hub.counts();
    o.gauge("etcd_debugging_mvcc_watch_stream_total", "Total number of watch streams.", streams);
    o.gauge("etcd_debugging_mvcc_watcher_total", "Total number of watchers.", watchers);
    o.gauge(
        "etcd_debugging_mvcc_slow_watcher_total",
        "Total number of unsynced slow watchers.",
        slow,
    );
    o.gauge("mem_etcd_leases", "Leases alive.", shared.lessor.len());
    // Every connection, watch stream, keep-alive stream and snapshot runs as a task. A task
    // that outlives its client (a stream nobody ends, a send that waits for good) holds memory
    // and keeps the store's state alive with nothing else to show for it; this count is how
    // the hostile-input tests (and operators) see such a leak.
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        o.gauge(
            "mem_etcd_runtime_alive_tasks",
            "Tasks alive in mem_etcd's async runtime (mem_etcd's own, not an etcd metric): \
             connections, streams and background loops. Growth with no clients is a leak.",
            rt.metrics().num_alive_tasks(),
        );
    }

    tenants(o, shared);

    let parts: Vec<_> = store
        .partition_stats()
        .into_iter()
        .map(|p| (String::from_utf8_lossy(&p.prefix).into_owned(), p))
        .collect();
    type Figure = fn(&crate::mvcc::store::PartitionStats) -> f64;
    let families: [(&str, &str, MetricType, Figure); 4] = [
        (
            "mem_etcd_partition_keys",
            "Live keys per partition (Kubernetes resource prefix; \"\" is the default partition).",
            MetricType::GAUGE,
            |p| p.keys as f64,
        ),
        (
            "mem_etcd_partition_bytes",
            "Bytes of keys, values and index held per partition.",
            MetricType::GAUGE,
            |p| p.bytes as f64,
        ),
        (
            "mem_etcd_partition_lock_seconds_total",
            "Seconds writes held the partition's lock: one resource's writes hold it one at a \
             time, so its seconds per write cap that resource's write rate.",
            MetricType::COUNTER,
            |p| p.lock_seconds,
        ),
        (
            "mem_etcd_partition_locks_total",
            "Writes (and transactions) that held the partition's lock.",
            MetricType::COUNTER,
            |p| p.locks as f64,
        ),
    ];
    for (name, help, kind, figure) in families {
        o.family(name, help, kind);
        for (prefix, p) in &parts {
            o.sample(&[("prefix", prefix)], figure(p));
        }
    }
    let sections: Vec<_> =
        store.serial_sections().into_iter().filter_map(|(n, s)| Some((n, s?))).collect();
    type SerialFigure = fn(&crate::metrics::Serial) -> f64;
    let families: [(&str, &str, SerialFigure); 3] = [
        (
            "mem_etcd_serial_seconds_total",
            "Seconds spent in each section every write passes one at a time (publisher: the \
             in-order publisher; wal_writer: the WAL's writer): the serial part of the write path.",
            |s| s.seconds(),
        ),
        (
            "mem_etcd_serial_revisions_total",
            "Revisions that passed each serial section (see mem_etcd_serial_seconds_total).",
            |s| s.count() as f64,
        ),
        (
            "mem_etcd_serial_passes_total",
            "Passes through each serial section, each serving a batch of revisions.",
            |s| s.passes() as f64,
        ),
    ];
    for (name, help, figure) in families {
        o.family(name, help, MetricType::COUNTER);
        for (section, serial) in &sections {
            o.sample(&[("section", section)], figure(serial));
        }
    }

    if let Some(w) = store.wal() {
        let st = &w.stats;
        o.histogram(
            "etcd_disk_wal_fsync_duration_seconds",
            "The latency distributions of fsync called by WAL.",
            &st.fsync_seconds,
        );
        o.gauge(
            "etcd_disk_wal_write_bytes_total",
            "Total number of bytes written in WAL.",
            st.bytes.load(Ordering::Relaxed),
        );
        o.counter(
            "mem_etcd_wal_batches_total",
            "WAL batches written (one write per file touched, then one fdatasync in fsync mode).",
            st.batches.load(Ordering::Relaxed),
        );
        o.counter(
            "mem_etcd_wal_revisions_total",
            "Revisions written to the WAL.",
            st.revisions.load(Ordering::Relaxed),
        );
        o.histogram(
            "mem_etcd_wal_batch_revisions",
            "Revisions per WAL batch (group commit).",
            &st.batch_revisions,
        );
        wal_durations(o, &st.write_seconds, &st.commit_seconds);
    } else {
        // No WAL: empty histograms keep dashboards' queries valid.
        o.histogram(
            "etcd_disk_wal_fsync_duration_seconds",
            "The latency distributions of fsync called by WAL.",
            &crate::metrics::seconds(),
        );
        o.gauge("etcd_disk_wal_write_bytes_total", "Total number of bytes written in WAL.", 0);
        wal_durations(o, &crate::metrics::seconds(), &crate::metrics::seconds());
    }
    etcd_basic(o, shared);

    per_method(
        o,
        "grpc_server_started_total",
        "Total number of RPCs started on the server.",
        &g.started,
    );
    // Its series follow its header: the text format wants a family's lines together.
    o.family(
        "grpc_server_handled_total",
        "Total number of RPCs completed on the server, regardless of success or failure.",
        MetricType::COUNTER,
    );
    for i in 0..METHODS.len() {
        for (c, code) in CODES.iter().enumerate() {
            let n = g.handled[i * CODES.len() + c].load(Ordering::Relaxed);
            if n > 0 {
                let [method, service, kind] = method_labels(i);
                o.sample(&[("grpc_code", code), method, service, kind], n);
            }
        }
    }
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
        o.family(
            "grpc_server_handling_seconds",
            "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
            MetricType::HISTOGRAM,
        );
        for (i, h) in g.handling.iter().enumerate() {
            if h.get_sample_count() > 0 {
                o.series(&method_labels(i), h);
            }
        }
    }
    page.render()
}

/// go-grpc-prometheus' labels of method `i` of `METHODS`.
fn method_labels(i: usize) -> [(&'static str, &'static str); 3] {
    let (service, method, kind) = METHODS[i];
    [("grpc_method", method), ("grpc_service", service), ("grpc_type", kind.label())]
}

/// A counter per gRPC method, with go-grpc-prometheus' labels (the methods called so far).
fn per_method(o: &mut Page, name: &str, help: &str, counts: &[AtomicU64]) {
    o.family(name, help, MetricType::COUNTER);
    for (i, count) in counts.iter().enumerate() {
        let n = count.load(Ordering::Relaxed);
        if n > 0 {
            o.sample(&method_labels(i), n);
        }
    }
}

/// The WAL's write and commit durations (etcd's WAL write and backend commit).
fn wal_durations(o: &mut Page, write: &Histogram, commit: &Histogram) {
    o.histogram(
        "etcd_disk_wal_write_duration_seconds",
        "The latency distributions of write called by WAL.",
        write,
    );
    o.histogram(
        "etcd_disk_backend_commit_duration_seconds",
        "The latency distributions of commit called by backend.",
        commit,
    );
}

/// The rest of etcd's basic metrics.
fn etcd_basic(o: &mut Page, shared: &Member) {
    use std::sync::atomic::Ordering::Relaxed;
    let m = &shared.metrics;
    let empty = crate::metrics::seconds;
    let id = shared.member_id;

    // Server.
    o.gauge(
        "etcd_debugging_auth_revision",
        "The current revision of auth store.",
        shared.auth.revision(),
    );
    o.family(
        "etcd_server_id",
        "Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID.",
        MetricType::GAUGE,
    );
    o.sample(&[("server_id", &format!("{id:x}"))], 1);
    // mem_etcd is not built with Go: "none", and 0 (it is not running with that version).
    o.family("etcd_server_go_version",
        "Which Go version server is running with. 1 for 'server_go_version' label with current version.", MetricType::GAUGE);
    o.sample(&[("server_go_version", "none")], 0);
    m.report_durations(o);
    o.counter(
        "etcd_server_slow_apply_total",
        "The total number of slow apply requests (likely overloaded from slow disk).",
        m.slow_applies.load(Relaxed),
    );
    o.family(
        "etcd_server_client_requests_total",
        "The total number of client requests per client version.",
        MetricType::COUNTER,
    );
    let g = &shared.grpc_stats;
    for (t, kind) in ["unary", "stream"].into_iter().enumerate() {
        for (v, version) in CLIENT_VERSIONS.into_iter().enumerate() {
            let n = g.client_requests[t][v].load(Relaxed);
            if n > 0 {
                o.sample(&[("client_api_version", version), ("type", kind)], n);
            }
        }
    }
    o.counter(
        "etcd_server_health_success",
        "The total number of successful health checks",
        m.health_success.load(Relaxed),
    );
    o.counter(
        "etcd_server_health_failures",
        "The total number of failed health checks",
        m.health_failures.load(Relaxed),
    );
    o.counter(
        "etcd_server_learner_promote_successes",
        "The total number of successful learner promotions while this member is leader.",
        m.learner_promotions.load(Relaxed),
    );
    o.gauge(
        "etcd_server_snapshot_apply_in_progress_total",
        "1 if the server is applying the incoming snapshot. 0 if none.",
        m.snapshot_installing.load(Relaxed),
    );
    // Raft's heartbeats and read indexes are openraft's, which counts neither failure.
    o.counter(
        "etcd_server_heartbeat_send_failures_total",
        "The total number of leader heartbeat send failures (likely overloaded from slow disk).",
        0,
    );
    o.counter("etcd_server_slow_read_indexes_total",
        "The total number of pending read indexes not in sync with leader's or timed out read index requests.", 0);
    o.counter(
        "etcd_server_read_indexes_failed_total",
        "The total number of failed read indexes seen.",
        0,
    );

    // Leases.
    let ls = &shared.lessor.stats;
    o.counter(
        "etcd_debugging_lease_granted_total",
        "The total number of granted leases.",
        ls.granted.load(Relaxed),
    );
    o.counter(
        "etcd_debugging_lease_renewed_total",
        "The number of renewed leases seen by the leader.",
        ls.renewed.load(Relaxed),
    );
    o.counter(
        "etcd_debugging_lease_revoked_total",
        "The total number of revoked leases.",
        m.leases_revoked.load(Relaxed),
    );
    o.histogram("etcd_debugging_lease_ttl_total", "Bucketed histogram of lease TTLs.", &ls.ttls);
    o.counter(
        "etcd_debugging_server_lease_expired_total",
        "The total number of expired leases.",
        ls.expired.load(Relaxed),
    );

    // MVCC.
    o.counter(
        "etcd_debugging_mvcc_events_total",
        "Total number of events sent by this member.",
        m.watch_events.load(Relaxed),
    );
    // The hub queues revisions per watcher, not events: it has no count of events to send.
    o.gauge(
        "etcd_debugging_mvcc_pending_events_total",
        "Total number of pending events to be sent.",
        0,
    );
    o.gauge(
        "etcd_debugging_mvcc_total_put_size_in_bytes",
        "The total size of put kv pairs seen by this member.",
        m.put_bytes.load(Relaxed),
    );
    // A compaction frees the versions of every partition in one step, in memory: that step is
    // the index compaction; there is no separate database compaction pausing between batches.
    o.histogram(
        "etcd_debugging_mvcc_index_compaction_pause_duration_milliseconds",
        "Bucketed histogram of index compaction pause duration.",
        &m.compaction_ms,
    );
    o.histogram(
        "etcd_debugging_mvcc_db_compaction_total_duration_milliseconds",
        "Bucketed histogram of db compaction total duration.",
        &m.compaction_ms,
    );
    o.histogram(
        "etcd_debugging_mvcc_db_compaction_pause_duration_milliseconds",
        "Bucketed histogram of db compaction pause duration.",
        &crate::metrics::millis(),
    );
    o.gauge(
        "etcd_debugging_mvcc_db_compaction_last",
        "The unix time of the last db compaction. Resets to 0 on start.",
        m.compaction_last.load(Relaxed),
    );
    o.counter(
        "etcd_debugging_mvcc_db_compaction_keys_total",
        "Total number of db keys compacted.",
        0,
    );
    o.gauge(
        "etcd_mvcc_db_open_read_transactions",
        "The number of currently open read transactions",
        0,
    );
    o.histogram(
        "etcd_mvcc_hash_duration_seconds",
        "The latency distribution of storage hash operation.",
        &m.hash_seconds,
    );
    o.histogram(
        "etcd_mvcc_hash_rev_duration_seconds",
        "The latency distribution of storage hash by revision operation.",
        &m.hash_rev_seconds,
    );

    // Disk and snapshots.
    o.histogram(
        "etcd_disk_backend_defrag_duration_seconds",
        "The latency distribution of backend defragmentation.",
        &m.defrag_seconds,
    );
    o.gauge(
        "etcd_disk_defrag_inflight",
        "Whether or not defrag is active on the member. 1 means active, 0 means not.",
        0,
    );
    o.histogram(
        "etcd_disk_backend_snapshot_duration_seconds",
        "The latency distribution of backend snapshots.",
        &m.snapshot_seconds,
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
        o.histogram(name, help, &empty());
    }
    // A member alone's snapshots are its WAL's; a cluster member (no WAL) has the Raft ones.
    let snaps: &SnapshotStats = shared.store.wal().map_or(&m.snapshots, |w| &w.stats.snapshots);
    o.histogram(
        "etcd_debugging_snap_save_marshalling_duration_seconds",
        "The marshalling cost distributions of save called by snapshot.",
        &snaps.marshal_seconds,
    );
    o.histogram(
        "etcd_debugging_snap_save_total_duration_seconds",
        "The total latency distributions of save called by snapshot.",
        &snaps.save_seconds,
    );
    o.histogram(
        "etcd_snap_fsync_duration_seconds",
        "The latency distributions of fsync called by snap.",
        &snaps.fsync_seconds,
    );

    // etcd's v2 store and gRPC proxy, neither of which mem_etcd has.
    o.counter("etcd_debugging_store_expires_total", "Total number of expired keys.", 0);
    o.counter(
        "etcd_debugging_store_watch_requests_total",
        "Total number of incoming watch requests (new or reestablished).",
        0,
    );
    o.gauge("etcd_debugging_store_watchers", "Count of currently active watchers.", 0);
    o.family(
        "etcd_debugging_store_writes_total",
        "Total number of writes (e.g. set/compareAndDelete) seen by this member.",
        MetricType::COUNTER,
    );
    o.sample(&[("action", "set")], 0);
    for (name, help, kind) in [
        ("etcd_grpc_proxy_cache_hits_total", "Total number of cache hits", MetricType::GAUGE),
        (
            "etcd_grpc_proxy_cache_keys_total",
            "Total number of keys/ranges cached",
            MetricType::GAUGE,
        ),
        ("etcd_grpc_proxy_cache_misses_total", "Total number of cache misses", MetricType::GAUGE),
        (
            "etcd_grpc_proxy_events_coalescing_total",
            "Total number of events coalescing",
            MetricType::COUNTER,
        ),
        (
            "etcd_grpc_proxy_watchers_coalescing_total",
            "Total number of current watchers coalescing",
            MetricType::GAUGE,
        ),
    ] {
        o.family(name, help, kind);
        o.sample(&[], 0);
    }

    // Network.
    o.counter(
        "etcd_network_client_grpc_received_bytes_total",
        "The total number of bytes received from grpc clients.",
        CLIENT_GRPC_BYTES.received.load(Relaxed),
    );
    o.counter(
        "etcd_network_client_grpc_sent_bytes_total",
        "The total number of bytes sent to grpc clients.",
        CLIENT_GRPC_BYTES.sent.load(Relaxed),
    );
    o.family("etcd_network_known_peers", "The current number of known peers.", MetricType::GAUGE);
    let members: Vec<u64> =
        shared.raft().map_or_else(|| vec![id], |r| r.membership().1.into_keys().collect());
    let local = format!("{id:x}");
    for peer in &members {
        o.sample(&[("Local", &local), ("Remote", &format!("{peer:x}"))], 1);
    }
    o.family(
        "etcd_network_active_peers",
        "The current number of active peer connections.",
        MetricType::GAUGE,
    );
    if let Some(r) = shared.raft() {
        for peer in members.iter().filter(|p| **p != id) {
            let active = r.active_since(*peer).is_some();
            o.sample(&[("Local", &local), ("Remote", &format!("{peer:x}"))], active);
        }
    }

    // The process.
    let (fds, fd_limit) = crate::metrics::file_descriptors();
    o.gauge("os_fd_used", "The number of used file descriptors.", fds);
    o.gauge("os_fd_limit", "The file descriptor limit.", fd_limit);
    o.gauge(
        "promhttp_metric_handler_requests_in_flight",
        "Current number of scrapes being served.",
        m.scrapes_in_flight.load(Relaxed),
    );
    o.family(
        "promhttp_metric_handler_requests_total",
        "Total number of scrapes by HTTP status code.",
        MetricType::COUNTER,
    );
    o.sample(&[("code", "200")], m.scrapes.load(Relaxed));
    o.sample(&[("code", "500")], 0);
    o.sample(&[("code", "503")], 0);
    go_runtime(o);
}

/// Go's runtime metrics, which etcd's registry carries: mem_etcd's nearest figures where it
/// has one (tasks for goroutines, OS threads, worker threads, resident memory), and 0 for the
/// garbage collector and Go's allocator, which it does not have.
fn go_runtime(o: &mut Page) {
    o.family(
        "go_gc_duration_seconds",
        "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.",
        MetricType::SUMMARY,
    );
    let quantiles = [0.0, 0.25, 0.5, 0.75, 1.0].map(|q| {
        let mut quantile = proto::Quantile::default();
        quantile.set_quantile(q);
        quantile
    });
    let mut summary = proto::Summary::default();
    summary.set_quantile(quantiles.to_vec());
    let mut no_pauses = proto::Metric::default();
    no_pauses.set_summary(summary);
    o.metric(no_pauses);
    o.gauge("go_gc_gogc_percent",
        "Heap size target percentage configured by the user, otherwise 100. This value is set by the GOGC environment variable, and the runtime/debug.SetGCPercent function. Sourced from /gc/gogc:percent", 0);
    // Go's value when no limit is set.
    o.gauge("go_gc_gomemlimit_bytes",
        "Go runtime memory limit configured by the user, otherwise math.MaxInt64. This value is set by the GOMEMLIMIT environment variable, and the runtime/debug.SetMemoryLimit function. Sourced from /gc/gomemlimit:bytes", i64::MAX);
    o.family("go_info", "Information about the Go environment.", MetricType::GAUGE);
    o.sample(&[("version", "none")], 0);
    let (tasks, workers) = tokio::runtime::Handle::try_current()
        .map_or((0, 0), |rt| (rt.metrics().num_alive_tasks(), rt.metrics().num_workers()));
    o.gauge("go_goroutines", "Number of goroutines that currently exist.", tasks);
    o.gauge(
        "go_threads",
        "Number of OS threads created.",
        crate::metrics::proc_field("/proc/self/status", "Threads:"),
    );
    o.gauge("go_sched_gomaxprocs_threads",
        "The current runtime.GOMAXPROCS setting, or the number of operating system threads that can execute user-level Go code simultaneously. Sourced from /sched/gomaxprocs:threads", workers);
    o.gauge(
        "go_memstats_sys_bytes",
        "Number of bytes obtained from system. Equals to /memory/classes/total:byte.",
        crate::metrics::resident_bytes(),
    );
    for (name, help, kind) in GO_MEMSTATS {
        o.family(name, help, *kind);
        o.sample(&[], 0);
    }
}

/// Go's allocator and collector statistics, which mem_etcd (Rust, mimalloc) does not have.
const GO_MEMSTATS: &[(&str, &str, MetricType)] = &[
    (
        "go_memstats_alloc_bytes",
        "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes.",
        MetricType::GAUGE,
    ),
    (
        "go_memstats_alloc_bytes_total",
        "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes.",
        MetricType::COUNTER,
    ),
    (
        "go_memstats_buck_hash_sys_bytes",
        "Number of bytes used by the profiling bucket hash table. Equals to /memory/classes/profiling/buckets:bytes.",
        MetricType::GAUGE,
    ),
    (
        "go_memstats_frees_total",
        "Total number of heap objects frees. Equals to /gc/heap/frees:objects + /gc/heap/tiny/allocs:objects.",
        MetricType::COUNTER,
    ),
    (
        "go_memstats_gc_sys_bytes",
        "Number of bytes used for garbage collection system metadata. Equals to /memory/classes/metadata/other:bytes.",
        MetricType::GAUGE,
    ),
    (
        "go_memstats_heap_alloc_bytes",
        "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes.",
        MetricType::GAUGE,
    ),
    (
        "go_memstats_heap_idle_bytes",
        "Number of heap bytes waiting to be used. Equals to /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.",
        MetricType::GAUGE,
    ),
    (
        "go_memstats_heap_inuse_bytes",
        "Number of heap bytes that are in use. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes",
        MetricType::GAUGE,
    ),
    (
        "go_memstats_heap_objects",
        "Number of currently allocated objects. Equals to /gc/heap/objects:objects.",
        MetricType::GAUGE,
    ),
    (
        "go_memstats_heap_released_bytes",
        "Number of heap bytes released to OS. Equals to /memory/classes/heap/released:bytes.",
        MetricType::GAUGE,
    ),
    (
        "go_memstats_heap_sys_bytes",
        "Number of heap bytes obtained from system. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes + /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.",
        MetricType::GAUGE,
    ),
    (
        "go_memstats_last_gc_time_seconds",
        "Number of seconds since 1970 of last garbage collection.",
        MetricType::GAUGE,
    ),
    (
        "go_memstats_mallocs_total",
        "Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects.",
        MetricType::COUNTER,
    ),
    (
        "go_memstats_mcache_inuse_bytes",
        "Number of bytes in use by mcache structures. Equals to /memory/classes/metadata/mcache/inuse:bytes.",
        MetricType::GAUGE,
    ),
    (
        "go_memstats_mcache_sys_bytes",
        "Number of bytes used for mcache structures obtained from system. Equals to /memory/classes/metadata/mcache/inuse:bytes + /memory/classes/metadata/mcache/free:bytes.",
        MetricType::GAUGE,
    ),
    (
        "go_memstats_mspan_inuse_bytes",
        "Number of bytes in use by mspan structures. Equals to /memory/classes/metadata/mspan/inuse:bytes.",
        MetricType::GAUGE,
    ),
    (
        "go_memstats_mspan_sys_bytes",
        "Number of bytes used for mspan structures obtained from system. Equals to /memory/classes/metadata/mspan/inuse:bytes + /memory/classes/metadata/mspan/free:bytes.",
        MetricType::GAUGE,
    ),
    (
        "go_memstats_next_gc_bytes",
        "Number of heap bytes when next garbage collection will take place. Equals to /gc/heap/goal:bytes.",
        MetricType::GAUGE,
    ),
    (
        "go_memstats_other_sys_bytes",
        "Number of bytes used for other system allocations. Equals to /memory/classes/other:bytes.",
        MetricType::GAUGE,
    ),
    (
        "go_memstats_stack_inuse_bytes",
        "Number of bytes obtained from system for stack allocator in non-CGO environments. Equals to /memory/classes/heap/stacks:bytes.",
        MetricType::GAUGE,
    ),
    (
        "go_memstats_stack_sys_bytes",
        "Number of bytes obtained from system for stack allocator. Equals to /memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes.",
        MetricType::GAUGE,
    ),
];

/// Each tenant's figures, labelled by its prefix (one label value per tenant: `--tenant`'s,
/// and with `--tenants-from-auth` the auth state's).
fn tenants(o: &mut Page, shared: &Member) {
    let list = shared.tenants.list(&shared.auth);
    let tenants: Vec<_> = list.iter().collect();
    if tenants.is_empty() {
        return;
    }
    let mut watchers = vec![0u64; tenants.len()];
    for start in shared.hub.watched_starts() {
        if let Some(t) = list.of(&start) {
            let at = tenants.iter().position(|x| std::ptr::eq(*x, t)).expect("listed");
            watchers[at] += 1;
        }
    }
    let stats = shared.store.partition_stats();
    let keys = |t: &crate::server::etcdserver::tenant::Tenant| -> u64 {
        let mine = |p: &[u8]| list.of(p).is_some_and(|x| std::ptr::eq(x, t));
        stats.iter().filter(|p| !p.prefix.is_empty() && mine(&p.prefix)).map(|p| p.keys).sum()
    };
    let (global, floors) = (shared.store.compact_revision(), shared.store.floors());
    let compacted = |t: &crate::server::etcdserver::tenant::Tenant| {
        let own = floors.iter().filter(|(p, _)| t.prefix.starts_with(p)).map(|f| f.1).max();
        global.max(own.unwrap_or(0))
    };
    type Figure<'a> = Box<dyn Fn(usize, &crate::server::etcdserver::tenant::Tenant) -> f64 + 'a>;
    let families: [(&str, &str, MetricType, Figure); 7] = [
        (
            "mem_etcd_tenant_keys",
            "Live keys of each tenant's resources.",
            MetricType::GAUGE,
            Box::new(|_, t| keys(t) as f64),
        ),
        (
            "mem_etcd_tenant_bytes",
            "Bytes each tenant's resources hold (keys, values, history and index): what its \
             quota is checked against.",
            MetricType::GAUGE,
            Box::new(|_, t| list.bytes(&shared.store, t) as f64),
        ),
        (
            "mem_etcd_tenant_quota_bytes",
            "Each tenant's space quota (0: none).",
            MetricType::GAUGE,
            Box::new(|_, t| t.quota.unwrap_or(0) as f64),
        ),
        (
            "mem_etcd_tenant_reads_total",
            "Ranges this member served under each tenant's prefix.",
            MetricType::COUNTER,
            Box::new(|_, t| t.reads.load(std::sync::atomic::Ordering::Relaxed) as f64),
        ),
        (
            "mem_etcd_tenant_writes_total",
            "Puts, deletes and txns this member took under each tenant's prefix.",
            MetricType::COUNTER,
            Box::new(|_, t| t.writes.load(std::sync::atomic::Ordering::Relaxed) as f64),
        ),
        (
            "mem_etcd_tenant_compact_revision",
            "The revision each tenant's history is compacted at: its own compaction's, or the \
             store's if later (0 before the first).",
            MetricType::GAUGE,
            Box::new(|_, t| compacted(t) as f64),
        ),
        (
            "mem_etcd_tenant_watchers",
            "Watchers on this member whose range starts under each tenant's prefix.",
            MetricType::GAUGE,
            Box::new(|i, _| watchers[i] as f64),
        ),
    ];
    for (name, help, kind, figure) in families {
        o.family(name, help, kind);
        for (i, t) in tenants.iter().enumerate() {
            o.sample(&[("tenant", &t.name)], figure(i, t));
        }
    }
}
