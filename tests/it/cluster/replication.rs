//! Clusters of mem_etcd members on Raft, started with etcd's cluster flags, next to clusters of
//! real etcd 3.6 where behaviour is compared: reads and writes through every member, a
//! follower's watch, etcdctl's cluster commands, the leader killed in every WAL mode, a
//! majority lost, membership changes with a member catching up from a snapshot, leases
//! across a leader change, peer TLS settings on the calls a member makes, the initial
//! corruption check refusing a member whose data differs from its peers', and the Raft log's
//! segments sized by --wal-segment-bytes and all read back on a restart.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use etcd_client::{Client, GetOptions, PutOptions, WatchOptions};

use crate::cluster::harness::Cluster;
use crate::support::*;
use crate::tools::etcdctl::etcdctl;

macro_rules! cluster {
    ($kind:expr, $n:expr, $args:expr) => {
        match Cluster::start($kind, $n, &$args).await {
            Some(c) => c,
            None => return,
        }
    };
}

/// A write, acknowledged: the revision it got.
async fn put(c: &mut Client, key: &str, value: &str) -> i64 {
    rev(c.put(key, value, None).await.unwrap_or_else(|e| panic!("put {key}: {e}")).header())
}

/// The value and mod revision of `key`, linearizable or serializable.
async fn get(c: &mut Client, key: &str, serializable: bool) -> Option<(String, i64)> {
    let opts = serializable.then(|| GetOptions::new().with_serializable());
    let r = c.get(key, opts).await.unwrap_or_else(|e| panic!("get {key}: {e}"));
    r.kvs().first().map(|kv| (kv.value_str().unwrap().to_string(), kv.mod_revision()))
}

async fn writes_read_back_linearizably(n: usize) {
    let c = cluster!(Kind::MemEtcd, n, ["--wal-mode=buffered"]);
    let mut clients = Vec::new();
    for i in 0..n {
        clients.push(c.client(i).await);
    }
    let mut last = 0;
    for round in 0..3 {
        for i in 0..n {
            let key = format!("k{round}-{i}");
            let r = put(&mut clients[i], &key, &format!("from m{i}")).await;
            assert!(r > last, "revisions go up in acknowledgement order: {r} after {last}");
            last = r;
            // Linearizable reads on every other member see it at once, with its revision.
            for (j, other) in clients.iter_mut().enumerate() {
                let got = get(other, &key, false).await;
                assert_eq!(
                    got,
                    Some((format!("from m{i}"), r)),
                    "m{j} reading {key} written via m{i}"
                );
            }
        }
    }
    assert_eq!(c.converged().await, last);
}

#[tokio::test]
async fn writes_through_every_member_of_three_read_back_linearizably_on_the_others() {
    writes_read_back_linearizably(3).await;
}

#[tokio::test]
async fn writes_through_every_member_of_five_read_back_linearizably_on_the_others() {
    writes_read_back_linearizably(5).await;
}

#[tokio::test]
async fn a_followers_watch_sees_every_event_in_order() {
    let c = cluster!(Kind::MemEtcd, 3, ["--wal-mode=none"]);
    let leader = c.leader().await;
    let follower = (leader + 1) % 3;
    let other = (leader + 2) % 3;
    let mut w = c.client(follower).await;
    let mut stream =
        w.watch("/w/", Some(WatchOptions::new().with_prefix().with_prev_key())).await.unwrap();
    // The created response first.
    stream.message().await.unwrap().unwrap();
    // Writers on the leader and on the other follower at once.
    let mut writers = Vec::new();
    for (at, tag) in [(leader, "a"), (other, "b")] {
        let mut cl = c.client(at).await;
        writers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for n in 0..100 {
                let key = format!("/w/{tag}{}", n % 7);
                acked.push(put(&mut cl, &key, &format!("{tag}{n}")).await);
            }
            acked
        }));
    }
    let mut acked: Vec<i64> = Vec::new();
    for w in writers {
        acked.extend(w.await.unwrap());
    }
    acked.sort_unstable();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.len() < acked.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        let resp = tokio::time::timeout(left, stream.message())
            .await
            .expect("the follower's watch delivers every event within 20 s")
            .unwrap()
            .unwrap();
        for e in resp.events() {
            seen.push(e.kv().unwrap().mod_revision());
        }
    }
    assert_eq!(seen, acked, "every event once, in revision order");
}

/// Member ids and ports replaced by member names, for comparing clusters.
fn names(c: &Cluster, ids: &BTreeMap<u64, String>, text: &str) -> String {
    let mut out = text.to_string();
    for (id, name) in ids {
        out = out.replace(&format!("{id:x}"), &format!("<{name}>"));
        out = out.replace(&id.to_string(), &format!("<{name}>"));
    }
    for (i, m) in c.members.iter().enumerate() {
        out = out.replace(&m.client_port.to_string(), &format!("<client{i}>"));
        out = out.replace(&m.peer_port.to_string(), &format!("<peer{i}>"));
    }
    out
}

/// What etcdctl printed for a sequence of cluster commands, normalized.
async fn etcdctl_session(kind: Kind) -> Option<Vec<String>> {
    let ctl = peer_binary("etcdctl")?;
    let mut c = Cluster::start(kind, 3, &["--wal-mode=buffered"]).await?;
    let mut ids = BTreeMap::new();
    for i in 0..3 {
        ids.insert(c.member_id(i).await, format!("m{i}"));
    }
    let cluster_id = {
        let mut raw = c.raw(0).await;
        raw.maint
            .status(pb::StatusRequest {})
            .await
            .unwrap()
            .into_inner()
            .header
            .unwrap()
            .cluster_id
    };
    ids.insert(cluster_id, "cluster".into());
    let leader = c.leader().await;
    let follower = (leader + 1) % 3;
    let mut log = Vec::new();
    let all = c.endpoints();
    let run = |log: &mut Vec<String>,
               c: &Cluster,
               ids: &BTreeMap<u64, String>,
               ep: &str,
               args: &[&str]| {
        let (code, out, err) = etcdctl(&ctl, ep, args, None);
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("Error:")).collect();
        // Members are listed by id, and ids differ between the two clusters (other ports):
        // compare lists sorted by name instead.
        // (Table columns are as wide as the ids: runs of spaces and dashes count as one.)
        let squeeze = |l: &str| {
            let mut o = String::new();
            for ch in l.chars() {
                if !((ch == ' ' || ch == '-') && o.ends_with(ch)) {
                    o.push(ch);
                }
            }
            o
        };
        let mut lines: Vec<String> = names(c, ids, &out).lines().map(squeeze).collect();
        if args.starts_with(&["member", "list"]) {
            lines.sort();
        }
        for l in &mut lines {
            // `member add`: the cluster's members in id order, and the new member's id.
            if let Some(list) = l.strip_prefix("ETCD_INITIAL_CLUSTER=") {
                let mut m: Vec<&str> = list.trim_matches('"').split(',').collect();
                m.sort();
                *l = format!("ETCD_INITIAL_CLUSTER={}", m.join(","));
            }
            if let Some(rest) = l.strip_prefix("Member ")
                && let Some((_, tail)) = rest.split_once(' ')
                && tail.starts_with("added")
            {
                *l = format!("Member <new> {tail}");
            }
        }
        let text = format!("{args:?} -> {code:?}\n{}\n{}", lines.join("\n"), errors.join("\n"));
        let text = names(c, ids, &text);
        log.push(text);
        out
    };
    run(&mut log, &c, &ids, &all, &["member", "list"]);
    run(&mut log, &c, &ids, &all, &["member", "list", "-w", "table"]);
    for i in 0..3 {
        run(&mut log, &c, &ids, &c.endpoint(i), &["put", &format!("k{i}"), &format!("v{i}")]);
    }
    for i in 0..3 {
        run(&mut log, &c, &ids, &c.endpoint(i), &["get", "k", "--prefix", "--write-out=fields"]);
        run(&mut log, &c, &ids, &c.endpoint(i), &["get", "k0", "--consistency=s"]);
    }
    let out = etcdctl(&ctl, &all, &["endpoint", "health", "--cluster"], None);
    // "... is healthy: successfully committed proposal: took = 1.2ms", in any order.
    let mut lines: Vec<String> = out
        .1
        .lines()
        .chain(out.2.lines())
        .map(|l| names(&c, &ids, l.split(": took").next().unwrap()))
        .collect();
    lines.sort();
    log.push(names(
        &c,
        &ids,
        &format!("endpoint health --cluster -> {:?}\n{}", out.0, lines.join("\n")),
    ));
    let out = etcdctl(&ctl, &all, &["endpoint", "hashkv", "--cluster"], None);
    let hashes: Vec<&str> = out.1.lines().map(|l| l.split(", ").nth(1).unwrap_or("")).collect();
    assert_eq!(hashes.len(), 3, "{kind:?}: {}", out.1);
    assert!(hashes.iter().all(|h| *h == hashes[0]), "{kind:?}: members' hashes differ: {}", out.1);
    let revs: Vec<&str> = out.1.lines().map(|l| l.rsplit(", ").next().unwrap_or("")).collect();
    log.push(format!("hashkv revisions {revs:?}"));
    let status = etcdctl(&ctl, &all, &["endpoint", "status", "--cluster", "-w", "json"], None).1;
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    let mut view: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let s = &e["Status"];
            format!(
                "leader known={} learner={} version={} term>0={} index>0={} applied=index:{}",
                ids.contains_key(&s["leader"].as_u64().unwrap_or(0)),
                s["isLearner"].as_bool().unwrap_or(false),
                s["version"],
                s["raftTerm"].as_u64().unwrap_or(0) > 0,
                s["raftIndex"].as_u64().unwrap_or(0) > 0,
                s["raftAppliedIndex"] == s["raftIndex"],
            )
        })
        .collect();
    view.sort();
    log.push(format!("endpoint status --cluster\n{}", view.join("\n")));
    // Membership errors, then a learner added and removed. etcd changes membership only once
    // every member has been connected for 5 s (its "health interval").
    c.healthy().await;
    let voter = format!("{:x}", c.member_id(0).await);
    run(&mut log, &c, &ids, &all, &["member", "promote", &voter]);
    run(&mut log, &c, &ids, &all, &["member", "remove", "1234"]);
    run(
        &mut log,
        &c,
        &ids,
        &all,
        &["member", "add", "dup", &format!("--peer-urls={}", c.peer_url(0))],
    );
    let slot = c.add_slot();
    let new_peer = c.peer_url(slot);
    let out = run(
        &mut log,
        &c,
        &ids,
        &all,
        &["member", "add", "m3", "--learner", &format!("--peer-urls={new_peer}")],
    );
    let new_id = out
        .split_whitespace()
        .skip_while(|w| *w != "Member")
        .nth(1)
        .unwrap_or_else(|| panic!("{kind:?}: member add: {}", log.last().unwrap()))
        .to_string();
    ids.insert(u64::from_str_radix(&new_id, 16).unwrap(), "m3".into());
    // Not started: not in sync with the leader.
    run(&mut log, &c, &ids, &all, &["member", "promote", &new_id]);
    run(&mut log, &c, &ids, &all, &["member", "list"]);
    run(&mut log, &c, &ids, &all, &["member", "remove", &new_id]);
    // The leader hands over to a follower.
    let target = format!("{:x}", c.member_id(follower).await);
    let mut roles = ids.clone();
    roles.insert(c.member_id(leader).await, "leader".into());
    roles.insert(c.member_id(follower).await, "follower".into());
    run(&mut log, &c, &roles, &c.endpoint(leader), &["move-leader", &target]);
    assert_eq!(c.leader().await, follower, "{kind:?}: move-leader made the follower lead");
    // Asked of a member that no longer leads (etcdctl names its endpoint).
    run(&mut log, &c, &roles, &c.endpoint(leader), &["move-leader", &target]);
    let last = log.pop().unwrap();
    log.push(last.replace(&format!("<client{leader}>"), "<old leader>"));
    let _ = c.kill9(0);
    Some(log)
}

#[tokio::test]
async fn etcdctl_on_a_cluster_prints_what_a_real_etcd_cluster_prints() {
    let Some(mem) = etcdctl_session(Kind::MemEtcd).await else { return };
    let Some(etcd) = etcdctl_session(Kind::Etcd).await else { return };
    for (m, e) in mem.iter().zip(&etcd) {
        assert_eq!(m, e, "mem_etcd (left) and etcd (right) differ");
    }
    assert_eq!(mem.len(), etcd.len());
}

/// Keeps writing unique keys through `member` until `stop`, and returns what was acknowledged
/// (key, value, revision) and how many writes failed.
async fn writer(
    mut c: Client,
    tag: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> (Vec<(String, i64)>, usize) {
    let mut acked = Vec::new();
    let mut failed = 0;
    let mut n = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) && n < 5000 {
        let key = format!("/acked/{tag}/{n}");
        n += 1;
        match tokio::time::timeout(Duration::from_secs(10), c.put(key.as_str(), "v", None)).await {
            Ok(Ok(r)) => acked.push((key, rev(r.header()))),
            _ => {
                failed += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    (acked, failed)
}

async fn leader_killed(mode: &str) {
    member_killed(mode, true, Duration::from_millis(500)).await
}

/// Kills the leader (or a follower) under load, checks that writes go on, restarts it, and
/// checks that every acknowledged write is on every member.
async fn member_killed(mode: &str, leader_dies: bool, down: Duration) {
    let mode_flag = format!("--wal-mode={mode}");
    let mut c =
        cluster!(Kind::MemEtcd, 3, [mode_flag.as_str(), "--log-level=info,mem_etcd::raft=debug"]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for i in 0..3 {
        // Each writer may use any member, as the Go client does.
        let eps: Vec<String> = (0..3).map(|j| c.endpoint((i + j) % 3)).collect();
        let cl = Client::connect(eps, None).await.unwrap();
        writers.push(tokio::spawn(writer(cl, format!("w{i}"), stop.clone())));
    }
    c.writes_go_on(0, 100, "the writers' first writes").await;
    let leader = c.leader().await;
    let victim = if leader_dies { leader } else { (leader + 1) % 3 };
    let killed_at = Instant::now();
    c.kill9(victim);
    // A new leader takes writes within a few seconds.
    let survivor = (victim + 2) % 3;
    let mut probe = c.client(survivor).await;
    loop {
        let r = tokio::time::timeout(Duration::from_secs(5), probe.put("/probe", "x", None)).await;
        if matches!(r, Ok(Ok(_))) {
            break;
        }
        assert!(
            killed_at.elapsed() < Duration::from_secs(10),
            "{mode}: no write accepted 10 s after the leader died"
        );
    }
    let failover = killed_at.elapsed();
    assert!(failover < Duration::from_secs(6), "{mode}: a new leader took {failover:?}");
    // Down under the writes, then restarted. `down` past the others' one-way window (300 ms
    // here: they then send it nothing until it calls them) is what once left a member without
    // state waiting for its re-admission forever.
    tokio::time::sleep(down).await;
    c.restart(victim).await;
    c.writes_go_on(survivor, 100, "the writers' writes once the member is back").await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut acked = Vec::new();
    for w in writers {
        let (a, _failed) = w.await.unwrap();
        acked.extend(a);
    }
    assert!(acked.len() > 50, "{mode}: only {} writes acknowledged", acked.len());
    let rev = c.converged().await;
    let mut revisions: Vec<i64> = acked.iter().map(|a| a.1).collect();
    revisions.sort_unstable();
    revisions.dedup();
    assert_eq!(revisions.len(), acked.len(), "{mode}: a revision acknowledged twice");
    // Every acknowledged write, on every member, the restarted one included.
    for i in 0..3 {
        let mut cl = c.client(i).await;
        let all = cl
            .get("/acked/", Some(GetOptions::new().with_prefix().with_serializable()))
            .await
            .unwrap();
        let held: BTreeMap<String, i64> = all
            .kvs()
            .iter()
            .map(|kv| (kv.key_str().unwrap().to_string(), kv.mod_revision()))
            .collect();
        for (key, r) in &acked {
            assert_eq!(
                held.get(key),
                Some(r),
                "{mode}: m{i} lost {key} (acknowledged at {r}); at {rev}"
            );
        }
    }
    eprintln!(
        "{mode}: {} writes acknowledged, failover {failover:?}, converged at {rev}",
        acked.len()
    );
}

#[tokio::test]
async fn killing_the_leader_loses_no_acknowledged_write_in_none_mode() {
    leader_killed("none").await;
}

#[tokio::test]
async fn killing_the_leader_loses_no_acknowledged_write_in_buffered_mode() {
    leader_killed("buffered").await;
}

#[tokio::test]
async fn killing_the_leader_loses_no_acknowledged_write_in_fsync_mode() {
    leader_killed("fsync").await;
}

#[tokio::test]
async fn a_follower_killed_in_none_mode_comes_back_empty_and_catches_up() {
    member_killed("none", false, Duration::from_millis(800)).await;
}

/// Down for seconds, well past every window the others keep on it: re-admitted all the same.
#[tokio::test]
async fn a_follower_down_for_seconds_in_none_mode_is_readmitted() {
    member_killed("none", false, Duration::from_secs(3)).await;
}

/// A member back without its state (`--wal-mode none`) stays a voter and serves its clients
/// from the start; it votes again once it holds the log, so that when the leader dies it and
/// the other follower elect a leader holding every acknowledged write. Demoted to a learner
/// until it had caught up, as it once was, it refused its clients' writes ("rpc not supported
/// for learner") for a while, and so did a founding member that merely started late, which a
/// member without state cannot tell from one that lost its state.
#[tokio::test]
async fn a_member_back_without_state_stays_a_voter_and_votes_once_it_holds_the_log() {
    let mut c = cluster!(Kind::MemEtcd, 3, ["--wal-mode=none", "--log-level=info"]);
    let leader = c.leader().await;
    let mut cl = c.client(leader).await;
    let mut acked = BTreeMap::new();
    for i in 0..200 {
        let key = format!("/before/{i:03}");
        acked.insert(key.clone(), put(&mut cl, &key, "v").await);
    }
    let victim = (leader + 1) % 3;
    c.kill9(victim);
    c.restart(victim).await;
    let mut raw = c.raw(victim).await;
    let mut vc = c.client(victim).await;
    // Its first write may wait for it to hear from the leader; every one after is taken.
    let back = Instant::now();
    let mut first = None;
    let mut n = 0;
    while back.elapsed() < Duration::from_secs(4) {
        let s = raw.maint.status(pb::StatusRequest {}).await.unwrap().into_inner();
        assert!(
            !s.is_learner,
            "the member back without state is a learner after {:?}",
            back.elapsed()
        );
        let key = format!("/back/{n:03}");
        match vc.put(key.as_str(), "v", None).await {
            Ok(r) => {
                first.get_or_insert(back.elapsed());
                acked.insert(key, rev(r.header()));
                n += 1;
            }
            Err(e) => assert!(
                first.is_none() && back.elapsed() < Duration::from_secs(2),
                "a write through the member back without state, {:?} after it started (first \
                 taken after {first:?}): {e}",
                back.elapsed()
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(n >= 10, "only {n} writes through the member back without state");
    // Re-admitted: it votes again. Without the leader, it and the other follower elect one.
    let server = c.members[victim].server.as_ref().unwrap();
    wait_until("the member back without state votes again", Duration::from_secs(30), || async {
        let said = server.grep_log("votes again");
        if said.is_empty() { Err("not yet".to_string()) } else { Ok(()) }
    })
    .await;
    c.kill9(leader);
    let next = c.leader().await;
    let mut cl = c.client(next).await;
    acked.insert("/after".into(), put(&mut cl, "/after", "v").await);
    c.converged().await;
    for i in c.running() {
        let mut cl = c.client(i).await;
        let all = cl.get("/", Some(GetOptions::new().with_prefix().with_serializable())).await;
        let held: BTreeMap<String, i64> = all
            .unwrap()
            .kvs()
            .iter()
            .map(|kv| (kv.key_str().unwrap().to_string(), kv.mod_revision()))
            .collect();
        assert_eq!(held, acked, "m{i} (back without state: m{victim}; new leader: m{next})");
    }
}

#[tokio::test]
async fn a_follower_killed_in_buffered_mode_catches_up() {
    member_killed("buffered", false, Duration::from_millis(800)).await;
}

/// The Raft log's segments, by `--wal-segment-bytes` (4 KiB here, the smallest it takes): a
/// few hundred writes roll every member's log over many times, and a restart of every member
/// (killed, so nothing is written at shutdown) reads every segment back: each acknowledged
/// write is on each member at the revision it was acknowledged with.
#[tokio::test]
async fn small_wal_segments_roll_the_raft_log_and_a_restart_reads_them_all() {
    let mut c = cluster!(Kind::MemEtcd, 3, ["--wal-mode=buffered", "--wal-segment-bytes=4096"]);
    let mut cl = c.client(c.leader().await).await;
    let value = "v".repeat(200);
    let mut acked = BTreeMap::new();
    for i in 0..300 {
        let key = format!("/seg/{i:04}");
        acked.insert(key.clone(), put(&mut cl, &key, &value).await);
    }
    let rev = c.converged().await;
    for (i, m) in c.members.iter().enumerate() {
        let log = m.dir.path().join("raft").join("log");
        let segments = std::fs::read_dir(&log)
            .unwrap_or_else(|e| panic!("{}: {e}", log.display()))
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".log"))
            .count();
        // About 300 entries of some 250 bytes each: 60 KiB of log in 4 KiB segments.
        assert!(segments >= 10, "m{i}: {segments} segments in {}", log.display());
    }
    for i in 0..3 {
        let _ = c.kill9(i);
    }
    c.restart_all(&[0, 1, 2]).await;
    assert_eq!(c.converged().await, rev, "the restarted members are at the revision they left");
    for i in 0..3 {
        let mut cl = c.client(i).await;
        let opts = GetOptions::new().with_prefix().with_serializable();
        let all = cl.get("/seg/", Some(opts)).await.unwrap();
        let held: BTreeMap<String, i64> = all
            .kvs()
            .iter()
            .map(|kv| (kv.key_str().unwrap().to_string(), kv.mod_revision()))
            .collect();
        assert_eq!(held, acked, "m{i} after the restart");
        assert!(all.kvs().iter().all(|kv| kv.value_str().unwrap() == value), "m{i}");
    }
}

/// With a majority down a write fails with one of etcd's errors, never with a success.
async fn majority_lost(kind: Kind) -> Option<(tonic::Code, String)> {
    let mut c = Cluster::start(kind, 3, &["--wal-mode=buffered"]).await?;
    let mut cl = c.client(0).await;
    put(&mut cl, "before", "1").await;
    let _ = c.kill9(1);
    let _ = c.kill9(2);
    let r = tokio::time::timeout(Duration::from_secs(30), cl.put("during", "1", None)).await;
    let err = match r {
        Ok(Err(e)) => status_of(&e),
        Ok(Ok(_)) => panic!("{kind:?}: a write succeeded with a majority down"),
        Err(_) => panic!("{kind:?}: a write hung for 30 s with a majority down"),
    };
    // Reads that need the quorum fail too; serializable ones are served.
    let r = tokio::time::timeout(Duration::from_secs(30), cl.get("before", None)).await;
    assert!(matches!(r, Ok(Err(_))), "{kind:?}: a linearizable read without quorum: {r:?}");
    assert!(get(&mut cl, "before", true).await.is_some());
    Some(err)
}

#[tokio::test]
async fn with_a_majority_down_a_write_fails_with_etcds_error() {
    let Some(mem) = majority_lost(Kind::MemEtcd).await else { return };
    let Some(etcd) = majority_lost(Kind::Etcd).await else { return };
    assert_eq!(mem.0, tonic::Code::Unavailable, "{mem:?}");
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right)");
}

#[tokio::test]
async fn members_are_added_promoted_and_removed_and_a_new_member_catches_up_from_a_snapshot() {
    // Small snapshots, so that the leader's log no longer holds what the new member misses.
    let mut c = cluster!(Kind::MemEtcd, 3, ["--wal-mode=buffered", "--wal-snapshot-bytes=65536"]);
    let mut cl =
        Client::connect((0..3).map(|i| c.endpoint(i)).collect::<Vec<_>>(), None).await.unwrap();
    // More entries than the leader keeps after a snapshot (5,000), in parallel writers.
    let mut tasks = Vec::new();
    for t in 0..8 {
        let mut cl = cl.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..800 {
                cl.put(format!("/data/{t}/{}", n % 100), vec![b'x'; 200], None).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Compacted, the store is far smaller than what was logged: a snapshot follows, and the
    // leader's log keeps only the 5,000 entries before it.
    let now = put(&mut cl, "/data/now", "x").await;
    cl.compact(now, None).await.unwrap();
    let start = Instant::now();
    while c
        .running()
        .iter()
        .all(|i| c.members[*i].server.as_ref().unwrap().grep_log("snapshot written").is_empty())
    {
        if start.elapsed() > Duration::from_secs(30) {
            let mut sizes = Vec::new();
            for i in c.running() {
                let st =
                    c.raw(i).await.maint.status(pb::StatusRequest {}).await.unwrap().into_inner();
                sizes.push((st.db_size, st.raft_index, st.raft_applied_index));
            }
            eprintln!("members' (db size, raft index, applied): {sizes:?}");
            let logs: Vec<String> = c
                .running()
                .iter()
                .map(|i| c.members[*i].server.as_ref().unwrap().log_tail())
                .collect();
            panic!("no snapshot was taken; the members' logs:\n{}", logs.join("\n---\n"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let slot = c.add_slot();
    // etcd adds members only once every member has been connected for 5 s.
    let added = c.add_learner(&cl, slot, Duration::from_secs(15)).await;
    let new_id = added.member().unwrap().id();
    assert!(added.member().unwrap().is_learner());
    // Not started yet: not in sync.
    let e = cl.member_promote(new_id).await.unwrap_err();
    assert_eq!(
        status_of(&e),
        (
            tonic::Code::FailedPrecondition,
            "etcdserver: can only promote a learner member which is in sync with leader".into()
        )
    );
    c.join(slot).await;
    // Caught up (from a snapshot): promoted.
    wait_until("the new member's promotion", Duration::from_secs(30), || {
        let mut cl = cl.clone();
        async move { cl.member_promote(new_id).await }
    })
    .await;
    let new = c.members[slot].server.as_ref().unwrap();
    assert!(
        !new.grep_log("snapshot installed").is_empty(),
        "the new member caught up from a snapshot:\n{}",
        new.log_tail()
    );
    // Every member lists it as a voter once it has applied the change.
    for i in c.running() {
        let on = c.client(i).await;
        wait_until(&format!("m{i} to list 4 voters"), Duration::from_secs(10), || {
            let mut on = on.clone();
            async move {
                let list = on.member_list().await.unwrap();
                let voters =
                    list.members().len() == 4 && list.members().iter().all(|m| !m.is_learner());
                if voters { Ok(()) } else { Err(format!("{:?}", list.members())) }
            }
        })
        .await;
    }
    let rev = c.converged().await;
    let mut on_new = c.client(slot).await;
    assert_eq!(get(&mut on_new, "/data/7/99", false).await.map(|v| v.1 > 0), Some(true));
    // Remove a founding member that does not lead; the others go on.
    let leader = c.leader().await;
    let gone = (0..3).find(|i| *i != leader).unwrap();
    let gone_id = c.member_id(gone).await;
    let left = cl.member_remove(gone_id).await.unwrap();
    assert_eq!(left.members().len(), 3);
    let _ = c.kill9(gone);
    let mut cl = c.client(slot).await;
    let r = put(&mut cl, "/after", "remove").await;
    assert!(r > rev);
    assert_eq!(c.converged().await, r);
    let e = cl.member_remove(gone_id).await.unwrap_err();
    assert_eq!(status_of(&e), (tonic::Code::NotFound, "etcdserver: member not found".into()));
}

#[tokio::test]
async fn a_lease_outlives_a_leader_change_and_expires_after_it() {
    let mut c = cluster!(Kind::MemEtcd, 3, ["--wal-mode=buffered"]);
    let leader = c.leader().await;
    let follower = (leader + 1) % 3;
    let mut cl = c.client(follower).await;
    let lease = cl.lease_grant(4, None).await.unwrap().id();
    cl.put("/leased", "v", Some(PutOptions::new().with_lease(lease))).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    c.kill9(leader);
    let new_leader = c.leader().await;
    let changed = Instant::now();
    // The new leader gave the lease its full TTL: 2.5 s in, it does not expire at 4 s.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(get(&mut cl, "/leased", false).await.is_some(), "expired because of the election");
    let ttl = cl.lease_time_to_live(lease, None).await.unwrap();
    assert!(ttl.ttl() > 0 && ttl.ttl() <= 4, "TTL from the new leader: {}", ttl.ttl());
    // ... and expires about 4 s after the new leader took over, on every member.
    wait_until("the lease to expire", Duration::from_secs(10), || {
        let mut cl = cl.clone();
        async move { get(&mut cl, "/leased", false).await.is_none() }
    })
    .await;
    let after = changed.elapsed();
    assert!(after >= Duration::from_secs(3), "expired {after:?} after the leader change");
    c.restart(leader).await;
    c.converged().await;
    let mut on_new = c.client(new_leader).await;
    assert!(get(&mut on_new, "/leased", true).await.is_none());
}

#[tokio::test]
async fn members_talk_over_tls_with_the_peer_flags() {
    let certs = crate::security::tls::Certs::new();
    let flags = [
        certs.arg("--peer-cert-file", "server.crt"),
        certs.arg("--peer-key-file", "server.key"),
        certs.arg("--peer-trusted-ca-file", "ca.crt"),
        "--peer-client-cert-auth".to_string(),
        "--wal-mode=buffered".to_string(),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let c = Cluster::start_on(Kind::MemEtcd, 3, &flags, "https").await.expect("cluster");
    let mut clients = Vec::new();
    for i in 0..3 {
        clients.push(c.client(i).await);
    }
    let r = put(&mut clients[1], "over", "tls").await;
    assert_eq!(get(&mut clients[2], "over", false).await, Some(("tls".into(), r)));
    assert_eq!(c.converged().await, r);
    // The peer port speaks only TLS: an HTTP/2 preface in plain text gets no HTTP/2 answer.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let peer = format!("127.0.0.1:{}", c.members[0].peer_port);
    let mut tcp = tokio::net::TcpStream::connect(&peer).await.unwrap();
    tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf)).await;
    let n = read.map(|r| r.unwrap_or(0)).unwrap_or(0);
    assert!(n == 0 || buf[0] == 0x15, "a plain-text peer connection was answered: {:?}", &buf[..n]);
}

/// A member joining a cluster of `kind` over peer TLS, whose running members take peer
/// certificates with the common name `mem_etcd` and speak TLS 1.2 at most, tries with its own
/// settings after another: the outcome of each. etcd's peer client is made from the same peer
/// TLS settings as its listener, so a joiner that allows only the common name `client` (the
/// running members' certificates say `mem_etcd`) or speaks only TLS 1.3 reaches no member and
/// gives up; with the running members' settings it joins. `None`: no etcd peer.
async fn join_with_peer_tls(kind: Kind) -> Option<Vec<String>> {
    let certs = crate::security::tls::Certs::new();
    let flags = [
        certs.arg("--peer-cert-file", "server.crt"),
        certs.arg("--peer-key-file", "server.key"),
        certs.arg("--peer-trusted-ca-file", "ca.crt"),
        "--peer-client-cert-auth".to_string(),
        "--peer-cert-allowed-cn=mem_etcd".to_string(),
        "--tls-max-version=TLS1.2".to_string(),
        "--wal-mode=buffered".to_string(),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut c = Cluster::start_on(kind, 3, &flags, "https").await?;
    let slot = c.add_slot();
    let cl = c.client(c.leader().await).await;
    // Both refuse an add until every member has been up a while ("unhealthy cluster").
    c.add_learner(&cl, slot, Duration::from_secs(20)).await;
    let mut outcomes = Vec::new();
    // A joiner that gives up at once (both; mem_etcd retried for 30 s before), saying why
    // (mem_etcd: the TLS error; etcd: "could not retrieve cluster information").
    for (what, own, cause) in [
        (
            "allows only CN client",
            &["--peer-cert-allowed-cn=client"][..],
            "client certificate authentication failed",
        ),
        (
            "speaks only TLS 1.3",
            &["--tls-min-version=TLS1.3", "--tls-max-version=TLS1.3"][..],
            "ProtocolVersion",
        ),
    ] {
        let mut args = c.join_args(slot);
        args.extend(own.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        c.members[slot].dir = DataDir::new();
        let ex = c.members[slot]
            .dir
            .start_kind_expecting_failure(kind, &args, Duration::from_secs(15))
            .await;
        if kind == Kind::MemEtcd {
            let said = ex.stderr.join("\n");
            assert!(said.contains(cause), "{what}: the reason is not given:\n{said}");
        }
        outcomes.push(format!("{what}: refused (exit success: {})", ex.status.success()));
    }
    c.members[slot].dir = DataDir::new();
    c.join(slot).await;
    let r = put(&mut c.client(0).await, "joined", "over tls").await;
    let on_new = c.client(slot).await;
    wait_until("the joiner to catch up", Duration::from_secs(20), || {
        let mut on_new = on_new.clone();
        async move { get(&mut on_new, "joined", true).await.map(|v| v.1) == Some(r) }
    })
    .await;
    outcomes.push("the running members' settings: joined".into());
    Some(outcomes)
}

/// etcd's peer TLS settings hold for the calls a member makes, not only for those it takes:
/// `--peer-cert-allowed-cn` asks it of the called member's certificate, and `--tls-min-version`
/// / `--tls-max-version` bound what it offers. Compared with etcd 3.6.
#[tokio::test]
async fn peer_tls_settings_apply_to_the_calls_a_member_makes_as_in_etcd() {
    let mem = join_with_peer_tls(Kind::MemEtcd).await.expect("mem_etcd cluster");
    assert_eq!(
        mem,
        [
            "allows only CN client: refused (exit success: false)",
            "speaks only TLS 1.3: refused (exit success: false)",
            "the running members' settings: joined",
        ]
    );
    match join_with_peer_tls(Kind::Etcd).await {
        Some(etcd) => assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ"),
        None => eprintln!("no etcd peer (allowed outside CI): mem_etcd's outcome checked alone"),
    }
}

#[tokio::test]
async fn without_a_leader_health_turns_red_and_leader_requiring_watches_end() {
    let mut c = cluster!(Kind::MemEtcd, 3, ["--wal-mode=none", "--election-timeout=500"]);
    let addr: std::net::SocketAddr =
        format!("127.0.0.1:{}", c.members[0].client_port).parse().unwrap();
    let health = crate::operations::http_get(addr, "/health").await;
    assert_eq!((health.status, health.body.as_str()), (200, r#"{"health":"true","reason":""}"#));
    let metrics = crate::operations::http_get(addr, "/metrics").await.body;
    for name in [
        "etcd_server_has_leader 1",
        "etcd_server_leader_changes_seen_total",
        "etcd_server_proposals_committed_total",
        "etcd_server_proposals_applied_total",
        "etcd_server_proposals_pending",
        "etcd_server_proposals_failed_total",
        "etcd_network_peer_sent_bytes_total{To=",
        "etcd_network_peer_received_bytes_total{From=",
        "etcd_network_peer_round_trip_time_seconds_bucket{To=",
    ] {
        assert!(metrics.contains(name), "{name} missing from /metrics:\n{metrics}");
    }
    // etcd's whole basic list once a write and a read were made (the labelled apply and range
    // histograms show only what was observed, as etcd's), and what a cluster adds to it; peer
    // traffic grows with writes.
    use crate::operations::{ETCD_BASIC_METRICS, has_family};
    assert_eq!(metrics.lines().filter(|l| l.starts_with("etcd_network_known_peers{")).count(), 3);
    // A leader sends the entry to each peer, a follower receives it (or forwards it first).
    let traffic = |page: &str| -> f64 {
        let peer =
            ["etcd_network_peer_sent_bytes_total{", "etcd_network_peer_received_bytes_total{"];
        let lines = page.lines().filter(|l| peer.iter().any(|p| l.starts_with(p)));
        lines.filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
    };
    let mut client = Client::connect([c.endpoint(0)], None).await.unwrap();
    client.put("peer-bytes", "x".repeat(4096), None).await.unwrap();
    client.get("peer-bytes", None).await.unwrap();
    let later = crate::operations::http_get(addr, "/metrics").await.body;
    assert!(traffic(&later) >= traffic(&metrics) + 4096.0, "{later}");
    let extra = ["etcd_network_active_peers", "etcd_network_peer_received_bytes_total"];
    for name in ETCD_BASIC_METRICS.iter().chain(&extra) {
        assert!(has_family(&later, name), "{name} missing from /metrics:\n{later}");
    }
    let active = "etcd_network_active_peers{";
    wait_until("both peers active", Duration::from_secs(10), || async {
        let page = crate::operations::http_get(addr, "/metrics").await.body;
        let up = page.lines().filter(|l| l.starts_with(active) && l.ends_with(" 1")).count();
        if up == 2 { Ok(()) } else { Err(format!("peers not active:\n{page}")) }
    })
    .await;
    // A watch that requires a leader, opened now, ends once the leader is gone.
    let opts = etcd_client::ConnectOptions::new().with_require_leader(true);
    let mut rl = Client::connect([c.endpoint(0)], Some(opts.clone())).await.unwrap();
    let mut w = rl.watch("k", None).await.unwrap();
    w.message().await.unwrap().unwrap();
    let _ = c.kill9(1);
    let _ = c.kill9(2);
    let ended = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            match w.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => return None,
                Err(e) => return Some(status_of(&e)),
            }
        }
    })
    .await
    .expect("the watch ends once the member has no leader");
    assert_eq!(ended, Some((tonic::Code::Unavailable, "etcdserver: no leader".into())));
    let health = crate::operations::http_get(addr, "/health").await;
    let red = (503, "{\"health\":\"false\",\"reason\":\"RAFT NO LEADER\"}\n");
    assert_eq!((health.status, health.body.as_str()), red);
    let ready = crate::operations::http_get(addr, "/readyz").await;
    assert_eq!(ready.status, 503, "{}", ready.body);
    let metrics = crate::operations::http_get(addr, "/metrics").await.body;
    assert!(metrics.contains("etcd_server_has_leader 0"), "{metrics}");
    // New leader-requiring watches are refused.
    let mut rl = Client::connect([c.endpoint(0)], Some(opts)).await.unwrap();
    let refused = match rl.watch("k", None).await {
        Err(e) => status_of(&e),
        Ok(mut w) => match w.message().await {
            Err(e) => status_of(&e),
            other => panic!("a leader-requiring watch without a leader: {other:?}"),
        },
    };
    assert_eq!(refused, (tonic::Code::Unavailable, "etcdserver: no leader".into()));
}

#[tokio::test]
async fn compaction_and_the_nospace_alarm_hold_on_every_member() {
    let c = cluster!(Kind::MemEtcd, 3, ["--wal-mode=none", "--quota-backend-bytes=2000000"]);
    let mut clients = Vec::new();
    for i in 0..3 {
        clients.push(c.client(i).await);
    }
    let first = put(&mut clients[0], "/c/k", "v1").await;
    let second = put(&mut clients[1], "/c/k", "v2").await;
    // Compacted through one member, compacted on all: an older revision is gone everywhere.
    clients[2].compact(second, None).await.unwrap();
    for (i, cl) in clients.iter_mut().enumerate() {
        let old = cl.get("/c/k", Some(GetOptions::new().with_revision(first))).await;
        let err = old.expect_err("a compacted revision");
        assert_eq!(
            status_of(&err),
            (
                tonic::Code::OutOfRange,
                "etcdserver: mvcc: required revision has been compacted".into()
            ),
            "m{i}"
        );
    }
    // Past the quota through one member: the alarm is the cluster's.
    let big = "x".repeat(100_000);
    let mut n = 0;
    let err = loop {
        n += 1;
        assert!(n < 100, "no NOSPACE under a 2 MB quota");
        if let Err(e) = clients[1].put(format!("/c/big{n}"), big.as_str(), None).await {
            break e;
        }
    };
    assert_eq!(
        status_of(&err),
        (tonic::Code::ResourceExhausted, "etcdserver: mvcc: database space exceeded".into())
    );
    for (i, cl) in clients.iter_mut().enumerate() {
        let alarms = cl
            .alarm(etcd_client::AlarmAction::Get, etcd_client::AlarmType::None, None)
            .await
            .unwrap();
        assert_eq!(alarms.alarms().len(), 1, "m{i} lists the alarm");
        let e = cl.put("/c/small", "1", None).await.expect_err("NOSPACE on every member");
        assert_eq!(status_of(&e).0, tonic::Code::ResourceExhausted, "m{i}");
        // Deletes go on.
        cl.delete(format!("/c/big{}", i + 1), None).await.unwrap();
    }
    // Space freed (deletes, then a compaction), and the alarm disarmed through another
    // member: writes go through everywhere again.
    let now = current_rev(&mut clients[0]).await;
    clients[0].compact(now, None).await.unwrap();
    let member = clients[0]
        .alarm(etcd_client::AlarmAction::Get, etcd_client::AlarmType::None, None)
        .await
        .unwrap()
        .alarms()[0]
        .member_id();
    let mut opts = etcd_client::AlarmOptions::new();
    opts.with_member(member);
    clients[2]
        .alarm(etcd_client::AlarmAction::Deactivate, etcd_client::AlarmType::Nospace, Some(opts))
        .await
        .unwrap();
    for cl in clients.iter_mut() {
        put(cl, "/c/after", "ok").await;
    }
    c.converged().await;
}

/// The InitialCorruptCheck feature gate (`--experimental-initial-corrupt-check`): a member
/// restarting on data that agrees with its peers' starts (after the check passed); one whose
/// data differs from its peers' at its own revision refuses to start, naming the mismatch, as
/// etcd's member does. The divergent data is made with the project's own tooling: a snapshot
/// of another server that took a different value at the same revision, restored (`mem_etcd
/// snapshot restore`) as that member.
#[tokio::test]
async fn a_restarted_member_whose_data_differs_from_its_peers_fails_the_initial_corrupt_check() {
    let mut c = Cluster::start(Kind::MemEtcd, 3, &["--wal-mode=buffered"]).await.expect("cluster");
    let mut cl = c.client(0).await;
    for (k, v) in [("a", "1"), ("b", "2"), ("c", "3")] {
        put(&mut cl, k, v).await;
    }
    c.converged().await;
    let id2 = format!("{:x}", c.member_id(2).await);
    let mut args = c.args(2, "new");
    args.push("--experimental-initial-corrupt-check".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    // The same data: the check runs and passes.
    c.members[2].server.take().unwrap().stop(Duration::from_secs(10)).await;
    let s = c.members[2].dir.start_kind(Kind::MemEtcd, &args).await;
    wait_until("the initial corruption check to pass", Duration::from_secs(5), || {
        let passed = s.grep_log("initial corruption checking passed; no corruption");
        std::future::ready(!passed.is_empty())
    })
    .await;
    assert!(s.grep_log("found different hash values").is_empty(), "{}", s.log_tail());
    c.members[2].server = Some(s);
    c.converged().await;
    c.members[2].server.take().unwrap().stop(Duration::from_secs(10)).await;

    // Member 2's data replaced by a store that took "b" = "X" at revision 3 (the cluster took
    // "b" = "2" there).
    let other = Server::start(Kind::MemEtcd, &[]).await.expect("mem_etcd");
    let mut oc = other.client().await;
    oc.put("a", "1", None).await.unwrap();
    oc.put("b", "X", None).await.unwrap();
    let file = c.members[2].dir.aside("divergent.db");
    save_snapshot(&other, &file).await;
    let token = args.iter().find(|a| a.starts_with("--initial-cluster-token=")).unwrap();
    std::fs::remove_dir_all(c.members[2].dir.path()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mem_etcd"))
        .args(["snapshot", "restore"])
        .arg(&file)
        .arg("--data-dir")
        .arg(c.members[2].dir.path())
        .args(["--name=m2", &format!("--initial-cluster={}", c.initial_cluster()), token])
        .output()
        .unwrap();
    assert!(out.status.success(), "restore: {}", String::from_utf8_lossy(&out.stderr));

    let ex = c.members[2].dir.start_expecting_failure(&args).await;
    assert!(!ex.status.success(), "{}", ex.output());
    let out = ex.output();
    assert!(out.contains("found different hash values from remote peer"), "{out}");
    assert!(out.contains(&format!("{id2} found data inconsistency with peers")), "{out}");
    // The others go on.
    let r = put(&mut cl, "after", "check").await;
    assert_eq!(get(&mut c.client(1).await, "after", false).await, Some(("check".into(), r)));
}

/// etcd's periodic corruption check (`--corrupt-check-time`): the leader compares every
/// member's hash with its own, and raises the CORRUPT alarm for a member whose store differs;
/// the alarm refuses writes (`etcdserver: corrupt cluster`) on every member while reads go on.
/// Healthy members under writes raise nothing. A member's store is made to differ with each
/// server's own tools: a cluster founded from snapshots (`snapshot restore`), two members from
/// one server's and the third from another's that took another value at the same revision; the
/// third starts once the other two have elected a leader. The same test runs against etcd.
///
/// `compaction`: the compaction check instead (the CompactHashCheck gate), which compares the
/// members' hashes at the last compaction revision.
async fn a_member_whose_store_differs_gets_the_corrupt_alarm(kind: Kind, compaction: bool) {
    let flags: &[&str] = if compaction {
        &["--feature-gates=CompactHashCheck=true", "--compact-hash-check-time=1s"]
    } else {
        &["--corrupt-check-time=1s"]
    };
    let Some(c) = Cluster::start(kind, 3, flags).await else {
        return;
    };
    let alarms = |raw: &mut Raw| {
        let mut maint = raw.maint.clone();
        async move {
            let a = pb::AlarmRequest {
                action: pb::alarm_request::AlarmAction::Get as i32,
                member_id: 0,
                alarm: pb::AlarmType::None as i32,
            };
            let r = maint.alarm(a).await.expect("alarm list").into_inner();
            r.alarms.iter().map(|a| (a.member_id, a.alarm)).collect::<Vec<_>>()
        }
    };
    // Healthy members, checked while writes go on (bounded: 60 puts over about 3 s).
    let l = c.leader().await;
    let (mut cl, mut raw) = (c.client(l).await, c.raw(l).await);
    for i in 0..60 {
        let rev = put(&mut cl, &format!("load/{i}"), "v").await;
        if compaction && i % 20 == 10 {
            cl.compact(rev, None).await.expect("compact");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let done = match compaction {
        true => "successfully checked hash on whole cluster",
        false => "finished peer corruption check",
    };
    let checks = c.members[l].server.as_ref().unwrap().grep_log(done);
    assert!(!checks.is_empty(), "the leader ran no check");
    assert_eq!(alarms(&mut raw).await, vec![], "a false alarm on healthy members");
    drop(c);

    // Two snapshots at revision 4 that differ in one value.
    let dir = DataDir::new();
    let mut files = Vec::new();
    for value in ["precious-value-0001", "tampered-value-0001"] {
        let one = Server::start(kind, &[]).await.expect("a server");
        let mut oc = one.client().await;
        for (k, v) in [("a", "1"), ("b", "2"), ("k", value)] {
            oc.put(k, v, None).await.unwrap();
        }
        let file = dir.aside(&format!("{value}.db"));
        save_snapshot(&one, &file).await;
        files.push(file);
    }
    let (good, bad) = (files[0].as_path(), files[1].as_path());
    let mut c = Cluster::from_snapshots(kind, &[good, good, bad], flags);
    c.restart_all(&[0, 1]).await;
    let l = c.leader().await;
    assert_ne!(l, 2);
    c.restart(2).await;
    let id = c.member_id(2).await;
    let (mut cl, mut raw) = (c.client(l).await, c.raw(l).await);
    if compaction {
        cl.compact(4, None).await.expect("compact");
    }

    // The next checks find it.
    let corrupt = pb::AlarmType::Corrupt as i32;
    let a = wait_until("a CORRUPT alarm", Duration::from_secs(15), || {
        let mut raw = raw.clone();
        async move { Some(alarms(&mut raw).await).filter(|a| !a.is_empty()) }
    })
    .await;
    assert_eq!(a, vec![(id, corrupt)], "the alarm names the member whose store differs");
    // Writes are refused on every member, reads go on.
    let err = raw
        .kv
        .put(pb::PutRequest { key: b"after".to_vec().into(), ..Default::default() })
        .await
        .expect_err("a write under the CORRUPT alarm");
    assert_eq!((err.code(), err.message()), (tonic::Code::DataLoss, "etcdserver: corrupt cluster"));
    let r = cl.get("a", None).await.expect("a read under the CORRUPT alarm");
    assert_eq!(r.kvs()[0].value(), b"1");
}

#[tokio::test]
async fn a_member_whose_store_differs_gets_the_corrupt_alarm_from_the_periodic_check() {
    a_member_whose_store_differs_gets_the_corrupt_alarm(Kind::MemEtcd, false).await;
}

#[tokio::test]
async fn etcd_raises_the_corrupt_alarm_for_a_member_whose_store_differs() {
    a_member_whose_store_differs_gets_the_corrupt_alarm(Kind::Etcd, false).await;
}

#[tokio::test]
async fn a_member_whose_store_differs_gets_the_corrupt_alarm_from_the_compaction_check() {
    a_member_whose_store_differs_gets_the_corrupt_alarm(Kind::MemEtcd, true).await;
}

#[tokio::test]
async fn etcd_raises_the_corrupt_alarm_at_a_compaction_for_a_member_whose_store_differs() {
    a_member_whose_store_differs_gets_the_corrupt_alarm(Kind::Etcd, true).await;
}

/// Saves a snapshot of `server` (Maintenance.Snapshot, as `etcdctl snapshot save`) to `file`.
async fn save_snapshot(server: &Server, file: &std::path::Path) {
    use tokio_stream::StreamExt;
    let mut raw = server.raw().await.unwrap();
    let mut stream = raw.maint.snapshot(pb::SnapshotRequest {}).await.unwrap().into_inner();
    let mut bytes = Vec::new();
    while let Some(m) = stream.next().await {
        bytes.extend_from_slice(&m.unwrap().blob);
    }
    std::fs::write(file, bytes).unwrap();
}
