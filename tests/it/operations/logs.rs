//! The log lines etcd's tools and tests read: the ready line, the startup line, defragmentation,
//! request stats and compactions, in etcd's JSON shape.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::*;

/// The line that says a server is ready, reduced to its shape: etcd's four leading keys in
/// order, the timestamp's format, the level and the message.
async fn ready_line_shape(kind: Kind) -> Vec<String> {
    let Some(s) = Server::start(kind, &[]).await else {
        return Vec::new();
    };
    let lines = s.grep_log("ready to serve client requests");
    let line = lines.first().expect("a ready line");
    let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
    let at = |k: &str| line.find(&format!("\"{k}\":")).unwrap_or(usize::MAX);
    let ts = v["ts"].as_str().unwrap_or("");
    let ts_shape: String =
        ts.chars().map(|c| if c.is_ascii_digit() { '9' } else { c }).collect::<String>();
    vec![
        format!(
            "keys in order: {}",
            at("level") == 1
                && at("level") < at("ts")
                && at("ts") < at("caller")
                && at("caller") < at("msg")
        ),
        format!("level {}, msg {}", v["level"], v["msg"]),
        format!("ts {ts_shape}"),
        format!(
            "caller file:line: {}",
            v["caller"].as_str().is_some_and(|c| c
                .rsplit_once(':')
                .is_some_and(|(f, l)| f.contains('/') && l.parse::<u32>().is_ok()))
        ),
    ]
}

#[tokio::test]
async fn logs_are_json_lines_with_etcds_fields_by_default() {
    let mem = ready_line_shape(Kind::MemEtcd).await;
    let etcd = ready_line_shape(Kind::Etcd).await;
    if etcd.is_empty() {
        return; // a missing peer, with permission to skip (announced by the harness)
    }
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
    assert_eq!(mem[2], "ts 9999-99-99T99:99:99.999999Z");
}

/// The first JSON log line whose message is `msg` and which contains `also` (waits up to 15 s).
async fn log_line(s: &Server, msg: &str, also: &str) -> serde_json::Value {
    let needle = format!("\"msg\":\"{msg}\"");
    let l = wait_until(&format!("a {msg:?} line"), Duration::from_secs(15), || {
        std::future::ready(s.grep_log(&needle).into_iter().find(|l| l.contains(also)))
    })
    .await;
    serde_json::from_str(&l).unwrap_or_else(|e| panic!("{l}: {e}"))
}

/// A JSON value's type, for fields whose values differ between implementations.
fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "missing",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// Whether a field is a Go duration string (`1.5ms`, `948.031µs`, `1m0s`).
fn is_go_duration(v: &serde_json::Value) -> bool {
    v.as_str().is_some_and(|d| mem_etcd::duration::parse_duration(d).is_ok())
}

/// "starting an etcd server" with `--v2-deprecation=<v2>` and a snapshot catch-up count: the
/// values etcd's tests and log pipelines read, and the other fields' types.
async fn startup_line(kind: Kind, v2: &str) -> Vec<String> {
    let v2_flag = format!("--v2-deprecation={v2}");
    let flags = [v2_flag.as_str(), "--experimental-snapshot-catchup-entries=1000"];
    let Some(s) = Server::start(kind, &flags).await else {
        return Vec::new();
    };
    let v = log_line(&s, "starting an etcd server", "").await;
    let mut out = vec![format!("level {}", v["level"])];
    for k in [
        "v2-deprecation",
        "snapshot-catchup-entries",
        "etcd-version",
        "go-os",
        "go-arch",
        "member-initialized",
        "force-new-cluster",
        "heartbeat-interval",
        "election-timeout",
        "initial-cluster-state",
        "initial-cluster-token",
        "max-request-bytes",
        "max-concurrent-streams",
        "feature-gates",
        "initial-corrupt-check",
        "corrupt-check-time-interval",
        "compact-check-time-interval",
        "auto-compaction-mode",
        "auto-compaction-retention",
        "auto-compaction-interval",
        "wal-dir",
    ] {
        out.push(format!("{k}={}", v[k]));
    }
    for k in [
        "git-sha",
        "go-version",
        "max-cpu-set",
        "max-cpu-available",
        "name",
        "data-dir",
        "member-dir",
        "snapshot-count",
        "initial-advertise-peer-urls",
        "listen-peer-urls",
        "advertise-client-urls",
        "listen-client-urls",
        "listen-metrics-urls",
        "initial-cluster",
        "quota-backend-bytes",
    ] {
        out.push(format!("{k}: {}", json_type(&v[k])));
    }
    out
}

#[tokio::test]
async fn startup_line_carries_etcds_configuration_fields() {
    for v2 in ["gone", "write-only-drop-data", "write-only-skip-check"] {
        let mem = startup_line(Kind::MemEtcd, v2).await;
        assert!(mem.contains(&"snapshot-catchup-entries=1000".to_string()), "{mem:?}");
        let etcd = startup_line(Kind::Etcd, v2).await;
        if etcd.is_empty() {
            return; // a missing peer, with permission to skip (announced by the harness)
        }
        assert_eq!(mem, etcd, "--v2-deprecation={v2}: mem_etcd (left) and etcd (right) differ");
    }
}

/// "Skipping defragmentation" with a bootstrap defrag threshold, and no such line without one.
async fn bootstrap_defrag_line(kind: Kind) -> Vec<String> {
    let flags = ["--experimental-bootstrap-defrag-threshold-megabytes=1000"];
    let Some(s) = Server::start(kind, &flags).await else {
        return Vec::new();
    };
    let v = log_line(&s, "Skipping defragmentation", "").await;
    let mut out = vec![format!("level {}", v["level"])];
    for k in
        ["experimental-bootstrap-defrag-threshold-bytes", "experimental-bootstrap-defrag-threshold"]
    {
        out.push(format!("{k}={}", v[k]));
    }
    for k in [
        "current-db-size-bytes",
        "current-db-size",
        "current-db-size-in-use-bytes",
        "current-db-size-in-use",
    ] {
        out.push(format!("{k}: {}", json_type(&v[k])));
    }
    let (size, in_use) = (&v["current-db-size-bytes"], &v["current-db-size-in-use-bytes"]);
    out.push(format!("in use <= size: {}", in_use.as_i64() <= size.as_i64()));
    drop(s);
    let s = Server::start(kind, &[]).await.expect("the same kind again");
    out.push(format!("without the flag: {} lines", s.grep_log("Skipping defragmentation").len()));
    out
}

#[tokio::test]
async fn bootstrap_defrag_threshold_logs_that_defragmentation_is_skipped() {
    let mem = bootstrap_defrag_line(Kind::MemEtcd).await;
    assert!(mem.contains(&"without the flag: 0 lines".to_string()), "{mem:?}");
    let etcd = bootstrap_defrag_line(Kind::Etcd).await;
    if etcd.is_empty() {
        return; // a missing peer, with permission to skip (announced by the harness)
    }
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
}

/// "request stats" for a Put and a Range slower than `--warning-unary-request-duration=1us`
/// (every request is), and none for a Put under the default 300 ms.
async fn request_stats_lines(kind: Kind) -> Vec<String> {
    let Some(s) = Server::start(kind, &["--warning-unary-request-duration=1us"]).await else {
        return Vec::new();
    };
    let mut c = s.client().await;
    c.put("foo", "bar", None).await.unwrap();
    c.get("foo", None).await.unwrap();
    let mut out = Vec::new();
    for method in ["/etcdserverpb.KV/Put", "/etcdserverpb.KV/Range"] {
        let v = log_line(&s, "request stats", method).await;
        out.push(format!("level {}", v["level"]));
        for k in
            ["response type", "request count", "request size", "response count", "request content"]
        {
            out.push(format!("{k}={}", v[k]));
        }
        out.push(format!("response size: {}", json_type(&v["response size"])));
        out.push(format!("time spent a duration: {}", is_go_duration(&v["time spent"])));
        let start = v["start time"].as_str().unwrap_or("");
        let shape: String =
            start.chars().map(|c| if c.is_ascii_digit() { '9' } else { c }).collect();
        out.push(format!("start time {shape}"));
        let remote = v["remote"].as_str().unwrap_or("");
        out.push(format!("remote an address: {}", remote.parse::<SocketAddr>().is_ok()));
    }
    drop(s);
    let s = Server::start(kind, &[]).await.expect("the same kind again");
    s.client().await.put("foo", "bar", None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    out.push(format!("under the default: {} lines", s.grep_log("\"request stats\"").len()));
    out
}

#[tokio::test]
async fn slow_requests_are_logged_as_request_stats() {
    let mem = request_stats_lines(Kind::MemEtcd).await;
    assert!(mem.contains(&"under the default: 0 lines".to_string()), "{mem:?}");
    let etcd = request_stats_lines(Kind::Etcd).await;
    if etcd.is_empty() {
        return; // a missing peer, with permission to skip (announced by the harness)
    }
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
}

/// "finished scheduled compaction" after ten puts to one key and a compaction at 5: the
/// revision, the hash of the compacted history (the same value on both for the same
/// history), and the other fields' types.
async fn compaction_line(kind: Kind) -> Vec<String> {
    let Some(s) = Server::start(kind, &[]).await else {
        return Vec::new();
    };
    let mut c = s.client().await;
    for i in 1..=10 {
        c.put("key", format!("v{i}"), None).await.unwrap();
    }
    c.compact(5, None).await.unwrap();
    let v = log_line(&s, "finished scheduled compaction", "").await;
    let mut out = vec![format!("level {}", v["level"])];
    for k in ["compact-revision", "hash"] {
        out.push(format!("{k}={}", v[k]));
    }
    out.push(format!("took a duration: {}", is_go_duration(&v["took"])));
    for k in [
        "current-db-size-bytes",
        "current-db-size",
        "current-db-size-in-use-bytes",
        "current-db-size-in-use",
    ] {
        out.push(format!("{k}: {}", json_type(&v[k])));
    }
    out
}

#[tokio::test]
async fn compaction_logs_its_revision_and_hash() {
    let mem = compaction_line(Kind::MemEtcd).await;
    assert!(mem.contains(&"compact-revision=5".to_string()), "{mem:?}");
    let etcd = compaction_line(Kind::Etcd).await;
    if etcd.is_empty() {
        return; // a missing peer, with permission to skip (announced by the harness)
    }
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
}

/// A restart finishes the compaction its log holds on the restored store, and says so (etcd
/// says so for a compaction a crash interrupted; its e2e tests wait for the line after a
/// restart).
#[tokio::test]
async fn a_restart_logs_the_compaction_it_finishes() {
    let dir = DataDir::new();
    let s = dir.start(&[]).await;
    let mut c = s.client().await;
    for i in 1..=10 {
        c.put("key", format!("v{i}"), None).await.unwrap();
    }
    c.compact(5, None).await.unwrap();
    drop(c);
    s.stop(Duration::from_secs(10)).await;
    let s = dir.start(&[]).await;
    let v = log_line(&s, "finished scheduled compaction", "").await;
    assert_eq!(v["compact-revision"], 5, "{v}");
}
