//! /metrics: etcd's names, types and counts, mem_etcd's own families (the serial sections
//! among them), a metrics-only listener, and /health while the WAL cannot write.

use std::net::SocketAddr;
use std::time::Duration;

use super::http::http_get;
use crate::support::*;

/// The lines of a /metrics page that start with `prefix`.
fn lines_with<'a>(page: &'a str, prefix: &str) -> Vec<&'a str> {
    page.lines().filter(|l| l.starts_with(prefix)).collect()
}

/// /metrics counts gRPC calls by method and code as etcd does, and reports the store, watches
/// and the WAL.
#[tokio::test]
async fn metrics_count_calls_and_report_the_store() {
    let mem = server_of!(Kind::MemEtcd);
    let etcd = server_of!(Kind::Etcd);
    let mut pages = Vec::new();
    for s in [&mem, &etcd] {
        let mut c = s.client().await;
        c.put("/registry/pods/default/a", "1", None).await.unwrap();
        c.put("/registry/pods/default/b", "2", None).await.unwrap();
        let future = etcd_client::GetOptions::new().with_revision(1000);
        assert_err(c.get("k", Some(future)).await, tonic::Code::OutOfRange, E_FUTURE);
        let mut watch = c.watch("/registry/pods/", None).await.unwrap();
        let created = watch.message().await.unwrap().expect("the created response");
        assert!(created.created());
        let m = http_get(s.addr(), "/metrics").await;
        assert_eq!(m.status, 200);
        assert!(m.content_type.starts_with("text/plain; version=0.0.4"), "{}", m.content_type);
        pages.push(m.body);
    }
    let (mem_page, etcd_page) = (&pages[0], &pages[1]);
    for exact in [
        "grpc_server_handled_total{grpc_code=\"OK\",grpc_method=\"Put\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 2",
        "grpc_server_handled_total{grpc_code=\"OutOfRange\",grpc_method=\"Range\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 1",
        "grpc_server_started_total{grpc_method=\"Put\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 2",
        "grpc_server_started_total{grpc_method=\"Watch\",grpc_service=\"etcdserverpb.Watch\",grpc_type=\"bidi_stream\"} 1",
        "etcd_server_has_leader 1",
        "etcd_server_is_leader 1",
        "etcd_server_is_learner 0",
        "etcd_server_version{server_version=\"3.6.16\"} 1",
        "etcd_cluster_version{cluster_version=\"3.6\"} 1",
        "etcd_debugging_mvcc_keys_total 2",
        "etcd_debugging_mvcc_current_revision 3",
        "etcd_debugging_mvcc_compact_revision -1",
        "etcd_debugging_mvcc_watcher_total 1",
        "etcd_debugging_mvcc_watch_stream_total 1",
        "etcd_debugging_mvcc_slow_watcher_total 0",
        "etcd_mvcc_put_total 2",
    ] {
        assert!(etcd_page.lines().any(|l| l == exact), "etcd has no line {exact:?}");
        assert!(
            mem_page.lines().any(|l| l == exact),
            "mem_etcd has no line {exact:?}:\n{mem_page}"
        );
    }
    // The same metric types as etcd's, for every metric both have.
    for t in lines_with(mem_page, "# TYPE ") {
        let name = t.split(' ').nth(2).unwrap();
        if let Some(e) = lines_with(etcd_page, &format!("# TYPE {name} ")).first() {
            assert_eq!(t, *e, "metric type of {name}");
        }
    }
    // mem_etcd's own, and the WAL's latency resolving below a millisecond.
    let pods = "mem_etcd_partition_keys{prefix=\"/registry/pods/\"} 2";
    assert!(mem_page.lines().any(|l| l == pods), "{mem_page}");
    assert_eq!(
        lines_with(mem_page, "etcd_disk_wal_fsync_duration_seconds_bucket{le=\"0.0001\"}").len(),
        1
    );
    assert_eq!(lines_with(mem_page, "mem_etcd_wal_batch_revisions_count ").len(), 1);
    // Scraping it costs no gRPC count.
    let again = http_get(mem.addr(), "/metrics").await.body;
    assert_eq!(
        lines_with(&again, "grpc_server_started_total"),
        lines_with(mem_page, "grpc_server_started_total")
    );
}

/// The metric names of etcd 3.6's basic list (its e2e test `TestNoMetricsMissing`): each one a
/// member serves, whether it is alone or in a cluster.
pub const ETCD_BASIC_METRICS: &[&str] = &[
    "etcd_cluster_version",
    "etcd_debugging_auth_revision",
    "etcd_debugging_disk_backend_commit_rebalance_duration_seconds",
    "etcd_debugging_disk_backend_commit_spill_duration_seconds",
    "etcd_debugging_disk_backend_commit_write_duration_seconds",
    "etcd_debugging_lease_granted_total",
    "etcd_debugging_lease_renewed_total",
    "etcd_debugging_lease_revoked_total",
    "etcd_debugging_lease_ttl_total",
    "etcd_debugging_mvcc_compact_revision",
    "etcd_debugging_mvcc_current_revision",
    "etcd_debugging_mvcc_db_compaction_keys_total",
    "etcd_debugging_mvcc_db_compaction_last",
    "etcd_debugging_mvcc_db_compaction_pause_duration_milliseconds",
    "etcd_debugging_mvcc_db_compaction_total_duration_milliseconds",
    "etcd_debugging_mvcc_events_total",
    "etcd_debugging_mvcc_index_compaction_pause_duration_milliseconds",
    "etcd_debugging_mvcc_keys_total",
    "etcd_debugging_mvcc_pending_events_total",
    "etcd_debugging_mvcc_slow_watcher_total",
    "etcd_debugging_mvcc_total_put_size_in_bytes",
    "etcd_debugging_mvcc_watch_stream_total",
    "etcd_debugging_mvcc_watcher_total",
    "etcd_debugging_server_lease_expired_total",
    "etcd_debugging_snap_save_marshalling_duration_seconds",
    "etcd_debugging_snap_save_total_duration_seconds",
    "etcd_debugging_store_expires_total",
    "etcd_debugging_store_watch_requests_total",
    "etcd_debugging_store_watchers",
    "etcd_debugging_store_writes_total",
    "etcd_disk_backend_commit_duration_seconds",
    "etcd_disk_backend_defrag_duration_seconds",
    "etcd_disk_backend_snapshot_duration_seconds",
    "etcd_disk_defrag_inflight",
    "etcd_disk_wal_fsync_duration_seconds",
    "etcd_disk_wal_write_bytes_total",
    "etcd_disk_wal_write_duration_seconds",
    "etcd_grpc_proxy_cache_hits_total",
    "etcd_grpc_proxy_cache_keys_total",
    "etcd_grpc_proxy_cache_misses_total",
    "etcd_grpc_proxy_events_coalescing_total",
    "etcd_grpc_proxy_watchers_coalescing_total",
    "etcd_mvcc_db_open_read_transactions",
    "etcd_mvcc_db_total_size_in_bytes",
    "etcd_mvcc_db_total_size_in_use_in_bytes",
    "etcd_mvcc_delete_total",
    "etcd_mvcc_hash_duration_seconds",
    "etcd_mvcc_hash_rev_duration_seconds",
    "etcd_mvcc_put_total",
    "etcd_mvcc_range_total",
    "etcd_mvcc_txn_total",
    "etcd_network_client_grpc_received_bytes_total",
    "etcd_network_client_grpc_sent_bytes_total",
    "etcd_network_known_peers",
    "etcd_server_apply_duration_seconds",
    "etcd_server_client_requests_total",
    "etcd_server_go_version",
    "etcd_server_has_leader",
    "etcd_server_health_failures",
    "etcd_server_health_success",
    "etcd_server_heartbeat_send_failures_total",
    "etcd_server_id",
    "etcd_server_is_leader",
    "etcd_server_is_learner",
    "etcd_server_leader_changes_seen_total",
    "etcd_server_learner_promote_successes",
    "etcd_server_proposals_applied_total",
    "etcd_server_proposals_committed_total",
    "etcd_server_proposals_failed_total",
    "etcd_server_proposals_pending",
    "etcd_server_quota_backend_bytes",
    "etcd_server_range_duration_seconds",
    "etcd_server_read_indexes_failed_total",
    "etcd_server_slow_apply_total",
    "etcd_server_slow_read_indexes_total",
    "etcd_server_snapshot_apply_in_progress_total",
    "etcd_server_version",
    "etcd_snap_db_fsync_duration_seconds",
    "etcd_snap_db_save_total_duration_seconds",
    "etcd_snap_fsync_duration_seconds",
    "go_gc_duration_seconds",
    "go_gc_gogc_percent",
    "go_gc_gomemlimit_bytes",
    "go_goroutines",
    "go_info",
    "go_memstats_alloc_bytes",
    "go_memstats_alloc_bytes_total",
    "go_memstats_buck_hash_sys_bytes",
    "go_memstats_frees_total",
    "go_memstats_gc_sys_bytes",
    "go_memstats_heap_alloc_bytes",
    "go_memstats_heap_idle_bytes",
    "go_memstats_heap_inuse_bytes",
    "go_memstats_heap_objects",
    "go_memstats_heap_released_bytes",
    "go_memstats_heap_sys_bytes",
    "go_memstats_last_gc_time_seconds",
    "go_memstats_mallocs_total",
    "go_memstats_mcache_inuse_bytes",
    "go_memstats_mcache_sys_bytes",
    "go_memstats_mspan_inuse_bytes",
    "go_memstats_mspan_sys_bytes",
    "go_memstats_next_gc_bytes",
    "go_memstats_other_sys_bytes",
    "go_memstats_stack_inuse_bytes",
    "go_memstats_stack_sys_bytes",
    "go_memstats_sys_bytes",
    "go_sched_gomaxprocs_threads",
    "go_threads",
    "grpc_server_handled_total",
    "grpc_server_msg_received_total",
    "grpc_server_msg_sent_total",
    "grpc_server_started_total",
    "os_fd_limit",
    "os_fd_used",
    "promhttp_metric_handler_requests_in_flight",
    "promhttp_metric_handler_requests_total",
];

/// Whether the page has metric family `name` with at least one sample (what a Prometheus text
/// parser keeps: a family with a header and no sample is dropped).
pub fn has_family(page: &str, name: &str) -> bool {
    let typed = format!("# TYPE {name} ");
    let Some(kind) = page.lines().find_map(|l| l.strip_prefix(typed.as_str())) else {
        return false;
    };
    let samples: Vec<String> = match kind {
        "histogram" => vec![format!("{name}_count")],
        "summary" => vec![format!("{name}_count"), format!("{name}{{")],
        _ => vec![format!("{name} "), format!("{name}{{")],
    };
    page.lines().any(|l| samples.iter().any(|p| l.starts_with(p.as_str())))
}

/// The value of the sample line that starts with `series` (name and labels), if there is one.
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.parse().ok())
}

/// Every name of etcd's basic list is served, with etcd's type; `--metrics=extensive` adds the
/// gRPC handling histograms, as in etcd.
#[tokio::test]
async fn every_metric_of_etcds_basic_list_is_served() {
    let mem = server!();
    let extensive = server!(["--metrics=extensive"]);
    let etcd = server_of!(Kind::Etcd, ["--metrics=extensive"]);
    let mut pages = Vec::new();
    for s in [&mem, &extensive, &etcd] {
        let mut c = s.client().await;
        for i in 0..3 {
            c.put(format!("key_{i}"), format!("value_{i}"), None).await.unwrap();
        }
        c.get("k", None).await.unwrap();
        pages.push(http_get(s.addr(), "/metrics").await.body);
    }
    let (mem_page, extensive_page, etcd_page) = (&pages[0], &pages[1], &pages[2]);
    for name in ETCD_BASIC_METRICS {
        assert!(has_family(etcd_page, name), "etcd has no {name}: the list is not etcd's");
        for page in [mem_page, extensive_page] {
            assert!(has_family(page, name), "mem_etcd has no {name}:\n{page}");
        }
        let t = format!("# TYPE {name} ");
        assert_eq!(lines_with(mem_page, &t), lines_with(etcd_page, &t), "metric type of {name}");
    }
    let handling = "grpc_server_handling_seconds";
    assert!(has_family(etcd_page, handling));
    assert!(has_family(extensive_page, handling), "{extensive_page}");
    assert!(!has_family(mem_page, handling), "only with --metrics=extensive");
    let put = "grpc_server_handling_seconds_count{grpc_method=\"Put\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"}";
    assert_eq!(sample(extensive_page, put), Some(3.0), "{extensive_page}");
}

/// The figures behind etcd's names move with the work: WAL fsyncs and commits in fsync mode,
/// applies and reads, messages and bytes from clients, leases, scrapes and health checks.
#[tokio::test]
async fn metrics_follow_the_work_done() {
    let s = server!(["--fsync"]);
    let mut c = s.client().await;
    let before = http_get(s.addr(), "/metrics").await.body;
    let value = |page: &str, series: &str| sample(page, series).unwrap_or(0.0);
    let mut watch = c.watch("w", None).await.unwrap();
    assert!(watch.message().await.unwrap().expect("created").created());
    c.put("w", "0123456789", None).await.unwrap();
    assert_eq!(watch.message().await.unwrap().expect("the event").events().len(), 1);
    c.get("w", None).await.unwrap();
    c.lease_grant(60, None).await.unwrap();
    assert_eq!(http_get(s.addr(), "/health").await.status, 200);
    let after = http_get(s.addr(), "/metrics").await.body;
    let grew = |series: &str, by: f64| {
        let (b, a) = (value(&before, series), value(&after, series));
        assert!(a - b >= by, "{series}: {b} -> {a}, not +{by}:\n{after}");
    };
    // A put in fsync mode: one batch written, synced and committed.
    grew("etcd_disk_wal_fsync_duration_seconds_count", 1.0);
    grew("etcd_disk_wal_write_duration_seconds_count", 1.0);
    grew("etcd_disk_backend_commit_duration_seconds_count", 1.0);
    grew("etcd_debugging_mvcc_total_put_size_in_bytes", 11.0);
    grew(
        "etcd_server_apply_duration_seconds_count{op=\"Put\",success=\"true\",version=\"v3\"}",
        1.0,
    );
    grew("etcd_server_range_duration_seconds_count{success=\"true\"}", 1.0);
    grew("etcd_debugging_mvcc_events_total", 1.0);
    grew("etcd_debugging_lease_granted_total", 1.0);
    grew("etcd_debugging_lease_ttl_total_count", 1.0);
    let unary = "grpc_method=\"Put\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"";
    grew(&format!("grpc_server_msg_received_total{{{unary}}}"), 1.0);
    grew(&format!("grpc_server_msg_sent_total{{{unary}}}"), 1.0);
    let watch_series =
        "grpc_method=\"Watch\",grpc_service=\"etcdserverpb.Watch\",grpc_type=\"bidi_stream\"";
    // The create request; the created response and the event.
    grew(&format!("grpc_server_msg_received_total{{{watch_series}}}"), 1.0);
    grew(&format!("grpc_server_msg_sent_total{{{watch_series}}}"), 2.0);
    grew("etcd_network_client_grpc_received_bytes_total", 11.0);
    grew("etcd_network_client_grpc_sent_bytes_total", 11.0);
    // By the API version the client announces (if any): all of them.
    let unary_calls = |page: &str| -> f64 {
        let calls = lines_with(page, "etcd_server_client_requests_total{");
        let unary = calls.iter().filter(|l| l.contains("type=\"unary\""));
        unary.filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
    };
    assert!(unary_calls(&after) - unary_calls(&before) >= 3.0, "{after}");
    grew("etcd_server_health_success", 1.0);
    grew("promhttp_metric_handler_requests_total{code=\"200\"}", 1.0);
    assert_eq!(value(&after, "promhttp_metric_handler_requests_in_flight"), 1.0);
    for live in
        ["os_fd_used", "os_fd_limit", "go_threads", "go_goroutines", "go_memstats_sys_bytes"]
    {
        assert!(value(&after, live) > 0.0, "{live}:\n{after}");
    }
    let id = lines_with(&after, "etcd_server_id{server_id=\"");
    assert_eq!(id.len(), 1, "{after}");
    let known = lines_with(&after, "etcd_network_known_peers{");
    assert_eq!(known.len(), 1, "a member alone knows itself:\n{after}");
}

/// A stream is counted as handled when it ends.
#[tokio::test]
async fn a_closed_watch_stream_is_counted_as_handled() {
    let s = server!();
    let mut c = s.client().await;
    let mut watch = c.watch("k", None).await.unwrap();
    assert!(watch.message().await.unwrap().expect("the created response").created());
    // The client goes away: the stream ends without a status.
    drop(watch);
    drop(c);
    let prefix = "grpc_server_handled_total{grpc_code=\"Canceled\",grpc_method=\"Watch\"";
    wait_until(&format!("a {prefix} line on /metrics"), Duration::from_secs(10), || async {
        let page = http_get(s.addr(), "/metrics").await.body;
        if lines_with(&page, prefix).is_empty() { Err(page) } else { Ok(()) }
    })
    .await;
}

/// `--listen-metrics-urls`: /metrics and the probes on their own port, nothing else.
#[tokio::test]
async fn a_metrics_listener_serves_metrics_and_probes_only() {
    let s = server!(["--listen-metrics-urls=http://127.0.0.1:0"]);
    // The harness returns once the client listener answers; the metrics listener's line may
    // still be on its way through the log reader.
    let addr: SocketAddr = wait_until("the metrics address", Duration::from_secs(10), || {
        let line = s.grep_log("serving /metrics and health probes");
        std::future::ready(line.first().and_then(|l| parse_field_address(l, "metrics_address")))
    })
    .await;
    assert_ne!(addr, s.addr());
    let m = http_get(addr, "/metrics").await;
    assert_eq!(m.status, 200);
    assert!(m.body.contains("etcd_server_has_leader 1"), "{}", m.body);
    assert_eq!(http_get(addr, "/health").await.body, r#"{"health":"true","reason":""}"#);
    assert_eq!(http_get(addr, "/readyz").await.status, 200);
    // etcd's metrics listener has no /version, and no gRPC.
    assert_eq!(http_get(addr, "/version").await.status, 404);
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut raw = Raw::new(ch);
    let r = raw.kv.range(pb::RangeRequest { key: "k".into(), ..Default::default() }).await;
    assert!(r.is_err(), "gRPC on the metrics listener: {r:?}");
}

/// /health turns unhealthy (503) while the WAL cannot write, and healthy again after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_fails_while_the_wal_cannot_write() {
    let dir = DataDir::new();
    let fp = dir.aside("failpoint");
    std::fs::write(&fp, "").unwrap();
    let s = dir.start(&["--fsync", "--wal-failpoint", fp.to_str().unwrap()]).await;
    let mut c = s.client().await;
    c.put("a", "1", None).await.unwrap();
    assert_eq!(http_get(s.addr(), "/health").await.status, 200);
    std::fs::write(&fp, "enospc").unwrap();
    // This write meets the full disk and waits for it to clear.
    let pending = tokio::spawn(async move { c.put("b", "2", None).await });
    wait_until("the WAL to fail", Duration::from_secs(10), || {
        std::future::ready(!s.grep_log("wal: write failed").is_empty())
    })
    .await;
    let h = http_get(s.addr(), "/health").await;
    assert_eq!(
        (h.status, h.body.as_str()),
        (503, "{\"health\":\"false\",\"reason\":\"WAL UNAVAILABLE\"}\n")
    );
    std::fs::write(&fp, "").unwrap();
    let put = tokio::time::timeout(Duration::from_secs(10), pending).await;
    assert!(matches!(put, Ok(Ok(Ok(_)))), "the held write after the disk recovered: {put:?}");
    assert_eq!(http_get(s.addr(), "/health").await.status, 200);
}

/// The counters behind `benches/compare_etcd.sh serial`: every revision passes the in-order
/// publisher and the WAL writer once, and every write holds the lock of the resource it
/// writes, each counted with the time it took there.
#[tokio::test]
async fn serial_sections_count_every_revision_and_every_partition_lock() {
    let mem = server_of!(Kind::MemEtcd);
    let mut c = mem.client().await;
    for i in 0..10 {
        c.put(format!("/registry/leases/kube-node-lease/n{i}"), "v", None).await.unwrap();
    }
    for i in 0..3 {
        c.put(format!("/registry/pods/default/p{i}"), "v", None).await.unwrap();
    }
    // A read-only Txn locks its partition too; a Range takes no write lock.
    let cmp = etcd_client::Compare::version(
        "/registry/pods/default/p0",
        etcd_client::CompareOp::Equal,
        1,
    );
    c.txn(etcd_client::Txn::new().when([cmp])).await.unwrap();
    c.get("/registry/pods/default/p1", None).await.unwrap();
    // The WAL reports a batch durable after the writes are acknowledged: wait for its count.
    let page = wait_until("the WAL writer's count", Duration::from_secs(5), || async {
        let page = http_get(mem.addr(), "/metrics").await.body;
        (sample(&page, "mem_etcd_serial_revisions_total{section=\"wal_writer\"}") == Some(13.0))
            .then_some(page)
    })
    .await;
    let passes = sample(&page, "mem_etcd_serial_passes_total{section=\"wal_writer\"}");
    assert!(passes.is_some_and(|p| (1.0..=13.0).contains(&p)), "{passes:?} passes");
    for (name, want) in [
        ("mem_etcd_serial_revisions_total{section=\"publisher\"}", 13.0),
        ("mem_etcd_partition_locks_total{prefix=\"/registry/leases/\"}", 10.0),
        ("mem_etcd_partition_locks_total{prefix=\"/registry/pods/\"}", 4.0),
    ] {
        assert_eq!(sample(&page, name), Some(want), "{name}");
    }
    for name in [
        "mem_etcd_serial_seconds_total{section=\"publisher\"}",
        "mem_etcd_serial_seconds_total{section=\"wal_writer\"}",
        "mem_etcd_partition_lock_seconds_total{prefix=\"/registry/leases/\"}",
        "mem_etcd_partition_lock_seconds_total{prefix=\"/registry/pods/\"}",
    ] {
        let s = sample(&page, name).unwrap_or_else(|| panic!("no {name}:\n{page}"));
        assert!(s > 0.0 && s < 1.0, "{name}: {s} s");
    }
}
