//! `mem_etcd bench-floor`, the floor `benches/compare_etcd.sh floor` measures.

use crate::support::*;

/// `mem_etcd bench-floor` (the floor of `benches/compare_etcd.sh floor`) serves the member's
/// services on its stack, except KV: Range and Put answer at once and leave the store alone.
#[tokio::test]
async fn the_floor_answers_range_and_put_without_the_store() {
    let args = [
        "bench-floor",
        "--listen-client-urls=http://127.0.0.1:0",
        "--listen-peer-urls=http://127.0.0.1:0",
    ];
    let floor = Server::start_without_defaults(Kind::MemEtcd, &args).await;
    let mut raw = floor.raw().await.unwrap();
    let put = pb::PutRequest { key: "k".into(), value: "v".into(), ..Default::default() };
    let header = raw.kv.put(put).await.unwrap().into_inner().header.expect("a header");
    let range = pb::RangeRequest { key: "k".into(), ..Default::default() };
    let got = raw.kv.range(range).await.unwrap().into_inner();
    assert!(got.kvs.is_empty() && got.count == 0, "{got:?}");
    assert_eq!(got.header.as_ref(), Some(&header));
    // The store never saw the put; the other services are the member's own.
    let status = raw.maint.status(pb::StatusRequest {}).await.unwrap().into_inner();
    assert_eq!(status.header.unwrap().revision, 1);
    assert_eq!(status.header.map(|h| h.member_id), Some(header.member_id));
    let txn = raw.kv.txn(pb::TxnRequest::default()).await.unwrap_err();
    assert_eq!(txn.code(), tonic::Code::Unimplemented);
}
