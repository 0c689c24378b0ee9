//! k0smotron's etcd (issue 50): a hosted control plane's own etcd as k0smotron runs it, with
//! `spec.etcd.image` pointing at mem_etcd (`deploy/hosted/k0smotron.yaml`).
//!
//! k0smotron runs the etcd of each hosted control plane as a StatefulSet. Each pod starts
//! `etcd` with the command line its entrypoint script builds: TLS with client certificates on
//! the client and peer ports, `--tls-min-version=TLS1.2`, `--enable-pprof=false`, periodic
//! compaction every 5 minutes, `--snapshot-count=10000`, the member list in
//! `ETCD_INITIAL_CLUSTER` and `ETCD_INITIAL_CLUSTER_STATE` set to `existing` once the data
//! directory holds the marker file `existing`. Before it, an init container looks for etcd's
//! database (`member/snap/db`); without one, if the running members answer `member list`, it
//! removes any member that has the pod's name, adds the pod (a voter, not a learner) and writes
//! the marker. The controller grows the set one pod at a time, each once the last is ready.
//!
//! mem_etcd keeps no `member/snap/db`, so every restart of one of its pods is removed and added
//! again before it starts; it joins as the member added for it (`raft::node::start`,
//! `replacement`) where etcd would stop for good. The test grows three pods, restarts each in
//! turn, and asks of mem_etcd what etcd 3.6 gives in the same steps: three started members
//! with the pods' names, every key with the same revisions on every member, and writes
//! through each pod. Each node listens on its own address in 127.0.0.0/8 where the pod listens
//! on 0.0.0.0 and is named by DNS (`etcd_pod`).

use std::path::Path;
use std::time::{Duration, Instant};

use super::etcd_pod::*;
use crate::support::*;

/// k0smotron's entrypoint command line for `node`, with the node's address in place of
/// 0.0.0.0 and of the pod's DNS names.
fn k0smotron_args(node: &Node, pki: &Pki) -> Vec<String> {
    let data = node.data.path().join("etcd");
    [
        format!("--name={}", node.name),
        format!("--listen-peer-urls={}", node.peer_url()),
        format!("--listen-client-urls={}", node.client_url()),
        format!("--advertise-client-urls={}", node.client_url()),
        format!("--initial-advertise-peer-urls={}", node.peer_url()),
        "--client-cert-auth=true".into(),
        "--tls-min-version=TLS1.2".into(),
        format!("--trusted-ca-file={}", pki.path("ca.crt")),
        format!("--cert-file={}", pki.path("server.crt")),
        format!("--key-file={}", pki.path("server.key")),
        format!("--peer-trusted-ca-file={}", pki.path("ca.crt")),
        format!("--peer-key-file={}", pki.path("peer.key")),
        format!("--peer-cert-file={}", pki.path("peer.crt")),
        "--peer-client-cert-auth=true".into(),
        "--enable-pprof=false".into(),
        "--auto-compaction-mode=periodic".into(),
        "--auto-compaction-retention=5m".into(),
        "--snapshot-count=10000".into(),
        format!("--data-dir={}", data.display()),
    ]
    .into()
}

/// k0smotron's init container for pod `j`, then its etcd container; `replicas` is the
/// StatefulSet's size (the members `ETCD_INITIAL_CLUSTER` names). The running pods are the
/// ones the Service reaches.
async fn start_pod(bin: &Path, pki: &Pki, nodes: &mut [Node], j: usize, replicas: usize) {
    let data = nodes[j].data.path().join("etcd");
    std::fs::create_dir_all(&data).unwrap();
    let marker = data.join("existing");
    let running: Vec<String> = nodes
        .iter_mut()
        .enumerate()
        .filter(|(i, _)| *i != j)
        .filter_map(|(_, n)| n.running().then(|| n.client_url()))
        .collect();
    let service = running.join(",");
    // The script stops at its first failing command (`set -e`), and the kubelet runs it again
    // until it succeeds: the cluster refuses to remove or add a voter until its members have
    // been connected for 5 s.
    let start = Instant::now();
    while let Err(e) = init_container(pki, &nodes[j], &service, &data) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{}'s init container: {e}",
            nodes[j].name
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let initial: Vec<String> =
        nodes[..replicas].iter().map(|n| format!("{}={}", n.name, n.peer_url())).collect();
    let state = if marker.exists() { "existing" } else { "new" };
    let env = [
        ("ETCD_INITIAL_CLUSTER", initial.join(",")),
        ("ETCD_INITIAL_CLUSTER_STATE", state.to_string()),
    ];
    let args = k0smotron_args(&nodes[j], pki);
    nodes[j].start(bin, &args, &env);
}

/// One run of k0smotron's init script for `node`, whose data directory is `data`, against the
/// members at `service`: `Err` where the script would stop.
fn init_container(pki: &Pki, node: &Node, service: &str, data: &Path) -> Result<(), String> {
    if data.join("member").join("snap").join("db").exists() || service.is_empty() {
        return Ok(());
    }
    // "Could not list members, assuming this is the first member or the cluster is not up yet".
    let Some(members) = super::etcd_pod::members(pki, service) else { return Ok(()) };
    let peer = node.peer_url();
    // The script greps `member list` for the pod's name, which its peer URL carries too.
    let same = members.iter().find(|m| {
        m["name"].as_str() == Some(&node.name)
            || m["peerURLs"].as_array().is_some_and(|u| u.iter().any(|u| u == &peer))
    });
    if let Some(id) = same.and_then(|m| m["ID"].as_u64()) {
        let (code, out, err) = ctl(pki, service, &["member", "remove", &format!("{id:x}")]);
        if code != Some(0) {
            return Err(format!("member remove: {out}{err}"));
        }
    }
    let add = ["member", "add", &node.name, &format!("--peer-urls={peer}")];
    let (code, out, err) = ctl(pki, service, &add);
    if code != Some(0) {
        return Err(format!("member add: {out}{err}"));
    }
    std::fs::write(data.join("existing"), b"").unwrap();
    Ok(())
}

/// The members with their names and whether each has started (published its name).
fn member_names(pki: &Pki, endpoints: &str) -> Vec<(String, String)> {
    let members = super::etcd_pod::members(pki, endpoints).expect("member list");
    let mut names: Vec<(String, String)> = members
        .iter()
        .map(|m| {
            let name = m["name"].as_str().unwrap_or("").to_string();
            let urls = m["peerURLs"].as_array().map(|u| u[0].to_string()).unwrap_or_default();
            (name, urls)
        })
        .collect();
    names.sort();
    names
}

async fn k0smotron_grows_and_restarts_every_pod(kind: Kind) {
    let bin = server_binary(kind);
    let mut nodes: Vec<Node> =
        (0..3).map(|i| Node::new(format!("kmc-etcd-{i}"), format!("127.0.0.{}", 41 + i))).collect();
    let ips: Vec<&str> = nodes.iter().map(|n| n.ip.as_str()).collect();
    let pki = Pki::new(&ips);
    let wait = Duration::from_secs(60);
    let all = |nodes: &[Node]| nodes.iter().map(Node::client_url).collect::<Vec<_>>().join(",");

    // The first pod, alone: its init container finds no member to ask.
    start_pod(&bin, &pki, &mut nodes, 0, 1).await;
    let first = nodes[0].client_url();
    ctl_until(&pki, &first, &["endpoint", "health"], wait, &[&nodes[0]]).await;
    for i in 0..30 {
        let key = format!("/registry/pods/kube-system/pod-{i}");
        let (code, out, err) = ctl(&pki, &first, &["put", &key, &format!("spec-{i}")]);
        assert_eq!(code, Some(0), "{out}{err}");
    }
    let (code, out, err) = ctl(&pki, &first, &["lease", "grant", "3600"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let lease = out.split_whitespace().nth(1).unwrap().to_string();
    let lease_key = "/registry/leases/kube-node-lease/worker-0";
    let (code, out, err) = ctl(&pki, &first, &["put", lease_key, "renewed", "--lease", &lease]);
    assert_eq!(code, Some(0), "{out}{err}");

    // The controller grows the set one pod at a time, each once the last is ready.
    for j in 1..3 {
        start_pod(&bin, &pki, &mut nodes, j, j + 1).await;
        let refs: Vec<&Node> = nodes[..=j].iter().collect();
        let url = nodes[j].client_url();
        ctl_until(&pki, &url, &["endpoint", "health"], wait, &refs).await;
    }
    let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
    let started = |pki: &Pki, endpoints: &str| -> Vec<String> {
        member_names(pki, endpoints).into_iter().map(|(n, _)| n).collect()
    };
    assert_eq!(started(&pki, &all(&nodes)), names);

    // Each pod restarts in turn (the founder in the middle), as a rolling update restarts
    // them; after each, the pod is ready, the cluster has the same three started members and
    // takes writes through the restarted pod.
    for (round, j) in [1, 0, 2].into_iter().enumerate() {
        let before = member_id(&pki, &nodes[(j + 1) % 3].client_url(), &nodes[j].peer_url());
        let t = Instant::now();
        nodes[j].stop().await;
        start_pod(&bin, &pki, &mut nodes, j, 3).await;
        let url = nodes[j].client_url();
        let refs: Vec<&Node> = nodes.iter().collect();
        ctl_until(&pki, &url, &["endpoint", "health"], wait, &refs).await;
        let ready = t.elapsed();
        let key = format!("/registry/configmaps/kube-system/after-restart-{round}");
        let out = ctl_until(&pki, &url, &["put", &key, "v"], wait, &refs).await;
        assert!(out.contains("OK"), "{out}");
        let after = member_id(&pki, &nodes[(j + 1) % 3].client_url(), &nodes[j].peer_url());
        // etcd keeps its database, so its init container leaves the member alone; mem_etcd's
        // member is removed, added again, and joins as the new member.
        let replaced = before != after;
        assert_eq!(
            replaced,
            kind == Kind::MemEtcd,
            "{} was {before:?}, is {after:?}",
            nodes[j].name
        );
        let start = Instant::now();
        loop {
            let now = started(&pki, &all(&nodes));
            if now == names {
                break;
            }
            assert!(start.elapsed() < wait, "members after restarting {}: {now:?}", nodes[j].name);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        say(&format!("{kind:?}: {} ready {ready:.1?} after its restart", nodes[j].name));
    }

    // Every member holds the same keys with the same revisions, the leased key among them.
    let want = registry_on(&pki, &nodes[0]);
    let count = want.as_array().map_or(0, Vec::len);
    assert_eq!(count, 31 + 3, "{want}");
    for node in &nodes[1..] {
        let start = Instant::now();
        let kvs = loop {
            let kvs = registry_on(&pki, node);
            if kvs == want || start.elapsed() > wait {
                break kvs;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(kvs, want, "{} differs from {}", node.name, nodes[0].name);
    }
    for node in &nodes {
        let (code, out, err) =
            ctl(&pki, &node.client_url(), &["lease", "timetolive", &lease, "--keys"]);
        assert_eq!(code, Some(0), "{out}{err}");
        assert!(out.contains(lease_key), "{}: {out}", node.name);
    }
    assert!(want.to_string().contains(&b64(lease_key)));
}

#[tokio::test(flavor = "multi_thread")]
async fn k0smotron_etcd_statefulset_grows_and_restarts_on_mem_etcd() {
    k0smotron_grows_and_restarts_every_pod(Kind::MemEtcd).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn k0smotron_etcd_statefulset_grows_and_restarts_on_etcd() {
    if peer_binary("etcd").is_none() {
        return;
    }
    k0smotron_grows_and_restarts_every_pod(Kind::Etcd).await;
}
