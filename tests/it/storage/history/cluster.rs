//! The same traffic over a 3-member cluster: clients on one member each, watchers spread over
//! the members, while members are killed, partitioned and paused.

use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::checker::summary;
use super::model::{Op, Out, PREFIX, Req, State};
use super::server::FAULT_RUN;
use super::traffic::{
    CLIENTS, Conn, Habits, Incarnation, KEYS, WatcherPlan, client, send, watcher,
};
use super::verify::{Verdict, lease_summary, older_watcher, seeds_with, verify};
use crate::api::watch::b;
use crate::cluster::harness::Cluster;
use crate::support::*;

/// Members of the clusters the cluster runs start.
const MEMBERS: usize = 3;

/// A cluster run's clients pause longer between operations: a run lasts as long as its faults
/// (restarts, elections), and its history must stay a size the search checks in seconds.
const CLUSTER_THINK: Duration = Duration::from_millis(20);

/// Values padded to this size in cluster fault runs: three members apply every write, so less
/// than a server alone gets, with a watcher stalling all the same.
const CLUSTER_PAD: usize = 4 << 10;

/// A fault injected into a cluster while its traffic runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MemberFault {
    /// `kill -9` of the leader, restarted on its data 0.3-1.5 s later.
    KillLeader,
    /// `kill -9` of a follower, restarted on its data 0.3-1.5 s later.
    KillFollower,
    /// The leader cut off from the others (mem_etcd's peer failpoint) until they elected another
    /// and for 1.5-3 s in all, then healed.
    PartitionLeader,
    /// The leader paused (SIGSTOP) until the others elected another and for 1.5-3 s in all,
    /// then resumed.
    PauseLeader,
    /// A follower paused for 1.5-3 s, then resumed.
    PauseFollower,
}

/// What a cluster run injects.
#[derive(Clone, Copy, Debug)]
struct ClusterFaults {
    /// In this order, a few hundred milliseconds apart, each over before the next.
    faults: &'static [MemberFault],
    /// Bytes of padding per value.
    pad: usize,
    /// The traffic runs at least this long.
    at_least: Duration,
}

/// What [`inject_cluster`] did: each fault as text, with when it began and when it was over
/// (undone, and every member agreeing on a leader again).
type Injected = Vec<(String, Instant, Instant)>;

/// Injects `f.faults` into `c` while the traffic runs, announcing each member's restarts on its
/// `incarnations` channel, then lets the traffic go on a little and `stop`s it. Returns the
/// cluster, the senders (the watchers wait on them until they are done) and what was done.
async fn inject_cluster(
    mut c: Cluster,
    f: ClusterFaults,
    incarnations: Vec<tokio::sync::watch::Sender<Incarnation>>,
    stop: tokio::sync::watch::Sender<bool>,
    seed: u64,
) -> (Cluster, Vec<tokio::sync::watch::Sender<Incarnation>>, Injected) {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0xc105);
    let until = Instant::now() + f.at_least;
    let mut done = Vec::new();
    let mut injected = Vec::new();
    // Member ids, read while every member answers (a paused one answers nothing).
    let mut ids = Vec::new();
    for i in 0..MEMBERS {
        ids.push(c.member_id(i).await);
    }
    for &fault in f.faults {
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..800))).await;
        // No member is paused or cut off here: every one answers Status.
        let leader = c.leader().await;
        let follower = (leader + rng.random_range(1..MEMBERS)) % MEMBERS;
        let t = Instant::now();
        let how_long = Duration::from_millis(rng.random_range(1500..3000));
        match fault {
            MemberFault::KillLeader | MemberFault::KillFollower => {
                let (i, role) = match fault {
                    MemberFault::KillLeader => (leader, "leader"),
                    _ => (follower, "follower"),
                };
                incarnations[i].send_modify(|inc| inc.down = true);
                let _ = c.kill9(i);
                tokio::time::sleep(Duration::from_millis(rng.random_range(300..1500))).await;
                c.restart(i).await;
                incarnations[i].send_modify(|inc| {
                    inc.down = false;
                    inc.epoch += 1;
                });
                done.push(format!(
                    "kill -9 of the {role} m{i}, serving again {:.1?} later",
                    t.elapsed()
                ));
            }
            MemberFault::PartitionLeader => {
                assert_eq!(c.kind, Kind::MemEtcd, "only mem_etcd has the peer failpoint");
                c.partition(leader).await;
                let after = replaced(&c, leader, &ids).await;
                tokio::time::sleep(how_long.saturating_sub(t.elapsed())).await;
                c.heal().await;
                done.push(format!(
                    "the leader m{leader} cut off for {:.1?} (replaced after {after:.1?})",
                    t.elapsed()
                ));
            }
            MemberFault::PauseLeader => {
                c.signal(leader, "STOP");
                let after = replaced(&c, leader, &ids).await;
                tokio::time::sleep(how_long.saturating_sub(t.elapsed())).await;
                c.signal(leader, "CONT");
                done.push(format!(
                    "the leader m{leader} paused for {:.1?} (replaced after {after:.1?})",
                    t.elapsed()
                ));
            }
            MemberFault::PauseFollower => {
                c.signal(follower, "STOP");
                tokio::time::sleep(how_long).await;
                c.signal(follower, "CONT");
                done.push(format!("the follower m{follower} paused for {:.1?}", t.elapsed()));
            }
        }
        // Who leads once the fault is over (every member answers again).
        let after = c.leader().await;
        let what = done.pop().expect("a fault");
        injected.push((format!("{what} (then m{after} led)"), t, Instant::now()));
    }
    // Traffic after the last fault too: the cluster must take writes and serve reads that see
    // everything before.
    tokio::time::sleep(Duration::from_millis(300)).await;
    tokio::time::sleep_until(until.into()).await;
    stop.send_replace(true);
    (c, incarnations, injected)
}

/// Waits until the members other than `gone` (paused or cut off: it is not asked) have elected
/// another leader, at most 15 s (the majority must go on); returns how long that took.
async fn replaced(c: &Cluster, gone: usize, ids: &[u64]) -> Duration {
    let t = Instant::now();
    let what = format!("a leader but m{gone} ({:x}) among the others", ids[gone]);
    wait_until(&what, Duration::from_secs(15), || async {
        for j in (0..MEMBERS).filter(|&j| j != gone) {
            let Some(server) = c.members[j].server.as_ref() else { continue };
            let Ok(mut raw) = server.raw().await else { continue };
            let status = raw.maint.status(pb::StatusRequest {});
            if let Ok(Ok(st)) = tokio::time::timeout(Duration::from_millis(500), status).await
                && let st = st.into_inner()
                && st.leader != 0
                && st.leader != ids[gone]
            {
                return true;
            }
        }
        false
    })
    .await;
    t.elapsed()
}

/// One cluster run: a fresh cluster of `MEMBERS` members of the suite's target, `CLIENTS`
/// clients spread round robin over the members (each sticking to its member, half its Gets
/// serializable), seven watchers spread over them (from the start, resuming, and in fault runs
/// one that stalls) and one from an older revision; `faults` injected meanwhile; then every check,
/// each watcher's against its own member's streams.
/// `read_heavy`: the clients mostly read, linearizably (see [`super::traffic::Habits`]).
async fn cluster_run(seed: u64, faults: ClusterFaults, read_heavy: bool) -> String {
    let kind = target();
    // Periodic progress notifications as in the runs on one server; the WAL flag is mem_etcd's
    // (the harness gives etcd none of those).
    let flags = ["--watch-progress-notify-interval=100ms", "--wal-mode=buffered"];
    let Some(c) = Cluster::start(kind, MEMBERS, &flags).await else {
        return "skipped".into();
    };
    let faulty = !faults.faults.is_empty();
    let (senders, dials): (Vec<_>, Vec<_>) = (0..MEMBERS)
        .map(|i| {
            tokio::sync::watch::channel(Incarnation {
                epoch: 0,
                endpoint: c.endpoint(i),
                member: true,
                down: false,
            })
        })
        .unzip();
    let mut raw = c.raw(0).await;
    let r0 = raw
        .kv
        .range(pb::RangeRequest { key: b(PREFIX), ..Default::default() })
        .await
        .expect("initial range");
    drop(raw);
    let init =
        State { rev: r0.into_inner().header.expect("header").revision, ..Default::default() };
    let (end_tx, end_rx) = tokio::sync::watch::channel(0i64);
    let t0 = Instant::now();
    let plain = WatcherPlan { faults: faulty, ..Default::default() };
    let mut plans = vec![
        plain,
        WatcherPlan { resume_after: Some(5), ..plain },
        WatcherPlan { resume_after: Some(2), ..plain },
        plain,
        WatcherPlan { resume_after: Some(5), ..plain },
        WatcherPlan { resume_after: Some(2), ..plain },
    ];
    if faulty {
        plans.push(WatcherPlan { stall: Some(Duration::from_millis(1500)), ..plain });
    }
    let on = |n: usize| (n + seed as usize) % MEMBERS;
    let mut members = Vec::new();
    let mut watchers = Vec::new();
    for (n, plan) in plans.into_iter().enumerate() {
        members.push(on(n));
        let d = dials[on(n)].clone();
        watchers.push(tokio::spawn(watcher(d, t0, init.rev + 1, plan, end_rx.clone())));
    }
    members.push(on(1));
    let d = dials[on(1)].clone();
    watchers.push(older_watcher(d, faulty, seed, t0, init.rev, end_rx.clone()));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(!faulty);
    let injector = tokio::spawn(inject_cluster(c, faults, senders, stop_tx, seed));
    let mut tasks = Vec::new();
    for id in 0..CLIENTS {
        let conn = Conn::new(dials[id % MEMBERS].clone(), faulty).await;
        let think = if faulty { CLUSTER_THINK } else { Duration::ZERO };
        let habits = Habits { think, serializable: !read_heavy, lease_heavy: false, read_heavy };
        let stop = stop_rx.clone();
        tasks.push(tokio::spawn(client(id, conn, seed, t0, faults.pad, stop, habits)));
    }
    let mut ops = Vec::new();
    for t in tasks {
        ops.extend(t.await.expect("a client task panicked"));
    }
    let (c, _senders, done) = injector.await.expect("the fault injector panicked");
    // The final state, read (linearizably) on one member as one more operation of the
    // history; a member may still be settling after the last fault, so a failed read is tried
    // again.
    let m = seed as usize % MEMBERS;
    let mut raw = c.raw(m).await;
    let last = Req::List { start: PREFIX.as_bytes().to_vec(), rev: 0, limit: KEYS as i64 + 1 };
    let mut tries = 0;
    let (call, out, ret) = loop {
        let call = t0.elapsed().as_nanos() as u64;
        let out = send(&mut raw, &last, 0).await;
        let ret = t0.elapsed().as_nanos() as u64;
        match out {
            Some(out @ Out::Ok(_)) => break (call, out, ret),
            other => {
                tries += 1;
                assert!(tries < 20, "seed {seed}: the final list on m{m}: {other:?}");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    };
    let Out::Ok(r) = &out else { unreachable!() };
    let end = r.rev;
    ops.push(Op { client: CLIENTS, call, ret, req: last, out });
    end_tx.send(end).expect("the watchers listen");
    let mut logs = Vec::new();
    for w in watchers {
        logs.push(w.await.expect("a watcher panicked"));
    }
    // Availability: for each fault, the longest stretch from its start to its end in which
    // the cluster acknowledged no write.
    let at = |t: Instant| t.saturating_duration_since(t0);
    let acked: Vec<Duration> = ops
        .iter()
        .filter(|o| o.req.is_write() && matches!(o.out, Out::Ok(_)))
        .map(|o| Duration::from_nanos(o.ret))
        .collect();
    let done: Vec<String> = done
        .into_iter()
        .map(|(what, from, to)| {
            let outage = longest_unacknowledged(acked.iter().copied(), at(from), at(to));
            assert!(
                outage < CLUSTER_OUTAGE,
                "seed {seed}: no write acknowledged for {outage:?} during: {what}"
            );
            format!("{what}, no write acknowledged for at most {:.2} s", outage.as_secs_f64())
        })
        .collect();
    let serial = ops.iter().filter(|o| matches!(o.req, Req::SerialGet { .. })).count();
    let ch = raw.channel.clone();
    let Verdict { ops, unseen, expired, visited, .. } =
        verify(seed, ops, &init, &logs, end, faulty, ch).await;
    // Every member ends with the same revision and the same data.
    let converged = c.converged().await;
    assert!(converged >= end, "seed {seed}: the members converged at {converged}, before {end}");
    drop(c);
    let mut out = summary(&ops, &logs, visited);
    let per_member: Vec<usize> =
        (0..MEMBERS).map(|i| members.iter().filter(|&&m| m == i).count()).collect();
    out += &format!(
        "; {kind:?} x{MEMBERS}, watchers per member {per_member:?}, {serial} serializable gets"
    );
    out += &lease_summary(&ops, expired);
    if faulty {
        let bytes = faults.pad * ops.iter().filter(|o| o.req.is_write()).count();
        out += &format!(
            "; faults: {}; {unseen} writes of unknown outcome no watch saw; {} MiB of values sent",
            done.join(", "),
            bytes >> 20
        );
    }
    out
}

/// What no fault of a cluster run may leave without an acknowledged write: the fault runs'
/// faults last up to 3 s, a leader's death takes up to two election timeouts to notice and
/// replace, and a write caught in it is retried. etcd's request timeout (7 s), which a request
/// held by a call to a leader that is gone would wait, is above it.
const CLUSTER_OUTAGE: Duration = Duration::from_secs(6);

/// Runs of the cluster tests without faults.
const CLUSTER_RUNS: u64 = 3;
/// Runs of each cluster fault test.
const CLUSTER_FAULT_RUNS: u64 = 2;

/// Clients on every member, serializable reads among their linearizable ones, watches on every
/// member: against etcd too (`MEM_ETCD_TEST_TARGET=etcd`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_history_holds_without_faults() {
    let f = ClusterFaults { faults: &[], pad: 0, at_least: Duration::ZERO };
    seeds_with("cluster history", CLUSTER_RUNS, |seed| cluster_run(seed, f, false)).await;
}

/// Clients on every member mostly reading linearizably while others write: reads that arrive
/// together share one read index round, on the leader and on followers (one forwarded request
/// per round), and each must still see every write acknowledged before it began. Against etcd
/// too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_history_holds_when_reads_share_read_index_rounds() {
    let f = ClusterFaults { faults: &[], pad: 0, at_least: Duration::ZERO };
    seeds_with("cluster history read-heavy", CLUSTER_RUNS, |seed| cluster_run(seed, f, true)).await;
}

/// The leader, a follower, then the leader again killed with SIGKILL and restarted on their
/// (buffered) data: nothing acknowledged is lost, requests cut off count as unknown, and the
/// clients and watchers of each killed member go on with it once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_history_holds_while_members_are_killed() {
    let f = ClusterFaults {
        faults: &[MemberFault::KillLeader, MemberFault::KillFollower, MemberFault::KillLeader],
        pad: CLUSTER_PAD,
        at_least: FAULT_RUN,
    };
    seeds_with("cluster history kill9", CLUSTER_FAULT_RUNS, |seed| cluster_run(seed, f, false))
        .await;
}

/// The leader cut off by a partition (its serializable reads go stale, never backwards), then
/// the leader and a follower paused past an election timeout. etcd has no peer failpoint: its
/// runs pause only.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_history_holds_across_partitions_and_pauses() {
    use MemberFault::*;
    let faults: &'static [MemberFault] = if target() == Kind::Etcd {
        say(
            "\ncluster history: etcd has no peer failpoint, so its runs pause members but cut none off\n",
        );
        &[PauseLeader, PauseFollower]
    } else {
        &[PartitionLeader, PauseLeader, PauseFollower]
    };
    let f = ClusterFaults { faults, pad: CLUSTER_PAD, at_least: FAULT_RUN };
    seeds_with("cluster history partition+pause", CLUSTER_FAULT_RUNS, |seed| {
        cluster_run(seed, f, false)
    })
    .await;
}
