//! Hostile input (issue 9): malformed protobuf on every unary method, structured requests that
//! etcd rejects, hostile watch requests and garbage on watch streams, binary metadata, clients
//! that abuse connections and streams, the streaming RPCs (LeaseKeepAlive, Snapshot, Watch)
//! fuzzed with hostile messages and with request bodies broken at the gRPC framing level, and
//! raw HTTP/2 connections with hand-built frames (protocol violations, random frames, floods).
//!
//! Every case ends with the server still answering Status, and every abuse scenario with the
//! server's count of live tasks (`mem_etcd_runtime_alive_tasks` on /metrics) back where it was
//! before, so a task left behind per connection or stream fails it. Where a real etcd is at hand
//! the same bytes or request go to it too and the outcomes must match: etcd's own refusals by
//! code and message, transport refusals (decode errors, messages over the receive limit) by code
//! only, as grpc-go and tonic word them differently. The differences found are
//! `#[ignore = "BUG: ..."]` tests here.
//!
//! The random cases are seeded (the seed is in every failure message). `MEM_ETCD_FUZZ_ITERS`
//! (default 200) is the count of hostile bodies per method; it also scales the rounds of
//! vanishing clients (one per 40), the waves of connections (one per 100, at least two), the
//! hostile keep-alive and watch streams and random HTTP/2 connections (one each per iteration),
//! the requests hammered onto one keep-alive stream and the streams one HTTP/2 connection opens
//! without sending their messages (25 per iteration), and the HTTP/2 floods (5 to 20 frames per
//! iteration each, at least 500), for a soak.

use std::time::{Duration, Instant};

use bytes::{Buf, BufMut};
use prost::Message;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tonic::Code;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

use tokio_stream::wrappers::ReceiverStream;

use crate::support::*;

/// Iterations per method for the random cases.
fn fuzz_iters() -> usize {
    match std::env::var("MEM_ETCD_FUZZ_ITERS") {
        Ok(v) if !v.is_empty() => {
            v.parse().unwrap_or_else(|_| panic!("MEM_ETCD_FUZZ_ITERS={v:?}: expected a count"))
        }
        _ => 200,
    }
}

/// A codec that sends the given bytes as the message and hands back the reply undecoded, so a
/// request can be anything at all on the wire.
#[derive(Debug, Clone, Copy, Default)]
struct RawBytes;

impl Codec for RawBytes {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawBytes;
    type Decoder = RawBytes;
    fn encoder(&mut self) -> RawBytes {
        RawBytes
    }
    fn decoder(&mut self) -> RawBytes {
        RawBytes
    }
}

impl Encoder for RawBytes {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawBytes {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

/// One unary call with `body` as the whole message.
async fn call_raw(
    ch: Channel,
    path: &'static str,
    body: Vec<u8>,
) -> Result<Vec<u8>, tonic::Status> {
    let mut g = tonic::client::Grpc::new(ch).max_decoding_message_size(64 << 20);
    g.ready().await.map_err(|e| tonic::Status::unavailable(format!("not ready: {e}")))?;
    g.unary(tonic::Request::new(body), PathAndQuery::from_static(path), RawBytes)
        .await
        .map(tonic::Response::into_inner)
}

/// Every unary method of KV, Lease, Cluster and Maintenance.
const UNARY: &[&str] = &[
    "/etcdserverpb.KV/Range",
    "/etcdserverpb.KV/Put",
    "/etcdserverpb.KV/DeleteRange",
    "/etcdserverpb.KV/Txn",
    "/etcdserverpb.KV/Compact",
    "/etcdserverpb.Lease/LeaseGrant",
    "/etcdserverpb.Lease/LeaseRevoke",
    "/etcdserverpb.Lease/LeaseTimeToLive",
    "/etcdserverpb.Lease/LeaseLeases",
    "/etcdserverpb.Cluster/MemberAdd",
    "/etcdserverpb.Cluster/MemberRemove",
    "/etcdserverpb.Cluster/MemberUpdate",
    "/etcdserverpb.Cluster/MemberList",
    "/etcdserverpb.Cluster/MemberPromote",
    "/etcdserverpb.Maintenance/Alarm",
    "/etcdserverpb.Maintenance/Status",
    "/etcdserverpb.Maintenance/Defragment",
    "/etcdserverpb.Maintenance/Hash",
    "/etcdserverpb.Maintenance/HashKV",
    "/etcdserverpb.Maintenance/MoveLeader",
    "/etcdserverpb.Maintenance/Downgrade",
];

/// A well-formed message with a bit of everything, to truncate and mutate: a Txn with a compare,
/// a nested txn, a put with a lease and a ranged delete.
fn valid_sample() -> Vec<u8> {
    let put = pb::RequestOp {
        request: Some(pb::request_op::Request::RequestPut(pb::PutRequest {
            key: "fuzz/k".into(),
            value: vec![7; 40].into(),
            lease: 0,
            prev_kv: true,
            ..Default::default()
        })),
    };
    let del = pb::RequestOp {
        request: Some(pb::request_op::Request::RequestDeleteRange(pb::DeleteRangeRequest {
            key: "fuzz/".into(),
            range_end: "fuzz0".into(),
            prev_kv: false,
        })),
    };
    let nested = pb::RequestOp {
        request: Some(pb::request_op::Request::RequestTxn(pb::TxnRequest {
            compare: vec![],
            success: vec![put.clone()],
            failure: vec![],
        })),
    };
    pb::TxnRequest {
        compare: vec![pb::Compare {
            result: 0,
            target: 1,
            key: "fuzz/k".into(),
            range_end: Default::default(),
            target_union: Some(pb::compare::TargetUnion::ModRevision(3)),
        }],
        success: vec![put, nested],
        failure: vec![del],
    }
    .encode_to_vec()
}

/// Hostile bodies by shape: random bytes, truncated and bit-flipped valid messages, wrong wire
/// types, overlong varints, lengths that run past the end, and deep nesting.
fn hostile_body(rng: &mut SmallRng, sample: &[u8]) -> Vec<u8> {
    match rng.random_range(0..8) {
        0 | 1 => {
            let len = rng.random_range(0..96);
            (0..len).map(|_| rng.random()).collect()
        }
        2 => sample[..rng.random_range(0..sample.len())].to_vec(),
        3 => {
            let mut b = sample.to_vec();
            for _ in 0..rng.random_range(1..6) {
                let i = rng.random_range(0..b.len());
                b[i] ^= 1 << rng.random_range(0..8);
            }
            b
        }
        4 => {
            // Field 1..15 with a wire type other than the declared one (6 and 7 do not exist).
            let field: u8 = rng.random_range(1..16);
            let wire: u8 = rng.random_range(0..8);
            let mut b = vec![(field << 3) | wire];
            b.extend((0..rng.random_range(0..12)).map(|_| rng.random::<u8>()));
            b
        }
        5 => {
            // A varint of more than 10 bytes.
            let mut b = vec![0x08];
            b.extend(std::iter::repeat_n(0xff, rng.random_range(10..20)));
            b.push(0x01);
            b
        }
        6 => {
            // A length-delimited field whose length claims far more than follows.
            let mut b = vec![0x0a];
            prost::encoding::encode_varint(rng.random_range(1..u32::MAX as u64), &mut b);
            b.extend_from_slice(&sample[..rng.random_range(0..sample.len())]);
            b
        }
        _ => nested_txn_bytes(rng.random_range(1..400)),
    }
}

/// A TxnRequest nested `depth` levels deep through `success` (field 2) -> RequestOp.request_txn
/// (field 4), built by hand so any depth can be sent whatever the encoder's limits.
fn nested_txn_bytes(depth: usize) -> Vec<u8> {
    let mut txn = pb::TxnRequest {
        success: vec![pb::RequestOp {
            request: Some(pb::request_op::Request::RequestRange(pb::RangeRequest {
                key: "deep".into(),
                ..Default::default()
            })),
        }],
        ..Default::default()
    }
    .encode_to_vec();
    for _ in 1..depth {
        let mut op = Vec::new();
        prost::encoding::bytes::encode(4, &txn, &mut op);
        txn.clear();
        prost::encoding::bytes::encode(2, &op, &mut txn);
    }
    txn
}

/// What a hostile body may get back: an answer (the bytes happened to decode to a request the
/// server handled) or a status that is a decision, never a crash, a reset or an internal error
/// other than the decoder's.
#[track_caller]
fn assert_handled(path: &str, body: &[u8], r: &Result<Vec<u8>, tonic::Status>) {
    let Err(st) = r else { return };
    let decoded = st.code() == Code::Internal && st.message().contains("decode");
    let decided = matches!(
        st.code(),
        Code::InvalidArgument
            | Code::OutOfRange
            | Code::NotFound
            | Code::FailedPrecondition
            | Code::Unimplemented
            | Code::PermissionDenied
            | Code::Unauthenticated
    );
    assert!(
        decoded || decided,
        "{path} with body {body:02x?}: expected an answer, a decode error (INTERNAL) or an \
         etcd-style refusal, got {st:?}"
    );
}

/// The server still answers Status on a fresh connection and the process is alive.
async fn assert_serving(s: &mut Server, after: &str) {
    assert!(s.exited().is_none(), "the server exited after {after}\n{}", s.log_tail());
    let mut raw = s.raw_clients().await;
    let st = tokio::time::timeout(Duration::from_secs(10), raw.maint.status(pb::StatusRequest {}))
        .await
        .unwrap_or_else(|_| panic!("Status did not answer within 10 s after {after}"));
    st.unwrap_or_else(|e| panic!("Status failed after {after}: {e:?}"));
}

#[tokio::test]
async fn malformed_protobuf_on_every_unary_method() {
    let mut s = server_of!(Kind::MemEtcd);
    let ch = s.channel().await.expect("connect");
    let sample = valid_sample();
    let iters = fuzz_iters();
    let started = Instant::now();
    let mut tally = std::collections::BTreeMap::<(&str, String), usize>::new();
    for (m, path) in UNARY.iter().enumerate() {
        let seed = 0x9_0000 + m as u64;
        let mut rng = SmallRng::seed_from_u64(seed);
        for i in 0..iters {
            let body = hostile_body(&mut rng, &sample);
            let r = call_raw(ch.clone(), path, body.clone()).await;
            assert_handled(&format!("{path} (seed {seed}, case {i})"), &body, &r);
            let outcome = match &r {
                Ok(_) => "OK".to_string(),
                Err(st) => format!("{:?}", st.code()),
            };
            *tally.entry((path, outcome)).or_default() += 1;
        }
        assert_serving(&mut s, &format!("{iters} hostile bodies on {path} (seed {seed})")).await;
    }
    eprintln!("{} calls in {:?}: {tally:?}", iters * UNARY.len(), started.elapsed());
    // Some bodies must have reached the decoder's error path, or the fuzzing tested nothing.
    assert!(
        tally.iter().any(|((_, o), _)| o == "Internal"),
        "expected decode errors among the outcomes: {tally:?}"
    );
}

/// Fixed malformed bodies that both servers must reject the same way. grpc-go words decode
/// errors differently from prost ("grpc: error unmarshalling request: ..."), so for INTERNAL only
/// the code is compared; etcd's own refusals must match word for word.
#[tokio::test]
async fn malformed_protobuf_matches_etcd() {
    let Some(etcd) = Server::start(Kind::Etcd, &[]).await else { return };
    let mut mem = server_of!(Kind::MemEtcd);
    let sample = valid_sample();
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("truncated", sample[..sample.len() / 2].to_vec()),
        ("key as a varint", vec![0x08, 0x01]),
        ("wire type 7", vec![0x0f, 0x00]),
        ("overlong varint", [&[0x18][..], &[0xff; 11], &[0x01]].concat()),
        ("length past the end", vec![0x0a, 0xff, 0xff, 0xff, 0x0f, b'a']),
        ("end group without start", vec![0x0c]),
        ("txn nested 10 deep", nested_txn_bytes(10)),
    ];
    let paths = [
        "/etcdserverpb.KV/Range",
        "/etcdserverpb.KV/Put",
        "/etcdserverpb.KV/Txn",
        "/etcdserverpb.Lease/LeaseGrant",
        "/etcdserverpb.Maintenance/HashKV",
    ];
    let (ech, mch) = (etcd.channel().await.unwrap(), mem.channel().await.unwrap());
    let mut differences = Vec::new();
    for path in paths {
        for (what, body) in &bodies {
            let e = call_raw(ech.clone(), path, body.clone()).await;
            let m = call_raw(mch.clone(), path, body.clone()).await;
            assert_handled(path, body, &m);
            let key = |r: &Result<Vec<u8>, tonic::Status>| match r {
                Ok(_) => (Code::Ok, String::new()),
                Err(s) if s.code() == Code::Internal => (Code::Internal, String::new()),
                Err(s) => (s.code(), s.message().to_string()),
            };
            if key(&e) != key(&m) {
                differences.push(format!("{path} {what}: etcd {e:?}, mem_etcd {m:?}"));
            }
        }
    }
    assert_serving(&mut mem, "the malformed bodies").await;
    assert!(
        differences.is_empty(),
        "expected the same outcome as etcd:\n{}",
        differences.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Structured hostile requests, differential against etcd

/// One hostile request through the generated clients.
#[derive(Debug, Clone)]
enum Req {
    Range(pb::RangeRequest),
    Put(pb::PutRequest),
    Delete(pb::DeleteRangeRequest),
    Txn(pb::TxnRequest),
    Compact(pb::CompactionRequest),
    Grant(pb::LeaseGrantRequest),
    Revoke(pb::LeaseRevokeRequest),
    TimeToLive(pb::LeaseTimeToLiveRequest),
}

/// What a request got, comparable across servers: the reply without its header (member and
/// cluster ids differ), or the status. Transport-level refusals (a message over the receive
/// limit, a decode error) are compared by code only: grpc-go and tonic word them differently.
type Outcome = Result<String, (Code, String)>;

fn outcome<T: std::fmt::Debug>(r: Result<tonic::Response<T>, tonic::Status>) -> Outcome {
    match r {
        Ok(resp) => {
            let text = format!("{:?}", resp.into_inner());
            // Strip the header: `header: Some(ResponseHeader { .. })` up to its closing brace.
            Ok(match text.find("header: Some(ResponseHeader {") {
                Some(at) => {
                    let end = text[at..].find("}),").map_or(text.len(), |e| at + e + 3);
                    format!("{}{}", &text[..at], &text[end..])
                }
                None => text,
            })
        }
        Err(s) if matches!(s.code(), Code::ResourceExhausted | Code::Internal) => {
            Err((s.code(), String::new()))
        }
        Err(s) => Err((s.code(), s.message().to_string())),
    }
}

async fn send(
    raw: &mut Raw,
    lease: &mut pb::lease_client::LeaseClient<Channel>,
    r: Req,
) -> Outcome {
    match r {
        Req::Range(r) => outcome(raw.kv.range(r).await),
        Req::Put(r) => outcome(raw.kv.put(r).await),
        Req::Delete(r) => outcome(raw.kv.delete_range(r).await),
        Req::Txn(r) => outcome(raw.kv.txn(r).await),
        Req::Compact(r) => outcome(raw.kv.compact(r).await),
        Req::Grant(r) => outcome(lease.lease_grant(r).await),
        Req::Revoke(r) => outcome(lease.lease_revoke(r).await),
        Req::TimeToLive(r) => outcome(lease.lease_time_to_live(r).await),
    }
}

fn range(key: &str, end: &str) -> pb::RangeRequest {
    pb::RangeRequest {
        key: key.to_string().into(),
        range_end: end.to_string().into(),
        ..Default::default()
    }
}

fn put_req(key: impl Into<bytes::Bytes>, len: usize) -> pb::PutRequest {
    pb::PutRequest { key: key.into(), value: vec![b'v'; len].into(), ..Default::default() }
}

fn op_range(key: &str) -> pb::RequestOp {
    pb::RequestOp { request: Some(pb::request_op::Request::RequestRange(range(key, ""))) }
}

/// A txn `depth` levels deep, one op per level, the innermost a read (so whether a server
/// accepts it does not change the store for the cases after it).
fn deep_txn(depth: usize) -> pb::TxnRequest {
    let mut t = pb::TxnRequest { success: vec![op_range("a")], ..Default::default() };
    for _ in 1..depth {
        t = pb::TxnRequest {
            success: vec![pb::RequestOp { request: Some(pb::request_op::Request::RequestTxn(t)) }],
            ..Default::default()
        };
    }
    t
}

fn compare(result: i32, target: i32, union: Option<pb::compare::TargetUnion>) -> pb::TxnRequest {
    pb::TxnRequest {
        compare: vec![pb::Compare {
            result,
            target,
            key: "a".into(),
            range_end: Default::default(),
            target_union: union,
        }],
        success: vec![op_range("a")],
        failure: vec![op_range("b")],
    }
}

/// The hostile request that grants a lease id that is still alive.
const DUPLICATE_GRANT: &str = "grant: the same id again";

/// The structured hostile requests, in order (earlier ones change the store for later ones the
/// same way on both servers).
fn hostile_requests() -> Vec<(&'static str, Req)> {
    use pb::compare::TargetUnion as U;
    let big = MAX_REQUEST_BYTES;
    vec![
        ("range: empty key", Req::Range(range("", ""))),
        ("range: inverted", Req::Range(range("b", "a"))),
        ("range: end equal to key", Req::Range(range("a", "a"))),
        ("range: end \\0 (from key)", Req::Range(range("a", "\0"))),
        ("range: empty key, end \\0", Req::Range(range("", "\0"))),
        (
            "range: revision i64::MAX",
            Req::Range(pb::RangeRequest { revision: i64::MAX, ..range("a", "") }),
        ),
        ("range: revision -5", Req::Range(pb::RangeRequest { revision: -5, ..range("a", "") })),
        ("range: limit -1", Req::Range(pb::RangeRequest { limit: -1, ..range("\0", "\0") })),
        (
            "range: limit i64::MIN",
            Req::Range(pb::RangeRequest { limit: i64::MIN, ..range("\0", "\0") }),
        ),
        (
            "range: sort target 99",
            Req::Range(pb::RangeRequest { sort_target: 99, ..range("a", "z") }),
        ),
        (
            "range: sort order -1",
            Req::Range(pb::RangeRequest { sort_order: -1, ..range("a", "z") }),
        ),
        (
            "range: negative revision bounds",
            Req::Range(pb::RangeRequest {
                min_mod_revision: -1,
                max_mod_revision: -1,
                min_create_revision: i64::MIN,
                max_create_revision: -7,
                ..range("\0", "\0")
            }),
        ),
        (
            "range: key of max-request-bytes",
            Req::Range(pb::RangeRequest { key: vec![b'k'; big].into(), ..Default::default() }),
        ),
        ("put: empty key", Req::Put(put_req("", 1))),
        ("put: key of max-request-bytes", Req::Put(put_req(vec![b'k'; big], 0))),
        (
            "put: lease that does not exist",
            Req::Put(pb::PutRequest { lease: 0x7a7a, ..put_req("a", 1) }),
        ),
        ("put: lease -1", Req::Put(pb::PutRequest { lease: -1, ..put_req("a", 1) })),
        ("put: lease i64::MIN", Req::Put(pb::PutRequest { lease: i64::MIN, ..put_req("a", 1) })),
        (
            "put: ignore_value with a value",
            Req::Put(pb::PutRequest { ignore_value: true, ..put_req("a", 1) }),
        ),
        (
            "put: ignore_lease with a lease",
            Req::Put(pb::PutRequest { ignore_lease: true, lease: 5, ..put_req("a", 0) }),
        ),
        (
            "put: ignore_value on a missing key",
            Req::Put(pb::PutRequest { ignore_value: true, ..put_req("missing", 0) }),
        ),
        (
            "delete: empty key",
            Req::Delete(pb::DeleteRangeRequest { key: Default::default(), ..Default::default() }),
        ),
        (
            "delete: inverted",
            Req::Delete(pb::DeleteRangeRequest {
                key: "z".into(),
                range_end: "y".into(),
                prev_kv: true,
            }),
        ),
        (
            "delete: key of max-request-bytes",
            Req::Delete(pb::DeleteRangeRequest {
                key: vec![b'k'; big].into(),
                ..Default::default()
            }),
        ),
        ("txn: nested 10 deep", Req::Txn(deep_txn(10))),
        ("txn: nested 40 deep", Req::Txn(deep_txn(40))),
        ("txn: compare target 99", Req::Txn(compare(0, 99, Some(U::Version(1))))),
        ("txn: compare result 99", Req::Txn(compare(99, 0, Some(U::Version(1))))),
        ("txn: compare result -1", Req::Txn(compare(-1, 0, Some(U::Version(1))))),
        ("txn: compare value without a union", Req::Txn(compare(0, 3, None))),
        (
            "txn: compare target and union disagree",
            Req::Txn(compare(0, 0, Some(U::Value("x".into())))),
        ),
        ("txn: compare lease -1", Req::Txn(compare(0, 4, Some(U::Lease(-1))))),
        (
            "txn: compare with an empty key",
            Req::Txn(pb::TxnRequest {
                compare: vec![pb::Compare {
                    key: Default::default(),
                    target_union: Some(U::Version(0)),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        ),
        (
            "txn: an empty RequestOp",
            Req::Txn(pb::TxnRequest {
                success: vec![pb::RequestOp { request: None }],
                ..Default::default()
            }),
        ),
        (
            "txn: too many ops",
            Req::Txn(pb::TxnRequest {
                success: (0..=MAX_TXN_OPS).map(|_| op_range("a")).collect(),
                ..Default::default()
            }),
        ),
        (
            "compact: revision i64::MAX",
            Req::Compact(pb::CompactionRequest { revision: i64::MAX, physical: false }),
        ),
        (
            "compact: revision -1",
            Req::Compact(pb::CompactionRequest { revision: -1, physical: true }),
        ),
        ("grant: ttl -5", Req::Grant(pb::LeaseGrantRequest { ttl: -5, id: 1001 })),
        ("grant: ttl 0", Req::Grant(pb::LeaseGrantRequest { ttl: 0, id: 1002 })),
        ("grant: ttl i64::MIN", Req::Grant(pb::LeaseGrantRequest { ttl: i64::MIN, id: 1003 })),
        ("grant: id -1", Req::Grant(pb::LeaseGrantRequest { ttl: 60, id: -1 })),
        // The duplicate is of a lease with a long TTL: 1001 got the minimum (2 s), and a stall
        // could let it expire before the second grant, which would then succeed.
        ("grant: id 1004, ttl 60", Req::Grant(pb::LeaseGrantRequest { ttl: 60, id: 1004 })),
        (DUPLICATE_GRANT, Req::Grant(pb::LeaseGrantRequest { ttl: 60, id: 1004 })),
        ("revoke: id 0", Req::Revoke(pb::LeaseRevokeRequest { id: 0 })),
        ("revoke: id -1", Req::Revoke(pb::LeaseRevokeRequest { id: -1 })),
        ("revoke: id that does not exist", Req::Revoke(pb::LeaseRevokeRequest { id: 0x7a7a })),
        ("ttl: id -1", Req::TimeToLive(pb::LeaseTimeToLiveRequest { id: -1, keys: true })),
        ("ttl: id 0", Req::TimeToLive(pb::LeaseTimeToLiveRequest { id: 0, keys: false })),
        ("range: after all of the above", Req::Range(range("\0", "\0"))),
    ]
}

/// Both servers get a few keys, then every hostile request in turn; the outcomes must match.
#[tokio::test]
async fn structured_hostile_requests_match_etcd() {
    let Some(etcd) = Server::start(Kind::Etcd, &[]).await else { return };
    let mut mem = server_of!(Kind::MemEtcd);
    let mut sides = Vec::new();
    for s in [&etcd, &mem] {
        let raw = s.raw_clients().await;
        let lease = pb::lease_client::LeaseClient::new(raw.channel.clone());
        sides.push((raw, lease));
    }
    for (raw, _) in &mut sides {
        for k in ["a", "b", "c"] {
            raw.kv.put(put_req(k, 3)).await.expect("seed put");
        }
    }
    let mut differences = Vec::new();
    for (what, req) in hostile_requests() {
        let (raw, lease) = &mut sides[0];
        let e = send(raw, lease, req.clone()).await;
        let (raw, lease) = &mut sides[1];
        let m = send(raw, lease, req).await;
        if what == DUPLICATE_GRANT && !matches!(&e, Err((Code::FailedPrecondition, _))) {
            // Otherwise the lease was gone by then, and the case compares nothing of interest.
            differences.push(format!("{what}: etcd was expected to refuse it, got {e:?}"));
        }
        if e != m {
            differences.push(format!("{what}:\n  etcd:     {e:?}\n  mem_etcd: {m:?}"));
        }
    }
    assert_serving(&mut mem, "the structured hostile requests").await;
    assert!(
        differences.is_empty(),
        "expected the same outcome as etcd:\n{}",
        differences.join("\n")
    );
}

/// A message over the gRPC receive limit (max-request-bytes + 512 KiB) is refused by the
/// transport. grpc-go answers RESOURCE_EXHAUSTED, the code the gRPC spec gives for a message
/// over the limit. (Regression: tonic's decoder answers OUT_OF_RANGE, which clients read as an
/// etcd error, since etcd uses OUT_OF_RANGE for compacted and future revisions; mem_etcd passed
/// it on until the HTTP layer translated it.)
#[tokio::test]
async fn request_over_the_receive_limit_is_resource_exhausted() {
    let mut s = server_of!(Kind::MemEtcd);
    let mut raw = s.raw_clients().await;
    let over = MAX_REQUEST_BYTES + (512 << 10) + 1024;
    let put = raw.kv.put(put_req("a", over)).await;
    let range =
        raw.kv.range(pb::RangeRequest { key: vec![b'k'; over].into(), ..Default::default() }).await;
    assert_serving(&mut s, "requests over the receive limit").await;
    for (what, r) in [("put", put.map(drop)), ("range", range.map(drop))] {
        let st = r.expect_err(what);
        assert_eq!(
            st.code(),
            Code::ResourceExhausted,
            "{what} of {over} bytes: expected RESOURCE_EXHAUSTED as etcd answers, got {st:?}"
        );
    }
}

/// etcd applies a txn nested 64 deep (Go's protobuf has no nesting limit and etcd's only limit is
/// --max-txn-ops per level); mem_etcd's decoder (prost, recursion limit 100 messages, two per
/// txn level) refuses it with INTERNAL "failed to decode Protobuf message: recursion limit
/// reached", which is no etcd error. Sent as raw bytes: tonic's client could not decode etcd's
/// reply either, for the same reason.
#[tokio::test]
#[ignore = "BUG: a Txn nested deeper than ~49 levels is refused with INTERNAL (prost's recursion \
            limit) where etcd applies it"]
async fn deeply_nested_txn_is_accepted_like_etcd() {
    let depth = 64;
    let body = deep_txn(depth).encode_to_vec();
    let mut outcomes = Vec::new();
    let etcd = Server::start(Kind::Etcd, &[]).await;
    let mut mem = server_of!(Kind::MemEtcd);
    if let Some(etcd) = &etcd {
        let r = call_raw(etcd.channel().await.unwrap(), "/etcdserverpb.KV/Txn", body.clone()).await;
        assert!(r.is_ok(), "etcd was expected to accept a txn nested {depth} deep: {r:?}");
    }
    let r = call_raw(mem.channel().await.unwrap(), "/etcdserverpb.KV/Txn", body).await;
    // The decoder's message repeats the path of every level; its start and end say enough.
    outcomes.push(r.map(|b| b.len()).map_err(|st| {
        let m = st.message();
        format!(
            "{:?} {} ... {}",
            st.code(),
            &m[..m.len().min(60)],
            &m[m.len().saturating_sub(30)..]
        )
    }));
    assert_serving(&mut mem, "a deeply nested txn").await;
    assert!(
        outcomes[0].is_ok(),
        "expected a txn nested {depth} deep to be applied as etcd does: {outcomes:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Watch streams

fn create(key: &str, end: &str, start_revision: i64) -> pb::watch_request::RequestUnion {
    pb::watch_request::RequestUnion::CreateRequest(pb::WatchCreateRequest {
        key: key.to_string().into(),
        range_end: end.to_string().into(),
        start_revision,
        ..Default::default()
    })
}

/// How long a watch comparison waits for the responses a case expects (a bound for a slow or
/// loaded server, not a guess at its timing: the wait ends as soon as they have come).
const WATCH_WAIT: Duration = Duration::from_secs(10);
/// How long it then listens for anything more than the case expects.
const WATCH_EXTRA: Duration = Duration::from_millis(300);

/// Sends `reqs` on a new watch stream, then a put to "a" after the first reply, and summarizes
/// what comes back (responses without headers, then how the stream ended): it waits up to
/// [`WATCH_WAIT`] for the `expect` responses the case should get (or the stream's end), then
/// [`WATCH_EXTRA`] for anything more.
async fn watch_outcome(s: &Server, reqs: Vec<pb::WatchRequest>, expect: usize) -> Vec<String> {
    let raw = s.raw_clients().await;
    let mut w = pb::watch_client::WatchClient::new(raw.channel.clone());
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    for r in reqs {
        tx.send(r).await.unwrap();
    }
    let mut out = Vec::new();
    let now = tokio::time::Instant::now();
    let mut deadline = now + if expect == 0 { WATCH_EXTRA } else { WATCH_WAIT };
    // grpc-go sends the response headers with the first message, so the call itself may wait.
    let call = tokio::time::timeout_at(deadline, w.watch(ReceiverStream::new(rx))).await;
    let mut stream = match call {
        // The same as a stream that has said nothing yet.
        Err(_) => return out,
        Ok(Err(st)) => return vec![format!("refused: {:?} {}", st.code(), st.message())],
        Ok(Ok(r)) => r.into_inner(),
    };
    let mut kv = raw.kv.clone();
    let mut wrote = false;
    loop {
        let next = tokio::time::timeout_at(deadline, stream.message()).await;
        match next {
            Err(_) => break,
            Ok(Ok(Some(r))) => out.push(format!(
                "id={} created={} canceled={} reason={:?} compact={} events={}",
                r.watch_id,
                r.created,
                r.canceled,
                r.cancel_reason,
                r.compact_revision,
                r.events.len()
            )),
            Ok(Ok(None)) => {
                out.push("stream ended".into());
                break;
            }
            Ok(Err(st)) => {
                out.push(format!("stream failed: {:?}", st.code()));
                break;
            }
        }
        if out.len() == expect {
            // Everything expected has come: listen a little longer for anything extra.
            deadline = tokio::time::Instant::now() + WATCH_EXTRA;
        }
        if !wrote {
            // One write after the first reply, so created watchers have an event to report.
            wrote = true;
            kv.put(put_req("a", 2)).await.expect("put during watch");
        }
    }
    drop(tx);
    out
}

#[tokio::test]
async fn hostile_watch_requests_match_etcd() {
    use pb::watch_request::RequestUnion as U;
    let Some(etcd) = Server::start(Kind::Etcd, &[]).await else { return };
    let mut mem = server_of!(Kind::MemEtcd);
    let wr = |u: Option<U>| pb::WatchRequest { request_union: u };
    // Each case with the number of responses etcd gives it: the created (or refused) reply for
    // each create, then one with the put's event for each watcher on "a".
    let cases: Vec<(&str, usize, Vec<pb::WatchRequest>)> = vec![
        ("inverted range", 1, vec![wr(Some(create("b", "a", 0)))]),
        ("range end equal to key", 1, vec![wr(Some(create("a", "a", 0)))]),
        ("empty key", 1, vec![wr(Some(create("", "", 0)))]),
        ("start revision -1", 1, vec![wr(Some(create("a", "", -1)))]),
        ("start revision i64::MAX", 1, vec![wr(Some(create("a", "", i64::MAX)))]),
        (
            "filter out of enum",
            2,
            vec![wr(Some(U::CreateRequest(pb::WatchCreateRequest {
                key: "a".into(),
                filters: vec![7, -1],
                ..Default::default()
            })))],
        ),
        (
            "watch id -5",
            2,
            vec![wr(Some(U::CreateRequest(pb::WatchCreateRequest {
                key: "a".into(),
                watch_id: -5,
                ..Default::default()
            })))],
        ),
        (
            "the same watch id twice",
            3,
            vec![
                wr(Some(U::CreateRequest(pb::WatchCreateRequest {
                    key: "a".into(),
                    watch_id: 9,
                    ..Default::default()
                }))),
                wr(Some(U::CreateRequest(pb::WatchCreateRequest {
                    key: "b".into(),
                    watch_id: 9,
                    ..Default::default()
                }))),
            ],
        ),
        ("no union set", 2, vec![wr(None), wr(Some(create("a", "", 0)))]),
        (
            "cancel of an unknown id",
            2,
            vec![
                wr(Some(U::CancelRequest(pb::WatchCancelRequest { watch_id: 99 }))),
                wr(Some(create("a", "", 0))),
            ],
        ),
        // No watch, so nothing to wait for: etcd says nothing.
        (
            "progress before any watch",
            0,
            vec![wr(Some(U::ProgressRequest(pb::WatchProgressRequest {})))],
        ),
    ];
    let mut differences = Vec::new();
    for (what, expect, reqs) in cases {
        let (e, m) = tokio::join!(
            watch_outcome(&etcd, reqs.clone(), expect),
            watch_outcome(&mem, reqs, expect)
        );
        if expect > 0 && e.is_empty() {
            // Every case that creates a watch gets a reply from etcd; silence is a stall, and two
            // stalls would compare equal.
            differences.push(format!("{what}: etcd said nothing within {WATCH_WAIT:?}"));
        } else if e != m {
            differences.push(format!("{what}:\n  etcd:     {e:?}\n  mem_etcd: {m:?}"));
        }
    }
    assert_serving(&mut mem, "the hostile watch requests").await;
    assert!(
        differences.is_empty(),
        "expected the same outcome as etcd:\n{}",
        differences.join("\n")
    );
}

/// Garbage for watch streams: two fixed undecodable bodies and seeded hostile ones.
fn watch_garbage() -> Vec<Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(0x9_1000);
    let sample = valid_sample();
    let mut bodies = vec![vec![0x0a, 0xff, 0xff, 0xff, 0x0f], vec![0x08, 0x01]];
    bodies.extend((0..6).map(|_| hostile_body(&mut rng, &sample)));
    bodies
}

/// For each body, a watch stream that carries a valid create and then the body, and how the
/// stream ended (waiting up to [`WATCH_WAIT`] for the end of a stream whose body does not
/// decode, [`WATCH_EXTRA`] for one whose body does).
async fn watch_garbage_outcomes(s: &Server, bodies: &[Vec<u8>]) -> Vec<String> {
    let valid = pb::WatchRequest { request_union: Some(create("a", "", 0)) }.encode_to_vec();
    let mut out = Vec::new();
    for garbage in bodies {
        let mut g = tonic::client::Grpc::new(s.channel().await.unwrap());
        g.ready().await.unwrap();
        let msgs = tokio_stream::iter(vec![valid.clone(), garbage.clone()]);
        let path = PathAndQuery::from_static("/etcdserverpb.Watch/Watch");
        // A body that does not decode ends the stream: wait (bounded) for that. One that does
        // is a request like any other, and the stream stays open: listen briefly.
        let wait =
            if pb::WatchRequest::decode(&garbage[..]).is_err() { WATCH_WAIT } else { WATCH_EXTRA };
        let end = match g.streaming(tonic::Request::new(msgs), path, RawBytes).await {
            // Whether the status comes before or after the created reply is a race.
            Err(st) => format!("failed: {:?}", st.code()),
            Ok(resp) => {
                let mut stream = resp.into_inner();
                let mut end = format!("no end within {wait:?}");
                let deadline = tokio::time::Instant::now() + wait;
                while let Ok(m) = tokio::time::timeout_at(deadline, stream.message()).await {
                    match m {
                        Ok(Some(_)) => continue,
                        Ok(None) => end = "ended".into(),
                        Err(st) => end = format!("failed: {:?}", st.code()),
                    }
                    break;
                }
                end
            }
        };
        out.push(end);
    }
    out
}

/// Garbage after a valid create on a watch stream ends that stream, and only that stream.
#[tokio::test]
async fn garbage_on_a_watch_stream_ends_it() {
    let mut s = server_of!(Kind::MemEtcd);
    let bodies = watch_garbage();
    let outcomes = watch_garbage_outcomes(&s, &bodies).await;
    for (body, end) in bodies.iter().zip(&outcomes) {
        // Garbage that happens to decode as a WatchRequest is a request like any other.
        let valid = pb::WatchRequest::decode(&body[..]).is_ok();
        assert!(
            end == "ended" || end == "failed: Internal" || valid,
            "body {body:02x?}: expected the stream to end (cleanly or with INTERNAL), got {end}"
        );
    }
    assert_serving(&mut s, "garbage on watch streams").await;
}

/// etcd fails a watch stream whose next message does not decode with INTERNAL (grpc-go's decode
/// error), so a client can tell its own broken request from a server that closed the stream.
/// (Regression: mem_etcd's receive loop used to end such a stream with OK.)
#[tokio::test]
async fn garbage_on_a_watch_stream_fails_it_like_etcd() {
    let Some(etcd) = Server::start(Kind::Etcd, &[]).await else { return };
    let mut mem = server_of!(Kind::MemEtcd);
    // The fixed bodies only: whether etcd reports the random ones is racy.
    let bodies = watch_garbage()[..2].to_vec();
    let e = watch_garbage_outcomes(&etcd, &bodies).await;
    let m = watch_garbage_outcomes(&mem, &bodies).await;
    assert_serving(&mut mem, "garbage on watch streams").await;
    let differences: Vec<String> = bodies
        .iter()
        .zip(e.iter().zip(&m))
        // Neither body decodes, so etcd ends each stream; a stream still open is a stall, and
        // two stalls would compare equal.
        .filter(|(_, (ee, me))| ee != me || ee.starts_with("no end"))
        .map(|(body, (ee, me))| format!("body {body:02x?}: etcd {ee}, mem_etcd {me}"))
        .collect();
    assert!(differences.is_empty(), "expected etcd's outcome:\n{}", differences.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Metadata

/// Binary and undecodable metadata is not the server's business when auth is off: etcd ignores
/// it, and so must mem_etcd.
#[tokio::test]
async fn binary_and_garbage_metadata_is_ignored_like_etcd() {
    use tonic::metadata::{AsciiMetadataValue, BinaryMetadataValue, MetadataValue};
    let Some(etcd) = Server::start(Kind::Etcd, &[]).await else { return };
    let mut mem = server_of!(Kind::MemEtcd);
    let all_bytes: Vec<u8> = (0..=255).collect();
    // http accepts obs-text (0x80..0xff) in header values; tonic passes it through as ASCII.
    let obs_text = AsciiMetadataValue::try_from(&[b'x', 0x80, 0xfe, 0xff][..])
        .expect("http allows obs-text header bytes");
    let mut results = Vec::new();
    for s in [&etcd, &mem] {
        let mut raw = s.raw_clients().await;
        let mut out = Vec::new();
        for case in 0..5 {
            let mut req = tonic::Request::new(range("a", ""));
            let md = req.metadata_mut();
            match case {
                0 => {
                    md.insert_bin("x-hostile-bin", BinaryMetadataValue::from_bytes(&all_bytes));
                }
                1 => {
                    md.insert_bin("token-bin", BinaryMetadataValue::from_bytes(&[0, 0xff, 0]));
                }
                2 => {
                    md.insert("token", MetadataValue::from_static("not-a-token"));
                }
                3 => {
                    md.insert("authorization", obs_text.clone());
                }
                _ => {
                    md.insert("x-hostile", obs_text.clone());
                    md.insert("hasleader", MetadataValue::from_static("\t maybe"));
                }
            }
            out.push(outcome(raw.kv.range(req).await));
        }
        results.push(out);
    }
    assert_serving(&mut mem, "binary metadata").await;
    assert_eq!(results[1], results[0], "expected mem_etcd to treat the metadata as etcd does");
}

// ---------------------------------------------------------------------------------------------
// Resource abuse: many connections, slow readers, clients that vanish

/// The pid of the child process listening on `addr`: the listening socket's inode from
/// /proc/net/tcp, then the child of this process that holds it.
fn server_pid(addr: std::net::SocketAddr) -> u32 {
    let tcp = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    let port = format!(":{:04X}", addr.port());
    let inode = tcp
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 9 && f[1].ends_with(&port) && f[3] == "0A")
        .map(|f| f[9].to_string())
        .unwrap_or_else(|| panic!("no listening socket for {addr} in /proc/net/tcp"));
    let target = format!("socket:[{inode}]");
    let me = std::process::id().to_string();
    for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Field 4 (after the parenthesized name) is the parent pid.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1));
        if ppid != Some(me.as_str()) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { continue };
        if fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == target))
        {
            return pid;
        }
    }
    panic!("no child of this process holds {target} (the listener on {addr})");
}

/// (VmRSS in bytes, thread count) from /proc/<pid>/status.
fn rss_and_threads(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
    };
    (field("VmRSS:") * 1024, field("Threads:"))
}

const MIB: u64 = 1 << 20;

/// Makes sure this process (and so the servers it starts afterwards) may open `need` files,
/// raising the soft limit with prlimit(1) when it is lower. Fails, rather than skips, when that
/// is impossible: a silently smaller test would prove nothing.
fn ensure_fd_limit(need: u64) {
    let limits = std::fs::read_to_string("/proc/self/limits").expect("read /proc/self/limits");
    let line = limits.lines().find(|l| l.starts_with("Max open files")).expect("open files line");
    let nums: Vec<u64> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    let (soft, hard) = (nums[0], nums.get(1).copied().unwrap_or(u64::MAX));
    if soft >= need {
        return;
    }
    assert!(
        hard >= need,
        "need {need} open files but the hard limit is {hard}: raise it (ulimit -Hn)"
    );
    let st = std::process::Command::new("prlimit")
        .args([format!("--pid={}", std::process::id()), format!("--nofile={need}:{hard}")])
        .status();
    assert!(
        st.as_ref().is_ok_and(|s| s.success()),
        "need {need} open files (soft limit {soft}); prlimit could not raise it: {st:?}"
    );
}

/// A metric's value from the server's /metrics page (HTTP/1.0, so the body is not chunked).
async fn metric(addr: std::net::SocketAddr, name: &str) -> f64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut c = tokio::net::TcpStream::connect(addr).await.expect("connect for /metrics");
    c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.expect("send");
    let mut page = String::new();
    tokio::time::timeout(Duration::from_secs(10), c.read_to_string(&mut page))
        .await
        .expect("/metrics within 10 s")
        .expect("read /metrics");
    page.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} on /metrics"))
}

/// Waits up to `within` for `name` to read `want`.
async fn wait_metric(addr: std::net::SocketAddr, name: &str, want: f64, within: Duration) {
    let what = format!("{name} to read {want} once the clients left");
    wait_until(&what, within, || async {
        let got = metric(addr, name).await;
        if got == want { Ok(()) } else { Err(format!("{name} is {got}")) }
    })
    .await
}

/// mem_etcd's count of tasks alive in its runtime (one per connection, per stream, per
/// background loop).
const ALIVE_TASKS: &str = "mem_etcd_runtime_alive_tasks";

/// How far the task count may stay above its idle value once a scenario's clients are gone:
/// the /metrics request itself is a connection, a closed client's connection may take a moment
/// to be noticed, and the background loops spawn short-lived helpers (a WAL snapshot, a lease
/// revocation). Every scenario here opens at least 20 connections or streams, so a leak of one
/// task each is well past it.
const TASK_SLACK: f64 = 5.0;

/// The task count of an idle server: read until two readings 100 ms apart agree (a connection
/// just closed by the test may not be gone yet).
async fn idle_tasks(addr: std::net::SocketAddr) -> f64 {
    let mut last = metric(addr, ALIVE_TASKS).await;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = metric(addr, ALIVE_TASKS).await;
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("{ALIVE_TASKS} never settled on an idle server (last {last})");
}

/// Waits up to 10 s for the task count to come back to within [`TASK_SLACK`] of `idle`, the
/// count before the scenario: a task left behind per connection or stream (a stream task
/// waiting for a client that is gone) never comes back.
async fn assert_tasks_back(addr: std::net::SocketAddr, idle: f64, after: &str) {
    let what = format!(
        "the tasks alive in the server to come back to at most {TASK_SLACK} more than the \
         {idle} before {after} (else: tasks leaked)"
    );
    wait_until(&what, Duration::from_secs(10), || async {
        let now = metric(addr, ALIVE_TASKS).await;
        if now <= idle + TASK_SLACK { Ok(()) } else { Err(format!("{now} tasks alive")) }
    })
    .await
}

/// Polls RSS for a while after clients leave: freed memory goes back to the system lazily.
async fn settled_rss(pid: u32, at_most: u64) -> u64 {
    let start = Instant::now();
    loop {
        let (rss, _) = rss_and_threads(pid);
        if rss <= at_most || start.elapsed() > Duration::from_secs(10) {
            return rss;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

const CONNECTIONS: usize = 2000;

/// One wave: CONNECTIONS clients, each on its own connection, each does a Range and holds the
/// connection until all are open; then all leave together. Returns the RSS with all open.
async fn connection_wave(s: &mut Server, pid: u32, threads0: u64) -> u64 {
    let started = Instant::now();
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(200));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..CONNECTIONS {
        let (endpoint, sem, done) = (s.endpoint(), sem.clone(), done.clone());
        let mut release = release_rx.clone();
        tasks.spawn(async move {
            // At most 200 handshakes in flight, so the listen backlog is not what is tested.
            let permit = sem.acquire_owned().await.unwrap();
            let ch = Channel::from_shared(endpoint).unwrap().connect().await;
            let ch = ch.unwrap_or_else(|e| panic!("connection {i}: {e:?}"));
            let mut kv = pb::kv_client::KvClient::new(ch);
            kv.range(range("a", "")).await.unwrap_or_else(|e| panic!("range on {i}: {e:?}"));
            drop(permit);
            done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = release.wait_for(|go| *go).await;
            drop(kv);
        });
    }
    let rss_open = loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        // A task ends before the release only by panicking.
        if let Some(r) = tasks.try_join_next() {
            r.expect("a connection task failed");
        }
        if done.load(std::sync::atomic::Ordering::SeqCst) == CONNECTIONS {
            let (rss, threads) = rss_and_threads(pid);
            let fds = open_fds(pid);
            eprintln!(
                "{CONNECTIONS} connections open after {:?}: rss {} MiB, threads {threads}, fds {fds}",
                started.elapsed(),
                rss / MIB
            );
            assert!(
                fds >= CONNECTIONS,
                "{fds} descriptors in the server with {CONNECTIONS} clients"
            );
            assert!(
                threads <= threads0 + 8,
                "threads grew from {threads0} to {threads} with {CONNECTIONS} connections: \
                 expected a pool that does not grow with connections"
            );
            break rss;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "connections never all opened");
    };
    assert_serving(s, &format!("{CONNECTIONS} open connections")).await;
    release_tx.send(true).unwrap();
    while let Some(r) = tasks.join_next().await {
        r.expect("a connection task panicked");
    }
    // The server notices the closed sockets within moments.
    wait_until("the server to close the clients' sockets", Duration::from_secs(10), || {
        let fds = open_fds(pid);
        std::future::ready(if fds < 200 { Ok(()) } else { Err(format!("{fds} descriptors open")) })
    })
    .await;
    let (_, threads) = rss_and_threads(pid);
    assert!(threads <= threads0 + 8, "threads {threads} after the clients left (was {threads0})");
    assert_serving(s, "the connections closed").await;
    rss_open
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// Thousands of clients at once, in waves. Memory is bounded when a wave costs no more than the
/// one before: state kept per closed connection would add up wave after wave. (RSS does not go
/// back to its value before the first wave: the allocator keeps the freed pages for reuse.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_connections_at_once() {
    // This process holds one end of every connection and the server the other.
    ensure_fd_limit(2 * CONNECTIONS as u64 + 1024);
    let mut s = server_of!(Kind::MemEtcd);
    let pid = server_pid(s.addr());
    assert_serving(&mut s, "startup").await;
    let (rss0, threads0) = rss_and_threads(pid);
    let tasks0 = idle_tasks(s.addr()).await;
    let waves = (fuzz_iters() / 100).max(2);
    let mut after = Vec::new();
    for wave in 0..waves {
        let open = connection_wave(&mut s, pid, threads0).await;
        assert_tasks_back(s.addr(), tasks0, &format!("wave {wave} of {CONNECTIONS} connections"))
            .await;
        let rss = settled_rss(pid, rss0 + 64 * MIB).await;
        eprintln!(
            "wave: rss {} MiB open, {} MiB after (was {} MiB)",
            open / MIB,
            rss / MIB,
            rss0 / MIB
        );
        after.push(rss);
    }
    let (first, last) = (after[0], after[after.len() - 1]);
    assert!(
        last <= first + 32 * MIB,
        "RSS after each wave of {CONNECTIONS} connections (MiB): {:?}; expected later waves to \
         reuse the first one's memory (at most 32 MiB more)",
        after.iter().map(|r| r / MIB).collect::<Vec<_>>()
    );
}

const SLOW_WATCHERS: usize = 40;
const SLOW_WRITES: usize = 2000;
const SLOW_VALUE: usize = 4096;

/// Watchers that never read while writes go on, then vanish. What they are not reading adds up
/// to SLOW_WATCHERS x SLOW_WRITES x SLOW_VALUE (320 MiB); a server that buffered it per watcher
/// would show it in its RSS. etcd parks slow watchers and replays from the store instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_readers_then_vanish() {
    let mut s = server_of!(Kind::MemEtcd);
    let pid = server_pid(s.addr());
    let mut raw = s.raw_clients().await;
    assert_serving(&mut s, "startup").await;
    let (rss0, threads0) = rss_and_threads(pid);
    let tasks0 = idle_tasks(s.addr()).await;
    let mut slow = Vec::new();
    for i in 0..SLOW_WATCHERS {
        // Each on its own connection: HTTP/2 flow control stops the server per connection.
        let ch = s.channel().await.expect("connect a watcher");
        let mut w = pb::watch_client::WatchClient::new(ch.clone());
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tx.send(pb::WatchRequest { request_union: Some(create("slow/", "slow0", 0)) })
            .await
            .unwrap();
        let mut stream = w
            .watch(ReceiverStream::new(rx))
            .await
            .unwrap_or_else(|e| panic!("watch {i}: {e:?}"))
            .into_inner();
        let created = stream.message().await.expect("created reply").expect("a reply");
        assert!(created.created, "watch {i}: expected a created reply, got {created:?}");
        // Kept, never read again.
        slow.push((ch, tx, stream));
    }
    wait_metric(
        s.addr(),
        "etcd_debugging_mvcc_watch_stream_total",
        SLOW_WATCHERS as f64,
        Duration::from_secs(5),
    )
    .await;
    let started = Instant::now();
    let mut peak = 0;
    for i in 0..SLOW_WRITES {
        let req = put_req(format!("slow/{}", i % 50), SLOW_VALUE);
        tokio::time::timeout(Duration::from_secs(10), raw.kv.put(req))
            .await
            .unwrap_or_else(|_| panic!("put {i} took over 10 s with slow watchers"))
            .unwrap_or_else(|e| panic!("put {i}: {e:?}"));
        if i % 200 == 0 {
            peak = peak.max(rss_and_threads(pid).0);
        }
    }
    let (rss_full, threads_full) = rss_and_threads(pid);
    peak = peak.max(rss_full);
    let stored = (SLOW_WRITES * SLOW_VALUE) as u64;
    eprintln!(
        "{SLOW_WRITES} puts with {SLOW_WATCHERS} slow watchers in {:?}: peak rss {} MiB (was {} \
         MiB, {} MiB stored), threads {threads_full}",
        started.elapsed(),
        peak / MIB,
        rss0 / MIB,
        stored / MIB
    );
    let bound = rss0 + stored * 3 + 128 * MIB;
    assert!(
        peak <= bound,
        "RSS peaked at {} MiB with slow watchers: expected at most {} MiB (no per-watcher \
         buffering of what they do not read)",
        peak / MIB,
        bound / MIB
    );
    assert!(threads_full <= threads0 + 8, "threads {threads_full} (was {threads0})");
    assert_serving(&mut s, "writes with slow watchers").await;
    // They vanish without cancelling.
    drop(slow);
    wait_metric(s.addr(), "etcd_debugging_mvcc_watch_stream_total", 0.0, Duration::from_secs(10))
        .await;
    wait_metric(s.addr(), "etcd_debugging_mvcc_watcher_total", 0.0, Duration::from_secs(10)).await;
    assert_tasks_back(s.addr(), tasks0, &format!("{SLOW_WATCHERS} slow watchers vanished")).await;
    let bound = rss0 + stored * 2 + 64 * MIB;
    let rss = settled_rss(pid, bound).await;
    assert!(
        rss <= bound,
        "RSS {} MiB after the slow watchers left, expected at most {} MiB",
        rss / MIB,
        bound / MIB
    );
    assert_serving(&mut s, "the slow watchers vanished").await;
}

/// Clients that leave in the middle: watchers dropped while events stream to them, unary calls
/// whose body never comes, and raw TCP clients that send half a preface or garbage and close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_vanish_mid_stream_and_mid_request() {
    use tokio::io::AsyncWriteExt;
    let mut s = server_of!(Kind::MemEtcd);
    let pid = server_pid(s.addr());
    assert_serving(&mut s, "startup").await;
    let (rss0, threads0) = rss_and_threads(pid);
    let tasks0 = idle_tasks(s.addr()).await;
    let rounds = (fuzz_iters() / 40).max(3);
    for round in 0..rounds {
        // Watchers reading while a writer goes on; half of them vanish mid-stream.
        let mut raw = s.raw_clients().await;
        let mut readers = tokio::task::JoinSet::new();
        for _ in 0..20 {
            let ch = s.channel().await.expect("connect");
            readers.spawn(async move {
                let mut w = pb::watch_client::WatchClient::new(ch);
                let (tx, rx) = tokio::sync::mpsc::channel(1);
                tx.send(pb::WatchRequest { request_union: Some(create("v/", "v0", 0)) })
                    .await
                    .unwrap();
                let mut st = w.watch(ReceiverStream::new(rx)).await.unwrap().into_inner();
                while let Ok(Some(_)) = st.message().await {}
                drop(tx);
            });
        }
        // Unary calls that send headers and then no message.
        let mut hung = tokio::task::JoinSet::new();
        for path in
            ["/etcdserverpb.KV/Put", "/etcdserverpb.KV/Txn", "/etcdserverpb.Lease/LeaseGrant"]
        {
            for _ in 0..20 {
                let ch = s.channel().await.expect("connect");
                hung.spawn(async move {
                    let mut g = tonic::client::Grpc::new(ch);
                    g.ready().await.unwrap();
                    let never = tokio_stream::pending::<Vec<u8>>();
                    let _ = g
                        .streaming(
                            tonic::Request::new(never),
                            PathAndQuery::from_static(path),
                            RawBytes,
                        )
                        .await;
                });
            }
        }
        // Raw TCP: half a preface, a preface and garbage, a silent connection.
        let mut sockets = Vec::new();
        for i in 0..60 {
            let mut c = tokio::net::TcpStream::connect(s.addr()).await.expect("tcp connect");
            let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
            let _ = match i % 3 {
                0 => c.write_all(&preface[..10]).await,
                1 => c.write_all(&[&preface[..], &[0xff; 64]].concat()).await,
                _ => Ok(()),
            };
            sockets.push(c);
        }
        for i in 0..200 {
            raw.kv
                .put(put_req(format!("v/{}", i % 10), 512))
                .await
                .expect("put while clients vanish");
        }
        readers.abort_all();
        hung.abort_all();
        drop(sockets);
        while readers.join_next().await.is_some() {}
        while hung.join_next().await.is_some() {}
        assert_serving(&mut s, &format!("round {round} of vanishing clients")).await;
        drop(raw);
        assert_tasks_back(s.addr(), tasks0, &format!("round {round} of vanishing clients")).await;
    }
    wait_metric(s.addr(), "etcd_debugging_mvcc_watch_stream_total", 0.0, Duration::from_secs(10))
        .await;
    let rss = settled_rss(pid, rss0 + 64 * MIB).await;
    let (_, threads) = rss_and_threads(pid);
    eprintln!(
        "after {rounds} rounds: rss {} MiB (was {}), threads {threads} (was {threads0})",
        rss / MIB,
        rss0 / MIB
    );
    assert!(
        rss <= rss0 + 64 * MIB,
        "RSS {} MiB, expected at most 64 MiB over {} MiB",
        rss / MIB,
        rss0 / MIB
    );
    assert!(threads <= threads0 + 8, "threads {threads} (was {threads0})");
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0);
    assert!(fds < 200, "{fds} descriptors still open in the server after every client left");
}

// ---------------------------------------------------------------------------------------------
// Streaming RPCs: LeaseKeepAlive (bidi), Maintenance.Snapshot (server stream), Watch (bidi)

const KEEPALIVE: &str = "/etcdserverpb.Lease/LeaseKeepAlive";
const SNAPSHOT: &str = "/etcdserverpb.Maintenance/Snapshot";
const WATCH: &str = "/etcdserverpb.Watch/Watch";

/// How a streaming call went: the replies, undecoded, and how it ended: "OK", a status code,
/// or "no answer" / "no end" when `window` ran out first.
#[derive(Debug)]
struct StreamOutcome {
    replies: Vec<Vec<u8>>,
    end: String,
    /// The status message, for failure messages only: grpc-go and tonic word theirs apart.
    detail: String,
}

/// A streaming call that sends `msgs` (each any bytes at all), half-closes, and reads until the
/// stream ends or `window` passes.
async fn stream_raw(
    ch: Channel,
    path: &'static str,
    msgs: Vec<Vec<u8>>,
    window: Duration,
) -> StreamOutcome {
    let mut g = tonic::client::Grpc::new(ch)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    let deadline = tokio::time::Instant::now() + window;
    let mut replies = Vec::new();
    let call = tokio::time::timeout_at(deadline, async {
        g.ready().await.map_err(|e| tonic::Status::unavailable(format!("not ready: {e}")))?;
        let msgs = tokio_stream::iter(msgs);
        g.streaming(tonic::Request::new(msgs), PathAndQuery::from_static(path), RawBytes).await
    })
    .await;
    let (end, detail) = match call {
        Err(_) => ("no answer".to_string(), String::new()),
        Ok(Err(st)) => (format!("{:?}", st.code()), st.message().to_string()),
        Ok(Ok(resp)) => {
            let mut stream = resp.into_inner();
            loop {
                match tokio::time::timeout_at(deadline, stream.message()).await {
                    Err(_) => break ("no end".to_string(), String::new()),
                    Ok(Ok(Some(m))) => replies.push(m),
                    Ok(Ok(None)) => break ("OK".to_string(), String::new()),
                    Ok(Err(st)) => break (format!("{:?}", st.code()), st.message().to_string()),
                }
            }
        }
    };
    StreamOutcome { replies, end, detail }
}

fn keepalive(id: i64) -> Vec<u8> {
    pb::LeaseKeepAliveRequest { id }.encode_to_vec()
}

/// Keep-alive replies as (id, ttl).
fn keepalive_replies(o: &StreamOutcome) -> Vec<(i64, i64)> {
    o.replies
        .iter()
        .map(|b| {
            let r = pb::LeaseKeepAliveResponse::decode(&b[..]).unwrap_or_else(|e| {
                panic!("a keep-alive reply that does not decode ({e}): {b:02x?}")
            });
            (r.id, r.ttl)
        })
        .collect()
}

/// A LeaseKeepAliveRequest carrying an unknown field of `len` bytes (so it decodes, if it gets
/// past the receive limit, as a keep-alive for lease 0).
fn padded_keepalive(len: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(len + 8);
    prost::encoding::bytes::encode(15, &vec![b'p'; len], &mut b);
    b
}

/// Lease ids no lease has: 0 (never granted), negative, and the extremes.
const BOGUS_LEASES: [i64; 5] = [0, -1, i64::MIN, i64::MAX, 0x7a7a];

/// Seeded keep-alive streams of valid requests for a live lease and for bogus ids, mixed with
/// hostile bodies; each stream must answer every request that decodes, in order, with the
/// lease's TTL or 0, and fail with INTERNAL at the first that does not. Then a stream hammered
/// with thousands of requests, streams whose clients stop reading and vanish, and clients that
/// vanish after one reply. The server's task count must come back afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_keepalive_stream_fuzz() {
    const TTL: i64 = 600;
    let mut s = server_of!(Kind::MemEtcd);
    let raw = s.raw_clients().await;
    let mut lease = pb::lease_client::LeaseClient::new(raw.channel.clone());
    let live = lease
        .lease_grant(pb::LeaseGrantRequest { ttl: TTL, id: 0 })
        .await
        .expect("grant")
        .into_inner()
        .id;
    let tasks0 = idle_tasks(s.addr()).await;
    let ch = s.channel().await.expect("connect");
    let iters = fuzz_iters();
    let seed = 0x9_2000;
    let mut rng = SmallRng::seed_from_u64(seed);
    let sample = keepalive(live);
    let started = Instant::now();
    let mut failed_streams = 0;
    for i in 0..iters {
        let msgs: Vec<Vec<u8>> = (0..rng.random_range(1..5))
            .map(|_| match rng.random_range(0..4) {
                0 => keepalive(live),
                1 => keepalive(BOGUS_LEASES[rng.random_range(0..BOGUS_LEASES.len())]),
                2 => keepalive(rng.random()),
                _ => hostile_body(&mut rng, &sample),
            })
            .collect();
        // What etcd does: answer each request in turn (TTL 0 for a lease it does not have),
        // and fail the stream at the first request that does not decode.
        let mut want = Vec::new();
        let mut want_end = "OK";
        for m in &msgs {
            match pb::LeaseKeepAliveRequest::decode(&m[..]) {
                Ok(r) => want.push((r.id, if r.id == live { TTL } else { 0 })),
                Err(_) => {
                    want_end = "Internal";
                    break;
                }
            }
        }
        let out = stream_raw(ch.clone(), KEEPALIVE, msgs.clone(), Duration::from_secs(10)).await;
        failed_streams += usize::from(want_end != "OK");
        assert_eq!(
            (keepalive_replies(&out), out.end.as_str()),
            (want, want_end),
            "keep-alive stream (seed {seed}, case {i}) of {msgs:02x?}: {}",
            out.detail
        );
    }
    assert!(failed_streams > 0, "no hostile body failed a stream: the fuzzing tested nothing");
    eprintln!("{iters} hostile keep-alive streams in {:?}", started.elapsed());
    assert_serving(&mut s, "hostile keep-alive streams").await;

    // One stream, thousands of requests, live and bogus alternating.
    let hammer = (iters * 25).max(1000);
    let started = Instant::now();
    let msgs: Vec<Vec<u8>> =
        (0..hammer).map(|i| keepalive(if i % 2 == 0 { live } else { -1 })).collect();
    let out = stream_raw(ch.clone(), KEEPALIVE, msgs, Duration::from_secs(60)).await;
    let got = keepalive_replies(&out);
    let want: Vec<(i64, i64)> =
        (0..hammer).map(|i| if i % 2 == 0 { (live, TTL) } else { (-1, 0) }).collect();
    assert!(
        out.end == "OK" && got == want,
        "a stream of {hammer} keep-alives: {} replies (expected every one, in order), ended \
         {} {}",
        got.len(),
        out.end,
        out.detail
    );
    eprintln!("{hammer} keep-alives on one stream in {:?}", started.elapsed());

    // Clients that send and never read, each on its own connection, then vanish: the server's
    // stream tasks wait on HTTP/2 flow control until the connection goes.
    let mut stalled = Vec::new();
    for _ in 0..20 {
        let ch = s.channel().await.expect("connect");
        let mut g = tonic::client::Grpc::new(ch.clone());
        g.ready().await.expect("ready");
        let flood = tokio_stream::iter((0..20_000).map(move |_| keepalive(live)));
        let call =
            g.streaming(tonic::Request::new(flood), PathAndQuery::from_static(KEEPALIVE), RawBytes);
        let resp = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("keep-alive stream within 10 s")
            .expect("keep-alive stream");
        stalled.push((ch, resp));
    }
    // Clients that read one reply and vanish with the stream open.
    let mut vanished = Vec::new();
    for _ in 0..20 {
        let ch = s.channel().await.expect("connect");
        let mut g = tonic::client::Grpc::new(ch.clone());
        g.ready().await.expect("ready");
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tx.send(keepalive(live)).await.unwrap();
        let mut stream = g
            .streaming(
                tonic::Request::new(ReceiverStream::new(rx)),
                PathAndQuery::from_static(KEEPALIVE),
                RawBytes,
            )
            .await
            .expect("keep-alive stream")
            .into_inner();
        stream.message().await.expect("a reply").expect("a reply");
        vanished.push((ch, tx, stream));
    }
    assert_serving(&mut s, "stalled keep-alive streams").await;
    drop(stalled);
    drop(vanished);
    drop(ch);
    drop(lease);
    drop(raw);
    assert_tasks_back(s.addr(), tasks0, "keep-alive streams that stalled and vanished").await;
    assert_serving(&mut s, "keep-alive streams that stalled and vanished").await;
}

/// A raw gRPC call over its own HTTP/2 connection, its request body exactly `body` (gRPC's
/// 5-byte message prefixes included, or not): the status code (from the headers or the
/// trailers; "reset ..." if the stream was reset) and the reply messages.
async fn h2_call(addr: std::net::SocketAddr, path: &str, body: Vec<u8>) -> (String, usize) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (client, conn) = h2::client::handshake(tcp).await.expect("HTTP/2 handshake");
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let out = tokio::time::timeout(Duration::from_secs(20), async {
        let mut client = client.ready().await.expect("HTTP/2 ready");
        let req = http::Request::builder()
            .method("POST")
            .uri(format!("http://{addr}{path}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (resp, mut send) = client.send_request(req, false).expect("send the headers");
        // The server may answer (and reset the stream) before taking it all.
        let _ = send.send_data(bytes::Bytes::from(body), true);
        let code = |v: &http::HeaderValue| {
            let n: i32 = v.to_str().ok().and_then(|s| s.parse().ok()).unwrap_or(-1);
            format!("{:?}", Code::from_i32(n))
        };
        let resp = match resp.await {
            Ok(r) => r,
            Err(e) => return (format!("reset: {e}"), 0),
        };
        let (parts, mut body) = resp.into_parts();
        if let Some(c) = parts.headers.get("grpc-status") {
            return (code(c), 0);
        }
        let mut data = Vec::new();
        while let Some(chunk) = body.data().await {
            match chunk {
                Ok(c) => {
                    let _ = body.flow_control().release_capacity(c.len());
                    data.extend_from_slice(&c);
                }
                Err(e) => return (format!("reset: {e}"), grpc_messages(&data)),
            }
        }
        let end = match body.trailers().await {
            Ok(Some(t)) => t.get("grpc-status").map_or("no grpc-status".into(), code),
            Ok(None) => "no trailers".into(),
            Err(e) => format!("reset: {e}"),
        };
        (end, grpc_messages(&data))
    })
    .await
    .unwrap_or_else(|_| ("no end within 20 s".into(), 0));
    driver.abort();
    out
}

/// How many whole gRPC messages `data` holds.
fn grpc_messages(mut data: &[u8]) -> usize {
    let mut n = 0;
    while data.len() >= 5 {
        let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
        if data.len() < 5 + len {
            break;
        }
        data = &data[5 + len..];
        n += 1;
    }
    n
}

/// `msg` as one gRPC message: flag 0, 4-byte length, the bytes.
fn grpc_frame(msg: &[u8]) -> Vec<u8> {
    let mut f = vec![0];
    f.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    f.extend_from_slice(msg);
    f
}

/// Request bodies broken at the gRPC framing level, for any method. Each names a message that
/// is valid for every method here (an empty one, or a keep-alive for lease 0).
fn broken_grpc_bodies() -> Vec<(&'static str, Vec<u8>)> {
    let valid = grpc_frame(&[]);
    vec![
        ("length prefix past the end", [&[0, 0, 0, 0, 100][..], &[0x08; 10]].concat()),
        ("length prefix of 4 GiB", [&[0, 0xff, 0xff, 0xff, 0xff][..], &[0x08; 10]].concat()),
        ("half a prefix", vec![0, 0, 0]),
        ("compressed flag without grpc-encoding", [&[1, 0, 0, 0, 2][..], &[0x08, 0]].concat()),
        ("flag 0x80", [&[0x80, 0, 0, 0, 2][..], &[0x08, 0]].concat()),
        ("a valid message then half a prefix", [&valid[..], &[0, 0]].concat()),
        ("a valid message then a prefix past the end", [&valid[..], &[0, 0, 0, 0, 9, 1]].concat()),
        ("over the receive limit", grpc_frame(&padded_keepalive(MAX_REQUEST_BYTES + (600 << 10)))),
    ]
}

/// The framing cases where mem_etcd still answers differently from etcd (see
/// `broken_grpc_framing_edge_cases_match_etcd`).
fn framing_difference(path: &str, what: &str) -> bool {
    let unary_request = path == SNAPSHOT || path.starts_with("/etcdserverpb.KV/");
    what.contains("half a prefix")
        || (unary_request && what.starts_with("a valid message then"))
        || (path.starts_with("/etcdserverpb.KV/") && what == "length prefix past the end")
}

/// Sends each broken body on each method to both servers; returns the differences in (status
/// code, replies or not) (snapshots differ in size, so only whether there were replies counts).
async fn framing_differences(
    etcd: &Server,
    mem: &Server,
    which: impl Fn(&str, &str) -> bool,
) -> Vec<String> {
    let mut differences = Vec::new();
    let mut cases = 0;
    for path in [KEEPALIVE, WATCH, SNAPSHOT, "/etcdserverpb.KV/Range"] {
        for (what, body) in broken_grpc_bodies() {
            if !which(path, what) {
                continue;
            }
            cases += 1;
            let (e, m) = tokio::join!(
                h2_call(etcd.addr(), path, body.clone()),
                h2_call(mem.addr(), path, body)
            );
            let key = |(code, n): &(String, usize)| (code.clone(), *n > 0);
            if key(&e) != key(&m) {
                differences.push(format!("{path} {what}: etcd {e:?}, mem_etcd {m:?}"));
            }
        }
    }
    assert!(cases > 0, "no case selected");
    differences
}

/// Streaming methods and one unary one for reference, with bodies broken at the gRPC framing
/// level (sent with the stream's end), on etcd and mem_etcd: the same status code, and replies
/// or none alike. (Regression: a keep-alive stream ended OK on a request that did not decode
/// or was over the receive limit, and accepted requests up to 4 MiB where etcd's limit is
/// 2 MiB; watch and keep-alive streams failed OUT_OF_RANGE, not RESOURCE_EXHAUSTED, on a
/// request over the limit.)
#[tokio::test]
async fn broken_grpc_framing_on_streams_matches_etcd() {
    let Some(etcd) = Server::start(Kind::Etcd, &[]).await else { return };
    let mut mem = server_of!(Kind::MemEtcd);
    let tasks0 = idle_tasks(mem.addr()).await;
    let differences = framing_differences(&etcd, &mem, |p, w| !framing_difference(p, w)).await;
    assert_serving(&mut mem, "broken gRPC framing").await;
    assert_tasks_back(mem.addr(), tasks0, "broken gRPC framing").await;
    assert!(
        differences.is_empty(),
        "expected etcd's (status code, replies or not):\n{}",
        differences.join("\n")
    );
}

/// Three framing corners where tonic's transport differs from grpc-go's, not fixable in
/// mem_etcd without re-framing every request body: (1) a request stream that ends inside a
/// 5-byte message prefix is a clean end of requests to grpc-go (a watch stays open, a
/// keep-alive stream ends OK), tonic fails it INTERNAL "Unexpected EOF decoding stream";
/// (2) bytes after the one request of a unary or server-streaming call are ignored by grpc-go,
/// tonic reads on and fails the call INTERNAL; (3) a unary request cut short is UNKNOWN from
/// grpc-go, INTERNAL from tonic. No etcd client sends such bodies.
#[tokio::test]
#[ignore = "BUG: gRPC framing corners (a request stream ending inside a message prefix, bytes \
            after a unary request, a truncated unary request) get tonic's INTERNAL where etcd \
            ends cleanly, ignores them or answers UNKNOWN"]
async fn broken_grpc_framing_edge_cases_match_etcd() {
    let Some(etcd) = Server::start(Kind::Etcd, &[]).await else { return };
    let mut mem = server_of!(Kind::MemEtcd);
    let differences = framing_differences(&etcd, &mem, framing_difference).await;
    assert_serving(&mut mem, "broken gRPC framing").await;
    assert!(
        differences.is_empty(),
        "expected etcd's (status code, replies or not):\n{}",
        differences.join("\n")
    );
}

/// Hostile keep-alive and Snapshot streams whose outcome is deterministic, on etcd and
/// mem_etcd: keep-alive replies (id, TTL) and how each stream ends must match; for Snapshot,
/// whether it sent a snapshot and how it ended.
#[tokio::test]
async fn hostile_keepalive_and_snapshot_streams_match_etcd() {
    const LIVE: i64 = 0x5eed;
    let Some(etcd) = Server::start(Kind::Etcd, &[]).await else { return };
    let mut mem = server_of!(Kind::MemEtcd);
    let garbage = vec![0x0a, 0xff, 0xff, 0xff, 0x0f];
    let keepalive_cases: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("bogus lease ids", BOGUS_LEASES.iter().map(|id| keepalive(*id)).collect()),
        ("the live lease", vec![keepalive(LIVE)]),
        ("an empty message", vec![vec![]]),
        ("an unknown field", vec![vec![0x10, 0x05], keepalive(LIVE)]),
        ("garbage after a valid request", vec![keepalive(LIVE), garbage.clone()]),
        ("id with the wrong wire type", vec![keepalive(1), vec![0x0a, 0x01, 0x00]]),
        ("an overlong varint id", vec![[&[0x08][..], &[0xff; 11], &[0x01]].concat()]),
        ("no request at all", vec![]),
        (
            "a request over the receive limit",
            vec![keepalive(LIVE), padded_keepalive(MAX_REQUEST_BYTES + (600 << 10))],
        ),
        ("a request just under it", vec![padded_keepalive(MAX_REQUEST_BYTES)]),
        ("5000 requests", (0..5000).map(|_| keepalive(LIVE)).collect()),
    ];
    let snapshot_cases: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("an empty request", vec![vec![]]),
        ("an unknown field", vec![vec![0x08, 0x01]]),
        ("garbage", vec![garbage.clone()]),
        ("an overlong varint", vec![[&[0x08][..], &[0xff; 11], &[0x01]].concat()]),
    ];
    let mut results: Vec<Vec<String>> = Vec::new();
    for s in [&etcd, &mem] {
        let ch = s.channel().await.expect("connect");
        let mut lease = pb::lease_client::LeaseClient::new(ch.clone());
        lease.lease_grant(pb::LeaseGrantRequest { ttl: 600, id: LIVE }).await.expect("grant");
        let mut out = Vec::new();
        for (what, msgs) in &keepalive_cases {
            let o = stream_raw(ch.clone(), KEEPALIVE, msgs.clone(), Duration::from_secs(20)).await;
            let replies = keepalive_replies(&o);
            // Thousands of replies are summed up.
            let replies = if replies.len() > 10 {
                let mut distinct = replies.clone();
                distinct.dedup();
                format!("{} replies: {distinct:?}", replies.len())
            } else {
                format!("{replies:?}")
            };
            out.push(format!("keep-alive, {what}: {replies}, ended {}", o.end));
        }
        for (what, msgs) in &snapshot_cases {
            let o = stream_raw(ch.clone(), SNAPSHOT, msgs.clone(), Duration::from_secs(20)).await;
            out.push(format!(
                "snapshot, {what}: {}, ended {}",
                if o.replies.is_empty() { "nothing sent" } else { "a snapshot" },
                o.end
            ));
        }
        results.push(out);
    }
    assert_serving(&mut mem, "hostile keep-alive and snapshot streams").await;
    let differences: Vec<String> = results[0]
        .iter()
        .zip(&results[1])
        .filter(|(e, m)| e != m)
        .map(|(e, m)| format!("  etcd:     {e}\n  mem_etcd: {m}"))
        .collect();
    assert!(differences.is_empty(), "expected etcd's outcomes:\n{}", differences.join("\n"));
}

/// A random but well-formed watch request: creates with odd keys, ranges, revisions, filters
/// and ids; cancels of ids that may not exist; progress requests.
fn random_watch_request(rng: &mut SmallRng) -> pb::WatchRequest {
    use pb::watch_request::RequestUnion as U;
    let pick = |choices: &[&[u8]], rng: &mut SmallRng| -> bytes::Bytes {
        match rng.random_range(0..choices.len() + 1) {
            i if i < choices.len() => bytes::Bytes::copy_from_slice(choices[i]),
            _ => (0..rng.random_range(0..8)).map(|_| rng.random::<u8>()).collect(),
        }
    };
    let union = match rng.random_range(0..5) {
        0..=2 => U::CreateRequest(pb::WatchCreateRequest {
            key: pick(&[b"", b"a", b"w/", b"\0"], rng),
            range_end: pick(&[b"", b"\0", b"w0", b"a"], rng),
            start_revision: [0, 1, -1, i64::MAX, i64::MIN, rng.random_range(0..50)]
                [rng.random_range(0..6)],
            progress_notify: rng.random(),
            filters: (0..rng.random_range(0..3)).map(|_| rng.random_range(-2..4)).collect(),
            prev_kv: rng.random(),
            watch_id: [0, -1, 1, 7, rng.random()][rng.random_range(0..5)],
            fragment: rng.random(),
        }),
        3 => U::CancelRequest(pb::WatchCancelRequest {
            watch_id: [0, -1, 1, 7, rng.random()][rng.random_range(0..5)],
        }),
        _ => U::ProgressRequest(pb::WatchProgressRequest {}),
    };
    pb::WatchRequest { request_union: Some(union) }
}

/// Seeded watch streams, all open at once while a writer goes on: random well-formed requests
/// mixed with hostile bodies. A stream whose requests all decode stays open (watch streams do
/// not end on a half-close); one with a body that does not decode fails with INTERNAL. Then
/// every stream is gone from the hub and the task count is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_stream_fuzz() {
    let mut s = server_of!(Kind::MemEtcd);
    let mut raw = s.raw_clients().await;
    let tasks0 = idle_tasks(s.addr()).await;
    let iters = fuzz_iters();
    let seed = 0x9_3000;
    let mut rng = SmallRng::seed_from_u64(seed);
    let sample = pb::WatchRequest { request_union: Some(create("w/", "w0", 1)) }.encode_to_vec();
    let ch = s.channel().await.expect("connect");
    let mut streams = tokio::task::JoinSet::new();
    for i in 0..iters {
        let msgs: Vec<Vec<u8>> = (0..rng.random_range(1..6))
            .map(|_| {
                if rng.random_range(0..3) == 0 {
                    hostile_body(&mut rng, &sample)
                } else {
                    random_watch_request(&mut rng).encode_to_vec()
                }
            })
            .collect();
        let decodes = msgs.iter().all(|m| pb::WatchRequest::decode(&m[..]).is_ok());
        let ch = ch.clone();
        streams.spawn(async move {
            let out = stream_raw(ch, WATCH, msgs.clone(), Duration::from_secs(3)).await;
            (i, msgs, decodes, out)
        });
    }
    for i in 0..100 {
        raw.kv.put(put_req(format!("w/{}", i % 7), 64)).await.expect("put during the fuzzing");
    }
    let mut tally = std::collections::BTreeMap::<String, usize>::new();
    while let Some(r) = streams.join_next().await {
        let (i, msgs, decodes, out) = r.expect("a watch stream task panicked");
        let want = if decodes { "no end" } else { "Internal" };
        assert_eq!(
            out.end,
            want,
            "watch stream (seed {seed}, case {i}) of {msgs:02x?}: {} replies, {}",
            out.replies.len(),
            out.detail
        );
        *tally.entry(out.end).or_default() += 1;
    }
    eprintln!("{iters} hostile watch streams: {tally:?}");
    assert!(tally.contains_key("Internal"), "no stream failed: the fuzzing tested nothing");
    assert_serving(&mut s, "hostile watch streams").await;
    drop(ch);
    wait_metric(s.addr(), "etcd_debugging_mvcc_watch_stream_total", 0.0, Duration::from_secs(10))
        .await;
    wait_metric(s.addr(), "etcd_debugging_mvcc_watcher_total", 0.0, Duration::from_secs(10)).await;
    assert_tasks_back(s.addr(), tasks0, "hostile watch streams").await;
}

/// Snapshots whose clients read two blobs and leave: by cancelling the stream (the connection
/// stays) or by closing the connection. Each sender must notice and stop, releasing its hold on
/// compaction and its tasks; a whole snapshot still works afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_abandoned_mid_stream() {
    const ROUNDS: usize = 6;
    let mut s = server_of!(Kind::MemEtcd);
    let mut raw = s.raw_clients().await;
    // 4 MiB: far more than the sender queues (16 blobs of 32 KiB) and HTTP/2 windows hold.
    for i in 0..64 {
        raw.kv.put(put_req(format!("snap/{i}"), 64 << 10)).await.expect("put");
    }
    let tasks0 = idle_tasks(s.addr()).await;
    let kept = s.channel().await.expect("connect");
    for round in 0..ROUNDS {
        let ch = if round % 2 == 0 { kept.clone() } else { s.channel().await.expect("connect") };
        let mut m = pb::maintenance_client::MaintenanceClient::new(ch);
        let mut st = m.snapshot(pb::SnapshotRequest {}).await.expect("snapshot").into_inner();
        for _ in 0..2 {
            st.message().await.expect("a blob").expect("a blob");
        }
        drop(st);
    }
    wait_until("every abandoned snapshot to be noticed", Duration::from_secs(10), || {
        let gone = s.grep_log("the client went away").len();
        std::future::ready(if gone == ROUNDS { Ok(()) } else { Err(format!("{gone} of {ROUNDS}")) })
    })
    .await;
    // Nothing holds off compaction any more.
    let rev = raw.kv.range(range("a", "")).await.expect("range").into_inner().header.unwrap();
    tokio::time::timeout(
        Duration::from_secs(10),
        raw.kv.compact(pb::CompactionRequest { revision: rev.revision, physical: true }),
    )
    .await
    .expect("a compaction within 10 s of the snapshots' clients leaving")
    .expect("compact");
    let mut st = raw.maint.snapshot(pb::SnapshotRequest {}).await.expect("snapshot").into_inner();
    let (mut bytes, mut last) = (0, None);
    while let Some(m) = st.message().await.expect("a whole snapshot") {
        bytes += m.blob.len();
        last = Some(m.remaining_bytes);
    }
    assert!(
        bytes > 4 << 20 && last == Some(0),
        "a whole snapshot after the abandoned ones: {bytes} bytes, last remaining {last:?}"
    );
    drop(kept);
    assert_tasks_back(s.addr(), tasks0, "abandoned snapshots").await;
    assert_serving(&mut s, "abandoned snapshots").await;
}

// ---------------------------------------------------------------------------------------------
// HTTP/2 frames

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Frame types and flags (RFC 9113 section 6).
const F_DATA: u8 = 0;
const F_HEADERS: u8 = 1;
const F_PRIORITY: u8 = 2;
const F_RST_STREAM: u8 = 3;
const F_SETTINGS: u8 = 4;
const F_PING: u8 = 6;
const F_GOAWAY: u8 = 7;
const F_WINDOW_UPDATE: u8 = 8;
const F_CONTINUATION: u8 = 9;
const END_HEADERS: u8 = 0x4;

/// One frame: 24-bit length, type, flags, 31-bit stream id, payload.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    h2_frame_claiming(payload.len(), kind, flags, stream, payload)
}

/// A frame whose length field says `len`, whatever the payload.
fn h2_frame_claiming(len: usize, kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(9 + payload.len());
    f.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn h2_settings(pairs: &[(u16, u32)]) -> Vec<u8> {
    let payload: Vec<u8> = pairs
        .iter()
        .flat_map(|(id, v)| [&id.to_be_bytes()[..], &v.to_be_bytes()].concat())
        .collect();
    h2_frame(F_SETTINGS, 0, 0, &payload)
}

/// The preface and an empty SETTINGS frame: what every client sends first.
fn h2_hello() -> Vec<u8> {
    [PREFACE, &h2_settings(&[])].concat()
}

/// An HPACK block for a gRPC call on `path`, literal fields only (no dynamic table, no
/// Huffman), so any number of streams can open with it.
fn grpc_header_block(path: &str) -> Vec<u8> {
    let mut b = vec![0x83, 0x86]; // :method POST, :scheme http (static table 3 and 6)
    let mut literal = |name_index: &[u8], value: &str| {
        b.extend_from_slice(name_index);
        b.push(value.len() as u8);
        b.extend_from_slice(value.as_bytes());
    };
    literal(&[0x04], path); // :path
    literal(&[0x01], "x"); // :authority
    literal(&[0x0f, 0x10], "application/grpc"); // content-type (static 31)
    b.extend_from_slice(&[0x00, 0x02]);
    b.extend_from_slice(b"te");
    b.push(8);
    b.extend_from_slice(b"trailers");
    b
}

/// How a raw HTTP/2 connection ended: the GOAWAY error code the server sent, if any, and
/// whether the server closed it (within `wait`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct H2End {
    goaway: Option<u32>,
    closed: bool,
}

/// Sends `bytes` on a new connection, half-closes it if `half_close`, and reads what comes back
/// until the server closes it or `wait` passes.
async fn h2_raw(
    addr: std::net::SocketAddr,
    bytes: Vec<u8>,
    half_close: bool,
    wait: Duration,
) -> H2End {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let c = tokio::net::TcpStream::connect(addr).await.expect("tcp connect");
    let (mut rd, mut wr) = c.into_split();
    // Written while reading, or a server that answers each frame could block both sides.
    let writer = tokio::spawn(async move {
        // The server may close first; what it said is read below.
        if wr.write_all(&bytes).await.is_ok() && half_close {
            let _ = wr.shutdown().await;
        }
        wr
    });
    let mut got = Vec::new();
    let mut buf = vec![0; 64 << 10];
    let deadline = tokio::time::Instant::now() + wait;
    let closed = loop {
        match tokio::time::timeout_at(deadline, rd.read(&mut buf)).await {
            Err(_) => break false,
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            // Only frame headers and GOAWAYs matter; replies to floods are not kept.
            Ok(Ok(n)) => {
                if got.len() < 1 << 20 {
                    got.extend_from_slice(&buf[..n]);
                }
            }
        }
    };
    writer.abort();
    let mut goaway = None;
    let mut rest = &got[..];
    while rest.len() >= 9 {
        let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        if rest[3] == F_GOAWAY && rest.len() >= 9 + 8 {
            goaway = Some(u32::from_be_bytes([rest[13], rest[14], rest[15], rest[16]]));
        }
        rest = &rest[(9 + len).min(rest.len())..];
    }
    H2End { goaway, closed }
}

/// What RFC 9113 requires of a server for a fixed hostile connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum H2Rule {
    /// A connection error: the server must end the connection (etcd does).
    Error,
    /// A connection error that etcd's grpc-go transport lets pass (it does not validate
    /// SETTINGS values, window overflows or frames on idle streams); mem_etcd's h2 ends the
    /// connection as the RFC says. Compared as such: etcd keeps it, mem_etcd ends it.
    ErrorEtcdIgnores,
    /// Not an error: the server must keep the connection.
    Fine,
}

/// The fixed hostile connections: (name, bytes after the preface and SETTINGS, the rule).
fn h2_fixed_cases() -> Vec<(&'static str, Vec<u8>, H2Rule)> {
    use H2Rule::*;
    let headers = |stream: u32, flags: u8| {
        h2_frame(F_HEADERS, flags, stream, &grpc_header_block("/etcdserverpb.KV/Range"))
    };
    vec![
        ("DATA on stream 0", h2_frame(F_DATA, 0, 0, b"abc"), Error),
        ("HEADERS on stream 0", headers(0, END_HEADERS), Error),
        ("RST_STREAM on stream 0", h2_frame(F_RST_STREAM, 0, 0, &[0, 0, 0, 8]), Error),
        ("CONTINUATION on stream 0", h2_frame(F_CONTINUATION, END_HEADERS, 0, &[0x82]), Error),
        ("PRIORITY on stream 0", h2_frame(F_PRIORITY, 0, 0, &[0, 0, 0, 1, 16]), Error),
        ("CONTINUATION without HEADERS", h2_frame(F_CONTINUATION, END_HEADERS, 1, &[0x82]), Error),
        (
            "HEADERS with bogus HPACK",
            h2_frame(F_HEADERS, END_HEADERS, 1, &[0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x3f]),
            Error,
        ),
        (
            "HEADERS indexing past the dynamic table",
            h2_frame(F_HEADERS, END_HEADERS, 1, &[0xbe]),
            Error,
        ),
        ("WINDOW_UPDATE of 0 on the connection", h2_frame(F_WINDOW_UPDATE, 0, 0, &[0; 4]), Error),
        (
            "WINDOW_UPDATE overflowing the connection window",
            [
                h2_frame(F_WINDOW_UPDATE, 0, 0, &0x7fff_ffffu32.to_be_bytes()),
                h2_frame(F_WINDOW_UPDATE, 0, 0, &0x7fff_ffffu32.to_be_bytes()),
            ]
            .concat(),
            ErrorEtcdIgnores,
        ),
        ("SETTINGS of 5 bytes", h2_frame(F_SETTINGS, 0, 0, &[0, 4, 0, 0, 1]), Error),
        ("SETTINGS on stream 1", h2_frame(F_SETTINGS, 0, 1, &[]), Error),
        ("SETTINGS max frame size 100", h2_settings(&[(5, 100)]), ErrorEtcdIgnores),
        ("SETTINGS max frame size 2^24", h2_settings(&[(5, 1 << 24)]), ErrorEtcdIgnores),
        ("SETTINGS initial window 2^31", h2_settings(&[(4, 1 << 31)]), Error),
        ("SETTINGS enable push 2", h2_settings(&[(2, 2)]), ErrorEtcdIgnores),
        ("SETTINGS ACK with a payload", h2_frame(F_SETTINGS, 1, 0, &[0, 1, 0, 0, 0, 0]), Error),
        ("PING of 7 bytes", h2_frame(F_PING, 0, 0, &[0; 7]), Error),
        ("PING on stream 1", h2_frame(F_PING, 0, 1, &[0; 8]), Error),
        ("GOAWAY on stream 1", h2_frame(F_GOAWAY, 0, 1, &[0; 8]), Error),
        ("HEADERS on an even stream", headers(2, END_HEADERS), Error),
        ("frame over the max frame size", h2_frame(F_DATA, 0, 1, &vec![0; 16385]), Error),
        (
            "WINDOW_UPDATE on an idle stream",
            h2_frame(F_WINDOW_UPDATE, 0, 1, &1u32.to_be_bytes()),
            ErrorEtcdIgnores,
        ),
        // Not errors: a server must ignore or accept these and keep the connection.
        ("an unknown frame type", h2_frame(0xee, 0xff, 0, b"whatever"), Fine),
        ("SETTINGS header table 2^32-1", h2_settings(&[(1, u32::MAX)]), Fine),
        ("SETTINGS unknown ids", h2_settings(&[(0x99, 7), (0, 0), (0xffff, u32::MAX)]), Fine),
    ]
}

/// Random frames after a valid preface and SETTINGS: random types (known and not), flags,
/// stream ids and payloads, and now and then a length field that lies.
fn random_h2_frames(rng: &mut SmallRng) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..rng.random_range(1..12) {
        let kind = if rng.random_range(0..4) == 0 { rng.random() } else { rng.random_range(0..10) };
        let stream = match rng.random_range(0..4) {
            0 => 0,
            1 => rng.random_range(1..8) * 2 - 1,
            2 => rng.random_range(0..16),
            _ => rng.random(),
        };
        let payload: Vec<u8> = if kind == F_HEADERS && rng.random() {
            grpc_header_block("/etcdserverpb.KV/Range")
        } else {
            (0..rng.random_range(0..48)).map(|_| rng.random()).collect()
        };
        let len = match rng.random_range(0..8) {
            0 => rng.random_range(0..1 << 24),
            _ => payload.len(),
        };
        out.extend(h2_frame_claiming(len, kind, rng.random(), stream, &payload));
    }
    out
}

/// Floods that a server must survive without its memory or tasks growing with them.
fn h2_floods(scale: usize) -> Vec<(&'static str, Vec<u8>)> {
    let block = grpc_header_block("/etcdserverpb.KV/Range");
    let n = 50 * scale;
    vec![
        (
            "RST_STREAM flood (rapid reset)",
            (0..n as u32)
                .flat_map(|i| {
                    let id = 2 * i + 1;
                    [
                        h2_frame(F_HEADERS, END_HEADERS, id, &block),
                        h2_frame(F_RST_STREAM, 0, id, &[0, 0, 0, 8]),
                    ]
                    .concat()
                })
                .collect(),
        ),
        (
            "PING flood",
            (0..4 * n as u64).flat_map(|i| h2_frame(F_PING, 0, 0, &i.to_be_bytes())).collect(),
        ),
        ("SETTINGS flood", (0..2 * n).flat_map(|_| h2_settings(&[(4, 65535)])).collect()),
        (
            "WINDOW_UPDATE flood",
            (0..4 * n).flat_map(|_| h2_frame(F_WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes())).collect(),
        ),
        (
            "empty DATA flood on an open stream",
            [
                h2_frame(F_HEADERS, END_HEADERS, 1, &block),
                (0..4 * n).flat_map(|_| h2_frame(F_DATA, 0, 1, &[])).collect(),
            ]
            .concat(),
        ),
        (
            "CONTINUATION flood",
            [
                h2_frame(F_HEADERS, 0, 1, &block),
                (0..n)
                    .flat_map(|_| h2_frame(F_CONTINUATION, 0, 1, &[0x40, 0x01, b'x', 0x7f, 0x10]))
                    .collect(),
            ]
            .concat(),
        ),
    ]
}

/// Raw HTTP/2 abuse, all at once with a prober: fixed protocol violations, seeded random
/// frames, random bytes after the preface, floods, and a connection that opens thousands of
/// streams without sending their messages. The server must stay up, answer Ranges on fresh
/// connections throughout, end each connection a protocol error calls for, keep its memory
/// bounded, and have no task left once the connections are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_frame_fuzz() {
    let mut s = server_of!(Kind::MemEtcd);
    let addr = s.addr();
    let pid = server_pid(addr);
    assert_serving(&mut s, "startup").await;
    let (rss0, _) = rss_and_threads(pid);
    let tasks0 = idle_tasks(addr).await;
    let iters = fuzz_iters();
    let started = Instant::now();

    // Fresh connections answering a Range all along.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let endpoint = s.endpoint();
    let prober = tokio::spawn(async move {
        let (mut ok, mut failures) = (0, Vec::new());
        while !*stop_rx.borrow() {
            let r = tokio::time::timeout(Duration::from_secs(5), async {
                let ch = Channel::from_shared(endpoint.clone()).unwrap().connect().await?;
                pb::kv_client::KvClient::new(ch)
                    .range(range("a", ""))
                    .await
                    .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            })
            .await;
            match r {
                Ok(Ok(())) => ok += 1,
                Ok(Err(e)) => failures.push(e.to_string()),
                Err(_) => failures.push("no answer within 5 s".into()),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        (ok, failures)
    });
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(rss0));
    let sampler = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_and_threads(pid).0, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    // A connection holding thousands of streams opened and never given their message.
    let block = grpc_header_block("/etcdserverpb.KV/Range");
    let streams = 25 * iters;
    let flood: Vec<u8> = (0..streams as u32)
        .flat_map(|i| h2_frame(F_HEADERS, END_HEADERS, 2 * i + 1, &block))
        .collect();
    let held =
        tokio::spawn(h2_raw(addr, [h2_hello(), flood].concat(), false, Duration::from_secs(5)));
    // Each open stream is a task in the server: the count shows they all arrived (and, once the
    // connection is gone, that they all went).
    let what = format!("a task in the server for each of {streams} streams ({tasks0} idle)");
    let most = wait_until(&what, Duration::from_secs(4), || async {
        let most = metric(addr, ALIVE_TASKS).await;
        if most >= tasks0 + streams as f64 { Ok(most) } else { Err(format!("{most} tasks")) }
    })
    .await;
    eprintln!("{most} tasks in the server with {streams} streams open ({tasks0} idle)");

    let mut cases: Vec<(String, Vec<u8>, bool, Option<bool>)> = Vec::new();
    for (what, bytes, rule) in h2_fixed_cases() {
        let error = rule != H2Rule::Fine;
        cases.push((what.to_string(), [h2_hello(), bytes].concat(), false, Some(error)));
    }
    for (what, bytes) in h2_floods((iters / 10).max(10)) {
        cases.push((what.to_string(), [h2_hello(), bytes].concat(), true, None));
    }
    let seed = 0x9_4000;
    let mut rng = SmallRng::seed_from_u64(seed);
    for i in 0..iters {
        let bytes = if i % 4 == 0 {
            let junk: Vec<u8> = (0..rng.random_range(1..200)).map(|_| rng.random()).collect();
            [PREFACE, &junk].concat()
        } else {
            [h2_hello(), random_h2_frames(&mut rng)].concat()
        };
        cases.push((format!("random (seed {seed}, case {i})"), bytes, true, None));
    }
    let mut tally = std::collections::BTreeMap::<String, usize>::new();
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(32));
    let mut running = tokio::task::JoinSet::new();
    for (what, bytes, half_close, error) in cases {
        let permit = sem.clone().acquire_owned().await.unwrap();
        running.spawn(async move {
            // Errors are answered at once; a connection that is fine stays open until it
            // has been quiet a while, so those are given a second before counting as open.
            let wait =
                if error == Some(false) { Duration::from_secs(1) } else { Duration::from_secs(5) };
            let end = h2_raw(addr, bytes.clone(), half_close, wait).await;
            drop(permit);
            (what, bytes, error, end)
        });
    }
    let mut wrong = Vec::new();
    while let Some(r) = running.join_next().await {
        let (what, bytes, error, end) = r.expect("a connection task panicked");
        *tally.entry(format!("goaway {:?}, closed {}", end.goaway, end.closed)).or_default() += 1;
        match error {
            Some(true) if !end.closed => {
                wrong.push(format!("{what}: still open, expected it ended ({end:?})"))
            }
            Some(false) if end.closed => {
                wrong.push(format!("{what}: ended ({end:?}), expected it kept"))
            }
            // Half-closed by the client: the server must let it go.
            None if !end.closed => wrong.push(format!(
                "{what}: still open 5 s after the client half-closed it ({end:?}); sent {:02x?}",
                &bytes[..bytes.len().min(200)]
            )),
            _ => {}
        }
    }
    let held = held.await.expect("the stream flood task");
    eprintln!(
        "{streams} streams held open on one connection: {held:?}; rss peak {} MiB (was {} MiB)",
        peak.load(std::sync::atomic::Ordering::Relaxed) / MIB,
        rss0 / MIB
    );
    stop_tx.send(true).unwrap();
    let (ok, failures) = prober.await.expect("the prober");
    sampler.abort();
    eprintln!("HTTP/2 cases in {:?}: {tally:?}; {ok} probes answered", started.elapsed());
    assert_serving(&mut s, "hostile HTTP/2 connections").await;
    assert!(
        failures.is_empty() && ok > 0,
        "Ranges on fresh connections during the HTTP/2 abuse: {ok} answered, failures: {failures:?}"
    );
    assert!(wrong.is_empty(), "connections not handled as HTTP/2 requires:\n{}", wrong.join("\n"));
    let peak = peak.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        peak <= rss0 + 256 * MIB,
        "RSS peaked at {} MiB during the HTTP/2 abuse (was {} MiB): expected at most 256 MiB more",
        peak / MIB,
        rss0 / MIB
    );
    assert_tasks_back(addr, tasks0, "hostile HTTP/2 connections").await;
    let rss = settled_rss(pid, rss0 + 64 * MIB).await;
    assert!(
        rss <= rss0 + 64 * MIB,
        "RSS {} MiB after the HTTP/2 abuse (was {} MiB)",
        rss / MIB,
        rss0 / MIB
    );
}

/// The fixed protocol violations on etcd and mem_etcd: each server must end the connection or
/// keep it as [`H2Rule`] says (grpc-go closes without a GOAWAY; hyper sends one first, so only
/// whether the connection ends is compared).
#[tokio::test]
async fn http2_protocol_errors_end_connections_like_etcd() {
    let Some(etcd) = Server::start(Kind::Etcd, &[]).await else { return };
    let mut mem = server_of!(Kind::MemEtcd);
    let mut runs = tokio::task::JoinSet::new();
    for (what, bytes, rule) in h2_fixed_cases() {
        let bytes = [h2_hello(), bytes].concat();
        let (e, m) = (etcd.addr(), mem.addr());
        runs.spawn(async move {
            let wait = Duration::from_secs(2);
            let (e, m) =
                tokio::join!(h2_raw(e, bytes.clone(), false, wait), h2_raw(m, bytes, false, wait));
            (what, rule, e, m)
        });
    }
    let mut wrong = Vec::new();
    while let Some(r) = runs.join_next().await {
        let (what, rule, e, m) = r.expect("a case panicked");
        let (etcd_ends, mem_ends) = match rule {
            H2Rule::Error => (true, true),
            H2Rule::ErrorEtcdIgnores => (false, true),
            H2Rule::Fine => (false, false),
        };
        if (e.closed, m.closed) != (etcd_ends, mem_ends) {
            wrong.push(format!(
                "{what} ({rule:?}): expected etcd to {} it and mem_etcd to {} it; etcd {e:?}, \
                 mem_etcd {m:?}",
                if etcd_ends { "end" } else { "keep" },
                if mem_ends { "end" } else { "keep" }
            ));
        }
    }
    assert_serving(&mut mem, "HTTP/2 protocol errors").await;
    assert!(wrong.is_empty(), "connections ended or kept unlike expected:\n{}", wrong.join("\n"));
}
