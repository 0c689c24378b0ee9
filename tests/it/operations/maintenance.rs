//! What maintenance sees: an empty store's size and hash, `/debug/vars`, downgrade's answers,
//! and the quota and NOSPACE alarm cycle, each next to etcd's.

use std::time::{Duration, Instant};

use super::http::{http_call, http_get};
use crate::support::*;

/// An empty store as a client sees it: its size and hash, and whether a quota as small as
/// etcd's own tests use takes the first writes.
async fn empty_store(kind: Kind) -> Vec<String> {
    let Some(s) = Server::start(kind, &["--quota-backend-bytes=53248"]).await else {
        return Vec::new();
    };
    let mut c = s.client().await;
    let st = c.status().await.unwrap();
    let hash = c.hash_kv(0).await.unwrap();
    let mut log = vec![
        format!("empty: dbSize under the quota: {}", st.db_size() < st.db_size_quota()),
        format!("empty: HashKV {} at {}", hash.hash(), hash.hash_revision()),
    ];
    for i in 0..3 {
        let r = c.put(format!("k{i}"), "v", None).await;
        log.push(format!("put {i}: {:?}", r.map(|r| rev(r.header())).map_err(|e| status_of(&e))));
    }
    let hash = c.hash_kv(0).await.unwrap();
    log.push(format!("after: HashKV {} at {}", hash.hash(), hash.hash_revision()));
    log
}

#[tokio::test]
async fn an_empty_store_has_etcds_size_and_hash_and_takes_writes_under_a_small_quota() {
    let mem = empty_store(Kind::MemEtcd).await;
    let etcd = empty_store(Kind::Etcd).await;
    if etcd.is_empty() {
        return; // a missing peer, with permission to skip (announced by the harness)
    }
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
    assert_eq!(mem[3], "put 1: Ok(3)");
}

/// `/debug/vars` as a client sees it: its keys and raft.status's, and each value's JSON type;
/// other methods and paths below it.
async fn debug_vars(kind: Kind) -> Vec<String> {
    let Some(s) = Server::start(kind, &[]).await else {
        return Vec::new();
    };
    let vars = http_get(s.addr(), "/debug/vars").await;
    let mut log = vec![format!("GET: {} {}", vars.status, vars.content_type)];
    let v: serde_json::Value = serde_json::from_str(&vars.body).expect("a JSON object");
    let shape = |v: &serde_json::Value| {
        let o = v.as_object().expect("an object");
        let kinds: Vec<String> = o
            .iter()
            .map(|(k, v)| {
                let t = match v {
                    serde_json::Value::Number(_) => "number",
                    serde_json::Value::String(_) => "string",
                    serde_json::Value::Array(_) => "array",
                    serde_json::Value::Object(_) => "object",
                    _ => "other",
                };
                format!("{k}: {t}")
            })
            .collect();
        kinds.join(", ")
    };
    log.push(shape(&v));
    log.push(format!("raft.status {{{}}}", shape(&v["raft.status"])));
    let raft = &v["raft.status"];
    let member =
        format!("{:x}", s.client().await.status().await.unwrap().header().unwrap().member_id());
    log.push(format!(
        "a member alone: itself as id, vote and lead: {}; {}; matched itself: {}",
        raft["id"] == member.as_str()
            && raft["vote"] == member.as_str()
            && raft["lead"] == member.as_str(),
        raft["raftState"],
        raft["progress"][&member]["match"] == raft["commit"],
    ));
    log.push(format!(
        "cmdline starts with the program: {}",
        v["cmdline"][0].as_str().is_some_and(|p| p.ends_with("etcd"))
    ));
    log.push(format!(
        "open files limit: {}",
        v["file_descriptor_limit"].as_u64().is_some_and(|n| n > 0)
    ));
    let post = http_call(s.addr(), "POST", "/debug/vars").await;
    log.push(format!("POST: {} {:?}", post.status, post.body));
    log.push(format!("below it: {}", http_get(s.addr(), "/debug/vars/x").await.status));
    log
}

#[tokio::test]
async fn debug_vars_has_etcds_shape() {
    let mem = debug_vars(Kind::MemEtcd).await;
    let etcd = debug_vars(Kind::Etcd).await;
    if etcd.is_empty() {
        return; // a missing peer, with permission to skip (announced by the harness)
    }
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
    assert_eq!(mem[0], "GET: 200 application/json; charset=utf-8");
}

/// Downgrade's answers, but for an `enable` that etcd would carry out.
async fn downgrade_answers(kind: Kind) -> Vec<String> {
    let Some(s) = Server::start(kind, &[]).await else {
        return Vec::new();
    };
    let mut raw = s.raw_clients().await;
    let mut log = Vec::new();
    let cases = [
        (0, "3.5"),
        (0, "3.5.0"),
        (0, "3.5.3"),
        (0, "3.5.0-alpha.1"),
        (0, "3.5.0+meta"),
        (0, "03.5.0"),
        (0, "3.4"),
        (0, "3.6"),
        (0, "3.7"),
        (0, "4.5"),
        (0, "abc"),
        (0, "v3.5"),
        (0, "3"),
        (0, "3.5.0.1"),
        (0, " 3.5"),
        (0, "3.5."),
        (0, ""),
        (1, "3.4"),
        (1, "x"),
        (2, ""),
        (2, "3.5"),
        (5, "3.5"),
    ];
    for (action, version) in cases {
        let req = pb::DowngradeRequest { action, version: version.into() };
        let r = raw.maint.downgrade(req).await;
        let r = r.map(|r| r.into_inner().version).map_err(|e| (e.code(), e.message().to_string()));
        log.push(format!("{action} {version:?}: {r:?}"));
    }
    log
}

#[tokio::test]
async fn downgrade_checks_its_target_as_etcds_does() {
    let mem = downgrade_answers(Kind::MemEtcd).await;
    let etcd = downgrade_answers(Kind::Etcd).await;
    if etcd.is_empty() {
        return; // a missing peer, with permission to skip (announced by the harness)
    }
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
    assert_eq!(mem[0], r#"0 "3.5": Ok("3.6")"#);
    // mem_etcd's own rule: no downgrade to carry out (etcd would start one).
    let s = Server::start(Kind::MemEtcd, &[]).await.unwrap();
    let mut raw = s.raw_clients().await;
    let e = raw.maint.downgrade(pb::DowngradeRequest { action: 1, version: "3.5".into() }).await;
    let e = e.expect_err("enable is refused");
    assert_eq!((e.code(), e.message()), (tonic::Code::Unimplemented, "downgrade is not supported"));
}

/// The quota and NOSPACE alarm cycle, step by step; returns what each step answered so that
/// mem_etcd and etcd can be compared (member ids masked).
async fn quota_cycle(kind: Kind) -> Vec<String> {
    use etcd_client::{AlarmAction, AlarmType, Compare, CompareOp, Txn, TxnOp};
    let Some(s) = Server::start(kind, &["--quota-backend-bytes=1000000"]).await else {
        return Vec::new();
    };
    let mut c = s.client().await;
    let mut log = Vec::new();
    let mut step = |what: &str, r: String| log.push(format!("{what}: {r}"));
    let big = "x".repeat(20_000);
    // etcd checks the quota against its bbolt file, which grows only when a batch commits
    // (every 100 ms or 10,000 writes): how many puts pass before NOSPACE depends on how fast
    // this client is. So put until NOSPACE comes, bounded by time, pausing past etcd's commit
    // interval once the data alone is over the quota; the comparison starts at the first
    // NOSPACE, not at how many puts came before it.
    let start = Instant::now();
    let mut n = 0;
    let err = loop {
        n += 1;
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{kind:?}: no NOSPACE after {n} puts of 20 KB under a 1 MB quota in 30 s"
        );
        if let Err(e) = c.put(format!("k{n}"), big.as_str(), None).await {
            break e;
        }
        if n * big.len() > 1_000_000 {
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    };
    assert!(n > 3, "{kind:?}: NOSPACE after {n} puts");
    step("put past the quota", format!("{:?}", status_of(&err)));
    let st = c.status().await.unwrap();
    let member = st.header().unwrap().member_id();
    let text = |t: String| t.replace(&member.to_string(), "MEMBER");
    step("status errors", text(format!("{:?}", st.errors())));
    step("status quota", st.db_size_quota().to_string());
    let alarms = c.alarm(AlarmAction::Get, AlarmType::None, None).await.unwrap();
    let list = |a: &etcd_client::AlarmResponse| {
        let v: Vec<_> = a.alarms().iter().map(|m| (m.member_id(), m.alarm())).collect();
        text(format!("{v:?}"))
    };
    step("alarm list", list(&alarms));
    let h = http_get(s.addr(), "/health").await;
    step("health", format!("{} {}", h.status, h.body));
    let h = http_get(s.addr(), "/health?exclude=NOSPACE").await;
    step("health excluding NOSPACE", format!("{} {}", h.status, h.body));
    // Writes that add data fail; reads, deletes and compaction go on.
    let r = c.put("small", "1", None).await.map(|_| ());
    step("small put", format!("{:?}", r.map_err(|e| status_of(&e))));
    let r = c.lease_grant(60, None).await.map(|_| ());
    step("lease grant", format!("{:?}", r.map_err(|e| status_of(&e))));
    let r = c.get("k1", None).await.map(|g| g.kvs().len());
    step("get", format!("{:?}", r.map_err(|e| status_of(&e))));
    let del_txn = Txn::new()
        .when([Compare::version("k2", CompareOp::Greater, 0)])
        .and_then([TxnOp::delete("k2", None)]);
    let r = c.txn(del_txn).await.map(|t| t.succeeded());
    step("txn deleting", format!("{:?}", r.map_err(|e| status_of(&e))));
    let put_txn = Txn::new().and_then([TxnOp::put("t", "1", None)]);
    let r = c.txn(put_txn).await.map(|t| t.succeeded());
    step("txn putting", format!("{:?}", r.map_err(|e| status_of(&e))));
    let r = c.delete("k", Some(etcd_client::DeleteOptions::new().with_prefix())).await;
    step("delete all", format!("{:?}", r.map(|d| d.deleted() > 2).map_err(|e| status_of(&e))));
    let cur = current_rev(&mut c).await;
    // Physical: etcd frees the space in the background after answering, and a defragmentation
    // that starts before that leaves the file over the quota (seen once on a loaded CI machine,
    // where etcd's put after the disarm still got NOSPACE).
    let physical = etcd_client::CompactionOptions::new().with_physical();
    c.compact(cur, Some(physical)).await.unwrap();
    c.defragment().await.unwrap();
    // Space is free, but the alarm holds until disarmed.
    let r = c.put("small", "1", None).await.map(|_| ());
    step("put after compaction", format!("{:?}", r.map_err(|e| status_of(&e))));
    // etcdctl alarm disarm: lists the alarms, then deactivates each.
    let ctl = peer_binary("etcdctl").expect("etcdctl");
    let (code, out, _) =
        crate::tools::etcdctl::etcdctl(&ctl, &s.endpoint(), &["alarm", "disarm"], None);
    step("etcdctl alarm disarm", format!("{code:?} {}", text(out)));
    let alarms = c.alarm(AlarmAction::Get, AlarmType::None, None).await.unwrap();
    step("alarm list after disarm", list(&alarms));
    let r = c.put("small", "1", None).await.map(|_| ());
    step("put after disarm", format!("{:?}", r.map_err(|e| status_of(&e))));
    let h = http_get(s.addr(), "/health").await;
    step("health after disarm", format!("{} {}", h.status, h.body));
    log
}

#[tokio::test]
async fn quota_raises_nospace_until_disarmed_as_etcd_does() {
    let mem = quota_cycle(Kind::MemEtcd).await;
    let etcd = quota_cycle(Kind::Etcd).await;
    if mem.is_empty() || etcd.is_empty() {
        return; // a missing peer, with permission to skip (announced by the harness)
    }
    for (m, e) in mem.iter().zip(&etcd) {
        assert_eq!(m, e, "mem_etcd (left) and etcd (right) differ");
    }
    assert_eq!(mem.len(), etcd.len());
    assert!(mem[0].contains("ResourceExhausted") && mem[0].contains("database space exceeded"));
}

// etcd's log lines that operators and etcd's own tests wait for (issue 29), each compared
// field by field with etcd 3.6.16's.
