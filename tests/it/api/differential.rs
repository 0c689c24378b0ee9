//! Differential tests: the target server and a real etcd 3.6, side by side, get the same requests;
//! every response must be equal once cluster_id, member_id and raft_term are masked.
//!
//! The target is `MEM_ETCD_TEST_TARGET` (mem_etcd by default). With the target set to `etcd`,
//! these tests compare two real etcds, which checks the harness and the masking themselves.

use bytes::Bytes;
use pb::compare::{CompareResult, CompareTarget, TargetUnion};
use pb::request_op::Request as Rq;
use tonic::Code;

use crate::api::model::{Gen, GenConfig, Model, Op, Outcome, execute, normalize};
use crate::support::*;

/// A pair of fresh servers: the target and a real etcd.
struct Pair {
    target: Server,
    etcd: Server,
}

impl Pair {
    async fn start(extra: &[&str]) -> Option<Pair> {
        // Peer first: when it is missing and skipping is allowed, start nothing.
        let etcd = Server::start(Kind::Etcd, extra).await?;
        let target = Server::start(target(), extra).await?;
        Some(Pair { target, etcd })
    }
}

macro_rules! pair {
    () => {
        pair!([])
    };
    ($args:expr) => {
        match Pair::start(&$args).await {
            ::core::option::Option::Some(p) => p,
            ::core::option::Option::None => return,
        }
    };
}

struct Driver {
    target: Raw,
    etcd: Raw,
    step: usize,
    log: Vec<String>,
    /// Record mismatches and go on (for scripted cases, so one report lists them all) instead of
    /// stopping at the first (random sequences, whose states would diverge).
    keep_going: bool,
    mismatches: Vec<String>,
}

impl Driver {
    async fn new(p: &Pair) -> Driver {
        Driver {
            target: p.target.raw_clients().await,
            etcd: p.etcd.raw_clients().await,
            step: 0,
            log: vec![],
            keep_going: false,
            mismatches: vec![],
        }
    }

    /// Runs one op on both servers; returns etcd's (normalized) outcome after checking equality.
    async fn run(&mut self, op: &Op, context: &str) -> Outcome {
        let mut want = execute(&mut self.etcd.kv, op).await;
        let mut got = execute(&mut self.target.kv, op).await;
        normalize(op, &mut want);
        normalize(op, &mut got);
        self.step += 1;
        if want != got {
            let report = format!(
                "differential mismatch ({context}) at step {}\n  op:   {op:?}\n  etcd: {want:?}\n  \
                 got:  {got:?}",
                self.step
            );
            if !self.keep_going {
                let recent =
                    self.log.iter().rev().take(12).rev().cloned().collect::<Vec<_>>().join("\n");
                panic!("{report}\nprevious ops:\n{recent}");
            }
            self.mismatches.push(report);
        }
        self.log.push(format!(
            "#{}: {op:?} => {}",
            self.step,
            if want.is_ok() { "ok" } else { "err" }
        ));
        want
    }

    /// Fails with every recorded mismatch.
    fn finish(self) {
        assert!(
            self.mismatches.is_empty(),
            "{} of {} ops differ:\n{}",
            self.mismatches.len(),
            self.step,
            self.mismatches.join("\n")
        );
    }
}

async fn run_sequence(seed: u64, n: usize, cfg: GenConfig) {
    let p = pair!();
    let mut d = Driver::new(&p).await;
    let mut model = Model::default();
    let mut generator = Gen::new(seed, cfg);
    for i in 1..=n {
        let op = generator.op(&model);
        // The model only steers the generator here; the reference is etcd.
        let _ = model.apply(&op);
        let _ = d.run(&op, &format!("seed {seed}")).await;
        if i % 10 == 0 || i == n {
            d.same_hashes(&format!("seed {seed}, after op {i}")).await;
        }
    }
}

impl Driver {
    /// Until the first compaction HashKV must be etcd's, value included, at the current
    /// revision and at each of the last ten. (After one, etcd also answers from the hashes it
    /// stored when it compacted, which mem_etcd does not keep: see the README.)
    async fn same_hashes(&mut self, context: &str) {
        let req = pb::HashKvRequest::default();
        let now = self.etcd.maint.hash_kv(req).await.unwrap().into_inner();
        if now.compact_revision != -1 {
            return;
        }
        let now = now.header.map_or(0, |h| h.revision);
        for rev in std::iter::once(0).chain((now - 9).max(1)..=now) {
            let req = pb::HashKvRequest { revision: rev };
            let shape = |r: Result<tonic::Response<pb::HashKvResponse>, tonic::Status>| {
                r.map(|r| {
                    let r = r.into_inner();
                    (r.hash, r.hash_revision, r.compact_revision, r.header.map(|h| h.revision))
                })
                .map_err(|s| (s.code(), s.message().to_string()))
            };
            let want = shape(self.etcd.maint.hash_kv(req).await);
            let got = shape(self.target.maint.hash_kv(req).await);
            if got != want {
                // What each server says of a read there, to tell a compaction difference apart.
                let read = pb::RangeRequest { key: b("a"), revision: rev, ..Default::default() };
                let e = self
                    .etcd
                    .kv
                    .range(read.clone())
                    .await
                    .map(|_| ())
                    .map_err(|s| s.message().to_string());
                let t = self
                    .target
                    .kv
                    .range(read)
                    .await
                    .map(|_| ())
                    .map_err(|s| s.message().to_string());
                panic!(
                    "HashKV({rev}) differs from etcd's ({context}): mem_etcd {got:?}, etcd \
                     {want:?}; a read there: mem_etcd {t:?}, etcd {e:?}\nlast ops:\n{}",
                    self.log.iter().rev().take(30).rev().cloned().collect::<Vec<_>>().join("\n")
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_sequences_seed_11() {
    run_sequence(11, 1200, GenConfig::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_sequences_seed_12_compaction_heavy() {
    run_sequence(12, 800, GenConfig { compact_pct: 10 }).await;
}

// ---------------------------------------------------------------------------------------------
// Targeted cases

fn b(s: &str) -> Bytes {
    Bytes::from(s.as_bytes().to_vec())
}

fn range(k: &str, end: &str) -> pb::RangeRequest {
    pb::RangeRequest { key: b(k), range_end: b(end), ..Default::default() }
}

fn put(k: &str, v: &str) -> pb::PutRequest {
    pb::PutRequest { key: b(k), value: b(v), ..Default::default() }
}

fn del(k: &str, end: &str) -> pb::DeleteRangeRequest {
    pb::DeleteRangeRequest { key: b(k), range_end: b(end), prev_kv: true }
}

fn op(r: Rq) -> pb::RequestOp {
    pb::RequestOp { request: Some(r) }
}

fn cmp(k: &str, target: CompareTarget, result: CompareResult, u: TargetUnion) -> pb::Compare {
    pb::Compare {
        result: result as i32,
        target: target as i32,
        key: b(k),
        range_end: Bytes::new(),
        target_union: Some(u),
    }
}

fn txn(
    compare: Vec<pb::Compare>,
    success: Vec<pb::RequestOp>,
    failure: Vec<pb::RequestOp>,
) -> pb::TxnRequest {
    pb::TxnRequest { compare, success, failure }
}

/// Error paths: every validation and apply error, with its exact code and message.
#[tokio::test]
async fn error_messages_match() {
    let p = pair!();
    let mut d = Driver::new(&p).await;
    d.keep_going = true;
    let sort =
        |o: i32, t: i32| pb::RangeRequest { sort_order: o, sort_target: t, ..range("a", "") };
    let many = |n: usize| {
        (0..n).map(|i| op(Rq::RequestPut(put(&format!("m{i:03}"), "v")))).collect::<Vec<_>>()
    };
    let ops: Vec<Op> = vec![
        Op::Put(put("a", "1")),
        Op::Put(put("b", "1")),
        Op::Range(range("", "")),
        Op::Range(range("", "z")),
        Op::Range(sort(3, 0)),
        Op::Range(sort(0, 5)),
        Op::Range(sort(-1, 0)),
        Op::Range(pb::RangeRequest { revision: 100, ..range("a", "") }),
        Op::Put(put("", "v")),
        Op::Put(pb::PutRequest { ignore_value: true, ..put("a", "v") }),
        Op::Put(pb::PutRequest { ignore_lease: true, lease: 1, ..put("a", "") }),
        Op::Put(pb::PutRequest { lease: 42, ..put("a", "v") }),
        Op::Put(pb::PutRequest { ignore_value: true, ..put("zz", "") }),
        Op::Put(pb::PutRequest { ignore_lease: true, ..put("zz", "") }),
        Op::Put(pb::PutRequest { ignore_value: true, lease: 42, ..put("zz", "") }),
        Op::Delete(del("", "")),
        Op::Txn(txn(
            vec![cmp("", CompareTarget::Version, CompareResult::Equal, TargetUnion::Version(0))],
            vec![],
            vec![],
        )),
        Op::Txn(txn(vec![], vec![pb::RequestOp { request: None }], vec![])),
        Op::Txn(txn(vec![], many(129), vec![])),
        Op::Txn(txn(vec![], vec![], many(129))),
        Op::Txn(txn(
            vec![],
            vec![op(Rq::RequestPut(put("a", "1"))), op(Rq::RequestPut(put("a", "2")))],
            vec![],
        )),
        Op::Txn(txn(
            vec![],
            vec![op(Rq::RequestDeleteRange(del("a", "c"))), op(Rq::RequestPut(put("b", "2")))],
            vec![],
        )),
        Op::Txn(txn(
            vec![],
            vec![op(Rq::RequestPut(pb::PutRequest { lease: 5, ..put("c", "1") }))],
            vec![],
        )),
        Op::Txn(txn(
            vec![],
            vec![op(Rq::RequestPut(pb::PutRequest { ignore_value: true, ..put("zz", "") }))],
            vec![],
        )),
        Op::Txn(txn(
            vec![],
            vec![op(Rq::RequestPut(pb::PutRequest {
                ignore_value: true,
                lease: 5,
                ..put("zz", "")
            }))],
            vec![],
        )),
        Op::Txn(txn(
            vec![],
            vec![op(Rq::RequestRange(pb::RangeRequest { revision: 99, ..range("a", "") }))],
            vec![],
        )),
        Op::Txn(txn(vec![], vec![op(Rq::RequestRange(sort(9, 0)))], vec![])),
        Op::Txn(txn(
            vec![],
            vec![op(Rq::RequestTxn(txn(vec![], vec![op(Rq::RequestPut(put("", "")))], vec![])))],
            vec![],
        )),
        Op::Compact(pb::CompactionRequest { revision: 100, physical: false }),
        Op::Compact(pb::CompactionRequest { revision: 2, physical: false }),
        Op::Compact(pb::CompactionRequest { revision: 2, physical: true }),
        Op::Compact(pb::CompactionRequest { revision: 1, physical: false }),
        Op::Range(pb::RangeRequest { revision: 1, ..range("a", "") }),
        Op::Txn(txn(
            vec![],
            vec![op(Rq::RequestRange(pb::RangeRequest { revision: 1, ..range("a", "") }))],
            vec![],
        )),
    ];
    let mut errors = 0;
    for o in &ops {
        if d.run(o, "errors").await.is_err() {
            errors += 1;
        }
    }
    assert!(errors >= 28, "most of these ops are errors; got {errors}");
    // Request too large.
    let big = "x".repeat(MAX_REQUEST_BYTES);
    let r = d.run(&Op::Put(put("big", &big)), "too large").await;
    assert_eq!(r.unwrap_err(), (Code::InvalidArgument, E_TOO_LARGE.to_string()));
    d.finish();
}

/// Corner cases with successful answers.
#[tokio::test]
async fn edge_cases_match() {
    let p = pair!();
    let mut d = Driver::new(&p).await;
    d.keep_going = true;
    let mut ops: Vec<Op> = vec![
        // Compact(0) on a fresh store succeeds in etcd (its compact revision starts at -1).
        Op::Compact(pb::CompactionRequest { revision: 0, physical: false }),
        Op::Compact(pb::CompactionRequest { revision: 0, physical: false }),
        Op::Compact(pb::CompactionRequest { revision: -1, physical: false }),
        Op::Range(range("\0", "")),
        Op::Put(put("\0", "nul")),
        Op::Range(range("\0", "")),
        Op::Put(put("a", "")),
        Op::Put(pb::PutRequest { prev_kv: true, ..put("a", "1") }),
        Op::Put(pb::PutRequest { prev_kv: true, ignore_value: true, ..put("a", "") }),
        Op::Put(pb::PutRequest { prev_kv: true, ignore_lease: true, ..put("a", "2") }),
        Op::Put(put("b", "1")),
        Op::Put(put("c", "1")),
        Op::Range(pb::RangeRequest { revision: -3, ..range("a", "") }),
        Op::Range(pb::RangeRequest { limit: -1, ..range("\0", "\0") }),
        Op::Range(pb::RangeRequest {
            count_only: true,
            keys_only: true,
            limit: 1,
            ..range("\0", "\0")
        }),
        Op::Range(pb::RangeRequest {
            sort_order: 1,
            sort_target: 0,
            limit: 2,
            ..range("\0", "\0")
        }),
        Op::Range(pb::RangeRequest {
            sort_order: 2,
            sort_target: 0,
            limit: 2,
            ..range("\0", "\0")
        }),
        Op::Range(pb::RangeRequest { min_mod_revision: i64::MAX, ..range("\0", "\0") }),
        Op::Range(pb::RangeRequest { max_create_revision: -5, ..range("\0", "\0") }),
        Op::Range(range("c", "a")),
        Op::Range(range("a", "a")),
        Op::Range(range("a", "\0")),
        Op::Delete(del("c", "a")),
        Op::Delete(del("zz", "")),
        // A compare whose union does not match its target compares against 0.
        Op::Txn(txn(
            vec![cmp("a", CompareTarget::Mod, CompareResult::Greater, TargetUnion::Version(99))],
            vec![],
            vec![],
        )),
        Op::Txn(txn(
            vec![pb::Compare {
                target_union: None,
                ..cmp("zz", CompareTarget::Mod, CompareResult::Equal, TargetUnion::ModRevision(0))
            }],
            vec![],
            vec![],
        )),
        Op::Txn(txn(
            vec![pb::Compare {
                target_union: None,
                ..cmp(
                    "a",
                    CompareTarget::Value,
                    CompareResult::Greater,
                    TargetUnion::Value(Bytes::new()),
                )
            }],
            vec![],
            vec![],
        )),
        // Read-only txn ranges at revision -1 (allowed) and -2 (compacted while never compacted).
        Op::Txn(txn(
            vec![],
            vec![op(Rq::RequestRange(pb::RangeRequest { revision: -1, ..range("a", "") }))],
            vec![],
        )),
        Op::Txn(txn(
            vec![],
            vec![op(Rq::RequestRange(pb::RangeRequest { revision: -2, ..range("a", "") }))],
            vec![],
        )),
        // Writes and reads mixed, with nested txns on both branches.
        Op::Txn(txn(
            vec![cmp("a", CompareTarget::Version, CompareResult::Equal, TargetUnion::Version(4))],
            vec![
                op(Rq::RequestRange(range("\0", "\0"))),
                op(Rq::RequestDeleteRange(del("b", ""))),
                op(Rq::RequestRange(range("\0", "\0"))),
                op(Rq::RequestTxn(txn(
                    vec![cmp(
                        "b",
                        CompareTarget::Version,
                        CompareResult::Equal,
                        TargetUnion::Version(1),
                    )],
                    vec![op(Rq::RequestPut(pb::PutRequest { prev_kv: true, ..put("d", "1") }))],
                    vec![op(Rq::RequestPut(put("e", "1")))],
                ))),
                op(Rq::RequestDeleteRange(del("zz", ""))),
                op(Rq::RequestRange(range("\0", "\0"))),
            ],
            vec![],
        )),
        // Delete everything from a key, then put a key that was deleted (allowed: etcd's
        // duplicate check does not see "\0"-ended deletes).
        Op::Txn(txn(
            vec![],
            vec![
                op(Rq::RequestDeleteRange(del("c", "\0"))),
                op(Rq::RequestPut(pb::PutRequest { prev_kv: true, ..put("d", "again") })),
            ],
            vec![],
        )),
        Op::Range(range("\0", "\0")),
        // Put then delete of the same key in one txn, through sibling nested txns.
        Op::Txn(txn(
            vec![],
            vec![
                op(Rq::RequestTxn(txn(vec![], vec![op(Rq::RequestPut(put("n", "1")))], vec![]))),
                op(Rq::RequestTxn(txn(
                    vec![],
                    vec![op(Rq::RequestDeleteRange(del("n", "")))],
                    vec![],
                ))),
            ],
            vec![],
        )),
        Op::Range(range("\0", "\0")),
        Op::Range(pb::RangeRequest { revision: 10, ..range("\0", "\0") }),
    ];
    // Nested op budgets: a nested txn may use what its parent's widest list left.
    let many = |p: &str, n: usize| {
        (0..n).map(|i| op(Rq::RequestPut(put(&format!("{p}{i:03}"), "v")))).collect::<Vec<_>>()
    };
    let mut fits = many("t", 120);
    fits.push(op(Rq::RequestTxn(txn(vec![], many("u", 7), vec![]))));
    ops.push(Op::Txn(txn(vec![], fits, vec![])));
    let mut over = many("v", 120);
    over.push(op(Rq::RequestTxn(txn(vec![], many("w", 8), vec![]))));
    ops.push(Op::Txn(txn(vec![], over, vec![])));
    ops.push(Op::Range(pb::RangeRequest { count_only: true, ..range("\0", "\0") }));
    for o in &ops {
        let _ = d.run(o, "edge cases").await;
    }
    d.finish();
}

fn status_view(r: &pb::StatusResponse) -> (i64, bool, Vec<String>, bool) {
    let h = r.header.unwrap_or_default();
    (h.revision, r.leader == h.member_id, r.errors.clone(), r.is_learner)
}

/// Maintenance, Cluster and Auth answers, on the fields that do not depend on the implementation
/// (ids, sizes, versions and raft indexes are masked).
#[tokio::test]
async fn maintenance_cluster_and_auth_shapes_match() {
    let p = pair!(["--advertise-client-urls", "http://127.0.0.1:12379"]);
    let mut d = Driver::new(&p).await;
    let _ = d.run(&Op::Put(put("a", "1")), "setup").await;
    let (t, e) = (&mut d.target, &mut d.etcd);
    let mut diffs: Vec<String> = Vec::new();
    let mut check = |what: String, a: String, b: String| {
        if a != b {
            diffs.push(format!("{what}:\n  target: {a}\n  etcd:   {b}"));
        }
    };
    let st = (
        status_view(&t.maint.status(pb::StatusRequest {}).await.unwrap().into_inner()),
        status_view(&e.maint.status(pb::StatusRequest {}).await.unwrap().into_inner()),
    );
    check("Status".into(), format!("{:?}", st.0), format!("{:?}", st.1));

    let alarms = |r: pb::AlarmResponse| (r.header.map(|h| h.revision), r.alarms);
    let a = (
        alarms(t.maint.alarm(pb::AlarmRequest::default()).await.unwrap().into_inner()),
        alarms(e.maint.alarm(pb::AlarmRequest::default()).await.unwrap().into_inner()),
    );
    check("Alarm list".into(), format!("{:?}", a.0), format!("{:?}", a.1));

    let members = |r: pb::MemberListResponse| {
        let h = r.header.unwrap_or_default();
        let m: Vec<_> = r
            .members
            .iter()
            .map(|m| (m.id == h.member_id, m.name.clone(), m.client_ur_ls.clone(), m.is_learner))
            .collect();
        (h.revision, m)
    };
    let req = pb::MemberListRequest { linearizable: true };
    let m = (
        members(t.cluster.member_list(req).await.unwrap().into_inner()),
        members(e.cluster.member_list(req).await.unwrap().into_inner()),
    );
    check("MemberList".into(), format!("{:?}", m.0), format!("{:?}", m.1));

    let auth =
        |r: pb::AuthStatusResponse| (r.header.map(|h| h.revision), r.enabled, r.auth_revision);
    let a = (
        auth(t.auth.auth_status(pb::AuthStatusRequest {}).await.unwrap().into_inner()),
        auth(e.auth.auth_status(pb::AuthStatusRequest {}).await.unwrap().into_inner()),
    );
    check("AuthStatus".into(), format!("{:?}", a.0), format!("{:?}", a.1));
    let authn = pb::AuthenticateRequest { name: "root".into(), password: "x".into() };
    let st = |r: Result<tonic::Response<pb::AuthenticateResponse>, tonic::Status>| {
        r.map(|_| ()).map_err(|s| (s.code(), s.message().to_string()))
    };
    let a = (st(t.auth.authenticate(authn.clone()).await), st(e.auth.authenticate(authn).await));
    check("Authenticate".into(), format!("{:?}", a.0), format!("{:?}", a.1));

    let defrag = |r: pb::DefragmentResponse| r.header.map(|h| h.revision);
    let df = (
        defrag(t.maint.defragment(pb::DefragmentRequest {}).await.unwrap().into_inner()),
        defrag(e.maint.defragment(pb::DefragmentRequest {}).await.unwrap().into_inner()),
    );
    check("Defragment".into(), format!("{:?}", df.0), format!("{:?}", df.1));

    let hkv = |r: Result<tonic::Response<pb::HashKvResponse>, tonic::Status>| {
        r.map(|r| {
            let r = r.into_inner();
            (r.header.map(|h| h.revision), r.hash, r.compact_revision, r.hash_revision)
        })
        .map_err(|s| (s.code(), s.message().to_string()))
    };
    for rev in [0, 1, 2, 3] {
        let req = pb::HashKvRequest { revision: rev };
        let h = (hkv(t.maint.hash_kv(req).await), hkv(e.maint.hash_kv(req).await));
        check(format!("HashKV({rev})"), format!("{:?}", h.0), format!("{:?}", h.1));
    }
    assert!(diffs.is_empty(), "{} answers differ:\n{}", diffs.len(), diffs.join("\n"));
}
