//! Leases: Grant, Revoke, KeepAlive, TimeToLive and Leases through the generated client (so every
//! response field is seen exactly); how Puts, Deletes and Txns attach keys to leases and detach
//! them; expiry, which deletes all of a lease's keys in one revision; the two ways kube-apiserver
//! uses leases; and etcdctl's lease commands side by side with a real etcd.
//!
//! Every expectation holds for a real etcd 3.6.16 (`MEM_ETCD_TEST_TARGET=etcd`). Expiry tests use
//! TTLs of a few seconds and wait for the expiry with deadlines; the only fixed sleeps are the
//! ones that let a remaining TTL run down or line deadlines up.
//!
//! `expiry_of_10k_leases_figures` prints measurements and asserts only correctness; see its
//! comment for how to read them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
    WatchOptions, WatchStream,
};
use pb::lease_client::LeaseClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, UnboundedReceiverStream};
use tonic::Code;
use tonic::transport::Channel;

use crate::support::*;
use crate::tools::etcdctl::{ID_FIELDS, mask_numbers_after};

/// etcd's largest lease TTL (`lease.MaxLeaseTTL`).
const MAX_TTL: i64 = 9_000_000_000;
const E_LEASE_EXISTS: &str = "etcdserver: lease already exists";
const E_TTL_TOO_LARGE: &str = "etcdserver: too large lease TTL";
/// How long a test waits for something the server must do.
const WAIT: Duration = Duration::from_secs(10);
/// How long a test listens to be sure nothing more happens.
const QUIET: Duration = Duration::from_millis(300);
/// How late after its deadline an expired lease's keys may still be there. etcd looks for
/// expired leases every 500 ms; the rest is slack for a loaded machine.
const EXPIRY_SLACK: Duration = Duration::from_millis(2500);

// ---------------------------------------------------------------------------------------------
// Helpers

async fn lease_client(s: &Server) -> LeaseClient<Channel> {
    let ch = s.channel().await.unwrap_or_else(|e| panic!("connect {}: {e:?}", s.endpoint()));
    LeaseClient::new(ch).max_decoding_message_size(256 << 20)
}

async fn try_grant(
    l: &mut LeaseClient<Channel>,
    id: i64,
    ttl: i64,
) -> Result<pb::LeaseGrantResponse, tonic::Status> {
    l.lease_grant(pb::LeaseGrantRequest { id, ttl }).await.map(|r| r.into_inner())
}

/// Grants a lease and returns its id, checking the answer's TTL for TTLs etcd keeps as asked.
async fn grant(l: &mut LeaseClient<Channel>, id: i64, ttl: i64) -> i64 {
    let r = try_grant(l, id, ttl).await.unwrap_or_else(|e| panic!("grant {id} ttl {ttl}: {e:?}"));
    assert!(r.id > 0 && (id == 0 || r.id == id), "grant {id}: {r:?}");
    assert_eq!((r.ttl, r.error.as_str()), (ttl.max(2), ""), "{r:?}");
    r.id
}

async fn revoke(
    l: &mut LeaseClient<Channel>,
    id: i64,
) -> Result<pb::LeaseRevokeResponse, tonic::Status> {
    l.lease_revoke(pb::LeaseRevokeRequest { id }).await.map(|r| r.into_inner())
}

async fn time_to_live(
    l: &mut LeaseClient<Channel>,
    id: i64,
    keys: bool,
) -> pb::LeaseTimeToLiveResponse {
    l.lease_time_to_live(pb::LeaseTimeToLiveRequest { id, keys })
        .await
        .unwrap_or_else(|e| panic!("time-to-live {id}: {e:?}"))
        .into_inner()
}

/// The keys attached to a lease, sorted (etcd sends them in no particular order).
async fn attached(l: &mut LeaseClient<Channel>, id: i64) -> Vec<String> {
    let r = time_to_live(l, id, true).await;
    assert!(r.ttl >= 0, "lease {id} is gone: {r:?}");
    let mut keys: Vec<String> =
        r.keys.iter().map(|k| String::from_utf8_lossy(k).into_owned()).collect();
    keys.sort();
    keys
}

async fn lease_ids(l: &mut LeaseClient<Channel>) -> Vec<i64> {
    let r = l.lease_leases(pb::LeaseLeasesRequest {}).await.expect("leases").into_inner();
    r.leases.iter().map(|s| s.id).collect()
}

async fn lease_set(l: &mut LeaseClient<Channel>) -> BTreeSet<i64> {
    lease_ids(l).await.into_iter().collect()
}

/// Waits until TimeToLive says the lease is gone (TTL -1).
async fn wait_gone(l: &mut LeaseClient<Channel>, id: i64, within: Duration) {
    let what = format!("lease {id} to go (TimeToLive -1)");
    wait_until(&what, within, || {
        let mut l = l.clone();
        async move {
            let r = time_to_live(&mut l, id, false).await;
            if r.ttl == -1 { Ok(()) } else { Err(format!("{r:?}")) }
        }
    })
    .await
}

fn with_lease(id: i64) -> Option<PutOptions> {
    Some(PutOptions::new().with_lease(id))
}

/// Puts `k` attached to `lease` (0: none) and returns the revision.
async fn put_leased(c: &mut Client, k: &str, v: &str, lease: i64) -> i64 {
    let opts = (lease != 0).then(|| PutOptions::new().with_lease(lease));
    rev(c.put(k, v, opts).await.unwrap_or_else(|e| panic!("put {k} lease {lease}: {e:?}")).header())
}

async fn get_one(c: &mut Client, k: &str) -> Option<Kv> {
    c.get(k, None).await.expect("get").kvs().first().map(Kv::from)
}

async fn get_prefix(c: &mut Client, prefix: &str) -> Vec<Kv> {
    kvs(c.get(prefix, Some(GetOptions::new().with_prefix())).await.expect("get").kvs())
}

/// `kv(...)` with a lease.
fn lkv(k: &str, v: &str, create: i64, modr: i64, version: i64, lease: i64) -> Kv {
    Kv { lease, ..kv(k, v, create, modr, version) }
}

/// A keep-alive stream. The first request is queued before the call, because tonic waits for
/// the response headers and etcd sends them with its first answer.
#[derive(Debug)]
struct KeepAlive {
    tx: mpsc::UnboundedSender<pb::LeaseKeepAliveRequest>,
    rx: tonic::Streaming<pb::LeaseKeepAliveResponse>,
}

impl KeepAlive {
    /// Opens a stream that renews `first`, and returns the answer to that.
    async fn open(
        l: &mut LeaseClient<Channel>,
        first: i64,
    ) -> (KeepAlive, pb::LeaseKeepAliveResponse) {
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(pb::LeaseKeepAliveRequest { id: first }).unwrap();
        let call = l.lease_keep_alive(UnboundedReceiverStream::new(rx));
        let rx = tokio::time::timeout(WAIT, call)
            .await
            .expect("keep-alive stream opens in time")
            .expect("keep-alive stream")
            .into_inner();
        let mut ka = KeepAlive { tx, rx };
        let first = ka.recv().await;
        (ka, first)
    }

    async fn recv(&mut self) -> pb::LeaseKeepAliveResponse {
        tokio::time::timeout(WAIT, self.rx.message())
            .await
            .expect("keep-alive answer in time")
            .expect("keep-alive stream error")
            .expect("keep-alive stream ended")
    }

    async fn renew(&mut self, id: i64) -> pb::LeaseKeepAliveResponse {
        self.tx.send(pb::LeaseKeepAliveRequest { id }).expect("keep-alive stream open");
        self.recv().await
    }
}

/// One watch event, as plain data.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Ev {
    delete: bool,
    key: String,
    mod_rev: i64,
    prev: Option<Kv>,
}

impl From<&etcd_client::Event> for Ev {
    fn from(e: &etcd_client::Event) -> Ev {
        let kv = e.kv().expect("event has a kv");
        Ev {
            delete: e.event_type() == EventType::Delete,
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            mod_rev: kv.mod_revision(),
            prev: e.prev_kv().map(Kv::from),
        }
    }
}

/// A prefix watch with prev_kv from `start` (0: now), created before this returns.
async fn watch_prefix(c: &mut Client, prefix: &str, start: i64) -> WatchStream {
    let mut opts = WatchOptions::new().with_prefix().with_prev_key();
    if start > 0 {
        opts = opts.with_start_revision(start);
    }
    let mut w = c.watch(prefix, Some(opts)).await.expect("watch");
    let created = tokio::time::timeout(WAIT, w.message())
        .await
        .expect("watch created in time")
        .expect("watch stream error")
        .expect("watch stream ended");
    assert!(created.created() && !created.canceled(), "{created:?}");
    w
}

/// The events of each watch response, until `n` events arrived.
async fn responses(w: &mut WatchStream, n: usize, within: Duration) -> Vec<Vec<Ev>> {
    let deadline = tokio::time::Instant::now() + within;
    let mut out: Vec<Vec<Ev>> = Vec::new();
    let mut count = 0;
    while count < n {
        let msg = tokio::time::timeout_at(deadline, w.message())
            .await
            .unwrap_or_else(|_| panic!("{count} of {n} events within {within:?}: {out:?}"))
            .expect("watch stream error")
            .expect("watch stream ended");
        assert!(!msg.canceled(), "watch canceled: {msg:?}");
        if msg.events().is_empty() {
            continue;
        }
        count += msg.events().len();
        out.push(msg.events().iter().map(Ev::from).collect());
    }
    out
}

/// Asserts that no event arrives for [`QUIET`].
async fn no_more_events(w: &mut WatchStream) {
    if let Ok(msg) = tokio::time::timeout(QUIET, w.message()).await {
        let msg = msg.expect("watch stream error").expect("watch stream ended");
        let evs: Vec<Ev> = msg.events().iter().map(Ev::from).collect();
        assert!(evs.is_empty(), "unexpected events: {evs:?}");
    }
}

/// Asserts that the events are DELETEs of exactly `keys` (any order), all at one revision, each
/// with the prev_kv of a key attached to `lease`; returns that revision.
#[track_caller]
fn assert_lease_deletes(evs: &[Ev], keys: &[&str], lease: i64) -> i64 {
    let mut got: Vec<&str> = evs.iter().map(|e| e.key.as_str()).collect();
    got.sort();
    let mut want = keys.to_vec();
    want.sort();
    assert_eq!(got, want, "{evs:?}");
    let at = evs[0].mod_rev;
    for e in evs {
        assert!(e.delete, "not a DELETE: {e:?}");
        assert_eq!(e.mod_rev, at, "all deletes in one revision: {evs:?}");
        let prev = e.prev.as_ref().unwrap_or_else(|| panic!("DELETE without prev_kv: {e:?}"));
        assert_eq!((prev.key.as_slice(), prev.lease), (e.key.as_bytes(), lease), "{e:?}");
    }
    at
}

// ---------------------------------------------------------------------------------------------
// LeaseGrant

#[tokio::test]
async fn grant_ids_ttls_and_errors() {
    let s = server!();
    let mut l = lease_client(&s).await;

    // Generated ids are positive and distinct; the answer carries the TTL and a header.
    let r = try_grant(&mut l, 0, 60).await.unwrap();
    assert!(r.id > 0, "{r:?}");
    assert_eq!((r.ttl, r.error.as_str()), (60, ""));
    let h = r.header.expect("header");
    assert_eq!(h.revision, 1, "a grant writes no revision");
    assert!(h.cluster_id != 0 && h.member_id != 0, "{h:?}");
    let a = r.id;
    let b = grant(&mut l, 0, 60).await;
    assert_ne!(a, b);

    // An explicit id is honoured; granting it again fails, and so does granting a generated id.
    assert_eq!(grant(&mut l, 12345, 30).await, 12345);
    assert_status(try_grant(&mut l, 12345, 30).await, Code::FailedPrecondition, E_LEASE_EXISTS);
    assert_status(try_grant(&mut l, a, 99).await, Code::FailedPrecondition, E_LEASE_EXISTS);
    // The failed grant changed nothing.
    assert_eq!(time_to_live(&mut l, 12345, false).await.granted_ttl, 30);
    assert_eq!(time_to_live(&mut l, a, false).await.granted_ttl, 60);

    // TTLs below etcd's minimum (2 s) are raised to it; the answer shows the TTL in force.
    for (id, ttl) in [(101, 1), (102, 0), (103, -7)] {
        let r = try_grant(&mut l, id, ttl).await.unwrap();
        assert_eq!((r.id, r.ttl), (id, 2), "ttl {ttl}");
        assert_eq!(time_to_live(&mut l, id, false).await.granted_ttl, 2, "ttl {ttl}");
    }
    assert_eq!(grant(&mut l, 104, 2).await, 104);

    // The largest TTL is accepted, one more is out of range.
    let r = try_grant(&mut l, 200, MAX_TTL).await.unwrap();
    assert_eq!((r.id, r.ttl), (200, MAX_TTL));
    assert_status(try_grant(&mut l, 201, MAX_TTL + 1).await, Code::OutOfRange, E_TTL_TOO_LARGE);
    assert_status(try_grant(&mut l, 0, i64::MAX).await, Code::OutOfRange, E_TTL_TOO_LARGE);
    assert_eq!(time_to_live(&mut l, 201, false).await.ttl, -1, "no lease from a refused grant");

    // Explicit ids right after a generated one do not make a later generated grant collide.
    let g = grant(&mut l, 0, 60).await;
    for id in g + 1..=g + 3 {
        assert_eq!(grant(&mut l, id, 60).await, id);
    }
    let next = grant(&mut l, 0, 60).await;
    assert!(!(g..=g + 3).contains(&next), "{next} reused one of {g}..={}", g + 3);
}

#[tokio::test]
async fn generated_ids_are_unique_and_never_reused() {
    let s = server!();
    let l = lease_client(&s).await;
    async fn grant_many(l: &LeaseClient<Channel>, n: usize) -> Vec<i64> {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..4 {
            let mut l = l.clone();
            tasks.spawn(async move {
                let mut ids = Vec::new();
                for _ in 0..n / 4 {
                    ids.push(grant(&mut l, 0, 60).await);
                }
                ids
            });
        }
        let mut all = Vec::new();
        while let Some(ids) = tasks.join_next().await {
            all.extend(ids.unwrap());
        }
        all
    }
    let first = grant_many(&l, 200).await;
    let set: BTreeSet<i64> = first.iter().copied().collect();
    assert_eq!(set.len(), 200, "concurrent grants got duplicate ids");
    assert!(set.iter().all(|&id| id > 0));
    let mut l2 = l.clone();
    assert_eq!(lease_set(&mut l2).await, set);

    // Revoked ids are not handed out again.
    for &id in &first {
        revoke(&mut l2, id).await.unwrap();
    }
    assert!(lease_ids(&mut l2).await.is_empty());
    let second = grant_many(&l, 200).await;
    let set2: BTreeSet<i64> = second.iter().copied().collect();
    assert_eq!(set2.len(), 200);
    assert!(
        set.is_disjoint(&set2),
        "reused ids: {:?}",
        set.intersection(&set2).collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------------------------
// LeaseRevoke

#[tokio::test]
async fn revoke_deletes_every_attached_key_in_one_revision() {
    let s = server!();
    let mut c = s.client().await;
    let mut l = lease_client(&s).await;
    let lease = grant(&mut l, 0, 60).await;
    let other = grant(&mut l, 0, 60).await;
    put_leased(&mut c, "/r/a", "1", lease).await; // 2
    put_leased(&mut c, "/r/b", "2", lease).await; // 3
    put_leased(&mut c, "/r/c", "3", lease).await; // 4
    put_leased(&mut c, "/r/c", "3b", lease).await; // 5: same lease again, still attached
    put_leased(&mut c, "/r/d", "4", 0).await; // 6: no lease
    put_leased(&mut c, "/r/e", "5", lease).await; // 7
    put_leased(&mut c, "/r/e", "5b", 0).await; // 8: detached by a put without a lease
    put_leased(&mut c, "/r/f", "6", lease).await; // 9
    put_leased(&mut c, "/r/f", "6b", other).await; // 10: moved to the other lease
    assert_eq!(attached(&mut l, lease).await, ["/r/a", "/r/b", "/r/c"]);
    assert_eq!(attached(&mut l, other).await, ["/r/f"]);

    let mut w = watch_prefix(&mut c, "/r/", 0).await;
    let r = revoke(&mut l, lease).await.unwrap();
    assert_eq!(rev(c.get("/r/", None).await.unwrap().header()), 11);
    assert_eq!(r.header.expect("header").revision, 11, "the revoke's header has its revision");
    let got = responses(&mut w, 3, WAIT).await;
    assert_eq!(got.len(), 1, "one watch response for the revocation: {got:?}");
    assert_eq!(assert_lease_deletes(&got[0], &["/r/a", "/r/b", "/r/c"], lease), 11);
    let mut prevs: Vec<Kv> = got[0].iter().map(|e| e.prev.clone().unwrap()).collect();
    prevs.sort();
    assert_eq!(
        prevs,
        vec![
            lkv("/r/a", "1", 2, 2, 1, lease),
            lkv("/r/b", "2", 3, 3, 1, lease),
            lkv("/r/c", "3b", 4, 5, 2, lease),
        ]
    );
    no_more_events(&mut w).await;
    assert_eq!(
        get_prefix(&mut c, "/r/").await,
        vec![
            kv("/r/d", "4", 6, 6, 1),
            kv("/r/e", "5b", 7, 8, 2),
            lkv("/r/f", "6b", 9, 10, 2, other)
        ]
    );

    // Gone: revoking again, renewing or attaching fails; TimeToLive says -1.
    assert_status(revoke(&mut l, lease).await, Code::NotFound, E_LEASE_NOT_FOUND);
    assert_eq!(time_to_live(&mut l, lease, true).await.ttl, -1);
    assert_err(c.put("/r/g", "x", with_lease(lease)).await, Code::NotFound, E_LEASE_NOT_FOUND);
    assert_eq!(lease_set(&mut l).await, BTreeSet::from([other]));
    assert_status(revoke(&mut l, 0x5eed).await, Code::NotFound, E_LEASE_NOT_FOUND);

    // A lease without keys is revoked without a revision.
    let empty = grant(&mut l, 0, 60).await;
    let r = revoke(&mut l, empty).await.unwrap();
    assert_eq!(r.header.expect("header").revision, 11);
    assert_eq!(current_rev(&mut c).await, 11);
    no_more_events(&mut w).await;
}

/// A revocation racing puts that attach new keys to the lease, and TimeToLives of it. etcd
/// applies a revocation in one step, so each put with the lease comes before it (and its key
/// goes in the revocation's revision) or after it (refused: "requested lease not found"): every
/// key of the lease goes in that one revision, which is the revocation's header; no put with the
/// lease succeeds above it; and once a put is refused or TimeToLive answers -1, no key of the
/// lease is left to read.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn revoke_racing_puts_with_the_lease_takes_effect_in_one_step() {
    const ROUNDS: usize = 25;
    const WRITERS: usize = 6;
    /// Puts each writer tries at most per round (it stops at its first refusal).
    const TRIES: usize = 400;
    let s = server!();
    let mut c = s.client().await;
    let mut l = lease_client(&s).await;
    /// No key under `prefix` may still be attached to `lease`.
    async fn none_left(c: &mut Client, prefix: &str, lease: i64, after: &str) {
        let left: Vec<Kv> =
            get_prefix(c, prefix).await.into_iter().filter(|kv| kv.lease == lease).collect();
        assert!(left.is_empty(), "{after}, keys of lease {lease:x} are still there: {left:?}");
    }
    for round in 0..ROUNDS {
        let lease = grant(&mut l, 0, 60).await;
        let prefix = format!("/race/{round}/");
        put_leased(&mut c, &format!("{prefix}first"), "v", lease).await;
        let mut w = watch_prefix(&mut c, &prefix, 0).await;
        let start = Arc::new(tokio::sync::Barrier::new(WRITERS + 2));
        let mut writers = Vec::new();
        for j in 0..WRITERS {
            let (mut c, start, prefix) = (c.clone(), start.clone(), prefix.clone());
            writers.push(tokio::spawn(async move {
                let mut acked = Vec::new();
                start.wait().await;
                for i in 0..TRIES {
                    let key = format!("{prefix}w{j}-{i}");
                    match c.put(key.as_str(), "v", with_lease(lease)).await {
                        Ok(r) => acked.push((key, rev(r.header()))),
                        Err(e) => {
                            assert_eq!(
                                status_of(&e),
                                (Code::NotFound, E_LEASE_NOT_FOUND.to_string()),
                                "put {key}"
                            );
                            none_left(&mut c, &prefix, lease, "after a put was refused").await;
                            return acked;
                        }
                    }
                }
                panic!("{TRIES} puts with lease {lease:x} and none refused after its revocation");
            }));
        }
        let ttl = {
            let (mut c, mut l, start, prefix) =
                (c.clone(), l.clone(), start.clone(), prefix.clone());
            tokio::spawn(async move {
                start.wait().await;
                for _ in 0..TRIES {
                    if time_to_live(&mut l, lease, true).await.ttl == -1 {
                        none_left(&mut c, &prefix, lease, "after TimeToLive said -1").await;
                        return;
                    }
                }
                panic!("lease {lease:x} outlived {TRIES} TimeToLives after its revocation");
            })
        };
        start.wait().await;
        // Revoked after 0 to 4 ms of puts, so the race falls at different points.
        tokio::time::sleep(Duration::from_millis((round % 5) as u64)).await;
        let r = revoke(&mut l, lease).await.unwrap_or_else(|e| panic!("revoke: {e:?}"));
        let at = r.header.expect("header").revision;
        let mut acked = Vec::new();
        for w in writers {
            acked.extend(w.await.expect("writer"));
        }
        ttl.await.expect("time-to-live poller");
        for (key, put_at) in &acked {
            assert!(*put_at < at, "put {key} with lease {lease:x} at {put_at}, revoked at {at}");
        }
        // Every acknowledged put, then the deletion of each of those keys and of the first.
        let got = responses(&mut w, 2 * acked.len() + 1, WAIT).await;
        let deletes: Vec<Ev> = got.into_iter().flatten().filter(|e| e.delete).collect();
        let mut keys: Vec<&str> = acked.iter().map(|(k, _)| k.as_str()).collect();
        let first = format!("{prefix}first");
        keys.push(&first);
        assert_eq!(assert_lease_deletes(&deletes, &keys, lease), at, "round {round}");
        no_more_events(&mut w).await;
        none_left(&mut c, &prefix, lease, "after the revocation").await;
        assert!(get_prefix(&mut c, &prefix).await.is_empty());
    }
}

// ---------------------------------------------------------------------------------------------
// LeaseKeepAlive, LeaseTimeToLive, LeaseLeases

#[tokio::test]
async fn keep_alive_renews_to_the_full_ttl() {
    let s = server!();
    let mut c = s.client().await;
    let mut l = lease_client(&s).await;
    let lease = grant(&mut l, 0, 3).await;
    put_leased(&mut c, "/ka/k", "v", lease).await;
    let (mut ka, first) = KeepAlive::open(&mut l, lease).await;
    assert_eq!((first.id, first.ttl), (lease, 3));
    assert!(first.header.is_some_and(|h| h.revision == 2), "header with the current revision");

    // Halfway between the TTL reading 1 (over 1 s gone) and the lease expiring (3 s).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let left = time_to_live(&mut l, lease, false).await;
    assert_eq!((left.id, left.granted_ttl), (lease, 3));
    assert!(left.ttl <= 1, "3 s lease, renewed 2 s ago: {left:?}");
    let r = ka.renew(lease).await;
    assert_eq!((r.id, r.ttl), (lease, 3));
    let left = time_to_live(&mut l, lease, false).await;
    assert!((1..=2).contains(&left.ttl), "just renewed to 3 s: {left:?}");

    // Renewing every 500 ms keeps the key well past the TTL.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        let r = ka.renew(lease).await;
        assert_eq!((r.id, r.ttl), (lease, 3), "{:?} into the renewals", start.elapsed());
        assert!(get_one(&mut c, "/ka/k").await.is_some(), "key gone while renewed");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Unknown leases answer TTL 0 on the same stream, which stays usable.
    let r = ka.renew(0x7e57).await;
    assert_eq!((r.id, r.ttl), (0x7e57, 0), "{r:?}");
    assert!(r.header.is_some());
    let r = ka.renew(lease).await;
    assert_eq!((r.id, r.ttl), (lease, 3));

    // Once renewals stop, the lease expires; renewing it then answers TTL 0.
    let mut w = watch_prefix(&mut c, "/ka/", 0).await;
    let got = responses(&mut w, 1, Duration::from_secs(3) + EXPIRY_SLACK).await;
    assert_lease_deletes(&got[0], &["/ka/k"], lease);
    let r = ka.renew(lease).await;
    assert_eq!((r.id, r.ttl), (lease, 0), "{r:?}");
    // A new stream on a missing lease answers too.
    let (_ka2, r) = KeepAlive::open(&mut l, lease).await;
    assert_eq!((r.id, r.ttl), (lease, 0));
}

/// A renewal that arrives after a lease's deadline does not bring the lease back, even while
/// the server is still busy with an earlier expiry: etcd's `Renew` of an expired lease waits
/// for its revocation, and the keep-alive then answers TTL 0 (so the keys are gone by then). Lease A has many keys, so deleting
/// them takes a while; lease B's deadline falls a moment after A's, and B's renewal is sent
/// just after B's deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_after_the_deadline_does_not_revive_and_waits_for_the_revocation() {
    const KEYS: usize = 10_000;
    const PER_TXN: usize = 125;
    const WORKERS: usize = 8;
    let s = server!();
    let mut c = s.client().await;
    let raw = s.raw_clients().await;
    let mut l = lease_client(&s).await;
    let a = grant(&mut l, 0, 3).await;
    let (mut ka, _) = KeepAlive::open(&mut l, a).await;

    // Attach the keys, renewing A meanwhile.
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..WORKERS {
        let (mut kv, done) = (raw.kv.clone(), done.clone());
        tasks.spawn(async move {
            for t in (w..KEYS / PER_TXN).step_by(WORKERS) {
                let ops = (t * PER_TXN..(t + 1) * PER_TXN)
                    .map(|i| pb::RequestOp {
                        request: Some(pb::request_op::Request::RequestPut(pb::PutRequest {
                            key: format!("/many/{i:06}").into_bytes().into(),
                            value: bytes::Bytes::from_static(b"x"),
                            lease: a,
                            ..Default::default()
                        })),
                    })
                    .collect();
                kv.txn(pb::TxnRequest { success: ops, ..Default::default() })
                    .await
                    .unwrap_or_else(|e| panic!("txn {t}: {e:?}"));
            }
            done.fetch_add(1, Ordering::SeqCst);
        });
    }
    let mut renewed = Instant::now();
    while done.load(Ordering::SeqCst) < WORKERS {
        if renewed.elapsed() > Duration::from_millis(500) {
            assert_eq!(ka.renew(a).await.ttl, 3, "lease A expired during the setup");
            renewed = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }

    // A's deadline, then B's a moment later.
    assert_eq!(ka.renew(a).await.ttl, 3);
    let a_renewed = Instant::now();
    // Far enough apart that A's expiry does not take B along.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let b = grant(&mut l, 0, 3).await;
    let b_granted = Instant::now();
    put_leased(&mut c, "/b/key", "v", b).await;
    assert_eq!(attached(&mut l, a).await.len(), KEYS);

    tokio::time::sleep_until((b_granted + Duration::from_millis(3002)).into()).await;
    let sent = Instant::now();
    let r = ka.renew(b).await;
    let late = sent - (a_renewed + Duration::from_secs(3));
    assert_eq!(
        (r.id, r.ttl),
        (b, 0),
        "lease B was renewed by a keep-alive sent {:?} after its deadline ({late:?} after A's)",
        sent - (b_granted + Duration::from_secs(3))
    );
    // etcd answers only once the revocation is done: the keys are gone by then.
    assert_eq!(get_one(&mut c, "/b/key").await, None, "B's key outlived B's TTL 0 answer");
    let r = ka.renew(a).await;
    assert_eq!((r.id, r.ttl), (a, 0), "lease A renewed after its deadline");
    let left = c.get("/many/", Some(GetOptions::new().with_prefix().with_count_only())).await;
    assert_eq!(left.unwrap().count(), 0, "A's keys outlived A's TTL 0 answer");
}

#[tokio::test]
async fn time_to_live_reports_remaining_granted_and_keys() {
    let s = server!();
    let mut c = s.client().await;
    let mut l = lease_client(&s).await;
    let lease = grant(&mut l, 0, 10).await;
    put_leased(&mut c, "/ttl/b", "2", lease).await;
    put_leased(&mut c, "/ttl/a", "1", lease).await;
    put_leased(&mut c, "/ttl/c", "3", 0).await;

    let r = time_to_live(&mut l, lease, false).await;
    assert_eq!((r.id, r.granted_ttl), (lease, 10));
    assert!((8..=9).contains(&r.ttl), "whole seconds left, truncated: {r:?}");
    assert!(r.keys.is_empty(), "keys only when asked: {r:?}");
    assert!(r.header.is_some_and(|h| h.revision == 4));
    let r = time_to_live(&mut l, lease, true).await;
    let mut keys = r.keys.clone();
    keys.sort();
    assert_eq!(keys, ["/ttl/a", "/ttl/b"].map(|k| bytes::Bytes::from_static(k.as_bytes())));

    tokio::time::sleep(Duration::from_millis(1200)).await;
    let r = time_to_live(&mut l, lease, false).await;
    assert!((6..=8).contains(&r.ttl), "1.2 s later: {r:?}");
    assert_eq!(r.granted_ttl, 10);

    // A lease without keys lists none; an unknown lease answers TTL -1, not an error.
    let bare = grant(&mut l, 0, 10).await;
    assert!(time_to_live(&mut l, bare, true).await.keys.is_empty());
    for keys in [false, true] {
        let r = time_to_live(&mut l, 0x1d1e, keys).await;
        assert_eq!((r.id, r.ttl, r.granted_ttl, r.keys.len()), (0x1d1e, -1, 0, 0), "{r:?}");
        assert!(r.header.is_some_and(|h| h.revision == 4 && h.member_id != 0));
    }
}

#[tokio::test]
async fn leases_lists_every_live_lease() {
    let s = server!();
    let mut l = lease_client(&s).await;
    let r = l.lease_leases(pb::LeaseLeasesRequest {}).await.unwrap().into_inner();
    assert!(r.leases.is_empty() && r.header.is_some(), "{r:?}");
    let a = grant(&mut l, 0, 60).await;
    let b = grant(&mut l, 77, 60).await;
    let c = grant(&mut l, 0, 2).await;
    assert_eq!(lease_set(&mut l).await, BTreeSet::from([a, b, c]));
    revoke(&mut l, b).await.unwrap();
    assert_eq!(lease_set(&mut l).await, BTreeSet::from([a, c]));
    // The short lease drops out of the list when it expires.
    wait_gone(&mut l, c, Duration::from_secs(2) + EXPIRY_SLACK).await;
    assert_eq!(lease_ids(&mut l).await, vec![a]);
}

/// etcd lists leases soonest expiry first (`lessor.Leases` sorts by remaining time), which is the
/// order `etcdctl lease list` prints.
#[tokio::test]
async fn leases_are_listed_soonest_expiry_first() {
    let s = server!();
    let mut l = lease_client(&s).await;
    for (id, ttl) in [(1, 300), (2, 100), (3, 200), (4, 150)] {
        grant(&mut l, id, ttl).await;
    }
    assert_eq!(lease_ids(&mut l).await, vec![2, 4, 3, 1]);
}

// ---------------------------------------------------------------------------------------------
// Attaching keys

#[tokio::test]
async fn puts_deletes_and_txns_attach_and_detach_keys() {
    let s = server!();
    let mut c = s.client().await;
    let mut l = lease_client(&s).await;
    let l1 = grant(&mut l, 0, 60).await;
    let l2 = grant(&mut l, 0, 60).await;

    put_leased(&mut c, "k", "v1", l1).await; // 2
    assert_eq!(get_one(&mut c, "k").await, Some(lkv("k", "v1", 2, 2, 1, l1)));
    assert_eq!(attached(&mut l, l1).await, ["k"]);
    assert!(attached(&mut l, l2).await.is_empty());
    // A put with another lease moves the key.
    put_leased(&mut c, "k", "v2", l2).await; // 3
    assert_eq!(attached(&mut l, l1).await, Vec::<String>::new());
    assert_eq!(attached(&mut l, l2).await, ["k"]);
    // ignore_lease keeps it.
    c.put("k", "v3", Some(PutOptions::new().with_ignore_lease())).await.unwrap(); // 4
    assert_eq!(get_one(&mut c, "k").await, Some(lkv("k", "v3", 2, 4, 3, l2)));
    assert_eq!(attached(&mut l, l2).await, ["k"]);
    // A put without a lease detaches it.
    put_leased(&mut c, "k", "v4", 0).await; // 5
    assert_eq!(get_one(&mut c, "k").await, Some(kv("k", "v4", 2, 5, 4)));
    assert!(attached(&mut l, l2).await.is_empty());
    // ignore_lease on a key without a lease keeps "none".
    c.put("k", "v5", Some(PutOptions::new().with_ignore_lease())).await.unwrap(); // 6
    assert_eq!(get_one(&mut c, "k").await, Some(kv("k", "v5", 2, 6, 5)));

    // Deletes detach: a single key and a range.
    put_leased(&mut c, "d1", "x", l1).await; // 7
    put_leased(&mut c, "d2", "x", l1).await; // 8
    put_leased(&mut c, "d3", "x", l1).await; // 9
    assert_eq!(attached(&mut l, l1).await, ["d1", "d2", "d3"]);
    c.delete("d1", None).await.unwrap(); // 10
    assert_eq!(attached(&mut l, l1).await, ["d2", "d3"]);
    c.delete("d2", Some(etcd_client::DeleteOptions::new().with_range("d4"))).await.unwrap(); // 11
    assert!(attached(&mut l, l1).await.is_empty());
    // A deleted key recreated with the lease is attached again, once.
    put_leased(&mut c, "d1", "y", l1).await; // 12
    put_leased(&mut c, "d1", "z", l1).await; // 13
    assert_eq!(attached(&mut l, l1).await, ["d1"]);

    // Txns attach and detach the same way, on whichever branch runs.
    let t = c
        .txn(
            Txn::new()
                .when([Compare::mod_revision("t1", CompareOp::Equal, 0)])
                .and_then([
                    TxnOp::put("t1", "a", with_lease(l2)),
                    TxnOp::put("t2", "b", with_lease(l2)),
                    TxnOp::put("d1", "moved", with_lease(l2)),
                ])
                .or_else([TxnOp::put("never", "x", with_lease(l1))]),
        )
        .await
        .unwrap(); // 14
    assert!(t.succeeded());
    assert!(attached(&mut l, l1).await.is_empty());
    assert_eq!(attached(&mut l, l2).await, ["d1", "t1", "t2"]);
    let t = c
        .txn(
            Txn::new()
                .when([Compare::mod_revision("t1", CompareOp::Equal, 0)])
                .and_then([TxnOp::put("never", "x", with_lease(l1))])
                .or_else([
                    TxnOp::delete("t1", None),
                    TxnOp::put("t2", "b2", None),
                    TxnOp::put("t3", "c", with_lease(l1)),
                    TxnOp::txn(Txn::new().and_then([TxnOp::put("t4", "d", with_lease(l1))])),
                ]),
        )
        .await
        .unwrap(); // 15
    assert!(!t.succeeded());
    assert_eq!(attached(&mut l, l1).await, ["t3", "t4"]);
    assert_eq!(attached(&mut l, l2).await, ["d1"]);
    assert_eq!(
        get_prefix(&mut c, "t").await,
        vec![
            kv("t2", "b2", 14, 15, 2),
            lkv("t3", "c", 15, 15, 1, l1),
            lkv("t4", "d", 15, 15, 1, l1)
        ]
    );
    assert!(get_one(&mut c, "never").await.is_none());
}

#[tokio::test]
async fn unknown_leases_are_refused_by_puts_and_txns() {
    let s = server!();
    let mut c = s.client().await;
    let mut l = lease_client(&s).await;
    let live = grant(&mut l, 0, 60).await;
    let revoked = grant(&mut l, 0, 60).await;
    revoke(&mut l, revoked).await.unwrap();
    put_leased(&mut c, "exists", "v", 0).await; // 2

    for bad in [0x7777, revoked] {
        assert_err(c.put("k", "v", with_lease(bad)).await, Code::NotFound, E_LEASE_NOT_FOUND);
        // On the success branch, next to a valid put: the whole txn fails.
        let t = Txn::new().when([Compare::version("exists", CompareOp::Greater, 0)]).and_then([
            TxnOp::put("ok", "v", with_lease(live)),
            TxnOp::put("k", "v", with_lease(bad)),
        ]);
        assert_err(c.txn(t).await, Code::NotFound, E_LEASE_NOT_FOUND);
        // On the failure branch.
        let t = Txn::new()
            .when([Compare::version("exists", CompareOp::Equal, 0)])
            .and_then([TxnOp::put("ok", "v", None)])
            .or_else([TxnOp::put("k", "v", with_lease(bad))]);
        assert_err(c.txn(t).await, Code::NotFound, E_LEASE_NOT_FOUND);
        // In a nested txn.
        let inner = Txn::new().and_then([TxnOp::put("k", "v", with_lease(bad))]);
        let t = Txn::new().and_then([TxnOp::put("ok", "v", None), TxnOp::txn(inner)]);
        assert_err(c.txn(t).await, Code::NotFound, E_LEASE_NOT_FOUND);
        // On the branch that does not run, it is not looked at.
        let t = Txn::new()
            .when([Compare::version("exists", CompareOp::Greater, 0)])
            .and_then([TxnOp::get("exists", None)])
            .or_else([TxnOp::put("k", "v", with_lease(bad))]);
        let r = c.txn(t).await.unwrap();
        assert!(r.succeeded());
        assert_eq!(rev(r.header()), 2);
    }
    assert_eq!(current_rev(&mut c).await, 2, "refused writes write nothing");
    assert!(get_one(&mut c, "k").await.is_none() && get_one(&mut c, "ok").await.is_none());
    assert!(attached(&mut l, live).await.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Expiry

#[tokio::test]
async fn expiry_deletes_every_key_in_one_revision_on_time() {
    let s = server!();
    let mut c = s.client().await;
    let mut l = lease_client(&s).await;
    let mut w = watch_prefix(&mut c, "/exp/", 0).await;
    let before_grant = Instant::now();
    let lease = grant(&mut l, 0, 2).await;
    let granted = Instant::now();
    let bare = grant(&mut l, 0, 2).await; // expires with no keys: no revision
    let keys = ["/exp/a", "/exp/b", "/exp/c", "/exp/d", "/exp/e"];
    for (i, k) in keys.iter().enumerate() {
        put_leased(&mut c, k, &format!("v{i}"), lease).await; // 2..=6
    }
    put_leased(&mut c, "/exp/plain", "p", 0).await; // 7
    assert_eq!(responses(&mut w, 6, WAIT).await.concat().len(), 6);

    // Poll until the keys go: never before the TTL, at most EXPIRY_SLACK after it.
    let gone_at = loop {
        let n = c
            .get("/exp/", Some(GetOptions::new().with_prefix().with_count_only()))
            .await
            .unwrap()
            .count();
        let now = Instant::now();
        if n == 1 {
            break now;
        }
        assert_eq!(n, 6, "some keys went, not all, or the plain key went");
        assert!(
            now < granted + Duration::from_secs(2) + EXPIRY_SLACK,
            "keys still there {:?} after the grant of a 2 s lease",
            now - granted
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        gone_at >= before_grant + Duration::from_secs(2),
        "keys of a 2 s lease went {:?} after the grant was sent",
        gone_at - before_grant
    );
    eprintln!("2 s lease: keys gone {:?} after the grant", gone_at - before_grant);

    let got = responses(&mut w, keys.len(), WAIT).await;
    assert_eq!(got.len(), 1, "one watch response for the expiry: {got:?}");
    assert_eq!(assert_lease_deletes(&got[0], &keys, lease), 8);
    for e in &got[0] {
        let prev = e.prev.as_ref().unwrap();
        let i: usize = keys.iter().position(|k| *k == e.key).unwrap();
        let r = 2 + i as i64;
        assert_eq!(prev, &lkv(keys[i], &format!("v{i}"), r, r, 1, lease));
    }
    assert_eq!(get_prefix(&mut c, "/exp/").await, vec![kv("/exp/plain", "p", 7, 7, 1)]);

    // The lease is gone everywhere; the key-less one went without a revision.
    assert_eq!(time_to_live(&mut l, lease, true).await.ttl, -1);
    wait_gone(&mut l, bare, WAIT).await;
    assert!(!lease_set(&mut l).await.contains(&lease));
    assert_err(c.put("/exp/a", "x", with_lease(lease)).await, Code::NotFound, E_LEASE_NOT_FOUND);
    assert_eq!(current_rev(&mut c).await, 8);
    no_more_events(&mut w).await;
}

#[tokio::test]
async fn detached_keys_survive_expiry_and_attached_ones_go() {
    let s = server!();
    let mut c = s.client().await;
    let mut l = lease_client(&s).await;
    let short = grant(&mut l, 0, 3).await;
    let long = grant(&mut l, 0, 60).await;
    let p = |k: &str| format!("/det/{k}");

    // Detached, so they survive: moved to another lease, re-put without one, deleted and
    // recreated without one, moved by a txn, deleted by a txn and recreated.
    put_leased(&mut c, &p("moved"), "1", short).await;
    put_leased(&mut c, &p("moved"), "2", long).await;
    put_leased(&mut c, &p("unleased"), "1", short).await;
    put_leased(&mut c, &p("unleased"), "2", 0).await;
    put_leased(&mut c, &p("recreated"), "1", short).await;
    c.delete(p("recreated"), None).await.unwrap();
    put_leased(&mut c, &p("recreated"), "2", 0).await;
    put_leased(&mut c, &p("txn-moved"), "1", short).await;
    c.txn(Txn::new().and_then([TxnOp::put(p("txn-moved"), "2", with_lease(long))])).await.unwrap();
    put_leased(&mut c, &p("txn-deleted"), "1", short).await;
    c.txn(Txn::new().and_then([TxnOp::delete(p("txn-deleted"), None)])).await.unwrap();
    c.txn(Txn::new().and_then([TxnOp::put(p("txn-deleted"), "2", None)])).await.unwrap();
    // Still attached, so they go: kept by ignore_lease, recreated with the lease, plain.
    put_leased(&mut c, &p("kept"), "1", short).await;
    c.put(p("kept"), "2", Some(PutOptions::new().with_ignore_lease())).await.unwrap();
    put_leased(&mut c, &p("relinked"), "1", short).await;
    c.delete(p("relinked"), None).await.unwrap();
    put_leased(&mut c, &p("relinked"), "2", short).await;
    put_leased(&mut c, &p("plain"), "1", short).await;
    let setup_rev = current_rev(&mut c).await;

    let doomed = ["/det/kept", "/det/plain", "/det/relinked"];
    assert_eq!(attached(&mut l, short).await, doomed);
    assert_eq!(attached(&mut l, long).await, ["/det/moved", "/det/txn-moved"]);
    let before = get_prefix(&mut c, "/det/").await;

    let mut w = watch_prefix(&mut c, "/det/", setup_rev + 1).await;
    let got = responses(&mut w, doomed.len(), Duration::from_secs(3) + EXPIRY_SLACK).await;
    assert_eq!(got.len(), 1, "{got:?}");
    let at = assert_lease_deletes(&got[0], &doomed, short);
    assert_eq!(at, setup_rev + 1);
    let survivors: Vec<Kv> = before
        .into_iter()
        .filter(|k| !doomed.contains(&&*String::from_utf8_lossy(&k.key)))
        .collect();
    assert_eq!(survivors.len(), 5);
    assert_eq!(get_prefix(&mut c, "/det/").await, survivors);
    no_more_events(&mut w).await;
    assert_eq!(attached(&mut l, long).await, ["/det/moved", "/det/txn-moved"]);
}

// ---------------------------------------------------------------------------------------------
// kube-apiserver's patterns

/// `store.Create` with a TTL: `MOD(k) == 0 -> Put(k, v, lease)`, no else (lease 0: no TTL).
fn create(k: &str, lease: i64) -> Txn {
    Txn::new().when([Compare::mod_revision(k, CompareOp::Equal, 0)]).and_then([TxnOp::put(
        k,
        format!("event {k}"),
        with_lease(lease),
    )])
}

/// kube-apiserver's lease manager grants one lease (the object TTL plus a reuse window) and
/// attaches every object created within the window to it, with `store.Create`'s txn
/// `MOD(k) == 0 -> Put(k, v, lease)`. Events of a namespace all go together.
#[tokio::test]
async fn kube_lease_manager_objects_expire_together() {
    const OBJECTS: usize = 1000;
    const WORKERS: usize = 8;
    let s = server!();
    let mut c = s.client().await;
    let mut l = lease_client(&s).await;
    // Scaled down: TTL 3 s plus a 2 s reuse window.
    let lease = grant(&mut l, 0, 5).await;
    let granted = Instant::now();
    let later = grant(&mut l, 0, 60).await; // the next window's lease
    let key = |i: usize| format!("/registry/events/ns/ev-{i:04}");

    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..WORKERS {
        let mut c = c.clone();
        tasks.spawn(async move {
            for i in (w..OBJECTS).step_by(WORKERS) {
                let k = key(i);
                let r = c.txn(create(&k, lease)).await.unwrap_or_else(|e| panic!("{k}: {e:?}"));
                assert!(r.succeeded(), "create {k}");
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let created_in = granted.elapsed();
    // A create of an existing object fails and leaves it on its lease.
    let t = c.txn(create(&key(7), later)).await.unwrap();
    assert!(!t.succeeded() && t.op_responses().is_empty());
    // Objects of the next window, and one without a TTL, outlive the first lease.
    for i in 0..10 {
        assert!(
            c.txn(create(&format!("/registry/events/ns/next-{i}"), later))
                .await
                .unwrap()
                .succeeded()
        );
    }
    assert!(c.txn(create("/registry/events/ns/forever", 0)).await.unwrap().succeeded());
    let last_create = current_rev(&mut c).await;
    let left = time_to_live(&mut l, lease, true).await;
    assert!(
        left.ttl > 0 && left.keys.len() == OBJECTS,
        "the {OBJECTS} creates took {created_in:?}: the 5 s lease has {} s and {} keys left",
        left.ttl,
        left.keys.len()
    );

    let mut w = watch_prefix(&mut c, "/registry/events/", last_create + 1).await;
    let got = responses(&mut w, OBJECTS, Duration::from_secs(5) + EXPIRY_SLACK).await;
    assert_eq!(got.len(), 1, "one watch response, {} events", got.concat().len());
    let keys: Vec<String> = (0..OBJECTS).map(key).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    assert_eq!(assert_lease_deletes(&got[0], &keys, lease), last_create + 1);
    assert!(got[0].iter().all(|e| e.prev.as_ref().unwrap().value.starts_with(b"event ")));
    no_more_events(&mut w).await;
    let rest = get_prefix(&mut c, "/registry/events/").await;
    assert_eq!(rest.len(), 11, "{rest:?}");
    assert!(rest.iter().all(|k| k.key.ends_with(b"forever") || k.lease == later));
    assert_eq!(time_to_live(&mut l, lease, false).await.ttl, -1);
}

/// `/registry/masterleases/<ip>` (kube-apiserver's lease endpoint reconciler): refreshed every
/// 10 s with a 15 s TTL, each time onto a new lease, through `GuaranteedUpdate`'s txn
/// `MOD(k) == rev -> Put(k, v, lease: new) else Range(k)`. Scaled down to every 1 s with a 3 s
/// TTL. The key must never disappear between refreshes, and the old leases expire without it.
#[tokio::test]
async fn kube_master_lease_refreshed_onto_new_leases_never_disappears() {
    const KEY: &str = "/registry/masterleases/10.0.0.1";
    let s = server!();
    let mut c = s.client().await;
    let mut l = lease_client(&s).await;
    let mut w = watch_prefix(&mut c, "/registry/masterleases/", 0).await;

    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicBool::new(false));
    // Reads the key continuously and counts the reads that miss it once it exists.
    let poller = {
        let (mut c, stop, seen) = (c.clone(), stop.clone(), seen.clone());
        tokio::spawn(async move {
            let (mut reads, mut misses) = (0u64, Vec::new());
            while !stop.load(Ordering::SeqCst) {
                let r = c.get(KEY, None).await.expect("poll");
                reads += 1;
                match r.kvs().first() {
                    Some(_) => seen.store(true, Ordering::SeqCst),
                    None if seen.load(Ordering::SeqCst) => misses.push(rev(r.header())),
                    None => {}
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (reads, misses)
        })
    };

    // Refreshes every second onto a new lease until told to stop; `granted` lists the leases.
    let granted: Arc<Mutex<Vec<i64>>> = Arc::default();
    let refresher = {
        let (mut c, mut l, stop, granted) = (c.clone(), l.clone(), stop.clone(), granted.clone());
        tokio::spawn(async move {
            let mut orig = 0; // GuaranteedUpdate on a missing key compares MOD == 0
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                let next = Instant::now() + Duration::from_secs(1);
                let lease = grant(&mut l, 0, 3).await;
                loop {
                    let t = Txn::new()
                        .when([Compare::mod_revision(KEY, CompareOp::Equal, orig)])
                        .and_then([TxnOp::put(KEY, format!("10.0.0.1 #{n}"), with_lease(lease))])
                        .or_else([TxnOp::get(KEY, None)]);
                    let r = c.txn(t).await.expect("refresh txn");
                    if r.succeeded() {
                        orig = rev(r.header());
                        break;
                    }
                    // Conflict: retry from the current object, as GuaranteedUpdate does.
                    match &r.op_responses()[..] {
                        [TxnOpResponse::Get(g)] => {
                            orig = g.kvs().first().map_or(0, |kv| kv.mod_revision())
                        }
                        other => panic!("failure branch answered {other:?}"),
                    }
                }
                // The key left its previous lease for the new one.
                let prev = granted.lock().unwrap().last().copied();
                if let Some(prev) = prev {
                    let r = time_to_live(&mut l, prev, true).await;
                    assert!(r.keys.is_empty(), "old lease {prev} still holds the key: {r:?}");
                }
                assert_eq!(attached(&mut l, lease).await, [KEY]);
                granted.lock().unwrap().push(lease);
                n += 1;
                tokio::time::sleep_until(next.into()).await;
            }
        })
    };

    // Keep refreshing until the first four leases have expired (each about 3 s after its
    // refresh, while the key had moved on).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if refresher.is_finished() {
            refresher.await.expect("refresher");
            panic!("the refresher stopped");
        }
        assert!(Instant::now() < deadline, "the first four leases did not expire in time");
        let first: Vec<i64> = granted.lock().unwrap().iter().take(4).copied().collect();
        let mut expired = first.len() == 4;
        for &id in &first {
            if !expired {
                break;
            }
            expired = time_to_live(&mut l, id, false).await.ttl == -1;
        }
        if expired {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::SeqCst);
    refresher.await.expect("refresher");
    let (reads, misses) = poller.await.expect("poller");
    assert!(misses.is_empty(), "the key was missing at revisions {misses:?} ({reads} reads)");
    let leases = granted.lock().unwrap().clone();
    assert!(leases.len() >= 5, "{leases:?}");
    let newest = *leases.last().unwrap();
    let kv = get_one(&mut c, KEY).await.expect("the key is there");
    assert_eq!(kv.lease, newest);

    // Every event so far is a PUT; when refreshes stop, the newest lease takes the key.
    let got = responses(&mut w, leases.len() + 1, Duration::from_secs(3) + EXPIRY_SLACK).await;
    let evs = got.concat();
    let (puts, deletes) = evs.split_at(leases.len());
    assert!(puts.iter().all(|e| !e.delete), "a DELETE while refreshing: {evs:?}");
    assert_eq!(assert_lease_deletes(deletes, &[KEY], newest), kv.mod_revision + 1);
    eprintln!("masterlease: {} refreshes, {reads} reads, no miss", leases.len());
}

// ---------------------------------------------------------------------------------------------
// etcdctl

/// One etcdctl command of the script. `{L1}`-style arguments are lease ids granted earlier.
struct Step {
    args: &'static [&'static str],
    /// Name the lease this `lease grant` prints.
    grants: Option<&'static str>,
    /// The output shows remaining TTLs of the lease it names, which depend on when each server
    /// ran it: compared with that server's own clock, not with the other server.
    remaining: bool,
}

const fn step(args: &'static [&'static str]) -> Step {
    Step { args, grants: None, remaining: false }
}

const fn grant_step(args: &'static [&'static str], name: &'static str) -> Step {
    Step { args, grants: Some(name), remaining: false }
}

const fn left(args: &'static [&'static str]) -> Step {
    Step { args, grants: None, remaining: true }
}

fn lease_script() -> Vec<Step> {
    let grant = grant_step;
    vec![
        grant(&["lease", "grant", "100"], "L1"),
        grant(&["lease", "grant", "200"], "L2"),
        step(&["lease", "grant", "9000000001"]),
        step(&["put", "k1", "v1", "--lease={L1}"]),
        step(&["put", "k2", "v2", "--lease={L1}"]),
        step(&["put", "k3", "v3", "--lease={L2}"]),
        step(&["put", "k2", "v2b", "--lease={L2}"]),
        step(&["put", "k4", "v4", "--lease=1234abcd"]),
        left(&["lease", "timetolive", "{L1}"]),
        left(&["lease", "timetolive", "{L1}", "--keys"]),
        left(&["lease", "timetolive", "{L2}", "--keys"]),
        left(&["lease", "timetolive", "{L2}", "--keys", "-w", "json"]),
        left(&["lease", "timetolive", "{L1}", "-w", "fields"]),
        step(&["lease", "keep-alive", "--once", "{L1}"]),
        step(&["lease", "keep-alive", "--once", "{L2}", "-w", "json"]),
        step(&["lease", "list"]),
        step(&["lease", "list", "-w", "json"]),
        step(&["get", "", "--prefix", "-w", "json"]),
        step(&["lease", "revoke", "{L1}"]),
        step(&["get", "", "--prefix"]),
        step(&["lease", "revoke", "{L1}"]),
        step(&["lease", "timetolive", "{L1}"]),
        step(&["lease", "timetolive", "{L1}", "--keys", "-w", "json"]),
        step(&["lease", "keep-alive", "--once", "{L1}"]),
        step(&["put", "k5", "v5", "--lease={L1}"]),
        step(&["lease", "revoke", "{L2}", "-w", "json"]),
        step(&["lease", "list"]),
        step(&["get", "", "--prefix", "--keys-only"]),
        grant(&["lease", "grant", "1"], "L3"),
        grant(&["lease", "grant", "0", "-w", "json"], "L4"),
    ]
}

#[derive(Debug, PartialEq, Eq)]
struct CtlOut {
    code: Option<i32>,
    stdout: String,
    /// Only the `Error: ...` lines (etcdctl also logs retries with timestamps and addresses).
    errors: Vec<String>,
}

fn run_etcdctl(bin: &Path, endpoint: &str, args: &[String]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--endpoints={endpoint}"))
        .arg("--command-timeout=10s")
        .arg("--dial-timeout=5s")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(|k| k.starts_with("ETCD")) {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Replaces the (possibly negative) number after each occurrence of `marker` with `R` and
/// returns the numbers.
fn take_numbers_after(text: &str, marker: &str) -> (String, Vec<i64>) {
    let mut out = String::with_capacity(text.len());
    let mut nums = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(marker) {
        let after = at + marker.len();
        out.push_str(&rest[..after]);
        rest = &rest[after..];
        let len = rest
            .char_indices()
            .take_while(|&(i, ch)| ch.is_ascii_digit() || (i == 0 && ch == '-'))
            .count();
        if let Ok(n) = rest[..len].parse() {
            nums.push(n);
            out.push('R');
            rest = &rest[len..];
        }
    }
    out.push_str(rest);
    (out, nums)
}

/// Sorts the comma- or space-separated items between `open` and the next `close` (etcd lists a
/// lease's keys in no particular order).
fn sort_list_after(text: &str, open: &str, close: char, sep: char) -> String {
    let Some(at) = text.find(open) else { return text.to_string() };
    let start = at + open.len();
    let Some(len) = text[start..].find(close) else { return text.to_string() };
    let mut items: Vec<&str> = text[start..start + len].split(sep).collect();
    items.sort();
    format!("{}{}{}", &text[..start], items.join(&sep.to_string()), &text[start + len..])
}

/// What one command of the script printed on one server.
struct ScriptOut {
    cmd: String,
    /// The output, with the remaining TTLs masked.
    out: CtlOut,
    /// The remaining TTLs it showed.
    left: Vec<i64>,
    /// The remaining TTLs this server's own clock allows for the command's lease: its granted
    /// TTL less the time since its grant (or last keep-alive), bounded by when the commands were
    /// sent and answered, with a second of tolerance and one of rounding either way.
    allowed: Option<(i64, i64)>,
}

/// Runs the script against one server.
fn run_lease_script(bin: &Path, endpoint: &str) -> Vec<ScriptOut> {
    let mut ids: BTreeMap<&'static str, i64> = BTreeMap::new();
    // Per lease name: its granted TTL, and when the grant (or keep-alive) was sent and answered.
    let mut granted: BTreeMap<&'static str, (i64, Instant, Instant)> = BTreeMap::new();
    let mut results = Vec::new();
    for st in lease_script() {
        let args: Vec<String> = st
            .args
            .iter()
            .map(|a| {
                let mut a = a.to_string();
                for (name, id) in &ids {
                    a = a.replace(&format!("{{{name}}}"), &format!("{id:x}"));
                }
                a
            })
            .collect();
        // The lease a `lease ...` command names as its own argument.
        let named = st.args.iter().find_map(|a| a.strip_prefix('{')?.strip_suffix('}'));
        let sent = Instant::now();
        let (code, stdout, stderr) = run_etcdctl(bin, endpoint, &args);
        let answered = Instant::now();
        if let (Some(name), Some(0)) = (st.grants, code) {
            let id = if stdout.starts_with('{') {
                let v: serde_json::Value = serde_json::from_str(&stdout).expect("grant json");
                v["ID"].as_i64().expect("ID")
            } else {
                let hex = stdout.split_whitespace().nth(1).expect("lease <id> granted ...");
                i64::from_str_radix(hex, 16).expect("hex lease id")
            };
            ids.insert(name, id);
            let ttl = ["TTL(", "\"TTL\":"]
                .iter()
                .find_map(|m| take_numbers_after(&stdout, m).1.first().copied())
                .unwrap_or_else(|| panic!("no granted TTL in {stdout:?}"));
            granted.insert(name, (ttl, sent, answered));
        }
        if let (["lease", "keep-alive", ..], Some(name), Some(0)) = (st.args, named, code) {
            // A keep-alive starts the lease's TTL over.
            if let Some(g) = granted.get_mut(name) {
                (g.1, g.2) = (sent, answered);
            }
        }
        let allowed = named.filter(|_| st.remaining).and_then(|n| granted.get(n)).map(
            |&(ttl, g_sent, g_answered)| {
                // The time the server's lease has run lies between these two.
                let longest = answered.duration_since(g_sent).as_secs_f64();
                let shortest = sent.saturating_duration_since(g_answered).as_secs_f64();
                let ttl = ttl as f64;
                ((ttl - longest).floor() as i64 - 1, (ttl - shortest).ceil() as i64 + 1)
            },
        );
        let mut text = stdout;
        for (name, id) in &ids {
            text = text.replace(&format!("{id:016x}"), name).replace(&id.to_string(), name);
        }
        text = mask_numbers_after(&text, &ID_FIELDS);
        text = sort_list_after(&text, "attached keys([", ']', ' ');
        text = sort_list_after(&text, "\"keys\":[", ']', ',');
        let mut left = Vec::new();
        if st.remaining {
            for marker in ["remaining(", "\"ttl\":", "\"TTL\" : "] {
                let (t, n) = take_numbers_after(&text, marker);
                text = t;
                left.extend(n);
            }
        }
        let errors = stderr.lines().filter(|l| l.starts_with("Error:")).map(String::from).collect();
        results.push(ScriptOut {
            cmd: args.join(" "),
            out: CtlOut { code, stdout: text, errors },
            left,
            allowed,
        });
    }
    results
}

/// The remaining TTLs of `side`'s commands that its own clock does not allow.
fn remaining_off_clock(side: &str, outs: &[ScriptOut]) -> Vec<String> {
    outs.iter()
        .filter(|o| match o.allowed {
            Some((lo, hi)) => o.left.iter().any(|l| !(lo..=hi).contains(l)),
            None => !o.left.is_empty(),
        })
        .map(|o| {
            format!(
                "etcdctl {} on {side}: remaining {:?}, its clock allows {:?}",
                o.cmd, o.left, o.allowed
            )
        })
        .collect()
}

#[test]
fn etcdctl_output_masking() {
    assert_eq!(
        take_numbers_after("remaining(99s) \"ttl\":-1,", "remaining("),
        ("remaining(Rs) \"ttl\":-1,".to_string(), vec![99])
    );
    assert_eq!(take_numbers_after("\"ttl\":-1,", "\"ttl\":").1, vec![-1]);
    assert_eq!(
        sort_list_after("x, attached keys([k2 k1 k3])\n", "attached keys([", ']', ' '),
        "x, attached keys([k1 k2 k3])\n"
    );
    assert_eq!(
        sort_list_after("\"keys\":[\"b\",\"a\"]}", "\"keys\":[", ']', ','),
        "\"keys\":[\"a\",\"b\"]}"
    );
}

#[tokio::test]
async fn etcdctl_lease_commands_print_what_etcd_prints() {
    let Some(ctl) = peer_binary("etcdctl") else { return };
    let etcd = server_of!(Kind::Etcd);
    let tgt = server!();
    let (e_ep, t_ep) = (etcd.addr().to_string(), tgt.addr().to_string());
    let ctl2 = ctl.clone();
    let want = tokio::task::spawn_blocking(move || run_lease_script(&ctl, &e_ep));
    let got = tokio::task::spawn_blocking(move || run_lease_script(&ctl2, &t_ep));
    let (want, got) = (want.await.unwrap(), got.await.unwrap());
    // The remaining TTLs are masked in the comparison (the two scripts need not keep pace);
    // each side's are checked against its own clock instead.
    let mut failures = Vec::new();
    for (w, g) in want.iter().zip(&got) {
        if w.out != g.out || w.left.len() != g.left.len() {
            failures.push(format!(
                "etcdctl {}:\n  etcd:   {:?} remaining {:?}\n  target: {:?} remaining {:?}",
                w.cmd, w.out, w.left, g.out, g.left
            ));
        }
    }
    failures.extend(remaining_off_clock("etcd", &want));
    failures.extend(remaining_off_clock("target", &got));
    assert!(
        failures.is_empty(),
        "{} of {} commands differ:\n{}",
        failures.len(),
        want.len(),
        failures.join("\n")
    );
    // Sanity: the script saw grants, successes and errors, remaining TTLs, and the expected texts.
    let text = |i: usize| &want[i].out.stdout;
    assert_eq!(text(0), "lease L1 granted with TTL(100s)\n");
    assert!(want.iter().any(|o| o.out.code != Some(0) && !o.out.errors.is_empty()));
    assert!(want.iter().any(|o| o.out.stdout.contains("already expired")));
    assert!(want.iter().any(|o| o.out.stdout.contains("attached keys([k2 k3])")));
    assert!(want.iter().any(|o| o.allowed.is_some() && !o.left.is_empty()));
    assert!(
        want.last().unwrap().out.stdout.contains("\"TTL\":2"),
        "{:?}",
        want.last().unwrap().out
    );
}

// ---------------------------------------------------------------------------------------------
// Figures

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// 10 000 leases with one key each, expiring together. Not timed as a pass/fail criterion: it
/// asserts only that every key goes and nothing fails, and prints how long that took after the
/// deadline and the latency of a concurrent writer's puts meanwhile (through `loud`, so the
/// figures show even without `--nocapture`;
/// `cargo test --release --test it lease::expiry_of_10k -- --nocapture` shows the test alone).
///
/// The leases are granted with a 5 s TTL (granting and attaching 10 000 takes a while on a real
/// etcd), then renewed in one burst on one keep-alive stream so their deadlines fall together.
/// etcd revokes at most 1000 expired leases a second, so against it the keys take ~10 s to go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_of_10k_leases_figures() {
    const N: usize = 10_000;
    const TTL: i64 = 5;
    const WORKERS: usize = 16;
    const PREFIX: &str = "/bench/lease/";
    let s = server!();
    let kind = target();
    let mut c = s.client().await;
    let raw = s.raw_clients().await;
    let l = LeaseClient::new(raw.channel.clone());
    let start = Instant::now();

    // Grant.
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..WORKERS {
        let mut l = l.clone();
        tasks.spawn(async move {
            let mut ids = Vec::new();
            for _ in (w..N).step_by(WORKERS) {
                ids.push(grant(&mut l, 0, TTL).await);
            }
            ids
        });
    }
    let mut ids = Vec::with_capacity(N);
    while let Some(r) = tasks.join_next().await {
        ids.extend(r.unwrap());
    }
    let granted = start.elapsed();

    // Renews every lease on one stream, all requests pipelined; returns when the last answer
    // came, after checking every lease was alive.
    async fn renew_all(l: &LeaseClient<Channel>, ids: &[i64]) -> (Instant, Instant) {
        let (tx, rx) = mpsc::channel(ids.len());
        for &id in ids {
            tx.send(pb::LeaseKeepAliveRequest { id }).await.unwrap();
        }
        let sent = Instant::now();
        let mut l = l.clone();
        let mut stream = l.lease_keep_alive(ReceiverStream::new(rx)).await.unwrap().into_inner();
        for _ in ids {
            let r = stream.message().await.expect("keep-alive").expect("answer");
            assert_eq!(r.ttl, TTL, "lease {} expired before the renewal burst", r.id);
        }
        drop(tx);
        (sent, Instant::now())
    }
    renew_all(&l, &ids).await;

    // Attach one key to each.
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..WORKERS {
        let mut kv = raw.kv.clone();
        let mine: Vec<(usize, i64)> =
            ids.iter().copied().enumerate().skip(w).step_by(WORKERS).collect();
        tasks.spawn(async move {
            for (i, lease) in mine {
                let key = format!("{PREFIX}{i:05}");
                kv.put(pb::PutRequest {
                    key: key.into_bytes().into(),
                    value: bytes::Bytes::from_static(b"x"),
                    lease,
                    ..Default::default()
                })
                .await
                .unwrap_or_else(|e| panic!("put with lease {lease}: {e:?}"));
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let attached_at = start.elapsed();
    let rev_before = current_rev(&mut c).await;

    // Watch the keys go.
    let deletes = Arc::new(AtomicUsize::new(0));
    let mut w = c.watch(PREFIX, Some(WatchOptions::new().with_prefix())).await.unwrap();
    let created = w.message().await.unwrap().unwrap();
    assert!(created.created());
    let watcher = {
        let deletes = deletes.clone();
        tokio::spawn(async move {
            let mut revs = BTreeSet::new();
            while deletes.load(Ordering::SeqCst) < N {
                let msg = w.message().await.expect("watch").expect("watch open");
                for e in msg.events() {
                    assert_eq!(e.event_type(), EventType::Delete, "{e:?}");
                    revs.insert(e.kv().unwrap().mod_revision());
                    deletes.fetch_add(1, Ordering::SeqCst);
                }
            }
            (Instant::now(), revs.len())
        })
    };

    // Align the deadlines: renew every lease in one burst.
    let (burst_sent, burst_done) = renew_all(&l, &ids).await;
    let first_deadline = burst_sent + Duration::from_secs(TTL as u64);
    let last_deadline = burst_done + Duration::from_secs(TTL as u64);

    // A writer puts one key in a loop, timing each put, until the keys are gone.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (mut kv, stop) = (raw.kv.clone(), stop.clone());
        tokio::spawn(async move {
            let mut samples: Vec<(Instant, Duration)> = Vec::new();
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let t = Instant::now();
                kv.put(pb::PutRequest {
                    key: bytes::Bytes::from_static(b"/bench/writer"),
                    value: i.to_string().into_bytes().into(),
                    ..Default::default()
                })
                .await
                .expect("writer put");
                samples.push((t, t.elapsed()));
                i += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            samples
        })
    };

    let (all_gone, revisions) = tokio::time::timeout(Duration::from_secs(60), watcher)
        .await
        .unwrap_or_else(|_| {
            panic!("only {} of {N} keys deleted 60 s after", deletes.load(Ordering::SeqCst))
        })
        .expect("watcher");
    stop.store(true, Ordering::SeqCst);
    let samples = writer.await.expect("writer");

    // Correctness: every key and lease is gone, nothing else was deleted.
    let left = c.get(PREFIX, Some(GetOptions::new().with_prefix().with_count_only())).await;
    assert_eq!(left.unwrap().count(), 0);
    let lc = l.clone();
    wait_until("no lease listed once their keys went", WAIT, || {
        let mut lc = lc.clone();
        async move { lease_ids(&mut lc).await.is_empty() }
    })
    .await;
    assert!(get_one(&mut c, "/bench/writer").await.is_some());
    assert!(all_gone >= first_deadline, "keys went before their leases' deadline");

    let lat = |from: Instant, to: Instant| {
        let mut v: Vec<Duration> =
            samples.iter().filter(|(t, _)| *t >= from && *t <= to).map(|s| s.1).collect();
        v.sort();
        v
    };
    let during = lat(first_deadline, all_gone);
    let before = lat(burst_done, first_deadline);
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1000.0);
    let fig = |v: &[Duration]| {
        format!(
            "n={} p50={} p99={} max={}",
            v.len(),
            ms(percentile(v, 0.5)),
            ms(percentile(v, 0.99)),
            ms(v.last().copied().unwrap_or_default())
        )
    };
    loud(&format!(
        "lease expiry figures ({kind:?}, {N} leases x 1 key, TTL {TTL} s):\n\
         setup: grants {granted:?}, keys attached at {attached_at:?}, revision {rev_before}; \
         renewal burst {:?}\n\
         all keys gone {} after the last deadline ({} after the first), in {revisions} revisions\n\
         writer puts before the deadline: {}\n\
         writer puts from the deadline until all keys gone: {}",
        burst_done - burst_sent,
        ms(all_gone.saturating_duration_since(last_deadline)),
        ms(all_gone - first_deadline),
        fig(&before),
        fig(&during),
    ));
}
