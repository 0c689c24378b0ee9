//! `--force-new-cluster`, as etcd 3.6 has it: a 3-member cluster gets keys (overwritten,
//! deleted), a compaction, a lease with a key, a user and a role; it then loses two members for
//! good and the third, stopped, is restarted on its data with `--force-new-cluster`. It must
//! serve alone with everything acknowledged (same keys, revisions, history, compaction, lease,
//! auth state), its ids kept, a later Raft term, one member listed, writes going on at the next
//! revision; then a learner added with `member add` and started with
//! `--initial-cluster-state existing` catches up, is promoted, and a restart of the forced
//! member without the flag finds the cluster of two. The same steps run against a real etcd
//! 3.6 and what a client sees is compared. Also: the flag does nothing on a fresh cluster.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, GetOptions, LeaseTimeToLiveOptions, MemberAddOptions, PutOptions, WatchOptions,
};

use crate::cluster::grow::{ids, local, shape, when_ready};
use crate::cluster::harness::Cluster;
use crate::support::*;

/// Every key under `/fnc/` as member `c` holds it: key, value, create and mod revisions,
/// version, whether it has a lease.
async fn contents(c: &mut Client, serializable: bool) -> Vec<String> {
    let mut o = GetOptions::new().with_prefix();
    if serializable {
        o = o.with_serializable();
    }
    let r = c.get("/fnc/", Some(o)).await.unwrap();
    r.kvs()
        .iter()
        .map(|kv| {
            format!(
                "{}={} c{} m{} v{}{}",
                kv.key_str().unwrap(),
                kv.value_str().unwrap(),
                kv.create_revision(),
                kv.mod_revision(),
                kv.version(),
                if kv.lease() != 0 { " leased" } else { "" }
            )
        })
        .collect()
}

/// (raft term, raft index, leader) from member `i`'s Status.
async fn raft_status(c: &Cluster, i: usize) -> (u64, u64, u64) {
    let mut raw = c.raw(i).await;
    let s = raw.maint.status(pb::StatusRequest {}).await.unwrap().into_inner();
    (s.raft_term, s.raft_index, s.leader)
}

/// The events of a watch on `/fnc/` from `from` through revision `upto`, as text.
async fn history(c: &mut Client, from: i64, upto: i64) -> Vec<String> {
    let o = WatchOptions::new().with_prefix().with_start_revision(from);
    let mut events = c.watch("/fnc/", Some(o)).await.unwrap();
    let mut seen = Vec::new();
    let mut last = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while last < upto {
        let left = deadline.saturating_duration_since(Instant::now());
        let msg = tokio::time::timeout(left, events.message()).await;
        let resp = msg.unwrap_or_else(|_| panic!("watch stalled after {last}: {seen:?}"));
        for e in resp.unwrap().expect("the watch goes on").events() {
            let kv = e.kv().unwrap();
            last = kv.mod_revision();
            seen.push(format!(
                "{:?} {} m{} v{}",
                e.event_type(),
                kv.key_str().unwrap(),
                kv.mod_revision(),
                kv.version()
            ));
        }
    }
    seen
}

/// The flow on `kind`; what a client saw, to compare.
async fn force_session(kind: Kind) -> Option<Vec<String>> {
    let mut c = Cluster::start(kind, 3, &[]).await?;
    let mut log = Vec::new();
    let leader = c.leader().await;
    let mut cl = c.client(leader).await;
    let mut names = BTreeMap::new();
    for i in 0..3 {
        names.insert(ids(&c, i).await.0, format!("m{i}"));
    }
    let mut compacted = 0;
    for i in 0..30 {
        let r = cl.put(format!("/fnc/k/{:02}", i % 20), format!("v{i}"), None).await.unwrap();
        if i == 9 {
            compacted = rev(r.header());
            cl.compact(compacted, None).await.unwrap();
        }
    }
    cl.delete("/fnc/k/05", None).await.unwrap();
    cl.put("/fnc/k/06", "again", None).await.unwrap();
    let lease = cl.lease_grant(60, None).await.unwrap().id();
    cl.put("/fnc/leased", "l", Some(PutOptions::new().with_lease(lease))).await.unwrap();
    cl.role_add("fnc-role").await.unwrap();
    cl.user_add("fnc-user", "pw", None).await.unwrap();
    cl.user_grant_role("fnc-user", "fnc-role").await.unwrap();
    let last = cl.put("/fnc/last", "x", None).await.unwrap();
    let last = rev(last.header());
    // Every member has applied everything (so each knows it committed).
    assert_eq!(c.converged().await, last, "{kind:?}");
    let before = contents(&mut cl, false).await;
    let watched = history(&mut cl, compacted + 1, last).await;

    // A follower survives; the other two are lost for good, then it is stopped.
    let kept = (leader + 1) % 3;
    let (m, cluster) = ids(&c, kept).await;
    // Which member that is depends on who led; the logs compared name it the same on both.
    names.insert(m, "kept".into());
    let kept_name = format!("{:?}", c.members[kept].name);
    let same = |shape: String| shape.replace(&kept_name, "\"kept\"");
    let (term, index, _) = raft_status(&c, kept).await;
    for i in 0..3 {
        if i != kept {
            let _ = c.kill9(i);
        }
    }
    let stopped = c.members[kept].server.take().unwrap();
    let (_, by_itself) = stopped.stop_or_kill(Duration::from_secs(30)).await;
    assert!(by_itself, "{kind:?}: the member left alone stops on SIGTERM");

    c.restart_with(kept, &["--force-new-cluster"]).await;
    let mut on = c.client(kept).await;
    assert_eq!(ids(&c, kept).await, (m, cluster), "{kind:?}: the ids stay");
    let (new_term, new_index, lead) = raft_status(&c, kept).await;
    assert_eq!(lead, m, "{kind:?}: it leads its new cluster");
    assert!(new_term > term, "{kind:?}: term {new_term} after {term}");
    assert!(new_index >= index, "{kind:?}: raft index {new_index} after {index}");
    let list = on.member_list().await.unwrap();
    log.push(format!("forced: {}", same(shape(&c, &names, list.members()))));
    assert_eq!(list.members().len(), 1, "{kind:?}");
    let now = contents(&mut on, false).await;
    assert_eq!(now, before, "{kind:?}: every acknowledged key, as it was");
    log.push(format!("keys: {now:?}"));
    let header_rev = rev(on.get("/fnc/", None).await.unwrap().header());
    assert_eq!(header_rev, last, "{kind:?}: the revision stays");
    log.push(format!("revision: {header_rev}"));
    let old = on.get("/fnc/k/00", Some(GetOptions::new().with_revision(compacted - 1))).await;
    let old = old.map(|_| "ok").map_err(|e| status_of(&e));
    log.push(format!("read below the compaction: {old:?}"));
    let history_now = history(&mut on, compacted + 1, last).await;
    assert_eq!(history_now, watched, "{kind:?}: the same history");
    log.push(format!("history: {history_now:?}"));
    let ttl = on
        .lease_time_to_live(lease, Some(LeaseTimeToLiveOptions::new().with_keys()))
        .await
        .unwrap();
    // A new leader gives every lease its full TTL again (etcd's adds an election timeout).
    assert!(ttl.ttl() > 30 && ttl.ttl() <= 62, "{kind:?}: lease ttl {}", ttl.ttl());
    log.push(format!("lease: granted {}, keys {:?}", ttl.granted_ttl(), ttl.keys()));
    let users = on.user_list().await.unwrap();
    let roles = on.role_list().await.unwrap();
    let user = on.user_get("fnc-user").await.unwrap();
    log.push(format!("auth: {:?} {:?} {:?}", users.users(), roles.roles(), user.roles()));
    let next = on.put("/fnc/after", "a", None).await.unwrap();
    assert_eq!(rev(next.header()), last + 1, "{kind:?}: revisions go on");
    log.push(format!("put after: {}", rev(next.header()) - last));

    // A learner joins the new cluster, catches up and is promoted.
    let s = c.add_slot();
    let peer = c.peer_url(s);
    let added = on
        .member_add([peer.as_str()], Some(MemberAddOptions::new().with_is_learner()))
        .await
        .unwrap_or_else(|e| panic!("{kind:?}: member add: {e}"));
    let new_id = added.member().unwrap().id();
    names.insert(new_id, format!("m{s}"));
    log.push(format!("added: {}", same(shape(&c, &names, added.member_list()))));
    c.join(s).await;
    when_ready("promote", || {
        let mut on = on.clone();
        async move { on.member_promote(new_id).await }
    })
    .await;
    let after_join = on.put("/fnc/joined", "j", None).await.unwrap();
    assert_eq!(rev(after_join.header()), last + 2, "{kind:?}");
    assert_eq!(c.converged().await, last + 2, "{kind:?}");
    let mut joined = c.client(s).await;
    let list = joined.member_list().await.unwrap();
    log.push(format!("the joined member lists: {}", same(shape(&c, &names, list.members()))));
    let mine = contents(&mut joined, true).await;
    assert_eq!(mine, contents(&mut on, true).await, "{kind:?}: the joined member caught up");
    log.push(format!("the joined member holds: {mine:?}"));
    let leased = local(&mut joined, "/fnc/leased").await;
    assert_eq!(leased.map(|v| v.0), Some("l".to_string()), "{kind:?}");

    // Restarted without the flag, the forced member is a member of the cluster of two.
    let stopped = c.members[kept].server.take().unwrap();
    let _ = stopped.stop_or_kill(Duration::from_secs(30)).await;
    c.restart(kept).await;
    c.leader().await;
    let mut on = c.client(kept).await;
    let list = on.member_list().await.unwrap();
    log.push(format!("restarted without the flag: {}", same(shape(&c, &names, list.members()))));
    let r = on.put("/fnc/restarted", "r", None).await.unwrap();
    assert_eq!(rev(r.header()), last + 3, "{kind:?}");
    assert_eq!(c.converged().await, last + 3, "{kind:?}");
    Some(log)
}

#[tokio::test]
async fn force_new_cluster_restarts_a_member_alone_with_its_data_as_etcd_does() {
    let mem = force_session(Kind::MemEtcd).await.expect("mem_etcd cluster");
    let Some(etcd) = force_session(Kind::Etcd).await else { return };
    say(&format!("compared with etcd:\n{}", etcd.join("\n")));
    for (m, e) in mem.iter().zip(&etcd) {
        assert_eq!(m, e, "mem_etcd (left) and etcd (right) differ");
    }
    assert_eq!(mem.len(), etcd.len());
}

async fn fresh(kind: Kind) -> Option<String> {
    let c = Cluster::start(kind, 3, &["--force-new-cluster"]).await?;
    let leader = c.leader().await;
    let mut cl = c.client(leader).await;
    cl.put("k", "v", None).await.unwrap();
    c.converged().await;
    let mut names = BTreeMap::new();
    for i in 0..3 {
        names.insert(ids(&c, i).await.0, format!("m{i}"));
    }
    let list = cl.member_list().await.unwrap();
    Some(shape(&c, &names, list.members()))
}

/// Without a member's data the flag changes nothing: three new members given it found their
/// cluster of three, as etcd's do.
#[tokio::test]
async fn force_new_cluster_on_new_members_founds_the_cluster_as_usual() {
    let mem = fresh(Kind::MemEtcd).await.expect("mem_etcd cluster");
    assert!(mem.matches("learner=false").count() == 3, "{mem}");
    let Some(etcd) = fresh(Kind::Etcd).await else { return };
    say(&format!("compared with etcd: {etcd}"));
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
}
