//! The checker's own tests: histories it must accept and histories it must refuse.

use std::collections::BTreeMap;
use std::time::Duration;

use mvccpb::event::EventType;

use super::checker::{Checked, WatchLog, Witness, check_history, check_watch, check_watch_with};
use super::model::{ErrKind, Op, Out, PREFIX, Req, Resp, State};
use super::traffic::{LEASE_TTL, key_name};
use crate::api::watch::Ev;
use crate::support::*;

fn k(i: usize) -> Vec<u8> {
    key_name(i)
}

fn op(client: usize, call: u64, ret: u64, req: Req, out: Out) -> Op {
    Op { client, call, ret, req, out }
}

fn ok(rev: i64, succeeded: bool) -> Out {
    Out::Ok(Resp { rev, succeeded, ..Default::default() })
}

fn got(rev: i64, kvs: Vec<Kv>) -> Out {
    Out::Ok(Resp { rev, count: kvs.len() as i64, kvs, ..Default::default() })
}

fn kv_at(i: usize, value: &str, create: i64, modr: i64, version: i64) -> Kv {
    Kv {
        key: k(i),
        value: value.into(),
        create_revision: create,
        mod_revision: modr,
        version,
        lease: 0,
    }
}

fn init1() -> State {
    State { rev: 1, ..Default::default() }
}

#[test]
fn checker_accepts_concurrent_writes_in_either_order() {
    // Two overlapping creates of different keys: the one that returned revision 3 came second,
    // whatever their call order; a read overlapping both may see either state.
    let ops = vec![
        op(0, 0, 10, Req::Create { key: k(0), value: b"a".to_vec() }, ok(3, true)),
        op(1, 1, 9, Req::Create { key: k(1), value: b"b".to_vec() }, ok(2, true)),
        op(2, 2, 8, Req::Get { key: k(0) }, got(2, vec![])),
        op(2, 11, 12, Req::Get { key: k(1) }, got(3, vec![kv_at(1, "b", 2, 2, 1)])),
        op(3, 13, 14, Req::Update { key: k(0), seen: 3, value: b"c".to_vec() }, ok(4, true)),
        op(
            3,
            15,
            16,
            Req::Delete { key: k(1), seen: 2 },
            Out::Ok(Resp { rev: 5, succeeded: true, deleted: 1, ..Default::default() }),
        ),
        op(
            4,
            17,
            18,
            Req::List { start: PREFIX.into(), rev: 0, limit: 1 },
            Out::Ok(Resp {
                rev: 5,
                kvs: vec![kv_at(0, "c", 3, 4, 2)],
                count: 1,
                ..Default::default()
            }),
        ),
        op(
            4,
            19,
            20,
            Req::List { start: PREFIX.into(), rev: 3, limit: 1 },
            Out::Ok(Resp {
                rev: 5,
                kvs: vec![kv_at(0, "a", 3, 3, 1)],
                count: 2,
                more: true,
                ..Default::default()
            }),
        ),
    ];
    let Checked { states, events, .. } =
        check_history(&ops, &init1(), &Witness::new()).expect("a linearizable history");
    assert_eq!(
        states.keys().copied().collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5],
        "expected a state per revision"
    );
    assert_eq!(events.len(), 4, "expected one event per write");
}

#[test]
fn checker_accepts_an_unknown_write_either_way() {
    let lost = op(0, 0, u64::MAX, Req::Create { key: k(0), value: b"a".to_vec() }, Out::Unknown);
    let applied = vec![
        lost.clone(),
        op(1, 5, 6, Req::Get { key: k(0) }, got(2, vec![kv_at(0, "a", 2, 2, 1)])),
    ];
    check_history(&applied, &init1(), &Witness::new()).expect("an unknown write that took effect");
    let not_applied = vec![lost, op(1, 5, 6, Req::Get { key: k(0) }, got(1, vec![]))];
    check_history(&not_applied, &init1(), &Witness::new()).expect("an unknown write that did not");
}

#[test]
fn checker_takes_the_order_the_watches_saw() {
    // Two creates of unknown outcome (a crash cut both off), then a read that saw both: either
    // order is linearizable, and the watches saw the second-called one first.
    let ops = vec![
        op(0, 0, u64::MAX, Req::Create { key: k(0), value: b"a".to_vec() }, Out::Unknown),
        op(1, 1, u64::MAX, Req::Create { key: k(1), value: b"b".to_vec() }, Out::Unknown),
        op(2, 5, 6, Req::Get { key: k(2) }, got(3, vec![])),
    ];
    let first = |w: &Witness| {
        let Checked { events, .. } = check_history(&ops, &init1(), w).expect("linearizable");
        events.iter().map(|e| (e.kv.key.clone(), e.kv.mod_revision)).collect::<Vec<_>>()
    };
    assert_eq!(first(&Witness::new()), [(k(0), 2), (k(1), 3)], "the search's first order");
    let seen = Witness::from([
        (2, vec![(k(1), Some(b"b".to_vec()))]),
        (3, vec![(k(0), Some(b"a".to_vec()))]),
    ]);
    assert_eq!(first(&seen), [(k(1), 2), (k(0), 3)], "the order the watches saw");
    // Watches that contradict every linearization leave the search to the answers: the
    // watch checks then name the events.
    let impossible = Witness::from([(2, vec![(k(2), None)])]);
    assert_eq!(first(&impossible), [(k(0), 2), (k(1), 3)]);
}

#[test]
fn checker_rejects_a_stale_read() {
    let ops = vec![
        op(0, 0, 1, Req::Create { key: k(0), value: b"a".to_vec() }, ok(2, true)),
        op(1, 2, 3, Req::Get { key: k(0) }, got(1, vec![])),
    ];
    let e = check_history(&ops, &init1(), &Witness::new())
        .expect_err("a read after a completed write saw the old state");
    assert!(e.contains("not linearizable"), "expected a linearizability failure, got {e}");
}

#[test]
fn checker_rejects_two_writes_with_one_revision() {
    let ops = vec![
        op(0, 0, 5, Req::Create { key: k(0), value: b"a".to_vec() }, ok(2, true)),
        op(1, 0, 5, Req::Create { key: k(1), value: b"b".to_vec() }, ok(2, true)),
    ];
    check_history(&ops, &init1(), &Witness::new())
        .expect_err("two writes cannot both produce revision 2");
}

#[test]
fn checker_rejects_a_revision_going_backwards() {
    let ops = vec![
        op(0, 0, 1, Req::Create { key: k(0), value: b"a".to_vec() }, ok(2, true)),
        op(0, 2, 3, Req::Create { key: k(1), value: b"b".to_vec() }, ok(3, true)),
        op(1, 4, 5, Req::Get { key: k(2) }, got(2, vec![])),
    ];
    check_history(&ops, &init1(), &Witness::new())
        .expect_err("a read after revision 3 reported revision 2");
}

#[test]
fn checker_rejects_a_stale_serializable_read() {
    let create = op(0, 0, 1, Req::Create { key: k(0), value: b"a".to_vec() }, ok(2, true));
    let update = op(1, 2, 3, Req::Update { key: k(0), seen: 2, value: b"b".to_vec() }, ok(3, true));
    let serial = |client: usize, out: Out| op(client, 4, 5, Req::SerialGet { key: k(0) }, out);
    // Another client's member may lag: revision 2 is stale but was the state then, and is fine.
    let lagging = serial(2, got(2, vec![kv_at(0, "a", 2, 2, 1)]));
    check_history(&[create.clone(), update.clone(), lagging], &init1(), &Witness::new())
        .expect("a serializable read of an older state by a client that saw nothing newer");
    // The client that wrote revision 3 must see it on its member.
    let stale = serial(1, got(2, vec![kv_at(0, "a", 2, 2, 1)]));
    let e = check_history(&[create.clone(), update.clone(), stale], &init1(), &Witness::new())
        .expect_err("a serializable read older than the client's own write");
    assert!(e.contains("stale"), "expected a stale serializable read named, got {e}");
    // The right revision, the wrong data.
    let wrong = serial(2, got(3, vec![kv_at(0, "a", 2, 2, 1)]));
    let e = check_history(&[create.clone(), update.clone(), wrong], &init1(), &Witness::new())
        .expect_err("a serializable read of a state that never was");
    assert!(e.contains("expected"), "expected the state at revision 3 named, got {e}");
    // A revision no write produced.
    let future = serial(2, got(4, vec![kv_at(0, "b", 2, 3, 2)]));
    check_history(&[create, update, future], &init1(), &Witness::new())
        .expect_err("a serializable read at a revision that does not exist");
}

#[test]
fn checker_takes_a_lease_expiry_only_when_due() {
    let ttl = Duration::from_secs(LEASE_TTL as u64).as_nanos() as u64;
    let grant = op(0, 0, 1, Req::Grant { id: 7 }, ok(1, false));
    let expiry = op(9, ttl, u64::MAX, Req::Expire { id: 7 }, Out::Unknown);
    let create = |call: u64, out: Out| {
        op(
            1,
            call,
            call + 1,
            Req::CreateWithLease { key: k(0), value: b"a".to_vec(), lease: 7 },
            out,
        )
    };
    // Before the TTL the lease exists; after it, it may or may not.
    check_history(
        &[grant.clone(), expiry.clone(), create(5, ok(2, true))],
        &init1(),
        &Witness::new(),
    )
    .expect("a create with a live lease");
    check_history(
        &[grant.clone(), expiry.clone(), create(ttl + 5, Out::Err(ErrKind::LeaseNotFound))],
        &init1(),
        &Witness::new(),
    )
    .expect("a create with a lease that expired");
    check_history(
        &[grant.clone(), expiry.clone(), create(ttl + 5, ok(2, true))],
        &init1(),
        &Witness::new(),
    )
    .expect("a lease that outlived its TTL (a leader change renews it)");
    check_history(
        &[grant, expiry, create(5, Out::Err(ErrKind::LeaseNotFound))],
        &init1(),
        &Witness::new(),
    )
    .expect_err("a lease gone before its TTL");
}

#[test]
fn checker_rejects_a_revocation_header_past_its_deletion() {
    let grant = op(0, 0, 1, Req::Grant { id: 7 }, ok(1, false));
    let leased = Req::CreateWithLease { key: k(0), value: b"a".to_vec(), lease: 7 };
    let create = op(0, 2, 3, leased, ok(2, true));
    // The revocation deletes k0 at 3 while another client's create, at 4, overlaps it.
    let revoke = |rev| op(0, 4, 10, Req::Revoke { id: 7 }, ok(rev, false));
    let other = op(1, 5, 6, Req::Create { key: k(1), value: b"b".to_vec() }, ok(4, true));
    check_history(
        &[grant.clone(), create.clone(), revoke(3), other.clone()],
        &init1(),
        &Witness::new(),
    )
    .expect("the revocation's header is its deletion's revision");
    check_history(&[grant.clone(), create, revoke(4), other.clone()], &init1(), &Witness::new())
        .expect_err("a revocation's header raised by a write after its deletion");
    // Without keys it changes no revision: its header is the state's, as etcd reads it.
    let empty = |rev| op(0, 4, 10, Req::Revoke { id: 7 }, ok(rev, false));
    let other = op(1, 5, 6, Req::Create { key: k(1), value: b"b".to_vec() }, ok(2, true));
    check_history(&[grant.clone(), empty(1), other.clone()], &init1(), &Witness::new())
        .expect("a revocation without keys before the create");
    check_history(&[grant.clone(), empty(2), other.clone()], &init1(), &Witness::new())
        .expect("a revocation without keys after the create");
    check_history(&[grant, empty(3), other], &init1(), &Witness::new())
        .expect_err("a revocation without keys at a revision nothing made");
}

#[test]
fn checker_rejects_a_grant_header_past_its_effect() {
    let grant = |rev| op(0, 0, 10, Req::Grant { id: 7 }, ok(rev, false));
    let create = |call, rev| {
        op(1, call, call + 1, Req::Create { key: k(1), value: b"b".to_vec() }, ok(rev, true))
    };
    let leased = Req::CreateWithLease { key: k(0), value: b"a".to_vec(), lease: 7 };
    // A create at 2 during the grant, then one with the lease at 3 (so the grant came first).
    let uses = op(2, 11, 12, leased, ok(3, true));
    check_history(&[grant(1), create(2, 2), uses.clone()], &init1(), &Witness::new())
        .expect("a grant before the create");
    check_history(&[grant(2), create(2, 2), uses.clone()], &init1(), &Witness::new())
        .expect("a grant after the create");
    check_history(&[grant(3), create(2, 2), uses], &init1(), &Witness::new())
        .expect_err("a grant's header at a revision only a later write made");
}

#[test]
fn watch_checker_forgives_a_missing_prev_kv_only_after_a_compaction() {
    let put = |v: &str, modr: i64, version: i64, prev: Option<Kv>| Ev {
        put: true,
        kv: kv_at(0, v, 2, modr, version),
        prev,
    };
    let events = vec![put("a", 2, 1, None), put("b", 3, 2, Some(kv_at(0, "a", 2, 2, 1)))];
    let resp = |rev: i64, e: &Ev| pb::WatchResponse {
        header: Some(pb::ResponseHeader { revision: rev, ..Default::default() }),
        events: vec![mvccpb::Event {
            r#type: EventType::Put as i32,
            kv: Some(mvcc_kv(&e.kv)),
            prev_kv: e.prev.as_ref().map(mvcc_kv),
        }],
        ..Default::default()
    };
    let without_prev = put("b", 3, 2, None);
    // The second event arrives at time 20 without its prev_kv.
    let log = vec![WatchLog {
        start: 2,
        responses: vec![resp(2, &events[0]), resp(3, &without_prev)],
        received: vec![10, 20],
    }];
    // A compaction at 4 >= 3 sent at 15 may have removed it before the event was sent.
    check_watch_with(&log, &events, 3, &BTreeMap::from([(4, 15)]))
        .expect("a prev_kv a compaction removed first");
    // One sent at 25 came too late; one at 2 keeps the version.
    check_watch_with(&log, &events, 3, &BTreeMap::from([(4, 25)]))
        .expect_err("a prev_kv missing before the compaction was sent");
    check_watch_with(&log, &events, 3, &BTreeMap::from([(2, 5)]))
        .expect_err("a prev_kv a compaction below the event keeps");
}

#[test]
fn checker_rejects_a_wrong_pinned_read_and_a_missed_compaction() {
    let create = op(0, 0, 1, Req::Create { key: k(0), value: b"a".to_vec() }, ok(2, true));
    let update = op(0, 2, 3, Req::Update { key: k(0), seen: 2, value: b"b".to_vec() }, ok(3, true));
    // At revision 2 the key still had its first value.
    let wrong = op(
        1,
        4,
        5,
        Req::List { start: PREFIX.into(), rev: 2, limit: 5 },
        got(3, vec![kv_at(0, "b", 2, 3, 2)]),
    );
    let e = check_history(&[create.clone(), update.clone(), wrong], &init1(), &Witness::new())
        .expect_err("a pinned read of the wrong state");
    assert!(e.contains("at revision 2"), "expected the pinned read named, got {e}");
    let compact = op(2, 6, 7, Req::Compact { rev: 3 }, ok(3, false));
    let served = op(
        1,
        8,
        9,
        Req::List { start: PREFIX.into(), rev: 2, limit: 5 },
        got(3, vec![kv_at(0, "a", 2, 2, 1)]),
    );
    check_history(
        &[create.clone(), update.clone(), compact.clone(), served],
        &init1(),
        &Witness::new(),
    )
    .expect_err("a read below the compaction after it completed");
    let refused = op(
        1,
        8,
        9,
        Req::List { start: PREFIX.into(), rev: 2, limit: 5 },
        Out::Err(ErrKind::Compacted),
    );
    check_history(&[create, update, compact, refused], &init1(), &Witness::new())
        .expect("a refused read below the compaction");
}

#[test]
fn watch_checker_rejects_gaps_duplicates_and_wrong_progress() {
    let put = |i: usize, v: &str, create: i64, modr: i64, version: i64, prev: Option<Kv>| Ev {
        put: true,
        kv: kv_at(i, v, create, modr, version),
        prev,
    };
    let events = vec![
        put(0, "a", 2, 2, 1, None),
        put(1, "b", 3, 3, 1, None),
        put(0, "c", 2, 4, 2, Some(kv_at(0, "a", 2, 2, 1))),
    ];
    let to_pb = |e: &Ev| mvccpb::Event {
        r#type: if e.put { EventType::Put as i32 } else { EventType::Delete as i32 },
        kv: Some(mvcc_kv(&e.kv)),
        prev_kv: e.prev.as_ref().map(mvcc_kv),
    };
    let resp = |rev: i64, evs: &[&Ev]| pb::WatchResponse {
        header: Some(pb::ResponseHeader { revision: rev, ..Default::default() }),
        events: evs.iter().map(|e| to_pb(e)).collect(),
        ..Default::default()
    };
    let log = |start: i64, responses: Vec<pb::WatchResponse>| WatchLog {
        start,
        received: vec![0; responses.len()],
        responses,
    };
    let all = vec![log(2, vec![resp(2, &[&events[0]]), resp(4, &[&events[1], &events[2]])])];
    check_watch(&all, &events, 4).expect("every event once, in order");
    let resumed = vec![
        log(2, vec![resp(3, &[&events[0], &events[1]])]),
        log(4, vec![resp(4, &[&events[2]])]),
    ];
    check_watch(&resumed, &events, 4).expect("a seamless resumption");
    let gap = vec![log(2, vec![resp(2, &[&events[0]]), resp(4, &[&events[2]])])];
    check_watch(&gap, &events, 4).expect_err("a missed event");
    let dup = vec![log(
        2,
        vec![resp(3, &[&events[0], &events[1]]), resp(3, &[&events[1]]), resp(4, &[&events[2]])],
    )];
    check_watch(&dup, &events, 4).expect_err("a duplicated event");
    let early_progress = vec![log(
        2,
        vec![resp(3, &[]), resp(3, &[&events[0], &events[1]]), resp(4, &[&events[2]])],
    )];
    check_watch(&early_progress, &events, 4).expect_err("progress past undelivered events");
    let mut no_prev = events.clone();
    no_prev[2].prev = None;
    let wrong_prev = vec![log(2, vec![resp(4, &[&no_prev[0], &no_prev[1], &no_prev[2]])])];
    check_watch(&wrong_prev, &events, 4).expect_err("a missing prev_kv");
    // One txn wrote two keys at revision 3: its events must arrive in one response.
    let txn =
        vec![put(0, "a", 2, 2, 1, None), put(1, "b", 3, 3, 1, None), put(2, "d", 3, 3, 1, None)];
    let whole = vec![log(2, vec![resp(2, &[&txn[0]]), resp(3, &[&txn[1], &txn[2]])])];
    check_watch(&whole, &txn, 3).expect("a revision delivered whole");
    let split = vec![log(2, vec![resp(3, &[&txn[0], &txn[1]]), resp(3, &[&txn[2]])])];
    check_watch(&split, &txn, 3).expect_err("a revision split across responses");
    // A second version whose create revision equals its mod revision claims to be a create.
    let mut bad_create = events.clone();
    bad_create[2].kv.create_revision = 4;
    let bad = vec![log(2, vec![resp(4, &[&bad_create[0], &bad_create[1], &bad_create[2]])])];
    check_watch(&bad, &events, 4).expect_err("a create flag on an update");
}

fn mvcc_kv(k: &Kv) -> mvccpb::KeyValue {
    mvccpb::KeyValue {
        key: k.key.clone().into(),
        value: k.value.clone().into(),
        create_revision: k.create_revision,
        mod_revision: k.mod_revision,
        version: k.version,
        lease: k.lease,
    }
}
