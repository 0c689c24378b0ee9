//! A member alone grows into a cluster (kubeadm's stacked etcd): started alone, it gets data, a
//! lease with a key and a watch, then `member add` of a voter and of a learner (promoted once
//! caught up) while a writer keeps writing; every member then holds every acknowledged write
//! with its revision and the lease, the watch saw every event once in order, writes go on, and
//! a restarted member comes back as a cluster member. The same flow runs against a real etcd
//! 3.6 and what a client sees (member lists, errors, ids) is compared. Also: a member killed
//! right after its founding Raft state was written restarts as a cluster member of itself.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{Client, GetOptions, MemberAddOptions, PutOptions, WatchOptions};

use crate::cluster::harness::Cluster;
use crate::support::*;

/// Keeps writing unique keys until `stop` (at most 3,000), returning the acknowledged ones with
/// their revisions.
async fn writer(mut c: Client, stop: Arc<AtomicBool>) -> Vec<(String, i64)> {
    let mut acked = Vec::new();
    for n in 0..3000 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let key = format!("/grow/w/{n:05}");
        match tokio::time::timeout(Duration::from_secs(10), c.put(key.as_str(), "v", None)).await {
            Ok(Ok(r)) => acked.push((key, rev(r.header()))),
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    acked
}

/// (member id, cluster id) from member `i`'s Status.
pub async fn ids(c: &Cluster, i: usize) -> (u64, u64) {
    let mut raw = c.raw(i).await;
    let h = raw.maint.status(pb::StatusRequest {}).await.unwrap().into_inner().header.unwrap();
    (h.member_id, h.cluster_id)
}

/// A member list as names (ids replaced by the names `names` gives), learner flags and URLs
/// with their ports replaced by member names, sorted: what must look the same on both.
pub fn shape(
    c: &Cluster,
    names: &BTreeMap<u64, String>,
    members: &[etcd_client::Member],
) -> String {
    let port = |u: &str| {
        let p: u16 = u.rsplit(':').next().unwrap().trim_end_matches('/').parse().unwrap();
        let who = c.members.iter().find(|m| m.client_port == p || m.peer_port == p);
        who.map_or("?".to_string(), |m| m.name.clone())
    };
    let mut v: Vec<String> = members
        .iter()
        .map(|m| {
            format!(
                "{} name={:?} learner={} peers={:?} clients={:?}",
                names.get(&m.id()).cloned().unwrap_or(format!("{:x}", m.id())),
                m.name(),
                m.is_learner(),
                m.peer_urls().iter().map(|u| port(u)).collect::<Vec<_>>(),
                m.client_urls().iter().map(|u| port(u)).collect::<Vec<_>>(),
            )
        })
        .collect();
    v.sort();
    v.join("; ")
}

/// Member `i`'s view of `key`: value and mod revision (serializable: its own state).
pub async fn local(c: &mut Client, key: &str) -> Option<(String, i64)> {
    let r = c.get(key, Some(GetOptions::new().with_serializable())).await.unwrap();
    r.kvs().first().map(|kv| (kv.value_str().unwrap().to_string(), kv.mod_revision()))
}

/// Retries a membership change while the cluster is not ready for it yet (etcd wants every
/// member connected for 5 s first), for at most 30 s.
pub async fn when_ready<T, F, Fut>(what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    wait_until(what, Duration::from_secs(30), f).await
}

/// The flow, on `kind`; returns what a client saw, to compare.
async fn grow_session(kind: Kind) -> Option<Vec<String>> {
    let mut c = Cluster::start(kind, 1, &[]).await?;
    let mut log = Vec::new();
    let mut cl = c.client(0).await;
    let (m0, cluster) = ids(&c, 0).await;
    let mut names = BTreeMap::from([(m0, "m0".to_string())]);
    for i in 0..20 {
        cl.put(format!("/grow/before/{i:02}"), format!("v{i}"), None).await.unwrap();
    }
    let lease = cl.lease_grant(60, None).await.unwrap().id();
    let granted = Instant::now();
    let leased = cl.put("/grow/leased", "l", Some(PutOptions::new().with_lease(lease))).await;
    let leased_rev = rev(leased.unwrap().header());
    let mut events = cl
        .watch("/grow/", Some(WatchOptions::new().with_prefix().with_start_revision(1)))
        .await
        .unwrap();
    let before = cl.member_list().await.unwrap();
    log.push(format!("alone: {}", shape(&c, &names, before.members())));

    let stop = Arc::new(AtomicBool::new(false));
    let writing = tokio::spawn(writer(c.client(0).await, stop.clone()));
    wait_until("the writer's first writes", Duration::from_secs(10), || {
        let mut cl = cl.clone();
        async move { current_rev(&mut cl).await >= leased_rev + 20 }
    })
    .await;

    // The first member add: a voter. A cluster of one that adds a voter needs it to commit
    // anything from then on, so it is started while the add is answered.
    let s1 = c.add_slot();
    let peer1 = c.peer_url(s1);
    let add = {
        let mut cl = cl.clone();
        tokio::spawn(async move { cl.member_add([peer1.as_str()], None).await })
    };
    c.wait_listed(0, s1, None).await;
    c.join(s1).await;
    let added = add.await.unwrap().unwrap_or_else(|e| panic!("{kind:?}: member add: {e}"));
    let h = added.header().unwrap();
    assert_eq!((h.member_id(), h.cluster_id()), (m0, cluster), "{kind:?}: the ids stay");
    let new = added.member().unwrap();
    names.insert(new.id(), "m1".into());
    log.push(format!(
        "added m1: name={:?} learner={} clients={:?}; {} members",
        new.name(),
        new.is_learner(),
        new.client_urls(),
        added.member_list().len()
    ));
    c.leader().await;
    assert_eq!(ids(&c, s1).await.1, cluster, "{kind:?}: m1 is in m0's cluster");

    // The second: a learner, refused until m1 has been connected long enough, then promoted
    // once it has caught up.
    let s2 = c.add_slot();
    let peer2 = c.peer_url(s2);
    let learner = || MemberAddOptions::new().with_is_learner();
    let added = when_ready("add m2", || {
        let mut cl = cl.clone();
        let peer2 = peer2.clone();
        async move { cl.member_add([peer2.as_str()], Some(learner())).await }
    })
    .await;
    let m2 = added.member().unwrap().id();
    names.insert(m2, "m2".into());
    log.push(format!(
        "added m2: learner={} members={}",
        added.member().unwrap().is_learner(),
        shape(&c, &names, added.member_list())
    ));
    let e = cl.member_promote(m2).await.unwrap_err();
    log.push(format!("promote m2 before it started: {:?}", status_of(&e)));
    c.join(s2).await;
    when_ready("promote m2", || {
        let mut cl = cl.clone();
        async move { cl.member_promote(m2).await }
    })
    .await;
    // The writer goes on in the grown cluster.
    let promoted = current_rev(&mut cl).await;
    wait_until("the writer's writes after the promotion", Duration::from_secs(10), || {
        let mut cl = cl.clone();
        async move { current_rev(&mut cl).await >= promoted + 20 }
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let acked = writing.await.unwrap();
    assert!(acked.len() > 20, "{kind:?}: the writer got through: {}", acked.len());
    let last = cl.put("/grow/after", "a", None).await.unwrap();
    let last_rev = rev(last.header());
    let converged = c.converged().await;
    assert!(converged >= last_rev);

    // Every member: every acknowledged write with its revision, the lease and its key.
    for i in c.running() {
        let mut on = c.client(i).await;
        let list = on.member_list().await.unwrap();
        log.push(format!("m{i} lists: {}", shape(&c, &names, list.members())));
        for (key, r) in &acked {
            assert_eq!(local(&mut on, key).await.map(|v| v.1), Some(*r), "{kind:?} m{i}: {key}");
        }
        for k in 0..20 {
            let got = local(&mut on, &format!("/grow/before/{k:02}")).await;
            assert_eq!(got.map(|v| v.0), Some(format!("v{k}")), "{kind:?} m{i}");
        }
        let got = local(&mut on, "/grow/leased").await;
        assert_eq!(got, Some(("l".into(), leased_rev)), "{kind:?} m{i}: the leased key");
        let kv = on.get("/grow/leased", None).await.unwrap();
        assert_eq!(kv.kvs()[0].lease(), lease, "{kind:?} m{i}: attached");
        let ttl = on.lease_time_to_live(lease, None).await.unwrap().ttl();
        assert!(ttl > 0 && ttl <= 60, "{kind:?} m{i}: ttl {ttl}");
        // mem_etcd's lease kept its remaining TTL: the member that kept the deadlines leads on.
        // (etcd's leader stepped down while the voter it added was not up yet, and its next
        // leader gave every lease its full TTL again, as a new leader does.)
        let left = 60 - granted.elapsed().as_secs() as i64;
        if kind == Kind::MemEtcd {
            assert!(ttl <= left + 1, "m{i}: ttl {ttl} > {left}: renewed by the growth");
        }
    }

    // The watch opened before the growth: every event once, in order, through the last put.
    let mut seen: Vec<(i64, String)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.last().is_none_or(|l| l.0 < last_rev) {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = tokio::time::timeout(left, events.message()).await;
        let resp = msg.unwrap_or_else(|_| panic!("{kind:?}: watch stalled at {:?}", seen.last()));
        for e in resp.unwrap().unwrap().events() {
            let kv = e.kv().unwrap();
            seen.push((kv.mod_revision(), kv.key_str().unwrap().to_string()));
        }
    }
    assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "{kind:?}: watch out of order or repeated");
    let watched: std::collections::HashMap<&str, i64> =
        seen.iter().map(|(r, k)| (k.as_str(), *r)).collect();
    for (key, r) in &acked {
        assert_eq!(watched.get(key.as_str()), Some(r), "{kind:?}: the watch missed {key}");
    }

    // The grown member restarts on its data as a member of its cluster.
    let _ = c.kill9(0);
    c.restart(0).await;
    c.leader().await;
    let mut on0 = c.client(0).await;
    assert_eq!(ids(&c, 0).await, (m0, cluster), "{kind:?}: m0's ids after its restart");
    let list = on0.member_list().await.unwrap();
    log.push(format!("m0 restarted lists: {}", shape(&c, &names, list.members())));
    let after = on0.put("/grow/restarted", "r", None).await.unwrap();
    assert!(rev(after.header()) > last_rev);
    let converged = c.converged().await;
    for i in c.running() {
        let mut on = c.client(i).await;
        for (key, r) in acked.iter().step_by(7) {
            assert_eq!(local(&mut on, key).await.map(|v| v.1), Some(*r), "{kind:?} m{i}: {key}");
        }
        assert!(local(&mut on, "/grow/restarted").await.is_some());
        assert_eq!(rev(on.get("x", None).await.unwrap().header()), converged);
    }
    say(&format!("{kind:?}: {} writes acknowledged across the growth", acked.len()));
    Some(log)
}

#[tokio::test]
async fn a_member_alone_grows_into_a_cluster_as_etcd_does() {
    let Some(mem) = grow_session(Kind::MemEtcd).await else { return };
    let Some(etcd) = grow_session(Kind::Etcd).await else { return };
    for (m, e) in mem.iter().zip(&etcd) {
        assert_eq!(m, e, "mem_etcd (left) and etcd (right) differ");
    }
    assert_eq!(mem.len(), etcd.len());
}

/// A member alone restarted with a WAL failpoint file, disarmed, which the test then arms: the
/// cluster and the file.
async fn alone_with_failpoint() -> (Cluster, std::path::PathBuf) {
    let mut c = Cluster::start(Kind::MemEtcd, 1, &[]).await.expect("mem_etcd");
    let fp = c.members[0].dir.aside("wal-failpoint");
    crate::storage::durability::set_failpoint(&fp, "");
    let _ = c.kill9(0);
    let mut args = c.args(0, "new");
    args.push(format!("--wal-failpoint={}", fp.display()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = c.members[0].dir.start(&args).await;
    c.members[0].server = Some(s);
    (c, fp)
}

/// `member add` of member slot `i`'s peer URL through `cl`, on a task of its own (answered once
/// the new member has started, or given up).
fn spawn_add(
    c: &Cluster,
    cl: &Client,
    i: usize,
) -> tokio::task::JoinHandle<Result<etcd_client::MemberAddResponse, etcd_client::Error>> {
    let mut cl = cl.clone();
    let peer = c.peer_url(i);
    tokio::spawn(async move { cl.member_add([peer.as_str()], None).await })
}

/// Killed right after its founding Raft state is durable (before Raft ran), a member restarts
/// as the one member of its cluster with everything acknowledged, its ids unchanged, and grows
/// on when asked again.
#[tokio::test]
async fn a_member_killed_while_growing_restarts_consistent() {
    let (mut c, fp) = alone_with_failpoint().await;
    let mut cl = c.client(0).await;
    let (m0, cluster) = ids(&c, 0).await;
    let mut acked = Vec::new();
    for i in 0..50 {
        let r = cl.put(format!("/k/{i}"), "v", None).await.unwrap();
        acked.push((format!("/k/{i}"), rev(r.header())));
    }
    let lease = cl.lease_grant(600, None).await.unwrap().id();
    cl.put("/leased", "l", Some(PutOptions::new().with_lease(lease))).await.unwrap();
    crate::storage::durability::set_failpoint(&fp, "grow-abort");
    let s1 = c.add_slot();
    let e = cl.member_add([c.peer_url(s1).as_str()], None).await;
    assert!(e.is_err(), "the member died while growing: {e:?}");
    // The failpoint aborts the process; it may be gone before the client's error comes back.
    let exited = match c.members[0].server.take().unwrap().ended() {
        Ok(exited) => exited,
        Err(still_running) => still_running.kill9(),
    };
    assert!(
        !exited.grep("aborting after the founding Raft state").is_empty(),
        "it died at the failpoint:\n{}",
        exited.output()
    );
    crate::storage::durability::set_failpoint(&fp, "");
    c.restart(0).await;
    assert!(
        c.members[0].dir.path().join("raft").join("member").exists()
            && !c.members[0].dir.path().join("wal").exists(),
        "restarted from Raft, its WAL retired"
    );
    c.leader().await;
    assert_eq!(ids(&c, 0).await, (m0, cluster), "the ids stay");
    let mut cl = c.client(0).await;
    for (key, r) in &acked {
        assert_eq!(local(&mut cl, key).await.map(|v| v.1), Some(*r), "{key}");
    }
    let ttl = cl.lease_time_to_live(lease, None).await.unwrap();
    assert!(ttl.ttl() > 0, "the lease came back");
    let list = cl.member_list().await.unwrap();
    assert_eq!(list.members().len(), 1);
    assert_eq!(list.members()[0].id(), m0);
    assert_eq!(list.members()[0].name(), "m0");
    let r = cl.put("/k/after", "v", None).await.unwrap();
    assert_eq!(rev(r.header()), acked.last().unwrap().1 + 2, "revisions go on (after the lease's)");
    // The add goes through now: the member is already a cluster of one.
    let add = spawn_add(&c, &cl, s1);
    c.wait_listed(0, s1, None).await;
    c.join(s1).await;
    add.await.unwrap().expect("member add after the restart");
    c.converged().await;
    let mut on1 = c.client(s1).await;
    for (key, r) in &acked {
        assert_eq!(local(&mut on1, key).await.map(|v| v.1), Some(*r), "m1: {key}");
    }
}

/// A MemberAdd whose caller gives up while the member alone grows (etcdctl's 5 s is shorter
/// than writing the founding snapshot of a store of a few GiB; a failpoint holds the growth
/// here instead) neither wedges the member nor leaves it half grown: the growth finishes, writes
/// go on with their revisions, and the add goes through when asked again.
#[tokio::test]
async fn a_member_alone_whose_add_is_abandoned_while_growing_keeps_serving() {
    let (mut c, fp) = alone_with_failpoint().await;
    let mut cl = c.client(0).await;
    let mut last = 0;
    for i in 0..50 {
        last = rev(cl.put(format!("/k/{i}"), "v", None).await.unwrap().header());
    }
    crate::storage::durability::set_failpoint(&fp, "grow-stall");
    let s1 = c.add_slot();
    let add = spawn_add(&c, &cl, s1);
    let server = c.members[0].server.as_ref().unwrap();
    wait_until("the growth to reach its failpoint", Duration::from_secs(10), || {
        std::future::ready(!server.grep_log("holding the growth").is_empty())
    })
    .await;
    // The caller gives up half-way: its call is cancelled, and the server drops the handler.
    add.abort();
    assert!(add.await.is_err_and(|e| e.is_cancelled()));
    crate::storage::durability::set_failpoint(&fp, "");
    let put = tokio::time::timeout(Duration::from_secs(15), cl.put("/k/after", "v", None)).await;
    let put = put.expect("a write after the abandoned add is answered").unwrap();
    assert_eq!(rev(put.header()), last + 1, "revisions go on");
    assert!(
        !server.grep_log("grown into a cluster of one").is_empty(),
        "the growth went on to its end:\n{}",
        server.log_tail()
    );
    let add = spawn_add(&c, &cl, s1);
    c.wait_listed(0, s1, None).await;
    c.join(s1).await;
    add.await.unwrap().expect("member add, asked again");
    c.converged().await;
    let mut on1 = c.client(s1).await;
    assert_eq!(local(&mut on1, "/k/after").await.map(|v| v.1), Some(last + 1));
}
