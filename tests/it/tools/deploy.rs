//! The files in deploy/, checked the way an operator uses them.
//!
//! * [`single_member_files_start_as_written`]: the argument lists of the single-member files
//!   (statefulset.yaml and its `# TLS:` variant, static-pod.yaml, mem_etcd.service and its
//!   commented TLS `ExecStart=`, the Dockerfile's `CMD`) start mem_etcd: each process logs
//!   "ready to serve client requests", and the probe paths the manifests use answer `ok` on the
//!   metrics listener the same arguments open.
//! * [`statefulset_cluster_args_form_a_cluster`]: statefulset-cluster.yaml's args, after
//!   Kubernetes' `$(POD_NAME)`/`$(POD_NAMESPACE)` expansion for the pods mem-etcd-0..2, form a
//!   3-member cluster (`etcdctl endpoint health --cluster`), with the names and URLs etcdctl
//!   shows as the pods would advertise them.
//! * [`static_pod_cluster_forms_a_tls_cluster`]: static-pod-cluster.yaml, filled in with the
//!   `sed` command its header gives for cp1..cp3, forms a 3-member cluster with TLS and client
//!   certificates on the client and peer ports (kubeadm's certificate layout, made here), and
//!   refuses a client without a certificate.
//! * [`systemd_env_files_form_a_cluster_and_the_runbook_works`]: mem_etcd-cluster.service with
//!   cluster-host{1,2,3}.env's variables (and nothing else) forms a cluster; then the README's
//!   operations on it: a rolling restart, `move-leader`, replacing a failed member (member
//!   remove, wipe, member add --learner, start with `existing` and the printed
//!   ETCD_INITIAL_CLUSTER, promote once caught up) and a backup.
//! * [`kubectl_server_dry_run_accepts_every_manifest`]: `kubectl apply --dry-run=server` of every
//!   manifest in deploy/kubernetes (and statefulset.yaml's TLS variant) against a real
//!   kube-apiserver 1.36 on mem_etcd; the objects the server returns carry exactly the argument
//!   lists the tests above started (so this file's small YAML reader reads what Kubernetes
//!   reads) and the wiring the README relies on (probes on the metrics port, the headless
//!   Service, the PodDisruptionBudget, anti-affinity); then the README's `kubectl patch`
//!   commands for replacing a StatefulSet member, run against a created StatefulSet.
//! * [`environment_variable_names_are_mem_etcds`]: every `ETCD_*`/`MEM_ETCD_*` name in deploy/
//!   is one `mem_etcd --help` lists (mem_etcd ignores unknown variables, so a typo would pass
//!   silently); the systemd units pass `systemd-analyze verify` when it is installed.
//!
//! Addresses. The files name pod DNS names, node addresses (10.0.0.11-13, `NODE_IP`) and fixed
//! ports (2379, 2380, 2381). Three members on one machine each get a loopback address of their
//! own (127.0.0.11-13 for the systemd hosts, 127.0.0.21-23 for the StatefulSet's pods,
//! 127.0.0.31-33 for the static pods' nodes), with client and peer ports that are free on all
//! three substituted for 2379 and 2380; what a file binds on 127.0.0.1 itself (the metrics
//! port, a loopback client URL) gets a free port per member. Certificate and data paths point
//! into temporary directories. Nothing else is changed: every flag and value the file gives is
//! passed as written. Only loopback addresses are used.
//!
//! The Kubernetes peers (kube-apiserver, kubectl) and etcdctl follow support.rs' peer policy.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use serde_json::Value;

use crate::operations::http_get;
use crate::support::{Kind, Server, free_ports_on, loud, peer_binary, wait_until};

const MEM_ETCD: &str = env!("CARGO_BIN_EXE_mem_etcd");
/// How long a member may take to log a line the test waits for.
const START_TIMEOUT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// Reading the files

/// A file under deploy/.
fn deploy_file(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy").join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn unquote(s: &str) -> String {
    let s = s.trim();
    for q in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(q).and_then(|s| s.strip_suffix(q)) {
            return inner.to_string();
        }
    }
    s.to_string()
}

/// The `command:` and `args:` lists of a manifest, in file order, as `(key, items)`: enough YAML
/// for these files (block lists of plain or quoted scalars; comment lines skipped, so the
/// commented-out `# TLS: - --flag` lines are not read).
fn yaml_lists(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        let indent = line.len() - t.len();
        let key = match t.trim_end() {
            "command:" => "command",
            "args:" => "args",
            _ => continue,
        };
        let mut items = Vec::new();
        while let Some(next) = lines.peek() {
            let nt = next.trim_start();
            if nt.is_empty() || nt.starts_with('#') {
                lines.next();
                continue;
            }
            let Some(item) = nt.strip_prefix("- ").filter(|_| next.len() - nt.len() >= indent)
            else {
                break;
            };
            items.push(unquote(item));
            lines.next();
        }
        out.push((key.to_string(), items));
    }
    out
}

/// The mem_etcd arguments of a manifest's only container: `args:`, or `command:` without the
/// binary.
fn manifest_args(text: &str) -> Vec<String> {
    let lists = yaml_lists(text);
    assert_eq!(lists.len(), 1, "one command or args list expected: {lists:?}");
    let (key, mut items) = lists.into_iter().next().unwrap();
    if key == "command" {
        assert_eq!(items.first().map(String::as_str), Some("/usr/local/bin/mem_etcd"));
        items.remove(0);
    }
    items
}

/// The arguments of a unit's `ExecStart=` after the binary, continuation lines joined;
/// `commented`: the commented-out variant (`#ExecStart=` and its `#` continuation lines).
fn exec_start(unit: &str, commented: bool) -> Vec<String> {
    let prefix = if commented { "#ExecStart=" } else { "ExecStart=" };
    let mut lines = unit.lines();
    let mut cmd = None;
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix(prefix) else { continue };
        let mut cur = rest.to_string();
        while let Some(head) = cur.strip_suffix('\\') {
            let next = lines.next().expect("a continuation line");
            let next = if commented { next.strip_prefix('#').expect("commented") } else { next };
            cur = format!("{head} {next}");
        }
        assert!(cmd.is_none(), "two {prefix} lines");
        cmd = Some(cur);
    }
    let cmd = cmd.unwrap_or_else(|| panic!("no {prefix} line"));
    let mut words: Vec<String> = cmd.split_whitespace().map(String::from).collect();
    assert_eq!(words.first().map(String::as_str), Some("/usr/local/bin/mem_etcd"));
    words.remove(0);
    words
}

/// The variables of a systemd EnvironmentFile (`VAR=value` lines; comments skipped).
fn env_file(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap_or_else(|| panic!("not VAR=value: {l}"));
            (k.to_string(), unquote(v))
        })
        .collect()
}

/// Replaces, in order, each `from` with its `to` where `from` is not followed by a digit (so
/// that `:2379` does not match in `:23790`, nor `127.0.0.1` in `127.0.0.11`).
fn subst(text: &str, pairs: &[(String, String)]) -> String {
    let mut s = text.to_string();
    for (from, to) in pairs {
        let mut out = String::with_capacity(s.len());
        let mut rest = s.as_str();
        while let Some(at) = rest.find(from.as_str()) {
            let end = at + from.len();
            let bounded = !rest[end..].starts_with(|c: char| c.is_ascii_digit());
            out.push_str(&rest[..at]);
            out.push_str(if bounded { to } else { from });
            rest = &rest[end..];
        }
        out.push_str(rest);
        s = out;
    }
    s
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

fn subst_all(args: &[String], pairs: &[(String, String)]) -> Vec<String> {
    args.iter().map(|a| subst(a, pairs)).collect()
}

/// The value of `--flag=value` or `--flag value` in `args`.
fn flag<'a>(args: &'a [String], name: &str) -> &'a str {
    let prefix = format!("{name}=");
    args.iter()
        .enumerate()
        .find_map(|(i, a)| match a.strip_prefix(&prefix) {
            Some(v) => Some(v),
            None if a == name => args.get(i + 1).map(String::as_str),
            None => None,
        })
        .unwrap_or_else(|| panic!("no {name} in {args:?}"))
}

// ---------------------------------------------------------------------------------------------
// Addresses and directories

fn temp_dir(prefix: &str) -> tempfile::TempDir {
    let mut b = tempfile::Builder::new();
    b.prefix(prefix);
    if Path::new("/dev/shm").is_dir() { b.tempdir_in("/dev/shm") } else { b.tempdir() }
        .expect("temporary directory")
}

fn path_str(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_string()
}

// ---------------------------------------------------------------------------------------------
// mem_etcd processes

/// A mem_etcd started with exactly the given arguments and environment (no ETCD_*/MEM_ETCD_*
/// variable of the test's own environment); killed on drop.
struct Proc {
    what: String,
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    fn start(what: &str, args: &[String], env: &[(String, String)]) -> Proc {
        let mut cmd = Command::new(MEM_ETCD);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        for (k, _) in std::env::vars_os() {
            if k.to_str().is_some_and(|k| k.starts_with("ETCD") || k.starts_with("MEM_ETCD")) {
                cmd.env_remove(k);
            }
        }
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn mem_etcd for {what}: {e}"));
        let log = crate::support::drain_lines(&mut child);
        Proc { what: what.to_string(), child, log }
    }

    fn output(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Waits until the process logged a line containing `needle`; panics with its output if it
    /// exits or takes longer than [`START_TIMEOUT`].
    async fn wait_for(&mut self, needle: &str) {
        let what = format!("{}: {needle:?} logged", self.what);
        wait_until(&what, START_TIMEOUT, || {
            if self.log.lock().unwrap().iter().any(|l| l.contains(needle)) {
                return std::future::ready(Ok(()));
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{}: mem_etcd exited ({status}) before {needle:?}:\n{}",
                    self.what,
                    self.output()
                );
            }
            std::future::ready(Err(format!("its output:\n{}", self.output())))
        })
        .await
    }

    /// SIGTERM, and waits (at most 20 s) for a clean exit.
    async fn stop(mut self) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let what = format!("{} to exit after SIGTERM", self.what);
        let status = wait_until(&what, Duration::from_secs(20), || {
            std::future::ready(self.child.try_wait().unwrap())
        })
        .await;
        assert!(status.success(), "{} exited with {status}:\n{}", self.what, self.output());
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- {} ---\n{}\n---", self.what, self.output());
        }
    }
}

/// GETs `path` on the plain-http listener at `addr` and asserts a 200 `ok`.
async fn probe_ok(what: &str, addr: &str, path: &str) {
    let addr: SocketAddr = addr.parse().unwrap_or_else(|e| panic!("{what}: {addr:?}: {e}"));
    let answer = http_get(addr, path).await;
    assert_eq!(
        (answer.status, answer.body.trim()),
        (200, "ok"),
        "{what}: GET {path} on {addr}: {answer:?}"
    );
}

/// host:port of an `http://host:port` URL.
fn host_port(url: &str) -> &str {
    url.split_once("://").map_or(url, |(_, rest)| rest).trim_end_matches('/')
}

// ---------------------------------------------------------------------------------------------
// etcdctl

/// Runs etcdctl (with `tls` flags, if any, before `args`); `(success, stdout, stderr)`.
fn ctl(bin: &Path, endpoints: &str, tls: &[String], args: &[&str]) -> (bool, String, String) {
    let all: Vec<&str> = tls.iter().map(String::as_str).chain(args.iter().copied()).collect();
    let (code, out, err) = crate::tools::etcdctl::etcdctl(bin, endpoints, &all, None);
    (code == Some(0), out, err)
}

/// etcdctl, which must succeed; its stdout.
#[track_caller]
fn ctl_ok(bin: &Path, endpoints: &str, tls: &[String], args: &[&str]) -> String {
    let (ok, out, err) = ctl(bin, endpoints, tls, args);
    assert!(ok, "etcdctl {args:?} against {endpoints} failed:\n{out}\n{err}");
    out
}

/// etcdctl, retried (for 20 s at most) until it succeeds: membership changes are refused while
/// they would leave the cluster short of members connected for 5 s (`etcdserver: unhealthy
/// cluster`), and a promotion while the learner is behind; the README says to retry.
async fn ctl_retry(bin: &Path, endpoints: &str, args: &[&str]) -> String {
    wait_until(&format!("etcdctl {args:?} to succeed"), Duration::from_secs(20), || {
        let (ok, out, err) = ctl(bin, endpoints, &[], args);
        std::future::ready(if ok { Ok(out) } else { Err(err) })
    })
    .await
}

/// Retries `etcdctl endpoint health --cluster` until every member (`n`) reports healthy.
async fn wait_healthy(bin: &Path, endpoints: &str, tls: &[String], n: usize) -> String {
    let what = format!("endpoint health --cluster to report {n} healthy members");
    wait_until(&what, Duration::from_secs(30), || {
        let (ok, out, err) = ctl(bin, endpoints, tls, &["endpoint", "health", "--cluster"]);
        let healthy = ok && out.matches("is healthy").count() == n;
        std::future::ready(if healthy { Ok(out) } else { Err(format!("{out}\n{err}")) })
    })
    .await
}

/// Every member's `endpoint status` (`-w json`): (member id, leader id, raft index, applied
/// index, is learner), by endpoint.
fn statuses(bin: &Path, endpoints: &str) -> Vec<(String, u64, u64, u64, u64, bool)> {
    let out = ctl_ok(bin, endpoints, &[], &["endpoint", "status", "--cluster", "-w", "json"]);
    let v: Value = serde_json::from_str(&out).expect("status JSON");
    v.as_array()
        .expect("an array")
        .iter()
        .map(|e| {
            let s = &e["Status"];
            (
                e["Endpoint"].as_str().unwrap().to_string(),
                s["header"]["member_id"].as_u64().unwrap(),
                s["leader"].as_u64().unwrap(),
                s["raftIndex"].as_u64().unwrap(),
                s["raftAppliedIndex"].as_u64().unwrap(),
                s["isLearner"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

/// Waits until the member at `endpoint` has applied everything the leader has (README,
/// "Rolling restart" step 2 and "Replacing a failed member" step 5).
async fn wait_caught_up(bin: &Path, endpoints: &str, endpoint: &str) {
    wait_until(&format!("{endpoint} to catch up"), Duration::from_secs(30), || {
        let all = statuses(bin, endpoints);
        let leader = all.iter().find(|s| s.1 == s.2);
        let me = all.iter().find(|s| s.0 == endpoint);
        let caught_up = leader.zip(me).is_some_and(|(leader, me)| me.4 >= leader.4);
        std::future::ready(if caught_up { Ok(()) } else { Err(format!("{all:?}")) })
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// Certificates

/// Issues certificates from a fresh CA, written as PEM files.
struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        let pem = p.self_signed(&key).unwrap().pem();
        Ca { pem, issuer: Issuer::new(p, key) }
    }

    /// `dir/name.crt` and `dir/name.key`, for server and client use, naming `sans`.
    fn issue(&self, dir: &Path, name: &str, cn: &str, sans: &[&str]) {
        let key = KeyPair::generate().unwrap();
        let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
        let mut p = CertificateParams::new(sans).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        std::fs::write(dir.join(format!("{name}.crt")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// The tests

/// One single-member file's arguments, with its metrics listener's probes.
struct Single {
    what: &'static str,
    args: Vec<String>,
    /// (metrics host:port, probe paths the file uses)
    probes: (String, Vec<&'static str>),
}

/// The single-member files' arguments (and statefulset.yaml's TLS variant), with free loopback
/// ports for 2379/2381, temporary certificates and data directories.
fn single_member_arg_lists(certs: &crate::security::tls::Certs, root: &Path) -> Vec<Single> {
    let cert = |n: &str| path_str(&certs.path(n));
    let mut out = Vec::new();
    let mut add = |what: &'static str, args: Vec<String>, extra: &[(&str, String)]| {
        let p = free_ports_on(&["127.0.0.1"], 2);
        let data = path_str(&root.join(what.replace(['/', ' ', '.'], "_")));
        let mut list = vec![
            ("0.0.0.0:2379".to_string(), format!("127.0.0.1:{}", p[0])),
            ("0.0.0.0:2381".to_string(), format!("127.0.0.1:{}", p[1])),
            ("127.0.0.1:2379".to_string(), format!("127.0.0.1:{}", p[0])),
            ("127.0.0.1:2381".to_string(), format!("127.0.0.1:{}", p[1])),
            ("/var/lib/mem_etcd".to_string(), data),
        ];
        list.extend(extra.iter().map(|(a, b)| (a.to_string(), b.clone())));
        let args = subst_all(&args, &list);
        let metrics = host_port(flag(&args, "--listen-metrics-urls")).to_string();
        out.push(Single { what, args, probes: (metrics, vec!["/livez", "/readyz"]) });
    };
    // Kubernetes' $(VAR) expansion, as for the pod mem-etcd-0 in namespace deploy-test.
    let pod = [
        ("$(POD_NAME)", "mem-etcd-0".to_string()),
        ("$(POD_NAMESPACE)", "deploy-test".to_string()),
    ];
    let sts = deploy_file("kubernetes/statefulset.yaml");
    add("statefulset.yaml", manifest_args(&sts), &pod);
    // The TLS variant, made as the file's header says: the "# TLS: " prefix deleted, https://
    // client URLs, the Secret's files at /etc/mem_etcd/tls.
    let tls = sts.replace("# TLS: ", "");
    let mut tls_pairs = pod.to_vec();
    tls_pairs.extend([
        ("--listen-client-urls=http://", "--listen-client-urls=https://".to_string()),
        ("--advertise-client-urls=http://", "--advertise-client-urls=https://".to_string()),
        ("/etc/mem_etcd/tls/tls.crt", cert("server.crt")),
        ("/etc/mem_etcd/tls/tls.key", cert("server.key")),
        ("/etc/mem_etcd/tls/ca.crt", cert("ca.crt")),
    ]);
    let tls_args = manifest_args(&tls);
    assert!(tls_args.iter().any(|a| a == "--client-cert-auth=true"), "{tls_args:?}");
    add("statefulset.yaml TLS variant", tls_args, &tls_pairs);
    let kubeadm = [("/etc/kubernetes/pki/etcd/", format!("{}/", path_str(certs.dir.path())))];
    add("static-pod.yaml", manifest_args(&deploy_file("kubernetes/static-pod.yaml")), &kubeadm);
    let unit = deploy_file("systemd/mem_etcd.service");
    add("mem_etcd.service", exec_start(&unit, false), &[]);
    // The commented TLS ExecStart: %d is the unit's credentials directory, holding the
    // LoadCredential= files under their names (server.crt, server.key, ca.crt).
    add(
        "mem_etcd.service TLS variant",
        exec_start(&unit, true),
        &[("%d", path_str(certs.dir.path()))],
    );
    let dockerfile = deploy_file("docker/Dockerfile");
    let cmd = dockerfile.lines().find_map(|l| l.strip_prefix("CMD ")).expect("a CMD line");
    let cmd: Vec<String> = serde_json::from_str(cmd).expect("CMD in exec (JSON) form");
    add("Dockerfile CMD", cmd, &[]);
    out
}

/// Every single-member argument list starts mem_etcd as a member alone: it logs "ready to serve
/// client requests" (so every flag parsed, the certificates loaded, every listener bound), and
/// the manifests' probe paths answer `ok` on the metrics listener the arguments open.
#[tokio::test]
async fn single_member_files_start_as_written() {
    let certs = crate::security::tls::Certs::new();
    let root = temp_dir("mem_etcd-deploy-single-");
    let singles = single_member_arg_lists(&certs, root.path());
    // Started side by side on one machine, every file's member alone would listen on the
    // default peer URL (localhost:2380), which each host or pod has to itself: port 0 here.
    let peer = "--listen-peer-urls=http://127.0.0.1:0".to_string();
    let mut procs: Vec<Proc> = singles
        .iter()
        .map(|s| Proc::start(s.what, &[&s.args[..], std::slice::from_ref(&peer)].concat(), &[]))
        .collect();
    for (p, s) in procs.iter_mut().zip(&singles) {
        p.wait_for("ready to serve client requests").await;
        // (It serves its peer URL, as etcd's member alone does, but runs no Raft.)
        assert!(
            !p.output().contains("raft: leader changed"),
            "{}: a member alone, not a cluster member",
            s.what
        );
        for path in &s.probes.1 {
            probe_ok(s.what, &s.probes.0, path).await;
        }
    }
}

/// statefulset-cluster.yaml's args form a cluster of three. Each pod's args are the file's after
/// Kubernetes' expansion of `$(POD_NAME)` (mem-etcd-0..2) and `$(POD_NAMESPACE)` (deploy-test);
/// then each pod's DNS name mem-etcd-N.mem-etcd.deploy-test.svc, which the headless Service
/// gives it, is replaced by its loopback address, as is the 0.0.0.0 it listens on.
#[tokio::test]
async fn statefulset_cluster_args_form_a_cluster() {
    let Some(etcdctl) = peer_binary("etcdctl") else { return };
    let text = deploy_file("kubernetes/statefulset-cluster.yaml");
    let template = manifest_args(&text);
    // Every $(VAR) is a variable the container defines (else Kubernetes leaves it as is).
    for var in ["POD_NAME", "POD_NAMESPACE"] {
        assert!(text.contains(&format!("- name: {var}\n")), "{var} is not in env");
    }
    // The README's replacement patch replaces args/4.
    assert_eq!(template[4], "--initial-cluster-state=new", "README's args/4 patch: {template:?}");
    let ips = ["127.0.0.21", "127.0.0.22", "127.0.0.23"];
    let p = free_ports_on(&ips, 3);
    let root = temp_dir("mem_etcd-deploy-sts-");
    let mut procs = Vec::new();
    let mut client_urls = Vec::new();
    for (i, ip) in ips.iter().enumerate() {
        let mut list = vec![
            ("$(POD_NAME)".to_string(), format!("mem-etcd-{i}")),
            ("$(POD_NAMESPACE)".to_string(), "deploy-test".to_string()),
        ];
        for (j, other) in ips.iter().enumerate() {
            list.push((format!("mem-etcd-{j}.mem-etcd.deploy-test.svc"), other.to_string()));
        }
        list.extend(pairs(&[("0.0.0.0", ip)]));
        list.extend([
            (":2379".to_string(), format!(":{}", p[0])),
            (":2380".to_string(), format!(":{}", p[1])),
            (":2381".to_string(), format!(":{}", p[2])),
            ("/var/lib/mem_etcd".to_string(), path_str(&root.path().join(format!("m{i}")))),
        ]);
        let args = subst_all(&template, &list);
        assert!(!args.iter().any(|a| a.contains("$(")), "unexpanded: {args:?}");
        client_urls.push(flag(&args, "--advertise-client-urls").to_string());
        procs.push(Proc::start(&format!("mem-etcd-{i}"), &args, &[]));
    }
    for p in &mut procs {
        p.wait_for("serving the other members").await;
        p.wait_for("ready to serve client requests").await;
    }
    let endpoints = client_urls.join(",");
    wait_healthy(&etcdctl, &endpoints, &[], 3).await;
    let members = ctl_ok(&etcdctl, &client_urls[0], &[], &["member", "list"]);
    for (i, ip) in ips.iter().enumerate() {
        let want =
            format!("started, mem-etcd-{i}, http://{ip}:{}, http://{ip}:{}, false", p[1], p[0]);
        assert!(members.contains(&want), "{want:?} not in member list:\n{members}");
        // The kubelet's probes: /livez and /readyz on the metrics port.
        for path in ["/livez", "/readyz"] {
            probe_ok(&format!("mem-etcd-{i}"), &format!("{ip}:{}", p[2]), path).await;
        }
    }
}

/// static-pod-cluster.yaml, filled in per node with the `sed` command its header gives (cp1..cp3
/// at 10.0.0.11-13), forms a 3-member TLS cluster. The example addresses become 127.0.0.31-33,
/// kubeadm's certificate directory a temporary one per node with the files kubeadm would put
/// there (ca.crt, server.crt/key and peer.crt/key naming the node), made here.
#[tokio::test]
async fn static_pod_cluster_forms_a_tls_cluster() {
    let Some(etcdctl) = peer_binary("etcdctl") else { return };
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/static-pod-cluster.yaml");
    let text = deploy_file("kubernetes/static-pod-cluster.yaml");
    assert!(
        text.contains("sed -e 's/NODE_NAME/cp2/g' -e 's/NODE_IP/10.0.0.12/g'"),
        "the header's sed command changed: update this test"
    );
    let ips = ["127.0.0.31", "127.0.0.32", "127.0.0.33"];
    let p = free_ports_on(&ips, 2);
    let root = temp_dir("mem_etcd-deploy-static-");
    let ca = Ca::new("etcd-ca");
    std::fs::write(root.path().join("ca.crt"), &ca.pem).unwrap();
    ca.issue(root.path(), "healthcheck-client", "kube-etcd-healthcheck-client", &[]);
    let mut procs = Vec::new();
    let mut client_urls = Vec::new();
    for (i, ip) in ips.iter().enumerate() {
        let (node, node_ip) = (format!("cp{}", i + 1), format!("10.0.0.1{}", i + 1));
        // The header's command, run as written.
        let out = Command::new("sed")
            .args(["-e", &format!("s/NODE_NAME/{node}/g"), "-e", &format!("s/NODE_IP/{node_ip}/g")])
            .arg(&file)
            .output()
            .expect("run sed");
        assert!(out.status.success());
        let filled = String::from_utf8(out.stdout).unwrap();
        assert!(!filled.contains("NODE_"), "placeholders left after sed");
        let pki = root.path().join(&node);
        std::fs::create_dir(&pki).unwrap();
        std::fs::write(pki.join("ca.crt"), &ca.pem).unwrap();
        for name in ["server", "peer"] {
            ca.issue(&pki, name, &node, &[&node, ip, "localhost", "127.0.0.1"]);
        }
        let local = free_ports_on(&["127.0.0.1"], 2);
        let mut list = vec![
            ("127.0.0.1:2379".to_string(), format!("127.0.0.1:{}", local[0])),
            ("127.0.0.1:2381".to_string(), format!("127.0.0.1:{}", local[1])),
            (":2379".to_string(), format!(":{}", p[0])),
            (":2380".to_string(), format!(":{}", p[1])),
            ("/etc/kubernetes/pki/etcd/".to_string(), format!("{}/", path_str(&pki))),
            ("/var/lib/mem_etcd".to_string(), path_str(&pki.join("data"))),
        ];
        for (j, other) in ips.iter().enumerate() {
            list.push((format!("10.0.0.1{}", j + 1), other.to_string()));
        }
        let args = subst_all(&manifest_args(&filled), &list);
        client_urls.push(flag(&args, "--advertise-client-urls").to_string());
        let mut proc = Proc::start(&node, &args, &[]);
        proc.wait_for("serving the other members").await;
        procs.push((proc, local[1]));
    }
    for (proc, metrics) in &mut procs {
        proc.wait_for("ready to serve client requests").await;
        // The kubelet's probes: http://127.0.0.1:2381/livez and /readyz.
        for path in ["/livez", "/readyz"] {
            probe_ok(&proc.what, &format!("127.0.0.1:{metrics}"), path).await;
        }
    }
    let d = path_str(root.path());
    let tls = vec![
        format!("--cacert={d}/ca.crt"),
        format!("--cert={d}/healthcheck-client.crt"),
        format!("--key={d}/healthcheck-client.key"),
    ];
    let endpoints = client_urls.join(",");
    assert!(endpoints.starts_with("https://127.0.0.31:"), "{endpoints}");
    wait_healthy(&etcdctl, &endpoints, &tls, 3).await;
    // --client-cert-auth: no client certificate, no answer.
    let no_cert = [format!("--cacert={d}/ca.crt")];
    let (ok, out, _) = ctl(&etcdctl, &client_urls[0], &no_cert, &["get", "x"]);
    assert!(!ok, "a client without a certificate was served: {out}");
}

/// mem_etcd-cluster.service run on three "hosts" with cluster-host{1,2,3}.env's variables as its
/// only configuration forms a cluster; then the README's operations on it.
#[tokio::test]
async fn systemd_env_files_form_a_cluster_and_the_runbook_works() {
    let Some(etcdctl) = peer_binary("etcdctl") else { return };
    let unit = deploy_file("systemd/mem_etcd-cluster.service");
    let exec_args = exec_start(&unit, false);
    assert!(unit.contains("\nEnvironmentFile=/etc/mem_etcd/mem_etcd.env\n"), "required env file");
    let ips = ["127.0.0.11", "127.0.0.12", "127.0.0.13"];
    let p = free_ports_on(&ips, 2);
    let root = temp_dir("mem_etcd-deploy-systemd-");
    // What systemd would pass: the env file's variables, with the hosts' addresses, free ports
    // and a temporary data directory substituted.
    let host_env = |i: usize, data: &Path| -> Vec<(String, String)> {
        let local = free_ports_on(&["127.0.0.1"], 2);
        let mut list = vec![
            ("127.0.0.1:2379".to_string(), format!("127.0.0.1:{}", local[0])),
            ("127.0.0.1:2381".to_string(), format!("127.0.0.1:{}", local[1])),
            (":2379".to_string(), format!(":{}", p[0])),
            (":2380".to_string(), format!(":{}", p[1])),
            ("/var/lib/mem_etcd".to_string(), path_str(data)),
        ];
        for (j, ip) in ips.iter().enumerate() {
            list.push((format!("10.0.0.1{}", j + 1), ip.to_string()));
        }
        let text = deploy_file(&format!("systemd/cluster-host{}.env", i + 1));
        env_file(&text).into_iter().map(|(k, v)| (k, subst(&v, &list))).collect()
    };
    let data: Vec<PathBuf> = (0..3).map(|i| root.path().join(format!("host{}", i + 1))).collect();
    let envs: Vec<Vec<(String, String)>> = (0..3).map(|i| host_env(i, &data[i])).collect();
    for (i, env) in envs.iter().enumerate() {
        let names: BTreeSet<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        for want in [
            "ETCD_NAME",
            "ETCD_INITIAL_CLUSTER",
            "ETCD_INITIAL_ADVERTISE_PEER_URLS",
            "ETCD_LISTEN_PEER_URLS",
            "ETCD_LISTEN_CLIENT_URLS",
            "ETCD_ADVERTISE_CLIENT_URLS",
            "ETCD_INITIAL_CLUSTER_TOKEN",
            "ETCD_INITIAL_CLUSTER_STATE",
            "ETCD_DATA_DIR",
            "MEM_ETCD_WAL_MODE",
        ] {
            assert!(names.contains(want), "cluster-host{}.env lacks {want}", i + 1);
        }
    }
    let var = |env: &[(String, String)], k: &str| -> String {
        env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).expect(k)
    };
    let start = |i: usize, env: &[(String, String)]| {
        Proc::start(&format!("host{}", i + 1), &exec_args, env)
    };
    let mut procs: Vec<Option<Proc>> =
        envs.iter().enumerate().map(|(i, e)| Some(start(i, e))).collect();
    for p in procs.iter_mut().flatten() {
        p.wait_for("serving the other members").await;
        p.wait_for("ready to serve client requests").await;
    }
    let urls: Vec<String> = envs.iter().map(|e| var(e, "ETCD_ADVERTISE_CLIENT_URLS")).collect();
    let all = urls.join(",");
    let health = wait_healthy(&etcdctl, &all, &[], 3).await;
    for url in &urls {
        assert!(health.contains(&format!("{url} is healthy")), "{health}");
    }
    ctl_ok(&etcdctl, &all, &[], &["put", "/runbook", "before"]);

    // Rolling restart of host1 (README "Rolling restart"): restart, wait for health and for its
    // applied index to catch up.
    procs[0].take().unwrap().stop().await;
    procs[0] = Some(start(0, &envs[0]));
    procs[0].as_mut().unwrap().wait_for("ready to serve client requests").await;
    wait_healthy(&etcdctl, &all, &[], 3).await;
    wait_caught_up(&etcdctl, &all, &urls[0]).await;

    // Move leadership to host1 (already restarted), through the leader's endpoint.
    let st = statuses(&etcdctl, &all);
    let leader = st.iter().find(|s| s.1 == s.2).expect("a leader").clone();
    let host1 = st.iter().find(|s| s.0 == urls[0]).unwrap().1;
    if leader.1 != host1 {
        let out = ctl_ok(&etcdctl, &leader.0, &[], &["move-leader", &format!("{host1:x}")]);
        assert!(out.contains("Leadership transferred"), "{out}");
        let st = statuses(&etcdctl, &all);
        assert!(st.iter().all(|s| s.2 == host1), "host1 does not lead: {st:?}");
    }

    // Replacing a failed member (README "Replacing a failed member"): host3's machine is gone.
    let host3 = statuses(&etcdctl, &all).iter().find(|s| s.0 == urls[2]).unwrap().1;
    drop(procs[2].take());
    let two = urls[..2].join(",");
    let out = ctl_retry(&etcdctl, &two, &["member", "remove", &format!("{host3:x}")]).await;
    assert!(out.contains("removed"), "{out}");
    std::fs::remove_dir_all(&data[2]).expect("wipe host3's data directory");
    let peer3 = var(&envs[2], "ETCD_INITIAL_ADVERTISE_PEER_URLS");
    let add = ["member", "add", "host3", &format!("--peer-urls={peer3}"), "--learner"];
    let added = ctl_retry(&etcdctl, &two, &add).await;
    let new_id = added
        .split_whitespace()
        .skip_while(|w| *w != "Member")
        .nth(1)
        .unwrap_or_else(|| panic!("no member id in:\n{added}"))
        .to_string();
    let printed_lines: Vec<&str> = added.lines().filter(|l| l.starts_with("ETCD_")).collect();
    let printed = env_file(&printed_lines.join("\n"));
    assert_eq!(var(&printed, "ETCD_INITIAL_CLUSTER_STATE"), "existing", "{added}");
    // Step 4: the env file with the printed ETCD_INITIAL_CLUSTER and state existing.
    let mut env3 = envs[2].clone();
    for (k, v) in &mut env3 {
        if k == "ETCD_INITIAL_CLUSTER" || k == "ETCD_INITIAL_CLUSTER_STATE" {
            *v = var(&printed, k);
        }
    }
    procs[2] = Some(start(2, &env3));
    procs[2].as_mut().unwrap().wait_for("ready to serve client requests").await;
    // A learner refuses MemberList (as etcd's does), which `--cluster` asks for: ask the
    // voters, as the README says.
    let st = statuses(&etcdctl, &two);
    assert!(st.iter().any(|s| s.0 == urls[2] && s.5), "host3 is not a learner: {st:?}");
    wait_caught_up(&etcdctl, &two, &urls[2]).await;
    let out = ctl_retry(&etcdctl, &two, &["member", "promote", &new_id]).await;
    assert!(out.contains("promoted"), "{out}");
    wait_healthy(&etcdctl, &all, &[], 3).await;
    let got = ctl_ok(&etcdctl, &urls[2], &[], &["get", "/runbook", "--consistency=s"]);
    assert_eq!(got, "/runbook\nbefore\n");

    // Backup (README "Backup"): a snapshot from one member, a follower here.
    let backup = root.path().join("backup.db");
    ctl_ok(&etcdctl, &urls[1], &[], &["snapshot", "save", &path_str(&backup)]);
    let status = Command::new(MEM_ETCD)
        .args(["snapshot", "status", &path_str(&backup)])
        .output()
        .expect("mem_etcd snapshot status");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success() && text.contains("keys: 1"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// kube-apiserver

/// A kube-apiserver on `etcd` and a kubectl for it; killed on drop. The minimum k8s_e2e.rs'
/// starter uses: a service-account key, a static admin token, AlwaysAllow.
struct Apiserver {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    kubectl: PathBuf,
    dir: tempfile::TempDir,
}

impl Apiserver {
    fn start(apiserver: &Path, kubectl: &Path, etcd: &str) -> Apiserver {
        let dir = tempfile::Builder::new().prefix("mem_etcd-deploy-k8s-").tempdir().unwrap();
        let p = |name: &str| path_str(&dir.path().join(name));
        // A P-256 key: signs the service-account tokens (PKCS#8), its public half verifies them.
        let sa = KeyPair::generate().unwrap();
        std::fs::write(p("sa.key"), sa.serialize_pem()).unwrap();
        std::fs::write(p("sa.pub"), sa.public_key_pem()).unwrap();
        let token = format!("t{:x}", std::process::id());
        std::fs::write(p("tokens.csv"), format!("{token},admin,admin-uid,\"system:masters\"\n"))
            .unwrap();
        let port = free_ports_on(&["127.0.0.1"], 1)[0];
        std::fs::write(
            p("kubeconfig"),
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster:\n    server: \
                 https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\nusers:\n- name: \
                 admin\n  user:\n    token: {token}\ncontexts:\n- name: t\n  context:\n    \
                 cluster: t\n    user: admin\ncurrent-context: t\n"
            ),
        )
        .unwrap();
        let mut cmd = Command::new(apiserver);
        cmd.args([
            format!("--etcd-servers={etcd}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", p("certs")),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", p("sa.pub")),
            format!("--service-account-signing-key-file={}", p("sa.key")),
            format!("--token-auth-file={}", p("tokens.csv")),
            "--authorization-mode=AlwaysAllow".into(),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            // The `kubernetes` Service's endpoints would be 127.0.0.1, which validation refuses.
            "--endpoint-reconciler-type=none".into(),
        ]);
        cmd.current_dir(dir.path()).stdin(Stdio::null()).stdout(Stdio::piped());
        cmd.stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn kube-apiserver");
        let log = crate::support::drain_lines(&mut child);
        Apiserver { child, log, kubectl: kubectl.to_path_buf(), dir }
    }

    /// `kubectl args...`: (success, stdout, stderr).
    fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        let kubeconfig = self.dir.path().join("kubeconfig");
        let out = Command::new(&self.kubectl)
            .env("HOME", self.dir.path())
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--request-timeout=30s")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run kubectl");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// kubectl, which must succeed; its stdout.
    #[track_caller]
    fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.kubectl(args);
        assert!(ok, "kubectl {args:?} failed:\n{out}\n{err}");
        out
    }

    async fn wait_ready(&mut self) {
        wait_until("kube-apiserver to be ready", Duration::from_secs(120), || {
            let (ok, out, _) = self.kubectl(&["get", "--raw", "/readyz"]);
            if ok && out.trim() == "ok" {
                return std::future::ready(Ok(()));
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("kube-apiserver exited ({status}):\n{}", self.log_tail());
            }
            std::future::ready(Err(format!("its log:\n{}", self.log_tail())))
        })
        .await
    }

    fn log_tail(&self) -> String {
        let log = self.log.lock().unwrap();
        log[log.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Apiserver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- kube-apiserver log tail ---\n{}\n---", self.log_tail());
        }
    }
}

/// The objects of `kubectl ... -o json` output (a List or one object).
fn objects(json: &str) -> Vec<Value> {
    let v: Value = serde_json::from_str(json).expect("kubectl JSON");
    match v["kind"].as_str() {
        Some("List") => v["items"].as_array().expect("items").clone(),
        _ => vec![v],
    }
}

fn find<'a>(objs: &'a [Value], kind: &str) -> &'a Value {
    objs.iter().find(|o| o["kind"] == kind).unwrap_or_else(|| panic!("no {kind}"))
}

/// The pod spec of a Pod or a StatefulSet.
fn pod_spec(obj: &Value) -> &Value {
    if obj["kind"] == "Pod" { &obj["spec"] } else { &obj["spec"]["template"]["spec"] }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map_or(Vec::new(), |a| {
        a.iter().map(|s| s.as_str().expect("a string").to_string()).collect()
    })
}

/// Splits a shell command line of the README into words: single quotes only, which is all its
/// kubectl commands use.
fn shell_words(line: &str) -> Vec<String> {
    let (mut words, mut cur, mut in_word, mut quoted) = (Vec::new(), String::new(), false, false);
    for c in line.chars() {
        match c {
            '\'' => (quoted, in_word) = (!quoted, true),
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    words
}

/// The README's `kubectl patch` commands (continuation lines joined), in order.
fn readme_patches(readme: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        if !line.starts_with("kubectl patch ") {
            continue;
        }
        let mut cur = line.to_string();
        while let Some(head) = cur.strip_suffix('\\') {
            cur = format!("{head} {}", lines.next().expect("continuation").trim());
        }
        out.push(shell_words(&cur));
    }
    out
}

/// `kubectl apply --dry-run=server` of every manifest against kube-apiserver 1.36 on mem_etcd,
/// as an operator would apply them (the StatefulSets into the kubeconfig's namespace, the static
/// pods into kube-system as their metadata says). The objects returned are the server's, after
/// defaulting: their argument lists are the ones this file's other tests start, and their wiring
/// is what the README describes. Then the README's `kubectl patch` commands for replacing a
/// StatefulSet member run against statefulset-cluster.yaml created for real (nothing runs its
/// pods: there is no controller manager).
#[tokio::test]
async fn kubectl_server_dry_run_accepts_every_manifest() {
    let (Some(apiserver), Some(kubectl)) = (peer_binary("kube-apiserver"), peer_binary("kubectl"))
    else {
        return;
    };
    let etcd = Server::start(Kind::MemEtcd, &["--wal-mode=none"]).await.expect("mem_etcd");
    let mut api = Apiserver::start(&apiserver, &kubectl, &etcd.endpoint());
    api.wait_ready().await;
    // What kube-controller-manager creates in every namespace; the ServiceAccount admission
    // plugin looks a pod's account up even in a dry run (the kubelet's mirror pods skip it).
    api.ok(&["create", "serviceaccount", "default", "-n", "kube-system"]);

    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let names: Vec<String> =
        files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(
        names,
        [
            "statefulset-cluster.yaml",
            "statefulset.yaml",
            "static-pod-cluster.yaml",
            "static-pod.yaml"
        ]
    );
    let tls_dir = tempfile::tempdir().unwrap();
    let tls_variant = tls_dir.path().join("statefulset-tls.yaml");
    std::fs::write(&tls_variant, deploy_file("kubernetes/statefulset.yaml").replace("# TLS: ", ""))
        .unwrap();
    files.push(tls_variant);
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let f = path_str(file);
        let out = api.ok(&["apply", "--dry-run=server", "-f", &f, "-o", "json"]);
        let objs = objects(&out);
        let workload = objs
            .iter()
            .find(|o| o["kind"] == "Pod" || o["kind"] == "StatefulSet")
            .unwrap_or_else(|| panic!("{f}: no Pod or StatefulSet"));
        let containers = pod_spec(workload)["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 1, "{f}");
        let c = &containers[0];
        // What this file's YAML reader found is what Kubernetes read.
        let server_lists: Vec<(String, Vec<String>)> = ["command", "args"]
            .into_iter()
            .filter(|k| c.get(*k).is_some())
            .map(|k| (k.to_string(), strings(&c[k])))
            .collect();
        assert_eq!(yaml_lists(&text), server_lists, "{f}");
        // Probes: on the metrics listener the arguments open.
        let args: Vec<String> =
            strings(&c["command"]).into_iter().chain(strings(&c["args"])).collect();
        let metrics = flag(&args, "--listen-metrics-urls");
        assert!(metrics.ends_with(":2381"), "{f}: {metrics}");
        let cluster = args.iter().any(|a| a.starts_with("--initial-cluster="));
        for (probe, path) in [
            ("startupProbe", if cluster { "/livez" } else { "/readyz" }),
            ("livenessProbe", "/livez"),
            ("readinessProbe", "/readyz"),
        ] {
            let get = &c[probe]["httpGet"];
            assert_eq!(get["path"], path, "{f}: {probe}");
            let port = match &get["port"] {
                Value::String(name) => c["ports"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|p| p["name"] == name.as_str())
                    .map(|p| p["containerPort"].as_u64().unwrap())
                    .unwrap_or_else(|| panic!("{f}: no port named {name}")),
                n => n.as_u64().unwrap(),
            };
            assert_eq!(port, 2381, "{f}: {probe}");
        }
        // The data directory is a volume.
        let data = flag(&args, "--data-dir");
        let mounts = c["volumeMounts"].as_array().unwrap();
        assert!(mounts.iter().any(|m| m["mountPath"] == data), "{f}: {data} not mounted");
    }

    // statefulset-cluster.yaml's wiring.
    let out = api.ok(&[
        "apply",
        "--dry-run=server",
        "-f",
        &path_str(&dir.join("statefulset-cluster.yaml")),
        "-o",
        "json",
    ]);
    let objs = objects(&out);
    let (svc, pdb, sts) =
        (find(&objs, "Service"), find(&objs, "PodDisruptionBudget"), find(&objs, "StatefulSet"));
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(svc["spec"]["publishNotReadyAddresses"], true);
    let ports: Vec<(String, u64)> = svc["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap().to_string(), p["port"].as_u64().unwrap()))
        .collect();
    assert!(ports.contains(&("client".into(), 2379)) && ports.contains(&("peer".into(), 2380)));
    assert_eq!(sts["spec"]["serviceName"], svc["metadata"]["name"]);
    assert_eq!(sts["spec"]["replicas"], 3);
    assert_eq!(sts["spec"]["podManagementPolicy"], "Parallel");
    let labels = &sts["spec"]["template"]["metadata"]["labels"];
    for selector in [&svc["spec"]["selector"], &pdb["spec"]["selector"]["matchLabels"]] {
        for (k, v) in selector.as_object().unwrap() {
            assert_eq!(&labels[k], v, "selector {k}");
        }
    }
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    let anti = &pod_spec(sts)["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    assert_eq!(anti[0]["topologyKey"], "kubernetes.io/hostname");
    let env = pod_spec(sts)["containers"][0]["env"].as_array().unwrap();
    for (name, field) in [("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace")] {
        let e = env.iter().find(|e| e["name"] == name).expect(name);
        assert_eq!(e["valueFrom"]["fieldRef"]["fieldPath"], field);
    }
    assert_eq!(sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"], "data");

    // static-pod-cluster.yaml: host network, the certificates mounted where the flags read them.
    let out = api.ok(&[
        "apply",
        "--dry-run=server",
        "-f",
        &path_str(&dir.join("static-pod-cluster.yaml")),
        "-o",
        "json",
    ]);
    let pod = &objects(&out)[0];
    assert_eq!(pod["metadata"]["namespace"], "kube-system");
    assert_eq!(pod["spec"]["hostNetwork"], true);
    let c = &pod["spec"]["containers"][0];
    let certs = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/etc/kubernetes/pki/etcd")
        .expect("certificates mounted");
    assert_eq!(certs["readOnly"], true);
    for name in ["ca.crt", "server.crt", "server.key", "peer.crt", "peer.key"] {
        let path = format!("/etc/kubernetes/pki/etcd/{name}");
        assert!(strings(&c["command"]).iter().any(|a| a.ends_with(&path)), "{path} unused");
    }
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        assert_eq!(c[probe]["httpGet"]["host"], "127.0.0.1", "{probe}");
    }

    // The README's StatefulSet member replacement: its three patches, against the StatefulSet
    // created for real in a namespace.
    api.ok(&["create", "namespace", "deploy-test"]);
    api.ok(&["apply", "-n", "deploy-test", "-f", &path_str(&dir.join("statefulset-cluster.yaml"))]);
    let readme = deploy_file("README.md");
    let patches = readme_patches(&readme);
    assert_eq!(patches.len(), 3, "{patches:?}");
    let get = || -> Value {
        serde_json::from_str(&api.ok(&[
            "get",
            "-n",
            "deploy-test",
            "statefulset",
            "mem-etcd",
            "-o",
            "json",
        ]))
        .unwrap()
    };
    let mut after = Vec::new();
    for patch in &patches {
        assert_eq!(patch[0], "kubectl");
        let words: Vec<String> =
            patch[1..].iter().map(|w| w.replace("<namespace>", "deploy-test")).collect();
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        api.ok(&words);
        let s = get();
        after.push((
            s["spec"]["updateStrategy"]["type"].as_str().unwrap().to_string(),
            s["spec"]["template"]["spec"]["containers"][0]["args"][4].as_str().unwrap().to_string(),
        ));
    }
    let want = |t: &str, s: &str| (t.to_string(), format!("--initial-cluster-state={s}"));
    assert_eq!(
        after,
        [want("OnDelete", "new"), want("OnDelete", "existing"), want("RollingUpdate", "existing")]
    );
    drop(api);
}

/// Every `ETCD_*` and `MEM_ETCD_*` variable named in deploy/ is one mem_etcd reads (`--help`
/// lists each flag's variable); mem_etcd ignores variables it does not know, so a misspelt
/// one would silently not apply. The systemd units pass `systemd-analyze verify` (with the
/// binary's and the env file's paths pointed at real files) when systemd-analyze is installed.
#[test]
fn environment_variable_names_are_mem_etcds() {
    let help = Command::new(MEM_ETCD).arg("--help").output().expect("mem_etcd --help");
    let help = String::from_utf8(help.stdout).unwrap();
    let known: BTreeSet<String> = help
        .split("[env: ")
        .skip(1)
        .map(|rest| rest.split('=').next().unwrap().to_string())
        .collect();
    assert!(known.contains("ETCD_INITIAL_CLUSTER") && known.contains("MEM_ETCD_WAL_MODE"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let mut stack = vec![root.clone()];
    let mut seen = BTreeSet::new();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                let ours = word.starts_with("ETCD_") || word.starts_with("MEM_ETCD_");
                if ours && !word.ends_with('_') {
                    assert!(
                        known.contains(word),
                        "{}: {word} is not a mem_etcd variable",
                        path.display()
                    );
                    seen.insert(word.to_string());
                }
            }
        }
    }
    assert!(seen.contains("ETCD_INITIAL_CLUSTER_STATE"), "{seen:?}");

    let Ok(out) = Command::new("systemd-analyze").arg("--version").output() else {
        loud(
            "NOTE environment_variable_names_are_mem_etcds: systemd-analyze not installed, the units were not verified",
        );
        return;
    };
    assert!(out.status.success());
    let dir = tempfile::tempdir().unwrap();
    for (unit, env) in
        [("mem_etcd.service", None), ("mem_etcd-cluster.service", Some("cluster-host1.env"))]
    {
        let mut text =
            deploy_file(&format!("systemd/{unit}")).replace("/usr/local/bin/mem_etcd", MEM_ETCD);
        if let Some(env) = env {
            let env = path_str(&root.join("systemd").join(env));
            text = text.replace("/etc/mem_etcd/mem_etcd.env", &env);
        }
        // Verified under the name it is installed as.
        let path = dir.path().join("mem_etcd.service");
        std::fs::write(&path, text).unwrap();
        let out = Command::new("systemd-analyze").arg("verify").arg(&path).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && err.trim().is_empty(),
            "systemd-analyze verify {unit}:\n{err}"
        );
    }
}
