//! Maintenance, Cluster and Auth services, unknown methods, and the process's startup contract.

use etcd_client::{AlarmAction, AlarmType, CompactionOptions, GetOptions};
use tonic::Code;

use crate::api::kv::put;
use crate::support::*;

/// Parses "X.Y.Z" (optionally with a "-suffix") into numbers.
fn semver(v: &str) -> Option<(u64, u64, u64)> {
    let core = v.split(['-', '+']).next()?;
    let mut it = core.split('.').map(|p| p.parse::<u64>().ok());
    let t = (it.next()??, it.next()??, it.next()??);
    it.next().is_none().then_some(t)
}

#[test]
fn semver_parser() {
    assert_eq!(semver("3.6.16"), Some((3, 6, 16)));
    assert_eq!(semver("3.5.13-mem"), Some((3, 5, 13)));
    assert_eq!(semver("3.5"), None);
    assert_eq!(semver("v3.5.1"), None);
}

#[tokio::test]
async fn status_reports_an_etcd_version_and_itself_as_leader() {
    let s = server!();
    let mut c = s.client().await;
    // Even an empty store has a size: etcdctl's `endpoint status` divides by it.
    let empty = c.status().await.unwrap();
    assert!(empty.db_size() > 0, "db_size of an empty store: {}", empty.db_size());
    assert_eq!(rev(empty.header()), 1);
    put(&mut c, "a", "1").await;
    put(&mut c, "b", "1").await;
    let st = c.status().await.unwrap();
    let version =
        semver(st.version()).unwrap_or_else(|| panic!("version {:?} is not X.Y.Z", st.version()));
    // Kubernetes and kubeadm check the etcd version; 3.5.13 is the oldest they accept quietly.
    assert!(version >= (3, 5, 13), "version {:?} < 3.5.13", st.version());
    let h = st.header().expect("header");
    assert_eq!(h.revision(), 3);
    assert_ne!(h.member_id(), 0);
    assert_eq!(st.leader(), h.member_id(), "a single member leads itself");
    assert!(st.db_size() > 0, "db_size {}", st.db_size());
    assert!(!st.is_learner());
    assert!(st.errors().is_empty(), "{:?}", st.errors());
    assert!(st.raft_term() >= 1 && h.raft_term() >= 1);
    // Status reads nothing and writes nothing.
    assert_eq!(current_rev(&mut c).await, 3);
}

#[tokio::test]
async fn alarm_list_is_empty() {
    let s = server!();
    let mut c = s.client().await;
    put(&mut c, "a", "1").await;
    let a = c.alarm(AlarmAction::Get, AlarmType::None, None).await.unwrap();
    assert!(a.alarms().is_empty());
    assert_eq!(rev(a.header()), 2);
}

#[tokio::test]
async fn defragment_succeeds_and_changes_nothing() {
    let s = server!();
    let mut c = s.client().await;
    put(&mut c, "a", "1").await;
    put(&mut c, "a", "2").await;
    c.compact(3, None).await.unwrap();
    let before = c.get("\0", Some(GetOptions::new().with_all_keys())).await.unwrap();
    c.defragment().await.expect("defragment");
    let after = c.get("\0", Some(GetOptions::new().with_all_keys())).await.unwrap();
    assert_eq!(kvs(after.kvs()), kvs(before.kvs()));
    assert_eq!(kvs(after.kvs()), vec![kv("a", "2", 2, 3, 2)]);
    assert_eq!(rev(after.header()), 3);
}

#[tokio::test]
async fn hash_and_hash_kv() {
    let s = server!();
    let mut c = s.client().await;
    let empty = c.hash_kv(0).await.unwrap();
    assert_eq!((rev(empty.header()), empty.hash_revision()), (1, 1));
    // A store that was never compacted reports compact revision -1, as etcd's mvcc does.
    assert_eq!(empty.compact_version(), -1);
    put(&mut c, "a", "1").await; // 2
    put(&mut c, "b", "1").await; // 3
    let h3 = c.hash_kv(3).await.unwrap();
    assert_eq!((rev(h3.header()), h3.hash_revision()), (3, 3));
    assert_eq!(c.hash_kv(0).await.unwrap().hash(), h3.hash(), "revision 0 means the latest");
    assert_eq!(c.hash_kv(3).await.unwrap().hash(), h3.hash(), "deterministic");
    put(&mut c, "a", "2").await; // 4
    let h4 = c.hash_kv(4).await.unwrap();
    assert_ne!(h4.hash(), h3.hash(), "a write changes the hash");
    // The hash at a revision does not change when later revisions are written.
    let h3_again = c.hash_kv(3).await.unwrap();
    assert_eq!(
        (h3_again.hash(), h3_again.hash_revision(), rev(h3_again.header())),
        (h3.hash(), 3, 4)
    );
    assert_err(c.hash_kv(5).await, Code::OutOfRange, E_FUTURE);
    // Physical, so the compaction has finished when it returns: etcd compacts in the background
    // and writes a marker its Hash covers, so a job still running could change the hash
    // between the two hash() calls below.
    c.compact(3, Some(CompactionOptions::new().with_physical())).await.unwrap();
    assert_err(c.hash_kv(2).await, Code::OutOfRange, E_COMPACTED);
    let after = c.hash_kv(0).await.unwrap();
    assert_eq!((after.compact_version(), after.hash_revision(), rev(after.header())), (3, 4, 4));

    let h = c.hash().await.unwrap();
    assert_eq!(rev(h.header()), 4);
    assert_eq!(c.hash().await.unwrap().hash(), h.hash(), "deterministic");
    assert_eq!(current_rev(&mut c).await, 4);
}

#[tokio::test]
async fn member_list_has_one_member_with_the_advertised_url() {
    let advertised = "http://10.11.12.13:23790";
    let s = server!(["--advertise-client-urls", advertised, "--name", "member-under-test"]);
    let mut c = s.client().await;
    let m = c.member_list().await.unwrap();
    let h = m.header().expect("header");
    let members = m.members();
    assert_eq!(members.len(), 1, "{members:?}");
    let me = &members[0];
    assert_eq!(me.id(), h.member_id());
    assert_eq!(me.name(), "member-under-test");
    assert_eq!(me.client_urls(), [advertised.to_string()]);
    assert!(!me.is_learner());
    let st = c.status().await.unwrap();
    assert_eq!((st.leader(), st.header().unwrap().member_id()), (me.id(), me.id()));
    assert_eq!(st.header().unwrap().cluster_id(), h.cluster_id());
}

#[tokio::test]
async fn auth_is_disabled() {
    let s = server!();
    let mut raw = s.raw_clients().await;
    let st = raw.auth.auth_status(pb::AuthStatusRequest {}).await.unwrap().into_inner();
    assert!(!st.enabled);
    assert_eq!(st.header.map(|h| h.revision), Some(1));
    assert_status(
        raw.auth
            .authenticate(pb::AuthenticateRequest { name: "root".into(), password: "pw".into() })
            .await,
        Code::FailedPrecondition,
        E_AUTH_NOT_ENABLED,
    );
    // Through etcd-client too (it authenticates on connect when given a user).
    let r = etcd_client::Client::connect(
        [s.endpoint()],
        Some(etcd_client::ConnectOptions::new().with_user("root", "pw")),
    )
    .await;
    match r {
        Err(e) => assert_eq!(status_of(&e), (Code::FailedPrecondition, E_AUTH_NOT_ENABLED.into())),
        Ok(_) => panic!("authenticating against a server without auth must fail"),
    }
}

/// While auth is disabled users and roles are managed by anyone (as in etcd), and enabling it
/// needs a root user first. Runs against either target: both answer the same.
#[tokio::test]
async fn auth_management_while_disabled() {
    let s = server!();
    let mut raw = s.raw_clients().await;
    let a = &mut raw.auth;
    let e = a.auth_enable(pb::AuthEnableRequest {}).await.expect_err("no root user");
    assert_eq!(
        (e.code(), e.message()),
        (Code::FailedPrecondition, "etcdserver: root user does not exist")
    );
    let name = || "u".to_string();
    a.user_add(pb::AuthUserAddRequest { name: name(), password: "p".into(), ..Default::default() })
        .await
        .expect("UserAdd");
    let roles = a.user_get(pb::AuthUserGetRequest { name: name() }).await.expect("UserGet");
    assert!(roles.into_inner().roles.is_empty());
    a.role_add(pb::AuthRoleAddRequest { name: name() }).await.expect("RoleAdd");
    let e = a.role_add(pb::AuthRoleAddRequest { name: name() }).await.expect_err("twice");
    assert_eq!(
        (e.code(), e.message()),
        (Code::FailedPrecondition, "etcdserver: role name already exists")
    );
    let st = a.auth_status(pb::AuthStatusRequest {}).await.unwrap().into_inner();
    assert_eq!((st.enabled, st.auth_revision), (false, 3), "one revision per change");
}

async fn call_path(ch: tonic::transport::Channel, path: &'static str) -> tonic::Status {
    let mut g = tonic::client::Grpc::new(ch);
    g.ready().await.expect("channel ready");
    let r: Result<tonic::Response<pb::StatusResponse>, tonic::Status> = g
        .unary(
            tonic::Request::new(pb::StatusRequest {}),
            tonic::codegen::http::uri::PathAndQuery::from_static(path),
            tonic_prost::ProstCodec::default(),
        )
        .await;
    r.expect_err(path)
}

#[tokio::test]
async fn unknown_methods_are_unimplemented() {
    let s = server!();
    let raw = s.raw_clients().await;
    for path in ["/etcdserverpb.KV/NoSuchMethod", "/etcdserverpb.NoSuchService/Range", "/x.Y/Z"] {
        let st = call_path(raw.channel.clone(), path).await;
        assert_eq!(st.code(), Code::Unimplemented, "{path}: {st:?}");
    }
    // The connection is still usable afterwards.
    let mut c = s.client().await;
    assert_eq!(current_rev(&mut c).await, 1);
}

#[tokio::test]
async fn a_second_listen_url_serves_the_same_store() {
    let s = server!([
        "--listen-client-urls",
        "http://127.0.0.1:0,http://127.0.0.2:0",
        "--advertise-client-urls",
        "http://127.0.0.1:2379"
    ]);
    // The harness connects to the first address it saw; both listeners must work, and share data.
    let mut c = s.client().await;
    put(&mut c, "shared", "1").await;
    // (Each listener logs mem_etcd's ready line and etcd's "serving client traffic" line; the
    // harness may not have read the second listener's yet when the first one serves.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (addrs, log) = loop {
        let log = s.log_tail();
        let addrs: std::collections::BTreeSet<std::net::SocketAddr> = log
            .lines()
            .filter(|l| {
                l.contains("ready to serve client requests") || l.contains("serving client traffic")
            })
            .filter_map(parse_address)
            .collect();
        if addrs.len() >= 2 || std::time::Instant::now() > deadline {
            break (addrs, log);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(addrs.len(), 2, "expected two listeners' addresses:\n{log}");
    for a in addrs {
        let mut c2 = etcd_client::Client::connect([format!("http://{a}")], None).await.unwrap();
        let r = c2.get("shared", None).await.unwrap();
        assert_eq!(
            (kvs(r.kvs()), rev(r.header())),
            (vec![kv("shared", "1", 2, 2, 1)], 2),
            "via {a}"
        );
    }
}

#[tokio::test]
async fn logs_are_plain_text_when_not_a_tty() {
    let s = server!();
    let mut c = s.client().await;
    put(&mut c, "a", "1").await;
    let log = s.log_tail();
    assert!(!log.is_empty());
    assert!(!log.contains('\u{1b}'), "ANSI escape codes in a piped log:\n{log}");
}

/// With no flags at all, mem_etcd serves on 127.0.0.1:2379 (etcd's default client URL).
#[tokio::test]
async fn no_flags_serves_on_the_default_port() {
    if target() != Kind::MemEtcd {
        return;
    }
    if std::net::TcpListener::bind("127.0.0.1:2379").is_err() {
        loud(&format!(
            "SKIPPED {}: 127.0.0.1:2379 is in use on this machine, cannot check the default port",
            std::thread::current().name().unwrap_or("?")
        ));
        return;
    }
    let s = Server::start_without_defaults(Kind::MemEtcd, &[]).await;
    assert_eq!(s.addr(), "127.0.0.1:2379".parse().unwrap());
    let mut c = s.client().await;
    assert_eq!(current_rev(&mut c).await, 1);
}
