//! What every run ends with, on one server or over a cluster: the history checked, the watches
//! checked against the linearization, and the runs of many seeds.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tonic::transport::Channel;

use super::checker::{
    Checked, WatchLog, check_history, check_watch_with, show_out, show_req, witness,
};
use super::model::{ErrKind, Op, Out, PREFIX, Req, State};
use super::traffic::{CLIENTS, Conn, Dial, LEASE_TTL, WatcherPlan, key_name, send, watcher};
use crate::api::watch::{CreateExt, Ev, Ws, on_prefix};

/// A watcher from an older revision, started while compactions run (after a seeded delay, from
/// a seeded revision between the first and the newest): it must deliver everything from there
/// or be refused with the compaction that removed its start.
pub(super) fn older_watcher(
    d: Dial,
    faulty: bool,
    seed: u64,
    t0: Instant,
    init_rev: i64,
    end_rx: tokio::sync::watch::Receiver<i64>,
) -> tokio::task::JoinHandle<Vec<WatchLog>> {
    let mut d = d;
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x01d);
    let delay = Duration::from_millis(rng.random_range(100..600));
    let plain = WatcherPlan { faults: faulty, ..Default::default() };
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let newest = loop {
            let mut conn = Conn::new(d.clone(), faulty).await;
            if let Some(Out::Ok(r)) = send(&mut conn.raw, &Req::Get { key: key_name(0) }, 0).await {
                break r.rev;
            }
            conn.recover().await;
        };
        let start = rng.random_range(init_rev + 1..=newest.max(init_rev + 1));
        d.mark_changed();
        watcher(d, t0, start, plain, end_rx).await
    })
}

/// What [`verify`] found.
pub(super) struct Verdict {
    /// The history as checked: refused writes left out, lease expiries added, in call order.
    pub(super) ops: Vec<Op>,
    /// Writes refused because the WAL failed.
    pub(super) refused: usize,
    /// Writes of unknown outcome no watcher saw take effect, left out of the search.
    pub(super) unseen: usize,
    /// Leases the linearization has the server expire.
    pub(super) expired: usize,
    /// Search states explored.
    pub(super) visited: usize,
}

/// Every check of a run, once its traffic is over: the history (`ops`, ending with a final
/// linearizable list at revision `end`) against the model, then each watcher's streams
/// (`logs`) against the linearization's events, then a watch from before the last compaction
/// opened on `refusing` (a connection to a server that has applied everything up to `end`).
/// Panics, naming the seed, on the first violation. `unknown_allowed`: the run had faults
/// that explain requests without an answer.
pub(super) async fn verify(
    seed: u64,
    mut ops: Vec<Op>,
    init: &State,
    logs: &[Vec<WatchLog>],
    end: i64,
    unknown_allowed: bool,
    refusing: Channel,
) -> Verdict {
    let refused = ops.iter().filter(|o| o.out == Out::Refused).count();
    ops.retain(|o| o.out != Out::Refused);
    // A grant without an answer whose lease no other operation names (its client never uses
    // it) is unobservable, and so is that lease's expiry: both are left out, or every such
    // grant would multiply the search's states by three.
    let named: HashSet<i64> = ops
        .iter()
        .filter_map(|o| match o.req {
            Req::CreateWithLease { lease, .. } => Some(lease),
            Req::Revoke { id } => Some(id),
            _ => None,
        })
        .collect();
    ops.retain(|o| {
        !(o.out == Out::Unknown && matches!(o.req, Req::Grant { id } if !named.contains(&id)))
    });
    // A write of unknown outcome that no watcher saw take effect did not, up to the end of the
    // history: every watcher from the start must deliver every event (its value is unique, and a
    // delete shows as a delete of its key after the version it names). Left out, it no longer
    // widens the search; should a watch have missed a write that took effect, the linearization
    // comes out a revision short and the check fails all the same.
    let mut values: HashSet<Vec<u8>> = HashSet::new();
    let mut deletes: HashSet<(Vec<u8>, Option<i64>)> = HashSet::new();
    for r in logs.iter().flatten().flat_map(|l| &l.responses) {
        for e in &r.events {
            let ev = Ev::from(e);
            if ev.put {
                values.insert(ev.kv.value.clone());
            } else {
                deletes.insert((ev.kv.key.clone(), ev.prev.as_ref().map(|p| p.mod_revision)));
            }
        }
    }
    let before = ops.len();
    ops.retain(|o| {
        o.out != Out::Unknown
            || match &o.req {
                Req::Create { value, .. }
                | Req::Update { value, .. }
                | Req::CreateAll { value, .. }
                | Req::CreateWithLease { value, .. } => values.contains(value),
                Req::Delete { key, seen } => {
                    deletes.contains(&(key.clone(), Some(*seen)))
                        || deletes.contains(&(key.clone(), None))
                }
                _ => true,
            }
    });
    let unseen = before - ops.len();
    // Every lease that may exist may expire, no sooner than its TTL after the grant was sent.
    let expiries: Vec<Op> = ops
        .iter()
        .filter(|o| matches!(o.out, Out::Ok(_) | Out::Unknown))
        .filter_map(|o| match o.req {
            Req::Grant { id } => Some(Op {
                client: CLIENTS + 1,
                call: o.call + Duration::from_secs(LEASE_TTL as u64).as_nanos() as u64,
                ret: u64::MAX,
                req: Req::Expire { id },
                out: Out::Unknown,
            }),
            _ => None,
        })
        .collect();
    ops.extend(expiries);
    ops.sort_by_key(|o| o.call);
    if !unknown_allowed {
        let unknown = ops
            .iter()
            .filter(|o| o.out == Out::Unknown && !matches!(o.req, Req::Expire { .. }))
            .count();
        assert_eq!(
            unknown, 0,
            "seed {seed}: requests without an answer, and no fault to explain them"
        );
    }
    let Checked { states, events, mut compactions, expired, visited } =
        check_history(&ops, init, &witness(logs)).unwrap_or_else(|e| {
            let mut unknown: BTreeMap<String, usize> = BTreeMap::new();
            for o in ops.iter().filter(|o| o.out == Out::Unknown) {
                let kind = show_req(&o.req);
                *unknown.entry(kind.split(' ').next().unwrap_or("").to_string()).or_default() += 1;
            }
            // The whole history, for analysing a failure (`MEM_ETCD_HISTORY_DUMP=<file>`).
            if let Ok(path) = std::env::var("MEM_ETCD_HISTORY_DUMP") {
                let lines: Vec<String> = ops
                    .iter()
                    .enumerate()
                    .map(|(i, o)| {
                        let (req, out) = (show_req(&o.req), show_out(&o.out));
                        format!("#{i} client {} [{}..{}] {req} -> {out}", o.client, o.call, o.ret)
                    })
                    .collect();
                let path = format!("{path}.seed{seed}");
                std::fs::write(&path, lines.join("\n")).expect("write the history dump");
            }
            panic!("seed {seed}: {e}\n(of unknown outcome: {unknown:?})")
        });
    // A compaction cut off by a crash may have taken effect without the search needing it
    // (nothing else observed it), yet a watch can see it: its revision counts for the watch
    // checks too.
    for o in &ops {
        if let (Req::Compact { rev }, Out::Unknown) = (&o.req, &o.out) {
            let call = compactions.entry(*rev).or_insert(o.call);
            *call = (*call).min(o.call);
        }
    }
    let final_state = states.values().next_back().expect("a state");
    assert_eq!(
        final_state.rev, end,
        "seed {seed}: expected the linearization to end at the server's revision"
    );
    // Where watcher `n` ran and how its streams went, for a failure's message.
    let streams = |segments: &[WatchLog]| {
        let starts: Vec<String> = segments
            .iter()
            .map(|l| {
                let member = l.responses.first().and_then(|r| r.header.as_ref());
                format!("{}@{:x}", l.start, member.map_or(0, |h| h.member_id))
            })
            .collect();
        format!(
            " (streams from revision@member {}; compactions {:?})",
            starts.join(" "),
            compactions.keys().collect::<Vec<_>>()
        )
    };
    for (n, segments) in logs.iter().enumerate() {
        let canceled = segments.last().and_then(|l| l.responses.last()).filter(|r| r.canceled);
        if let Some(c) = canceled {
            // A start compaction had removed (a resumption racing a compaction, or the watch
            // from an older revision): etcd's answer is a cancel naming a compaction that
            // took place and covers that start.
            let seg = segments.last().expect("a segment");
            assert!(
                c.compact_revision > seg.start && compactions.contains_key(&c.compact_revision),
                "seed {seed} watcher {n}: expected a cancel only for a compacted start, got compact_revision {} for start {} (compactions: {:?})",
                c.compact_revision,
                seg.start,
                compactions.keys().collect::<Vec<_>>()
            );
            let done = &segments[..segments.len() - 1];
            let upto = seg.start - 1;
            if !done.is_empty() {
                check_watch_with(done, &events, upto, &compactions).unwrap_or_else(|e| {
                    panic!("seed {seed} watcher {n}{}: {e}", streams(segments))
                });
            }
            continue;
        }
        check_watch_with(segments, &events, end, &compactions)
            .unwrap_or_else(|e| panic!("seed {seed} watcher {n}{}: {e}", streams(segments)));
    }
    // A watch from before the compaction must be refused with the compaction's revision.
    if final_state.compacted > init.rev + 1 {
        let mut ws = Ws::on(refusing, 64);
        ws.create(on_prefix(PREFIX).since(init.rev + 1));
        let r = loop {
            let r = ws.next().await;
            if r.canceled {
                break r;
            }
            assert!(
                r.created && r.events.is_empty(),
                "seed {seed}: expected a refusal of a compacted start, got {r:?}"
            );
        };
        assert_eq!(
            r.compact_revision,
            final_state.compacted,
            "seed {seed}: expected a watch from {} to be canceled with the compaction revision",
            init.rev + 1
        );
    }
    Verdict { ops, refused, unseen, expired, visited }
}

/// The lease part of a run's summary line.
pub(super) fn lease_summary(ops: &[Op], expired: usize) -> String {
    let leased = |f: &dyn Fn(&Op) -> bool| ops.iter().filter(|o| f(o)).count();
    format!(
        "; leases: {} granted, {} revoked, {} expired, {} keys created with one, {} refused as not found",
        leased(&|o| matches!(o.req, Req::Grant { .. }) && matches!(o.out, Out::Ok(_))),
        leased(&|o| matches!(o.req, Req::Revoke { .. }) && matches!(o.out, Out::Ok(_))),
        expired,
        leased(&|o| matches!(o.req, Req::CreateWithLease { .. })
            && matches!(&o.out, Out::Ok(r) if r.succeeded)),
        leased(&|o| o.out == Out::Err(ErrKind::LeaseNotFound)),
    )
}

/// [`super::server::seeds`] of any kind of run: `runs` seeds from `MEM_ETCD_HISTORY_SEED` (default 1), or new
/// ones until `MEM_ETCD_HISTORY_SOAK` seconds have passed; each run's summary is printed.
pub(super) async fn seeds_with<F, R>(name: &str, runs: u64, run: F)
where
    F: Fn(u64) -> R,
    R: std::future::Future<Output = String>,
{
    let soak = std::env::var("MEM_ETCD_HISTORY_SOAK").ok().and_then(|v| v.parse::<u64>().ok());
    let until = Instant::now() + Duration::from_secs(soak.unwrap_or(0));
    let base: u64 =
        std::env::var("MEM_ETCD_HISTORY_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let mut seed = base;
    loop {
        let t = Instant::now();
        let summary = run(seed).await;
        eprintln!("{name} seed {seed}: {summary}, in {:?}", t.elapsed());
        seed += 1;
        if seed - base >= runs && Instant::now() >= until {
            break;
        }
    }
}
