//! Membership changes and member health as etcd 3.6 has them, each run on a 3- or 4-member
//! cluster of mem_etcd and of real etcd with the same steps, and the outcomes compared: the
//! strict reconfiguration checks (`--strict-reconfig-check`), a removed member stopping (and
//! a removed leader replaced at once), a learner among a client's endpoints, a leader handing
//! over as it stops, and `/health` once a member cannot reach a quorum or the others cannot
//! reach it.

use std::time::{Duration, Instant};

use crate::cluster::harness::Cluster;
use crate::support::*;
use crate::tools::etcdctl::etcdctl;

/// Both kinds, mem_etcd first; the etcd cluster needs the peer binary (a missing one fails in
/// CI, see `peer_binary`).
async fn both<F, Fut>(run: F) -> (Vec<String>, Vec<String>)
where
    F: Fn(Kind) -> Fut,
    Fut: std::future::Future<Output = Option<Vec<String>>>,
{
    let mem = run(Kind::MemEtcd).await.expect("mem_etcd cluster");
    let etcd = match run(Kind::Etcd).await {
        Some(e) => e,
        None => {
            eprintln!("no etcd peer (allowed outside CI): mem_etcd's outcome checked alone");
            return (mem.clone(), mem);
        }
    };
    (mem, etcd)
}

/// An outcome as text: `ok`, or the gRPC code and message.
fn outcome<T>(r: &Result<T, etcd_client::Error>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => format!("{:?}: {}", status_of(e).0, status_of(e).1),
    }
}

/// The Raft term member `i` reports.
async fn term(c: &Cluster, i: usize) -> u64 {
    let mut raw = c.raw(i).await;
    raw.maint.status(pb::StatusRequest {}).await.unwrap().into_inner().raft_term
}

/// Waits (at most `max`) for member `i`'s process to end by itself; its exit code.
async fn exit_of(c: &mut Cluster, i: usize, max: Duration) -> Option<i32> {
    ended(c, i, max).await.map(|e| e.status.code()).unwrap_or(None)
}

/// Waits (at most `max`) for member `i`'s process to end by itself; how it ended.
async fn ended(c: &mut Cluster, i: usize, max: Duration) -> Option<Exited> {
    let start = Instant::now();
    while start.elapsed() < max {
        let s = c.members[i].server.take().expect("running");
        match s.ended() {
            Ok(exited) => return Some(exited),
            Err(s) => c.members[i].server = Some(s),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// How long a removed member may take to stop once `member remove` answered: etcd's stops a
/// second after applying its removal (or at once when a peer refuses it as removed), then
/// closes its listeners.
const REMOVED_STOPS_WITHIN: Duration = Duration::from_secs(4);

async fn shrink(kind: Kind) -> Option<Vec<String>> {
    let mut c = Cluster::start(kind, 3, &[]).await?;
    c.healthy().await;
    let mut log = Vec::new();
    for step in 0..2 {
        let leader = c.leader().await;
        let mut cl = c.client(leader).await;
        let gone = c.running().into_iter().find(|i| *i != leader).unwrap();
        let id = c.member_id(gone).await;
        let r = cl.member_remove(id).await;
        log.push(format!("remove #{step}: {}", outcome(&r)));
        if r.is_ok() {
            // etcd's removed member stops by itself, promptly, says why and exits 0.
            let removed_at = Instant::now();
            let exited = ended(&mut c, gone, Duration::from_secs(20)).await;
            let took = removed_at.elapsed();
            log.push(format!(
                "the removed member exited: {:?}",
                exited.as_ref().map(|e| e.status.code())
            ));
            log.push(format!("within {REMOVED_STOPS_WITHIN:?}: {}", took < REMOVED_STOPS_WITHIN));
            eprintln!("{kind:?}: the removed member stopped {took:?} after member remove answered");
            match exited {
                Some(e) => {
                    let why = e.grep(r#""msg":"server error""#);
                    log.push(format!(
                        "logged why: {}",
                        why.iter().any(|l| l.contains(
                            r#""error":"the member has been permanently removed from the cluster""#
                        ))
                    ));
                    let data_dir =
                        e.grep(r#""msg":"data-dir used by this member must be removed""#);
                    log.push(format!("logged the data-dir warning: {}", !data_dir.is_empty()));
                }
                None => {
                    let _ = c.kill9(gone);
                }
            }
        }
    }
    let leader = c.leader().await;
    let mut cl = c.client(leader).await;
    log.push(format!("put on the last member: {}", outcome(&cl.put("k", "v", None).await)));
    let list = cl.member_list().await.unwrap();
    log.push(format!("members left: {}", list.members().len()));
    Some(log)
}

/// Shrinking 3 members to 1, one `member remove` at a time: each is allowed, and each removed
/// member stops.
#[tokio::test]
async fn three_members_shrink_to_one_by_removes_and_the_removed_stop_as_etcds_do() {
    let (mem, etcd) = both(shrink).await;
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
    assert!(mem.iter().filter(|l| l.ends_with(": ok")).count() >= 3, "{mem:?}");
}

/// `call`'s outcome, or a deadline error after 20 s (etcd_client calls have no deadline).
async fn within<T>(
    call: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, etcd_client::Error> {
    tokio::time::timeout(Duration::from_secs(20), call).await.unwrap_or_else(|_| {
        Err(etcd_client::Error::GRpcStatus(tonic::Status::deadline_exceeded("no answer in 20 s")))
    })
}

/// `call` made (each time [`within`] its deadline) until it succeeds or `max` has passed; its
/// last outcome.
async fn until_ok<T, F, Fut>(max: Duration, mut call: F) -> Result<T, etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    let start = Instant::now();
    loop {
        let r = within(call()).await;
        if r.is_ok() || start.elapsed() > max {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn replace_leader_with_learner(kind: Kind) -> Option<Vec<String>> {
    let mut c = Cluster::start(kind, 3, &[]).await?;
    c.healthy().await;
    let leader = c.leader().await;
    let others: Vec<usize> = c.running().into_iter().filter(|i| *i != leader).collect();
    let mut cl = etcd_client::Client::connect(
        others.iter().map(|i| c.endpoint(*i)).collect::<Vec<_>>(),
        None,
    )
    .await
    .unwrap();
    let mut log = Vec::new();
    let id = c.member_id(leader).await;
    let removed = within(cl.member_remove(id)).await;
    log.push(format!("remove the leader: {}", outcome(&removed)));
    let code = exit_of(&mut c, leader, Duration::from_secs(20)).await;
    log.push(format!("the removed leader exited: {code:?}"));
    if code.is_none() {
        let _ = c.kill9(leader);
    }
    // As soon as the others have a new leader (etcd's drops a MemberAdd proposed before, which
    // then times out), as etcd's TestMemberReplaceWithLearner does: the new leader has been
    // connected to the other member since long before its election, so the cluster is healthy.
    c.leader().await;
    let slot = c.add_slot();
    let peer = c.peer_url(slot);
    let opts = etcd_client::MemberAddOptions::new().with_is_learner();
    let added = within(cl.member_add([peer.as_str()], Some(opts))).await;
    log.push(format!("a learner added at once: {}", outcome(&added)));
    let Ok(added) = added else { return Some(log) };
    let new_id = added.member().unwrap().id();
    c.join(slot).await;
    // Promoted once in sync (bounded: etcd's test allows 20 s in all).
    let promoted = until_ok(Duration::from_secs(15), || {
        let mut cl = cl.clone();
        async move { cl.member_promote(new_id).await }
    })
    .await;
    log.push(format!("promoted: {}", outcome(&promoted)));
    Some(log)
}

/// etcd's TestMemberReplaceWithLearner with the leader as the member replaced: removed, it
/// stops; a learner added as soon as the others elected a leader is accepted (every member
/// knows since when each other member has been reachable, whatever its role), and promoted
/// once it caught up.
#[tokio::test]
async fn the_removed_leader_is_replaced_by_a_learner_at_once_as_with_etcd() {
    let (mem, etcd) = both(replace_leader_with_learner).await;
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
    assert_eq!(
        mem,
        [
            "remove the leader: ok",
            "the removed leader exited: Some(0)",
            "a learner added at once: ok",
            "promoted: ok"
        ]
    );
}

async fn learner_with_one_down(kind: Kind) -> Option<Vec<String>> {
    let mut c = Cluster::start(kind, 4, &[]).await?;
    c.healthy().await;
    let leader = c.leader().await;
    let down = (leader + 1) % 4;
    let _ = c.kill9(down);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut cl = c.client(leader).await;
    let slot = c.add_slot();
    let peer = c.peer_url(slot);
    let opts = etcd_client::MemberAddOptions::new().with_is_learner();
    let r = cl.member_add([peer.as_str()], Some(opts)).await;
    Some(vec![format!("learner added with one of 4 down: {}", outcome(&r))])
}

/// etcd adds a learner while one of 4 members is down: this member is connected to a quorum
/// of the larger cluster (3 of 5).
#[tokio::test]
async fn a_learner_is_added_while_one_of_four_members_is_down_as_with_etcd() {
    let (mem, etcd) = both(learner_with_one_down).await;
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
    assert_eq!(mem, ["learner added with one of 4 down: ok"]);
}

async fn add_at_once(kind: Kind, strict: bool) -> Option<Vec<String>> {
    let flags: &[&str] = if strict { &[] } else { &["--strict-reconfig-check=false"] };
    let mut c = Cluster::start(kind, 3, flags).await?;
    let leader = c.leader().await;
    let _ = c.kill9((leader + 1) % 3);
    let mut cl = c.client(leader).await;
    let slot = c.add_slot();
    let peer = c.peer_url(slot);
    let opts = etcd_client::MemberAddOptions::new().with_is_learner();
    let r = cl.member_add([peer.as_str()], Some(opts)).await;
    Some(vec![format!("strict {strict}: learner added with one of 3 down: {}", outcome(&r))])
}

/// With one of 3 members down the leader is not connected to a quorum of 4: etcd refuses to
/// add even a learner ("unhealthy cluster"), unless `--strict-reconfig-check=false`.
#[tokio::test]
async fn strict_reconfig_check_false_turns_the_checks_off_as_in_etcd() {
    let (mem, etcd) = both(|k| add_at_once(k, true)).await;
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
    assert_eq!(
        mem,
        [
            "strict true: learner added with one of 3 down: Unavailable: etcdserver: unhealthy cluster"
        ]
    );
    let (mem, etcd) = both(|k| add_at_once(k, false)).await;
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
    assert_eq!(mem, ["strict false: learner added with one of 3 down: ok"]);
}

async fn put_via_learner(kind: Kind) -> Option<Vec<String>> {
    let ctl = peer_binary("etcdctl")?;
    let mut c = Cluster::start(kind, 3, &[]).await?;
    let leader = c.leader().await;
    let cl = c.client(leader).await;
    let slot = c.add_slot();
    c.add_learner(&cl, slot, Duration::from_secs(20)).await;
    c.join(slot).await;
    let mut log = Vec::new();
    // The learner first: the Go client tries it, is refused, and retries on the voter.
    let endpoints = format!("{},{}", c.endpoint(slot), c.endpoint(leader));
    for i in 0..4 {
        let (code, out, err) = etcdctl(&ctl, &endpoints, &["put", &format!("k{i}"), "v"], None);
        // stderr: the Go client logs the learner's refusal it retried (etcd's own warning).
        log.push(format!("put k{i} -> {code:?} {}", out.trim()));
        assert!(!err.contains("Error"), "{kind:?}: put k{i}: {err}");
    }
    // Asked alone, the learner refuses with etcd's status.
    let mut on_learner = c.client(slot).await;
    log.push(format!("put on the learner: {}", outcome(&on_learner.put("k", "v", None).await)));
    Some(log)
}

/// A put through endpoints that list a learner first succeeds: the learner refuses it with
/// etcd's status (FailedPrecondition, "rpc not supported for learner"), which etcd's Go
/// client retries on the next endpoint.
#[tokio::test]
async fn a_put_through_endpoints_that_include_a_learner_succeeds_as_with_etcd() {
    let (mem, etcd) = both(put_via_learner).await;
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
    assert!(mem[..4].iter().all(|l| l.ends_with("Some(0) OK")), "{mem:?}");
    assert_eq!(
        mem[4],
        "put on the learner: FailedPrecondition: etcdserver: rpc not supported for learner"
    );
}

async fn graceful_leader_stop(kind: Kind) -> Option<Vec<String>> {
    let mut c = Cluster::start(kind, 3, &[]).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let leader = c.leader().await;
    let before = term(&c, leader).await;
    // Exits by itself within 20 s (etcd's re-raises SIGTERM once stopped; mem_etcd exits 0).
    c.members[leader].server.take().unwrap().stop(Duration::from_secs(20)).await;
    let next = c.leader().await;
    let after = term(&c, next).await;
    Some(vec![format!("the others' term went up by {}", after - before)])
}

/// A leader stopped with SIGTERM hands its leadership over first: the others go on one term
/// later, not after an election (which may take more).
#[tokio::test]
async fn a_leader_stopped_gracefully_hands_over_as_etcds_does() {
    let (mem, etcd) = both(graceful_leader_stop).await;
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
    assert_eq!(mem, ["the others' term went up by 1"]);
}

async fn health_without_quorum(kind: Kind) -> Option<Vec<String>> {
    let c = Cluster::start(kind, 3, &[]).await?;
    let addr: std::net::SocketAddr =
        format!("127.0.0.1:{}", c.members[0].client_port).parse().unwrap();
    let mut log = Vec::new();
    let h = crate::operations::http_get(addr, "/health").await;
    log.push(format!("{} {}", h.status, h.body.trim()));
    // Members 1 and 2 paused: member 0, leader or not, hears from no quorum, no leader.
    c.signal(1, "STOP");
    c.signal(2, "STOP");
    let start = Instant::now();
    let mut red = None;
    // etcd's follower turns red only when its health read times out (7 s); room for a loaded
    // machine on top.
    while start.elapsed() < Duration::from_secs(25) {
        let h = crate::operations::http_get(addr, "/health").await;
        if h.status != 200 {
            red = Some((h, start.elapsed()));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ready = crate::operations::http_get(addr, "/readyz").await.status;
    c.signal(1, "CONT");
    c.signal(2, "CONT");
    let (h, took) = red.expect("/health stays 200 without a quorum");
    // etcd's bodies: a member that knows it has no leader says so; etcd's follower keeps its
    // leader while it pre-votes in vain, and fails only when the health check's read times out
    // (after 7 s), naming the read's deadline or etcd's own request timeout, whichever fires
    // first. mem_etcd's says so once it has not heard from its leader (or a leader from a
    // quorum) for the election timeout.
    let bodies = [
        "{\"health\":\"false\",\"reason\":\"RAFT NO LEADER\"}",
        "{\"health\":\"false\",\"reason\":\"RANGE ERROR:context deadline exceeded\"}",
        "{\"health\":\"false\",\"reason\":\"RANGE ERROR:etcdserver: request timed out\"}",
    ];
    assert!(bodies.contains(&h.body.trim()), "{kind:?}: /health: {}", h.body);
    log.push(h.status.to_string());
    log.push(format!("/readyz {ready}"));
    eprintln!("{kind:?}: /health turned red after {took:?}: {log:?}");
    if kind == Kind::MemEtcd {
        // About the election timeout (1 s) and a heartbeat; the bound only says it did not wait
        // for a read to time out as etcd's follower does (7 s), with slack for a loaded machine.
        assert!(took < Duration::from_secs(6), "/health turned red after {took:?}");
    }
    Some(log)
}

/// `/health` and `/readyz` fail (503, with one of etcd's bodies) once a member cannot reach a
/// quorum; mem_etcd's within about the election timeout.
#[tokio::test]
async fn health_fails_without_a_quorum_as_etcds_does() {
    let (mem, etcd) = both(health_without_quorum).await;
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
}

/// `GET path` on `addr`: the status code, or `no answer` after 5 s (etcd's health read may
/// hang that long).
async fn status_of_get(addr: std::net::SocketAddr, path: &str) -> String {
    status_of_get_within(addr, path, Duration::from_secs(5)).await
}

/// [`status_of_get`] with `no answer` after `within`.
async fn status_of_get_within(addr: std::net::SocketAddr, path: &str, within: Duration) -> String {
    let get = crate::operations::http_get(addr, path);
    match tokio::time::timeout(within, get).await {
        Ok(a) => a.status.to_string(),
        Err(_) => "no answer".into(),
    }
}

async fn incoming_blocked(kind: Kind, leader: bool) -> Option<Vec<String>> {
    // Member 0's peer URL is a proxy, as in etcd's e2e tests (`WithPeerProxy`).
    let c = Cluster::start_with_peer_proxies(kind, 3, &[0]).await?;
    let want = if leader { 0 } else { 1 };
    let start = Instant::now();
    loop {
        let now = c.leader().await;
        if now == want {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{kind:?}: no move to member {want}");
        let id = c.member_id(want).await;
        let _ = within(c.client(now).await.move_leader(id)).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut log = vec![format!("member 0 leads: {leader}")];
    // Nothing reaches member 0's peer port any more, nor leaves it (etcd's blackhole); its own
    // calls to the others are not blocked.
    c.proxy(0).blackhole();
    let addr: std::net::SocketAddr =
        format!("127.0.0.1:{}", c.members[0].client_port).parse().unwrap();
    // At once, as etcd's e2e test asks (with its 2 s client timeout): the cut member's
    // linearizable checks do not pass, although its own calls still reach the others.
    let within = Duration::from_secs(2);
    let paths = ["/health?serializable=false", "/readyz"];
    let firsts =
        futures::future::join_all(paths.map(|p| status_of_get_within(addr, p, within))).await;
    for (path, first) in paths.iter().zip(firsts) {
        let first =
            if first == "503" || first == "no answer" { "503 or no answer" } else { &first };
        log.push(format!("{path} at once: {first}"));
    }
    let start = Instant::now();
    let mut health = "200".to_string();
    while start.elapsed() < Duration::from_secs(20) && health == "200" {
        health = status_of_get(addr, "/health").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("{kind:?}: /health on the blocked member: {health} after {:?}", start.elapsed());
    let red = if health == "200" { "200 for 20 s" } else { "503 or no answer" };
    log.push(format!("the blocked member's /health: {red}"));
    log.push(format!(
        "its /health?serializable=true: {}",
        status_of_get(addr, "/health?serializable=true").await
    ));
    // The others go on: they elect a leader among themselves if need be.
    let others = etcd_client::Client::connect([c.endpoint(1), c.endpoint(2)], None).await.unwrap();
    let put = until_ok(Duration::from_secs(20), || {
        let mut others = others.clone();
        async move { others.put("after", "v", None).await }
    })
    .await;
    log.push(format!("a put through the others: {}", outcome(&put)));
    Some(log)
}

/// etcd's e2e `network partitioned` health case: a member whose peer port is blackholed (its
/// peers' traffic to it, and its answers, dropped; its own calls to them not) is cut off: its
/// `/health` and `/readyz` fail at once (503, or no answer within the e2e test's 2 s) while
/// `?serializable=true` stays 200, and the others go
/// on, whether it was a follower or the leader (mem_etcd's leader stops sending to peers it no
/// longer hears from, so the others elect a leader they can reach).
#[tokio::test]
async fn a_member_whose_incoming_peer_traffic_is_blocked_is_cut_off_as_etcds_is() {
    for leader in [false, true] {
        let (mem, etcd) = both(|k| incoming_blocked(k, leader)).await;
        assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
        assert_eq!(
            mem[1..],
            [
                "/health?serializable=false at once: 503 or no answer",
                "/readyz at once: 503 or no answer",
                "the blocked member's /health: 503 or no answer",
                "its /health?serializable=true: 200",
                "a put through the others: ok"
            ]
        );
    }
}

async fn voter_added_to_one(kind: Kind) -> Option<Vec<String>> {
    let mut c = Cluster::start(kind, 1, &[]).await?;
    let mut cl = c.client(0).await;
    let mut log = Vec::new();
    log.push(format!("put alone: {}", outcome(&cl.put("k", "1", None).await)));
    let slot = c.add_slot();
    let peer = c.peer_url(slot);
    let start = Instant::now();
    let add = tokio::time::timeout(Duration::from_secs(30), cl.member_add([peer.as_str()], None));
    let added = add.await.unwrap_or_else(|_| panic!("{kind:?}: the add is still waiting"));
    let took = start.elapsed();
    log.push(format!("add a voter that has not started: {}", outcome(&added)));
    let added = added.unwrap();
    // etcd answers as soon as the one member it had commits the change (a few ms);
    // mem_etcd once that member holds it. Either way well before a request times out.
    assert!(took < Duration::from_secs(3), "{kind:?}: the add took {took:?}");
    let new = added.member().unwrap();
    log.push(format!(
        "members: {}; the new one: started={} learner={}",
        added.member_list().len(),
        !new.name().is_empty(),
        new.is_learner()
    ));
    // Two voters, one of them not started: nothing commits (whatever the error is).
    let mut short = c.client(0).await;
    let put = tokio::time::timeout(Duration::from_secs(10), short.put("k", "2", None)).await;
    log.push(format!("put without the new voter failed: {}", !matches!(put, Ok(Ok(_)))));
    c.join(slot).await;
    // Once it has started, writes go on (the leader may first have to be elected).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    while Instant::now() < deadline {
        let mut cl = c.client(0).await;
        match cl.put("k", "3", None).await {
            Ok(_) => {
                last = "ok".into();
                break;
            }
            Err(e) => last = format!("{e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    log.push(format!("put once it started: {last}"));
    let mut on_new = c.client(slot).await;
    let got = on_new.get("k", None).await.unwrap();
    log.push(format!("the new member reads k = {:?}", got.kvs()[0].value_str().unwrap()));
    Some(log)
}

/// A voter added to a cluster of one is answered at once, as etcd answers it (the change
/// commits by the one member there was), not once the new member has started; the cluster
/// then waits for it, and goes on when it starts. It used to wait, with no deadline, for a
/// member that might never start.
#[tokio::test]
async fn a_voter_added_to_a_cluster_of_one_is_answered_at_once_as_etcd_answers() {
    let (mem, etcd) = both(voter_added_to_one).await;
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
    assert_eq!(mem[1], "add a voter that has not started: ok");
    assert_eq!(mem.last().unwrap(), "the new member reads k = \"3\"");
}

async fn change_without_quorum(kind: Kind) -> Option<Vec<String>> {
    let c = Cluster::start(kind, 3, &[]).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let leader = c.leader().await;
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let target = c.member_id(others[0]).await;
    let mut cl = c.client(leader).await;
    for i in &others {
        c.signal(*i, "STOP");
    }
    // No quorum: the change cannot commit. etcd waits for the client's deadline (its
    // membership changes have no deadline of their own); mem_etcd answers "request timed
    // out" after its request timeout (7 s), as etcd answers other proposals, so that a client
    // without a deadline does not hold a handler forever. A client with a deadline (etcdctl's
    // is 5 s) sees the same on both.
    let start = Instant::now();
    let urls = vec!["http://127.0.0.1:1".to_string()];
    let update = tokio::time::timeout(Duration::from_secs(10), cl.member_update(target, urls));
    let r = update.await;
    let took = start.elapsed();
    for i in &others {
        c.signal(*i, "CONT");
    }
    let r = match r {
        Ok(r) => outcome(&r),
        Err(_) => "the client's deadline (10 s)".into(),
    };
    eprintln!("{kind:?}: member update without a quorum: {r} after {took:?}");
    if kind == Kind::MemEtcd {
        assert_eq!(r, "Unavailable: etcdserver: request timed out");
    }
    Some(vec![format!("member update without a quorum fails: {}", r != "ok")])
}

/// A membership change that cannot commit fails: by the client's deadline on etcd, by the
/// request timeout on mem_etcd, which used to wait forever.
#[tokio::test]
async fn a_membership_change_without_a_quorum_times_out_as_etcds_does() {
    let (mem, etcd) = both(change_without_quorum).await;
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
    assert_eq!(mem, ["member update without a quorum fails: true"]);
}

/// A client of member `i` authenticated as `user` (password `<user>pw`).
async fn client_as(c: &Cluster, i: usize, user: &str) -> etcd_client::Client {
    let opts = etcd_client::ConnectOptions::new().with_user(user, format!("{user}pw"));
    etcd_client::Client::connect([c.endpoint(i)], Some(opts)).await.unwrap()
}

/// Member 0's list: each member's peer URLs (`started-with` for the one member 0 was started
/// with) and whether its client URLs are member 0's own (ports differ between the two kinds).
async fn listed(c: &Cluster, cl: &mut etcd_client::Client) -> String {
    let list = cl.member_list().await.unwrap();
    let own = c.endpoint(0);
    let started_with = c.peer_url(0);
    let peers = |m: &etcd_client::Member| {
        let urls = m.peer_urls().iter();
        urls.map(|u| if *u == started_with { "started-with".to_string() } else { u.clone() })
            .collect::<Vec<_>>()
    };
    let v: Vec<String> = list
        .members()
        .iter()
        .map(|m| {
            format!(
                "peers={:?} name={} clients_own={} learner={}",
                peers(m),
                m.name(),
                m.client_urls() == [own.clone()],
                m.is_learner()
            )
        })
        .collect();
    v.join("; ")
}

/// The peer URLs member 0 is given by `member update` (nothing dials them: the member is
/// alone).
const UPDATED_PEER: &str = "http://localhost:20011";

async fn changes_alone(kind: Kind) -> Option<Vec<String>> {
    let mut c = Cluster::start(kind, 1, &[]).await?;
    let mut cl = c.client(0).await;
    let me = c.member_id(0).await;
    let other = 0x1234_5678;
    let mut log = vec![format!("alone: {}", listed(&c, &mut cl).await)];
    // Only root changes membership: checked first, for its own id too.
    cl.user_add("root", "rootpw", None).await.unwrap();
    cl.user_grant_role("root", "root").await.unwrap();
    cl.user_add("bob", "bobpw", None).await.unwrap();
    cl.auth_enable().await.unwrap();
    let mut bob = client_as(&c, 0, "bob").await;
    let urls = || vec![UPDATED_PEER.to_string()];
    log.push(format!("bob updates itself: {}", outcome(&bob.member_update(me, urls()).await)));
    log.push(format!("bob removes itself: {}", outcome(&bob.member_remove(me).await)));
    log.push(format!("bob promotes itself: {}", outcome(&bob.member_promote(me).await)));
    let mut root = client_as(&c, 0, "root").await;
    log.push(format!("remove itself: {}", outcome(&root.member_remove(me).await)));
    log.push(format!("promote itself: {}", outcome(&root.member_promote(me).await)));
    log.push(format!("update another: {}", outcome(&root.member_update(other, urls()).await)));
    log.push(format!("remove another: {}", outcome(&root.member_remove(other).await)));
    log.push(format!("promote another: {}", outcome(&root.member_promote(other).await)));
    log.push(format!("still alone: {}", listed(&c, &mut root).await));
    let updated = root.member_update(me, urls()).await;
    log.push(format!("update itself: {}", outcome(&updated)));
    let answered: Vec<Vec<String>> =
        updated.unwrap().members().iter().map(|m| m.peer_urls().to_vec()).collect();
    log.push(format!("the update's answer lists: {answered:?}"));
    log.push(format!("after the update: {}", listed(&c, &mut root).await));
    log.push(format!("put: {}", outcome(&root.put("k", "v", None).await)));
    // The same refusals once updated (on mem_etcd: a grown cluster of one, through Raft).
    log.push(format!("remove itself: {}", outcome(&root.member_remove(me).await)));
    log.push(format!("promote itself: {}", outcome(&root.member_promote(me).await)));
    log.push(format!("update another: {}", outcome(&root.member_update(other, urls()).await)));
    // The new URLs are kept across a restart.
    drop((bob, root, cl));
    let _ = c.kill9(0);
    c.restart(0).await;
    let mut root = client_as(&c, 0, "root").await;
    log.push(format!("restarted: {}", listed(&c, &mut root).await));
    // Once it leads again (Status, which `Cluster::leader` asks, is root's only under auth).
    let deadline = Instant::now() + Duration::from_secs(10);
    let put = loop {
        let r = root.put("k", "v2", None).await;
        if r.is_ok() || Instant::now() > deadline {
            break outcome(&r);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    log.push(format!("put: {put}"));
    Some(log)
}

/// On a member alone (mem_etcd's single member without Raft), member update of its own id
/// succeeds and is listed (and kept across a restart), its removal is refused as etcd's
/// cluster of one refuses it ("not enough started members", code Unknown as etcd answers it),
/// promoting it is refused (a voter), a member that is not there is "member not found", and
/// only root may ask: all as etcd 3.6 answers. These answered "not capable".
#[tokio::test]
async fn a_member_alone_updates_removes_and_promotes_as_etcds_cluster_of_one() {
    let (mem, etcd) = both(changes_alone).await;
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
    let at = |p: &str| mem.iter().find(|l| l.starts_with(p)).unwrap().clone();
    assert_eq!(
        at("bob updates itself"),
        "bob updates itself: PermissionDenied: etcdserver: permission denied"
    );
    assert_eq!(
        at("remove itself"),
        "remove itself: Unknown: etcdserver: re-configuration failed due to not enough started \
         members"
    );
    assert_eq!(
        at("promote itself"),
        "promote itself: FailedPrecondition: etcdserver: can only promote a learner member"
    );
    assert_eq!(at("update another"), "update another: NotFound: etcdserver: member not found");
    assert_eq!(
        at("still alone"),
        "still alone: peers=[\"started-with\"] name=m0 clients_own=true learner=false"
    );
    assert_eq!(at("update itself"), "update itself: ok");
    let moved = format!("peers=[{UPDATED_PEER:?}] name=m0 clients_own=true learner=false");
    assert_eq!(at("after the update"), format!("after the update: {moved}"));
    assert_eq!(at("restarted"), format!("restarted: {moved}"));
}

/// With `--strict-reconfig-check=false` etcd removes its last member and panics ("removed all
/// voters"), at every start after that too; mem_etcd refuses it as the check does, alone or
/// grown into a cluster of one, and goes on serving. (mem_etcd only: etcd's answer is a crash.)
#[tokio::test]
async fn the_last_member_is_not_removed_without_the_strict_reconfig_check() {
    let c = Cluster::start(Kind::MemEtcd, 1, &["--strict-reconfig-check=false"]).await.unwrap();
    let mut cl = c.client(0).await;
    let me = c.member_id(0).await;
    let refused = "Unknown: etcdserver: re-configuration failed due to not enough started members";
    assert_eq!(outcome(&cl.member_remove(me).await), refused, "alone");
    cl.member_update(me, vec![UPDATED_PEER.to_string()]).await.expect("update: grows");
    assert_eq!(outcome(&cl.member_remove(me).await), refused, "a cluster of one");
    cl.put("k", "v", None).await.expect("still serving");
    assert_eq!(cl.member_list().await.unwrap().members().len(), 1);
}

/// Every member's (id, name, peer URLs), sorted, as member `i` lists them.
async fn members_as_listed(c: &Cluster, i: usize) -> Vec<(u64, String, Vec<String>)> {
    let mut raw = c.raw(i).await;
    let list = raw.cluster.member_list(pb::MemberListRequest { linearizable: true }).await;
    let mut out: Vec<_> = list
        .unwrap_or_else(|e| panic!("{:?} member list: {e}", c.kind))
        .into_inner()
        .members
        .into_iter()
        .map(|m| (m.id, m.name, m.peer_ur_ls))
        .collect();
    out.sort();
    out
}

/// etcd's e2e clusters with `WithBasePeerScheme("unix")` (TestCtlV3... with unix peers,
/// TestEtcdUnixPeers): members reach each other over unix sockets named by their peer URLs
/// (`unix://localhost:PORT`: the socket `localhost:PORT` in the working directory). The same
/// 3-member cluster of etcd, then of mem_etcd on the same flags: mem_etcd's members replicate
/// over the sockets and list the same member ids as etcd's.
#[tokio::test]
async fn unix_socket_peer_urls_as_etcd() {
    unix_peers_as_etcd("unix", &[]).await;
}

/// `unixs://` peer URLs: TLS over the unix sockets, with etcd's peer TLS flags (the
/// certificate checked for the URL's host, `localhost`; client certificates required). etcd
/// 3.6.16 cannot be the reference here: it listens on a unixs peer URL in plain text (its
/// listener skips the TLS wrap for unix sockets) while its peer client dials it with TLS, so
/// its members never connect ("tls: first record does not look like a TLS handshake"; seen
/// with this test's flags). mem_etcd serves and dials TLS on them: its members replicate, list
/// the unixs URLs, and a plain-text connection to a peer socket gets no HTTP/2 answer.
#[tokio::test]
async fn unixs_socket_peer_urls_serve_tls() {
    let certs = crate::security::tls::Certs::new();
    let flags = [
        certs.arg("--peer-cert-file", "server.crt"),
        certs.arg("--peer-key-file", "server.key"),
        certs.arg("--peer-trusted-ca-file", "ca.crt"),
        "--peer-client-cert-auth".to_string(),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let c = Cluster::start_on(Kind::MemEtcd, 3, &flags, "unixs").await.expect("cluster");
    let listed = members_as_listed(&c, 1).await;
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert!(listed.iter().all(|m| m.2.len() == 1 && m.2[0].starts_with("unixs://localhost:")));
    let mut c0 = c.client(0).await;
    c0.put("over-unixs", "v", None).await.unwrap();
    let mut c2 = c.client(2).await;
    let got = c2.get("over-unixs", None).await.unwrap();
    assert_eq!(got.kvs().first().map(|kv| kv.value().to_vec()), Some(b"v".to_vec()));
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = c.members[0].dir.aside(&format!("localhost:{}", c.members[0].peer_port));
    let mut plain = tokio::net::UnixStream::connect(&socket).await.unwrap();
    plain.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), plain.read(&mut buf)).await;
    let n = read.map(|r| r.unwrap_or(0)).unwrap_or(0);
    assert!(n == 0 || buf[0] == 0x15, "a plain-text peer connection was answered: {:?}", &buf[..n]);
}

async fn unix_peers_as_etcd(scheme: &'static str, flags: &[&str]) {
    let Some(mut c) = Cluster::start_on(Kind::Etcd, 3, flags, scheme).await else { return };
    let etcd = members_as_listed(&c, 1).await;
    assert_eq!(etcd.len(), 3, "{etcd:?}");
    let prefix = format!("{scheme}://localhost:");
    assert!(etcd.iter().all(|m| m.2.len() == 1 && m.2[0].starts_with(&prefix)), "{etcd:?}");
    for i in 0..3 {
        c.kill9(i);
        std::fs::remove_dir_all(c.members[i].dir.path()).unwrap();
    }
    c.kind = Kind::MemEtcd;
    c.restart_all(&[0, 1, 2]).await;
    c.leader().await;
    let mut c0 = c.client(0).await;
    c0.put("over-unix", "v", None).await.unwrap();
    let mut c2 = c.client(2).await;
    let got = c2.get("over-unix", None).await.unwrap();
    assert_eq!(got.kvs().first().map(|kv| kv.value().to_vec()), Some(b"v".to_vec()));
    assert_eq!(members_as_listed(&c, 2).await, etcd, "mem_etcd's members (left) vs etcd's");
}

/// A member alone's ids, from Status, started with exactly `args` (plus `--listen-client-urls`
/// and `--advertise-client-urls` on a free port) in a directory of its own.
async fn alone_ids(kind: Kind, args: &[String]) -> (u64, u64) {
    let port = free_port();
    let mut all = vec![
        format!("--listen-client-urls=http://127.0.0.1:{port}"),
        format!("--advertise-client-urls=http://127.0.0.1:{port}"),
    ];
    all.extend(args.iter().cloned());
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let s = Server::start_without_defaults(kind, &all).await;
    let mut raw = s.raw().await.unwrap();
    let h = raw.maint.status(pb::StatusRequest {}).await.unwrap().into_inner().header.unwrap();
    (h.cluster_id, h.member_id)
}

/// Member and cluster ids as etcd derives them from the flags of a member alone: etcd's e2e
/// framework's flags (`TestCtlV3GetFormat` expects fixed id bytes from them), the defaults,
/// several advertised peer URLs with a token and a name of its own, an empty token, a scheme
/// in capitals, a unix peer URL.
#[tokio::test]
async fn member_alone_ids_are_etcds() {
    if peer_binary("etcd").is_none() {
        return;
    }
    let p = free_ports(2);
    let (a, b) = (p[0], p[1]);
    let sets: Vec<Vec<String>> = vec![
        vec![
            "--name=TestCtlV3GetFormat-test-0".into(),
            format!("--listen-peer-urls=http://localhost:{a}"),
            format!("--initial-advertise-peer-urls=http://localhost:{a}"),
            "--initial-cluster-token=new".into(),
            format!("--initial-cluster=TestCtlV3GetFormat-test-0=http://localhost:{a}"),
            "--initial-cluster-state=new".into(),
        ],
        // etcd's defaults, but for the peer port it listens on (the advertised one stays
        // http://localhost:2380).
        vec![format!("--listen-peer-urls=http://127.0.0.1:{a}")],
        vec![
            "--name=x".into(),
            format!("--listen-peer-urls=http://127.0.0.1:{a},http://127.0.0.1:{b}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{b},http://localhost:{a}"),
            "--initial-cluster-token=tok".into(),
        ],
        vec![
            "--name=y".into(),
            format!("--listen-peer-urls=http://127.0.0.1:{a}"),
            format!("--initial-advertise-peer-urls=HTTP://127.0.0.1:{a}"),
            "--initial-cluster-token=".into(),
        ],
        vec![
            format!("--listen-peer-urls=unix://localhost:{a}"),
            format!("--initial-advertise-peer-urls=unix://localhost:{a}"),
            format!("--initial-cluster=default=unix://localhost:{a}"),
        ],
    ];
    for args in &sets {
        let etcd = alone_ids(Kind::Etcd, args).await;
        let mem = alone_ids(Kind::MemEtcd, args).await;
        assert_eq!(mem, etcd, "(cluster id, member id) of mem_etcd (left) vs etcd with {args:?}");
    }
}

/// A member alone keeps the ids of its first start, as etcd keeps the ones in its data: a
/// restart with another `--initial-cluster-token` and other peer URLs is still the same member
/// of the same cluster, although those flags on a new directory give other ids.
#[tokio::test]
async fn a_member_alone_keeps_its_ids_across_restarts_as_etcd_does() {
    if peer_binary("etcd").is_none() {
        return;
    }
    async fn status(s: &Server) -> (u64, u64) {
        let mut raw = s.raw().await.unwrap();
        let h = raw.maint.status(pb::StatusRequest {}).await.unwrap().into_inner();
        let h = h.header.unwrap();
        (h.cluster_id, h.member_id)
    }
    for kind in [Kind::MemEtcd, Kind::Etcd] {
        let p = free_ports(2);
        let flags = |port: u16, token: &str| {
            let peer = format!("http://127.0.0.1:{port}");
            vec![
                format!("--listen-peer-urls={peer}"),
                format!("--initial-advertise-peer-urls={peer}"),
                format!("--initial-cluster=it={peer}"),
                format!("--initial-cluster-token={token}"),
            ]
        };
        let (first, second) = (flags(p[0], "first"), flags(p[1], "second"));
        let dir = DataDir::new();
        let s = dir.start_kind(kind, &first.iter().map(String::as_str).collect::<Vec<_>>()).await;
        let before = status(&s).await;
        s.stop(Duration::from_secs(10)).await;
        let s = dir.start_kind(kind, &second.iter().map(String::as_str).collect::<Vec<_>>()).await;
        let after = status(&s).await;
        s.stop(Duration::from_secs(10)).await;
        assert_eq!(after, before, "{kind:?}: the ids of the first start are kept");
        let fresh = DataDir::new();
        let s =
            fresh.start_kind(kind, &second.iter().map(String::as_str).collect::<Vec<_>>()).await;
        let other = status(&s).await;
        assert_ne!(other, before, "{kind:?}: the second flags on a new directory give other ids");
    }
}
