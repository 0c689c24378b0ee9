//! kubeadm's stacked etcd (issue 25). The first control-plane node's etcd starts alone with the
//! exact arguments kubeadm 1.36 writes into its static pod (`getEtcdCommand` in
//! cmd/kubeadm/app/phases/etcd/local.go: TLS with client certificates on both ports, the
//! `InitialCorruptCheck` feature gate, a metrics URL, `--snapshot-count`), and grows to three
//! members as `kubeadm join --control-plane` grows it: each new member is added as a learner
//! through the members already there, started with the member list it was given and
//! `--initial-cluster-state existing`, and promoted once it has caught up (kubeadm retries the
//! promote until the cluster takes it). Everything written before the growth must then be on every
//! member, with its revisions, and the cluster must take writes through the new members.
//!
//! The nodes are `etcd_pod`'s, driven by the real etcdctl over mutual TLS. The same test runs
//! against real etcd 3.6, which proves the expectations.

use std::time::{Duration, Instant};

use super::etcd_pod::*;
use crate::support::*;

/// kubeadm 1.36's `getEtcdCommand`, argument for argument (kubeadm sorts them by name), for
/// a node whose etcd joins the members `initial` (`None`: the first node, alone).
fn kubeadm_args(node: &Node, pki: &Pki, initial: Option<&str>) -> Vec<String> {
    let mut args = vec![
        ("advertise-client-urls", node.client_url()),
        ("cert-file", pki.path("server.crt")),
        ("client-cert-auth", "true".into()),
        ("data-dir", node.data.path().join("etcd").to_str().unwrap().to_string()),
        ("feature-gates", "InitialCorruptCheck=true".into()),
        ("initial-advertise-peer-urls", node.peer_url()),
        ("initial-cluster", format!("{}={}", node.name, node.peer_url())),
        ("key-file", pki.path("server.key")),
        (
            "listen-client-urls",
            format!("https://127.0.0.1:{},{}", node.client_port, node.client_url()),
        ),
        ("listen-metrics-urls", format!("http://127.0.0.1:{}", node.metrics_port)),
        ("listen-peer-urls", node.peer_url()),
        ("name", node.name.clone()),
        ("peer-cert-file", pki.path("peer.crt")),
        ("peer-client-cert-auth", "true".into()),
        ("peer-key-file", pki.path("peer.key")),
        ("peer-trusted-ca-file", pki.path("ca.crt")),
        ("snapshot-count", "10000".into()),
        ("trusted-ca-file", pki.path("ca.crt")),
        ("watch-progress-notify-interval", "5s".into()),
    ];
    if let Some(initial) = initial {
        args.retain(|(k, _)| *k != "initial-cluster");
        args.push(("initial-cluster", initial.to_string()));
        args.push(("initial-cluster-state", "existing".into()));
        args.sort_by_key(|(k, _)| *k);
    }
    args.into_iter().map(|(k, v)| format!("--{k}={v}")).collect()
}

async fn kubeadm_grows_a_member_alone_to_three(kind: Kind) {
    let bin = server_binary(kind);
    let mut nodes: Vec<Node> =
        (0..3).map(|i| Node::new(format!("cp-{i}"), format!("127.0.0.{}", 11 + i))).collect();
    let ips: Vec<&str> = nodes.iter().map(|n| n.ip.as_str()).collect();
    let pki = Pki::new(&ips);
    let wait = Duration::from_secs(60);

    // kubeadm init: the first node's etcd alone.
    let args = kubeadm_args(&nodes[0], &pki, None);
    nodes[0].start(&bin, &args, &[]);
    let first = nodes[0].client_url();
    ctl_until(&pki, &first, &["endpoint", "health"], wait, &[&nodes[0]]).await;

    // What the cluster holds before it grows: objects, one of them on a lease, then a
    // compaction-free history of updates.
    for i in 0..50 {
        let key = format!("/registry/pods/default/pod-{i}");
        let (code, out, err) = ctl(&pki, &first, &["put", &key, &format!("spec-{i}")]);
        assert_eq!(code, Some(0), "{out}{err}");
    }
    let (code, out, err) = ctl(&pki, &first, &["lease", "grant", "3600"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let lease = out.split_whitespace().nth(1).unwrap().to_string();
    let (code, out, err) = ctl(
        &pki,
        &first,
        &["put", "/registry/leases/kube-node-lease/cp-0", "renewed", "--lease", &lease],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    for i in 0..10 {
        let key = format!("/registry/pods/default/pod-{i}");
        let (code, out, err) = ctl(&pki, &first, &["put", &key, &format!("spec-{i}-v2")]);
        assert_eq!(code, Some(0), "{out}{err}");
    }
    let before = registry_on(&pki, &nodes[0]);
    assert_eq!(before.as_array().map(Vec::len), Some(51), "{before}");

    // The metrics URL kubeadm's probes and Prometheus scrape.
    let metrics = http_get(&format!("127.0.0.1:{}", nodes[0].metrics_port), "/metrics").await;
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");

    // kubeadm join --control-plane, twice.
    for j in 1..3 {
        let endpoints: Vec<String> = nodes[..j].iter().map(Node::client_url).collect();
        let endpoints = endpoints.join(",");
        let peer = nodes[j].peer_url();
        let name = nodes[j].name.clone();
        let refs: Vec<&Node> = nodes[..j].iter().collect();
        // AddMemberAsLearner (kubeadm retries it while the cluster says it is not ready).
        ctl_until(
            &pki,
            &endpoints,
            &["member", "add", &name, &format!("--peer-urls={peer}"), "--learner"],
            wait,
            &refs,
        )
        .await;
        let mut initial: Vec<String> =
            nodes[..=j].iter().map(|n| format!("{}={}", n.name, n.peer_url())).collect();
        initial.sort();
        let args = kubeadm_args(&nodes[j], &pki, Some(&initial.join(",")));
        nodes[j].start(&bin, &args, &[]);
        let id = member_id(&pki, &endpoints, &peer).expect("the learner in the member list");
        // MemberPromote: refused until the learner has caught up; kubeadm retries.
        let refs: Vec<&Node> = nodes[..=j].iter().collect();
        ctl_until(&pki, &endpoints, &["member", "promote", &id], wait, &refs).await;
        // WaitForClusterAvailable.
        let all: Vec<String> = nodes[..=j].iter().map(Node::client_url).collect();
        ctl_until(&pki, &all.join(","), &["endpoint", "health"], wait, &refs).await;
    }

    // Three voting members, none of them a learner.
    let (code, out, err) = ctl(&pki, &first, &["member", "list", "-w", "json"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let members: serde_json::Value = serde_json::from_str(&out).unwrap();
    let members = members["members"].as_array().unwrap();
    assert_eq!(members.len(), 3, "{out}");
    assert!(members.iter().all(|m| m["isLearner"].as_bool() != Some(true)), "{out}");

    // A write through the newest member reaches every member; then every member holds exactly
    // what the member alone held, plus that write.
    let last = nodes[2].client_url();
    let (code, out, err) = ctl(&pki, &last, &["put", "/registry/pods/default/after", "grown"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, err) = ctl(&pki, &first, &["get", "/registry/pods/default/after"]);
    assert_eq!(code, Some(0), "{out}{err}");
    for node in &nodes {
        let start = Instant::now();
        let kvs = loop {
            let kvs = registry_on(&pki, node);
            if kvs.as_array().map(Vec::len) == Some(52) || start.elapsed() > wait {
                break kvs;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let kvs = kvs.as_array().expect("kvs");
        assert_eq!(kvs.len(), 52, "{} holds {kvs:?}", node.name);
        let old: Vec<&serde_json::Value> = kvs
            .iter()
            .filter(|kv| kv["key"] != serde_json::json!(b64("/registry/pods/default/after")))
            .collect();
        let want: Vec<&serde_json::Value> = before.as_array().unwrap().iter().collect();
        assert_eq!(old, want, "{} differs from what the member alone held", node.name);
    }
    // The lease and its key came along.
    for node in &nodes {
        let (code, out, err) =
            ctl(&pki, &node.client_url(), &["lease", "timetolive", &lease, "--keys"]);
        assert_eq!(code, Some(0), "{out}{err}");
        assert!(out.contains("/registry/leases/kube-node-lease/cp-0"), "{}: {out}", node.name);
    }
}

/// `GET path` over plain HTTP/1.1; the whole answer.
async fn http_get(addr: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn kubeadm_stacked_etcd_grows_from_one_member_on_mem_etcd() {
    kubeadm_grows_a_member_alone_to_three(Kind::MemEtcd).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kubeadm_stacked_etcd_grows_from_one_member_on_etcd() {
    if peer_binary("etcd").is_none() {
        return;
    }
    kubeadm_grows_a_member_alone_to_three(Kind::Etcd).await;
}
