//! v3 discovery (`--discovery-endpoints`, `--discovery-token`): three members that find each
//! other through a running etcd 3.6 (the discovery service, with auth on), compared with etcd's
//! own members doing the same on the same ports: the same members and ids, the same registry,
//! and a fourth member refused because the cluster is full.

use std::time::Duration;

use crate::support::*;

const TOKEN: &str = "8A591FAB-1D72-41FA-BDF2-A27162FDA1E0";
const SIZE: usize = 3;

/// What a cluster founded through discovery looks like from outside.
#[derive(Debug, PartialEq)]
struct Founded {
    /// (id, name, peer URLs) of each member, by id.
    members: Vec<(u64, String, Vec<String>)>,
    cluster_id: u64,
    /// The registry's keys and values after the founding.
    registry: Vec<(String, String)>,
}

async fn service_client(service: &Server) -> etcd_client::Client {
    let opts = etcd_client::ConnectOptions::new().with_user("root", "secret");
    etcd_client::Client::connect([service.endpoint()], Some(opts)).await.expect("connect")
}

/// The flags of member `i` (ports `ports[2i]`, `ports[2i+1]`), founding through `service`.
fn args(i: usize, ports: &[u16], dir: &DataDir, service: &Server) -> Vec<String> {
    let client = format!("http://127.0.0.1:{}", ports[2 * i]);
    let peer = format!("http://127.0.0.1:{}", ports[2 * i + 1]);
    vec![
        format!("--name=m{i}"),
        format!("--data-dir={}", dir.path().display()),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--discovery-endpoints={}", service.endpoint()),
        format!("--discovery-token={TOKEN}"),
        // (etcd 3.6 takes a `root:secret` given to --discovery-user alone as the name.)
        "--discovery-user=root".to_string(),
        "--discovery-password=secret".to_string(),
        "--log-level=info".to_string(),
    ]
}

async fn found(kind: Kind, service: &Server, ports: &[u16]) -> Founded {
    let mut admin = service_client(service).await;
    let size_key = format!("/_etcd/registry/{TOKEN}/_config/size");
    admin.put(size_key, SIZE.to_string(), None).await.expect("put the size");
    let dirs: Vec<DataDir> = (0..=SIZE).map(|_| DataDir::new()).collect();
    let argv: Vec<Vec<String>> = (0..=SIZE).map(|i| args(i, ports, &dirs[i], service)).collect();
    let starts = (0..SIZE).map(|i| {
        let a: Vec<&str> = argv[i].iter().map(String::as_str).collect();
        let dir = &dirs[i];
        async move { dir.start_kind_without_defaults(kind, &a).await }
    });
    let servers = futures::future::join_all(starts).await;

    // One cluster: a write through one member is read through another.
    let mut first = servers[0].client().await;
    first.put("founded", "yes", None).await.expect("put");
    let mut last = servers[SIZE - 1].client().await;
    let got = last.get("founded", None).await.expect("get");
    assert_eq!(keys(got.kvs()), ["founded"], "{kind:?}: a write seen through every member");
    let list = first.member_list().await.expect("member list");
    let mut members: Vec<(u64, String, Vec<String>)> = list
        .members()
        .iter()
        .map(|m| (m.id(), m.name().to_string(), m.peer_urls().to_vec()))
        .collect();
    members.sort();
    let cluster_id = list.header().expect("header").cluster_id();

    // A fourth member finds the cluster full and gives up, as etcd's does.
    let a: Vec<&str> = argv[SIZE].iter().map(String::as_str).collect();
    let refused = dirs[SIZE]
        .start_kind_expecting_failure_without_defaults(kind, &a, Duration::from_secs(30))
        .await;
    assert!(!refused.status.success(), "{kind:?}: {}", refused.output());
    assert!(
        !refused.grep("discovery: cluster is full").is_empty(),
        "{kind:?}: the fourth member's words:\n{}",
        refused.output()
    );

    let prefix = format!("/_etcd/registry/{TOKEN}/");
    let opts = etcd_client::GetOptions::new().with_prefix();
    let got = admin.get(prefix.as_str(), Some(opts)).await.expect("registry");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let registry = got.kvs().iter().map(|kv| (text(kv.key()), text(kv.value()))).collect();
    for s in servers {
        s.stop(Duration::from_secs(10)).await;
    }
    // The next cluster registers afresh under the same token, on the same ports.
    let opts = etcd_client::DeleteOptions::new().with_prefix();
    admin.delete(prefix.as_str(), Some(opts)).await.expect("clear the registry");
    Founded { members, cluster_id, registry }
}

#[tokio::test(flavor = "multi_thread")]
async fn members_found_each_other_through_v3_discovery_as_etcds_do() {
    let Some(service) = Server::start(Kind::Etcd, &[]).await else { return };
    let mut c = service.client().await;
    c.user_add("root", "secret", None).await.expect("user add");
    c.user_grant_role("root", "root").await.expect("grant root");
    c.auth_enable().await.expect("auth enable");
    let ports = free_ports(2 * (SIZE + 1));
    let etcd = found(Kind::Etcd, &service, &ports).await;
    let ours = found(Kind::MemEtcd, &service, &ports).await;
    assert_eq!(ours.members.len(), SIZE);
    assert_eq!(ours.registry.len(), SIZE + 1, "the size and one key per founder");
    assert_eq!(ours, etcd, "mem_etcd's members against etcd's, founded the same way");
}

/// Flags etcd refuses together, refused with its words.
#[tokio::test]
async fn discovery_flags_are_checked_as_etcd_checks_them() {
    for (flags, words) in [
        (
            &["--discovery-token=t"][..],
            "both --discovery-token and --discovery-endpoints must be set",
        ),
        (
            &["--discovery-endpoints=http://127.0.0.1:1"][..],
            "both --discovery-token and --discovery-endpoints must be set",
        ),
        (
            &[
                "--discovery-endpoints=http://127.0.0.1:1",
                "--discovery-token=t",
                "--initial-cluster=it=http://127.0.0.1:2380",
            ][..],
            "multiple discovery or bootstrap flags are set",
        ),
    ] {
        let dir = DataDir::new();
        let out = dir.start_expecting_failure(flags).await;
        assert!(!out.status.success());
        assert!(out.output().contains(words), "{flags:?}:\n{}", out.output());
    }
}
