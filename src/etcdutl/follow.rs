//! `mem_etcd follow --source URL --target URL`: keeps a copy of a running store at the
//! source's revisions, for a live move from etcd (issue 51). etcdctl's `make-mirror` copies
//! keys but not revisions; this keeps every key's create and mod revision, version, lease and
//! value, and the store's revision, equal to the source's at every step, so kube-apiserver
//! moved onto the copy goes on at the same resourceVersions.
//!
//! The target is a mem_etcd (a member alone or a cluster) started from the source's snapshot
//! at revision R (`etcdctl snapshot save`, `mem_etcd snapshot restore`) that nothing else
//! writes to. The command first checks that the copy is exact at R (`check copy`), then
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
//! Either store may stop answering for up to a minute (a member restarting, a leader
//! change): the watch is opened again from the next revision, the target's leases are kept
//! alive meanwhile, and a Txn whose call failed is sent again only if the target's head shows
//! it was not applied.
//!
//! Auth changes after R are not followed (the snapshot carries the auth state at R).
//!
//! With `--until-idle D`, the command is the cut-over: once the source has taken no write for
//! D and the target holds its last revision, it checks the copy exact again and exits 0; the
//! target can then take kube-apiserver's writes.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;

use super::check::{compare, head};
use super::client::{Access, Conn};
use crate::proto::etcdserverpb as pb;
use crate::proto::mvccpb;

/// Keep a copy of a running store at the source's revisions
#[derive(Parser, Debug)]
#[command(name = "mem_etcd follow", bin_name = "mem_etcd follow")]
struct Args {
    /// The source's client URL (etcd's or mem_etcd's).
    #[arg(long)]
    source: String,
    /// The copy's client URL: a mem_etcd started from the source's snapshot.
    #[arg(long)]
    target: String,
    #[command(flatten)]
    access: Access,
    /// The cut-over: stop once the source has taken no write for this long (e.g. `5s`) and
    /// the copy checks exact. Without it, follows until stopped.
    #[arg(long, value_parser = crate::duration::parse_duration)]
    until_idle: Option<Duration>,
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

/// How often the leases and the compaction are looked at, and the lag reported.
const TICK: Duration = Duration::from_secs(1);
const SWEEP_EVERY: u32 = 5;
const REPORT_EVERY: u32 = 10;

async fn follow(args: Args) -> Result<i64, Failure> {
    let source = args.access.connect(&args.source, "source").await?;
    let target = args.access.connect(&args.target, "target").await?;
    let start = head(&mut pb::kv_client::KvClient::new(target.clone()), "target").await?;
    exact(&source, &target, start).await?;
    println!("following {} from revision {}", args.source, start + 1);

    let mut f = Follower::new(source.clone(), target.clone(), start).await?;
    let mut watch = f.watch(start + 1).await?;
    let mut tick = tokio::time::interval(TICK);
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
                // A source that does not answer for a while (a member restarting) is waited for;
                // the target's leases are kept alive meanwhile.
                let source_head = match head(&mut pb::kv_client::KvClient::new(source.clone()), "source").await {
                    Ok(h) => {
                        source_down = None;
                        h
                    }
                    Err(e) => {
                        quiet = None;
                        if source_down.get_or_insert_with(Instant::now).elapsed() > OUTAGE {
                            return Err(e.into());
                        }
                        continue;
                    }
                };
                if ticks.is_multiple_of(SWEEP_EVERY) {
                    f.sweep_leases().await?;
                    f.follow_compaction().await?;
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
                    println!("idle for {idle:?} at revision {}; {}", f.applied, f.lag.report());
                    exact(&source, &target, f.applied).await?;
                    return Ok(f.applied);
                }
            }
        }
    }
}

/// `check copy` at `rev`: any difference stops the command.
async fn exact(source: &Conn, target: &Conn, rev: i64) -> Result<(), Failure> {
    match compare(source.clone(), target.clone(), Some(rev), 20).await? {
        0 => Ok(()),
        n => Err(Failure::Differs(format!(
            "the copy differs from the source at {rev}: {n} difference(s)"
        ))),
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
    source: Conn,
    target: Conn,
    /// The last source revision the target holds.
    applied: i64,
    /// The target's leases: id → (TTL, when the next keep-alive is due).
    leases: BTreeMap<i64, (i64, Instant)>,
    /// The target's compaction revision.
    compacted: i64,
    keep_alive: tokio::sync::mpsc::Sender<pb::LeaseKeepAliveRequest>,
    /// How long each revision took from the watch's answer to the target's.
    lag: Lag,
}

/// The follower's lag per revision since the last report: from the moment the source's watch
/// delivered it to the moment the target answered its Txn.
#[derive(Default)]
struct Lag {
    micros: Vec<u32>,
}

impl Lag {
    fn record(&mut self, d: Duration) {
        self.micros.push(d.as_micros().min(u32::MAX as u128) as u32);
    }

    /// "N revisions, lag p50 .. p99 .. max ..", then starts a new window.
    fn report(&mut self) -> String {
        let mut m = std::mem::take(&mut self.micros);
        if m.is_empty() {
            return "no revisions since the last report".into();
        }
        m.sort_unstable();
        let at = |q: f64| m[((m.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
        format!(
            "{} revisions, lag p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            m.len(),
            at(0.5),
            at(0.99),
            at(1.0)
        )
    }
}

impl Follower {
    async fn new(source: Conn, target: Conn, applied: i64) -> Result<Self, String> {
        let tx = keep_alive_stream(&target).await?;
        let mut lease = pb::lease_client::LeaseClient::new(target.clone());
        let mut f = Follower {
            source,
            target,
            applied,
            leases: BTreeMap::new(),
            compacted: 0,
            keep_alive: tx,
            lag: Lag::default(),
        };
        // The snapshot's leases, kept alive from now on.
        let listed = lease.lease_leases(pb::LeaseLeasesRequest {}).await;
        let listed = listed.map_err(|e| format!("target: LeaseLeases: {}", e.message()))?;
        for l in listed.into_inner().leases {
            let ttl = f.ttl_on(&f.target.clone(), l.id).await?.max(1);
            f.leases.insert(l.id, (ttl, Instant::now()));
        }
        let mut m = pb::maintenance_client::MaintenanceClient::new(f.target.clone());
        let h = m.hash_kv(pb::HashKvRequest { revision: applied }).await;
        f.compacted = h
            .map_err(|e| format!("target: HashKV: {}", e.message()))?
            .into_inner()
            .compact_revision;
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
            let mut client = pb::watch_client::WatchClient::new(self.source.clone());
            match client.watch(tokio_stream::wrappers::ReceiverStream::new(rx)).await {
                Ok(stream) => return Ok((tx, stream.into_inner())),
                Err(e) if since.elapsed() > OUTAGE => {
                    return Err(format!("source: Watch: {}", e.message()).into());
                }
                Err(_) => {
                    self.keep_alive().await?;
                    tokio::time::sleep(TICK).await;
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
            let mut ops = Vec::new();
            while i < events.len() && events[i].kv.as_ref().map_or(0, |kv| kv.mod_revision) == rev {
                let ev = &events[i];
                let kv = ev.kv.clone().unwrap_or_default();
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
            let txn = pb::TxnRequest { success: ops, ..Default::default() };
            let got = self.txn(txn, rev).await?;
            if got != rev {
                return Err(Failure::Differs(format!(
                    "the target applied the source's revision {rev} at {got}: something else \
                     writes to it"
                )));
            }
            self.applied = rev;
            self.lag.record(received.elapsed());
        }
        Ok(())
    }

    /// Sends `txn` (the source's revision `rev`) to the target and returns the revision it
    /// was applied at. A failed call may or may not have been applied (a leader change, a
    /// timeout): the target's head says which, and only one not applied is sent again.
    async fn txn(&mut self, txn: pb::TxnRequest, rev: i64) -> Result<i64, Failure> {
        let since = Instant::now();
        let mut kv = pb::kv_client::KvClient::new(self.target.clone());
        loop {
            let e = match kv.txn(txn.clone()).await {
                Ok(r) => return Ok(r.into_inner().header.map_or(0, |h| h.revision)),
                Err(e) => format!("target: Txn of revision {rev}: {}", e.message()),
            };
            let now = loop {
                if since.elapsed() > OUTAGE {
                    return Err(e.into());
                }
                self.keep_alive().await?;
                tokio::time::sleep(Duration::from_millis(200)).await;
                if let Ok(h) = head(&mut kv, "target").await {
                    break h;
                }
            };
            match now {
                n if n == rev => return Ok(rev),
                n if n == rev - 1 => println!("{e}; sending it again"),
                n if n < rev - 1 => {
                    return Err(Failure::Differs(format!(
                        "{e}; the target is back at revision {n}: it lost revisions it had \
                         applied (a restart in --wal-mode none, or buffered after a crash of its \
                         machine)"
                    )));
                }
                n => return Ok(n),
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
        let ttl = match self.ttl_on(&self.source.clone(), id).await? {
            0 => 60,
            t => t,
        };
        let mut lease = pb::lease_client::LeaseClient::new(self.target.clone());
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
                    match keep_alive_stream(&self.target).await {
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
        let mut lease = pb::lease_client::LeaseClient::new(self.source.clone());
        let r = lease.lease_leases(pb::LeaseLeasesRequest {}).await;
        let r = r.map_err(|e| format!("source: LeaseLeases: {}", e.message()))?.into_inner();
        let at = r.header.map_or(0, |h| h.revision);
        if self.applied < at {
            return Ok(());
        }
        let listed: std::collections::BTreeSet<i64> = r.leases.iter().map(|l| l.id).collect();
        let gone: Vec<i64> =
            self.leases.keys().copied().filter(|id| !listed.contains(id)).collect();
        let mut target = pb::lease_client::LeaseClient::new(self.target.clone());
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
        let mut kv = pb::kv_client::KvClient::new(self.source.clone());
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
            let mut kv = pb::kv_client::KvClient::new(self.target.clone());
            let r = kv.compact(pb::CompactionRequest { revision: lo, physical: false }).await;
            r.map_err(|e| format!("target: Compact at {lo}: {}", e.message()))?;
            println!("compacted at {lo}, as the source");
            self.compacted = lo;
        }
        Ok(())
    }
}
