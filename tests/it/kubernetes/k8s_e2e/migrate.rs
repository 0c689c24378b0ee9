//! A Kubernetes cluster moved from etcd to mem_etcd with its revisions, by the README's
//! runbook, and back: kube-apiserver on etcd 3.6 writes the cluster's data; it is stopped,
//! `etcdctl snapshot save` takes etcd's snapshot.db, `mem_etcd snapshot restore` turns it into
//! the data directories of three members, they start on them and kube-apiserver comes back on
//! them. Every
//! object keeps its resourceVersion (the etcd revisions informers hold). The way back is
//! `etcdctl snapshot save` from mem_etcd (an etcd snapshot.db) and the real `etcdutl snapshot
//! restore`. The live move does the same without stopping kube-apiserver until the cut-over:
//! `mem_etcd follow` keeps the restored members at etcd's revisions while it writes.

use std::collections::BTreeMap;
use std::path::Path;

use etcd_client::{GetOptions, LeaseTimeToLiveOptions};

use super::*;
use crate::cluster::harness::Cluster;
use crate::tools::etcdctl::etcdctl;

/// Every key with its revisions, versions, lease and value, and the header revision.
async fn dump(s: &Server) -> (i64, Vec<Kv>) {
    let mut c = s.client().await;
    let r = c.get("", Some(GetOptions::new().with_all_keys())).await.unwrap();
    (r.header().unwrap().revision(), kvs(r.kvs()))
}

/// Every key as it was at `rev`.
async fn dump_at(s: &Server, rev: i64) -> Vec<Kv> {
    let mut c = s.client().await;
    let r = c.get("", Some(GetOptions::new().with_all_keys().with_revision(rev))).await.unwrap();
    kvs(r.kvs())
}

/// Leases as (id, granted TTL, attached keys).
async fn leases(s: &Server) -> Vec<(i64, i64, Vec<Vec<u8>>)> {
    let mut c = s.client().await;
    let mut out = Vec::new();
    for l in c.leases().await.unwrap().leases() {
        let opts = Some(LeaseTimeToLiveOptions::new().with_keys());
        let t = c.lease_time_to_live(l.id(), opts).await.unwrap();
        let mut keys = t.keys().to_vec();
        keys.sort();
        out.push((l.id(), t.granted_ttl(), keys));
    }
    out.sort();
    out
}

/// Every object kube-apiserver lists, as "apiVersion kind namespace/name" -> resourceVersion.
fn objects(api: &Apiserver) -> BTreeMap<String, u64> {
    let names = api.ok("api-resources --verbs=list -o name");
    // componentstatuses are probed, not stored.
    let kinds: Vec<&str> = names.lines().filter(|n| *n != "componentstatuses").collect();
    let list = api.json(&format!("get {} -A", kinds.join(",")));
    let mut out = BTreeMap::new();
    for o in list["items"].as_array().expect("a List") {
        let m = &o["metadata"];
        let name = format!(
            "{} {} {}/{}",
            o["apiVersion"].as_str().unwrap_or(""),
            o["kind"].as_str().unwrap_or(""),
            m["namespace"].as_str().unwrap_or(""),
            m["name"].as_str().unwrap_or("")
        );
        out.insert(name, rv(o));
    }
    out
}

/// Equal dumps, or a panic naming the first difference (not the whole dump).
#[track_caller]
fn assert_same(got: (i64, Vec<Kv>), want: (i64, Vec<Kv>)) {
    assert_eq!(got.0, want.0, "header revision");
    let show = |k: &Kv| {
        format!(
            "{} create {} mod {} version {} lease {} value {} bytes",
            String::from_utf8_lossy(&k.key),
            k.create_revision,
            k.mod_revision,
            k.version,
            k.lease,
            k.value.len()
        )
    };
    for (a, b) in got.1.iter().zip(&want.1) {
        assert!(a == b, "got {}, want {}", show(a), show(b));
    }
    assert_eq!(got.1.len(), want.1.len(), "number of keys");
}

fn run_ok(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn save(ctl: &Path, s: &Server, file: &Path) {
    let (code, out, err) =
        etcdctl(ctl, &s.endpoint(), &["snapshot", "save", file.to_str().unwrap()], None);
    assert_eq!(code, Some(0), "etcdctl snapshot save:\n{out}\n{err}");
}

#[tokio::test]
async fn a_kubernetes_cluster_moves_from_etcd_to_mem_etcd_and_back_with_its_revisions() {
    let _serial = SERIAL.lock().await;
    let Some(peers) = peers() else { return };
    let Some(ctl) = peer_binary("etcdctl") else { return };
    let Some(etcdutl) = peer_binary("etcdutl") else { return };
    let etcd = server_of!(Kind::Etcd);
    // Events live an hour, so that leases with keys attached move too.
    let flags = ["--event-ttl=1h".to_string()];

    // 1. A cluster on etcd, with objects of its own and ours: versions, deletions, events.
    let mut api = Apiserver::start_with(&peers, &etcd.endpoint(), &flags);
    api.wait_ready();
    api.ok("create namespace mig");
    for i in 0..20 {
        api.with_object(
            "create",
            &configmap("mig", &format!("c{i}"), json!({}), json!({"i": "0"})),
        );
    }
    for i in 0..5 {
        api.patch(&format!("configmap c{i} -n mig"), r#"{"data":{"i":"1"}}"#);
    }
    api.ok("delete configmap c19 -n mig");
    api.ok("create secret generic s1 -n mig --from-literal=p=q");
    for i in 0..3 {
        let ev = json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": format!("e{i}"), "namespace": "mig"},
            "involvedObject": {"kind": "ConfigMap", "name": "c0", "namespace": "mig"},
            "reason": "Migrating", "message": "moving to mem_etcd", "type": "Normal"});
        api.with_object("create", &ev);
    }
    // A compaction, as kube-apiserver's compactor makes.
    let mut e = etcd.client().await;
    let mid = e.get("mig", None).await.unwrap().header().unwrap().revision();
    e.compact(mid, None).await.unwrap();
    let listed_from = mid;
    let before = objects(&api);
    let mine: Vec<&String> = before.keys().filter(|k| k.contains(" mig/")).collect();
    assert!(mine.len() >= 23, "{mine:?}");

    // 2. The runbook: writers stop, snapshot, restore, mem_etcd up, kube-apiserver back.
    let down = Instant::now();
    drop(api);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("etcd.db");
    save(&ctl, &etcd, &file);
    let saved = down.elapsed();
    let checking = Instant::now();
    let (at, etcd_keys) = dump(&etcd).await;
    let etcd_leases = leases(&etcd).await;
    let mut checked = checking.elapsed();
    // A 3-member cluster, each member's data dir restored from the file (the harness runs
    // `mem_etcd snapshot restore --name --initial-cluster --initial-cluster-token`).
    let cluster = Cluster::restored(&file, 3, &["--wal-mode=buffered"]).await;
    let serving = down.elapsed() - checked;

    // Every member holds exactly etcd's keys, revisions, leases and compaction (checked before
    // kube-apiserver writes again; not counted in the downtime).
    let checking = Instant::now();
    assert!(
        etcd_leases.iter().any(|l| l.2.iter().any(|k| k.starts_with(b"/registry/events/mig/")))
    );
    for m in &cluster.members {
        let member = m.server.as_ref().expect("running");
        assert_same(dump(member).await, (at, etcd_keys.clone()));
        assert_eq!(leases(member).await, etcd_leases);
        let mut c = member.client().await;
        let gone = c.get("", Some(GetOptions::new().with_all_keys().with_revision(mid - 1))).await;
        assert!(gone.unwrap_err().to_string().contains("required revision has been compacted"));
    }
    checked += checking.elapsed();
    let mut api = Apiserver::start_with(&peers, &cluster.endpoints(), &flags);
    api.wait_ready();
    let downtime = down.elapsed() - checked;
    let mem = cluster.members[0].server.as_ref().expect("running");

    // kube-apiserver on mem_etcd serves every object at its resourceVersion. Only objects
    // written after the listing began (kube-apiserver's own lease renewals) may differ.
    let after = objects(&api);
    let mut changed = Vec::new();
    for (name, rv_before) in &before {
        match after.get(name) {
            Some(rv_after) if rv_after == rv_before => {}
            Some(rv_after) if *rv_after as i64 > listed_from && !name.contains(" mig/") => {
                changed.push(format!("{name}: {rv_before} -> {rv_after}"))
            }
            other => panic!("{name}: resourceVersion {rv_before} on etcd, {other:?} on mem_etcd"),
        }
    }
    assert!(changed.len() <= 5, "too many objects changed: {changed:#?}");
    // Writes go on after the migrated revision.
    let c = api.with_object("create", &configmap("mig", "after", json!({}), json!({})));
    assert!(rv(&c) as i64 > at);

    // 3. Back to etcd: mem_etcd's snapshot (an etcd snapshot.db) restored by etcdutl, served
    // by etcd.
    drop(api);
    let (now, mem_keys) = dump(mem).await;
    let back = dir.path().join("mem.db");
    save(&ctl, mem, &back);
    let etcd_dir = DataDir::new();
    run_ok(
        Command::new(&etcdutl)
            .args(["snapshot", "restore"])
            .arg(&back)
            .arg("--data-dir")
            .arg(etcd_dir.path())
            .args(["--name", "it", "--initial-cluster", "it=http://127.0.0.1:2380"])
            .args(["--initial-advertise-peer-urls", "http://127.0.0.1:2380"]),
        "etcdutl snapshot restore",
    );
    let etcd2 = etcd_dir.start_kind(Kind::Etcd, &[]).await;
    assert_same(dump(&etcd2).await, (now, mem_keys));
    assert_eq!(leases(&etcd2).await, leases(mem).await);

    say(&format!(
        "\nmigration of a kube-apiserver 1.36 cluster from etcd 3.6 to 3 mem_etcd members ({} \
         keys, revision {at}): snapshot saved {}, members restored and serving with a leader \
         {}, kube-apiserver ready {} after it was stopped on etcd (the downtime); {} objects \
         checked, {} renewed meanwhile",
        etcd_keys.len(),
        ms(saved),
        ms(serving),
        ms(downtime),
        before.len(),
        changed.len()
    ));
}

/// The live move (issue 51): kube-apiserver keeps writing to a 3-member etcd cluster while
/// its snapshot is taken and restored into three mem_etcd members and `mem_etcd follow` keeps
/// them at etcd's revisions, going on through another etcd member when the one it watches is
/// killed; then kube-apiserver stops, `follow --until-idle` cuts over (the copy checked
/// exact), and kube-apiserver starts on mem_etcd. Every object keeps its resourceVersion,
/// those written while following included, and a watch from a resourceVersion etcd gave goes
/// on without a 410 (no relist).
#[tokio::test]
async fn a_kubernetes_cluster_moves_live_from_etcd_to_mem_etcd_with_follow() {
    let _serial = SERIAL.lock().await;
    let Some(peers) = peers() else { return };
    let Some(ctl) = peer_binary("etcdctl") else { return };
    let Some(mut etcd) = Cluster::start(Kind::Etcd, 3, &[]).await else { return };
    let flags = ["--event-ttl=1h".to_string()];
    let mut api = Apiserver::start_with(&peers, &etcd.endpoints(), &flags);
    api.wait_ready();
    api.ok("create namespace live");
    for i in 0..10 {
        api.with_object("create", &configmap("live", &format!("c{i}"), json!({}), json!({})));
    }

    // The snapshot, taken while kube-apiserver runs, founds three members; `follow` starts.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("etcd.db");
    save(&ctl, etcd.members[0].server.as_ref().unwrap(), &file);
    let cluster = Cluster::restored(&file, 3, &["--wal-mode=buffered"]).await;
    // `follow` watches the first member it is given: a follower, whose death etcd's clients
    // ride out (the leader's makes etcd time writes out for a while).
    let watched = (etcd.leader().await + 1) % 3;
    let others = (0..3).filter(|&i| i != watched).map(|i| etcd.endpoint(i));
    let source = std::iter::once(etcd.endpoint(watched)).chain(others).collect::<Vec<_>>();
    let (source, target) = (source.join(","), cluster.endpoints());
    let follower = Command::new(env!("CARGO_BIN_EXE_mem_etcd"))
        .args(["follow", "--source", &source, "--target", &target, "--until-idle", "2s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();

    // kube-apiserver writes on: objects created, changed, deleted, events on leases.
    let from = rv(&api.with_object("create", &configmap("live", "mark", json!({}), json!({}))));
    for i in 0..10 {
        if i == 5 {
            // The member `follow` watches dies; it goes on through another.
            etcd.kill9(watched);
        }
        api.with_object("create", &configmap("live", &format!("d{i}"), json!({}), json!({})));
        api.patch(&format!("configmap c{i} -n live"), r#"{"data":{"v":"2"}}"#);
    }
    api.ok("delete configmap c9 -n live");
    let ev = json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "moving", "namespace": "live"},
        "involvedObject": {"kind": "ConfigMap", "name": "c0", "namespace": "live"},
        "reason": "Migrating", "message": "following", "type": "Normal"});
    api.with_object("create", &ev);
    let before = objects(&api);
    let last = *before.values().max().unwrap();

    // The cut-over: kube-apiserver stops writing to etcd; `follow` applies the rest, checks
    // and exits; kube-apiserver starts on mem_etcd.
    let down = Instant::now();
    drop(api);
    let out = tokio::task::spawn_blocking(move || follower.wait_with_output().unwrap());
    let out = tokio::time::timeout(Duration::from_secs(120), out)
        .await
        .expect("follow did not cut over within 120 s")
        .unwrap();
    let cut_over = down.elapsed();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("the watch was lost"), "follow did not see its member die: {text}");
    let at: i64 = text
        .lines()
        .find_map(|l| l.strip_prefix("cut-over: the copy is exact at revision "))
        .and_then(|r| r.trim().parse().ok())
        .unwrap_or_else(|| panic!("no cut-over line: {text}"));
    // Every member holds etcd's keys as they were at the cut-over (etcd's own lease expiries
    // may go on after it).
    let alive = etcd.members[(watched + 1) % 3].server.as_ref().unwrap();
    let etcd_keys = dump_at(alive, at).await;
    for m in &cluster.members {
        let member = m.server.as_ref().expect("running");
        let start = Instant::now();
        while dump(member).await.0 < at && start.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_same((at, dump_at(member, at).await), (at, etcd_keys.clone()));
    }
    let mut api = Apiserver::start_with(&peers, &cluster.endpoints(), &flags);
    api.wait_ready();
    let downtime = down.elapsed();

    // Every object at its resourceVersion; only kube-apiserver's own renewals may move.
    let after = objects(&api);
    let mut renewed = 0;
    for (name, rv_before) in &before {
        match after.get(name) {
            Some(rv_after) if rv_after == rv_before => {}
            Some(rv_after) if *rv_after as i64 > at && !name.contains(" live/") => renewed += 1,
            other => panic!("{name}: resourceVersion {rv_before} on etcd, {other:?} on mem_etcd"),
        }
    }
    assert!(renewed <= 5, "{renewed} objects changed");
    // Writes go on after the cut-over's revision, and a watch from the last resourceVersion
    // a client saw on etcd goes on: no 410, no relist.
    let c = api.with_object("create", &configmap("live", "after", json!({}), json!({})));
    assert!(rv(&c) as i64 > at);
    let path = format!(
        "/api/v1/namespaces/live/configmaps?watch=1&resourceVersion={last}&timeoutSeconds=2"
    );
    let watched = api.raw(&path);
    assert!(!watched.gone(), "{watched:?}");
    assert!(watched.stdout.contains("\"name\":\"after\""), "{watched:?}");
    assert!(from < last);
    say(&format!(
        "\nlive move of a kube-apiserver 1.36 cluster from 3 etcd 3.6 members (one killed while \
         followed) to 3 mem_etcd members \
         (revision {at}): follow cut over {} after kube-apiserver stopped (--until-idle 2s), \
         kube-apiserver ready on mem_etcd {} after it stopped; {}",
        ms(cut_over),
        ms(downtime),
        text.lines().find(|l| l.starts_with("idle for")).unwrap_or("")
    ));
}
