//! The runs on one server: the traffic alone, lease-heavy, with leases expiring, and with faults
//! (kill -9 restarts in fsync and buffered mode, a failing disk).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::checker::summary;
use super::model::{Op, Out, PREFIX, Req, State};
use super::traffic::{
    CLIENTS, Conn, Habits, Incarnation, KEYS, WatcherPlan, client, send, watcher,
};
use super::verify::{Verdict, lease_summary, older_watcher, seeds_with, verify};
use crate::api::watch::b;
use crate::storage::durability::set_failpoint;
use crate::support::*;

/// Runs (seeds) in the default, CI-sized test: about a second in release, ten in debug.
const RUNS: u64 = 10;
/// A client's average pause between operations in the runs of several seconds.
const THINK: Duration = Duration::from_millis(10);

/// The faults a run injects while its traffic goes on.
#[derive(Clone, Copy, Debug)]
struct Faults {
    /// The server's WAL mode flags.
    mode: &'static [&'static str],
    /// Kill the server with SIGKILL now and then and restart it on its data dir.
    kill: bool,
    /// Make the disk fail now and then (`--wal-failpoint`: `enospc` or `short`).
    disk: Option<&'static str>,
    /// Bytes of padding per value, so that a stalled watcher falls megabytes behind.
    pad: usize,
    /// The traffic runs at least this long, so leases (of `LEASE_TTL`) expire meanwhile.
    at_least: Duration,
}

/// What a fault-injecting run restarts its server with.
struct Host {
    dir: DataDir,
    failpoint: std::path::PathBuf,
    args: Vec<String>,
}

/// Faults injected per run.
const FAULTS_PER_RUN: usize = 3;

/// Injects `FAULTS_PER_RUN` of `f`'s faults, a few hundred milliseconds apart while the traffic
/// runs, then lets the traffic go on a little and `stop`s it. Returns the server then current,
/// the incarnation sender (the watchers wait on it until they are done) and how many kills and
/// full disks there were.
async fn inject(
    f: Faults,
    host: Arc<Host>,
    mut s: Server,
    incarnation: tokio::sync::watch::Sender<Incarnation>,
    stop: tokio::sync::watch::Sender<bool>,
    seed: u64,
) -> (Server, tokio::sync::watch::Sender<Incarnation>, usize, usize) {
    let mut rng = SmallRng::seed_from_u64(seed ^ 0xfa17);
    let args: Vec<&str> = host.args.iter().map(String::as_str).collect();
    let (mut kills, mut fulls) = (0, 0);
    let until = Instant::now() + f.at_least;
    let faults = if f.kill || f.disk.is_some() { FAULTS_PER_RUN } else { 0 };
    for n in 0..faults {
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..250))).await;
        let kill = match (f.kill, f.disk) {
            (true, Some(_)) => n % 2 == 1,
            (kill, _) => kill,
        };
        if kill {
            let _ = s.kill9();
            s = host.dir.start(&args).await;
            kills += 1;
            incarnation.send_modify(|i| {
                i.epoch += 1;
                i.endpoint = s.endpoint();
            });
        } else if let Some(fault) = f.disk {
            set_failpoint(&host.failpoint, fault);
            tokio::time::sleep(Duration::from_millis(rng.random_range(100..600))).await;
            set_failpoint(&host.failpoint, "");
            fulls += 1;
        }
    }
    // Traffic after the last fault too: the restarted server (or the disk that works again)
    // must take writes and serve reads that see everything before.
    tokio::time::sleep(Duration::from_millis(150)).await;
    tokio::time::sleep_until(until.into()).await;
    stop.send_replace(true);
    (s, incarnation, kills, fulls)
}

/// One run: a fresh server, `CLIENTS` clients and five watchers (three from the start, one
/// resuming twice; one from an older revision that compaction may have removed, started while
/// the traffic runs; one that stalls in fault runs); `faults` injected meanwhile; then every
/// check.
async fn run(seed: u64, faults: Option<Faults>) -> String {
    run_mix(seed, faults, false).await
}

/// [`run`], with the lease-heavy mix of operations or Kubernetes'.
async fn run_mix(seed: u64, faults: Option<Faults>, lease_heavy: bool) -> String {
    // Periodic progress notifications too, not only answers to requests, while the runs last.
    let progress = ["--watch-progress-notify-interval", "100ms"];
    let (first, host) = match faults {
        None => {
            let Some(s) = Server::start(target(), &progress).await else {
                return "skipped".into();
            };
            (s, None)
        }
        Some(f) => {
            let dir = DataDir::new();
            let failpoint = dir.aside("failpoint");
            set_failpoint(&failpoint, "");
            let mut args: Vec<String> = progress.iter().map(|a| a.to_string()).collect();
            args.extend(f.mode.iter().map(|a| a.to_string()));
            args.extend(["--wal-failpoint".to_string(), failpoint.display().to_string()]);
            let s = dir.start(&args.iter().map(String::as_str).collect::<Vec<_>>()).await;
            (s, Some(Arc::new(Host { dir, failpoint, args })))
        }
    };
    let pad = faults.map_or(0, |f| f.pad);
    let (incarnation, d) = tokio::sync::watch::channel(Incarnation {
        epoch: 0,
        endpoint: first.endpoint(),
        member: false,
        down: false,
    });
    let mut raw = first.raw_clients().await;
    // The store starts empty; its revision 1 is the model's initial state.
    let r0 = raw
        .kv
        .range(pb::RangeRequest { key: b(PREFIX), ..Default::default() })
        .await
        .expect("initial range");
    drop(raw);
    let init =
        State { rev: r0.into_inner().header.expect("header").revision, ..Default::default() };
    let (end_tx, end_rx) = tokio::sync::watch::channel(0i64);
    // The clock of every recorded time: operations' calls and returns, watch responses'
    // arrivals.
    let t0 = Instant::now();
    let faulty = faults.is_some();
    let plain = WatcherPlan { faults: faulty, ..Default::default() };
    let mut plans = vec![
        plain,
        WatcherPlan { resume_after: Some(5), ..plain },
        WatcherPlan { resume_after: Some(2), ..plain },
    ];
    if faulty {
        plans.push(WatcherPlan { stall: Some(Duration::from_millis(1500)), ..plain });
    }
    let mut watchers: Vec<_> = plans
        .into_iter()
        .map(|plan| tokio::spawn(watcher(d.clone(), t0, init.rev + 1, plan, end_rx.clone())))
        .collect();
    watchers.push(older_watcher(d.clone(), faulty, seed, t0, init.rev, end_rx.clone()));
    // Without faults the clients stop after their `OPS_PER_CLIENT`; with them, once the
    // injector is done.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(!faulty);
    let injector = match (faults, host.clone()) {
        (Some(f), Some(host)) => tokio::spawn(inject(f, host, first, incarnation, stop_tx, seed)),
        _ => tokio::spawn(async move { (first, incarnation, 0, 0) }),
    };
    let mut tasks = Vec::new();
    for id in 0..CLIENTS {
        let conn = Conn::new(d.clone(), faulty).await;
        // Runs of several seconds pace their clients, so that their histories stay a size the
        // search checks in seconds.
        let think = if faulty { THINK } else { Duration::ZERO };
        let habits = Habits { think, serializable: false, lease_heavy, read_heavy: false };
        tasks.push(tokio::spawn(client(id, conn, seed, t0, pad, stop_rx.clone(), habits)));
    }
    let mut ops = Vec::new();
    for t in tasks {
        ops.extend(t.await.expect("a client task panicked"));
    }
    let (s, _incarnation, kills, fulls) = injector.await.expect("the fault injector panicked");
    // The final state, read as one more operation of the history: the linearization must end
    // in exactly it (writes cut off by a crash included or not, as the server kept them).
    let mut raw = s.raw_clients().await;
    let last = Req::List { start: PREFIX.as_bytes().to_vec(), rev: 0, limit: KEYS as i64 + 1 };
    let call = t0.elapsed().as_nanos() as u64;
    let out = send(&mut raw, &last, 0).await.expect("final list");
    let ret = t0.elapsed().as_nanos() as u64;
    let Out::Ok(r) = &out else { panic!("seed {seed}: the final list: {out:?}") };
    let end = r.rev;
    ops.push(Op { client: CLIENTS, call, ret, req: last, out });
    end_tx.send(end).expect("the watchers listen");
    let mut logs = Vec::new();
    for w in watchers {
        logs.push(w.await.expect("a watcher panicked"));
    }
    let Verdict { ops, refused, unseen, expired, visited } =
        verify(seed, ops, &init, &logs, end, kills > 0, s.channel().await.expect("connect")).await;
    drop(s);
    let mut out = summary(&ops, &logs, visited);
    out += &lease_summary(&ops, expired);
    if faulty {
        let bytes = pad * ops.iter().filter(|o| o.req.is_write()).count();
        out += &format!(
            "; faults: {kills} kills, {fulls} full disks, {refused} writes refused, {unseen} of unknown outcome no watch saw; {} MiB of values sent",
            bytes >> 20
        );
    }
    out
}

/// Runs `RUNS`-sized batches of seeds (or, with `MEM_ETCD_HISTORY_SOAK=<seconds>`, new seeds
/// until that long has passed), each a fresh [`run`].
async fn seeds(name: &str, runs: u64, faults: Option<Faults>) {
    seeds_with(name, runs, |seed| run(seed, faults)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_is_linearizable_and_watches_keep_their_guarantees() {
    seeds("history", RUNS, None).await;
}

/// Revocations and grants among writes of other clients, on one server: a revocation's header
/// must be the revision its keys went at (or the current one when it had none), a grant's the
/// revision it took effect at, never a later one that writes of other clients raised meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_holds_with_lease_heavy_traffic() {
    seeds_with("history lease-heavy", RUNS, |seed| run_mix(seed, None, true)).await;
}

/// How long a fault run's traffic lasts at least: long enough for leases granted early to
/// expire (their TTL restarts with every restart).
pub(super) const FAULT_RUN: Duration = Duration::from_secs(4);

/// Leases expire while the traffic runs, with no other fault: their keys' deletion must be one
/// revision each, seen by every watcher, and puts with an expired lease refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_holds_while_leases_expire() {
    let f = Faults { mode: &["--fsync"], kill: false, disk: None, pad: 0, at_least: FAULT_RUN };
    seeds("history lease expiry", FAULT_RUNS / 2, Some(f)).await;
}

/// Values padded to this size in fault runs: enough that the stalled watcher falls megabytes
/// behind, few enough that a run stays a few seconds.
const FAULT_PAD: usize = 16 << 10;

/// The fault runs: each checks the same properties over a history in which the server was killed
/// and restarted (every acknowledged write must survive and no revision may be handed out
/// twice), or the disk failed (refused writes never take effect; held ones are acknowledged once
/// it works again), while one watcher stalls.
const FAULT_RUNS: u64 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_holds_across_kill9_restarts_in_fsync_mode() {
    let f =
        Faults { mode: &["--fsync"], kill: true, disk: None, pad: FAULT_PAD, at_least: FAULT_RUN };
    seeds("history kill9 fsync", FAULT_RUNS, Some(f)).await;
}

/// Buffered mode's loss window is an OS crash's (see the README's durability table); a killed
/// process loses nothing acknowledged, so the same history must hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_holds_across_kill9_restarts_in_buffered_mode() {
    let f = Faults {
        mode: &["--wal-mode", "buffered"],
        kill: true,
        disk: None,
        pad: FAULT_PAD,
        at_least: FAULT_RUN,
    };
    seeds("history kill9 buffered", FAULT_RUNS, Some(f)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_holds_while_the_disk_fills_up() {
    let enospc = Faults {
        mode: &["--fsync"],
        kill: true,
        disk: Some("enospc"),
        pad: FAULT_PAD,
        at_least: FAULT_RUN,
    };
    seeds("history enospc fsync", FAULT_RUNS / 2, Some(enospc)).await;
    let short = Faults {
        mode: &["--wal-mode", "buffered"],
        kill: true,
        disk: Some("short"),
        pad: FAULT_PAD,
        at_least: FAULT_RUN,
    };
    seeds("history short-write buffered", FAULT_RUNS / 2, Some(short)).await;
}
