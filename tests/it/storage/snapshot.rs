//! Backups: Maintenance.Snapshot streams an etcd snapshot.db, so what the real `etcdctl
//! snapshot save` saves from mem_etcd (alone or a cluster member) is read by the real
//! `etcdutl snapshot status|restore` as etcd's is, and served by etcd with the same history;
//! `mem_etcd snapshot restore` turns it (or etcd's) into a data directory on which mem_etcd has
//! every key, version, lease and the revision of the moment the snapshot was taken. Damaged,
//! truncated snapshot files are refused. Backups older mem_etcds saved in their own format
//! still restore, and `mem_etcd snapshot export` turns them into an etcd snapshot.db.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use etcd_client::{EventType, GetOptions, LeaseTimeToLiveOptions, WatchOptions};
use tokio_stream::StreamExt;

use crate::support::*;
use crate::tools::etcdctl::etcdctl;

fn mem_etcd() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mem_etcd"))
}

/// `etcdctl snapshot save file` against `s`; panics unless it succeeds. Returns its stdout.
async fn save(ctl: &Path, s: &Server, file: &Path) -> String {
    let (ctl, ep, file) = (ctl.to_path_buf(), s.endpoint(), file.to_path_buf());
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        etcdctl(&ctl, &ep, &["snapshot", "save", file.to_str().unwrap()], None)
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "etcdctl snapshot save failed:\n{out}\n{err}");
    out
}

/// `mem_etcd snapshot <args>`: (exit code, stdout, stderr).
fn snapshot_cmd(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(mem_etcd()).arg("snapshot").args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Restores `file` into `dir`, which must succeed; returns the snapshot's revision.
fn restore(file: &Path, dir: &Path) -> i64 {
    let (code, out, err) =
        snapshot_cmd(&["restore", file.to_str().unwrap(), "--data-dir", dir.to_str().unwrap()]);
    assert_eq!(code, Some(0), "restore failed:\n{out}\n{err}");
    let rev = out.split("revision ").nth(1).and_then(|r| r.split(',').next());
    rev.and_then(|r| r.parse().ok()).unwrap_or_else(|| panic!("no revision in {out:?}"))
}

/// Restoring `file` into a fresh directory must fail with a message containing `want`, and
/// leave no data directory behind.
fn assert_refused(file: &Path, want: &str) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (code, out, err) =
        snapshot_cmd(&["restore", file.to_str().unwrap(), "--data-dir", data.to_str().unwrap()]);
    assert_eq!(code, Some(1), "restore of {} should fail:\n{out}\n{err}", file.display());
    assert!(err.contains(want), "expected {want:?} in:\n{err}");
    assert!(!data.exists(), "a refused restore left {}", data.display());
}

async fn put(c: &mut etcd_client::Client, k: &str, v: impl Into<Vec<u8>>) -> i64 {
    rev(c.put(k, v, None).await.unwrap().header())
}

/// Everything at `at` (0: now), values included.
async fn all_at(c: &mut etcd_client::Client, at: i64) -> (i64, Vec<Kv>) {
    let r = c.get("", Some(GetOptions::new().with_all_keys().with_revision(at))).await.unwrap();
    (rev(r.header()), kvs(r.kvs()))
}

/// Every event from `from` through `to`, with previous values, in order.
async fn events(c: &mut etcd_client::Client, from: i64, to: i64) -> Vec<(i32, Kv, Option<Kv>)> {
    let opts = WatchOptions::new().with_all_keys().with_start_revision(from).with_prev_key();
    let mut stream = c.watch("", Some(opts)).await.unwrap();
    let mut out = Vec::new();
    let mut last = 0;
    while last < to {
        let resp = tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .unwrap_or_else(|_| panic!("no events after revision {last} (want up to {to})"))
            .unwrap()
            .expect("the watch ended");
        for e in resp.events() {
            let kv = e.kv().expect("an event has a kv");
            last = kv.mod_revision();
            if last <= to {
                let kind = if e.event_type() == EventType::Put { 0 } else { 1 };
                out.push((kind, Kv::from(kv), e.prev_kv().map(Kv::from)));
            }
        }
    }
    out
}

/// Leases as (id, granted TTL, attached keys), sorted.
async fn leases(c: &mut etcd_client::Client) -> Vec<(i64, i64, Vec<Vec<u8>>)> {
    let ids: Vec<i64> = c.leases().await.unwrap().leases().iter().map(|l| l.id()).collect();
    let mut out = Vec::new();
    for id in ids {
        let t = c.lease_time_to_live(id, Some(LeaseTimeToLiveOptions::new().with_keys())).await;
        let t = t.unwrap();
        let mut keys = t.keys().to_vec();
        keys.sort();
        out.push((id, t.granted_ttl(), keys));
    }
    out.sort();
    out
}

#[tokio::test]
async fn etcdctl_snapshot_save_gets_etcds_stream_shape() {
    let Some(ctl) = peer_binary("etcdctl") else { return };
    let s = Server::start(Kind::MemEtcd, &[]).await.unwrap();
    let mut c = s.client().await;
    // Big enough for several 32 KiB blobs.
    for i in 0..100 {
        put(&mut c, &format!("/registry/configmaps/ns/c{i}"), vec![b'x'; 1000 + i]).await;
    }
    let at = put(&mut c, "last", "v").await;

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.db");
    let out = save(&ctl, &s, &file).await;
    assert!(out.contains("Snapshot saved at"), "{out}");
    // etcd sends its storage version (major.minor.0).
    assert!(out.contains("Server version 3.6.0"), "{out}");
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(bytes.len() % 512, 32, "etcdctl keeps only files whose size says a sha256 follows");

    // The raw stream: 32 KiB blobs counting down to 0, then the 32-byte sha256.
    let mut raw = s.raw().await.unwrap();
    let mut stream = raw.maint.snapshot(pb::SnapshotRequest {}).await.unwrap().into_inner();
    let mut msgs = Vec::new();
    while let Some(m) = stream.next().await {
        msgs.push(m.unwrap());
    }
    let (sha, body) = msgs.split_last().unwrap();
    assert_eq!(body[0].header.as_ref().map(|h| h.revision), Some(at), "the point in time");
    let total: usize = body.iter().map(|m| m.blob.len()).sum();
    let mut left = total;
    for (i, m) in body.iter().enumerate() {
        left -= m.blob.len();
        assert_eq!(m.remaining_bytes as usize, left, "blob {i}");
        assert!(m.blob.len() == 32 << 10 || i == body.len() - 1, "blob {i}: {}", m.blob.len());
        assert_eq!(m.version, "3.6.0");
    }
    assert!(body.len() > 3, "{} blobs", body.len());
    assert_eq!((sha.blob.len(), sha.remaining_bytes), (32, 0));
    let streamed: Vec<u8> = msgs.iter().flat_map(|m| m.blob.to_vec()).collect();
    assert_eq!(streamed, bytes, "nothing written since: the same snapshot");

    let (code, out, err) = snapshot_cmd(&["status", file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains(&format!("revision: {at}\n")) && out.contains("keys: 101 "), "{out}");
}

/// A compaction while a snapshot streams takes effect at once (reads below it fail) but frees
/// nothing the snapshot still has to send; once the client leaves, the versions go.
#[tokio::test]
async fn a_compaction_during_a_snapshot_takes_effect_at_once_and_frees_once_the_client_leaves() {
    let s = Server::start(Kind::MemEtcd, &["--wal-mode", "none"]).await.unwrap();
    let mut c = s.client().await;
    // Far more than the queue and the connection's windows hold: the sender has to wait. Each
    // key written twice, so that compacting frees the first versions (4 MiB).
    for round in 0..2 {
        for i in 0..64 {
            put(&mut c, &format!("/registry/configmaps/ns/c{i}"), vec![b'0' + round; 64 << 10])
                .await;
        }
    }
    let at = put(&mut c, "last", "v").await;
    let db_size = |raw: &mut Raw| {
        let mut m = raw.maint.clone();
        async move { m.status(pb::StatusRequest {}).await.unwrap().into_inner().db_size }
    };
    let mut raw = s.raw().await.unwrap();
    let before = db_size(&mut raw).await;
    let mut stream = raw.maint.snapshot(pb::SnapshotRequest {}).await.unwrap().into_inner();
    stream.next().await.unwrap().unwrap();
    let compacted = tokio::time::timeout(Duration::from_secs(5), c.compact(at, None)).await;
    compacted.expect("a compaction waits for no snapshot").unwrap();
    let below =
        c.get("/registry/configmaps/ns/c0", Some(GetOptions::new().with_revision(at - 1))).await;
    assert_eq!(
        status_of(&below.unwrap_err()).1,
        "etcdserver: mvcc: required revision has been compacted"
    );
    assert!(db_size(&mut raw).await >= before, "freed while the snapshot still streams");
    drop(stream);
    let what = format!("3 MiB of the {before} bytes freed once the client left");
    wait_until(&what, Duration::from_secs(10), || {
        let size = db_size(&mut raw);
        async move {
            let size = size.await;
            if size <= before - (3 << 20) { Ok(()) } else { Err(format!("db size {size}")) }
        }
    })
    .await;
}

/// Waits until writers (of the test) have written 200 revisions more, read through `c`.
async fn writes_go_on(c: &etcd_client::Client, what: &str) {
    let since = current_rev(&mut c.clone()).await;
    wait_until(what, Duration::from_secs(10), || {
        let mut c = c.clone();
        async move { current_rev(&mut c).await >= since + 200 }
    })
    .await;
}

#[tokio::test]
async fn a_restored_snapshot_is_the_source_at_the_snapshots_revision() {
    let Some(ctl) = peer_binary("etcdctl") else { return };
    // No data dir at the source: a snapshot is of the memory, not of a log.
    let src = Server::start(Kind::MemEtcd, &["--wal-mode", "none"]).await.unwrap();
    let mut c = src.client().await;
    let big = |i: usize| format!("{i:04}").repeat(500);
    for i in 0..300 {
        put(&mut c, &format!("/registry/pods/ns{}/p{i}", i % 3), big(i)).await;
    }
    for i in 0..60 {
        put(&mut c, &format!("/registry/configmaps/ns/c{}", i % 12), format!("c{i}")).await;
        put(&mut c, &format!("plain/{}", i % 7), format!("p{i}")).await;
    }
    c.delete("/registry/pods/ns1/", Some(etcd_client::DeleteOptions::new().with_prefix()))
        .await
        .unwrap();
    let compacted = put(&mut c, "plain/0", "at the compaction").await;
    for i in 0..40 {
        put(&mut c, &format!("/registry/configmaps/ns/c{}", i % 5), format!("after {i}")).await;
    }
    c.delete("plain/3", None).await.unwrap();
    c.compact(compacted, None).await.unwrap();
    let mut granted = Vec::new();
    for ttl in [600, 1200, 3000] {
        let id = c.lease_grant(ttl, None).await.unwrap().id();
        for k in 0..2 {
            let opts = etcd_client::PutOptions::new().with_lease(id);
            c.put(format!("/registry/leases/l{ttl}-{k}"), "held", Some(opts)).await.unwrap();
        }
        granted.push(id);
    }
    // A revoked lease: its keys' deletions are history, the lease is gone.
    c.lease_revoke(granted[1]).await.unwrap();
    let before_writers = put(&mut c, "plain/marker", "m").await;

    // Writers keep writing (overwriting keys the snapshot reads, adding and deleting keys in
    // every partition) until well after the snapshot was taken.
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..2 {
        let (mut c, stop) = (src.client().await, stop.clone());
        writers.push(tokio::spawn(async move {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let k = format!("/registry/pods/ns{}/p{}", n % 3, (n * 7 + w) % 300);
                c.put(k.as_str(), format!("w{w}-{n}"), None).await.unwrap();
                c.put(format!("plain/w{w}-{}", n % 50), "new", None).await.unwrap();
                if n.is_multiple_of(5) {
                    c.delete(format!("/registry/configmaps/ns/c{}", n % 12), None).await.unwrap();
                }
                n += 1;
            }
            n
        }));
    }
    writes_go_on(&c, "the writers' writes before the snapshot").await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.db");
    save(&ctl, &src, &file).await;
    writes_go_on(&c, "the writers' writes after the snapshot").await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        assert!(w.await.unwrap() > 10, "the writers did write");
    }

    let data = DataDir::new();
    let at = restore(&file, data.path());
    let now = put(&mut c, "plain/after", "x").await;
    assert!(
        before_writers < at && at < now,
        "snapshot at {at}: writers wrote {before_writers}..{now}"
    );
    let dst = data.start(&[]).await;
    let mut r = dst.client().await;

    // The state at the snapshot's revision, and nothing after it.
    let (head, restored) = all_at(&mut r, 0).await;
    assert_eq!(head, at, "the restored server is at the snapshot's revision");
    let (_, source) = all_at(&mut c, at).await;
    assert_eq!(restored.len(), source.len());
    assert!(restored == source, "the state at revision {at} differs");
    // The history since the compaction: the state there, and every event after it (values
    // and previous values included), which is every key's every version at every revision.
    assert_eq!(all_at(&mut r, compacted).await.1, all_at(&mut c, compacted).await.1);
    assert_err(
        r.get("plain/0", Some(GetOptions::new().with_revision(compacted - 1))).await,
        tonic::Code::OutOfRange,
        E_COMPACTED,
    );
    let (want, got) =
        (events(&mut c, compacted + 1, at).await, events(&mut r, compacted + 1, at).await);
    assert_eq!(want.len(), got.len());
    assert!(want == got, "events {}..={at} differ", compacted + 1);
    // Ranges at sampled revisions (keys only), counts included.
    for at_rev in (compacted..=at).step_by(((at - compacted) / 20).max(1) as usize) {
        let opts =
            || Some(GetOptions::new().with_all_keys().with_revision(at_rev).with_keys_only());
        let (a, b) = (c.get("", opts()).await.unwrap(), r.get("", opts()).await.unwrap());
        assert_eq!((a.count(), kvs(a.kvs())), (b.count(), kvs(b.kvs())), "at {at_rev}");
    }

    // Leases: the same ids, granted TTLs and keys (no lease changed while writers ran).
    let want = leases(&mut c).await;
    assert_eq!(want.iter().map(|l| l.0).collect::<Vec<_>>(), [granted[0], granted[2]]);
    assert_eq!(leases(&mut r).await, want);

    // Revisions go on from the snapshot's, also after a restart.
    assert_eq!(put(&mut r, "plain/restored", "r").await, at + 1);
    dst.stop(Duration::from_secs(10)).await;
    let dst = data.start(&[]).await;
    let mut r = dst.client().await;
    assert_eq!(put(&mut r, "plain/restored", "again").await, at + 2);
    assert_eq!(leases(&mut r).await, want);
}

#[tokio::test]
async fn damaged_or_truncated_snapshots_and_used_data_dirs_are_refused() {
    let Some(ctl) = peer_binary("etcdctl") else { return };
    let s = Server::start(Kind::MemEtcd, &[]).await.unwrap();
    let mut c = s.client().await;
    for i in 0..50 {
        put(&mut c, &format!("/registry/secrets/s{i}"), vec![b'v'; 300]).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.db");
    save(&ctl, &s, &good).await;
    let bytes = std::fs::read(&good).unwrap();

    let flipped = dir.path().join("flipped.db");
    let mut b = bytes.clone();
    b[bytes.len() / 2] ^= 0x10;
    std::fs::write(&flipped, &b).unwrap();
    assert_refused(&flipped, "is damaged or truncated: the sha256");

    let truncated = dir.path().join("truncated.db");
    std::fs::write(&truncated, &bytes[..bytes.len() - 100]).unwrap();
    assert_refused(&truncated, "has no sha256 at its end");
    // Cut where a sha256 could end: the last 32 bytes are not the content's sha256.
    std::fs::write(&truncated, &bytes[..bytes.len() - 512]).unwrap();
    assert_refused(&truncated, "is damaged or truncated: the sha256");

    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, b"hello").unwrap();
    assert_refused(&garbage, "is not a snapshot: neither an etcd snapshot.db");

    // A used data dir is refused; the snapshot itself is fine.
    let used = tempfile::tempdir().unwrap();
    std::fs::write(used.path().join("x"), "x").unwrap();
    let (code, _, err) = snapshot_cmd(&[
        "restore",
        good.to_str().unwrap(),
        "--data-dir",
        used.path().to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("is not empty"), "{err}");
    let fresh = tempfile::tempdir().unwrap();
    restore(&good, &fresh.path().join("data"));
}

/// The same history on two servers: every range at every revision since the compaction, the
/// events since it, the leases with their keys, and the compaction itself.
async fn assert_same_history(
    a: &mut etcd_client::Client,
    b: &mut etcd_client::Client,
    compacted: i64,
    at: i64,
) {
    assert_eq!(all_at(a, 0).await, all_at(b, 0).await);
    for r in compacted..=at {
        assert_eq!(all_at(a, r).await, all_at(b, r).await, "at revision {r}");
    }
    assert_eq!(events(a, compacted, at).await, events(b, compacted, at).await);
    assert_eq!(leases(a).await, leases(b).await);
    for c in [&mut *a, &mut *b] {
        let e = c.get("", Some(GetOptions::new().with_all_keys().with_revision(compacted - 1)));
        let e = e.await;
        let e = e.expect_err("compacted");
        assert!(e.to_string().contains("required revision has been compacted"), "{e}");
    }
}

/// A history with everything a snapshot.db can hold: versions, deletes, a txn's sub-revisions,
/// leases with keys, a compaction. Returns (compacted, revision).
async fn write_history(c: &mut etcd_client::Client) -> (i64, i64) {
    use etcd_client::{PutOptions, Txn, TxnOp};
    for i in 0..30 {
        put(c, &format!("/registry/configmaps/ns/c{}", i % 7), format!("v{i}")).await;
    }
    c.delete("/registry/configmaps/ns/c3", None).await.unwrap();
    let lease = c.lease_grant(3600, None).await.unwrap().id();
    let lease2 = c.lease_grant(600, None).await.unwrap().id();
    let opts = || Some(PutOptions::new().with_lease(lease));
    c.put("/registry/events/ns/e1", "ev1", opts()).await.unwrap();
    c.put("/registry/events/ns/e2", "ev2", opts()).await.unwrap();
    c.put("/registry/leases/x", "l", Some(PutOptions::new().with_lease(lease2))).await.unwrap();
    let compacted = put(c, "/registry/configmaps/ns/c0", "before-compaction").await;
    c.compact(compacted, None).await.unwrap();
    let ops = vec![
        TxnOp::put("/registry/pods/ns/p1", "a", None),
        TxnOp::put("/registry/pods/ns/p2", "b", None),
        TxnOp::delete("/registry/configmaps/ns/c1", None),
    ];
    c.txn(Txn::new().and_then(ops)).await.unwrap();
    c.delete("/registry/configmaps/ns/c2", None).await.unwrap();
    let at = put(c, "/registry/configmaps/ns/c4", vec![0u8, 0xff, b'\n']).await;
    (compacted, at)
}

/// An etcd holding `write_history`'s history, and a mem_etcd started on its snapshot
/// (`dir/etcd.db`) restored into `data`.
struct Restored {
    ctl: PathBuf,
    etcd: Server,
    mem: Server,
    dir: tempfile::TempDir,
    _data: DataDir,
    compacted: i64,
    at: i64,
}

/// `None` when etcd or etcdctl is missing and skipping is allowed.
async fn restored_from_etcd() -> Option<Restored> {
    let ctl = peer_binary("etcdctl")?;
    let etcd = Server::start(Kind::Etcd, &[]).await?;
    let (compacted, at) = write_history(&mut etcd.client().await).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("etcd.db");
    save(&ctl, &etcd, &file).await;
    let data = DataDir::new();
    assert_eq!(restore(&file, data.path()), at);
    let mem = data.start(&[]).await;
    Some(Restored { ctl, etcd, mem, dir, _data: data, compacted, at })
}

/// `mem_etcd snapshot export file` to a new etcd snapshot.db `out`; panics unless it succeeds.
fn export(file: &Path, out: &Path) {
    let (code, o, err) =
        snapshot_cmd(&["export", file.to_str().unwrap(), "--output", out.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{o}{err}");
}

/// `etcdutl snapshot restore file` into `dir`, as the member the harness starts etcd as.
fn etcdutl_restore(etcdutl: &Path, file: &Path, dir: &DataDir) {
    let restored = Command::new(etcdutl)
        .args(["snapshot", "restore", file.to_str().unwrap(), "--data-dir"])
        .arg(dir.path())
        .args(["--name", "it", "--initial-cluster", "it=http://127.0.0.1:2380"])
        .args(["--initial-advertise-peer-urls", "http://127.0.0.1:2380"])
        .output()
        .unwrap();
    assert!(restored.status.success(), "etcdutl: {}", String::from_utf8_lossy(&restored.stderr));
}

/// `etcdutl snapshot status -w json file`: (revision, totalKey, version); panics unless it
/// succeeds.
fn etcdutl_status(etcdutl: &Path, file: &Path) -> (i64, i64, String) {
    let out = Command::new(etcdutl)
        .args(["snapshot", "status", "-w", "json", file.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "etcdutl: {text}{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(text.trim()).expect("etcdutl's JSON");
    (
        v["revision"].as_i64().expect("revision"),
        v["totalKey"].as_i64().expect("totalKey"),
        v["version"].as_str().expect("version").to_owned(),
    )
}

#[tokio::test]
async fn a_snapshot_of_etcd_restores_with_its_revisions_and_goes_back_through_etcdutl() {
    let Some(etcdutl) = peer_binary("etcdutl") else { return };
    let Some(Restored { ctl, etcd, mem, dir, compacted, at, .. }) = restored_from_etcd().await
    else {
        return;
    };
    let (mut e, mut m) = (etcd.client().await, mem.client().await);
    let file = dir.path().join("etcd.db");
    let (code, out, err) = snapshot_cmd(&["status", file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("format: etcd (bbolt)"), "{out}");
    assert!(out.contains(&format!("revision: {at}\ncompact revision: {compacted}")), "{out}");

    // etcd -> mem_etcd: the same history.
    assert_same_history(&mut e, &mut m, compacted, at).await;
    // Writing goes on after the revision, on both alike.
    let next = put(&mut m, "/registry/configmaps/ns/after", "x").await;
    assert_eq!(next, put(&mut e, "/registry/configmaps/ns/after", "x").await);
    assert_eq!(next, at + 1);

    // mem_etcd -> etcd: saved from mem_etcd, read by etcdutl as etcd's snapshot of the same
    // history is, restored by etcdutl, served by etcd.
    let mine = dir.path().join("mem.db");
    save(&ctl, &mem, &mine).await;
    let theirs = dir.path().join("etcd-next.db");
    save(&ctl, &etcd, &theirs).await;
    let status = etcdutl_status(&etcdutl, &mine);
    assert_eq!(status, etcdutl_status(&etcdutl, &theirs));
    assert_eq!(status.0, next);
    let etcd_dir = DataDir::new();
    etcdutl_restore(&etcdutl, &mine, &etcd_dir);
    let etcd2 = etcd_dir.start_kind(Kind::Etcd, &[]).await;
    let mut e2 = etcd2.client().await;
    assert_same_history(&mut m, &mut e2, compacted, next).await;
    assert_eq!(put(&mut e2, "k", "v").await, next + 1);

    // Damaged etcd snapshots are refused before anything is written.
    let bytes = std::fs::read(&file).unwrap();
    let bad = dir.path().join("bad.db");
    let mut b = bytes.clone();
    b[bytes.len() / 2] ^= 0x10;
    std::fs::write(&bad, &b).unwrap();
    assert_refused(&bad, "is damaged or truncated: the sha256");
    std::fs::write(&bad, &bytes[..bytes.len() - 100]).unwrap();
    assert_refused(&bad, "has no sha256 at its end");
    // A database cut short, its checksum skipped: bbolt's own structure says so.
    std::fs::write(&bad, &bytes[..bytes.len() - 32 - 8192]).unwrap();
    let (code, _, err) = snapshot_cmd(&[
        "restore",
        bad.to_str().unwrap(),
        "--skip-hash-check",
        "--data-dir",
        dir.path().join("d").to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("truncated"), "{err}");

    // etcdctl prints the same server version for both.
    let from_etcd = save(&ctl, &etcd, &dir.path().join("e.db")).await;
    let from_mem = save(&ctl, &mem, &dir.path().join("m.db")).await;
    let version =
        |out: &str| out.lines().find(|l| l.starts_with("Server version")).map(str::to_owned);
    assert_eq!(version(&from_mem), version(&from_etcd));
    assert!(version(&from_etcd).is_some(), "{from_etcd}");
}

/// `mem_etcd check copy`: an etcd's history restored into mem_etcd is exact, key by key and by
/// HashKV; once the two take different writes at the same revision it says where they differ,
/// and the history before that still compares exact.
#[tokio::test]
async fn check_copy_finds_a_restored_etcd_snapshot_exact_then_the_first_difference() {
    let Some(Restored { etcd, mem, compacted, at, .. }) = restored_from_etcd().await else {
        return;
    };
    let (mut e, mut m) = (etcd.client().await, mem.client().await);
    let check = |extra: &[&str]| {
        let mut args = vec!["check", "copy", "--source"];
        let (src, copy) = (etcd.endpoint(), mem.endpoint());
        args.extend([src.as_str(), "--copy", copy.as_str()]);
        args.extend(extra);
        let out = Command::new(mem_etcd()).args(&args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.code(), text + &String::from_utf8_lossy(&out.stderr))
    };
    let (code, out) = check(&[]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&format!("at revision {at}")), "{out}");
    assert!(out.contains(&format!("(compacted at {compacted})")), "{out}");
    assert!(out.ends_with("the copy is exact\n"), "{out}");

    // The same revision, different values: the key and the hash differ.
    let key = "/registry/configmaps/ns/c5";
    assert_eq!(put(&mut e, key, "from etcd").await, at + 1);
    assert_eq!(put(&mut m, key, "from the copy").await, at + 1);
    let (code, out) = check(&[]);
    assert_eq!(code, Some(1), "{out}");
    let line = format!("differs: {key:?}: value of 9 bytes in the source, 13 bytes in the copy");
    assert!(out.contains(&line), "{out}");
    assert!(out.contains(&format!("differs: HashKV at {}", at + 1)), "{out}");
    assert!(out.ends_with("the copy differs: 2 difference(s)\n"), "{out}");
    // Before those writes the histories are still the same.
    let (code, out) = check(&["--revision", &at.to_string()]);
    assert_eq!(code, Some(0), "{out}");
    // A key the copy alone has, and a compaction the source alone made.
    put(&mut m, "/registry/pods/ns/only-copy", "x").await;
    put(&mut e, "/registry/pods/ns/only-source", "x").await;
    e.compact(at + 1, None).await.unwrap();
    let (code, out) = check(&["--revision", &(at + 2).to_string()]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("differs: \"/registry/pods/ns/only-copy\" is only in the copy"), "{out}");
    assert!(
        out.contains("differs: \"/registry/pods/ns/only-source\" is only in the source"),
        "{out}"
    );
    let compactions = format!("compacted at {} in the source, {compacted} in the copy", at + 1);
    assert!(out.contains(&compactions), "{out}");
    // A revision one side cannot answer is an error, not a verdict.
    let (code, out) = check(&["--revision", &at.to_string()]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("source: Range at"), "{out}");
    assert!(out.contains("required revision has been compacted"), "{out}");

    // With auth enabled on both (as a copy restored from the source has it), an anonymous
    // check cannot read; logged in as root it can, and says the same as before.
    let ctl = peer_binary("etcdctl").expect("etcdctl peer");
    set_up_auth(&ctl, &etcd.endpoint());
    set_up_auth(&ctl, &mem.endpoint());
    let (code, out) = check(&[]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("source: etcdserver: user name is empty"), "{out}");
    let (code, out) = check(&["--user", "root:wrong"]);
    assert_eq!(code, Some(2), "{out}");
    let refused = "source: authenticate as root: etcdserver: authentication failed, invalid user \
                   ID or password";
    assert!(out.contains(refused), "{out}");
    let (code, out) = check(&["--user", "root", "--password", "rootpw"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("differs: \"/registry/pods/ns/only-copy\" is only in the copy"), "{out}");
    assert!(!out.contains("/app/x"), "{out}");
}

/// `mem_etcd follow`: a mem_etcd restored from an etcd's snapshot follows that etcd while it
/// takes writes (puts, a txn, a prefix delete, leases granted, attached, revoked and expiring,
/// a compaction), at its revisions. The cut-over (`--until-idle`) ends once etcd is idle and
/// the copy checks exact; the copy then holds etcd's keys, revisions, leases and compaction,
/// and takes the next write at etcd's next revision.
#[tokio::test]
async fn follow_keeps_a_restored_copy_at_the_sources_revisions_until_the_cut_over() {
    use etcd_client::{DeleteOptions, PutOptions, Txn, TxnOp};
    let Some(Restored { etcd, mem, at, .. }) = restored_from_etcd().await else {
        return;
    };
    let (src, copy) = (etcd.endpoint(), mem.endpoint());
    let metrics: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let listen = format!("http://{metrics}");
    let args = ["follow", "--source", &src, "--target", &copy, "--until-idle", "5s"];
    let args = [&args[..], &["--listen-metrics-urls", &listen]].concat();
    let follower = std::process::Command::new(mem_etcd())
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut e = etcd.client().await;
    for i in 0..40 {
        put(&mut e, &format!("/registry/pods/ns/f{}", i % 9), format!("v{i}")).await;
    }
    // Objects near etcd's request limit: a watch answer or a page of them passes tonic's 4 MiB.
    for i in 0..6 {
        put(&mut e, &format!("/registry/configmaps/ns/big{i}"), "b".repeat(1 << 20)).await;
    }
    // Auth changes (auth stays off): a tenant's role with its prefix, and its user.
    e.role_add("tenant").await.unwrap();
    let perm = etcd_client::Permission::read_write("/tenant/").with_prefix();
    e.role_grant_permission("tenant", perm).await.unwrap();
    e.user_add("alice", "pw", None).await.unwrap();
    e.user_grant_role("alice", "tenant").await.unwrap();
    let kept = e.lease_grant(30, None).await.unwrap().id();
    let revoked = e.lease_grant(3600, None).await.unwrap().id();
    let expiring = e.lease_grant(2, None).await.unwrap().id();
    let with = |l: i64| Some(PutOptions::new().with_lease(l));
    e.put("/registry/events/ns/kept", "1", with(kept)).await.unwrap();
    e.put("/registry/events/ns/revoked-1", "1", with(revoked)).await.unwrap();
    e.put("/registry/events/ns/revoked-2", "2", with(revoked)).await.unwrap();
    e.put("/registry/masterleases/10.0.0.1", "ip", with(expiring)).await.unwrap();
    e.lease_revoke(revoked).await.unwrap();
    let ops = vec![
        TxnOp::put("/registry/pods/ns/t1", "a", None),
        TxnOp::put("/registry/pods/ns/f0", "changed in a txn", None),
        TxnOp::delete("/registry/pods/ns/f1", None),
    ];
    e.txn(Txn::new().and_then(ops)).await.unwrap();
    let deleted = e.delete("/registry/pods/ns/f", Some(DeleteOptions::new().with_prefix()));
    assert_eq!(deleted.await.unwrap().deleted(), 8);
    // The expiring lease's revocation (etcd's own, at its TTL) is a revision too.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(e.lease_time_to_live(expiring, None).await.unwrap().ttl(), -1);
    let head = put(&mut e, "/registry/configmaps/ns/last", "x").await;
    // 46 puts, 4 puts with leases, the revocation, the txn, the prefix delete, the expiry.
    assert_eq!(head, at + 55);
    // The lag on /metrics: the copy reaches the source's head, 0 behind, every revision timed.
    let page = |body: &str, name: &str| {
        body.lines().find_map(|l| l.strip_prefix(&format!("{name} "))?.parse::<f64>().ok())
    };
    let start = std::time::Instant::now();
    let body = loop {
        let a = crate::operations::http_get(metrics, "/metrics").await;
        assert_eq!(a.status, 200, "{a:?}");
        let caught_up = page(&a.body, "mem_etcd_follow_source_revision") == Some(head as f64)
            && page(&a.body, "mem_etcd_follow_applied_revision") == Some(head as f64);
        if caught_up || start.elapsed() > Duration::from_secs(30) {
            break a.body;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(page(&body, "mem_etcd_follow_applied_revision"), Some(head as f64), "{body}");
    assert_eq!(page(&body, "mem_etcd_follow_behind_revisions"), Some(0.0), "{body}");
    let timed = page(&body, "mem_etcd_follow_revision_lag_seconds_count");
    assert_eq!(timed, Some(55.0), "{body}");
    e.compact(head - 3, None).await.unwrap();

    // The cut-over: etcd takes no more writes; the follower notices, checks and exits.
    let out = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::task::spawn_blocking(move || follower.wait_with_output().unwrap()),
    )
    .await
    .expect("the follower did not cut over within 90 s")
    .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains(&format!("following {src} from revision {}", at + 1)), "{text}");
    assert!(text.contains(&format!("compacted at {}, as the source", head - 3)), "{text}");
    assert!(text.ends_with(&format!("cut-over: the copy is exact at revision {head}\n")), "{text}");
    // Key by key too (the cut-over checks HashKV alone), through pages above 4 MiB.
    let args = ["check", "copy", "--source", &src, "--copy", &copy];
    let check = Command::new(mem_etcd()).args(args).output().unwrap();
    let said = String::from_utf8_lossy(&check.stdout).into_owned();
    assert_eq!(check.status.code(), Some(0), "{said}{}", String::from_utf8_lossy(&check.stderr));

    let mut m = mem.client().await;
    assert!(text.contains("auth: user alice added without a password"), "{text}");
    for c in [&mut e, &mut m] {
        assert_eq!(c.user_get("alice").await.unwrap().roles(), ["tenant".to_string()]);
        let perms = c.role_get("tenant").await.unwrap().permissions();
        let perms: Vec<_> =
            perms.iter().map(|p| (p.key().to_vec(), p.range_end().to_vec())).collect();
        assert_eq!(perms, [(b"/tenant/".to_vec(), b"/tenant0".to_vec())]);
    }
    let mut m = mem.client().await;
    let ids = |r: etcd_client::LeaseLeasesResponse| {
        let mut ids: Vec<i64> = r.leases().iter().map(|l| l.id()).collect();
        ids.sort();
        ids
    };
    let theirs = ids(e.leases().await.unwrap());
    assert_eq!(ids(m.leases().await.unwrap()), theirs);
    assert!(theirs.contains(&kept) && !theirs.contains(&revoked) && !theirs.contains(&expiring));
    let keys = m.lease_time_to_live(kept, Some(LeaseTimeToLiveOptions::new().with_keys())).await;
    assert_eq!(keys.unwrap().keys(), [b"/registry/events/ns/kept".to_vec()]);
    let compacted =
        m.get("/registry/configmaps/ns/last", Some(GetOptions::new().with_revision(head - 4)));
    assert!(compacted.await.is_err(), "the copy answered below the source's compaction");
    assert_eq!(put(&mut m, "/registry/configmaps/ns/after", "x").await, head + 1);
}

/// A copy that is not the source at its revision is refused before anything is applied:
/// both at revision 2, one value apart, HashKV differs and the walk names the key.
#[tokio::test]
async fn follow_refuses_a_copy_that_differs_from_its_source() {
    let etcd = server_of!(Kind::Etcd);
    let mem = server_of!(Kind::MemEtcd);
    assert_eq!(put(&mut etcd.client().await, "/registry/pods/ns/p", "a").await, 2);
    assert_eq!(put(&mut mem.client().await, "/registry/pods/ns/p", "b").await, 2);
    let (src, copy) = (etcd.endpoint(), mem.endpoint());
    let args = ["follow", "--source", &src, "--target", &copy, "--until-idle", "1s"];
    let out = Command::new(mem_etcd()).args(args).output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("differs: HashKV at 2"), "{text}");
    assert!(text.contains("\"/registry/pods/ns/p\": value of 1 bytes in the source"), "{text}");
    assert!(!text.contains("following"), "{text}");
}

#[tokio::test]
async fn a_snapshot_of_etcd_founds_a_three_member_cluster_with_its_revisions() {
    let Some(ctl) = peer_binary("etcdctl") else { return };
    let etcd = server_of!(Kind::Etcd);
    let mut e = etcd.client().await;
    let (compacted, at) = write_history(&mut e).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("etcd.db");
    save(&ctl, &etcd, &file).await;

    let mut cluster =
        crate::cluster::harness::Cluster::restored(&file, 3, &["--wal-mode=buffered"]).await;
    for i in 0..3 {
        let mut m = cluster.client(i).await;
        assert_same_history(&mut e, &mut m, compacted, at).await;
    }
    // Writes go on from the revision on every member; a member killed and restarted comes
    // back on the restored state plus its log.
    let leader = cluster.leader().await;
    let follower = (leader + 1) % 3;
    let mut c = cluster.client(leader).await;
    assert_eq!(put(&mut c, "/registry/configmaps/ns/next", "1").await, at + 1);
    cluster.kill9(follower);
    assert_eq!(put(&mut c, "/registry/configmaps/ns/next", "2").await, at + 2);
    cluster.restart(follower).await;
    assert_eq!(cluster.converged().await, at + 2);
    let mut f = cluster.client(follower).await;
    assert_same_history(&mut c, &mut f, compacted, at + 2).await;

    // A mem_etcd snapshot of that cluster founds another one alike.
    let mine = dir.path().join("mem.db");
    let ep = cluster.endpoint(leader);
    let (code, out, err) = tokio::task::spawn_blocking({
        let (ctl, mine) = (ctl.clone(), mine.clone());
        move || etcdctl(&ctl, &ep, &["snapshot", "save", mine.to_str().unwrap()], None)
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "{out}{err}");
    let again = crate::cluster::harness::Cluster::restored(&mine, 3, &["--wal-mode=fsync"]).await;
    for i in 0..3 {
        let mut m = again.client(i).await;
        assert_same_history(&mut c, &mut m, compacted, at + 2).await;
    }

    // And etcdutl reads it as etcd's own of the same history: etcd, written to alike, saves
    // a snapshot with the same status, and etcd serves the member's snapshot as the member.
    let Some(etcdutl) = peer_binary("etcdutl") else { return };
    put(&mut e, "/registry/configmaps/ns/next", "1").await;
    assert_eq!(put(&mut e, "/registry/configmaps/ns/next", "2").await, at + 2);
    let theirs = dir.path().join("etcd-next.db");
    save(&ctl, &etcd, &theirs).await;
    assert_eq!(etcdutl_status(&etcdutl, &mine), etcdutl_status(&etcdutl, &theirs));
    let etcd_dir = DataDir::new();
    etcdutl_restore(&etcdutl, &mine, &etcd_dir);
    let etcd2 = etcd_dir.start_kind(Kind::Etcd, &[]).await;
    let mut e2 = etcd2.client().await;
    assert_same_history(&mut c, &mut e2, compacted, at + 2).await;
}

/// etcdctl `args` against `ep`: (whether it succeeded, its stdout and stderr).
fn etcdctl_ok(bin: &Path, ep: &str, args: &[&str]) -> (bool, String) {
    let (code, out, err) = etcdctl(bin, ep, args, None);
    (code == Some(0), format!("{out}{err}"))
}

/// On the server at `ep`: root, a role `app` that may read and write `/app/`, a user alice with
/// it, a key in and one outside her prefix; then auth enabled.
fn set_up_auth(bin: &Path, ep: &str) {
    for args in [
        &["user", "add", "root:rootpw", "--interactive=false"][..],
        &["role", "add", "app"],
        &["role", "grant-permission", "app", "readwrite", "/app/", "--prefix=true"],
        &["user", "add", "alice:alicepw", "--interactive=false"],
        &["user", "grant-role", "alice", "app"],
        &["put", "/app/x", "1"],
        &["put", "/other", "2"],
        &["auth", "enable"],
    ] {
        let (ok, out) = etcdctl_ok(bin, ep, args);
        assert!(ok, "{args:?}: {out}");
    }
}

/// `etcdctl snapshot save file` as root (auth is enabled).
fn save_as_root(bin: &Path, ep: &str, file: &Path) {
    let (ok, out) =
        etcdctl_ok(bin, ep, &["--user=root:rootpw", "snapshot", "save", file.to_str().unwrap()]);
    assert!(ok, "{out}");
}

/// What the server at `ep` answers after [`set_up_auth`]: alice reads in her prefix and may not
/// write outside it, a wrong password is refused. Returns `auth status` (enabled, revision)
/// and `role get app`, for comparison with another server's.
fn auth_answers(bin: &Path, ep: &str) -> (String, String) {
    let alice = |args: &[&str]| etcdctl_ok(bin, ep, &[&["--user=alice:alicepw"], args].concat());
    assert_eq!(alice(&["get", "/app/x"]), (true, "/app/x\n1\n".to_string()), "{ep}");
    let (ok, out) = alice(&["put", "/other", "3"]);
    assert!(!ok && out.contains("etcdserver: permission denied"), "{ep}: {out}");
    let (ok, out) = etcdctl_ok(bin, ep, &["--user=alice:wrong", "get", "/app/x"]);
    assert!(!ok && out.contains("authentication failed, invalid user ID or password"), "{out}");
    let (ok, out) = etcdctl_ok(bin, ep, &["--user=root:rootpw", "auth", "status"]);
    assert!(ok, "{out}");
    let (ok, roles) = etcdctl_ok(bin, ep, &["--user=root:rootpw", "role", "get", "app"]);
    assert!(ok, "{roles}");
    (out, roles)
}

/// Waits (30 s at most) until a cluster restored with auth enabled serves alice at `ep`: the
/// harness cannot ask it for its leader without credentials.
async fn until_alice_reads(bin: &Path, ep: &str) {
    wait_until("the restored cluster to serve alice", Duration::from_secs(30), || {
        std::future::ready(etcdctl_ok(bin, ep, &["--user=alice:alicepw", "get", "/app/x"]).0)
    })
    .await;
}

#[tokio::test]
async fn an_etcd_snapshot_with_auth_restores_its_users_and_roles() {
    let Some(bin) = peer_binary("etcdctl") else { return };
    let etcd = server_of!(Kind::Etcd);
    let ep = etcd.endpoint();
    set_up_auth(&bin, &ep);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("etcd.db");
    save_as_root(&bin, &ep, &file);

    // The same answers from etcd, a restored member alone and a restored cluster.
    let want = auth_answers(&bin, &ep);
    let data = DataDir::new();
    restore(&file, data.path());
    let mem = data.start(&[]).await;
    assert_eq!(auth_answers(&bin, &mem.endpoint()), want);
    let cluster =
        crate::cluster::harness::Cluster::restored_unchecked(&file, 3, &["--wal-mode=buffered"])
            .await;
    let ep = cluster.endpoint(2);
    until_alice_reads(&bin, &ep).await;
    assert_eq!(auth_answers(&bin, &ep), want);
}

/// mem_etcd's own snapshots carry the auth state: saved from a member alone, restored onto a
/// member alone and onto a cluster of three; saved from that cluster and restored again; and
/// exported and restored by etcdutl, served by etcd. Every one answers as the source.
#[tokio::test]
async fn a_mem_etcd_snapshot_keeps_users_and_roles() {
    let Some(bin) = peer_binary("etcdctl") else { return };
    let Some(etcdutl) = peer_binary("etcdutl") else { return };
    let src = Server::start(Kind::MemEtcd, &[]).await.unwrap();
    set_up_auth(&bin, &src.endpoint());
    let want = auth_answers(&bin, &src.endpoint());
    assert!(want.0.contains("Authentication Status: true"), "{}", want.0);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mem.db");
    save_as_root(&bin, &src.endpoint(), &file);
    let (code, out, err) = snapshot_cmd(&["status", file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("auth: enabled, revision "), "{out}");
    assert!(out.contains(", 2 users, 2 roles\n"), "{out}");

    // A member alone: its auth file, read again after a restart.
    let data = DataDir::new();
    restore(&file, data.path());
    let mem = data.start(&[]).await;
    assert_eq!(auth_answers(&bin, &mem.endpoint()), want);
    mem.stop(Duration::from_secs(10)).await;
    let mem = data.start(&[]).await;
    assert_eq!(auth_answers(&bin, &mem.endpoint()), want);

    // A cluster: the founding snapshot's machine state; and a cluster member's snapshot.
    let cluster =
        crate::cluster::harness::Cluster::restored_unchecked(&file, 3, &["--wal-mode=buffered"])
            .await;
    until_alice_reads(&bin, &cluster.endpoint(2)).await;
    assert_eq!(auth_answers(&bin, &cluster.endpoint(2)), want);
    let from_cluster = dir.path().join("cluster.db");
    save_as_root(&bin, &cluster.endpoint(0), &from_cluster);
    let again = DataDir::new();
    restore(&from_cluster, again.path());
    let mem = again.start(&[]).await;
    assert_eq!(auth_answers(&bin, &mem.endpoint()), want);

    // etcd: the auth buckets of the snapshot, as etcdutl restores them.
    let etcd_dir = DataDir::new();
    etcdutl_restore(&etcdutl, &file, &etcd_dir);
    let etcd = etcd_dir.start_kind(Kind::Etcd, &[]).await;
    assert_eq!(auth_answers(&bin, &etcd.endpoint()), want);
}

/// A member alone started on an etcd data directory imports etcd's database: one that
/// `etcdutl snapshot restore` wrote (as etcd's users restore, and kubeadm's restore does), and
/// a cleanly stopped etcd's own. It serves the same history as etcd on the same directory, and
/// later starts use its own files. A directory whose WAL is ahead of its database (an etcd that
/// did not stop cleanly) is refused, as etcd's own data would be lost otherwise.
#[tokio::test]
async fn a_member_alone_starts_on_an_etcd_data_directory_with_its_history() {
    let Some(ctl) = peer_binary("etcdctl") else { return };
    let Some(etcdutl) = peer_binary("etcdutl") else { return };
    let etcd = server_of!(Kind::Etcd);
    let mut e = etcd.client().await;
    let (compacted, at) = write_history(&mut e).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("etcd.db");
    save(&ctl, &etcd, &file).await;

    // Restored by etcdutl, started as mem_etcd.
    let restored = DataDir::new();
    etcdutl_restore(&etcdutl, &file, &restored);
    let mem = restored.start(&[]).await;
    assert!(!mem.grep_log("imported etcd's database").is_empty(), "{}", mem.log_tail());
    let mut m = mem.client().await;
    assert_same_history(&mut e, &mut m, compacted, at).await;
    assert_eq!(put(&mut m, "/registry/configmaps/ns/next", "x").await, at + 1);
    // Later starts: mem_etcd's own files, with what was written since.
    mem.stop(Duration::from_secs(10)).await;
    let mem = restored.start(&[]).await;
    assert!(mem.grep_log("imported etcd's database").is_empty(), "imported twice");
    let mut m = mem.client().await;
    assert_eq!(put(&mut m, "/registry/configmaps/ns/next", "y").await, at + 2);
    drop(m);
    mem.stop(Duration::from_secs(10)).await;

    // A cleanly stopped etcd's own directory, against etcd started on a copy of it.
    let own = DataDir::new();
    let etcd2 = own.start_kind(Kind::Etcd, &[]).await;
    let mut e2 = etcd2.client().await;
    let (compacted, at) = write_history(&mut e2).await;
    drop(e2);
    etcd2.stop(Duration::from_secs(10)).await;
    let copy = DataDir::new();
    let cp = Command::new("cp").arg("-a").arg(own.path()).arg(copy.path()).status().unwrap();
    assert!(cp.success());
    let mem = own.start(&[]).await;
    let etcd3 = copy.start_kind(Kind::Etcd, &[]).await;
    let (mut m, mut e3) = (mem.client().await, etcd3.client().await);
    assert_same_history(&mut e3, &mut m, compacted, at).await;
    drop(m);
    mem.stop(Duration::from_secs(10)).await;

    // WAL ahead of the database: refused, nothing imported.
    let ahead = DataDir::new();
    etcdutl_restore(&etcdutl, &file, &ahead);
    let mut rec = Vec::new();
    // One walpb.Record {type: 2, data: raftpb.Entry {term: 2, index: 1000}}, framed.
    let entry = [0x10, 0x02, 0x18, 0xe8, 0x07];
    let body = [&[0x08, 0x02, 0x1a, entry.len() as u8][..], &entry].concat();
    let pad = (8 - body.len() % 8) % 8;
    rec.extend_from_slice(&((body.len() as u64) | ((0x80 | pad as u64) << 56)).to_le_bytes());
    rec.extend_from_slice(&body);
    rec.extend(std::iter::repeat_n(0u8, pad));
    std::fs::write(ahead.path().join("member/wal/ffffffffffffffff-00000000000003e8.wal"), rec)
        .unwrap();
    let refused = ahead.start_expecting_failure(&[]).await;
    assert!(!refused.status.success());
    let said = refused.stderr.join("\n");
    assert!(
        said.contains("etcd's WAL holds entries up to index 1000, its database only up to"),
        "{said}"
    );
    assert!(!ahead.path().join("snap").exists(), "nothing imported");
}

/// A backup an older mem_etcd saved in its own format (format version 2, with its auth state:
/// `tests/fixtures/snapshot/`, saved by etcdctl from mem_etcd at d42eb12 after 36 revisions of
/// configmaps, deletes, leases, a compaction at 36, a txn, and auth enabled with root and a
/// role `app`) still restores, and exports to an etcd snapshot.db that etcdutl restores and
/// etcd serves with the same history.
#[tokio::test]
async fn an_older_mem_etcd_backup_still_restores_and_exports_for_etcd() {
    let Some(etcdutl) = peer_binary("etcdutl") else { return };
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/snapshot/mem_etcd-backup-v2.db");
    let (code, out, err) = snapshot_cmd(&["status", file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("format: mem_etcd\nrevision: 39\ncompact revision: 36\n"), "{out}");
    assert!(out.contains("keys: 11 (14 versions)\nleases: 2\n"), "{out}");
    assert!(out.contains("auth: enabled, revision 5, 1 users, 2 roles"), "{out}");
    let data = DataDir::new();
    assert_eq!(restore(&file, data.path()), 39);
    let mem = data.start(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let exported = dir.path().join("etcd.db");
    export(&file, &exported);
    assert_eq!(etcdutl_status(&etcdutl, &exported), (39, 9, "3.6.0".to_string()));
    let etcd_dir = DataDir::new();
    etcdutl_restore(&etcdutl, &exported, &etcd_dir);
    let etcd = etcd_dir.start_kind(Kind::Etcd, &[]).await;
    let root = || etcd_client::ConnectOptions::new().with_user("root", "rootpw");
    let mut m = etcd_client::Client::connect([mem.endpoint()], Some(root())).await.unwrap();
    let mut e = etcd_client::Client::connect([etcd.endpoint()], Some(root())).await.unwrap();
    assert_same_history(&mut m, &mut e, 36, 39).await;
    assert_eq!(all_at(&mut m, 0).await.1.len(), 9, "the live keys");
}
