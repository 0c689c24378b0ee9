//! `mem_etcd follow --source URL --target URL`: keeps a copy of a running store at the
//! source's revisions, for a live move from etcd (issue 51). etcdctl's `make-mirror` copies
//! keys but not revisions; this keeps every key's create and mod revision, version, lease and
//! value, and the store's revision, equal to the source's at every step, so kube-apiserver
//! moved onto the copy goes on at the same resourceVersions.
//!
//! The target is a mem_etcd (a member alone or a cluster) started from the source's snapshot
//! at revision R (`etcdctl snapshot save`, `mem_etcd snapshot restore`) that nothing else
//! writes to. The command first checks that the copy is exact at R (HashKV, then `check
//! copy`'s walk key by key only to show a difference), then
//! watches the whole keyspace of the source from R + 1 and applies each source revision as one
//! Txn on the target, through the target's own write path: with the same state before it, the
//! same puts and deletes give the same revision, versions and create revisions. A Txn answered
//! at any other revision stops the command (something else wrote to the target).
//!
//! The watch carries neither leases nor compactions, so it reads them as the API allows:
//! - A put with a lease the target does not have is preceded by a grant of that id with the
//!   source's TTL; every lease the target holds is kept alive from here (a copy must not
//!   expire a lease the source keeps), and revoked once the source no longer lists it and the
//!   target has applied every revision up to the one that listing was made at (the source
//!   deleted its keys at or before it, so the revocation deletes nothing).
//! - The source's compaction revision is the oldest revision it still answers a Range at
//!   (found by bisection); the target compacts there too. Neither bumps a revision.
//!
//! Either store may be a cluster, given as its members' client URLs; one member is used at a
//! time, and the next when it stops answering (down, frozen, cut off). Either store may stop
//! answering for up to a minute (a member restarting, a leader change): the watch is opened
//! again from the next revision and the target's leases are kept alive meanwhile. A Txn whose
//! call failed may yet be applied, so each compares its keys' mod revisions with its own
//! revision: sent again, it changes nothing once one send of it was applied.
//!
//! The snapshot carries the auth state at R; later changes to roles, permissions and users
//! are followed as [`super::auth_sync`] says (passwords cannot be).
//!
//! With `--until-idle D`, the command is the cut-over: once the source has taken no write for
//! D and the target holds its last revision, it checks the copy exact again and exits 0; the
//! target can then take kube-apiserver's writes.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;

use super::auth_sync::AuthSync;
use super::check::{hashes, head, walk};
use super::client::{Access, CALL_TIMEOUT, Conn, Store};
use super::lag::Lag;
use crate::proto::etcdserverpb as pb;
use crate::proto::mvccpb;

/// Keep a copy of a running store at the source's revisions
#[derive(Parser, Debug)]
#[command(name = "mem_etcd follow", bin_name = "mem_etcd follow")]
struct Args {
    /// The source's client URL (etcd's or mem_etcd's); a cluster's, comma-separated, to go on
    /// through another member when one stops answering.
    #[arg(long)]
    source: String,
    /// The copy's client URL (or a cluster's, comma-separated): a mem_etcd started from the
    /// source's snapshot.
    #[arg(long)]
    target: String,
    #[command(flatten)]
    access: Access,
    /// The cut-over: stop once the source has taken no write for this long (e.g. `5s`) and
    /// the copy checks exact. Without it, follows until stopped.
    #[arg(long, value_parser = crate::duration::parse_duration)]
    until_idle: Option<Duration>,
    /// Serve the lag on `/metrics` here (`http://host:port`), as etcd's flag of that name.
    #[arg(long)]
    listen_metrics_urls: Option<String>,
}

/// Runs `mem_etcd follow ...` (`args` from `follow` on) and returns the exit status: 0 after
/// a cut-over with the copy exact, 1 when the copy is not (or stops being) the source's, 2
/// when it could not follow.
pub fn run(args: impl Iterator<Item = OsString>) -> i32 {
    let args = match Args::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mem_etcd follow: {e}");
            return 2;
        }
    };
    match runtime.block_on(follow(args)) {
        Ok(rev) => {
            println!("cut-over: the copy is exact at revision {rev}");
            0
        }
        Err(Failure::Differs(e)) => {
            eprintln!("mem_etcd follow: {e}");
            1
        }
        Err(Failure::Cannot(e)) => {
            eprintln!("mem_etcd follow: {e}");
            2
        }
    }
}

enum Failure {
    /// The copy is not the source's (or stopped being it).
    Differs(String),
    /// Following failed (a store unreachable, a call refused).
    Cannot(String),
}

impl From<String> for Failure {
    fn from(e: String) -> Self {
        Failure::Cannot(e)
    }
}

/// How long the source or the target may not answer before `follow` gives up.
const OUTAGE: Duration = Duration::from_secs(60);

/// How long a Txn may go unanswered before it is sent again (a target leader election takes
/// about a second).
const TXN_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the source's head is polled (the idle window of the cut-over is measured in
/// these), the leases kept alive, the leases and the compaction looked at, and the lag
/// reported: every 250 ms, 5 s and 10 s.
const TICK: Duration = Duration::from_millis(250);
const SWEEP_EVERY: u32 = 20;
const REPORT_EVERY: u32 = 40;

async fn follow(args: Args) -> Result<i64, Failure> {
    let source = Store::connect(&args.access, &args.source, "source").await?;
    let target = Store::connect(&args.access, &args.target, "target").await?;
    let start = head(&mut pb::kv_client::KvClient::new(target.conn.clone()), "target").await?;
    let (source_conn, target_conn) = (source.conn.clone(), target.conn.clone());
    let mut f = Follower::new(source, target, start).await?;
    if let Some(url) = &args.listen_metrics_urls {
        f.lag.serve(url).await?;
    }
    // The snapshot's leases are kept alive while the copy is checked: on a store of millions
    // of keys the check takes minutes, longer than kube-apiserver's 15 s leases.
    let mut tick = tokio::time::interval(TICK);
    let check = exact(&source_conn, &target_conn, start);
    tokio::pin!(check);
    f.compacted = loop {
        tokio::select! {
            r = &mut check => break r?,
            _ = tick.tick() => f.keep_alive().await?,
        }
    };
    println!("following {} from revision {}", f.source.url(), start + 1);
    f.auth.sync(&f.source.conn, &f.target.conn).await;

    let mut watch = f.watch(start + 1).await?;
    let mut ticks = 0u32;
    // The source's head and since when every poll has seen it so.
    let mut quiet: Option<(i64, Instant)> = None;
    let mut source_down: Option<Instant> = None;
    loop {
        tokio::select! {
            msg = watch.1.message() => {
                let resp = match msg {
                    Ok(Some(resp)) => resp,
                    lost => {
                        let why = lost.err().map_or("it ended".into(), |e| e.message().to_string());
                        println!("source: the watch was lost ({why}); watching again from revision {}", f.applied + 1);
                        quiet = None;
                        watch = f.watch(f.applied + 1).await?;
                        continue;
                    }
                };
                if resp.compact_revision != 0 {
                    return Err(Failure::Cannot(format!(
                        "source: compacted at {} past the copy's revision {}: restore the copy \
                         from a newer snapshot",
                        resp.compact_revision, f.applied
                    )));
                }
                if resp.canceled {
                    return Err(format!("source: the watch was cancelled: {}", resp.cancel_reason).into());
                }
                f.apply(resp.events, Instant::now()).await?;
            }
            _ = tick.tick() => {
                ticks += 1;
                f.keep_alive().await?;
                // A source member that does not answer (restarting, frozen, cut off) is left for
                // the next URL, and the watch opened again there; one source that does not
                // answer is waited for, the target's leases kept alive meanwhile.
                let source_head = match f.source_head().await {
                    Ok(h) => {
                        source_down = None;
                        f.lag.source_at(h);
                        h
                    }
                    Err(e) => {
                        quiet = None;
                        if source_down.get_or_insert_with(Instant::now).elapsed() > OUTAGE {
                            return Err(e.into());
                        }
                        println!("{e}; going on through the next source URL");
                        if f.source.fail_over().await.is_ok() {
                            watch = f.watch(f.applied + 1).await?;
                        }
                        continue;
                    }
                };
                if ticks.is_multiple_of(SWEEP_EVERY) {
                    // A source member lost here is found by the next tick's head.
                    if let Err(e) = f.sweep_leases().await.and(f.follow_compaction().await.map_err(Failure::Cannot)) {
                        match e {
                            Failure::Cannot(e) => println!("{e}; trying again"),
                            differs => return Err(differs),
                        }
                    }
                    f.auth.sync(&f.source.conn, &f.target.conn).await;
                }
                if ticks.is_multiple_of(REPORT_EVERY) {
                    println!(
                        "applied revision {}, source at {} ({} behind); {}",
                        f.applied,
                        source_head,
                        source_head - f.applied,
                        f.lag.report()
                    );
                }
                // Idle is the source's head seen unchanged (not a quiet watch, which an
                // outage makes quiet too).
                if quiet.is_none_or(|(h, _)| h != source_head) {
                    quiet = Some((source_head, Instant::now()));
                }
                if let Some(idle) = args.until_idle
                    && let Some((h, since)) = quiet
                    && since.elapsed() >= idle
                    && h == f.applied
                {
                    f.sweep_leases().await?;
                    f.follow_compaction().await?;
                    f.auth.sync(&f.source.conn, &f.target.conn).await;
                    println!("idle for {idle:?} at revision {}; {}", f.applied, f.lag.report());
                    println!("followed from revision {}: {}", start + 1, f.lag.whole());
                    exact(&f.source.conn, &f.target.conn, f.applied).await?;
                    return Ok(f.applied);
                }
            }
        }
    }
}

/// Whether the copy is the source at `rev`: HashKV of both, asked at once (equal hashes at
/// equal compaction revisions are equal histories; on a store of a million keys it takes a
/// second, where a walk key by key takes minutes, etcd counting the rest of the range for
/// every page). A difference is then walked key by key, to print it, and stops the command.
/// Returns the target's compaction revision.
async fn exact(source: &Conn, target: &Conn, rev: i64) -> Result<i64, Failure> {
    match hashes(source.clone(), target.clone(), rev).await? {
        (None, compacted) => Ok(compacted),
        (Some(d), _) => {
            println!("differs: {d}");
            let n = walk(source.clone(), target.clone(), rev, 20).await? + 1;
            Err(Failure::Differs(format!(
                "the copy differs from the source at {rev}: {n} difference(s)"
            )))
        }
    }
}

/// Opens a LeaseKeepAlive stream on the target; its answers are read and dropped.
async fn keep_alive_stream(
    target: &Conn,
) -> Result<tokio::sync::mpsc::Sender<pb::LeaseKeepAliveRequest>, String> {
    let (tx, rx) = tokio::sync::mpsc::channel(1024);
    let mut lease = pb::lease_client::LeaseClient::new(target.clone());
    let stream = lease.lease_keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx)).await;
    let mut answers =
        stream.map_err(|e| format!("target: LeaseKeepAlive: {}", e.message()))?.into_inner();
    tokio::spawn(async move { while let Ok(Some(_)) = answers.message().await {} });
    Ok(tx)
}

/// The request side of a watch: the watch lasts as long as it is held.
type WatchSender = tokio::sync::mpsc::Sender<pb::WatchRequest>;

/// The copy being kept: what it has applied, and the leases it keeps alive.
struct Follower {
    source: Store,
    target: Store,
    /// The last source revision the target holds.
    applied: i64,
    /// The target's leases: id → (TTL, when the next keep-alive is due).
    leases: BTreeMap<i64, (i64, Instant)>,
    /// The target's compaction revision.
    compacted: i64,
    keep_alive: tokio::sync::mpsc::Sender<pb::LeaseKeepAliveRequest>,
    /// How long each revision took from the watch's answer to the target's.
    lag: Lag,
    /// The source's auth state, brought to the target.
    auth: AuthSync,
}

impl Follower {
    /// The follower of a copy at `applied`, which keeps alive the leases the copy has. Its
    /// compaction revision is set once the copy is checked.
    async fn new(source: Store, target: Store, applied: i64) -> Result<Self, String> {
        let tx = keep_alive_stream(&target.conn).await?;
        let mut lease = pb::lease_client::LeaseClient::new(target.conn.clone());
        let mut f = Follower {
            source,
            target,
            applied,
            leases: BTreeMap::new(),
            compacted: 0,
            keep_alive: tx,
            lag: Lag::new(applied),
            auth: AuthSync::default(),
        };
        // The snapshot's leases, kept alive from now on.
        let listed = lease.lease_leases(pb::LeaseLeasesRequest {}).await;
        let listed = listed.map_err(|e| format!("target: LeaseLeases: {}", e.message()))?;
        for l in listed.into_inner().leases {
            let ttl = f.ttl_on(&f.target.conn.clone(), l.id).await?.max(1);
            f.leases.insert(l.id, (ttl, Instant::now()));
        }
        Ok(f)
    }

    /// Watches the whole source from `rev`, trying for [`OUTAGE`] (the target's leases kept
    /// alive meanwhile). The sender is kept with the stream: dropping it would end the watch.
    async fn watch(
        &mut self,
        rev: i64,
    ) -> Result<(WatchSender, tonic::Streaming<pb::WatchResponse>), Failure> {
        let since = Instant::now();
        loop {
            let (tx, rx) = tokio::sync::mpsc::channel(1);
            let create = pb::WatchCreateRequest {
                key: Bytes::from_static(b"\0"),
                range_end: Bytes::from_static(b"\0"),
                start_revision: rev,
                ..Default::default()
            };
            let req = pb::WatchRequest {
                request_union: Some(pb::watch_request::RequestUnion::CreateRequest(create)),
            };
            tx.send(req).await.map_err(|_| "source: watch closed".to_string())?;
            // A response may batch many revisions of objects up to etcd's request limit each:
            // no bound of tonic's 4 MiB default.
            let mut client = pb::watch_client::WatchClient::new(self.source.conn.clone())
                .max_decoding_message_size(usize::MAX);
            match client.watch(tokio_stream::wrappers::ReceiverStream::new(rx)).await {
                Ok(stream) => return Ok((tx, stream.into_inner())),
                Err(e) if since.elapsed() > OUTAGE => {
                    return Err(format!("source: Watch: {}", e.message()).into());
                }
                Err(e) => {
                    println!("source: Watch at {}: {}", self.source.url(), e.message());
                    self.keep_alive().await?;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if let Err(e) = self.source.fail_over().await {
                        println!("{e}");
                    }
                }
            }
        }
    }

    /// Applies a watch response's events, one Txn per source revision.
    async fn apply(
        &mut self,
        events: Vec<mvccpb::Event>,
        received: Instant,
    ) -> Result<(), Failure> {
        let mut i = 0;
        while i < events.len() {
            let rev = events[i].kv.as_ref().map_or(0, |kv| kv.mod_revision);
            let (mut ops, mut compare) = (Vec::new(), Vec::new());
            while i < events.len() && events[i].kv.as_ref().map_or(0, |kv| kv.mod_revision) == rev {
                let ev = &events[i];
                let kv = ev.kv.clone().unwrap_or_default();
                compare.push(pb::Compare {
                    result: pb::compare::CompareResult::Less as i32,
                    target: pb::compare::CompareTarget::Mod as i32,
                    key: kv.key.clone(),
                    target_union: Some(pb::compare::TargetUnion::ModRevision(rev)),
                    ..Default::default()
                });
                let op = if ev.r#type == mvccpb::event::EventType::Delete as i32 {
                    pb::request_op::Request::RequestDeleteRange(pb::DeleteRangeRequest {
                        key: kv.key,
                        ..Default::default()
                    })
                } else {
                    if kv.lease != 0 {
                        self.grant(kv.lease).await?;
                    }
                    pb::request_op::Request::RequestPut(pb::PutRequest {
                        key: kv.key,
                        value: kv.value,
                        lease: kv.lease,
                        ..Default::default()
                    })
                };
                ops.push(pb::RequestOp { request: Some(op) });
                i += 1;
            }
            if rev != self.applied + 1 {
                return Err(Failure::Differs(format!(
                    "the source's watch gave revision {rev} after {}",
                    self.applied
                )));
            }
            let txn = pb::TxnRequest { compare, success: ops, ..Default::default() };
            let got = self.txn(txn, rev).await?;
            if got != rev {
                return Err(Failure::Differs(format!(
                    "the target applied the source's revision {rev} at {got}: something else \
                     writes to it"
                )));
            }
            self.applied = rev;
            self.lag.applied(rev, received.elapsed());
        }
        Ok(())
    }

    /// Sends `txn` (the source's revision `rev`) to the target and returns the revision it
    /// was applied at. A call that failed or took too long (a leader change, a member down)
    /// may still be applied, now or later: the Txn's compares (every key's mod revision below
    /// `rev`) make any send of it after the first applied one change nothing, so it is sent
    /// again until one answers, through the next target URL when the one in use is down.
    async fn txn(&mut self, txn: pb::TxnRequest, rev: i64) -> Result<i64, Failure> {
        let since = Instant::now();
        loop {
            let mut kv = pb::kv_client::KvClient::new(self.target.conn.clone());
            let e = match tokio::time::timeout(TXN_TIMEOUT, kv.txn(txn.clone())).await {
                Ok(Ok(r)) => {
                    let r = r.into_inner();
                    let at = r.header.map_or(0, |h| h.revision);
                    // Not succeeded: its keys are at `rev` already, by an earlier send.
                    return Ok(if r.succeeded || at < rev { at } else { rev });
                }
                Ok(Err(e)) => e.message().to_string(),
                Err(_) => format!("no answer in {TXN_TIMEOUT:?}"),
            };
            let e = format!("target: Txn of revision {rev} at {}: {e}", self.target.url());
            if since.elapsed() > OUTAGE {
                return Err(e.into());
            }
            self.keep_alive().await?;
            tokio::time::sleep(Duration::from_millis(200)).await;
            match tokio::time::timeout(CALL_TIMEOUT, head(&mut kv, "target")).await {
                Ok(Ok(n)) if n < rev - 1 => {
                    return Err(Failure::Differs(format!(
                        "{e}; the target is back at revision {n}: it lost revisions it had \
                         applied (a restart in --wal-mode none, or buffered after a crash of its \
                         machine)"
                    )));
                }
                Ok(Ok(_)) => println!("{e}; sending it again"),
                _ => {
                    println!("{e}; sending it again through the next target URL");
                    self.target.fail_over().await?;
                    self.keep_alive = keep_alive_stream(&self.target.conn).await?;
                }
            }
        }
    }

    /// The source's head, from the member in use.
    async fn source_head(&mut self) -> Result<i64, String> {
        let mut kv = pb::kv_client::KvClient::new(self.source.conn.clone());
        match tokio::time::timeout(CALL_TIMEOUT, head(&mut kv, "source")).await {
            Ok(r) => r.map_err(|e| format!("{e} (at {})", self.source.url())),
            Err(_) => {
                Err(format!("source: no answer in {CALL_TIMEOUT:?} at {}", self.source.url()))
            }
        }
    }

    /// The TTL a lease was granted with (its remaining TTL if that is unknown; 0 if gone).
    async fn ttl_on(&self, on: &Conn, id: i64) -> Result<i64, String> {
        let mut lease = pb::lease_client::LeaseClient::new(on.clone());
        let r = lease.lease_time_to_live(pb::LeaseTimeToLiveRequest { id, keys: false }).await;
        let r = r.map_err(|e| format!("LeaseTimeToLive {id:x}: {}", e.message()))?.into_inner();
        Ok(if r.granted_ttl > 0 { r.granted_ttl } else { r.ttl.max(0) })
    }

    /// Grants the target lease `id` as the source granted it, unless it has it.
    async fn grant(&mut self, id: i64) -> Result<(), String> {
        if self.leases.contains_key(&id) {
            return Ok(());
        }
        // A lease the source has revoked since still gets its keys until the revocation's
        // revision deletes them: a minute holds it that long.
        let ttl = match self.ttl_on(&self.source.conn.clone(), id).await? {
            0 => 60,
            t => t,
        };
        let mut lease = pb::lease_client::LeaseClient::new(self.target.conn.clone());
        let r = lease.lease_grant(pb::LeaseGrantRequest { ttl, id }).await;
        match r {
            Ok(_) => {}
            Err(e) if e.message() == "etcdserver: lease already exists" => {}
            Err(e) => return Err(format!("target: LeaseGrant {id:x}: {}", e.message())),
        }
        self.leases.insert(id, (ttl, Instant::now()));
        Ok(())
    }

    /// Keeps alive every target lease whose keep-alive is due (a third of its TTL).
    async fn keep_alive(&mut self) -> Result<(), String> {
        let now = Instant::now();
        for (id, (ttl, due)) in self.leases.iter_mut() {
            if *due <= now {
                let req = pb::LeaseKeepAliveRequest { id: *id };
                if self.keep_alive.send(req).await.is_err() {
                    // The stream ended with its connection (a target member restarting): it is
                    // opened again at the next tick; a target that is down expires nothing.
                    match keep_alive_stream(&self.target.conn).await {
                        Ok(tx) => self.keep_alive = tx,
                        Err(e) => println!("{e}; trying again"),
                    }
                    return Ok(());
                }
                *due = now + Duration::from_millis((*ttl as u64 * 1000 / 3).max(500));
            }
        }
        Ok(())
    }

    /// Revokes on the target the leases the source no longer lists, once the target holds
    /// every revision up to that listing's.
    async fn sweep_leases(&mut self) -> Result<(), Failure> {
        let mut lease = pb::lease_client::LeaseClient::new(self.source.conn.clone());
        let r = lease.lease_leases(pb::LeaseLeasesRequest {}).await;
        let r = r.map_err(|e| format!("source: LeaseLeases: {}", e.message()))?.into_inner();
        let at = r.header.map_or(0, |h| h.revision);
        if self.applied < at {
            return Ok(());
        }
        let listed: std::collections::BTreeSet<i64> = r.leases.iter().map(|l| l.id).collect();
        let gone: Vec<i64> =
            self.leases.keys().copied().filter(|id| !listed.contains(id)).collect();
        let mut target = pb::lease_client::LeaseClient::new(self.target.conn.clone());
        for id in gone {
            let ttl =
                target.lease_time_to_live(pb::LeaseTimeToLiveRequest { id, keys: true }).await;
            let ttl =
                ttl.map_err(|e| format!("target: LeaseTimeToLive {id:x}: {}", e.message()))?;
            if !ttl.get_ref().keys.is_empty() {
                return Err(Failure::Differs(format!(
                    "lease {id:x} is gone from the source at revision {at} but holds keys on the \
                     target"
                )));
            }
            match target.lease_revoke(pb::LeaseRevokeRequest { id }).await {
                Ok(_) => {}
                Err(e) if e.message() == "etcdserver: requested lease not found" => {}
                Err(e) => return Err(format!("target: LeaseRevoke {id:x}: {}", e.message()).into()),
            }
            self.leases.remove(&id);
        }
        Ok(())
    }

    /// Compacts the target where the source has compacted, up to what it holds.
    async fn follow_compaction(&mut self) -> Result<(), String> {
        let mut kv = pb::kv_client::KvClient::new(self.source.conn.clone());
        // The oldest revision in (compacted, applied] the source still answers.
        let (mut lo, mut hi) = (self.compacted.max(1), self.applied);
        if lo >= hi {
            return Ok(());
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let req = pb::RangeRequest {
                key: Bytes::from_static(b"\0"),
                revision: mid,
                limit: 1,
                keys_only: true,
                ..Default::default()
            };
            match kv.range(req).await {
                Ok(_) => hi = mid,
                Err(e) if e.code() == tonic::Code::OutOfRange => lo = mid + 1,
                Err(e) => return Err(format!("source: Range at {mid}: {}", e.message())),
            }
        }
        if lo > self.compacted.max(1) {
            let mut kv = pb::kv_client::KvClient::new(self.target.conn.clone());
            let r = kv.compact(pb::CompactionRequest { revision: lo, physical: false }).await;
            r.map_err(|e| format!("target: Compact at {lo}: {}", e.message()))?;
            println!("compacted at {lo}, as the source");
            self.compacted = lo;
        }
        Ok(())
    }
}
