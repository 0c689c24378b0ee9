//! Request size limits (`--max-request-bytes`).
//!
//! etcd rejects a write whose request is larger than `--max-request-bytes` (default 1.5 MiB) with
//! INVALID_ARGUMENT "etcdserver: request is too large", and its gRPC receive limit is that plus
//! 512 KiB, so anything up to 2 MiB reaches the check instead of failing in the transport.
//! Reads are not size-checked.

use etcd_client::{Client, GetOptions, Txn, TxnOp};
use tonic::Code;

use crate::support::*;

fn value(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + (i % 26) as u8).collect()
}

async fn assert_too_large(c: &mut Client, key: &str, len: usize) {
    let r = c.put(key, value(len), None).await;
    match r {
        Err(e) => assert_eq!(
            status_of(&e),
            (Code::InvalidArgument, E_TOO_LARGE.to_string()),
            "put of a {len}-byte value: {e:?}"
        ),
        Ok(r) => panic!("put of a {len}-byte value succeeded: {:?}", r.header()),
    }
}

#[tokio::test]
async fn default_limit_rejects_writes_just_above_it() {
    let s = server!();
    let mut c = s.client().await;
    // Just above: the value alone is as large as the limit.
    assert_too_large(&mut c, "big", MAX_REQUEST_BYTES).await;
    assert_too_large(&mut c, "big", MAX_REQUEST_BYTES + 1).await;
    // 1.9 MiB still reaches the server's check (no transport error).
    assert_too_large(&mut c, "big", 1_992_294).await;
    assert_eq!(current_rev(&mut c).await, 1);

    // Comfortably below the limit: stored and read back intact.
    let ok = MAX_REQUEST_BYTES - 1024;
    let p = c.put("big", value(ok), None).await.unwrap();
    assert_eq!(rev(p.header()), 2);
    let r = c.get("big", None).await.unwrap();
    assert_eq!(kvs(r.kvs()), vec![kv("big", value(ok), 2, 2, 1)]);

    // The limit applies to the whole txn.
    let half = MAX_REQUEST_BYTES / 2 + 1024;
    let r = c
        .txn(
            Txn::new().and_then([
                TxnOp::put("t1", value(half), None),
                TxnOp::put("t2", value(half), None),
            ]),
        )
        .await;
    assert_err(r, Code::InvalidArgument, E_TOO_LARGE);
    let third = MAX_REQUEST_BYTES / 3;
    let t =
        c.txn(Txn::new().and_then([
            TxnOp::put("t1", value(third), None),
            TxnOp::put("t2", value(third), None),
        ]))
        .await
        .unwrap();
    assert_eq!(rev(t.header()), 3);
    // A Range response may be much larger than the request limit.
    let r = c.get("\0", Some(GetOptions::new().with_all_keys())).await.unwrap();
    assert_eq!((r.count(), rev(r.header())), (3, 3));
    assert!(r.kvs().iter().map(|k| k.value().len()).sum::<usize>() > MAX_REQUEST_BYTES);
}

#[tokio::test]
async fn reads_are_not_size_checked() {
    let s = server!();
    let mut c = s.client().await;
    let key = String::from_utf8(value(MAX_REQUEST_BYTES + 1000)).unwrap();
    let r = c.get(key.clone(), None).await.unwrap();
    assert_eq!((r.count(), rev(r.header())), (0, 1));
    // Read-only txns are not checked either.
    let t = c.txn(Txn::new().and_then([TxnOp::get(key, None)])).await.unwrap();
    assert_eq!((t.succeeded(), rev(t.header())), (true, 1));
}

#[tokio::test]
async fn custom_small_limit() {
    let s = server!(["--max-request-bytes", "4096"]);
    let mut c = s.client().await;
    assert_too_large(&mut c, "k", 4096).await;
    assert_too_large(&mut c, "k", 10_000).await;
    // Larger than this limit but far below the default: still the server's check, not the
    // transport's (the receive limit is the request limit plus 512 KiB).
    assert_too_large(&mut c, "k", 300_000).await;
    let p = c.put("k", value(3000), None).await.unwrap();
    assert_eq!(rev(p.header()), 2);
    let r = c
        .txn(
            Txn::new()
                .and_then([TxnOp::put("a", value(2100), None), TxnOp::put("b", value(2100), None)]),
        )
        .await;
    assert_err(r, Code::InvalidArgument, E_TOO_LARGE);
    // DeleteRange goes through the same check.
    let long_key = String::from_utf8(value(5000)).unwrap();
    assert_err(c.delete(long_key, None).await, Code::InvalidArgument, E_TOO_LARGE);
    assert_eq!(current_rev(&mut c).await, 2);
}

#[tokio::test]
async fn custom_large_limit() {
    // 3 MiB: a 2.5 MiB value (above the default gRPC cap) is accepted.
    let s = server!(["--max-request-bytes", "3145728"]);
    let mut c = s.client().await;
    let len = 2_621_440;
    let p = c.put("k", value(len), None).await.unwrap();
    assert_eq!(rev(p.header()), 2);
    let r = c.get("k", Some(GetOptions::new().with_keys_only())).await.unwrap();
    assert_eq!(kvs(r.kvs()), vec![kv("k", "", 2, 2, 1)]);
    let mut raw = s.raw_clients().await;
    let got = raw
        .kv
        .range(pb::RangeRequest { key: "k".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.kvs[0].value.len(), len);
    assert_too_large(&mut c, "k", 3_145_728).await;
}
