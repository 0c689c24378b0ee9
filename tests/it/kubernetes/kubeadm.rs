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
//! Each node has an address of its own in 127.0.0.0/8 (as each control-plane node has its own
//! IP) and ports of its own (on one machine the nodes cannot share 127.0.0.1:2379). The cluster
//! is driven by the real etcdctl over mutual TLS, as kubeadm drives it with the Go client. The
//! same test runs against real etcd 3.6, which proves the expectations.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

use crate::support::free_ports;
use crate::support::*;
use crate::tools::etcdctl::etcdctl;

/// The PKI kubeadm makes under /etc/kubernetes/pki/etcd: one CA, a server and a peer certificate
/// per node (here one of each for every node's address), and the client certificate
/// kube-apiserver and kubeadm's own etcd client use.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new(ips: &[&str]) -> Pki {
        let dir = tempfile::Builder::new().prefix("mem_etcd-kubeadm-").tempdir().unwrap();
        let write = |name: &str, pem: String| std::fs::write(dir.path().join(name), pem).unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "etcd-ca");
        write("ca.crt", ca.self_signed(&ca_key).unwrap().pem());
        let issuer = Issuer::new(ca, ca_key);
        let mut sans = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        sans.extend(ips.iter().map(|s| s.to_string()));
        let leaf = |name: &str, cn: &str, sans: &[String]| {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(sans.to_vec()).unwrap();
            p.distinguished_name.push(DnType::CommonName, cn);
            p.extended_key_usages = vec![
                rcgen::ExtendedKeyUsagePurpose::ServerAuth,
                rcgen::ExtendedKeyUsagePurpose::ClientAuth,
            ];
            if sans.is_empty() {
                // A client certificate, as kubeadm's healthcheck-client.
                p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
            }
            write(&format!("{name}.crt"), p.signed_by(&key, &issuer).unwrap().pem());
            write(&format!("{name}.key"), key.serialize_pem());
        };
        leaf("server", "control-plane", &sans);
        leaf("peer", "control-plane", &sans);
        leaf("healthcheck-client", "kube-etcd-healthcheck-client", &[]);
        Pki { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_string()
    }
}

/// One control-plane node's etcd: its address, ports, data directory and process.
struct Node {
    name: String,
    ip: String,
    client_port: u16,
    peer_port: u16,
    metrics_port: u16,
    data: tempfile::TempDir,
    child: Option<Child>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Node {
    fn new(i: usize) -> Node {
        let ports = free_ports(3);
        Node {
            name: format!("cp-{i}"),
            // 127.0.0.0/8 is loopback: every address in it reaches this machine only.
            ip: format!("127.0.0.{}", 11 + i),
            client_port: ports[0],
            peer_port: ports[1],
            metrics_port: ports[2],
            data: tempfile::Builder::new().prefix("mem_etcd-kubeadm-data-").tempdir().unwrap(),
            child: None,
            log: Arc::default(),
        }
    }

    fn peer_url(&self) -> String {
        format!("https://{}:{}", self.ip, self.peer_port)
    }

    fn client_url(&self) -> String {
        format!("https://{}:{}", self.ip, self.client_port)
    }

    /// kubeadm 1.36's `getEtcdCommand`, argument for argument (kubeadm sorts them by name), for
    /// a node whose etcd joins the members `initial` (`None`: the first node, alone).
    fn kubeadm_args(&self, pki: &Pki, initial: Option<&str>) -> Vec<String> {
        let mut args = vec![
            ("advertise-client-urls", self.client_url()),
            ("cert-file", pki.path("server.crt")),
            ("client-cert-auth", "true".into()),
            ("data-dir", self.data.path().join("etcd").to_str().unwrap().to_string()),
            ("feature-gates", "InitialCorruptCheck=true".into()),
            ("initial-advertise-peer-urls", self.peer_url()),
            ("initial-cluster", format!("{}={}", self.name, self.peer_url())),
            ("key-file", pki.path("server.key")),
            (
                "listen-client-urls",
                format!("https://127.0.0.1:{},{}", self.client_port, self.client_url()),
            ),
            ("listen-metrics-urls", format!("http://127.0.0.1:{}", self.metrics_port)),
            ("listen-peer-urls", self.peer_url()),
            ("name", self.name.clone()),
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

    fn start(&mut self, bin: &Path, pki: &Pki, initial: Option<&str>) {
        let args = self.kubeadm_args(pki, initial);
        let mut cmd = Command::new(bin);
        cmd.args(&args).current_dir(self.data.path());
        for (k, _) in std::env::vars_os() {
            if k.to_str().is_some_and(|k| k.starts_with("ETCD")) {
                cmd.env_remove(k);
            }
        }
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        self.log = drain_lines(&mut child);
        self.child = Some(child);
    }

    fn log_tail(&self) -> String {
        let log = self.log.lock().unwrap();
        log[log.len().saturating_sub(60)..].join("\n")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// etcdctl over mutual TLS with kubeadm's health-check client certificate.
fn ctl(pki: &Pki, endpoints: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let bin = peer_binary("etcdctl").expect("etcdctl peer");
    let (ca, cert, key) = (
        format!("--cacert={}", pki.path("ca.crt")),
        format!("--cert={}", pki.path("healthcheck-client.crt")),
        format!("--key={}", pki.path("healthcheck-client.key")),
    );
    let mut all = vec![ca.as_str(), cert.as_str(), key.as_str()];
    all.extend(args);
    etcdctl(&bin, endpoints, &all, None)
}

/// Runs `args` until etcdctl succeeds or `within` passes; returns stdout.
async fn ctl_until(
    pki: &Pki,
    endpoints: &str,
    args: &[&str],
    within: Duration,
    nodes: &[&Node],
) -> String {
    let start = Instant::now();
    loop {
        let (code, out, err) = ctl(pki, endpoints, args);
        if code == Some(0) {
            return out;
        }
        if start.elapsed() > within {
            let logs: Vec<String> =
                nodes.iter().map(|n| format!("--- {}:\n{}", n.name, n.log_tail())).collect();
            panic!("etcdctl {args:?} at {endpoints} kept failing: {out}{err}\n{}", logs.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The keys under /registry as one member serves them (serializable: that member's own state),
/// with everything but the header: key, value, revisions, version, lease.
fn registry_on(pki: &Pki, node: &Node) -> serde_json::Value {
    let (code, out, err) = ctl(
        pki,
        &node.client_url(),
        &["get", "/registry/", "--prefix", "--consistency=s", "-w", "json"],
    );
    assert_eq!(code, Some(0), "get on {}: {out}{err}\n{}", node.name, node.log_tail());
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["kvs"].clone()
}

/// The member id (hex, as `member promote` takes it) of the member with `peer_url`.
fn member_id(pki: &Pki, endpoints: &str, peer_url: &str) -> Option<String> {
    let (code, out, _) = ctl(pki, endpoints, &["member", "list", "-w", "json"]);
    if code != Some(0) {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&out).ok()?;
    v["members"].as_array()?.iter().find_map(|m| {
        let urls = m["peerURLs"].as_array()?;
        let id = m["ID"].as_u64()?;
        urls.iter().any(|u| u == peer_url).then(|| format!("{id:x}"))
    })
}

async fn kubeadm_grows_a_member_alone_to_three(kind: Kind) {
    let bin = match kind {
        Kind::MemEtcd => PathBuf::from(env!("CARGO_BIN_EXE_mem_etcd")),
        Kind::Etcd => peer_binary("etcd").expect("etcd peer"),
    };
    let mut nodes: Vec<Node> = (0..3).map(Node::new).collect();
    let ips: Vec<&str> = nodes.iter().map(|n| n.ip.as_str()).collect();
    let pki = Pki::new(&ips);
    let wait = Duration::from_secs(60);

    // kubeadm init: the first node's etcd alone.
    nodes[0].start(&bin, &pki, None);
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
        nodes[j].start(&bin, &pki, Some(&initial.join(",")));
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

/// base64 of `s`, as etcdctl's JSON writes keys and values.
fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
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
