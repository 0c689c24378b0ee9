//! An etcd pod as Kubernetes' installers run one, on this machine: its node's address in
//! 127.0.0.0/8 (every address there reaches this machine only; each control-plane node has an
//! IP of its own) with ports of its own (on one machine the pods cannot share 2379), the PKI
//! the installers make, a data directory, and the real etcdctl over mutual TLS, as the
//! installers drive their members with the Go client. kubeadm's flow and k0smotron's run on it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

use crate::support::*;
use crate::tools::etcdctl::etcdctl;

/// The server a pod of `kind` runs.
pub fn server_binary(kind: Kind) -> PathBuf {
    match kind {
        Kind::MemEtcd => PathBuf::from(env!("CARGO_BIN_EXE_mem_etcd")),
        Kind::Etcd => peer_binary("etcd").expect("etcd peer"),
    }
}

/// The PKI of an installer (kubeadm's /etc/kubernetes/pki/etcd, k0smotron's secrets): one CA,
/// a server and a peer certificate valid for every node's address, and a client certificate
/// (kubeadm's health-check client, which etcdctl presents here).
pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    pub fn new(ips: &[&str]) -> Pki {
        let dir = tempfile::Builder::new().prefix("mem_etcd-pki-").tempdir().unwrap();
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

    pub fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_string()
    }
}

/// One pod's etcd: its name, address, ports, data directory and process.
pub struct Node {
    pub name: String,
    pub ip: String,
    pub client_port: u16,
    pub peer_port: u16,
    pub metrics_port: u16,
    pub data: tempfile::TempDir,
    child: Option<Child>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Node {
    pub fn new(name: String, ip: String) -> Node {
        let ports = free_ports(3);
        Node {
            name,
            ip,
            client_port: ports[0],
            peer_port: ports[1],
            metrics_port: ports[2],
            data: tempfile::Builder::new().prefix("mem_etcd-pod-data-").tempdir().unwrap(),
            child: None,
            log: Arc::default(),
        }
    }

    pub fn peer_url(&self) -> String {
        format!("https://{}:{}", self.ip, self.peer_port)
    }

    pub fn client_url(&self) -> String {
        format!("https://{}:{}", self.ip, self.client_port)
    }

    /// Starts `bin` with `args` and, of the environment, only `env` among the `ETCD*`
    /// variables (as a container gets its own).
    pub fn start(&mut self, bin: &Path, args: &[String], env: &[(&str, String)]) {
        let mut cmd = Command::new(bin);
        cmd.args(args).current_dir(self.data.path());
        for (k, _) in std::env::vars_os() {
            if k.to_str().is_some_and(|k| k.starts_with("ETCD")) {
                cmd.env_remove(k);
            }
        }
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        self.log = drain_lines(&mut child);
        self.child = Some(child);
    }

    /// Stops the process as the kubelet stops a container: SIGTERM, then SIGKILL after the
    /// grace period (here 10 s).
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the process runs (was started and has not exited).
    pub fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    pub fn log_tail(&self) -> String {
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

/// etcdctl over mutual TLS with the client certificate.
pub fn ctl(pki: &Pki, endpoints: &str, args: &[&str]) -> (Option<i32>, String, String) {
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
pub async fn ctl_until(
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
pub fn registry_on(pki: &Pki, node: &Node) -> serde_json::Value {
    let (code, out, err) = ctl(
        pki,
        &node.client_url(),
        &["get", "/registry/", "--prefix", "--consistency=s", "-w", "json"],
    );
    assert_eq!(code, Some(0), "get on {}: {out}{err}\n{}", node.name, node.log_tail());
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["kvs"].clone()
}

/// The members as `member list -w json` gives them (`None` if etcdctl failed).
pub fn members(pki: &Pki, endpoints: &str) -> Option<Vec<serde_json::Value>> {
    let (code, out, _) = ctl(pki, endpoints, &["member", "list", "-w", "json"]);
    if code != Some(0) {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&out).ok()?;
    v["members"].as_array().cloned()
}

/// The member id (hex, as `member promote` and `member remove` take it) of the member with
/// `peer_url`.
pub fn member_id(pki: &Pki, endpoints: &str, peer_url: &str) -> Option<String> {
    members(pki, endpoints)?.iter().find_map(|m| {
        let urls = m["peerURLs"].as_array()?;
        let id = m["ID"].as_u64()?;
        urls.iter().any(|u| u == peer_url).then(|| format!("{id:x}"))
    })
}

/// base64 of `s`, as etcdctl's JSON writes keys and values.
pub fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}
