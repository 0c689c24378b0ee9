//! A Kubernetes cluster moved from etcd to mem_etcd with its revisions, by the README's
//! runbook, and back: kube-apiserver on etcd 3.6 writes the cluster's data; it is stopped,
//! `etcdctl snapshot save` takes etcd's snapshot.db, `mem_etcd snapshot restore` turns it into
//! the data directories of three members, they start on them and kube-apiserver comes back on
//! them. Every
//! object keeps its resourceVersion (the etcd revisions informers hold). The way back is
//! `etcdctl snapshot save` from mem_etcd (an etcd snapshot.db) and the real `etcdutl snapshot
//! restore`.

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
