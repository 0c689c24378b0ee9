//! etcd's Lock and Election services (v3lock, v3election), differential: the same sequence of
//! calls runs against mem_etcd and a real etcd 3.6, and the two transcripts (answers, header
//! revisions, keys, error codes and texts, what Observe streams) must be equal. Leases are
//! granted with explicit ids, so keys (`<name>/<lease hex>`) and revisions match as they are.
//! Each scenario also asserts what must hold on its own (a contended Lock waits), so that two
//! servers that both did nothing would not pass.
//!
//! Plus a cluster case: Lock, Campaign and Observe through followers of a 3-member mem_etcd.

use std::time::Duration;

use mem_etcd::proto::v3electionpb as epb;
use mem_etcd::proto::v3lockpb as lpb;
use tonic::Status;
use tonic::transport::Channel;

use crate::cluster::harness::Cluster;
use crate::support::*;

type Lock = lpb::lock_client::LockClient<Channel>;
type Election = epb::election_client::ElectionClient<Channel>;

struct Clients {
    lock: Lock,
    election: Election,
    lease: pb::lease_client::LeaseClient<Channel>,
    raw: Raw,
}

async fn clients(s: &Server) -> Clients {
    let ch = s.channel().await.expect("connect");
    Clients {
        lock: Lock::new(ch.clone()),
        election: Election::new(ch.clone()),
        lease: pb::lease_client::LeaseClient::new(ch.clone()),
        raw: Raw::new(ch),
    }
}

fn header_rev(h: &Option<pb::ResponseHeader>) -> i64 {
    h.as_ref().expect("a header").revision
}

fn err(s: &Status) -> String {
    format!("error {:?} {:?}", s.code(), s.message())
}

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn lock_line(r: &Result<tonic::Response<lpb::LockResponse>, Status>) -> String {
    match r {
        Ok(r) => {
            let r = r.get_ref();
            format!("locked {} at {}", s(&r.key), header_rev(&r.header))
        }
        Err(e) => err(e),
    }
}

fn kv_line(kv: &Option<mvccpb::KeyValue>) -> String {
    let kv = kv.as_ref().expect("a kv");
    format!(
        "{}={} create {} mod {} version {} lease {:x}",
        s(&kv.key),
        s(&kv.value),
        kv.create_revision,
        kv.mod_revision,
        kv.version,
        kv.lease
    )
}

async fn grant(c: &mut Clients, id: i64, ttl: i64) {
    c.lease.lease_grant(pb::LeaseGrantRequest { ttl, id }).await.expect("grant");
}

async fn revoke(c: &mut Clients, id: i64) {
    c.lease.lease_revoke(pb::LeaseRevokeRequest { id }).await.expect("revoke");
}

fn lock_req(name: &str, lease: i64) -> lpb::LockRequest {
    lpb::LockRequest { name: name.to_string().into(), lease }
}

async fn unlock(c: &mut Clients, key: &str) -> String {
    match c.lock.unlock(lpb::UnlockRequest { key: key.to_string().into() }).await {
        Ok(r) => format!("unlocked {key} at {}", header_rev(&r.get_ref().header)),
        Err(e) => err(&e),
    }
}

async fn exists(c: &mut Clients, key: &str) -> bool {
    let r = c.raw.kv.range(pb::RangeRequest { key: key.to_string().into(), ..Default::default() });
    r.await.expect("range").into_inner().count == 1
}

/// A Lock in its own task, on its own connection (so that its wait blocks nothing else),
/// returned once it is in line (its key written).
async fn lock_in_background(
    srv: &Server,
    name: &str,
    lease: i64,
) -> tokio::task::JoinHandle<Result<tonic::Response<lpb::LockResponse>, Status>> {
    let mut l = Lock::new(srv.channel().await.expect("connect"));
    let req = lock_req(name, lease);
    let t = tokio::spawn(async move { l.lock(req).await });
    in_line(srv, &format!("{name}/{lease:x}")).await;
    t
}

/// Waits until `key` exists on `srv`: the Lock or Campaign that writes it, sent on another
/// task, is in line.
async fn in_line(srv: &Server, key: &str) {
    let raw = srv.raw_clients().await;
    wait_until(&format!("{key} to be in line"), WITHIN, || {
        let (mut kv, key) = (raw.kv.clone(), key.to_string());
        async move {
            let r = kv.range(pb::RangeRequest { key: key.into(), ..Default::default() }).await;
            r.expect("range").into_inner().count == 1
        }
    })
    .await
}

/// Asserts that `t` is still waiting `for_` from now.
async fn still_waiting<T>(t: &tokio::task::JoinHandle<T>, what: &str, for_: Duration) {
    tokio::time::sleep(for_).await;
    assert!(!t.is_finished(), "{what}: returned while the lock was held");
}

/// Awaits a background call, at most `within`.
async fn done<T>(t: tokio::task::JoinHandle<T>, what: &str, within: Duration) -> T {
    tokio::time::timeout(within, t)
        .await
        .unwrap_or_else(|_| panic!("{what}: still waiting after {within:?}"))
        .expect("task")
}

const WAIT: Duration = Duration::from_millis(300);
const WITHIN: Duration = Duration::from_secs(10);

/// Locks: contention in create-revision order, release by revoke and by expiry, a waiter whose
/// own lease goes, a canceled waiter, reentry, and the errors.
async fn lock_transcript(srv: &Server) -> Vec<String> {
    let mut c = clients(srv).await;
    let mut t = Vec::new();
    for id in [0x11, 0x12, 0x13, 0x21, 0x22, 0x41, 0x42, 0x51] {
        grant(&mut c, id, 60).await;
    }
    grant(&mut c, 0x31, 2).await;
    grant(&mut c, 0x32, 60).await;

    // Three on one lock: served in the order they asked.
    t.push(lock_line(&c.lock.lock(lock_req("l", 0x11)).await));
    let second = lock_in_background(srv, "l", 0x12).await;
    still_waiting(&second, "the second Lock", WAIT).await;
    let third = lock_in_background(srv, "l", 0x13).await;
    still_waiting(&third, "the third Lock", WAIT).await;
    // The holder locking again gets its lock at once.
    t.push(lock_line(&c.lock.lock(lock_req("l", 0x11)).await));
    t.push(unlock(&mut c, "l/11").await);
    t.push(lock_line(&done(second, "the second Lock", WITHIN).await));
    still_waiting(&third, "the third Lock", WAIT).await;
    t.push(unlock(&mut c, "l/12").await);
    t.push(lock_line(&done(third, "the third Lock", WITHIN).await));
    t.push(unlock(&mut c, "l/13").await);

    // Released by a revocation of the holder's lease.
    t.push(lock_line(&c.lock.lock(lock_req("r", 0x21)).await));
    let waiter = lock_in_background(srv, "r", 0x22).await;
    still_waiting(&waiter, "a Lock behind a lease about to be revoked", WAIT).await;
    revoke(&mut c, 0x21).await;
    t.push(lock_line(&done(waiter, "a Lock behind a revoked lease", WITHIN).await));

    // Released by the expiry of the holder's lease (TTL 2 s).
    t.push(lock_line(&c.lock.lock(lock_req("x", 0x31)).await));
    let waiter = lock_in_background(srv, "x", 0x32).await;
    still_waiting(&waiter, "a Lock behind a lease about to expire", WAIT).await;
    t.push(lock_line(&done(waiter, "a Lock behind an expired lease", WITHIN).await));

    // A waiter whose own lease is revoked while it waits: once the holder unlocks, its key is
    // gone ("mutex: session is expired").
    t.push(lock_line(&c.lock.lock(lock_req("s", 0x41)).await));
    let waiter = lock_in_background(srv, "s", 0x42).await;
    still_waiting(&waiter, "a Lock whose lease is about to be revoked", WAIT).await;
    revoke(&mut c, 0x42).await;
    still_waiting(&waiter, "a Lock whose lease was revoked", WAIT).await;
    t.push(unlock(&mut c, "s/41").await);
    t.push(lock_line(&done(waiter, "a Lock whose lease was revoked", WITHIN).await));

    // A waiter whose client goes away: its key is deleted.
    t.push(lock_line(&c.lock.lock(lock_req("c", 0x11)).await));
    let waiter = lock_in_background(srv, "c", 0x51).await;
    assert!(exists(&mut c, "c/51").await, "a waiting Lock's key exists");
    waiter.abort();
    wait_until("a canceled Lock's key to be deleted", WITHIN, || {
        let mut c = c.raw.kv.clone();
        async move {
            let r = c.range(pb::RangeRequest { key: "c/51".into(), ..Default::default() }).await;
            r.expect("range").into_inner().count == 0
        }
    })
    .await;
    t.push("canceled waiter's key deleted".into());
    t.push(unlock(&mut c, "c/11").await);

    // Errors, and what is not one.
    t.push(lock_line(&c.lock.lock(lock_req("e", 0x9999)).await));
    t.push(lock_line(&c.lock.lock(lock_req("e", -5)).await));
    t.push(unlock(&mut c, "no/such/key").await);
    t.push(unlock(&mut c, "").await);

    // No lease: one is granted for 60 s, and the key is named after it.
    let r = c.lock.lock(lock_req("z", 0)).await.expect("lock without a lease").into_inner();
    let leases = c.lease.lease_leases(pb::LeaseLeasesRequest {}).await.unwrap().into_inner();
    let known = [0x11, 0x12, 0x13, 0x22, 0x32, 0x41, 0x51];
    let fresh: Vec<i64> =
        leases.leases.iter().map(|l| l.id).filter(|id| !known.contains(id)).collect();
    assert_eq!(fresh.len(), 1, "one lease granted by the Lock: {leases:?}");
    assert_eq!(s(&r.key), format!("z/{:x}", fresh[0]));
    let ttl = c.lease.lease_time_to_live(pb::LeaseTimeToLiveRequest { id: fresh[0], keys: true });
    let ttl = ttl.await.unwrap().into_inner();
    t.push(format!(
        "lock without a lease at {}: granted {} s, keys {:?}",
        header_rev(&r.header),
        ttl.granted_ttl,
        // (the lease id is each server's own)
        ttl.keys
            .iter()
            .map(|k| s(k).replace(&format!("{:x}", fresh[0]), "<lease>"))
            .collect::<Vec<_>>()
    ));
    t
}

fn leader_key(name: &str, key: &str, rev: i64, lease: i64) -> epb::LeaderKey {
    epb::LeaderKey { name: name.to_string().into(), key: key.to_string().into(), rev, lease }
}

fn campaign_line(r: &Result<tonic::Response<epb::CampaignResponse>, Status>) -> String {
    match r {
        Ok(r) => {
            let r = r.get_ref();
            let l = r.leader.as_ref().expect("a leader key");
            format!(
                "elected at {}: {} {} rev {} lease {:x}",
                header_rev(&r.header),
                s(&l.name),
                s(&l.key),
                l.rev,
                l.lease
            )
        }
        Err(e) => err(e),
    }
}

fn leader_line(r: &Result<tonic::Response<epb::LeaderResponse>, Status>) -> String {
    match r {
        Ok(r) => {
            let r = r.get_ref();
            format!("leader at {}: {}", header_rev(&r.header), kv_line(&r.kv))
        }
        Err(e) => err(e),
    }
}

fn header_line<T>(
    what: &str,
    r: &Result<tonic::Response<T>, Status>,
    h: impl Fn(&T) -> &Option<pb::ResponseHeader>,
) -> String {
    match r {
        Ok(r) => format!("{what} at {}", header_rev(h(r.get_ref()))),
        Err(e) => err(e),
    }
}

/// An Observe stream read in its own task, each message as a line. (The call is answered with
/// its first message, as etcd's: it waits for the first leader.)
async fn observe(srv: &Server, name: &str) -> tokio::sync::mpsc::Receiver<String> {
    let mut e = Election::new(srv.channel().await.expect("connect"));
    let req = epb::LeaderRequest { name: name.to_string().into() };
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        let mut o = match e.observe(req).await {
            Ok(o) => o.into_inner(),
            Err(e) => return drop(tx.send(format!("observe: {}", err(&e))).await),
        };
        loop {
            let line = match o.message().await {
                Ok(Some(r)) => format!("observe at {}: {}", header_rev(&r.header), kv_line(&r.kv)),
                Ok(None) => "observe: ended".into(),
                Err(e) => format!("observe: {}", err(&e)),
            };
            let end = !line.starts_with("observe at");
            if tx.send(line).await.is_err() || end {
                return;
            }
        }
    });
    rx
}

/// The next message Observe streams, at most `within`.
async fn observed(o: &mut tokio::sync::mpsc::Receiver<String>, within: Duration) -> String {
    match tokio::time::timeout(within, o.recv()).await {
        Err(_) => "observe: nothing".into(),
        Ok(Some(line)) => line,
        Ok(None) => "observe: gone".into(),
    }
}

/// Elections: no leader, Campaign and its wait, Observe of each change, Proclaim by the leader
/// and by one that is not, Resign, a campaign again with a new value, and the errors.
async fn election_transcript(srv: &Server) -> Vec<String> {
    let mut c = clients(srv).await;
    let mut t = Vec::new();
    for id in [0x61, 0x62] {
        grant(&mut c, id, 60).await;
    }
    let leader = |c: &mut Clients| {
        let mut e = c.election.clone();
        async move { e.leader(epb::LeaderRequest { name: "e".into() }).await }
    };
    t.push(leader_line(&leader(&mut c).await));

    // Observe before anyone campaigns: the first leader, when it comes.
    let mut o = observe(srv, "e").await;
    t.push(observed(&mut o, WAIT).await);

    let first = c.election.campaign(epb::CampaignRequest {
        name: "e".into(),
        lease: 0x61,
        value: "one".into(),
    });
    let first = first.await;
    t.push(campaign_line(&first));
    let first = first.unwrap().into_inner().leader.unwrap();
    t.push(observed(&mut o, WITHIN).await);
    t.push(leader_line(&leader(&mut c).await));

    // A second candidate waits for the first to go.
    let mut e2 = Election::new(srv.channel().await.unwrap());
    let second = tokio::spawn(async move {
        let req = epb::CampaignRequest { name: "e".into(), lease: 0x62, value: "two".into() };
        e2.campaign(req).await
    });
    in_line(srv, "e/62").await;
    still_waiting(&second, "the second candidate", WAIT).await;

    // The leader proclaims; one that is not the leader cannot.
    let proclaim = |c: &mut Clients, leader: Option<epb::LeaderKey>, value: &str| {
        let mut e = c.election.clone();
        let req = epb::ProclaimRequest { leader, value: value.to_string().into() };
        async move { e.proclaim(req).await }
    };
    let r = proclaim(&mut c, Some(first.clone()), "one again").await;
    t.push(header_line("proclaimed", &r, |r| &r.header));
    t.push(observed(&mut o, WITHIN).await);
    let not_created_then = leader_key("e", "e/61", first.rev + 1, 0x61);
    let r = proclaim(&mut c, Some(not_created_then), "usurper").await;
    t.push(header_line("proclaimed", &r, |r| &r.header));
    let r = proclaim(&mut c, Some(leader_key("e", "e/62", 0, 0x62)), "not yet").await;
    t.push(header_line("proclaimed", &r, |r| &r.header));
    let r = proclaim(&mut c, None, "nobody").await;
    t.push(header_line("proclaimed", &r, |r| &r.header));
    t.push(leader_line(&leader(&mut c).await));

    // Resigning hands over to the second candidate.
    let resign = |c: &mut Clients, leader: Option<epb::LeaderKey>| {
        let mut e = c.election.clone();
        async move { e.resign(epb::ResignRequest { leader }).await }
    };
    let r = resign(&mut c, None).await;
    t.push(header_line("resigned", &r, |r| &r.header));
    // Not the leader's key (wrong revision): nothing happens, and it is no error.
    let r = resign(&mut c, Some(leader_key("e", "e/61", first.rev + 7, 0x61))).await;
    t.push(header_line("resigned", &r, |r| &r.header));
    still_waiting(&second, "the second candidate", WAIT).await;
    let r = resign(&mut c, Some(first.clone())).await;
    t.push(header_line("resigned", &r, |r| &r.header));
    let second = done(second, "the second candidate", WITHIN).await;
    t.push(campaign_line(&second));
    let second = second.unwrap().into_inner().leader.unwrap();
    t.push(observed(&mut o, WITHIN).await);

    // Campaigning again on the same lease with a new value: still the leader, new value.
    let again = c.election.campaign(epb::CampaignRequest {
        name: "e".into(),
        lease: 0x62,
        value: "two again".into(),
    });
    t.push(campaign_line(&again.await));
    t.push(observed(&mut o, WITHIN).await);
    t.push(leader_line(&leader(&mut c).await));

    // The leader's lease revoked: no leader; Observe waits for the next.
    revoke(&mut c, second.lease).await;
    t.push(leader_line(&leader(&mut c).await));
    t.push(observed(&mut o, WAIT).await);

    // Errors.
    let missing = c.election.campaign(epb::CampaignRequest {
        name: "e".into(),
        lease: 0x9999,
        value: "x".into(),
    });
    t.push(campaign_line(&missing.await));
    let r = proclaim(&mut c, Some(second.clone()), "gone").await;
    t.push(header_line("proclaimed", &r, |r| &r.header));
    t
}

fn compare(what: &str, etcd: &[String], mem: &[String]) {
    let diff: Vec<String> = etcd
        .iter()
        .zip(mem)
        .enumerate()
        .filter(|(_, (e, m))| e != m)
        .map(|(i, (e, m))| format!("step {i}\n  etcd:     {e}\n  mem_etcd: {m}"))
        .collect();
    assert!(
        diff.is_empty() && etcd.len() == mem.len(),
        "{what}: {} differences ({} and {} steps):\n{}\netcd's transcript:\n{}",
        diff.len(),
        etcd.len(),
        mem.len(),
        diff.join("\n"),
        etcd.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lock_matches_etcd() {
    let etcd = server_of!(Kind::Etcd);
    let mem = server_of!(Kind::MemEtcd);
    let (e, m) = tokio::join!(lock_transcript(&etcd), lock_transcript(&mem));
    compare("Lock", &e, &m);
    // What the transcript must say on its own (both agree, so one is checked).
    assert!(e[0].starts_with("locked l/11 at "), "{e:?}");
    assert!(e.iter().any(|l| l == "error Unknown \"mutex: session is expired\""), "{e:?}");
    assert!(e.iter().any(|l| l == "error Unknown \"etcdserver: requested lease not found\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn election_matches_etcd() {
    let etcd = server_of!(Kind::Etcd);
    let mem = server_of!(Kind::MemEtcd);
    let (e, m) = tokio::join!(election_transcript(&etcd), election_transcript(&mem));
    compare("Election", &e, &m);
    assert_eq!(e[0], "error Unknown \"election: no leader\"", "{e:?}");
    assert!(e.iter().any(|l| l == "error Unknown \"election: not leader\""), "{e:?}");
    assert!(e.iter().any(|l| l == "error Unknown \"\\\"leader\\\" field must be provided\""));
    assert!(e.iter().any(|l| l.starts_with("observe at ") && l.contains("e/62=two again")));
}

/// Through followers of a 3-member cluster: a contended Lock, a Campaign that waits, and
/// Observe on another member, all going to the leader by the one road writes take.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lock_and_election_through_followers() {
    let Some(c) = Cluster::start(Kind::MemEtcd, 3, &["--wal-mode=none"]).await else { return };
    let leader = c.leader().await;
    let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let (f1, f2) = (followers[0], followers[1]);
    let server = |i: usize| c.members[i].server.as_ref().expect("running");
    let mut a = clients(server(f1)).await;
    let mut b = clients(server(f2)).await;
    grant(&mut a, 0x71, 60).await;
    grant(&mut b, 0x72, 60).await;

    let held = a.lock.lock(lock_req("cl", 0x71)).await.expect("lock through a follower");
    assert_eq!(s(&held.get_ref().key), "cl/71");
    let waiter = lock_in_background(server(f2), "cl", 0x72).await;
    still_waiting(&waiter, "a Lock on the other follower", WAIT).await;
    assert_eq!(unlock(&mut a, "cl/71").await.split(" at ").next(), Some("unlocked cl/71"));
    let got = done(waiter, "a Lock on the other follower", WITHIN).await.expect("lock");
    assert_eq!(s(&got.get_ref().key), "cl/72");
    // Its header revision is the one its key was created at, on every member.
    let rev = header_rev(&got.get_ref().header);
    let mut on_leader = clients(server(leader)).await;
    let r = on_leader.raw.kv.range(pb::RangeRequest { key: "cl/72".into(), ..Default::default() });
    let kv = r.await.unwrap().into_inner().kvs.remove(0);
    assert!(kv.create_revision <= rev, "created at {} answered at {rev}", kv.create_revision);

    let mut o = observe(server(f2), "ce").await;
    let first = a.election.campaign(epb::CampaignRequest {
        name: "ce".into(),
        lease: 0x71,
        value: "a".into(),
    });
    let first = first.await.expect("campaign through a follower").into_inner();
    assert!(observed(&mut o, WITHIN).await.contains("ce/71=a"));
    let mut e2 = Election::new(server(f2).channel().await.unwrap());
    let second = tokio::spawn(async move {
        let req = epb::CampaignRequest { name: "ce".into(), lease: 0x72, value: "b".into() };
        e2.campaign(req).await
    });
    in_line(server(f2), "ce/72").await;
    still_waiting(&second, "a candidate on the other follower", WAIT).await;
    let resign = epb::ResignRequest { leader: first.leader };
    a.election.resign(resign).await.expect("resign through a follower");
    let second = done(second, "a candidate on the other follower", WITHIN).await.unwrap();
    assert_eq!(s(&second.get_ref().leader.as_ref().unwrap().key), "ce/72");
    assert!(observed(&mut o, WITHIN).await.contains("ce/72=b"));
    let l = on_leader.election.leader(epb::LeaderRequest { name: "ce".into() }).await.unwrap();
    assert!(kv_line(&l.get_ref().kv).starts_with("ce/72=b "));
}
