//! End to end: a real kube-apiserver (1.36, from `tests/peers/install_k8s.sh`) on mem_etcd,
//! driven with kubectl, the way a cluster uses it.
//!
//! * [`kube_apiserver_on_mem_etcd_over_mutual_tls_and_on_etcd`]: the whole flow (namespaces; ConfigMaps and Secrets
//!   create/get/update/patch/delete; paged lists and continue tokens; server-side apply and its
//!   conflicts; a stale resourceVersion refused with 409; node Leases renewed; Events expiring
//!   with `--event-ttl`; a CRD and custom resources; `kubectl get -w`; a watch replaying from a
//!   resourceVersion; 410 Gone once compaction passed an old resourceVersion (an uncached
//!   watch, a continue token, an exact-RV list); `/healthz/etcd`;
//!   consistent reads served from the watch cache; no "RequestWatchProgress is not supported" in
//!   the apiserver's log) against mem_etcd (buffered WAL, over mutual TLS as kubeadm connects),
//!   then the same flow against a real etcd 3.6, and prints how long each took on both.
//! * [`kube_apiserver_shards_leases_and_events`]: two mem_etcd instances, kube-apiserver with
//!   `--etcd-servers-overrides` sending `coordination.k8s.io/leases` and core `/events` (which
//!   events.k8s.io shares) to the second: node Leases created, renewed, watched, replayed and
//!   deleted, Events of both API groups created, watched, listed (`kubectl events`) and deleted,
//!   a ConfigMap; then, read straight from each mem_etcd, the lease and event keys (exact names,
//!   versions, mod revisions equal to the resourceVersions kubectl saw, events' etcd leases) are
//!   on the second and not on the first, the ConfigMap and namespace on the first and nothing
//!   but leases and events on the second; both health checks (`etcd`, `etcd-override-0`) pass,
//!   and the override's fails once the second is killed.
//! * [`kube_apiserver_survives_mem_etcd_restart`]: mem_etcd stopped and started again (same data
//!   dir, same port) under a running kube-apiserver, which recovers on its own: ready again,
//!   objects intact, a watch opened before the restart goes on, new writes work.
//!
//! All need the peers kube-apiserver and kubectl (`KUBE_APISERVER_BIN`, `KUBECTL_BIN`), and the
//! comparison needs etcd; see support.rs for the peer policy. They always run mem_etcd, whatever
//! `MEM_ETCD_TEST_TARGET` says, and never run at the same time as each other (one kube-apiserver
//! at a time keeps the timings meaningful on a small machine).
//!
//! What kube-apiserver needs at run time, all made here in a temporary directory: a
//! service-account signing key (a P-256 key; the same file verifies the tokens) and issuer,
//! serving certificates (self-signed by the apiserver itself in `--cert-dir`), a static token for
//! kubectl (`--token-auth-file`, user in `system:masters`, `--authorization-mode=AlwaysAllow`),
//! and a kubeconfig. No admission plugin needs disabling: the flow creates no pods. Two flags
//! beyond the minimum: `--endpoint-reconciler-type=none` (the `kubernetes` Service's endpoints
//! would be 127.0.0.1, which validation refuses), and `--watch-cache-sizes=podtemplates#0`, one
//! resource without watch cache so that a watch from a compacted revision reaches the backend;
//! every other resource keeps the watch-cache defaults.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::support::{DataDir, Kind, Kv, Server, free_port, kvs, loud, peer_binary, say};

/// One kube-apiserver at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `--etcd-compaction-interval`: short, so the 410 check does not wait long.
const COMPACTION_INTERVAL: &str = "10s";
/// `--event-ttl`.
const EVENT_TTL: Duration = Duration::from_secs(5);
/// How long one kubectl call may take before the test calls it hung.
const KUBECTL_TIMEOUT: Duration = Duration::from_secs(40);
/// How long mem_etcd may take to exit after SIGTERM with kube-apiserver connected (etcd 3.6
/// takes a few seconds with a watch open).
const STOP_WITHIN: Duration = Duration::from_secs(15);
/// How long kube-apiserver may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// Log text that says kube-apiserver found the backend lacking progress notifications, and so
/// serves consistent reads from etcd instead of its watch cache (k8s.io/apiserver
/// pkg/storage/feature/feature_support_checker.go logs "RequestWatchProgress feature is not
/// supported by %q endpoint", "Failed to check if RequestWatchProgress is supported by etcd after
/// retrying" and "Failed to parse etcd version"), plus a watch-cache inconsistency report.
const FORBIDDEN_LOG: &[&str] = &[
    "RequestWatchProgress",
    "progress notify",
    "Failed to parse etcd version",
    "Cache consistency check failed",
];

struct Peers {
    apiserver: PathBuf,
    kubectl: PathBuf,
}

/// The Kubernetes peers, or `None` (announced loudly) when they are missing and may be skipped.
fn peers() -> Option<Peers> {
    Some(Peers { apiserver: peer_binary("kube-apiserver")?, kubectl: peer_binary("kubectl")? })
}

// ---------------------------------------------------------------------------------------------
// Processes

/// How a kubectl call ended.
#[derive(Debug)]
struct Out {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Out {
    fn ok(&self) -> bool {
        self.status.success()
    }

    /// Did the server answer 410 Gone, as an HTTP status (kubectl prints the reason `Expired`)
    /// or as a watch ERROR event carrying code 410?
    fn gone(&self) -> bool {
        (!self.ok() && (self.stderr.contains("(Expired)") || self.stderr.contains("(Gone)")))
            || self.stdout.lines().any(|l| {
                serde_json::from_str::<Value>(l).is_ok_and(|e| {
                    e["type"] == "ERROR" && e["object"]["code"].as_i64() == Some(410)
                })
            })
    }
}

/// Runs `cmd` with `input` on stdin, killing it after `timeout`.
fn run(mut cmd: Command, input: Option<&str>, timeout: Duration) -> Out {
    cmd.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    if let Some(input) = input {
        let mut stdin = child.stdin.take().expect("stdin");
        let input = input.to_string();
        std::thread::spawn(move || {
            let _ = stdin.write_all(input.as_bytes());
        });
    }
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let out = drain(child.stdout.take().map(|r| Box::new(r) as Box<dyn Read + Send>));
    let err = drain(child.stderr.take().map(|r| Box::new(r) as Box<dyn Read + Send>));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{cmd:?} did not finish within {timeout:?}\nstdout: {}\nstderr: {}",
                out.join().unwrap_or_default(),
                err.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    Out { status, stdout: out.join().unwrap_or_default(), stderr: err.join().unwrap_or_default() }
}

/// A long-running kubectl (a watch) whose stdout lines arrive on a channel, each with the time
/// it was read; killed on drop.
struct Stream {
    child: Child,
    lines: mpsc::Receiver<(Instant, String)>,
    stderr: Arc<Mutex<String>>,
    seen: Vec<String>,
    /// When the line [`Stream::expect`] last returned arrived.
    last_at: Option<Instant>,
}

impl Stream {
    fn start(mut cmd: Command) -> Stream {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send((Instant::now(), line)).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().expect("stderr");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Stream { child, lines, stderr, seen: Vec::new(), last_at: None }
    }

    /// Waits for the next line matching `want`; panics (with everything seen) after `timeout`.
    fn expect(&mut self, what: &str, timeout: Duration, want: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((at, line)) => {
                    self.seen.push(line.clone());
                    if want(&line) {
                        self.last_at = Some(at);
                        return line;
                    }
                }
                Err(e) => panic!(
                    "watch: no {what} within {timeout:?} ({e:?}); lines so far:\n{}\nstderr: {}\n\
                     exited: {:?}",
                    self.seen.join("\n"),
                    self.stderr.lock().unwrap(),
                    self.child.try_wait()
                ),
            }
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `n` random bytes from the standard library's OS-seeded hasher keys (a test key needs no
/// more).
fn random_bytes(n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 8);
    let mut i = 0u64;
    while out.len() < n {
        out.extend_from_slice(&RandomState::new().hash_one(i).to_le_bytes());
        i += 1;
    }
    out.truncate(n);
    out
}

fn base64(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                s.push(ABC[(n >> shift) as usize & 63] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// A new P-256 private key as a PEM "EC PRIVATE KEY" (SEC1). The public key is left out: Go
/// derives it from the private scalar. A first byte below 0xff keeps the scalar below the
/// curve order; a nonzero one keeps it nonzero.
fn ec_p256_key_pem() -> String {
    let mut d = random_bytes(32);
    d[0] = d[0].clamp(1, 0xfe);
    let mut der = vec![0x30, 0x31, 0x02, 0x01, 0x01, 0x04, 0x20];
    der.extend_from_slice(&d);
    // [0] { OID 1.2.840.10045.3.1.7 (prime256v1) }
    der.extend_from_slice(&[
        0xa0, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07,
    ]);
    let b64 = base64(&der);
    let body: Vec<&str> =
        b64.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect();
    format!("-----BEGIN EC PRIVATE KEY-----\n{}\n-----END EC PRIVATE KEY-----\n", body.join("\n"))
}

/// Now, as RFC 3339 with microseconds (a `MicroTime`, which a `Time` accepts too).
fn now_rfc3339() -> String {
    rfc3339(SystemTime::now().duration_since(UNIX_EPOCH).unwrap())
}

/// A time since the Unix epoch as RFC 3339 in UTC, with microseconds.
fn rfc3339(now: Duration) -> String {
    let (days, secs) = ((now.as_secs() / 86_400) as i64, now.as_secs() % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let (era, doe) = (z.div_euclid(146_097), z.rem_euclid(146_097));
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        now.subsec_micros()
    )
}

/// A running kube-apiserver and a kubectl set up to talk to it; killed on drop.
struct Apiserver {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    kubectl: PathBuf,
    dir: tempfile::TempDir,
    spawned: Instant,
}

impl Apiserver {
    /// Starts kube-apiserver on the etcd at `etcd` (`http://127.0.0.1:PORT`); does not wait.
    fn start(peers: &Peers, etcd: &str) -> Apiserver {
        Self::start_with(peers, etcd, &[])
    }

    /// [`Apiserver::start`] with `extra` flags after the usual ones (a later flag wins).
    fn start_with(peers: &Peers, etcd: &str, extra: &[String]) -> Apiserver {
        let dir = tempfile::Builder::new().prefix("mem_etcd-k8s-").tempdir().expect("temp dir");
        let p = |name: &str| dir.path().join(name).to_str().expect("utf-8 path").to_string();
        std::fs::write(p("sa.key"), ec_p256_key_pem()).expect("write sa.key");
        let token = format!("{:016x}", RandomState::new().hash_one(0u8));
        std::fs::write(p("tokens.csv"), format!("{token},admin,admin-uid,\"system:masters\"\n"))
            .expect("write tokens.csv");
        let port = free_port();
        std::fs::write(
            p("kubeconfig"),
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: \
                 https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\nusers:\n- name: \
                 admin\n  user:\n    token: {token}\ncontexts:\n- name: e2e\n  context:\n    \
                 cluster: e2e\n    user: admin\ncurrent-context: e2e\n"
            ),
        )
        .expect("write kubeconfig");
        let args = [
            format!("--etcd-servers={etcd}"),
            "--storage-backend=etcd3".into(),
            format!("--etcd-compaction-interval={COMPACTION_INTERVAL}"),
            format!("--event-ttl={}s", EVENT_TTL.as_secs()),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", p("certs")),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", p("sa.key")),
            format!("--service-account-signing-key-file={}", p("sa.key")),
            format!("--token-auth-file={}", p("tokens.csv")),
            "--authorization-mode=AlwaysAllow".into(),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            // The endpoints of the `kubernetes` Service would be 127.0.0.1, which validation
            // refuses (loopback); nothing here needs them.
            "--endpoint-reconciler-type=none".into(),
            // One resource without watch cache, so that a watch from an old revision reaches
            // the backend (the 410 check); every other resource keeps the defaults.
            "--watch-cache-sizes=podtemplates#0".into(),
        ];
        let mut cmd = Command::new(&peers.apiserver);
        cmd.args(&args).args(extra).current_dir(dir.path()).stdin(Stdio::null());
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let spawned = Instant::now();
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn kube-apiserver: {e}"));
        let log = crate::support::drain_lines(&mut child);
        Apiserver { child, log, kubectl: peers.kubectl.clone(), dir, spawned }
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    fn kubectl_cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.kubectl);
        cmd.env("KUBECONFIG", self.kubeconfig()).env("HOME", self.dir.path());
        cmd.arg(format!("--kubeconfig={}", self.kubeconfig().display()));
        cmd.args(args);
        cmd
    }

    /// Runs kubectl (with a request timeout) and returns how it ended.
    fn run_args(&self, args: &[&str], input: Option<&str>) -> Out {
        let mut cmd = self.kubectl_cmd(&["--request-timeout=30s"]);
        cmd.args(args);
        run(cmd, input, KUBECTL_TIMEOUT)
    }

    /// Runs kubectl with `cmd` split at whitespace, then `args`.
    fn run_cmd(&self, cmd: &str, args: &[&str], input: Option<&str>) -> Out {
        let all: Vec<&str> = cmd.split_whitespace().chain(args.iter().copied()).collect();
        self.run_args(&all, input)
    }

    /// `kubectl <cmd>` (split at whitespace), however it ends.
    fn try_(&self, cmd: &str) -> Out {
        self.run_cmd(cmd, &[], None)
    }

    /// Panics, with what kubectl said and the apiserver's last lines, unless `out` succeeded;
    /// returns its stdout.
    #[track_caller]
    fn check(&self, what: &str, out: Out) -> String {
        if !out.ok() {
            panic!(
                "kubectl {what} failed ({}):\nstdout: {}\nstderr: {}\n--- kube-apiserver log \
                 tail ---\n{}",
                out.status,
                out.stdout,
                out.stderr,
                self.log_tail(40)
            );
        }
        out.stdout
    }

    /// `kubectl <cmd> [args...]` with `input` on stdin, which must succeed; returns its stdout.
    #[track_caller]
    fn ok_with(&self, cmd: &str, args: &[&str], input: Option<&str>) -> String {
        self.check(&format!("{cmd} {args:?}"), self.run_cmd(cmd, args, input))
    }

    /// `kubectl <cmd>`, which must succeed; returns its stdout.
    #[track_caller]
    fn ok(&self, cmd: &str) -> String {
        self.ok_with(cmd, &[], None)
    }

    /// `kubectl <cmd> -o json`, parsed.
    #[track_caller]
    fn json(&self, cmd: &str) -> Value {
        parse(&self.ok_with(cmd, &["-o", "json"], None))
    }

    /// `kubectl <cmd> -f - -o json` with `obj` on stdin (create, replace), parsed.
    #[track_caller]
    fn with_object(&self, cmd: &str, obj: &Value) -> Value {
        parse(&self.ok_with(cmd, &["-f", "-", "-o", "json"], Some(&obj.to_string())))
    }

    /// `kubectl patch <target> --type=merge -p <patch> -o json`, parsed.
    #[track_caller]
    fn patch(&self, target: &str, patch: &str) -> Value {
        let cmd = format!("patch {target}");
        parse(&self.ok_with(&cmd, &["--type=merge", "-p", patch, "-o", "json"], None))
    }

    /// `kubectl <cmd>` with `input` on stdin, which must fail; returns its stderr.
    #[track_caller]
    fn fails(&self, cmd: &str, input: Option<&str>) -> String {
        let out = self.run_cmd(cmd, &[], input);
        assert!(!out.ok(), "kubectl {cmd} should have failed, got:\n{}", out.stdout);
        out.stderr
    }

    /// `kubectl get --raw <path>`, however it ends.
    fn raw(&self, path: &str) -> Out {
        self.run_args(&["get", "--raw", path], None)
    }

    /// A long-running `kubectl <cmd> [args...]` (no request timeout).
    fn stream(&self, cmd: &str, args: &[&str]) -> Stream {
        let all: Vec<&str> = cmd.split_whitespace().chain(args.iter().copied()).collect();
        Stream::start(self.kubectl_cmd(&all))
    }

    fn is_ready(&self) -> bool {
        let out = run(
            self.kubectl_cmd(&["--request-timeout=3s", "get", "--raw", "/readyz"]),
            None,
            Duration::from_secs(10),
        );
        out.ok() && out.stdout.trim() == "ok"
    }

    /// Waits until `/readyz` says ok; returns how long that took since the process started.
    fn wait_ready(&mut self) -> Duration {
        loop {
            if self.is_ready() {
                return self.spawned.elapsed();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "kube-apiserver exited ({status}) before it was ready:\n{}",
                    self.log_tail(60)
                );
            }
            if self.spawned.elapsed() > READY_TIMEOUT {
                panic!("kube-apiserver not ready within {READY_TIMEOUT:?}:\n{}", self.log_tail(60));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log_tail(&self, n: usize) -> String {
        let log = self.log.lock().unwrap();
        log[log.len().saturating_sub(n)..].join("\n")
    }

    /// The lines logged that contain `needle` (ASCII case-insensitive).
    fn grep(&self, needle: &str) -> Vec<String> {
        let needle = needle.to_ascii_lowercase();
        let log = self.log.lock().unwrap();
        log.iter().filter(|l| l.to_ascii_lowercase().contains(&needle)).cloned().collect()
    }

    /// Error-level klog lines (`E0102 15:04:05.000000 ...`).
    fn error_lines(&self) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|l| {
                let b = l.as_bytes();
                b.len() > 5 && b[0] == b'E' && b[1..5].iter().all(u8::is_ascii_digit)
            })
            .cloned()
            .collect()
    }

    /// Asserts the log never said the backend lacks what the watch cache needs.
    fn assert_log_clean(&self, backend: &str) {
        for needle in FORBIDDEN_LOG {
            let hits = self.grep(needle);
            assert!(
                hits.is_empty(),
                "kube-apiserver on {backend} logged {needle:?}:\n{}",
                hits.join("\n")
            );
        }
    }
}

impl Drop for Apiserver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- kube-apiserver log tail ---\n{}\n---", self.log_tail(80));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The flow

fn rv(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no numeric resourceVersion in {obj}"))
}

#[track_caller]
fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn not_found(out: &Out) -> bool {
    !out.ok() && out.stderr.contains("(NotFound)")
}

/// Polls `f` every 200 ms until it returns `Some`, for at most `timeout`.
#[track_caller]
fn eventually<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Named durations, in the order measured.
#[derive(Debug, Default)]
struct Timings(Vec<(&'static str, Duration)>);

impl Timings {
    fn time<T>(&mut self, name: &'static str, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let v = f();
        self.0.push((name, start.elapsed()));
        v
    }

    fn record(&mut self, name: &'static str, d: Duration) {
        self.0.push((name, d));
    }
}

fn configmap(ns: &str, name: &str, labels: Value, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": ns, "labels": labels}, "data": data})
}

/// The whole flow against a kube-apiserver that has just become ready.
fn exercise(api: &Apiserver, backend: &str, t: &mut Timings) {
    // Health, as kube-apiserver sees its storage.
    t.time("/healthz/etcd, /livez/etcd, /readyz", || {
        for path in ["/healthz/etcd", "/livez/etcd", "/readyz/etcd-readiness"] {
            let out = api.raw(path);
            assert!(out.ok() && out.stdout.trim() == "ok", "{path}: {out:?}");
        }
        let verbose = api.raw("/readyz?verbose");
        assert!(verbose.stdout.contains("[+]etcd-readiness ok"), "{verbose:?}");
    });

    t.time("namespaces", || {
        api.ok("create namespace e2e");
        api.ok("create namespace paging");
        api.ok("create namespace bulk");
        assert_eq!(api.json("get namespace e2e")["status"]["phase"], "Active");
        // kube-apiserver creates the system namespaces itself, around the time it gets ready.
        eventually("system namespaces", Duration::from_secs(30), || {
            let names = api.ok("get namespaces -o name");
            ["default", "kube-system", "kube-public", "kube-node-lease", "e2e", "paging", "bulk"]
                .iter()
                .all(|n| names.lines().any(|l| l == format!("namespace/{n}")))
                .then_some(())
        });
        api.ok("label namespace e2e team=storage");
        assert_eq!(api.json("get namespace e2e")["metadata"]["labels"]["team"], "storage");
    });

    // An object whose revision compaction will pass later (the 410 checks at the end).
    let old = api.with_object("create", &configmap("e2e", "old", json!({}), json!({"v": "1"})));
    let (old_rv, old_at) = (rv(&old), Instant::now());
    api.patch("configmap old -n e2e", r#"{"data":{"v":"2"}}"#);
    // The same for a resource whose watch cache is off (`--watch-cache-sizes=podtemplates#0`),
    // so that a watch from its revision reaches the backend.
    let pt = json!({
        "apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "old", "namespace": "e2e"},
        "template": {"metadata": {"labels": {"app": "old"}},
                     "spec": {"containers": [{"name": "c", "image": "example.invalid/c"}]}}});
    let old_pt_rv = rv(&api.with_object("create", &pt));
    api.patch("podtemplate old -n e2e", r#"{"metadata":{"labels":{"v":"2"}}}"#);

    // An Event, which kube-apiserver stores under a lease of --event-ttl: checked near the end.
    let event_at = Instant::now();
    let mut event_watch = t.time("event create", || {
        let now = now_rfc3339();
        let event = json!({
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": "ev1", "namespace": "e2e"},
            "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "e2e",
                               "name": "old"},
            "reason": "E2E", "message": "expires with --event-ttl", "type": "Normal",
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "source": {"component": "k8s-e2e"}});
        let created = api.with_object("create", &event);
        assert_eq!(created["reason"], "E2E");
        // Its DELETED event, when the backend expires the lease, is timed by this watch.
        let path = format!(
            "/api/v1/namespaces/e2e/events?watch=1&resourceVersion={}\
             &fieldSelector=metadata.name%3Dev1",
            rv(&created)
        );
        api.stream("get --raw", &[&path])
    });

    t.time("configmap create/get/update/patch/delete", || {
        api.ok("create configmap cm1 -n e2e --from-literal=a=1");
        let mut cm = api.json("get configmap cm1 -n e2e");
        assert_eq!(cm["data"], json!({"a": "1"}));
        let rv1 = rv(&cm);
        cm["data"]["a"] = json!("2");
        let updated = api.with_object("replace", &cm);
        assert!(rv(&updated) > rv1, "update: {rv1} -> {}", rv(&updated));
        api.patch("configmap cm1 -n e2e", r#"{"data":{"b":"x"}}"#);
        let json_patch = r#"[{"op":"remove","path":"/data/a"}]"#;
        api.ok_with("patch configmap cm1 -n e2e --type=json", &["-p", json_patch], None);
        assert_eq!(api.json("get configmap cm1 -n e2e")["data"], json!({"b": "x"}));
        api.ok("delete configmap cm1 -n e2e");
        let gone = api.try_("get configmap cm1 -n e2e");
        assert!(not_found(&gone), "{gone:?}");
    });

    t.time("secret create/get/update/patch/delete", || {
        api.ok("create secret generic s1 -n e2e --from-literal=password=hunter2");
        let mut s = api.json("get secret s1 -n e2e");
        assert_eq!(s["data"]["password"], base64(b"hunter2"));
        s["data"]["password"] = json!(base64(b"hunter3"));
        api.with_object("replace", &s);
        let s = api.patch("secret s1 -n e2e", r#"{"stringData":{"user":"admin"}}"#);
        assert_eq!(s["data"], json!({"password": base64(b"hunter3"), "user": base64(b"admin")}));
        api.ok("delete secret s1 -n e2e");
        assert!(not_found(&api.try_("get secret s1 -n e2e")));
    });

    t.time("409: stale resourceVersion, existing name", || {
        api.ok("create configmap c1 -n e2e --from-literal=k=1");
        let mut stale = api.json("get configmap c1 -n e2e");
        api.patch("configmap c1 -n e2e", r#"{"data":{"k":"2"}}"#);
        stale["data"]["k"] = json!("3");
        let err = api.fails("replace -f -", Some(&stale.to_string()));
        assert!(
            err.contains("(Conflict)") && err.contains("the object has been modified"),
            "{err}"
        );
        let err = api.fails("create configmap c1 -n e2e", None);
        assert!(err.contains("configmaps \"c1\" already exists"), "{err}");
        assert_eq!(api.json("get configmap c1 -n e2e")["data"], json!({"k": "2"}));
    });

    t.time("server-side apply (+ conflict)", || {
        let ssa = |v: &str| configmap("e2e", "ssa1", json!({}), json!({"k": v})).to_string();
        api.ok_with("apply --server-side --field-manager=mgr-a -f -", &[], Some(&ssa("v1")));
        api.ok_with("apply --server-side --field-manager=mgr-a -f -", &[], Some(&ssa("v2")));
        assert_eq!(api.json("get configmap ssa1 -n e2e")["data"]["k"], "v2");
        let err = api.fails("apply --server-side --field-manager=mgr-b -f -", Some(&ssa("v3")));
        assert!(err.contains("conflict") && err.contains("mgr-a"), "{err}");
        let force = "apply --server-side --field-manager=mgr-b --force-conflicts -f -";
        api.ok_with(force, &[], Some(&ssa("v3")));
        let cm = api.json("get configmap ssa1 -n e2e --show-managed-fields");
        assert_eq!(cm["data"]["k"], "v3");
        let appliers: Vec<&str> = cm["metadata"]["managedFields"]
            .as_array()
            .expect("managedFields")
            .iter()
            .filter(|m| m["operation"] == "Apply")
            .filter_map(|m| m["manager"].as_str())
            .collect();
        assert!(appliers.contains(&"mgr-b"), "{appliers:?}");
    });

    // 30 ConfigMaps in a namespace of their own, read back in pages of 7.
    const N: usize = 30;
    let first_continue = t.time("paged lists (30 objects, continue tokens)", || {
        let items: Vec<Value> = (0..N)
            .map(|i| {
                let data = json!({"i": i.to_string()});
                configmap("paging", &format!("p{i:02}"), json!({"batch": "1"}), data)
            })
            .collect();
        let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
        api.ok_with("create -f -", &[], Some(&list.to_string()));
        let (mut names, mut pages, mut list_rv) = (Vec::new(), 0, None);
        let (mut token, mut first_token) = (String::new(), None);
        loop {
            let mut path = "/api/v1/namespaces/paging/configmaps?limit=7".to_string();
            if !token.is_empty() {
                path.push_str(&format!("&continue={token}"));
            }
            let page = parse(&api.check(&path, api.raw(&path)));
            let meta = &page["metadata"];
            if pages == 0 {
                assert_eq!(meta["remainingItemCount"], json!(N - 7), "{meta}");
            }
            // Every page of one list is read at the first page's revision.
            let page_rv = meta["resourceVersion"].as_str().expect("list RV").to_string();
            assert_eq!(list_rv.get_or_insert_with(|| page_rv.clone()), &page_rv);
            let items = page["items"].as_array().expect("items");
            names.extend(items.iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()));
            pages += 1;
            token = meta["continue"].as_str().unwrap_or("").to_string();
            first_token.get_or_insert_with(|| token.clone());
            if token.is_empty() {
                break;
            }
        }
        let want: Vec<String> = (0..N).map(|i| format!("p{i:02}")).collect();
        assert_eq!((names, pages), (want, N.div_ceil(7)));
        let out = api.ok("get configmaps -n paging --chunk-size=7 -o name");
        assert_eq!(out.lines().count(), N, "{out}");
        let out = api.ok("get configmaps -n paging -l batch=1 --chunk-size=4 -o name");
        assert_eq!(out.lines().count(), N, "{out}");
        first_token.expect("a first page")
    });

    // Many requests from one kubectl each, so that the backend shows more than process starts.
    const BULK: usize = 200;
    t.time("bulk: 200 creates (one kubectl)", || {
        let items: Vec<Value> = (0..BULK)
            .map(|i| {
                configmap("bulk", &format!("b{i:03}"), json!({}), json!({"v": "x".repeat(300)}))
            })
            .collect();
        let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
        api.ok_with("create -f -", &[], Some(&list.to_string()));
    });
    t.time("bulk: list 200 in pages of 50", || {
        let out = api.ok("get configmaps -n bulk --chunk-size=50 -o name");
        assert_eq!(out.lines().count(), BULK, "{out}");
    });
    t.time("bulk: 200 deletes (one kubectl)", || {
        let out = api.ok("delete configmaps -n bulk --all --wait=false");
        assert_eq!(out.lines().count(), BULK, "{out}");
        assert_eq!(api.ok("get configmaps -n bulk -o name").lines().count(), 0);
    });

    t.time("kubectl get -w: ADDED/MODIFIED/DELETED", || {
        let mut w =
            api.stream("get configmaps -n e2e -l app=watchme -w --output-watch-events", &[]);
        let w1 = configmap("e2e", "w1", json!({"app": "watchme"}), json!({"n": "0"}));
        api.with_object("create", &w1);
        w.expect("ADDED w1", Duration::from_secs(20), table_event("ADDED", "w1"));
        api.patch("configmap w1 -n e2e", r#"{"data":{"n":"1"}}"#);
        w.expect("MODIFIED w1", Duration::from_secs(20), table_event("MODIFIED", "w1"));
        api.ok("delete configmap w1 -n e2e");
        w.expect("DELETED w1", Duration::from_secs(20), table_event("DELETED", "w1"));
    });

    t.time("watch replay from a resourceVersion", || {
        let r1 = api.with_object("create", &configmap("e2e", "r1", json!({}), json!({"n": "0"})));
        let from = rv(&r1);
        let modified_rv = rv(&api.patch("configmap r1 -n e2e", r#"{"data":{"n":"1"}}"#));
        api.ok("delete configmap r1 -n e2e");
        let path = format!(
            "/api/v1/namespaces/e2e/configmaps?watch=1&resourceVersion={from}\
             &fieldSelector=metadata.name%3Dr1"
        );
        let mut w = api.stream("get --raw", &[&path]);
        let first = parse(&w.expect("a replayed event", Duration::from_secs(20), |_| true));
        assert_eq!(first["type"], "MODIFIED", "{first}");
        assert_eq!(
            (rv(&first["object"]), &first["object"]["data"]),
            (modified_rv, &json!({"n": "1"}))
        );
        let second = parse(&w.expect("a replayed event", Duration::from_secs(20), |_| true));
        assert_eq!(second["type"], "DELETED", "{second}");
        assert!(rv(&second["object"]) > modified_rv, "{second}");
    });

    t.time("node lease create + 5 renewals", || {
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "node-e2e", "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": "node-e2e", "leaseDurationSeconds": 40,
                     "renewTime": now_rfc3339()}});
        let mut lease = api.with_object("create", &lease);
        for _ in 0..5 {
            // As the kubelet renews: an update carrying the resourceVersion it last saw.
            let (before, renew) = (rv(&lease), now_rfc3339());
            lease["spec"]["renewTime"] = json!(renew);
            lease = api.with_object("replace", &lease);
            assert!(rv(&lease) > before);
            assert_eq!(lease["spec"]["renewTime"], json!(renew));
        }
        assert_eq!(rv(&api.json("get lease node-e2e -n kube-node-lease")), rv(&lease));
        // kube-apiserver's own identity lease, which it renews itself.
        eventually("kube-apiserver identity lease", Duration::from_secs(30), || {
            let out = api.ok("get leases -n kube-system -o name");
            out.lines().any(|l| l.starts_with("lease.coordination.k8s.io/apiserver-")).then_some(())
        });
    });

    t.time("CRD + custom resources (+ CRD deletion)", || {
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.e2e.mem-etcd.io"},
            "spec": {"group": "e2e.mem-etcd.io", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                          "listKind": "WidgetList"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {
                            "size": {"type": "integer"}, "color": {"type": "string"}}}}}}}]}});
        api.with_object("create", &crd);
        api.ok("wait --for=condition=Established crd/widgets.e2e.mem-etcd.io --timeout=30s");
        let widget = |name: &str, size: i64| {
            json!({"apiVersion": "e2e.mem-etcd.io/v1", "kind": "Widget",
                   "metadata": {"name": name, "namespace": "e2e"},
                   "spec": {"size": size, "color": "blue"}})
            .to_string()
        };
        // Discovery may lag the Established condition by a moment.
        eventually("the first custom resource", Duration::from_secs(30), || {
            api.run_cmd("create -f -", &[], Some(&widget("wa", 3))).ok().then_some(())
        });
        api.ok_with("create -f -", &[], Some(&widget("wb", 4)));
        assert_eq!(api.json("get widget wa -n e2e")["spec"]["size"], 3);
        assert_eq!(api.patch("widget wa -n e2e", r#"{"spec":{"size":5}}"#)["spec"]["size"], 5);
        assert_eq!(api.json("get widget wa -n e2e")["spec"]["size"], 5);
        let names = api.ok("get widgets -n e2e --chunk-size=1 -o name");
        assert_eq!(names.lines().count(), 2, "{names}");
        api.ok("delete widget wa -n e2e");
        assert!(not_found(&api.try_("get widget wa -n e2e")));
        // The CRD's finalizer (kube-apiserver runs it) deletes the remaining instances first.
        api.ok("delete crd widgets.e2e.mem-etcd.io --timeout=60s");
        assert!(not_found(&api.try_("get crd widgets.e2e.mem-etcd.io")));
    });

    // The event's lease expired: the backend deleted it, and watchers heard.
    let deleted = parse(&event_watch.expect("ev1 DELETED", EVENT_TTL * 6, |_| true));
    assert_eq!(
        (&deleted["type"], &deleted["object"]["metadata"]["name"]),
        (&json!("DELETED"), &json!("ev1"))
    );
    let expired = event_watch.last_at.unwrap() - event_at;
    assert!(expired >= EVENT_TTL, "event deleted after {expired:?}, before its TTL");
    assert!(not_found(&api.try_("get event ev1 -n e2e")));
    t.record("event expired: DELETED watched (since create; TTL 5 s)", expired);

    // Consistent LISTs were served from the watch cache, which needs working progress
    // notifications (RequestWatchProgress); a fallback to etcd means the cache could not catch
    // up with a revision in time.
    t.time("consistent reads from cache (/metrics)", || {
        let metrics = api.check("/metrics", api.raw("/metrics"));
        let (mut from_cache, mut fallback) = (0.0, 0.0);
        let family = "apiserver_watch_cache_consistent_read_total{";
        for l in metrics.lines().filter(|l| l.starts_with(family)) {
            let v: f64 = l.rsplit(' ').next().unwrap().parse().unwrap();
            if l.contains("fallback=\"true\"") || l.contains("success=\"false\"") {
                fallback += v;
            } else {
                from_cache += v;
            }
        }
        let figures = format!(
            "{backend}: consistent reads from cache {from_cache}, fallen back or failed {fallback}"
        );
        say(&figures);
        // mem_etcd answers every progress request, so nothing falls back. etcd promises less: it
        // drops progress requests while a watcher is catching up, so under load kube-apiserver
        // may fall back to it; its figures are reported, not asserted.
        if backend == "mem_etcd" {
            assert!(from_cache > 0.0 && fallback == 0.0, "{figures}");
        }
    });

    // 410 Gone once compaction passed the old revisions, for the three requests that reach the
    // backend at an old revision: a watch on a resource without watch cache, a continue token,
    // and an exact-RV list. kube-apiserver compacts every interval to the revision it saw one
    // interval before. (A watch served by the watch cache would still replay: the cache keeps its
    // own window of events, whatever the backend compacted.)
    let checks = [
        format!(
            "/api/v1/namespaces/e2e/podtemplates?watch=1&resourceVersion={old_pt_rv}\
             &timeoutSeconds=1"
        ),
        format!("/api/v1/namespaces/paging/configmaps?limit=7&continue={first_continue}"),
        format!(
            "/api/v1/namespaces/e2e/configmaps?resourceVersion={old_rv}&resourceVersionMatch=Exact"
        ),
    ];
    let mut gone: [Option<Duration>; 3] = [None; 3];
    let mut last: [Option<Out>; 3] = [None, None, None];
    while gone.iter().any(Option::is_none) {
        for ((path, when), last) in checks.iter().zip(gone.iter_mut()).zip(last.iter_mut()) {
            if when.is_none() {
                let out = api.raw(path);
                if out.gone() {
                    *when = Some(old_at.elapsed());
                }
                *last = Some(out);
            }
        }
        assert!(
            old_at.elapsed() < Duration::from_secs(90),
            "{backend}: no 410 Gone within 90 s of the old revision:\n{}",
            checks
                .iter()
                .zip(&gone)
                .zip(&last)
                .filter(|((_, when), _)| when.is_none())
                .map(|((path, _), out)| format!("{path}: {out:?}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    t.record("410: uncached watch from an old RV (since it)", gone[0].unwrap());
    t.record("410: continue token (since the old RV)", gone[1].unwrap());
    t.record("410: exact-RV list (since the old RV)", gone[2].unwrap());
    // The newest state is still there.
    assert_eq!(api.json("get configmap old -n e2e")["data"]["v"], "2");

    api.assert_log_clean(backend);
}

/// Matches `kubectl get -w --output-watch-events` table lines: `EVENT NAME ...`.
fn table_event(ty: &'static str, name: &'static str) -> impl Fn(&str) -> bool {
    move |line| {
        let mut f = line.split_whitespace();
        f.next() == Some(ty) && f.next() == Some(name)
    }
}

/// Runs the flow on a fresh kube-apiserver over `etcd` at `endpoint` (kube-apiserver's `extra`
/// flags with it); returns the timings.
fn flow_on(
    peers: &Peers,
    etcd: &Server,
    endpoint: &str,
    extra: &[String],
    backend: &str,
) -> Timings {
    let mut api = Apiserver::start_with(peers, endpoint, extra);
    let mut t = Timings::default();
    t.record("kube-apiserver ready (spawn to /readyz ok)", api.wait_ready());
    let healthz = api.check("/healthz?verbose", api.raw("/healthz?verbose"));
    assert!(
        healthz.contains("[+]etcd ok"),
        "{backend}: no etcd check in /healthz?verbose:\n{healthz}"
    );
    exercise(&api, backend, &mut t);
    let errors = api.error_lines();
    eprintln!("kube-apiserver on {backend}: {} error lines in its log", errors.len());
    for l in errors.iter().take(30) {
        eprintln!("  {l}");
    }
    let (warn, error) = (etcd.grep_log("warn"), etcd.grep_log("error"));
    eprintln!(
        "{backend}: {} lines with `warn`, {} with `error` in its log",
        warn.len(),
        error.len()
    );
    for l in warn.iter().chain(&error).take(30) {
        eprintln!("  {l}");
    }
    t
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// kube-apiserver's flow on mem_etcd, then on a real etcd 3.6 for the comparison (and to prove
/// the expectations). mem_etcd is reached over mutual TLS (`--etcd-cafile`, `--etcd-certfile`,
/// `--etcd-keyfile` against an `https://` listener with `--client-cert-auth`), as kubeadm runs
/// it: grpc-go negotiates h2 over ALPN and every request carries the client certificate. (One
/// kube-apiserver serves both checks: each start costs tens of seconds of CI.)
#[tokio::test]
async fn kube_apiserver_on_mem_etcd_over_mutual_tls_and_on_etcd() {
    let _serial = SERIAL.lock().await;
    let Some(peers) = peers() else { return };

    let certs = crate::security::tls::Certs::new();
    let mut flags = vec!["--wal-mode=buffered".to_string()];
    flags.extend(certs.server_flags(true));
    let (mem, https) = crate::security::tls::start_tls(&flags).await;
    let extra = [
        certs.arg("--etcd-cafile", "ca.crt"),
        certs.arg("--etcd-certfile", "client.crt"),
        certs.arg("--etcd-keyfile", "client.key"),
    ];
    let on_mem = flow_on(&peers, &mem, &format!("https://{https}"), &extra, "mem_etcd");
    // Stored in mem_etcd, which its plain listener shows.
    let mut c = mem.client().await;
    let keys = keys_under(&mut c, "/registry/namespaces/").await;
    assert!(!keys.is_empty(), "no namespace in mem_etcd after kube-apiserver's flow");
    // No handshake was refused: every connection kube-apiserver made carried its certificate.
    assert!(mem.grep_log("rejected connection").is_empty(), "{}", mem.log_tail());
    drop(mem);

    let on_etcd = Server::start(Kind::Etcd, &[])
        .await
        .map(|etcd| flow_on(&peers, &etcd, &etcd.endpoint(), &[], "etcd"));

    let mut table =
        String::from("\nkube-apiserver 1.36 end to end | mem_etcd (mutual TLS) | etcd 3.6\n");
    table.push_str("--- | --: | --:\n");
    for (i, (name, d)) in on_mem.0.iter().enumerate() {
        let theirs = on_etcd.as_ref().map(|e| ms(e.0[i].1)).unwrap_or_else(|| "skipped".into());
        table.push_str(&format!("{name} | {} | {theirs}\n", ms(*d)));
    }
    say(&table);
    if on_etcd.is_none() {
        loud("k8s_e2e: the etcd column was SKIPPED (no etcd peer; MEM_ETCD_SKIP_PEERS=1)");
    }
}

#[tokio::test]
async fn kube_apiserver_survives_mem_etcd_restart() {
    let _serial = SERIAL.lock().await;
    let Some(peers) = peers() else { return };

    let dir = DataDir::new();
    let mem = dir.start(&["--wal-mode=buffered"]).await;
    let port = mem.addr().port();
    let mut api = Apiserver::start(&peers, &mem.endpoint());
    let ready = api.wait_ready();

    api.ok("create namespace r");
    let before = configmap("r", "before", json!({}), json!({"k": "v"}));
    let before = api.with_object("create", &before);
    api.ok("create secret generic sec -n r --from-literal=p=q");
    // A watch through kube-apiserver (its watch cache, fed by its etcd watch) across the restart.
    let mut w = api.stream("get configmaps -n r -w --output-watch-events", &[]);
    w.expect("ADDED before", Duration::from_secs(20), table_event("ADDED", "before"));

    // A clean stop (SIGTERM), as an operator restarts it. mem_etcd must exit promptly although
    // kube-apiserver keeps watch and lease keep-alive streams open on it; if it does not, it is
    // killed so the rest of the scenario still runs, and the test fails at the end. (Nothing
    // is lost by the kill: after SIGTERM no new request is served, and the buffered WAL is
    // flushed within its 10 ms interval.)
    let stopping = Instant::now();
    let (exited, clean) = mem.stop_or_kill(STOP_WITHIN).await;
    let stop_took = stopping.elapsed();
    let down = Instant::now();
    let unready = eventually("kube-apiserver to notice", Duration::from_secs(30), || {
        (!api.is_ready()).then(|| down.elapsed())
    });

    let listen = format!("--listen-client-urls=http://127.0.0.1:{port}");
    let mem = dir.start(&["--wal-mode=buffered", &listen]).await;
    assert_eq!(mem.addr().port(), port);
    let up = Instant::now();
    let recovered = eventually("kube-apiserver ready again", Duration::from_secs(60), || {
        api.is_ready().then(|| up.elapsed())
    });

    // Objects intact, at the same resourceVersion.
    let got = api.json("get configmap before -n r");
    assert_eq!((&got["data"], rv(&got)), (&json!({"k": "v"}), rv(&before)));
    assert_eq!(api.json("get secret sec -n r")["data"]["p"], base64(b"q"));
    // New writes work, at later revisions, and the watch opened before the restart sees them.
    let writes = Instant::now();
    let after = api.with_object("create", &configmap("r", "after", json!({}), json!({"k": "w"})));
    assert!(rv(&after) > rv(&before));
    api.patch("configmap before -n r", r#"{"data":{"k":"v2"}}"#);
    w.expect("ADDED after", Duration::from_secs(30), table_event("ADDED", "after"));
    w.expect("MODIFIED before", Duration::from_secs(30), table_event("MODIFIED", "before"));
    let names = api.ok("get configmaps -n r -o name");
    assert_eq!(names.lines().collect::<Vec<_>>(), ["configmap/after", "configmap/before"]);
    let writes = writes.elapsed();
    api.assert_log_clean("mem_etcd (restarted)");
    say(&format!(
        "\nmem_etcd restart under kube-apiserver 1.36: ready {} after spawn; mem_etcd {} {} \
         after SIGTERM; kube-apiserver not ready {} later; ready again {} after mem_etcd \
         restarted; then writes + watch events {}",
        ms(ready),
        if clean { "exited" } else { "was still running (killed)" },
        ms(stop_took),
        ms(unready),
        ms(recovered),
        ms(writes)
    ));
    assert!(
        clean,
        "mem_etcd did not exit within {STOP_WITHIN:?} of SIGTERM while kube-apiserver was \
         connected (it was killed with SIGKILL; kube-apiserver then recovered: ready again {} \
         after the restart). Its output:\n{}",
        ms(recovered),
        exited.output()
    );
    assert!(exited.status.success(), "mem_etcd exit after SIGTERM: {}", exited.output());

    drop(w);
    drop(api);
    drop(mem);
}

/// Every key under `prefix` on `c` (keys only), checking that the reported count agrees.
async fn keys_under(c: &mut etcd_client::Client, prefix: &str) -> Vec<Kv> {
    let opts = etcd_client::GetOptions::new().with_prefix().with_keys_only();
    let r = c.get(prefix, Some(opts)).await.unwrap_or_else(|e| panic!("range {prefix}: {e}"));
    assert_eq!(r.count(), r.kvs().len() as i64, "range {prefix}: count vs kvs");
    kvs(r.kvs())
}

/// The keys of `list`, as strings.
fn key_names(list: &[Kv]) -> Vec<String> {
    list.iter().map(|k| String::from_utf8_lossy(&k.key).into_owned()).collect()
}

#[tokio::test]
async fn kube_apiserver_shards_leases_and_events() {
    const NODES: usize = 3;
    const RENEWALS: usize = 3;
    let _serial = SERIAL.lock().await;
    let Some(peers) = peers() else { return };
    let started = Instant::now();
    let main = Server::start(Kind::MemEtcd, &["--wal-mode=buffered", "--name=main"]).await;
    let main = main.expect("mem_etcd main");
    let side = Server::start(Kind::MemEtcd, &["--wal-mode=buffered", "--name=side"]).await;
    let side = side.expect("mem_etcd side");
    let overrides = format!(
        "--etcd-servers-overrides=coordination.k8s.io/leases#{0},/events#{0}",
        side.endpoint()
    );
    // A long event TTL: the events must still be there when the keys are counted.
    let extra = [overrides, "--event-ttl=1h".to_string()];
    let mut api = Apiserver::start_with(&peers, &main.endpoint(), &extra);
    let ready = api.wait_ready();
    let (mut mc, mut sc) = (main.client().await, side.client().await);

    // kube-apiserver health-checks both: the main etcd and the override.
    let healthz = api.check("/healthz?verbose", api.raw("/healthz?verbose"));
    for check in ["[+]etcd ok", "[+]etcd-override-0 ok"] {
        assert!(healthz.contains(check), "no {check:?} in /healthz?verbose:\n{healthz}");
    }
    let readyz = api.check("/readyz?verbose", api.raw("/readyz?verbose"));
    assert!(readyz.contains("[+]etcd-readiness ok"), "{readyz}");
    for path in ["/healthz/etcd", "/healthz/etcd-override-0", "/livez/etcd-override-0"] {
        let out = api.raw(path);
        assert!(out.ok() && out.stdout.trim() == "ok", "{path}: {out:?}");
    }

    api.ok("create namespace shard");
    // Watches through kube-apiserver, opened before the writes: node leases (kubectl's table)
    // and events (JSON lines; the events table shows no names).
    let mut lease_w = api.stream("get leases -n kube-node-lease -w --output-watch-events", &[]);
    let mut event_w = api.stream("get --raw", &["/api/v1/namespaces/shard/events?watch=1"]);

    // Node leases, created and renewed as a kubelet does (an update at the RV it last saw).
    let mut leases: Vec<Value> = (0..NODES)
        .map(|i| {
            let name = format!("node-{i}");
            api.with_object(
                "create",
                &json!({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": name, "namespace": "kube-node-lease"},
                    "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
                             "renewTime": now_rfc3339()}}),
            )
        })
        .collect();
    let created_rv: Vec<u64> = leases.iter().map(rv).collect();
    // ADDED comes from the watch or, had kubectl listed after the creates, from its list; either
    // way the watch is running from here on, and every renewal must reach it.
    for i in 0..NODES {
        let name = format!("node-{i}");
        lease_w.expect(&format!("ADDED {name}"), Duration::from_secs(20), move |l| {
            let mut f = l.split_whitespace();
            f.next() == Some("ADDED") && f.next() == Some(name.as_str())
        });
    }
    for _ in 0..RENEWALS {
        for lease in &mut leases {
            let before = rv(lease);
            lease["spec"]["renewTime"] = json!(now_rfc3339());
            *lease = api.with_object("replace", lease);
            assert!(rv(lease) > before);
        }
    }
    let mut modified = vec![0; NODES];
    for _ in 0..NODES * RENEWALS {
        let line =
            lease_w.expect("MODIFIED", Duration::from_secs(20), |l| l.starts_with("MODIFIED "));
        let name = line.split_whitespace().nth(1).unwrap_or_default();
        let i: usize = name
            .strip_prefix("node-")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        modified[i] += 1;
    }
    assert_eq!(modified, [RENEWALS; NODES], "MODIFIED events per node lease");

    // Events: three core/v1 ones and one events.k8s.io/v1 one, the same resource in storage.
    let mut event_rv = Vec::new();
    for i in 0..3 {
        let now = now_rfc3339();
        let ev = api.with_object(
            "create",
            &json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": format!("ev-{i}"), "namespace": "shard"},
                "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "shard", "name": "cm"},
                "reason": format!("Shard{i}"), "message": "stored on the override etcd",
                "type": "Normal", "firstTimestamp": now, "lastTimestamp": now, "count": 1,
                "source": {"component": "k8s-e2e"}}),
        );
        event_rv.push(rv(&ev));
    }
    let ev = api.with_object(
        "create",
        &json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "ev-new", "namespace": "shard"},
            "eventTime": now_rfc3339(), "reportingController": "e2e.mem-etcd.io/k8s-e2e",
            "reportingInstance": "k8s-e2e-1", "action": "Check", "reason": "ShardNew",
            "regarding": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "shard", "name": "cm"},
            "note": "stored on the override etcd", "type": "Normal"}),
    );
    event_rv.push(rv(&ev));
    let event_names = ["ev-0", "ev-1", "ev-2", "ev-new"];
    for name in event_names {
        event_w.expect(&format!("ADDED {name}"), Duration::from_secs(20), |l| {
            let e = parse(l);
            e["type"] == "ADDED" && e["object"]["metadata"]["name"] == name
        });
    }

    // And a ConfigMap, which stays on the main etcd.
    let cm = api.with_object("create", &configmap("shard", "cm", json!({}), json!({"k": "v"})));

    // What each mem_etcd holds. kube-apiserver's resourceVersions are the revisions of the etcd
    // that stores the resource, so they name the instance too.
    let node_keys: Vec<String> =
        (0..NODES).map(|i| format!("/registry/leases/kube-node-lease/node-{i}")).collect();
    let on_side = keys_under(&mut sc, "/registry/leases/kube-node-lease/").await;
    assert_eq!(key_names(&on_side), node_keys, "node leases on the override etcd");
    for (i, k) in on_side.iter().enumerate() {
        let want = (created_rv[i], rv(&leases[i]), 1 + RENEWALS as i64);
        assert_eq!((k.create_revision as u64, k.mod_revision as u64, k.version), want, "{k:?}");
    }
    let event_keys: Vec<String> =
        event_names.iter().map(|n| format!("/registry/events/shard/{n}")).collect();
    let on_side = keys_under(&mut sc, "/registry/events/shard/").await;
    assert_eq!(key_names(&on_side), event_keys, "events on the override etcd");
    for (k, want_rv) in on_side.iter().zip(&event_rv) {
        assert_eq!(k.mod_revision as u64, *want_rv, "{k:?}");
        // Stored under an etcd lease of --event-ttl, granted on the override etcd too.
        assert_ne!(k.lease, 0, "{k:?}");
        let opts = etcd_client::LeaseTimeToLiveOptions::new().with_keys();
        let ttl = sc.lease_time_to_live(k.lease, Some(opts)).await.expect("lease ttl");
        assert!(ttl.ttl() > 0 && ttl.keys().contains(&k.key), "{k:?}: {ttl:?}");
    }
    // kube-apiserver's own identity lease lives there as well.
    let system = key_names(&keys_under(&mut sc, "/registry/leases/kube-system/").await);
    assert!(system.iter().any(|k| k.contains("/apiserver-")), "{system:?}");
    // Nothing else is on the override etcd...
    let everything = key_names(&keys_under(&mut sc, "/registry/").await);
    let stray: Vec<&String> = everything
        .iter()
        .filter(|k| !k.starts_with("/registry/leases/") && !k.starts_with("/registry/events/"))
        .collect();
    assert!(stray.is_empty(), "other keys on the override etcd: {stray:?}");
    // ...and none of it on the main one, which has the rest.
    for prefix in ["/registry/leases/", "/registry/events/"] {
        let there = keys_under(&mut mc, prefix).await;
        assert!(there.is_empty(), "{prefix} on the main etcd: {:?}", key_names(&there));
    }
    let cms = keys_under(&mut mc, "/registry/configmaps/shard/").await;
    assert_eq!(key_names(&cms), ["/registry/configmaps/shard/cm"]);
    assert_eq!(cms[0].mod_revision as u64, rv(&cm));
    let ns = key_names(&keys_under(&mut mc, "/registry/namespaces/shard").await);
    assert_eq!(ns, ["/registry/namespaces/shard"]);

    // Everything reads back through kube-apiserver: gets, paged lists, `kubectl events`.
    assert_eq!(rv(&api.json("get lease node-1 -n kube-node-lease")), rv(&leases[1]));
    let list = api.json("get leases -n kube-node-lease --chunk-size=2");
    let got: Vec<(String, u64)> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|l| (l["metadata"]["name"].as_str().unwrap().to_string(), rv(l)))
        .collect();
    let want: Vec<(String, u64)> = leases
        .iter()
        .map(|l| (l["metadata"]["name"].as_str().unwrap().to_string(), rv(l)))
        .collect();
    assert_eq!(got, want);
    let all = api.ok("get leases -A --chunk-size=1 -o name");
    assert!(
        all.lines().filter(|l| l.starts_with("lease.coordination.k8s.io/node-")).count() == NODES,
        "{all}"
    );
    assert!(all.lines().any(|l| l.starts_with("lease.coordination.k8s.io/apiserver-")), "{all}");
    let names = api.ok("get events -n shard --chunk-size=2 -o name");
    let want: Vec<String> = event_names.iter().map(|n| format!("event/{n}")).collect();
    assert_eq!(names.lines().collect::<Vec<_>>(), want);
    let names = api.ok("get events.v1.events.k8s.io -n shard -o name");
    assert_eq!(names.lines().count(), event_names.len(), "{names}");
    let shown = api.ok("events -n shard");
    for reason in ["Shard0", "Shard1", "Shard2", "ShardNew"] {
        assert!(shown.contains(reason), "kubectl events: no {reason}:\n{shown}");
    }
    assert_eq!(api.json("get configmap cm -n shard")["data"], json!({"k": "v"}));

    // A replay from a lease's creation through the watch cache, and a delete watched live.
    let path = format!(
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases?watch=1\
         &resourceVersion={}&fieldSelector=metadata.name%3Dnode-0",
        created_rv[0]
    );
    let mut replay = api.stream("get --raw", &[&path]);
    let mut replayed = Vec::new();
    for _ in 0..RENEWALS {
        let e = parse(&replay.expect("a replayed renewal", Duration::from_secs(20), |_| true));
        assert_eq!(e["type"], "MODIFIED", "{e}");
        replayed.push(rv(&e["object"]));
    }
    assert!(replayed.windows(2).all(|w| w[0] < w[1]), "{replayed:?}");
    assert_eq!(replayed.last(), Some(&rv(&leases[0])));
    api.ok(&format!("delete lease node-{} -n kube-node-lease", NODES - 1));
    lease_w.expect("DELETED", Duration::from_secs(20), |l| l.starts_with("DELETED"));
    let on_side = keys_under(&mut sc, "/registry/leases/kube-node-lease/").await;
    assert_eq!(key_names(&on_side), node_keys[..NODES - 1]);
    api.ok("delete event ev-0 -n shard");
    event_w.expect("DELETED ev-0", Duration::from_secs(20), |l| {
        let e = parse(l);
        e["type"] == "DELETED" && e["object"]["metadata"]["name"] == "ev-0"
    });
    assert_eq!(keys_under(&mut sc, "/registry/events/shard/").await.len(), event_names.len() - 1);

    assert!(api.is_ready());
    api.assert_log_clean("mem_etcd (sharded)");

    // The override really is that second mem_etcd: with it gone, kube-apiserver's check of it
    // fails while the main one's passes and ConfigMaps still read.
    let exited = side.kill9();
    let down = Instant::now();
    eventually("/healthz/etcd-override-0 to fail", Duration::from_secs(20), || {
        (!api.raw("/healthz/etcd-override-0").ok()).then_some(())
    });
    let out = api.raw("/healthz/etcd");
    assert!(out.ok() && out.stdout.trim() == "ok", "/healthz/etcd: {out:?}");
    assert_eq!(api.json("get configmap cm -n shard")["data"], json!({"k": "v"}));
    let noticed = down.elapsed();
    let warned = exited.grep("warn").len() + exited.grep("error").len();
    say(&format!(
        "\nkube-apiserver 1.36 on two mem_etcd (leases and events on the second): ready {} \
         after spawn; its override check failing {} after the second was killed; whole \
         scenario {}; the second mem_etcd logged {warned} warn/error lines",
        ms(ready),
        ms(noticed),
        ms(started.elapsed())
    ));
    drop((lease_w, event_w, replay));
    drop(api);
}

#[test]
fn helpers_encode_as_go_expects() {
    assert_eq!(rfc3339(Duration::ZERO), "1970-01-01T00:00:00.000000Z");
    assert_eq!(rfc3339(Duration::from_secs(951_782_400)), "2000-02-29T00:00:00.000000Z");
    assert_eq!(
        rfc3339(Duration::from_micros(1_700_000_000_123_456)),
        "2023-11-14T22:13:20.123456Z"
    );
    assert_eq!(rfc3339(Duration::from_secs(4_107_542_399)), "2100-02-28T23:59:59.000000Z");
    let b: Vec<String> = ["", "f", "fo", "foo", "foob", "fooba", "foobar"]
        .iter()
        .map(|s| base64(s.as_bytes()))
        .collect();
    assert_eq!(b, ["", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"]);
    let pem = ec_p256_key_pem();
    let lines: Vec<&str> = pem.lines().collect();
    assert_eq!(lines.len(), 4, "{pem}");
    assert_eq!(
        (lines[0], lines[3]),
        ("-----BEGIN EC PRIVATE KEY-----", "-----END EC PRIVATE KEY-----")
    );
    // 51 bytes of DER: SEQUENCE { 1, OCTET STRING (32), [0] prime256v1 }.
    assert_eq!(lines[1].len() + lines[2].len(), 68);
    assert!(lines[1].starts_with("MDECAQEEI"), "{pem}");
}

/// Two kube-apiservers on a 3-member mem_etcd cluster: the whole flow through one (as on a
/// member alone), then both keep serving kubectl while the leader is killed and comes back:
/// every object created is there afterwards (read through the other apiserver), a watch through
/// the other apiserver sees every creation, node Lease renewals go on, and the errors last at
/// most a few seconds. Prints the flow's timings and the timeline. (One cluster and one pair
/// of kube-apiservers for both: each start costs tens of seconds of CI.)
#[tokio::test]
async fn kube_apiservers_on_a_three_member_cluster_ride_out_the_leader_being_killed() {
    let _serial = SERIAL.lock().await;
    let Some(peers) = peers() else { return };
    let mut c = crate::cluster::harness::Cluster::start(Kind::MemEtcd, 3, &["--wal-mode=buffered"])
        .await
        .expect("mem_etcd cluster");
    let servers = c.endpoints();
    let mut a = Apiserver::start(&peers, &servers);
    let mut b = Apiserver::start(&peers, &servers);
    let mut t = Timings::default();
    t.record("kube-apiserver ready (spawn to /readyz ok)", a.wait_ready());
    b.wait_ready();
    exercise(&a, "mem_etcd", &mut t);
    let mut table = String::from("\nkube-apiserver 1.36 on 3 mem_etcd members\n");
    for (name, d) in &t.0 {
        table.push_str(&format!("{name} | {}\n", ms(*d)));
    }
    say(&table);
    c.converged().await;

    a.ok("create namespace ha");
    // b sees what a writes, and the reverse.
    b.ok("create configmap from-b -n ha --from-literal=k=v");
    eventually("a reads b's write", Duration::from_secs(10), || {
        a.try_("get configmap from-b -n ha").ok().then_some(())
    });
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "node-1", "namespace": "ha"},
        "spec": {"holderIdentity": "node-1", "leaseDurationSeconds": 40, "renewTime": now_rfc3339()},
    });
    a.with_object("create", &lease);
    // (With `-o name` a watch prints one line per event: the object's name.)
    let mut watch = b.stream("get configmaps -n ha -w -o name", &[]);

    // Writes through a: a ConfigMap, then a node Lease renewal, in a loop, for 16 s; the leader
    // is killed 4 s in and restarted 10 s in. Each kubectl call is a process start, which on a
    // loaded CI machine can take most of a second, so the assertions count writes per phase
    // (before the kill, without the old leader, after its restart) rather than in total, and the
    // loop goes on past 16 s (at most to 40 s) until two of each have landed after the restart.
    let start = Instant::now();
    let mut created = Vec::new();
    let mut errors: Vec<Duration> = Vec::new();
    let (mut killed_at, mut restarted_at) = (None, None);
    // When each acknowledged ConfigMap creation and Lease renewal was sent.
    let (mut created_at, mut renewed_at): (Vec<Duration>, Vec<Duration>) = (Vec::new(), Vec::new());
    let after_restart = |at: &[Duration], restarted: Option<Duration>| {
        restarted.map_or(0, |r| at.iter().filter(|t| **t >= r).count())
    };
    let mut n = 0;
    // The longest kubectl request (how long a write waited for the new leader) and when it began.
    let mut slowest = (Duration::ZERO, Duration::ZERO);
    while start.elapsed() < Duration::from_secs(16)
        || (start.elapsed() < Duration::from_secs(40)
            && (after_restart(&created_at, restarted_at) < 2
                || after_restart(&renewed_at, restarted_at) < 2))
    {
        if killed_at.is_none() && start.elapsed() > Duration::from_secs(4) {
            let leader = c.leader().await;
            c.kill9(leader);
            killed_at = Some((start.elapsed(), leader));
        }
        if let (Some((_, leader)), None) = (killed_at, restarted_at)
            && start.elapsed() > Duration::from_secs(10)
        {
            c.restart(leader).await;
            restarted_at = Some(start.elapsed());
        }
        let name = format!("cm-{n}");
        n += 1;
        let sent = Instant::now();
        let cm = a.try_(&format!("create configmap {name} -n ha --from-literal=n={n}"));
        if sent.elapsed() > slowest.0 {
            slowest = (sent.elapsed(), sent - start);
        }
        if cm.ok() {
            created.push(name);
            created_at.push(sent - start);
        } else {
            errors.push(start.elapsed());
        }
        let renew = format!(r#"{{"spec":{{"renewTime":"{}"}}}}"#, now_rfc3339());
        let sent = Instant::now();
        let r = a.run_args(
            &["patch", "lease", "node-1", "-n", "ha", "--type=merge", "-p", &renew],
            None,
        );
        if sent.elapsed() > slowest.0 {
            slowest = (sent.elapsed(), sent - start);
        }
        if r.ok() {
            renewed_at.push(sent - start);
        } else {
            errors.push(start.elapsed());
        }
    }
    let (killed, _) = killed_at.expect("the leader was killed");
    // Nothing acknowledged is lost: every ConfigMap is there, read through the other apiserver.
    let listed = b.ok("get configmaps -n ha -o name");
    for name in &created {
        assert!(listed.lines().any(|l| l == format!("configmap/{name}")), "{name} lost:\n{listed}");
    }
    // And the watch through b saw every creation.
    for name in &created {
        let want = format!("configmap/{name}");
        watch.expect(&want, Duration::from_secs(30), |l| l == want);
    }
    let first_error = errors.first().copied();
    let last_error = errors.last().copied();
    let restarted = restarted_at.expect("the old leader was restarted");
    // Acknowledged writes sent before the kill, while the old leader was down, after its restart.
    let phases = |at: &[Duration]| {
        let before = at.iter().filter(|t| **t < killed).count();
        let down = at.iter().filter(|t| **t >= killed && **t < restarted).count();
        [before, down, at.len() - before - down]
    };
    let (cms, renewals) = (phases(&created_at), phases(&renewed_at));
    let timeline = format!(
        "\nkube-apiserver HA on 3 mem_etcd members: leader killed at {}, restarted at {}, \
         loop ended at {}; ConfigMaps created before/during/after the outage {cms:?}, Lease \
         renewals {renewals:?}; {} failed requests, first {} last {} (errors for {} after the \
         kill); slowest request {} (sent at {})\n",
        ms(killed),
        ms(restarted),
        ms(start.elapsed()),
        errors.len(),
        first_error.map_or("-".into(), ms),
        last_error.map_or("-".into(), ms),
        last_error.map_or("0 ms".into(), |l| ms(l.saturating_sub(killed))),
        ms(slowest.0),
        ms(slowest.1),
    );
    say(&timeline);
    // Writes land in every phase: the cluster serves without its old leader, and after the old
    // leader is back.
    assert!(cms[0] >= 1 && renewals[0] >= 1, "no write before the kill: {timeline}");
    assert!(cms[1] >= 1 && renewals[1] >= 1, "no write without the old leader: {timeline}");
    assert!(cms[2] >= 2 && renewals[2] >= 2, "too few writes after the restart: {timeline}");
    if let Some(l) = last_error {
        assert!(
            l.saturating_sub(killed) < Duration::from_secs(8),
            "errors for too long: {timeline}"
        );
    }
    drop(watch);
    drop(a);
    drop(b);
    c.converged().await;
}

mod migrate;

/// A hosted control plane on a shared mem_etcd (issue 50): kube-apiserver under
/// `--etcd-prefix=/tenant-a`, authenticated by a client certificate whose user owns `/tenant-a/`
/// and nothing else (as Kamaji provisions it), compacts its own keys every
/// `COMPACTION_INTERVAL` through a `compact_rev_key` of its own, where etcd would refuse its
/// user both the key and the Compact; the other tenant's history stays. The tenant is made at
/// run time by its user, role and grant alone (`--tenants-from-auth`), as Kamaji provisions it
/// on a running store.
#[tokio::test]
async fn kube_apiserver_of_a_tenant_compacts_its_own_keys_under_auth() {
    use etcd_client::{Client, ConnectOptions, GetOptions, Permission};
    let _serial = SERIAL.lock().await;
    let Some(peers) = peers() else { return };
    let certs = crate::security::tls::Certs::new();
    let mut flags = vec!["--wal-mode=buffered".to_string(), "--tenants-from-auth".into()];
    flags.extend(certs.server_flags(true));
    let (mem, https) = crate::security::tls::start_tls(&flags).await;
    let mut c = mem.client().await;
    let b_key = "/tenant-b/configmaps/default/b";
    let b1 = crate::support::rev(c.put(b_key, "1", None).await.unwrap().header());
    c.put(b_key, "2", None).await.unwrap();
    // Root, and the user of the client certificate (common name "client") owning /tenant-a/.
    c.user_add("root", "rootpw", None).await.unwrap();
    c.role_add("root").await.unwrap();
    c.user_grant_role("root", "root").await.unwrap();
    c.user_add("client", "clientpw", None).await.unwrap();
    c.role_add("tenant-a").await.unwrap();
    let perm = Permission::read_write("/tenant-a/").with_range_end("/tenant-a0");
    c.role_grant_permission("tenant-a", perm).await.unwrap();
    c.user_grant_role("client", "tenant-a").await.unwrap();
    c.auth_enable().await.unwrap();

    let extra = [
        certs.arg("--etcd-cafile", "ca.crt"),
        certs.arg("--etcd-certfile", "client.crt"),
        certs.arg("--etcd-keyfile", "client.key"),
        "--etcd-prefix=/tenant-a".to_string(),
    ];
    let mut api = Apiserver::start_with(&peers, &format!("https://{https}"), &extra);
    api.wait_ready();
    api.ok("create namespace t");
    for i in 0..3 {
        api.ok(&format!("create configmap c{i} -n t --from-literal=k=v{i}"));
    }
    // Its compactor's first round records a revision, its second compacts at it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let compacted = loop {
        let lines = mem.grep_log("finished scheduled compaction of a prefix");
        if let Some(l) = lines.iter().find(|l| l.contains("/tenant-a/")) {
            break l.clone();
        }
        assert!(
            Instant::now() < deadline,
            "kube-apiserver did not compact its prefix within 60 s:\n{}\n--- kube-apiserver ---\n{}",
            mem.log_tail(),
            api.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let at: i64 = serde_json::from_str::<Value>(&compacted).unwrap()["compact-revision"]
        .as_i64()
        .expect("the compaction revision");
    let root = ConnectOptions::new().with_user("root", "rootpw");
    let mut root = Client::connect([mem.endpoint()], Some(root)).await.unwrap();
    let own = root.get("/tenant-a/compact_rev_key", None).await.unwrap();
    assert!(own.kvs()[0].version() >= 2, "{own:?}");
    assert_eq!(root.get("compact_rev_key", None).await.unwrap().count(), 0);
    let below = root.get("/tenant-a/", Some(GetOptions::new().with_prefix().with_revision(at - 1)));
    let e = below.await.expect_err("tenant A's history below its compaction");
    assert!(e.to_string().contains("required revision has been compacted"), "{e}");
    let b = root.get(b_key, Some(GetOptions::new().with_revision(b1))).await.unwrap();
    assert_eq!(b.kvs()[0].value(), b"1", "tenant B's history is kept");
    // The tenant's objects are all there, through its kube-apiserver.
    let names = api.ok("get configmaps -n t -o name");
    for i in 0..3 {
        assert!(names.contains(&format!("configmap/c{i}")), "{names}");
    }
}
