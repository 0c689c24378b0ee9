//! A tenant's kube-apiserver compacts its own keys under auth: Kamaji's users and roles (one
//! user per tenant, READWRITE on its prefix), the same steps against mem_etcd with `--tenant`
//! and against a shared etcd 3.6, which refuses a non-root Compact. On mem_etcd the tenant's
//! history goes, below its revision, for reads and watches alike and for every caller; the other
//! tenant's stays; kube-apiserver's compactor, whose `compact_rev_key` lies outside every
//! prefix, coordinates through a key of each tenant's own; and all of it holds across a restart.

use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, Permission, Txn, TxnOp, WatchOptions,
};

use crate::cluster::harness::Cluster;
use crate::support::*;

const A_KEY: &str = "/tenant-a/pods/default/p";
const B_KEY: &str = "/tenant-b/pods/default/p";

/// Root, and a user per tenant owning its prefix, as Kamaji provisions them; auth enabled.
async fn users(c: &mut Client) {
    c.user_add("root", "rootpw", None).await.unwrap();
    c.role_add("root").await.unwrap();
    c.user_grant_role("root", "root").await.unwrap();
    for t in ["tenant-a", "tenant-b"] {
        c.user_add(t, format!("{t}pw"), None).await.unwrap();
        c.role_add(t).await.unwrap();
        let perm = Permission::read_write(format!("/{t}/")).with_range_end(format!("/{t}0"));
        c.role_grant_permission(t, perm).await.unwrap();
        c.user_grant_role(t, t).await.unwrap();
    }
    c.auth_enable().await.unwrap();
}

async fn as_user(endpoint: &str, user: &str) -> Client {
    let opts = ConnectOptions::new().with_user(user, format!("{user}pw"));
    Client::connect([endpoint], Some(opts)).await.unwrap()
}

fn outcome<T>(r: Result<T, etcd_client::Error>, ok: impl FnOnce(T) -> String) -> String {
    match r {
        Ok(v) => ok(v),
        Err(e) => format!("{:?}", status_of(&e)),
    }
}

/// What a get of `key` at `rev` answers: its value, or the error.
async fn get_at(c: &mut Client, key: &str, rev: i64) -> String {
    let r = c.get(key, Some(GetOptions::new().with_revision(rev))).await;
    outcome(r, |g| g.kvs().first().map_or("none".into(), |kv| kv.value_str().unwrap().into()))
}

/// What a watch of `prefix` from `rev` gives first: its first event's revision and value, or
/// its cancel.
async fn watch_from(c: &mut Client, prefix: &str, rev: i64) -> String {
    let opts = WatchOptions::new().with_prefix().with_start_revision(rev);
    let mut stream = c.watch(prefix, Some(opts)).await.unwrap();
    let created = stream.message().await.unwrap().expect("created");
    assert!(created.created());
    let first = if created.canceled() {
        created
    } else {
        tokio::time::timeout(Duration::from_secs(5), stream.message())
            .await
            .expect("an event or a cancel within 5 s")
            .unwrap()
            .expect("a message")
    };
    if first.canceled() {
        return format!("canceled, compact revision {}", first.compact_revision());
    }
    let e = &first.events()[0];
    let kv = e.kv().unwrap();
    format!("event at {}: {}", kv.mod_revision(), kv.value_str().unwrap())
}

/// kube-apiserver's compactor (`k8s.io/apiserver/pkg/storage/etcd3/compact.go`): a txn on
/// `compact_rev_key`'s version, putting the revision when it is `t`, else reading the key.
async fn compactor_txn(c: &mut Client, t: i64, rev: i64) -> String {
    let txn = Txn::new()
        .when([Compare::version("compact_rev_key", CompareOp::Equal, t)])
        .and_then([TxnOp::put("compact_rev_key", rev.to_string(), None)])
        .or_else([TxnOp::get("compact_rev_key", None)]);
    outcome(c.txn(txn).await, |r| {
        if r.succeeded() {
            return "succeeded".into();
        }
        let got = match &r.op_responses()[0] {
            etcd_client::TxnOpResponse::Get(g) => g
                .kvs()
                .iter()
                .map(|kv| format!("{} v{}", kv.key_str().unwrap(), kv.version()))
                .collect(),
            other => format!("{other:?}"),
        };
        format!("failed, read {got:?}")
    })
}

/// The revisions of A's and B's two versions each.
struct Revs {
    a1: i64,
    a2: i64,
    b1: i64,
}

async fn write(root: &mut Client) -> Revs {
    let a1 = rev(root.put(A_KEY, "a1", None).await.unwrap().header());
    let b1 = rev(root.put(B_KEY, "b1", None).await.unwrap().header());
    let a2 = rev(root.put(A_KEY, "a2", None).await.unwrap().header());
    root.put(B_KEY, "b2", None).await.unwrap();
    Revs { a1, a2, b1 }
}

/// The steps, as tenant A's and B's users and root. Returns what each answered.
async fn steps(endpoint: &str, r: &Revs) -> Vec<String> {
    let (a, b, root) =
        (as_user(endpoint, "tenant-a"), as_user(endpoint, "tenant-b"), as_user(endpoint, "root"));
    let (mut a, mut b, mut root) = (a.await, b.await, root.await);
    let mut log = Vec::new();
    let compact = a.compact(r.a2, None).await;
    log.push(format!("A compacts at A's second write: {}", outcome(compact, |_| "Ok".into())));
    log.push(format!("A reads its first version: {}", get_at(&mut a, A_KEY, r.a1).await));
    log.push(format!("root reads A's first version: {}", get_at(&mut root, A_KEY, r.a1).await));
    log.push(format!("B reads its first version: {}", get_at(&mut b, B_KEY, r.b1).await));
    log.push(format!("A reads at the compaction: {}", get_at(&mut a, A_KEY, r.a2).await));
    log.push(format!(
        "A watches from its first write: {}",
        watch_from(&mut a, "/tenant-a/", r.a1).await
    ));
    log.push(format!(
        "A watches from the compaction: {}",
        watch_from(&mut a, "/tenant-a/", r.a2).await
    ));
    log.push(format!(
        "B watches from its first write: {}",
        watch_from(&mut b, "/tenant-b/", r.b1).await
    ));
    log.push(format!(
        "root watches everything from B's first write: {}",
        watch_from(&mut root, "/", r.b1).await
    ));
    let again = a.compact(r.a2, None).await;
    log.push(format!("A compacts there again: {}", outcome(again, |_| "Ok".into())));
    let future = a.compact(r.a2 + 1000, None).await;
    log.push(format!("A compacts in the future: {}", outcome(future, |_| "Ok".into())));
    let b_compact = b.compact(r.a2, None).await;
    log.push(format!("B compacts at A's revision: {}", outcome(b_compact, |_| "Ok".into())));
    log.push(format!("B then reads its first version: {}", get_at(&mut b, B_KEY, r.b1).await));
    // kube-apiserver's compactor, as each tenant's runs it: its first round, then its next.
    log.push(format!("A's compactor, first round: {}", compactor_txn(&mut a, 0, r.a2).await));
    log.push(format!("A's compactor, again at 0: {}", compactor_txn(&mut a, 0, r.a2).await));
    log.push(format!("B's compactor, first round: {}", compactor_txn(&mut b, 0, r.a1).await));
    let shared = root.get("compact_rev_key", None).await;
    log.push(format!("root reads compact_rev_key: {}", outcome(shared, |g| g.count().to_string())));
    log
}

const DENIED: &str = "(PermissionDenied, \"etcdserver: permission denied\")";
const COMPACTED: &str = "(OutOfRange, \"etcdserver: mvcc: required revision has been compacted\")";
const FUTURE: &str = "(OutOfRange, \"etcdserver: mvcc: required revision is a future revision\")";

/// mem_etcd: each tenant compacts its own history, and only its own.
fn isolated(r: &Revs) -> Vec<String> {
    vec![
        "A compacts at A's second write: Ok".into(),
        format!("A reads its first version: {COMPACTED}"),
        format!("root reads A's first version: {COMPACTED}"),
        "B reads its first version: b1".into(),
        "A reads at the compaction: a2".into(),
        format!("A watches from its first write: canceled, compact revision {}", r.a2),
        format!("A watches from the compaction: event at {}: a2", r.a2),
        format!("B watches from its first write: event at {}: b1", r.b1),
        format!(
            "root watches everything from B's first write: canceled, compact revision {}",
            r.a2
        ),
        format!("A compacts there again: {COMPACTED}"),
        format!("A compacts in the future: {FUTURE}"),
        "B compacts at A's revision: Ok".into(),
        format!("B then reads its first version: {COMPACTED}"),
        "A's compactor, first round: succeeded".into(),
        "A's compactor, again at 0: failed, read \"compact_rev_key v1\"".into(),
        "B's compactor, first round: succeeded".into(),
        "root reads compact_rev_key: 0".into(),
    ]
}

/// A shared etcd: only root compacts, so a tenant's kube-apiserver cannot.
fn shared(r: &Revs) -> Vec<String> {
    vec![
        format!("A compacts at A's second write: {DENIED}"),
        "A reads its first version: a1".into(),
        "root reads A's first version: a1".into(),
        "B reads its first version: b1".into(),
        "A reads at the compaction: a2".into(),
        format!("A watches from its first write: event at {}: a1", r.a1),
        format!("A watches from the compaction: event at {}: a2", r.a2),
        format!("B watches from its first write: event at {}: b1", r.b1),
        format!("root watches everything from B's first write: event at {}: b1", r.b1),
        format!("A compacts there again: {DENIED}"),
        format!("A compacts in the future: {DENIED}"),
        format!("B compacts at A's revision: {DENIED}"),
        "B then reads its first version: b1".into(),
        format!("A's compactor, first round: {DENIED}"),
        format!("A's compactor, again at 0: {DENIED}"),
        format!("B's compactor, first round: {DENIED}"),
        "root reads compact_rev_key: 0".into(),
    ]
}

#[tokio::test]
async fn a_tenant_compacts_its_own_history_under_auth_where_a_shared_etcd_refuses() {
    let dir = DataDir::new();
    let mem = dir.start(&["--tenant=/tenant-a,/tenant-b"]).await;
    let mut c = mem.client().await;
    let revs = write(&mut c).await;
    users(&mut c).await;
    let mem_steps = steps(&mem.endpoint(), &revs).await;
    assert_eq!(mem_steps, isolated(&revs), "mem_etcd");
    // Each tenant's compaction revision on /metrics: both compacted at A's second write.
    let page = crate::operations::http_get(mem.addr(), "/metrics").await.body;
    for t in ["tenant-a", "tenant-b"] {
        let line = format!("mem_etcd_tenant_compact_revision{{tenant=\"{t}\"}} {}", revs.a2);
        assert!(page.lines().any(|l| l == line), "no {line:?} on /metrics");
    }
    // The tenants' compactions, their own compact_rev_keys and the reads and watches they
    // refuse, across a restart (the store's unit tests reopen it from a snapshot and a backup).
    let mut root = as_user(&mem.endpoint(), "root").await;
    let before = root.hash_kv(0).await.unwrap().hash();
    mem.stop(Duration::from_secs(10)).await;
    let mem = dir.start(&["--tenant=/tenant-a,/tenant-b"]).await;
    let e = mem.endpoint();
    let (mut a, mut b) = (as_user(&e, "tenant-a").await, as_user(&e, "tenant-b").await);
    let mut root = as_user(&e, "root").await;
    assert_eq!(root.hash_kv(0).await.unwrap().hash(), before, "HashKV across the restart");
    assert_eq!(get_at(&mut a, A_KEY, revs.a1).await, COMPACTED);
    assert_eq!(get_at(&mut a, A_KEY, revs.a2).await, "a2");
    assert_eq!(get_at(&mut b, B_KEY, revs.b1).await, COMPACTED);
    let from_a2 = watch_from(&mut a, "/tenant-a/", revs.a2).await;
    assert_eq!(from_a2, format!("event at {}: a2", revs.a2));
    assert_eq!(compactor_txn(&mut a, 0, revs.a2).await, "failed, read \"compact_rev_key v1\"");
    assert_eq!(compactor_txn(&mut a, 1, revs.a2).await, "succeeded");

    let etcd = server_of!(Kind::Etcd);
    let mut c = etcd.client().await;
    let revs = write(&mut c).await;
    users(&mut c).await;
    assert_eq!(steps(&etcd.endpoint(), &revs).await, shared(&revs), "etcd");
}

/// The same steps through a follower of a 3-member cluster, with both corruption checks on: every
/// member applies the tenants' compactions alike (their stores hash alike, no CORRUPT alarm)
/// and refuses the compacted history from its own state. The tenants are declared at run time
/// (`--tenants-from-auth`), by their users and roles provisioned through the follower: every
/// member has them from its replicated auth state.
#[tokio::test]
async fn a_tenant_compacts_its_own_history_on_every_member_of_a_cluster() {
    let flags = [
        "--wal-mode=none",
        "--tenants-from-auth",
        "--corrupt-check-time=1s",
        "--feature-gates=CompactHashCheck=true",
        "--compact-hash-check-time=1s",
    ];
    let Some(c) = Cluster::start(Kind::MemEtcd, 3, &flags).await else { return };
    let follower = (c.leader().await + 1) % 3;
    let mut first = c.client(follower).await;
    let revs = write(&mut first).await;
    users(&mut first).await;
    assert_eq!(steps(&c.endpoint(follower), &revs).await, isolated(&revs));
    let serializable = |rev| Some(GetOptions::new().with_revision(rev).with_serializable());
    for i in 0..3 {
        let mut root = as_user(&c.endpoint(i), "root").await;
        let old = root.get(A_KEY, serializable(revs.a1)).await;
        assert_eq!(outcome(old, |_| "Ok".into()), COMPACTED, "member {i}");
        let kept = root.get(A_KEY, serializable(revs.a2)).await.unwrap();
        assert_eq!(kept.kvs()[0].value_str().unwrap(), "a2", "member {i}");
        let addr = c.endpoint(i).trim_start_matches("http://").parse().unwrap();
        let page = crate::operations::http_get(addr, "/metrics").await.body;
        for t in ["tenant-a", "tenant-b"] {
            let line = format!("mem_etcd_tenant_compact_revision{{tenant=\"{t}\"}} {}", revs.a2);
            assert!(page.lines().any(|l| l == line), "member {i}: no {line:?} on /metrics");
        }
    }
    // Both checks run every second: three rounds each with nothing raised.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut root = as_user(&c.endpoint(0), "root").await;
    let alarms = root.alarm(etcd_client::AlarmAction::Get, etcd_client::AlarmType::None, None);
    assert!(alarms.await.unwrap().alarms().is_empty(), "an alarm was raised");
}
