//! Durability: the write-ahead log. Crashes (SIGKILL at a random moment under concurrent load)
//! in fsync and buffered mode, torn tails and corrupt records, leases and compaction across
//! restarts, excluded prefixes, snapshots bounding the disk, the data-dir lock, and a full disk
//! (fault injection with `--wal-failpoint`).
//!
//! These tests always run mem_etcd (the flags are its own), whatever `MEM_ETCD_TEST_TARGET` says.
//!
//! Randomness is only in the workload and the timing; every assertion is exact. Each randomised
//! test prints its seed: `MEM_ETCD_CRASH_SEED=<seed>` repeats its workload choices (the timing of
//! the kill still varies). `MEM_ETCD_CRASH_ITERATIONS` sets how many crash/restart rounds the
//! crash tests run (default 6).
//!
//! How a crash round is checked: every writer task owns its keys, so it knows each key's state
//! after each acknowledged write (value, create_revision, mod_revision, version). When the server
//! is killed, each writer has at most one write in flight whose outcome is unknown. After the
//! restart, every key must be exactly as the acknowledged writes left it, except the keys of that
//! one write, which must all show it or all not show it (a txn over several partitions is all or
//! nothing). A watch from a revision acknowledged before the crash must replay exactly the
//! acknowledged writes since then (plus the in-flight ones that made it), one per revision, with
//! no gap, and the next write must get the next revision.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use pb::compare::{CompareResult, CompareTarget, TargetUnion};
use pb::lease_client::LeaseClient;
use pb::request_op::Request as Rq;
use pb::response_op::Response as Rs;
use rand::rngs::SmallRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use tonic::Code;
use tonic::transport::Channel;

use crate::api::watch::{CreateExt, Ev, Ws, b, on_all, show};
use crate::support::*;

/// The message a write gets while the WAL cannot write (it may go on after this prefix).
const E_WAL_FAILED: &str = "etcdserver: WAL write failed";
/// How long one request may take before the test calls it hung (writes held while the disk is
/// full wait for it to come back).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a test waits for something the server must do.
const WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// Knobs

fn iterations() -> usize {
    std::env::var("MEM_ETCD_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(6)
}

/// The workload seed: `MEM_ETCD_CRASH_SEED`, else the clock. Printed (libtest shows it when the
/// test fails).
fn seed(test: &str) -> u64 {
    let seed = std::env::var("MEM_ETCD_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64);
    eprintln!(
        "{test}: seed {seed} (MEM_ETCD_CRASH_SEED={seed} repeats the workload choices; the \
         timing varies)"
    );
    seed
}

// ---------------------------------------------------------------------------------------------
// Small client helpers

fn header_rev(h: Option<pb::ResponseHeader>) -> i64 {
    h.expect("response has a header").revision
}

fn range_all_request(revision: i64) -> pb::RangeRequest {
    pb::RangeRequest {
        key: Bytes::from_static(b"\0"),
        range_end: Bytes::from_static(b"\0"),
        revision,
        ..Default::default()
    }
}

/// Every key at `revision` (0: the newest), with the header revision.
async fn try_range_all(
    raw: &mut Raw,
    revision: i64,
) -> Result<(i64, BTreeMap<String, Kv>), tonic::Status> {
    let r = raw.kv.range(range_all_request(revision)).await?.into_inner();
    let map = r
        .kvs
        .iter()
        .map(|k| (String::from_utf8(k.key.to_vec()).expect("utf-8 key"), Kv::from(k)))
        .collect();
    Ok((header_rev(r.header), map))
}

async fn range_all(raw: &mut Raw, revision: i64) -> (i64, BTreeMap<String, Kv>) {
    try_range_all(raw, revision).await.unwrap_or_else(|e| panic!("range all @{revision}: {e:?}"))
}

async fn current(raw: &mut Raw) -> i64 {
    let r = raw.kv.range(pb::RangeRequest { key: b("\u{1}probe"), ..Default::default() }).await;
    header_rev(r.expect("range").into_inner().header)
}

async fn compact(raw: &mut Raw, revision: i64) {
    raw.kv
        .compact(pb::CompactionRequest { revision, physical: true })
        .await
        .unwrap_or_else(|e| panic!("compact {revision}: {e:?}"));
}

/// Asserts that a Range below the compaction revision failed as etcd's does.
#[track_caller]
fn assert_compacted<T: std::fmt::Debug>(r: Result<T, tonic::Status>, ctx: &str) {
    match r {
        Ok(v) => panic!("{ctx}: expected {E_COMPACTED:?}, got {v:?}"),
        Err(s) => assert_eq!((s.code(), s.message()), (Code::OutOfRange, E_COMPACTED), "{ctx}"),
    }
}

fn is_wal_failed(s: &tonic::Status) -> bool {
    s.code() == Code::Unavailable && s.message().starts_with(E_WAL_FAILED)
}

fn put_rq(k: &str, v: &str) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(Rq::RequestPut(pb::PutRequest {
            key: b(k),
            value: b(v),
            ..Default::default()
        })),
    }
}

fn del_rq(k: &str) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(Rq::RequestDeleteRange(pb::DeleteRangeRequest {
            key: b(k),
            ..Default::default()
        })),
    }
}

fn range_rq(k: &str) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(Rq::RequestRange(pb::RangeRequest { key: b(k), ..Default::default() })),
    }
}

/// Writes `content` to the failpoint file atomically (the server reads it before each batch).
pub(crate) fn set_failpoint(path: &Path, content: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content).expect("write the failpoint file");
    std::fs::rename(&tmp, path).expect("rename the failpoint file");
}

async fn lease_client(s: &Server) -> LeaseClient<Channel> {
    let ch = s.channel().await.unwrap_or_else(|e| panic!("connect {}: {e:?}", s.endpoint()));
    LeaseClient::new(ch)
}

// ---------------------------------------------------------------------------------------------
// The on-disk layout (as the brief of the WAL defines it), for tests that damage it

const MAGIC: &[u8; 8] = b"MEMETCDW";
const FILE_HEADER: usize = 16;
const RECORD_HEADER: usize = 8;

fn wal_dir(dir: &DataDir) -> PathBuf {
    dir.path().join("wal")
}

/// The partition directories under `DIR/wal`.
fn partitions(dir: &DataDir) -> BTreeSet<String> {
    let Ok(entries) = std::fs::read_dir(wal_dir(dir)) else { return BTreeSet::new() };
    entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// The `.wal` segments of a partition, oldest first (the names sort by sequence number).
fn segments(dir: &DataDir, partition: &str) -> Vec<PathBuf> {
    let pdir = wal_dir(dir).join(partition);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&pdir)
        .unwrap_or_else(|e| panic!("read {}: {e}", pdir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    files.sort();
    files
}

fn newest_segment(dir: &DataDir, partition: &str) -> PathBuf {
    segments(dir, partition)
        .pop()
        .unwrap_or_else(|| panic!("no segment in partition {partition}: {:?}", partitions(dir)))
}

/// `<seq>-<first revision>.wal`, both 16 lower-case hex digits.
fn parse_segment_name(path: &Path) -> Option<(u64, u64)> {
    let name = path.file_name()?.to_str()?.strip_suffix(".wal")?;
    let (seq, first) = name.split_once('-')?;
    let hex16 = |s: &str| {
        (s.len() == 16 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| u64::from_str_radix(s, 16).ok())
            .flatten()
    };
    Some((hex16(seq)?, hex16(first)?))
}

#[derive(Debug)]
struct Record {
    /// Where its length field starts in the file.
    offset: usize,
    body: Vec<u8>,
}

#[derive(Debug)]
struct Segment {
    version: u32,
    reserved: u32,
    /// The records up to the first one that is incomplete or fails its CRC.
    records: Vec<Record>,
    /// Bytes after the last good record.
    trailing: usize,
}

fn read_segment(path: &Path) -> Segment {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    assert!(
        data.len() >= FILE_HEADER && &data[..8] == MAGIC,
        "{}: no MEMETCDW file header: {:?}",
        path.display(),
        &data[..data.len().min(16)]
    );
    let u32_at = |at: usize| u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
    let (version, reserved) = (u32_at(8), u32_at(12));
    let mut records = Vec::new();
    let mut at = FILE_HEADER;
    while at + RECORD_HEADER <= data.len() {
        let (len, crc) = (u32_at(at) as usize, u32_at(at + 4));
        let Some(body) = data.get(at + RECORD_HEADER..at + RECORD_HEADER + len) else { break };
        if crc32c::crc32c(body) != crc {
            break;
        }
        records.push(Record { offset: at, body: body.to_vec() });
        at += RECORD_HEADER + len;
    }
    Segment { version, reserved, records, trailing: data.len() - at }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Every file below `path`, recursively.
fn files_below(path: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(path) else { return out };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_below(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn size_below(path: &Path) -> u64 {
    files_below(path).iter().filter_map(|p| p.metadata().ok()).map(|m| m.len()).sum()
}

/// Does `number` appear in `line` as a whole decimal number?
fn has_number(line: &str, number: usize) -> bool {
    line.split(|c: char| !c.is_ascii_digit()).any(|w| w == number.to_string())
}

// ---------------------------------------------------------------------------------------------
// A sequential history (one client, one write at a time), for the deterministic tests

#[derive(Debug, Default)]
struct History {
    /// (revision, key, value or None for a delete), in revision order.
    writes: Vec<(i64, String, Option<String>)>,
}

impl History {
    async fn put(&mut self, raw: &mut Raw, k: &str, v: &str) -> i64 {
        let r = raw.kv.put(pb::PutRequest { key: b(k), value: b(v), ..Default::default() }).await;
        let rev = header_rev(r.unwrap_or_else(|e| panic!("put {k}: {e:?}")).into_inner().header);
        self.record(rev, k, Some(v));
        rev
    }

    async fn del(&mut self, raw: &mut Raw, k: &str) -> i64 {
        let r = raw.kv.delete_range(pb::DeleteRangeRequest { key: b(k), ..Default::default() });
        let r = r.await.unwrap_or_else(|e| panic!("delete {k}: {e:?}")).into_inner();
        assert_eq!(r.deleted, 1, "delete {k}");
        let rev = header_rev(r.header);
        self.record(rev, k, None);
        rev
    }

    fn record(&mut self, rev: i64, k: &str, v: Option<&str>) {
        if let Some(&(last, ..)) = self.writes.last() {
            assert!(rev >= last, "revision {rev} after {last}");
        }
        self.writes.push((rev, k.to_string(), v.map(str::to_string)));
    }

    fn last_rev(&self) -> i64 {
        self.writes.last().map_or(1, |w| w.0)
    }

    /// Forgets the writes above `rev` (the server lost them).
    fn truncate(&mut self, rev: i64) {
        self.writes.retain(|w| w.0 <= rev);
    }

    /// Every key at revision `rev`, with its create and mod revisions and version.
    fn state_at(&self, rev: i64) -> BTreeMap<String, Kv> {
        let mut state: BTreeMap<String, Kv> = BTreeMap::new();
        for (r, k, v) in self.writes.iter().filter(|w| w.0 <= rev) {
            match v {
                Some(v) => {
                    let (create, version) =
                        state.get(k).map_or((*r, 1), |o| (o.create_revision, o.version + 1));
                    state.insert(k.clone(), kv(k, v, create, *r, version));
                }
                None => {
                    state.remove(k);
                }
            }
        }
        state
    }

    /// The events of the writes at or above `from`.
    fn events_from(&self, from: i64) -> Vec<Ev> {
        let mut state: BTreeMap<String, Kv> = BTreeMap::new();
        let mut evs = Vec::new();
        for (r, k, v) in &self.writes {
            let ev = match v {
                Some(v) => {
                    let (create, version) =
                        state.get(k).map_or((*r, 1), |o| (o.create_revision, o.version + 1));
                    let new = kv(k, v, create, *r, version);
                    state.insert(k.clone(), new.clone());
                    Ev { put: true, kv: new, prev: None }
                }
                None => {
                    state.remove(k);
                    Ev { put: false, kv: kv(k, "", 0, *r, 0), prev: None }
                }
            };
            if *r >= from {
                evs.push(ev);
            }
        }
        evs
    }

    /// Asserts that the server holds exactly the state at `rev` and that its revision is `rev`.
    async fn check(&self, s: &Server, rev: i64, ctx: &str) {
        let mut raw = s.raw_clients().await;
        let (now, actual) = range_all(&mut raw, 0).await;
        let expected = self.state_at(rev);
        if actual != expected {
            let keys: BTreeSet<&String> = actual.keys().chain(expected.keys()).collect();
            let diff: Vec<String> = keys
                .into_iter()
                .filter(|k| actual.get(*k) != expected.get(*k))
                .map(|k| {
                    format!("  {k}: server {:?}, expected {:?}", actual.get(k), expected.get(k))
                })
                .collect();
            panic!(
                "{ctx}: the recovered keys differ from the state at {rev}:\n{}",
                diff.join("\n")
            );
        }
        assert_eq!(now, rev, "{ctx}: the recovered revision");
    }
}

/// Watches every key from `from` and returns the events up to `to`.
async fn replay(s: &Server, from: i64, to: i64) -> Vec<Ev> {
    let mut ws = Ws::open(s).await;
    let id = ws.watch(on_all().since(from)).await;
    if to < from {
        return Vec::new();
    }
    ws.events_until(id, to).await
}

// ---------------------------------------------------------------------------------------------
// Concurrent writers with a model of their own keys

/// The key groups a writer owns keys in: three resources and the default partition.
const GROUPS: [&str; 4] =
    ["/registry/pods/", "/registry/configmaps/", "/registry/leases/", "/crash/"];
const KEYS_PER_GROUP: usize = 6;
const WRITERS: usize = 6;

#[derive(Clone, Debug)]
enum OpKind {
    Put,
    Delete,
    /// A txn whose compares (mod_revision equal, as kube-apiserver's) must all hold; its
    /// failure branch reads the first compared key, as kube-apiserver's does.
    Txn {
        guards: Vec<(String, i64)>,
    },
}

#[derive(Clone, Debug)]
struct Op {
    kind: OpKind,
    /// (key, new value or None for a delete), in request order.
    effects: Vec<(String, Option<String>)>,
}

/// A write the server applied, with the states it left its keys in.
#[derive(Clone, Debug)]
struct Applied {
    /// None for an in-flight delete-only write found applied after the crash (a deleted key
    /// shows no revision); found from the watch replay instead.
    rev: Option<i64>,
    states: Vec<(String, Option<Kv>)>,
}

/// A write that was in flight when the server died: its outcome is unknown.
#[derive(Clone, Debug)]
struct Pending {
    op: Op,
    /// The highest revision acknowledged (to anyone) before it was sent: if it was applied, its
    /// revision is higher.
    acked_before: i64,
}

#[derive(Debug)]
enum SendError {
    Status(tonic::Status),
    /// The server answered, but not as the model says it must (a compare failed, a delete
    /// deleted nothing): the model and the server disagree.
    Unexpected(#[allow(dead_code, reason = "shown through Debug in failure messages")] String),
    TimedOut,
}

#[derive(Debug)]
struct Writer {
    id: usize,
    /// The keys it owns, by group; empty for the probe writer, which writes new keys.
    groups: Vec<Vec<String>>,
    /// Every owned key's state after the last acknowledged write (None: absent).
    model: BTreeMap<String, Option<Kv>>,
    /// The writes acknowledged since the last [`Writer::new_round`].
    acked: Vec<Applied>,
    /// In-flight writes found applied after the crash (since the last new round).
    applied_pending: Vec<Applied>,
    pending: Option<Pending>,
    /// Writes refused with "WAL write failed" (so never applied).
    rejected: Vec<Op>,
    errors: Vec<String>,
    seq: u64,
    rng: SmallRng,
}

impl Writer {
    fn new(id: usize, seed: u64) -> Writer {
        let groups: Vec<Vec<String>> = GROUPS
            .iter()
            .map(|g| (0..KEYS_PER_GROUP).map(|i| format!("{g}w{id}/k{i}")).collect())
            .collect();
        let model = groups.iter().flatten().map(|k| (k.clone(), None)).collect();
        Writer {
            id,
            groups,
            model,
            acked: Vec::new(),
            applied_pending: Vec::new(),
            pending: None,
            rejected: Vec::new(),
            errors: Vec::new(),
            seq: 0,
            rng: SmallRng::seed_from_u64(seed ^ (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        }
    }

    /// The writer the test itself writes through (new keys under `/probe/`).
    fn probe(seed: u64) -> Writer {
        Writer { groups: Vec::new(), model: BTreeMap::new(), ..Writer::new(1000, seed) }
    }

    fn new_round(&mut self) {
        self.acked.clear();
        self.applied_pending.clear();
    }

    fn state(&self, k: &str) -> Option<&Kv> {
        self.model.get(k).and_then(|s| s.as_ref())
    }

    fn mod_rev(&self, k: &str) -> i64 {
        self.state(k).map_or(0, |s| s.mod_revision)
    }

    fn random_key(&mut self, group: usize) -> String {
        self.groups[group].choose(&mut self.rng).expect("keys").clone()
    }

    fn value(&mut self, tag: &str, what: &str) -> String {
        self.seq += 1;
        let pad = if self.rng.random_ratio(1, 20) { 4000 } else { self.rng.random_range(0..300) };
        format!("{tag}.w{}.{}.{what}:{}", self.id, self.seq, "x".repeat(pad))
    }

    /// The next write of the random workload: puts, kube-apiserver's CAS updates and creates,
    /// txns over two or three partitions writing one tag (sometimes with a delete in yet another
    /// partition), and deletes.
    fn next_op(&mut self, tag: &str) -> Op {
        let group = self.rng.random_range(0..self.groups.len());
        let key = self.random_key(group);
        let roll = self.rng.random_range(0..100);
        if roll < 35 {
            let v = self.value(tag, "put");
            return Op { kind: OpKind::Put, effects: vec![(key, Some(v))] };
        }
        if roll < 55 {
            let v = self.value(tag, "cas");
            let guard = (key.clone(), self.mod_rev(&key));
            return Op { kind: OpKind::Txn { guards: vec![guard] }, effects: vec![(key, Some(v))] };
        }
        if roll < 85 {
            let mut gs: Vec<usize> = (0..self.groups.len()).collect();
            gs.shuffle(&mut self.rng);
            let n = self.rng.random_range(2..=3);
            let v = self.value(tag, "txn");
            let mut effects: Vec<(String, Option<String>)> =
                gs[..n].iter().map(|&g| (self.random_key(g), Some(v.clone()))).collect();
            let guards = if self.rng.random_bool(0.5) {
                effects.iter().map(|(k, _)| (k.clone(), self.mod_rev(k))).collect()
            } else {
                Vec::new()
            };
            if self.rng.random_ratio(1, 3) {
                let present: Vec<String> = gs[n..]
                    .iter()
                    .flat_map(|&g| self.groups[g].iter())
                    .filter(|k| self.state(k).is_some())
                    .cloned()
                    .collect();
                if let Some(k) = present.choose(&mut self.rng) {
                    effects.push((k.clone(), None));
                }
            }
            return Op { kind: OpKind::Txn { guards }, effects };
        }
        let present: Vec<String> =
            self.model.iter().filter(|(_, s)| s.is_some()).map(|(k, _)| k.clone()).collect();
        match present.choose(&mut self.rng) {
            Some(k) => Op { kind: OpKind::Delete, effects: vec![(k.clone(), None)] },
            None => {
                let v = self.value(tag, "put");
                Op { kind: OpKind::Put, effects: vec![(key, Some(v))] }
            }
        }
    }

    /// A put of a new key under `/probe/` (the model learns the key, absent for now).
    fn probe_op(&mut self, tag: &str) -> Op {
        let v = self.value(tag, "probe");
        let k = format!("/probe/{}", self.seq);
        self.model.insert(k.clone(), None);
        Op { kind: OpKind::Put, effects: vec![(k, Some(v))] }
    }

    /// Applies a write to the model; `rev` is its revision (unknown for an in-flight delete-only
    /// write, which leaves no revision on its keys).
    fn apply(&mut self, op: &Op, rev: Option<i64>) -> Applied {
        let states = op
            .effects
            .iter()
            .map(|(k, v)| {
                let old = self.state(k).cloned();
                let new = v.as_ref().map(|v| {
                    let rev = rev.expect("a put has a revision");
                    Kv {
                        key: k.as_bytes().to_vec(),
                        value: v.as_bytes().to_vec(),
                        create_revision: old.as_ref().map_or(rev, |o| o.create_revision),
                        mod_revision: rev,
                        version: old.as_ref().map_or(1, |o| o.version + 1),
                        lease: 0,
                    }
                });
                self.model.insert(k.clone(), new.clone());
                (k.clone(), new)
            })
            .collect();
        Applied { rev, states }
    }

    fn ack(&mut self, op: &Op, rev: i64) {
        let a = self.apply(op, Some(rev));
        self.acked.push(a);
    }

    /// Sends one write and files its outcome. Returns false when the writer must stop (the
    /// server was killed, or something unexpected happened).
    async fn step(&mut self, raw: &mut Raw, op: Op, ctl: &Control) -> bool {
        let acked_before = ctl.acked_max.load(SeqCst);
        let stage = ctl.stage.load(SeqCst);
        match send(raw, &op).await {
            Ok(rev) => {
                if rev <= acked_before {
                    self.errors.push(format!(
                        "writer {}: acknowledged at revision {rev}, not above the {acked_before} \
                         acknowledged before it was sent: {op:?}",
                        self.id
                    ));
                    return false;
                }
                self.ack(&op, rev);
                ctl.acked_max.fetch_max(rev, SeqCst);
                ctl.acked.fetch_add(1, SeqCst);
                if let Some(n) = ctl.acked_by.get(self.id) {
                    n.fetch_add(1, SeqCst);
                }
                if stage == STAGE_NORMAL && ctl.stage.load(SeqCst) == STAGE_DISK_BACK {
                    ctl.held_acked.fetch_add(1, SeqCst);
                }
                true
            }
            Err(SendError::Status(s)) if ctl.allow_rejects && is_wal_failed(&s) => {
                self.rejected.push(op);
                ctl.rejected.fetch_add(1, SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                true
            }
            Err(SendError::Status(_)) | Err(SendError::TimedOut) if ctl.killed.load(SeqCst) => {
                self.pending = Some(Pending { op, acked_before });
                false
            }
            Err(e) => {
                self.errors.push(format!("writer {}: {op:?}: {e:?}", self.id));
                false
            }
        }
    }

    /// Decides what became of the in-flight write from the recovered keys: applied (all its
    /// keys show it) or not (none does); anything else fails the test.
    fn resolve_pending(&mut self, actual: &BTreeMap<String, Kv>, ctx: &str) {
        let Some(p) = self.pending.take() else { return };
        let mut applied = Vec::new();
        let mut put_revs = BTreeSet::new();
        for (k, new) in &p.op.effects {
            let old = self.state(k).cloned();
            let act = actual.get(k);
            let is_old = act == old.as_ref();
            let is_new = match new {
                None => act.is_none(),
                Some(v) => act.is_some_and(|a| {
                    a.value == v.as_bytes()
                        && a.mod_revision > p.acked_before
                        && a.lease == 0
                        && match &old {
                            Some(o) => {
                                a.create_revision == o.create_revision && a.version == o.version + 1
                            }
                            None => a.create_revision == a.mod_revision && a.version == 1,
                        }
                }),
            };
            assert!(!(is_old && is_new), "{ctx}: the workload made an ambiguous write: {p:?}");
            assert!(
                is_old || is_new,
                "{ctx}: writer {}: key {k} after recovery is {act:?}: neither its last \
                 acknowledged state {old:?} nor what the write in flight at the crash would have \
                 made it ({new:?}, above revision {}); in flight: {:?}",
                self.id,
                p.acked_before,
                p.op
            );
            applied.push(is_new);
            if let (true, Some(a)) = (is_new, act) {
                put_revs.insert(a.mod_revision);
            }
        }
        let all = applied.iter().all(|a| *a);
        assert!(
            all || applied.iter().all(|a| !*a),
            "{ctx}: writer {}: the write in flight at the crash was applied to only some of its \
             keys (applied per key: {applied:?}); a txn must be all or nothing. Write: {:?}; \
             recovered: {:?}",
            self.id,
            p.op,
            p.op.effects.iter().map(|(k, _)| (k, actual.get(k))).collect::<Vec<_>>()
        );
        if all {
            assert!(put_revs.len() <= 1, "{ctx}: one txn, several revisions {put_revs:?}: {p:?}");
            let a = self.apply(&p.op, put_revs.first().copied());
            self.applied_pending.push(a);
        }
    }
}

async fn send(raw: &mut Raw, op: &Op) -> Result<i64, SendError> {
    let request = async {
        match &op.kind {
            OpKind::Put => {
                let (k, v) = &op.effects[0];
                let v = v.as_deref().expect("a put has a value");
                let r = raw.kv.put(pb::PutRequest { key: b(k), value: b(v), ..Default::default() });
                Ok(header_rev(r.await.map_err(SendError::Status)?.into_inner().header))
            }
            OpKind::Delete => {
                let k = &op.effects[0].0;
                let r =
                    raw.kv.delete_range(pb::DeleteRangeRequest { key: b(k), ..Default::default() });
                let r = r.await.map_err(SendError::Status)?.into_inner();
                if r.deleted != 1 {
                    return Err(SendError::Unexpected(format!("deleted {}", r.deleted)));
                }
                Ok(header_rev(r.header))
            }
            OpKind::Txn { guards } => {
                let compare = guards
                    .iter()
                    .map(|(k, m)| pb::Compare {
                        result: CompareResult::Equal as i32,
                        target: CompareTarget::Mod as i32,
                        key: b(k),
                        range_end: Bytes::new(),
                        target_union: Some(TargetUnion::ModRevision(*m)),
                    })
                    .collect();
                let success = op
                    .effects
                    .iter()
                    .map(|(k, v)| match v {
                        Some(v) => put_rq(k, v),
                        None => del_rq(k),
                    })
                    .collect();
                let failure = guards.first().map(|(k, _)| vec![range_rq(k)]).unwrap_or_default();
                let r = raw.kv.txn(pb::TxnRequest { compare, success, failure });
                let r = r.await.map_err(SendError::Status)?.into_inner();
                if !r.succeeded {
                    return Err(SendError::Unexpected(format!(
                        "the compares failed (the model is out of step with the server): {:?}",
                        r.responses
                    )));
                }
                for resp in &r.responses {
                    if let Some(Rs::ResponseDeleteRange(d)) = &resp.response
                        && d.deleted != 1
                    {
                        return Err(SendError::Unexpected(format!("deleted {}", d.deleted)));
                    }
                }
                Ok(header_rev(r.header))
            }
        }
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(r) => r,
        Err(_) => Err(SendError::TimedOut),
    }
}

/// What the test and its writers share.
#[derive(Debug, Default)]
struct Control {
    /// Writers stop before their next write.
    stop: AtomicBool,
    /// Set just before the server is killed: a failed request from now on is the crash.
    killed: AtomicBool,
    /// "WAL write failed" refusals are expected (fault injection); otherwise they fail the test.
    allow_rejects: bool,
    acked_max: AtomicI64,
    acked: AtomicU64,
    /// Acknowledged writes per writer (by id; the probe writer is not counted).
    acked_by: Vec<AtomicU64>,
    rejected: AtomicU64,
    /// Where a fault-injection test is: [`STAGE_NORMAL`], [`STAGE_DISK_FULL`] (the test saw a
    /// write refused), [`STAGE_DISK_BACK`] (the failpoint is cleared).
    stage: AtomicU64,
    /// Writes sent before the disk was seen full and acknowledged after it came back: held
    /// through the failure.
    held_acked: AtomicU64,
}

const STAGE_NORMAL: u64 = 0;
const STAGE_DISK_FULL: u64 = 1;
const STAGE_DISK_BACK: u64 = 2;

impl Control {
    fn new(allow_rejects: bool, acked_max: i64) -> Arc<Control> {
        Arc::new(Control {
            allow_rejects,
            acked_max: AtomicI64::new(acked_max),
            acked_by: (0..WRITERS).map(|_| AtomicU64::new(0)).collect(),
            ..Default::default()
        })
    }
}

async fn run_writer(mut w: Writer, mut raw: Raw, ctl: Arc<Control>, tag: String) -> Writer {
    while !ctl.stop.load(SeqCst) {
        let op = w.next_op(&tag);
        if !w.step(&mut raw, op, &ctl).await {
            break;
        }
    }
    w
}

/// Starts the writers on `s`, each on its own connection.
async fn start_writers(
    s: &Server,
    writers: Vec<Writer>,
    ctl: &Arc<Control>,
    tag: &str,
) -> Vec<tokio::task::JoinHandle<Writer>> {
    let mut handles = Vec::new();
    for mut w in writers {
        w.new_round();
        let raw = s.raw_clients().await;
        handles.push(tokio::spawn(run_writer(w, raw, ctl.clone(), tag.to_string())));
    }
    handles
}

async fn join_writers(handles: Vec<tokio::task::JoinHandle<Writer>>, ctx: &str) -> Vec<Writer> {
    let mut writers = Vec::new();
    for h in handles {
        writers.push(h.await.expect("a writer task panicked"));
    }
    let errors: Vec<&String> = writers.iter().flat_map(|w| &w.errors).collect();
    assert!(errors.is_empty(), "{ctx}: writes failed before the crash:\n{errors:#?}");
    writers
}

/// Checks a restarted server against the writers' models (see the module docs), resolving the
/// writes that were in flight at the crash. With `watch_from`, also checks that a watch from that
/// revision replays exactly the writes since. Returns the recovered revision.
async fn verify(
    s: &Server,
    writers: &mut [Writer],
    acked_max: i64,
    watch_from: Option<i64>,
    ctx: &str,
) -> i64 {
    let mut raw = s.raw_clients().await;
    let (recovered, actual) = range_all(&mut raw, 0).await;
    assert!(
        recovered >= acked_max,
        "{ctx}: recovered at revision {recovered}, below the acknowledged revision {acked_max}"
    );
    for w in writers.iter_mut() {
        w.resolve_pending(&actual, ctx);
    }
    let mut owned = BTreeSet::new();
    for w in writers.iter() {
        for (k, expected) in &w.model {
            owned.insert(k.clone());
            let got = actual.get(k);
            assert!(
                got == expected.as_ref(),
                "{ctx}: writer {}: key {k} after recovery is {got:?}, but its last acknowledged \
                 write left it {expected:?} (and no write to it was in flight){}",
                w.id,
                if w.rejected.iter().any(|op| op.effects.iter().any(|(rk, _)| rk == k)) {
                    " (a write to it was refused with \"WAL write failed\": was it applied?)"
                } else {
                    ""
                }
            );
        }
    }
    let strangers: Vec<&String> = actual.keys().filter(|k| !owned.contains(*k)).collect();
    assert!(strangers.is_empty(), "{ctx}: keys nobody wrote: {strangers:?}");

    if let Some(from) = watch_from {
        let evs = replay(s, from, recovered).await;
        let mut by_rev: BTreeMap<i64, Vec<Ev>> = BTreeMap::new();
        for e in evs {
            by_rev.entry(e.kv.mod_revision).or_default().push(e);
        }
        let revs: Vec<i64> = by_rev.keys().copied().collect();
        let expected_revs: Vec<i64> = (from..=recovered).collect();
        assert!(
            revs == expected_revs,
            "{ctx}: the watch from {from} replayed revisions {}..{} with gaps ({} of {})",
            revs.first().unwrap_or(&0),
            revs.last().unwrap_or(&0),
            revs.len(),
            expected_revs.len()
        );
        let sorted = |mut v: Vec<Ev>| {
            v.sort_by(|a, b| a.kv.key.cmp(&b.kv.key));
            v
        };
        let expected_events = |a: &Applied, rev: i64| -> Vec<Ev> {
            sorted(
                a.states
                    .iter()
                    .map(|(k, s)| match s {
                        Some(s) => Ev { put: true, kv: s.clone(), prev: None },
                        None => Ev { put: false, kv: kv(k, "", 0, rev, 0), prev: None },
                    })
                    .collect(),
            )
        };
        for w in writers.iter() {
            for a in w.acked.iter().filter(|a| a.rev.is_some_and(|r| r >= from)) {
                let rev = a.rev.unwrap();
                let got = by_rev.remove(&rev).map(sorted);
                assert_eq!(
                    got,
                    Some(expected_events(a, rev)),
                    "{ctx}: the replayed events of acknowledged revision {rev}"
                );
            }
        }
        for w in writers.iter() {
            for a in &w.applied_pending {
                let rev =
                    match a.rev {
                        Some(rev) => rev,
                        // A delete-only write: find its revision among the ones left.
                        None => *by_rev
                            .iter()
                            .find(|(r, evs)| sorted((*evs).clone()) == expected_events(a, **r))
                            .unwrap_or_else(|| {
                                panic!(
                                    "{ctx}: no replayed revision holds the in-flight delete {a:?}"
                                )
                            })
                            .0,
                    };
                let got = by_rev.remove(&rev).map(sorted);
                assert_eq!(
                    got,
                    Some(expected_events(a, rev)),
                    "{ctx}: the replayed events of revision {rev} (in flight at the crash)"
                );
            }
        }
        assert!(by_rev.is_empty(), "{ctx}: replayed revisions nobody wrote: {by_rev:?}");
    }
    recovered
}

/// Writes a new key through the probe writer; it must be acknowledged. Returns its revision.
async fn probe_write(w: &mut Writer, raw: &mut Raw, ctl: &Control, tag: &str) -> i64 {
    let before = w.acked.len();
    let op = w.probe_op(tag);
    assert!(w.step(raw, op, ctl).await, "probe write failed: {:?}", w.errors);
    assert_eq!(w.acked.len(), before + 1, "probe write refused: {:?}", w.rejected.last());
    w.acked.last().and_then(|a| a.rev).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Crashes under load

/// Runs the crash rounds described in the module docs with `args`; each round's load runs for
/// a random time in `load_ms` before the kill. Returns the data dir.
/// How a round ends the server under load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// SIGKILL: a crash.
    Kill,
    /// SIGTERM: a clean stop, which must exit promptly and successfully.
    Term,
}

async fn crash_rounds(test: &str, args: &[&str], load_ms: std::ops::Range<u64>) -> DataDir {
    stop_rounds(test, args, load_ms, Stop::Kill).await
}

async fn stop_rounds(
    test: &str,
    args: &[&str],
    load_ms: std::ops::Range<u64>,
    stop: Stop,
) -> DataDir {
    let seed = seed(test);
    let rounds = iterations();
    let mut rng = SmallRng::seed_from_u64(seed);
    let dir = DataDir::new();
    let mut writers: Vec<Writer> = (0..WRITERS).map(|i| Writer::new(i, seed)).collect();
    let mut probe = Writer::probe(seed);
    let mut s = dir.start(args).await;
    let mut acked_max = 1;
    let mut compacted = 0;
    let (mut total_acked, mut in_flight, mut in_flight_applied) = (0, 0, 0);
    for round in 0..rounds {
        let ctx = format!("{test} (seed {seed}) round {round}");
        let mut raw = s.raw_clients().await;
        if round > 0 && rng.random_bool(0.7) {
            compacted = current(&mut raw).await;
            compact(&mut raw, compacted).await;
        }
        let ctl = Control::new(false, acked_max);
        let handles =
            start_writers(&s, std::mem::take(&mut writers), &ctl, &format!("r{round}")).await;
        let delay = Duration::from_millis(rng.random_range(load_ms.clone()));
        tokio::time::sleep(delay).await;
        ctl.killed.store(true, SeqCst);
        match stop {
            Stop::Kill => _ = s.kill9(),
            Stop::Term => {
                let ex = s.stop(Duration::from_secs(10)).await;
                assert!(
                    ex.status.success(),
                    "{ctx}: exit after SIGTERM: {}\n{}",
                    ex.status,
                    ex.output()
                );
            }
        }
        writers = join_writers(handles, &ctx).await;
        acked_max = acked_max.max(ctl.acked_max.load(SeqCst));
        let acked: Vec<i64> =
            writers.iter().flat_map(|w| w.acked.iter().filter_map(|a| a.rev)).collect();
        assert!(!acked.is_empty(), "{ctx}: no write was acknowledged in {delay:?}");
        total_acked += acked.len();
        in_flight += writers.iter().filter(|w| w.pending.is_some()).count();
        let watch_from = *acked.choose(&mut rng).unwrap();

        s = dir.start(args).await;
        probe.new_round();
        let mut all: Vec<Writer> = std::mem::take(&mut writers);
        all.push(probe);
        let recovered = verify(&s, &mut all, acked_max, Some(watch_from), &ctx).await;
        probe = all.pop().unwrap();
        writers = all;
        in_flight_applied += writers.iter().map(|w| w.applied_pending.len()).sum::<usize>();
        let mut raw = s.raw_clients().await;
        if compacted > 1 {
            let r = raw.kv.range(range_all_request(compacted - 1)).await;
            assert_compacted(r, &format!("{ctx}: range below the compaction at {compacted}"));
        }
        let ctl = Control::new(false, acked_max);
        let next = probe_write(&mut probe, &mut raw, &ctl, &format!("r{round}")).await;
        assert_eq!(
            next,
            recovered + 1,
            "{ctx}: the first write after the restart (acknowledged up to {acked_max})"
        );
        acked_max = next;
    }
    eprintln!(
        "{test}: {rounds} rounds, {total_acked} acknowledged writes checked, {in_flight} in \
         flight at a crash ({in_flight_applied} of them applied)"
    );
    drop(s);
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_fsync_keeps_every_acknowledged_write() {
    crash_rounds("crash_fsync", &["--fsync"], 150..700).await;
}

/// SIGTERM under load (an operator's restart): the server stops taking requests, finishes the
/// ones in flight, writes out and syncs the WAL and exits 0, within 10 s; a restart has every
/// acknowledged write, in both modes (buffered with a flush interval longer than the test, so
/// only the shutdown's own flush can have synced it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_under_load_keeps_every_acknowledged_write() {
    stop_rounds("sigterm_fsync", &["--fsync"], 150..700, Stop::Term).await;
    let args = ["--wal-mode", "buffered", "--wal-flush-interval", "1h"];
    stop_rounds("sigterm_buffered", &args, 150..700, Stop::Term).await;
}

/// Buffered mode acknowledges once a batch is written to the OS, so a killed process loses
/// nothing acknowledged either. The long flush interval makes a server that acknowledged
/// before write(2) (holding the batch in its own buffer until the next flush) lose writes here.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_buffered_keeps_every_acknowledged_write() {
    let args = ["--wal-mode", "buffered", "--wal-flush-interval", "2s"];
    crash_rounds("crash_buffered", &args, 150..700).await;
}

/// Small segments and snapshots every 256 KiB, so the kills land during segment rotation and
/// snapshots too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_during_rotation_and_snapshots_keeps_every_acknowledged_write() {
    let args = ["--wal-segment-bytes", "65536", "--wal-snapshot-bytes", "262144"];
    // Longer rounds: a server takes its first snapshot about a second after it starts.
    let dir = crash_rounds("crash_rotation", &args, 300..2000).await;
    let snaps = files_below(&dir.path().join("snap"));
    let oldest: Vec<String> = partitions(&dir)
        .iter()
        .filter_map(|p| segments(&dir, p).first().map(|f| format!("{p}: {}", f.display())))
        .collect();
    eprintln!("snapshots: {snaps:?}; oldest segments: {oldest:#?}");
    assert!(!snaps.is_empty(), "no snapshot was taken during the rounds");
}

// ---------------------------------------------------------------------------------------------
// Layout

/// The partition directories, segment names, file header and record framing, as specified.
#[tokio::test]
async fn wal_layout_partitions_segments_and_records() {
    let dir = DataDir::new();
    let s = dir.start(&[]).await;
    let mut raw = s.raw_clients().await;
    let mut h = History::default();
    h.put(&mut raw, "/other/key", "default-value-1").await;
    let pod_rev = h.put(&mut raw, "/registry/pods/ns/p1", "pod-value-1").await;
    let widget_rev = h.put(&mut raw, "/registry/example.com/widgets/ns/w1", "widget-1").await;
    h.put(&mut raw, "/registry/configmaps/ns/c1", "cm-value-1").await;
    h.put(&mut raw, "/registry/pods/ns/p2", "pod-value-2").await;
    let mut leases = lease_client(&s).await;
    leases.lease_grant(pb::LeaseGrantRequest { id: 77, ttl: 600 }).await.expect("grant");
    leases.lease_grant(pb::LeaseGrantRequest { id: 78, ttl: 600 }).await.expect("grant");
    leases.lease_revoke(pb::LeaseRevokeRequest { id: 78 }).await.expect("revoke");
    compact(&mut raw, pod_rev).await;
    let _ = s.kill9();

    let found = partitions(&dir);
    for p in [
        "_default",
        "_meta",
        "+registry+pods+",
        "+registry+configmaps+",
        "+registry+example.com+widgets+",
    ] {
        assert!(found.contains(p), "no partition directory {p} in {found:?}");
    }
    for p in &found {
        for path in segments(&dir, p) {
            let (_, first) = parse_segment_name(&path).unwrap_or_else(|| {
                panic!("segment name {} is not <16 hex>-<16 hex>.wal", path.display())
            });
            let seg = read_segment(&path);
            assert_eq!(
                seg.trailing,
                0,
                "{}: bytes after the last good record: {seg:?}",
                path.display()
            );
            assert!(!seg.records.is_empty(), "{}: no records", path.display());
            eprintln!(
                "{}: version {} reserved {} first revision {first}, {} records",
                path.display(),
                seg.version,
                seg.reserved,
                seg.records.len()
            );
        }
    }
    let pods = segments(&dir, "+registry+pods+");
    assert_eq!(parse_segment_name(&pods[0]).unwrap().1, pod_rev as u64, "{pods:?}");
    let seg = read_segment(&pods[0]);
    let holding = |v: &[u8]| seg.records.iter().position(|r| contains(&r.body, v));
    let (p1, p2) = (holding(b"pod-value-1"), holding(b"pod-value-2"));
    assert!(p1.is_some() && p1 < p2, "the pods records, in order: {seg:?}");
    let widgets = segments(&dir, "+registry+example.com+widgets+");
    assert_eq!(parse_segment_name(&widgets[0]).unwrap().1, widget_rev as u64, "{widgets:?}");
    let meta: usize = segments(&dir, "_meta").iter().map(|p| read_segment(p).records.len()).sum();
    assert!(meta >= 3, "two grants, a revoke and a compaction in _meta: {meta} records");

    // And it all comes back.
    let s = dir.start(&[]).await;
    h.check(&s, h.last_rev(), "restart").await;
}

/// Several kube-apiservers sharing the store, each under its own `--etcd-prefix`: each prefix's
/// resources are partitions of their own (a log stream each), an undeclared prefix's keys share
/// the default partition, and a restart with other prefixes declared serves every key still
/// (recovery places a record by its key, not by the stream it was logged in).
#[tokio::test]
async fn each_registry_prefix_partitions_its_own_resources_across_restarts() {
    let dir = DataDir::new();
    let s = dir.start(&["--registry-prefix=/registry,/tenant-a"]).await;
    let mut raw = s.raw_clients().await;
    let mut h = History::default();
    h.put(&mut raw, "/registry/pods/ns/p1", "pod").await;
    h.put(&mut raw, "/tenant-a/pods/ns/p1", "a-pod-1").await;
    h.put(&mut raw, "/tenant-a/leases/kube-node-lease/n1", "a-lease").await;
    h.put(&mut raw, "/tenant-b/pods/ns/p1", "b-pod").await;
    h.put(&mut raw, "/tenant-a/pods/ns/p2", "a-pod-2").await;
    let _ = s.kill9();

    let found = partitions(&dir);
    for p in ["_default", "+registry+pods+", "+tenant-a+pods+", "+tenant-a+leases+"] {
        assert!(found.contains(p), "no partition directory {p} in {found:?}");
    }
    assert!(
        !found.contains("+tenant-b+pods+"),
        "an undeclared prefix has no partitions: {found:?}"
    );

    // The same prefixes, then tenant-a forgotten and tenant-b declared: every key, its
    // revisions and a count over a prefix are the same each time.
    for flags in ["--registry-prefix=/registry,/tenant-a", "--registry-prefix=/tenant-b"] {
        let s = dir.start(&[flags]).await;
        h.check(&s, h.last_rev(), flags).await;
        let mut raw = s.raw_clients().await;
        let r = raw
            .kv
            .range(pb::RangeRequest {
                key: b("/tenant-a/"),
                range_end: b("/tenant-a0"),
                count_only: true,
                ..Default::default()
            })
            .await
            .expect("count")
            .into_inner();
        assert_eq!(r.count, 3, "{flags}: tenant-a's keys");
        if flags.contains("tenant-b") {
            h.put(&mut raw, "/tenant-b/pods/ns/p2", "b-pod-2").await;
            let _ = s.kill9();
            assert!(partitions(&dir).contains("+tenant-b+pods+"), "{flags}: tenant-b's pods");
            let s = dir.start(&[flags]).await;
            h.check(&s, h.last_rev(), "tenant-b's pods after a restart").await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Torn tails and corruption

async fn write_rounds(h: &mut History, raw: &mut Raw, tag: &str, rounds: usize) {
    for i in 0..rounds {
        h.put(raw, &format!("/registry/pods/ns/p{i}"), &format!("{tag}-pod-{i}")).await;
        h.put(raw, &format!("/registry/configmaps/ns/c{i}"), &format!("{tag}-cm-{i}")).await;
        h.put(raw, &format!("/other/o{i}"), &format!("{tag}-other-{i}")).await;
    }
}

/// A torn tail (the newest record of a partition cut short, or garbage after it) is truncated
/// with a warning and the server starts; everything before it is intact, and the WAL stays
/// usable: writes after the repair survive the next crash, which finds nothing torn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torn_tails_are_truncated_with_a_warning() {
    let dir = DataDir::new();
    let mut h = History::default();
    let s = dir.start(&[]).await;
    let mut raw = s.raw_clients().await;
    write_rounds(&mut h, &mut raw, "a", 8).await;
    let last_pod = h.put(&mut raw, "/registry/pods/ns/p-last", "a-pod-last").await;
    // Newer revisions in other partitions: the cut takes them too.
    h.put(&mut raw, "/registry/configmaps/ns/c-after", "a-cm-after").await;
    h.put(&mut raw, "/other/o-after", "a-other-after").await;
    let _ = s.kill9();

    // 1. The newest pods record loses its last 3 bytes.
    let seg = newest_segment(&dir, "+registry+pods+");
    let len = std::fs::metadata(&seg).unwrap().len();
    let last = read_segment(&seg).records.pop().expect("records");
    assert!(contains(&last.body, b"a-pod-last"), "the newest pods record holds the newest pod");
    std::fs::OpenOptions::new().write(true).open(&seg).unwrap().set_len(len - 3).unwrap();
    let s = dir.start(&[]).await;
    assert!(!s.grep_log("torn").is_empty(), "no warning with \"torn\":\n{}", s.log_tail());
    h.check(&s, last_pod - 1, "after cutting the newest pods record short").await;
    h.truncate(last_pod - 1);
    let mut raw = s.raw_clients().await;
    write_rounds(&mut h, &mut raw, "b", 2).await;
    let _ = s.kill9();
    let s = dir.start(&[]).await;
    assert!(s.grep_log("torn").is_empty(), "torn again after the repair:\n{}", s.log_tail());
    h.check(&s, h.last_rev(), "writes after the repair").await;

    // 2-4. Damage after the newest record of a partition: nothing is lost.
    let mut incomplete = 200u32.to_le_bytes().to_vec();
    incomplete.extend_from_slice(&[0xAB; 14]);
    let body = b"not a record".to_vec();
    let mut bad_crc = (body.len() as u32).to_le_bytes().to_vec();
    bad_crc.extend_from_slice(&(crc32c::crc32c(&body) ^ 1).to_le_bytes());
    bad_crc.extend_from_slice(&body);
    let cases = [
        ("c", "+registry+configmaps+", incomplete, "after an incomplete record at the tail"),
        ("d", "+registry+pods+", bad_crc, "after a record with a bad CRC at the tail"),
        ("e", "_default", vec![7, 0, 0], "after a partial record header at the tail"),
    ];
    let mut s = s;
    for (tag, stream, damage, what) in cases {
        let mut raw = s.raw_clients().await;
        write_rounds(&mut h, &mut raw, tag, 2).await;
        let _ = s.kill9();
        append(&newest_segment(&dir, stream), &damage);
        s = dir.start(&[]).await;
        assert!(!s.grep_log("torn").is_empty(), "no warning with \"torn\":\n{}", s.log_tail());
        h.check(&s, h.last_rev(), what).await;
    }
    let mut raw = s.raw_clients().await;
    write_rounds(&mut h, &mut raw, "f", 1).await;
    let _ = s.kill9();
    let s = dir.start(&[]).await;
    assert!(s.grep_log("torn").is_empty(), "torn again after the repairs:\n{}", s.log_tail());
    h.check(&s, h.last_rev(), "the end").await;
}

fn append(path: &Path, bytes: &[u8]) {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}

/// A corrupt record with more records after it is not a torn write: the server refuses to start,
/// naming the file and the offset, and changes nothing. With `--wal-repair` it starts, cut at that
/// record (the state of the revision before it), and says how many records it dropped; the data
/// it dropped does not come back later, even when new writes reuse those revisions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corruption_in_the_middle_stops_the_start_unless_repair() {
    let dir = DataDir::new();
    let mut h = History::default();
    let s = dir.start(&["--fsync"]).await;
    let mut raw = s.raw_clients().await;
    write_rounds(&mut h, &mut raw, "a", 12).await;
    let _ = s.kill9();

    let seg = newest_segment(&dir, "+registry+pods+");
    let records = read_segment(&seg).records;
    let (index, record) = records
        .iter()
        .enumerate()
        .find(|(_, r)| contains(&r.body, b"a-pod-4"))
        .expect("a record holding a-pod-4");
    assert!(index + 1 < records.len(), "records after the corrupt one");
    let corrupt_rev =
        h.writes.iter().find(|w| w.2.as_deref() == Some("a-pod-4")).expect("written").0;
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[record.offset + RECORD_HEADER + record.body.len() / 2] ^= 0x40;
    std::fs::write(&seg, &bytes).unwrap();

    let ex = dir.start_expecting_failure(&["--fsync"]).await;
    assert!(!ex.status.success(), "{ex:?}");
    let name = seg.file_name().unwrap().to_str().unwrap();
    let stderr = ex.stderr.join("\n");
    assert!(
        stderr.contains(name) && stderr.contains("+registry+pods+"),
        "stderr does not name the corrupt file {}:\n{stderr}",
        seg.display()
    );
    let offsets = ex.grep("offset");
    assert!(
        offsets.iter().any(|l| has_number(l, record.offset)),
        "stderr does not give the corrupt record's offset {}:\n{stderr}",
        record.offset
    );
    assert_eq!(std::fs::read(&seg).unwrap(), bytes, "a refused start changed the segment");

    let s = dir.start(&["--fsync", "--wal-repair"]).await;
    let dropped = s.grep_log("dropped");
    assert!(!dropped.is_empty(), "no \"dropped\" in the log:\n{}", s.log_tail());
    eprintln!("repair said: {dropped:?}");
    h.check(&s, corrupt_rev - 1, "after the repair").await;
    h.truncate(corrupt_rev - 1);
    let mut raw = s.raw_clients().await;
    write_rounds(&mut h, &mut raw, "b", 3).await;
    let _ = s.kill9();
    let s = dir.start(&["--fsync"]).await;
    assert!(
        s.grep_log("torn").is_empty() && s.grep_log("dropped").is_empty(),
        "the repaired WAL is not clean:\n{}",
        s.log_tail()
    );
    h.check(&s, h.last_rev(), "writes after the repair, after another crash").await;
}

// ---------------------------------------------------------------------------------------------
// Leases and compaction

/// Leases come back with their keys; a revoked lease stays revoked (and its keys deleted); a
/// recovered lease gets its full TTL again; the expiry loop expires recovered leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_survive_restart_with_their_keys() {
    let dir = DataDir::new();
    let s = dir.start(&[]).await;
    let mut raw = s.raw_clients().await;
    let mut l = lease_client(&s).await;
    let grant = async |l: &mut LeaseClient<Channel>, id: i64, ttl: i64| {
        let r = l.lease_grant(pb::LeaseGrantRequest { id, ttl }).await.expect("grant");
        assert_eq!((r.get_ref().id, r.get_ref().error.as_str()), (id, ""));
    };
    let put_leased = async |raw: &mut Raw, k: &str, lease: i64| -> i64 {
        let r = raw.kv.put(pb::PutRequest { key: b(k), value: b(k), lease, ..Default::default() });
        header_rev(r.await.unwrap_or_else(|e| panic!("put {k}: {e:?}")).into_inner().header)
    };
    let (a, bl, c, e) = (1000, 2000, 3000, 4000);
    grant(&mut l, a, 600).await;
    grant(&mut l, bl, 600).await;
    grant(&mut l, c, 5).await;
    put_leased(&mut raw, "/registry/pods/ns/a1", a).await;
    put_leased(&mut raw, "/registry/configmaps/ns/a2", a).await;
    put_leased(&mut raw, "/leased/a3", a).await;
    put_leased(&mut raw, "/registry/pods/ns/a4", a).await;
    put_leased(&mut raw, "/registry/pods/ns/a4", 0).await; // detached again
    put_leased(&mut raw, "/registry/pods/ns/b1", bl).await;
    put_leased(&mut raw, "/registry/leases/ns/c1", c).await;
    l.lease_revoke(pb::LeaseRevokeRequest { id: bl }).await.expect("revoke");
    // Let c's TTL run down, so that a full TTL after the restart is told from what was left:
    // 3 s of its 5 gone leaves at most 2, a second below the full TTL's least.
    tokio::time::sleep(Duration::from_secs(3)).await;
    grant(&mut l, e, 2).await;
    put_leased(&mut raw, "/registry/pods/ns/e1", e).await;
    let (before, state) = range_all(&mut raw, 0).await;
    let _ = s.kill9();

    let restarted = Instant::now();
    let s = dir.start(&[]).await;
    let mut l = lease_client(&s).await;
    let mut raw = s.raw_clients().await;
    let ttl_c = l.lease_time_to_live(pb::LeaseTimeToLiveRequest { id: c, keys: true }).await;
    let ttl_c = ttl_c.expect("time-to-live").into_inner();
    let since = restarted.elapsed();
    assert!(
        ttl_c.ttl >= 3 && ttl_c.granted_ttl == 5,
        "lease {c} (TTL 5, 3 s of it gone before the crash) should have its full TTL again \
         after the restart ({since:?} ago): {ttl_c:?}"
    );
    assert_eq!(ttl_c.keys, vec![b("/registry/leases/ns/c1")]);
    let (now, recovered) = range_all(&mut raw, 0).await;
    assert_eq!((now, &recovered), (before, &state), "the keys, with their leases");
    assert_eq!(recovered["/registry/pods/ns/a1"].lease, a);
    assert_eq!(recovered["/registry/pods/ns/a4"].lease, 0);
    assert!(!recovered.contains_key("/registry/pods/ns/b1"), "the revoked lease's key");
    let ids: BTreeSet<i64> = l
        .lease_leases(pb::LeaseLeasesRequest {})
        .await
        .expect("leases")
        .into_inner()
        .leases
        .iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(ids, BTreeSet::from([a, c, e]), "the leases after the restart");
    let ttl_a = l.lease_time_to_live(pb::LeaseTimeToLiveRequest { id: a, keys: true }).await;
    let ttl_a = ttl_a.expect("time-to-live").into_inner();
    let mut keys_a: Vec<Bytes> = ttl_a.keys.clone();
    keys_a.sort();
    assert_eq!(
        (ttl_a.granted_ttl, keys_a),
        (600, vec![b("/leased/a3"), b("/registry/configmaps/ns/a2"), b("/registry/pods/ns/a1")]),
        "{ttl_a:?}"
    );
    assert!(ttl_a.ttl > 590, "{ttl_a:?}");
    let ttl_b = l.lease_time_to_live(pb::LeaseTimeToLiveRequest { id: bl, keys: false }).await;
    assert_eq!(ttl_b.expect("time-to-live").into_inner().ttl, -1, "the revoked lease");
    let r = raw
        .kv
        .put(pb::PutRequest { key: b("/x"), value: b("x"), lease: bl, ..Default::default() })
        .await;
    assert_status(r, Code::NotFound, E_LEASE_NOT_FOUND);

    // e (TTL 2) expires after the restart, deleting its key; a keeps its keys.
    let what = format!("lease {e}'s key to go after the restart (TTL 2)");
    let m = wait_until(&what, Duration::from_secs(6), || {
        let mut raw = raw.clone();
        async move {
            let (_, m) = range_all(&mut raw, 0).await;
            (!m.contains_key("/registry/pods/ns/e1")).then_some(m)
        }
    })
    .await;
    assert!(m.contains_key("/registry/pods/ns/a1"));
    let (expired_at, state) = range_all(&mut raw, 0).await;
    let _ = s.kill9();

    // The expiry is durable too.
    let s = dir.start(&[]).await;
    let mut raw = s.raw_clients().await;
    let mut l = lease_client(&s).await;
    assert_eq!(range_all(&mut raw, 0).await, (expired_at, state), "after the expiry");
    let ttl_e = l.lease_time_to_live(pb::LeaseTimeToLiveRequest { id: e, keys: false }).await;
    assert_eq!(ttl_e.expect("time-to-live").into_inner().ttl, -1, "the expired lease");
}

/// The compaction revision survives restarts: reads below it fail as before, reads at it see
/// its state, a watch from below it is canceled as compacted and one from it replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_survives_restart() {
    let dir = DataDir::new();
    let s = dir.start(&["--fsync"]).await;
    let mut raw = s.raw_clients().await;
    let mut h = History::default();
    for i in 0..4 {
        h.put(&mut raw, "/registry/pods/ns/a", &format!("a{i}")).await;
        h.put(&mut raw, "/other/b", &format!("b{i}")).await;
    }
    h.del(&mut raw, "/other/b").await;
    let c = h.put(&mut raw, "/registry/pods/ns/c", "c0").await;
    compact(&mut raw, c).await;
    for i in 1..4 {
        h.put(&mut raw, "/registry/pods/ns/a", &format!("a{}", 10 + i)).await;
        h.put(&mut raw, "/other/b", &format!("b{}", 10 + i)).await;
    }
    let _ = s.kill9();

    let s = dir.start(&["--fsync"]).await;
    let mut raw = s.raw_clients().await;
    h.check(&s, h.last_rev(), "after the restart").await;
    assert_compacted(raw.kv.range(range_all_request(c - 1)).await, "range below the compaction");
    assert_eq!(range_all(&mut raw, c).await.1, h.state_at(c), "range at the compaction revision");
    let mut ws = Ws::open(&s).await;
    ws.create(on_all().since(c - 1));
    let created = ws.next().await;
    assert!(created.created, "{}", show(&created));
    let canceled = ws.next().await;
    assert!(
        canceled.canceled && canceled.compact_revision == c,
        "a watch from below the compaction: {}",
        show(&canceled)
    );
    assert_eq!(replay(&s, c, h.last_rev()).await, h.events_from(c), "replay from {c}");

    // A newer compaction after the restart is durable too.
    let c2 = h.last_rev() - 1;
    compact(&mut raw, c2).await;
    let _ = s.kill9();
    let s = dir.start(&["--fsync"]).await;
    let mut raw = s.raw_clients().await;
    assert_compacted(raw.kv.range(range_all_request(c2 - 1)).await, "below the second compaction");
    assert_eq!(range_all(&mut raw, c2).await.1, h.state_at(c2));
    assert_eq!(replay(&s, c2, h.last_rev()).await, h.events_from(c2), "replay from {c2}");
}

/// A compaction takes effect only once the log holds it. While the disk is full it is held:
/// reads below it still succeed and a watch from below it still replays, and a crash then
/// leaves no trace of it; once the disk works it is acknowledged, and only then do reads below
/// it fail, also after a crash. (It used to take effect before it was logged, so a crash could
/// undo a compaction clients had seen: found by the history checker's kill -9 runs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_takes_effect_only_once_logged() {
    let dir = DataDir::new();
    let fp = dir.aside("failpoint");
    set_failpoint(&fp, "");
    let args = ["--fsync", "--wal-failpoint", fp.to_str().unwrap()];
    let s = dir.start(&args).await;
    let mut raw = s.raw_clients().await;
    let mut h = History::default();
    for i in 0..4 {
        h.put(&mut raw, "/registry/pods/ns/a", &format!("a{i}")).await;
    }
    let target = h.last_rev() - 1;

    // The disk fills up under the compaction, and the server is killed.
    let held = hold_compaction(&s, &raw, &fp, target).await;
    let below = try_range_all(&mut raw, target - 1).await;
    assert!(below.is_ok(), "a read below a compaction not yet logged: {below:?}");
    let events = replay(&s, target - 1, h.last_rev()).await;
    assert_eq!(events, h.events_from(target - 1), "a watch from below it");
    let _ = s.kill9();
    held.abort();
    set_failpoint(&fp, "");
    let s = dir.start(&args).await;
    let mut raw = s.raw_clients().await;
    let below = try_range_all(&mut raw, target - 1).await;
    assert!(below.is_ok(), "after the crash, a read below the compaction never logged: {below:?}");

    // Again, and the disk comes back.
    let held = hold_compaction(&s, &raw, &fp, target).await;
    let below = try_range_all(&mut raw, target - 1).await;
    assert!(below.is_ok(), "a read below a compaction not yet logged: {below:?}");
    set_failpoint(&fp, "");
    let r = tokio::time::timeout(WAIT, held).await;
    assert!(matches!(r, Ok(Ok(Ok(_)))), "the held compaction, once the disk works again: {r:?}");
    assert_compacted(raw.kv.range(range_all_request(target - 1)).await, "below it, acknowledged");
    let _ = s.kill9();
    let s = dir.start(&args).await;
    let mut raw = s.raw_clients().await;
    assert_compacted(raw.kv.range(range_all_request(target - 1)).await, "below it, after a crash");
    h.check(&s, h.last_rev(), "after the crash").await;
}

/// Fills the disk (`--wal-failpoint`), sends a compaction at `rev` and returns it once the
/// server has met the fault and the compaction is still unanswered a moment later.
async fn hold_compaction(
    s: &Server,
    raw: &Raw,
    fp: &Path,
    rev: i64,
) -> tokio::task::JoinHandle<Result<tonic::Response<pb::CompactionResponse>, tonic::Status>> {
    let reported = s.grep_log("wal: write failed").len();
    set_failpoint(fp, "enospc");
    let mut held = raw.clone();
    let compaction = tokio::spawn(async move {
        held.kv.compact(pb::CompactionRequest { revision: rev, physical: false }).await
    });
    wait_until("the WAL to report the fault", WAIT, || {
        std::future::ready(s.grep_log("wal: write failed").len() > reported)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !compaction.is_finished(),
        "a compaction acknowledged with a full disk: {compaction:?}"
    );
    compaction
}

// ---------------------------------------------------------------------------------------------
// Excluded prefixes

/// Keys under `--wal-exclude-prefix` never reach the disk and are gone after a restart, but the
/// revision never goes back, even when the newest writes were to excluded keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn excluded_prefixes_are_not_persisted_but_revisions_never_go_back() {
    let seed = seed("excluded_prefixes");
    let args = [
        "--fsync",
        "--wal-exclude-prefix",
        "/registry/events/",
        "--wal-exclude-prefix",
        "/scratch/",
    ];
    let excluded = |k: &str| k.starts_with("/registry/events/") || k.starts_with("/scratch/");
    let dir = DataDir::new();
    let s = dir.start(&args).await;
    let mut raw = s.raw_clients().await;
    let mut h = History::default();
    let secret = |i: usize| format!("EXCLUDED-{seed}-{i}");
    for i in 0..5 {
        h.put(&mut raw, &format!("/registry/pods/ns/p{i}"), &format!("kept-{seed}-{i}")).await;
        h.put(&mut raw, &format!("/registry/events/ns/e{i}"), &secret(i)).await;
    }
    // One txn over a kept and an excluded key.
    let r = raw
        .kv
        .txn(pb::TxnRequest {
            success: vec![
                put_rq("/registry/pods/ns/pt", "kept-txn"),
                put_rq("/registry/events/ns/et", &secret(100)),
            ],
            ..Default::default()
        })
        .await
        .expect("txn")
        .into_inner();
    let txn_rev = header_rev(r.header);
    h.record(txn_rev, "/registry/pods/ns/pt", Some("kept-txn"));
    h.record(txn_rev, "/registry/events/ns/et", Some(&secret(100)));
    h.del(&mut raw, "/registry/pods/ns/p0").await;
    // The newest writes are all excluded.
    for i in 5..10 {
        h.put(&mut raw, &format!("/registry/events/ns/e{i}"), &secret(i)).await;
        h.put(&mut raw, &format!("/scratch/s{i}"), &secret(i + 1000)).await;
    }
    let last = h.last_rev();
    let _ = s.kill9();

    let kept = |h: &History, rev: i64| -> BTreeMap<String, Kv> {
        h.state_at(rev).into_iter().filter(|(k, _)| !excluded(k)).collect()
    };
    let s = dir.start(&args).await;
    let mut raw = s.raw_clients().await;
    let (now, state) = range_all(&mut raw, 0).await;
    assert_eq!(state, kept(&h, last), "the kept keys, and no excluded one");
    assert!(now >= last, "revision {now} after the restart, {last} acknowledged before");
    for f in files_below(dir.path()) {
        let data = std::fs::read(&f).unwrap();
        for i in (0..10).chain([100]).chain(1005..1010) {
            assert!(!contains(&data, secret(i).as_bytes()), "{} holds {}", f.display(), secret(i));
        }
    }
    let on_disk = files_below(dir.path())
        .iter()
        .any(|f| contains(&std::fs::read(f).unwrap(), format!("kept-{seed}-3").as_bytes()));
    eprintln!("kept values found verbatim on disk (the scan's control): {on_disk}");
    let _ = s.kill9();

    // A restart with no write in between does not go back either.
    let s = dir.start(&args).await;
    let mut raw = s.raw_clients().await;
    assert!(current(&mut raw).await >= now, "the second restart went back");
    let r = raw.kv.put(pb::PutRequest {
        key: b("/registry/pods/ns/new"),
        value: b("new"),
        ..Default::default()
    });
    let new_rev = header_rev(r.await.expect("put").into_inner().header);
    assert!(new_rev > last, "a new write got {new_rev}, {last} was acknowledged before");
    let _ = s.kill9();
    let s = dir.start(&args).await;
    let mut raw = s.raw_clients().await;
    let (now, state) = range_all(&mut raw, 0).await;
    assert!(now >= new_rev, "revision {now} after the third restart, {new_rev} before");
    assert_eq!(
        state["/registry/pods/ns/new"],
        kv("/registry/pods/ns/new", "new", new_rev, new_rev, 1)
    );
}

// ---------------------------------------------------------------------------------------------
// Snapshots

/// With small segments and snapshots, overwriting the same keys many times keeps the WAL small
/// (covered segments are deleted), and a restart from snapshot plus WAL has every key exactly,
/// the compaction revision, and the event history since it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn snapshots_bound_the_wal_and_restore_exactly() {
    let args = ["--wal-segment-bytes", "65536", "--wal-snapshot-bytes", "262144"];
    let dir = DataDir::new();
    let s = dir.start(&args).await;
    let groups =
        ["/registry/pods/ns/", "/registry/configmaps/ns/", "/registry/secrets/ns/", "/snap/"];
    let written = Arc::new(AtomicU64::new(0));
    let overwrite = async |rounds: std::ops::Range<usize>| {
        let mut tasks = Vec::new();
        for g in groups {
            let mut raw = s.raw_clients().await;
            let written = written.clone();
            let rounds = rounds.clone();
            tasks.push(tokio::spawn(async move {
                for round in rounds {
                    for i in 0..25 {
                        let k = format!("{g}k{i}");
                        let v = format!("{round}:{k}:{}", "v".repeat(1000));
                        let r = raw.kv.put(pb::PutRequest {
                            key: b(&k),
                            value: b(&v),
                            ..Default::default()
                        });
                        r.await.unwrap_or_else(|e| panic!("put {k}: {e:?}"));
                        written.fetch_add((k.len() + v.len()) as u64, SeqCst);
                    }
                }
            }));
        }
        for t in tasks {
            t.await.expect("writer");
        }
    };
    overwrite(0..40).await;
    let mut raw = s.raw_clients().await;
    let c = current(&mut raw).await;
    compact(&mut raw, c).await;
    overwrite(40..44).await;
    let written = written.load(SeqCst);

    let bound = (written / 4).min(1 << 20);
    let start = Instant::now();
    let mut wal = size_below(&wal_dir(&dir));
    while wal > bound && start.elapsed() < WAIT {
        tokio::time::sleep(Duration::from_millis(50)).await;
        wal = size_below(&wal_dir(&dir));
    }
    let snap = size_below(&dir.path().join("snap"));
    let files = files_below(&wal_dir(&dir));
    eprintln!(
        "{written} bytes written; WAL {wal} bytes in {} files; snapshots {snap} bytes",
        files.len()
    );
    assert!(wal <= bound, "the WAL holds {wal} bytes after {written} written (bound {bound})");
    assert!(!files_below(&dir.path().join("snap")).is_empty(), "no snapshot under DIR/snap");
    for f in &files {
        let len = f.metadata().unwrap().len();
        assert!(
            len <= 65536 + 32768,
            "{} is {len} bytes with --wal-segment-bytes 65536",
            f.display()
        );
    }

    let (rev, state) = range_all(&mut raw, 0).await;
    assert_eq!(state.len(), 100);
    let history = replay(&s, c, rev).await;
    let _ = s.kill9();
    let s = dir.start(&args).await;
    let mut raw = s.raw_clients().await;
    let (rev2, state2) = range_all(&mut raw, 0).await;
    assert_eq!(rev2, rev, "the revision after the restart");
    for (k, v) in &state {
        assert_eq!(state2.get(k), Some(v), "{k} after the restart");
    }
    assert_eq!(state2.len(), state.len());
    assert_compacted(raw.kv.range(range_all_request(c - 1)).await, "below the compaction");
    let again = replay(&s, c, rev).await;
    assert_eq!(again.len(), history.len(), "events since the compaction at {c}");
    if let Some(i) = (0..again.len()).find(|&i| again[i] != history[i]) {
        panic!(
            "event {i} since the compaction at {c}: {:?} before the restart, {:?} after",
            history[i].brief(),
            again[i].brief()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Process-level behaviour

/// A second server on a data dir in use refuses to start, and the first one goes on serving.
/// Once the first is gone (here: a clean stop), the data dir can be used again.
#[tokio::test]
async fn a_second_server_on_the_same_data_dir_fails() {
    let dir = DataDir::new();
    let s = dir.start(&[]).await;
    let mut raw = s.raw_clients().await;
    let mut h = History::default();
    h.put(&mut raw, "/registry/pods/ns/p", "1").await;
    let ex = dir.start_expecting_failure(&[]).await;
    assert!(!ex.status.success(), "{ex:?}");
    assert!(!ex.stderr.is_empty(), "the refusal says nothing on stderr");
    eprintln!("the second server said:\n{}", ex.output());
    h.put(&mut raw, "/registry/pods/ns/p", "2").await;
    h.check(&s, h.last_rev(), "the first server after the second one's attempt").await;
    let ex = s.stop(Duration::from_secs(10)).await;
    assert!(ex.status.success(), "exit after SIGTERM: {}\n{}", ex.status, ex.output());
    let s = dir.start(&[]).await;
    h.check(&s, h.last_rev(), "after the first one stopped").await;
}

/// SIGTERM: the server exits cleanly and a restart has everything, in both modes.
#[tokio::test]
async fn a_clean_stop_keeps_everything() {
    for args in [&["--wal-mode", "buffered", "--wal-flush-interval", "10s"][..], &["--fsync"][..]] {
        let dir = DataDir::new();
        let s = dir.start(args).await;
        let mut raw = s.raw_clients().await;
        let mut h = History::default();
        write_rounds(&mut h, &mut raw, "x", 5).await;
        h.del(&mut raw, "/other/o2").await;
        // Prompt, whatever the flush interval.
        let ex = s.stop(Duration::from_secs(5)).await;
        assert!(
            ex.status.success(),
            "{args:?}: exit after SIGTERM: {}\n{}",
            ex.status,
            ex.output()
        );
        let s = dir.start(args).await;
        h.check(&s, h.last_rev(), &format!("{args:?}: after a clean stop")).await;
    }
}

/// `--wal-mode none`: nothing is kept.
#[tokio::test]
async fn wal_mode_none_keeps_nothing() {
    let dir = DataDir::new();
    let s = dir.start(&["--wal-mode", "none"]).await;
    let mut raw = s.raw_clients().await;
    let mut h = History::default();
    write_rounds(&mut h, &mut raw, "x", 3).await;
    let _ = s.kill9();
    let wal_files: Vec<PathBuf> = files_below(&wal_dir(&dir));
    assert!(wal_files.is_empty(), "WAL files in mode none: {wal_files:?}");
    let s = dir.start(&["--wal-mode", "none"]).await;
    let mut raw = s.raw_clients().await;
    assert_eq!(range_all(&mut raw, 0).await, (1, BTreeMap::new()), "a fresh store");
}

// ---------------------------------------------------------------------------------------------
// A full disk

/// The disk fills up (`--wal-failpoint` says `failure`) while writers run: new writes fail with
/// UNAVAILABLE "etcdserver: WAL write failed", reads go on, nothing is acknowledged; once the
/// disk works again the held writes are acknowledged and new ones succeed within about a second.
/// A crash afterwards loses nothing acknowledged, and refused writes never appear. Then the disk
/// fills up again and the server is killed while it is full: the restart works (whatever the
/// failed write left on disk) and loses nothing acknowledged.
async fn disk_full(test: &str, failure: &str, mode: &[&str]) {
    let seed = seed(test);
    let dir = DataDir::new();
    let fp = dir.aside("failpoint");
    set_failpoint(&fp, "");
    let mut args: Vec<&str> = vec!["--wal-failpoint", fp.to_str().unwrap()];
    args.extend(mode);
    let mut writers: Vec<Writer> = (0..WRITERS).map(|i| Writer::new(i, seed)).collect();
    let mut probe = Writer::probe(seed);
    let mut acked_max = 1;
    let mut s = dir.start(&args).await;
    for phase in 0..2 {
        let ctx = format!("{test} (seed {seed}) phase {phase}");
        let ctl = Control::new(true, acked_max);
        let tag = format!("p{phase}");
        let handles = start_writers(&s, std::mem::take(&mut writers), &ctl, &tag).await;
        probe.new_round();
        let mut raw = s.raw_clients().await;
        let n = ctl.acked.load(SeqCst) + 100;
        wait_until("100 acknowledged writes", WAIT, || {
            std::future::ready(ctl.acked.load(SeqCst) >= n)
        })
        .await;

        // Wait for the server to meet the fault (its log says so right after it starts
        // refusing writes) rather than a fixed time: on a loaded machine an fdatasync can take
        // longer than any fixed wait, and a write sent before the fault is met is accepted.
        let reported = s.grep_log("wal: write failed").len();
        set_failpoint(&fp, failure);
        wait_until("the WAL to report the fault", WAIT, || {
            std::future::ready(s.grep_log("wal: write failed").len() > reported)
        })
        .await;
        // A new write fails fast.
        let op = probe.probe_op(&tag);
        let r = tokio::time::timeout(Duration::from_secs(5), send(&mut raw, &op)).await;
        match r {
            Ok(Err(SendError::Status(st))) if is_wal_failed(&st) => {
                ctl.stage.store(STAGE_DISK_FULL, SeqCst);
                probe.rejected.push(op);
            }
            other => panic!(
                "{ctx}: a write after the server met the full disk ({failure}) should fail with \
                 UNAVAILABLE {E_WAL_FAILED:?}..., got {other:?}"
            ),
        }
        // Reads go on.
        let r = tokio::time::timeout(Duration::from_secs(2), try_range_all(&mut raw, 0)).await;
        assert!(matches!(r, Ok(Ok(_))), "{ctx}: a range while the disk is full: {r:?}");
        // Nothing is acknowledged while the disk is full.
        let acked = ctl.acked.load(SeqCst);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            ctl.acked.load(SeqCst),
            acked,
            "{ctx}: writes acknowledged while the disk is full"
        );
        // Readers see every acknowledged write and none of the held ones (not written yet).
        assert_eq!(
            current(&mut raw).await,
            ctl.acked_max.load(SeqCst),
            "{ctx}: the revision readers see while the disk is full (every acknowledgement has \
             arrived by now)"
        );

        if phase == 1 {
            // Killed while the disk is full.
            ctl.killed.store(true, SeqCst);
            let _ = s.kill9();
            set_failpoint(&fp, "");
            writers = join_writers(handles, &ctx).await;
            acked_max = acked_max.max(ctl.acked_max.load(SeqCst));
            s = dir.start(&args).await;
            let mut all = std::mem::take(&mut writers);
            all.push(probe);
            let from = all.iter().flat_map(|w| w.acked.iter().filter_map(|a| a.rev)).min();
            verify(&s, &mut all, acked_max, from, &ctx).await;
            eprintln!(
                "{ctx}: the restart after a kill with a full disk logged: {:?}",
                s.grep_log("torn")
            );
            return;
        }

        set_failpoint(&fp, "");
        ctl.stage.store(STAGE_DISK_BACK, SeqCst);
        let emptied = Instant::now();
        loop {
            let before = probe.acked.len();
            let op = probe.probe_op(&tag);
            assert!(probe.step(&mut raw, op, &ctl).await, "{ctx}: probe: {:?}", probe.errors);
            if probe.acked.len() > before {
                break;
            }
            assert!(
                emptied.elapsed() < Duration::from_secs(3),
                "{ctx}: writes still fail {:?} after the disk works again",
                emptied.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let recovery = emptied.elapsed();
        // Every writer gets on: the writes held while the disk was full are acknowledged, and
        // new ones too.
        let held: Vec<u64> = ctl.acked_by.iter().map(|n| n.load(SeqCst)).collect();
        wait_until(
            "every writer's next acknowledgement after the disk works again",
            Duration::from_secs(5),
            || {
                std::future::ready(
                    ctl.acked_by.iter().zip(&held).all(|(n, h)| n.load(SeqCst) >= h + 2),
                )
            },
        )
        .await;
        let held = ctl.held_acked.load(SeqCst);
        eprintln!(
            "{ctx}: {} writes refused, {held} held and acknowledged once the disk worked again; \
             new writes succeed again {recovery:?} after",
            ctl.rejected.load(SeqCst)
        );
        assert!(
            held > 0,
            "{ctx}: no write in flight when the disk filled up was acknowledged after it came \
             back (the failing batch's writes must be retried, not refused)"
        );
        ctl.killed.store(true, SeqCst);
        let _ = s.kill9();
        writers = join_writers(handles, &ctx).await;
        acked_max = acked_max.max(ctl.acked_max.load(SeqCst));
        s = dir.start(&args).await;
        let mut all = std::mem::take(&mut writers);
        all.push(probe);
        let from = all.iter().flat_map(|w| w.acked.iter().filter_map(|a| a.rev)).min();
        verify(&s, &mut all, acked_max, from, &ctx).await;
        probe = all.pop().unwrap();
        writers = all;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn disk_full_enospc_fails_writes_then_recovers() {
    disk_full("disk_full_enospc", "enospc", &["--fsync"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn disk_full_short_write_fails_writes_then_recovers() {
    disk_full("disk_full_short", "short", &["--wal-mode", "buffered"]).await;
}
