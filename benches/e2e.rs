//! End-to-end benchmarks over gRPC: the same workloads against mem_etcd and a real etcd, in one
//! run, each on a fresh server, reporting throughput, the ratio, p99 latency and the server's CPU
//! time per operation.
//!
//! Run: `cargo bench --bench e2e [-- FILTER...]` (FILTER: a workload name, which selects exactly
//! that workload, or a part of one). `cargo bench --bench e2e -- --test` runs every workload
//! briefly against every server and fails unless each succeeded with nonzero throughput and no
//! errors; so does running the binary without `--bench` (as criterion does, for
//! `cargo test --benches`).
//!
//! Knobs (environment variables):
//! - `MEM_ETCD_E2E_SECS`: the run time of each workload on each server (default 5 s, 0.3 s in
//!   test mode).
//! - `MEM_ETCD_E2E_BIN=/path/to/mem_etcd`: the mem_etcd binary to measure (default: this
//!   crate's, as cargo built it), e.g. an older build.
//! - `MEM_ETCD_E2E_BIN2=/path/to/mem_etcd`: a second mem_etcd binary; every workload also runs
//!   against it, as a column "mem_etcd (B)" next to "mem_etcd (A)" (the first), with the ratio
//!   B/A: a before/after comparison from one run. JSON: `mem_etcd_b`, `ratio_b` (B/etcd) and
//!   `ratio_b_over_a` beside `mem_etcd`, `etcd` and `ratio` (A/etcd).
//! - `MEM_ETCD_E2E_MEMBERS=3` (default 1): every server (mem_etcd and etcd alike) runs as a
//!   cluster of that many members on 127.0.0.1 (fixed free ports, etcd's cluster flags: `--name
//!   mI --initial-cluster m0=…,m1=…,m2=… --initial-cluster-token bench-… --initial-cluster-state
//!   new`, peer and client URLs, a data dir of its own per member). All members start before
//!   the bench waits for each to answer a linearizable Range. Connection k goes to member
//!   k % N (one endpoint per connection, so followers serve requests too, as behind
//!   kube-apiservers), watch stream k to member k % N with the writer on m0, and the lease
//!   flood gets every member in `--endpoints`. Server CPU is summed over the members. The
//!   table's title and the JSON (`members`) say how many members.
//! - `ETCD_BIN`: the etcd binary (see below).
//!
//! Servers: mem_etcd (this crate's binary or `MEM_ETCD_E2E_BIN`, default buffered WAL) and etcd
//! from `ETCD_BIN`, else from `tests/peers/install_etcd.sh` (which builds etcd 3.6 once and
//! caches it in ~/.cache/mem_etcd). All keep their data on /dev/shm. Without an etcd binary the
//! run says so loudly and measures mem_etcd alone; with `CI` set that is an error. Every server
//! process (every cluster member) is killed when its workload ends, fails or panics, and on
//! Ctrl-C.
//!
//! The client is the `etcd-client` crate in this process (10 connections, 100 concurrent
//! requests), the same for every server, except for the lease flood, which runs this crate's
//! `etcd-lease-flood` binary. Client and servers share the machine's cores.
//!
//! Results: a table on stdout, and `target/e2e-bench.json` (`target/e2e-bench-test.json` in test
//! mode).

use std::collections::HashMap;
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use etcd_client::{
    Client, ConnectOptions, GetOptions, KvClient, Txn, TxnOp, WatchClient, WatchOptions,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc, watch};

/// gRPC connections per run (each an `etcd_client::Client` with a channel of its own).
const CONNS: usize = 10;
/// Requests in flight per run (closed loop: each task sends its next request when its last one
/// was answered).
const TASKS: usize = 100;
/// put and txn-put: distinct keys, each key 48 bytes, each value 1 KiB (etcd `benchmark put`).
const KEY_SPACE: u32 = 100_000;
const KV_VALUE: usize = 1024;
/// range: keys preloaded under one prefix, 350-byte values (a small Kubernetes object), read 500
/// at a time as kube-apiserver pages a LIST.
const RANGE_PREFIX: &str = "/bench/range/";
const RANGE_VALUE: usize = 350;
const RANGE_LIMIT: i64 = 500;
/// watch: watchers on one prefix; a single writer puts to 100 keys under it.
const WATCH_PREFIX: &str = "/bench/watch/";
const WATCH_VALUE: usize = 256;
/// How many puts the writer may run ahead of the watchers (in aggregate): enough to keep the
/// delivery pipeline full, below mem_etcd's 256-revision slow-watcher threshold.
const WATCH_WINDOW: u64 = 64;
/// lease-flood: node Leases, 100 writers on 10 connections.
const LEASE_KEYS: usize = 10_000;

// ----------------------------------------------------------------------------------------------
// Workloads and settings

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Workload {
    Put,
    TxnPut,
    Range,
    Watch,
    LeaseFlood,
}

impl Workload {
    const ALL: [Workload; 5] =
        [Workload::Put, Workload::TxnPut, Workload::Range, Workload::Watch, Workload::LeaseFlood];

    fn name(self) -> &'static str {
        match self {
            Workload::Put => "put",
            Workload::TxnPut => "txn-put",
            Workload::Range => "range",
            Workload::Watch => "watch",
            Workload::LeaseFlood => "lease-flood",
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Workload::Put | Workload::TxnPut | Workload::Range => "req/s",
            Workload::Watch => "events/s",
            Workload::LeaseFlood => "writes/s",
        }
    }

    fn describe(self, s: &Settings) -> String {
        let spread = if s.members > 1 {
            format!(" (connection k on member k % {})", s.members)
        } else {
            String::new()
        };
        match self {
            Workload::Put => format!(
                "Put, 48-byte keys from a {KEY_SPACE} key space, {KV_VALUE}-byte values, \
                 {TASKS} requests in flight over {CONNS} connections{spread}"
            ),
            Workload::TxnPut => "Txn with one Put (no compare), otherwise as put".to_string(),
            Workload::Range => format!(
                "linearizable Range over a prefix holding {} keys ({RANGE_VALUE}-byte values), \
                 limit {RANGE_LIMIT} (with count)",
                s.range_keys
            ),
            Workload::Watch => format!(
                "{} watchers ({} streams x {}) on one prefix, one writer putting \
                 {WATCH_VALUE}-byte values at most {WATCH_WINDOW} puts ahead of delivery; \
                 events delivered/s, p99 from put sent to event received{}",
                s.watch_streams * s.watchers_per_stream,
                s.watch_streams,
                s.watchers_per_stream,
                if s.members > 1 {
                    format!("; stream k on member k % {}, the writer on m0", s.members)
                } else {
                    String::new()
                }
            ),
            Workload::LeaseFlood => format!(
                "etcd-lease-flood: kube-apiserver's optimistic Txn (mod_revision compare, Put, \
                 else Range) on {LEASE_KEYS} node Leases (362-byte values), {TASKS} writers \
                 over {CONNS} connections{}",
                if s.members > 1 {
                    format!(" (--endpoints: all {} members, round robin)", s.members)
                } else {
                    String::new()
                }
            ),
        }
    }
}

#[derive(Clone, Debug)]
struct Settings {
    test: bool,
    duration: Duration,
    range_keys: usize,
    watch_streams: usize,
    watchers_per_stream: usize,
    /// Members per server (`MEM_ETCD_E2E_MEMBERS`): 1 runs single servers.
    members: usize,
}

impl Settings {
    fn new(test: bool, members: usize) -> Settings {
        let secs = std::env::var("MEM_ETCD_E2E_SECS")
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|s| *s > 0.0)
            .unwrap_or(if test { 0.3 } else { 5.0 });
        Settings {
            test,
            duration: Duration::from_secs_f64(secs),
            range_keys: if test { 1_000 } else { 5_000 },
            watch_streams: 10,
            watchers_per_stream: 100,
            members,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    MemEtcd,
    Etcd,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::MemEtcd => "mem_etcd",
            Kind::Etcd => "etcd",
        }
    }

    /// Flags beyond the addresses, the data dir and the log level.
    fn extra_args(self) -> Vec<String> {
        match self {
            // The WAL mode is mem_etcd's default (buffered), or MEM_ETCD_WAL_MODE.
            Kind::MemEtcd => Vec::new(),
            // As benches/compare_etcd.sh runs it.
            Kind::Etcd => vec!["--quota-backend-bytes".into(), "8589934592".into()],
        }
    }
}

/// One server column: a binary of one kind.
#[derive(Clone, Debug)]
struct Side {
    kind: Kind,
    /// Column header of the throughput column (etcd: with its version).
    label: String,
    /// Column header of the p99 and CPU columns, and the name in progress lines.
    short: String,
    /// Key of this server's figures in the JSON report.
    key: &'static str,
    /// None: no etcd binary was found (the column reads "-").
    bin: Option<PathBuf>,
}

/// What one workload measured against one server.
#[derive(Clone, Debug, Default)]
struct Measured {
    /// Successful operations (watch: events delivered).
    ops: u64,
    errors: u64,
    first_error: Option<String>,
    secs: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// The server process's user + system CPU time over the measurement.
    server_cpu_secs: f64,
    note: String,
}

impl Measured {
    fn rate(&self) -> f64 {
        if self.secs > 0.0 { self.ops as f64 / self.secs } else { 0.0 }
    }

    fn cpu_us_per_op(&self) -> f64 {
        if self.ops > 0 { self.server_cpu_secs * 1e6 / self.ops as f64 } else { 0.0 }
    }

    fn error(&mut self, e: impl Into<String>) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e.into());
        }
    }

    fn json(&self) -> Value {
        json!({
            "ops": self.ops,
            "secs": round(self.secs, 3),
            "ops_per_sec": round(self.rate(), 1),
            "p50_ms": round(self.p50_ms, 3),
            "p99_ms": round(self.p99_ms, 3),
            "server_cpu_secs": round(self.server_cpu_secs, 3),
            "server_cpu_us_per_op": round(self.cpu_us_per_op(), 2),
            "errors": self.errors,
            "first_error": self.first_error,
            "note": self.note,
        })
    }
}

fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

// ----------------------------------------------------------------------------------------------
// Latency histogram: exact below 128 µs, then 64 buckets per power of two (about 1.6 %).

#[derive(Clone, Debug)]
struct Hist {
    counts: Vec<u64>,
    n: u64,
}

impl Hist {
    const LINEAR: u64 = 128;
    const SUB_BITS: u32 = 6;

    fn new() -> Hist {
        Hist { counts: vec![0; Self::index(u64::MAX) + 1], n: 0 }
    }

    fn index(us: u64) -> usize {
        if us < Self::LINEAR {
            return us as usize;
        }
        let e = 63 - us.leading_zeros(); // >= 7
        let m = (us >> (e - Self::SUB_BITS)) & ((1 << Self::SUB_BITS) - 1);
        (Self::LINEAR + u64::from(e - 7) * (1 << Self::SUB_BITS) + m) as usize
    }

    fn value(i: usize) -> u64 {
        let i = i as u64;
        if i < Self::LINEAR {
            return i;
        }
        let e = (i - Self::LINEAR) / (1 << Self::SUB_BITS) + 7;
        let m = (i - Self::LINEAR) % (1 << Self::SUB_BITS);
        ((1 << Self::SUB_BITS) + m) << (e - u64::from(Self::SUB_BITS))
    }

    fn record(&mut self, d: Duration) {
        self.record_us(d.as_micros().min(u128::from(u64::MAX)) as u64, 1);
    }

    fn record_us(&mut self, us: u64, times: u64) {
        self.counts[Self::index(us)] += times;
        self.n += times;
    }

    fn merge(&mut self, other: &Hist) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.n += other.n;
    }

    /// The `q` quantile in milliseconds.
    fn quantile_ms(&self, q: f64) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        let target = ((self.n as f64 * q).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= target {
                return Self::value(i) as f64 / 1000.0;
            }
        }
        0.0
    }
}

// ----------------------------------------------------------------------------------------------
// Server processes

/// Every live server process (pid, directory), for the Ctrl-C handler.
static LIVE: Mutex<Vec<(u32, PathBuf)>> = Mutex::new(Vec::new());

/// One server process on a fresh data dir under /dev/shm, killed (and its directory removed)
/// on drop, also when a workload panics.
#[derive(Debug)]
struct Member {
    child: Child,
    /// The client port.
    port: u16,
    dir: tempfile::TempDir,
}

impl Member {
    /// A fresh directory for a member (its data dir and log), on /dev/shm where there is one.
    fn dir() -> Result<tempfile::TempDir, String> {
        let shm = Path::new("/dev/shm");
        let builder = tempfile::Builder::new().prefix("mem_etcd-e2e-").clone();
        if shm.is_dir() { builder.tempdir_in(shm) } else { builder.tempdir() }
            .map_err(|e| format!("create a data dir: {e}"))
    }

    /// Starts `bin` with `args` and `--data-dir` in `dir`, logging to `dir`/server.log.
    fn spawn(
        bin: &Path,
        mut args: Vec<String>,
        port: u16,
        dir: tempfile::TempDir,
    ) -> Result<Member, String> {
        let data = dir.path().join("data").display().to_string();
        args.splice(0..0, ["--data-dir".to_string(), data]);
        let log_path = dir.path().join("server.log");
        let log = File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(bin);
        cmd.args(&args).current_dir(dir.path()).stdin(Stdio::null()).stdout(log).stderr(log2);
        // etcd reads ETCD_* variables as flags: keep ETCD_BIN and friends away from it.
        for (k, _) in std::env::vars_os() {
            if k.to_str().is_some_and(|k| k.starts_with("ETCD")) {
                cmd.env_remove(k);
            }
        }
        let child = cmd.spawn().map_err(|e| format!("spawn {}: {e}", bin.display()))?;
        LIVE.lock().unwrap().push((child.id(), dir.path().to_path_buf()));
        Ok(Member { child, port, dir })
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let pid = self.child.id();
        let _ = self.child.kill();
        let _ = self.child.wait();
        LIVE.lock().unwrap_or_else(|e| e.into_inner()).retain(|(p, _)| *p != pid);
        // `dir` is removed when the field drops, after this.
    }
}

/// The server a workload runs against: one process, or the members of a cluster on loopback
/// (`MEM_ETCD_E2E_MEMBERS`). Every member is killed on drop.
#[derive(Debug)]
struct Server {
    kind: Kind,
    members: Vec<Member>,
}

impl Server {
    async fn start(kind: Kind, bin: &Path, members: usize) -> Result<Server, String> {
        // Client ports, then peer ports.
        let ports = free_ports(2 * members)?;
        let (client, peer) = ports.split_at(members);
        let url = |port: u16| format!("http://127.0.0.1:{port}");
        let mut server = Server { kind, members: Vec::with_capacity(members) };
        if members == 1 {
            let mut args: Vec<String> = vec![
                "--listen-client-urls".into(),
                url(client[0]),
                "--log-level".into(),
                "warn".into(),
            ];
            if kind == Kind::Etcd {
                // As benches/compare_etcd.sh runs it (with `extra_args`).
                let peer = url(peer[0]);
                args.extend([
                    "--name".into(),
                    "b".into(),
                    "--advertise-client-urls".into(),
                    url(client[0]),
                    "--listen-peer-urls".into(),
                    peer.clone(),
                    "--initial-advertise-peer-urls".into(),
                    peer.clone(),
                    "--initial-cluster".into(),
                    format!("b={peer}"),
                ]);
            }
            args.extend(kind.extra_args());
            server.members.push(Member::spawn(bin, args, client[0], Member::dir()?)?);
        } else {
            // etcd's cluster flags, the same for both kinds; every member is started before
            // any is waited for (none is ready before the cluster has formed).
            static CLUSTERS: AtomicU64 = AtomicU64::new(0);
            let token = format!(
                "bench-{}-{}",
                std::process::id(),
                CLUSTERS.fetch_add(1, Ordering::Relaxed)
            );
            let initial = (0..members)
                .map(|i| format!("m{i}={}", url(peer[i])))
                .collect::<Vec<_>>()
                .join(",");
            for i in 0..members {
                let mut args: Vec<String> = vec![
                    "--name".into(),
                    format!("m{i}"),
                    "--initial-cluster".into(),
                    initial.clone(),
                    "--initial-advertise-peer-urls".into(),
                    url(peer[i]),
                    "--listen-peer-urls".into(),
                    url(peer[i]),
                    "--listen-client-urls".into(),
                    url(client[i]),
                    "--advertise-client-urls".into(),
                    url(client[i]),
                    "--initial-cluster-token".into(),
                    token.clone(),
                    "--initial-cluster-state".into(),
                    "new".into(),
                    "--log-level".into(),
                    "warn".into(),
                ];
                args.extend(kind.extra_args());
                server.members.push(Member::spawn(bin, args, client[i], Member::dir()?)?);
            }
        }
        server.wait_ready().await?;
        Ok(server)
    }

    /// The client URLs, member by member.
    fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::endpoint).collect()
    }

    /// Waits until every member answers a linearizable Range.
    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let opts = ConnectOptions::new()
            .with_connect_timeout(Duration::from_millis(500))
            .with_timeout(Duration::from_secs(1));
        for i in 0..self.members.len() {
            loop {
                let exited =
                    self.members.iter_mut().enumerate().find_map(|(j, m)| {
                        m.child.try_wait().ok().flatten().map(|status| (j, status))
                    });
                if let Some((j, status)) = exited {
                    return Err(format!(
                        "{}{} exited during start-up ({status}):\n{}",
                        self.kind.name(),
                        self.member_label(j),
                        self.members[j].log_tail(30)
                    ));
                }
                let endpoint = self.members[i].endpoint();
                if let Ok(mut c) = Client::connect([endpoint], Some(opts.clone())).await
                    && c.get("/bench/ready", None).await.is_ok()
                {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "{}{} did not answer within 60 s:\n{}",
                        self.kind.name(),
                        self.member_label(i),
                        self.log_tails()
                    ));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(())
    }

    /// " member mI" in a cluster, nothing for a single server.
    fn member_label(&self, i: usize) -> String {
        if self.members.len() > 1 { format!(" member m{i}") } else { String::new() }
    }

    /// The end of every member's log.
    fn log_tails(&self) -> String {
        if self.members.len() == 1 {
            return self.members[0].log_tail(30);
        }
        let tails =
            self.members.iter().enumerate().map(|(i, m)| {
                format!("--- m{i} ({}):\n{}", m.dir.path().display(), m.log_tail(15))
            });
        tails.collect::<Vec<_>>().join("\n")
    }

    /// The user + system CPU time so far (all threads) of every member process, summed.
    fn cpu_secs(&self) -> f64 {
        self.members.iter().map(|m| cpu_secs(m.child.id())).sum()
    }
}

/// Kills every live server and removes its directory (Ctrl-C).
fn kill_all() {
    for (pid, dir) in LIVE.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// `n` distinct free ports (all bound at once, so none is handed out twice).
fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").map_err(|e| format!("find a free port: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    listeners.iter().map(|l| l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())).collect()
}

fn clock_ticks() -> f64 {
    static HZ: OnceLock<f64> = OnceLock::new();
    *HZ.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// utime + stime (fields 14 and 15 of /proc/PID/stat), in seconds.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) is in parentheses and may hold spaces; field 3 follows them.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    (field(14) + field(15)) as f64 / clock_ticks()
}

// ----------------------------------------------------------------------------------------------
// Clients and closed-loop workloads

/// `n` connections, connection k to `endpoints[k % endpoints.len()]` (one member each, so that
/// followers get requests too, as from kube-apiservers spread over a cluster).
async fn connect(endpoints: &[String], n: usize) -> Result<Vec<Client>, String> {
    let mut clients = Vec::with_capacity(n);
    for k in 0..n {
        let endpoint = &endpoints[k % endpoints.len()];
        let mut c = Client::connect([endpoint], None)
            .await
            .map_err(|e| format!("connect {endpoint}: {e}"))?;
        // Establish the connection before any clock starts.
        c.get("/bench/warmup", None).await.map_err(|e| format!("first request: {e}"))?;
        clients.push(c);
    }
    Ok(clients)
}

/// One closed-loop request kind.
#[derive(Debug)]
enum Work {
    Put { value: Vec<u8> },
    TxnPut { value: Vec<u8> },
    Range { keys: usize },
}

fn kv_key(rng: &mut SmallRng) -> String {
    // 10 + 38 = 48 bytes.
    format!("/bench/kv/{:038}", rng.random_range(0..KEY_SPACE))
}

fn range_key(i: usize) -> String {
    // 13 + 35 = 48 bytes.
    format!("{RANGE_PREFIX}{i:035}")
}

async fn one(kv: &mut KvClient, work: &Work, rng: &mut SmallRng) -> Result<(), String> {
    match work {
        Work::Put { value } => {
            kv.put(kv_key(rng), value.clone(), None).await.map_err(|e| e.to_string())?;
        }
        Work::TxnPut { value } => {
            let txn = Txn::new().and_then([TxnOp::put(kv_key(rng), value.clone(), None)]);
            let r = kv.txn(txn).await.map_err(|e| e.to_string())?;
            if !r.succeeded() {
                return Err("a Txn without compares did not succeed".into());
            }
        }
        Work::Range { keys } => {
            let opts = GetOptions::new().with_prefix().with_limit(RANGE_LIMIT);
            let r = kv.get(RANGE_PREFIX, Some(opts)).await.map_err(|e| e.to_string())?;
            if r.kvs().len() != RANGE_LIMIT as usize || r.count() != *keys as i64 || !r.more() {
                return Err(format!(
                    "Range limit {RANGE_LIMIT} over {keys} keys answered {} kvs, count {}, \
                     more {}",
                    r.kvs().len(),
                    r.count(),
                    r.more()
                ));
            }
        }
    }
    Ok(())
}

#[derive(Debug)]
struct TaskResult {
    ops: u64,
    errors: u64,
    first_error: Option<String>,
    hist: Hist,
}

async fn closed_loop_task(
    mut kv: KvClient,
    work: Arc<Work>,
    seed: u64,
    deadline: Instant,
) -> TaskResult {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut r = TaskResult { ops: 0, errors: 0, first_error: None, hist: Hist::new() };
    while Instant::now() < deadline {
        let t0 = Instant::now();
        let res = one(&mut kv, &work, &mut rng).await;
        r.hist.record(t0.elapsed());
        match res {
            Ok(()) => r.ops += 1,
            Err(e) => {
                r.errors += 1;
                r.first_error.get_or_insert(e);
            }
        }
    }
    r
}

/// Runs `work` from TASKS concurrent tasks until `duration` is over, measuring the server's CPU.
async fn closed_loop(
    server: &Server,
    clients: &[Client],
    work: Work,
    duration: Duration,
) -> Result<Measured, String> {
    let work = Arc::new(work);
    let cpu0 = server.cpu_secs();
    let t0 = Instant::now();
    let deadline = t0 + duration;
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let kv = clients[t % clients.len()].kv_client();
            tokio::spawn(closed_loop_task(kv, work.clone(), t as u64 + 1, deadline))
        })
        .collect();
    let mut m = Measured::default();
    let mut hist = Hist::new();
    for t in tasks {
        let r = t.await.map_err(|e| format!("a client task failed: {e}"))?;
        m.ops += r.ops;
        m.errors += r.errors;
        if m.first_error.is_none() {
            m.first_error = r.first_error;
        }
        hist.merge(&r.hist);
    }
    m.secs = t0.elapsed().as_secs_f64();
    m.server_cpu_secs = server.cpu_secs() - cpu0;
    m.p50_ms = hist.quantile_ms(0.5);
    m.p99_ms = hist.quantile_ms(0.99);
    Ok(m)
}

/// Writes `n` keys under RANGE_PREFIX, from TASKS concurrent tasks.
async fn preload_range(clients: &[Client], n: usize) -> Result<(), String> {
    let value = vec![b'r'; RANGE_VALUE];
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let mut kv = clients[t % clients.len()].kv_client();
            let value = value.clone();
            tokio::spawn(async move {
                for i in (t..n).step_by(TASKS) {
                    kv.put(range_key(i), value.clone(), None)
                        .await
                        .map_err(|e| format!("preload put: {e}"))?;
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

// ----------------------------------------------------------------------------------------------
// Watch fan-out

#[derive(Debug)]
struct StreamResult {
    events: u64,
    errors: u64,
    first_error: Option<String>,
    hist: Hist,
}

impl StreamResult {
    fn error(&mut self, e: String) {
        self.errors += 1;
        self.first_error.get_or_insert(e);
    }
}

/// What the stream tasks and the writer share.
#[derive(Debug)]
struct WatchShared {
    /// Events received so far, over all watchers.
    delivered: AtomicU64,
    /// Poked whenever `delivered` grows.
    progress: Notify,
    /// The bench's clock: values carry the time their put was sent, in µs since this.
    epoch: Instant,
}

/// One watch stream with `per` watchers on WATCH_PREFIX. Reports on `ready` once all are
/// created, then checks that every watcher gets every put's event exactly once, in order (the
/// value's sequence number), until each has seen the `total` the writer announces.
async fn watch_stream(
    mut wc: WatchClient,
    per: usize,
    shared: Arc<WatchShared>,
    ready: mpsc::Sender<Result<(), String>>,
    mut total: watch::Receiver<Option<u64>>,
) -> StreamResult {
    let mut r = StreamResult { events: 0, errors: 0, first_error: None, hist: Hist::new() };
    let opts = || Some(WatchOptions::new().with_prefix());
    let mut stream = match wc.watch(WATCH_PREFIX, opts()).await {
        Ok(s) => s,
        Err(e) => {
            let _ = ready.send(Err(format!("open a watch stream: {e}"))).await;
            return r;
        }
    };
    for _ in 1..per {
        if let Err(e) = stream.watch(WATCH_PREFIX, opts()).await {
            let _ = ready.send(Err(format!("create a watch: {e}"))).await;
            return r;
        }
    }
    let mut ready = Some(ready);
    // watch id -> the sequence number of the next event it should get.
    let mut next: HashMap<i64, u64> = HashMap::new();
    let mut drain_deadline: Option<tokio::time::Instant> = None;
    let mut failure: Option<String> = None;
    loop {
        let want = *total.borrow();
        if let Some(want) = want {
            if next.len() == per && next.values().all(|&n| n >= want) {
                break;
            }
            if drain_deadline.is_none() {
                drain_deadline = Some(tokio::time::Instant::now() + Duration::from_secs(30));
            }
        }
        let drain = async {
            match drain_deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            msg = stream.message() => {
                let resp = match msg {
                    Ok(Some(resp)) => resp,
                    Ok(None) => { failure = Some("the watch stream ended".into()); break }
                    Err(e) => { failure = Some(format!("watch stream error: {e}")); break }
                };
                let id = resp.watch_id();
                if resp.created() {
                    if next.insert(id, 0).is_some() {
                        r.error(format!("watch id {id} created twice on one stream"));
                    }
                    if next.len() == per
                        && let Some(ready) = ready.take()
                    {
                        let _ = ready.send(Ok(())).await;
                    }
                }
                if resp.canceled() {
                    failure = Some(format!(
                        "watch {id} canceled: {:?} (compact revision {})",
                        resp.cancel_reason(),
                        resp.compact_revision()
                    ));
                    break;
                }
                let events = resp.events();
                if events.is_empty() {
                    continue;
                }
                let now = shared.epoch.elapsed().as_micros() as u64;
                let Some(expected) = next.get_mut(&id) else {
                    r.error(format!("events for watch id {id}, which this stream never created"));
                    continue;
                };
                for ev in events {
                    let value = ev.kv().map_or(&[][..], |kv| kv.value());
                    if value.len() < 16 {
                        r.error(format!("watch {id}: an event without the bench's value"));
                        continue;
                    }
                    let seq = u64::from_le_bytes(value[..8].try_into().expect("8 bytes"));
                    let sent = u64::from_le_bytes(value[8..16].try_into().expect("8 bytes"));
                    if seq != *expected {
                        r.error(format!("watch {id}: got put #{seq}, expected put #{expected}"));
                    }
                    *expected = seq + 1;
                    r.hist.record_us(now.saturating_sub(sent), 1);
                }
                r.events += events.len() as u64;
                shared.delivered.fetch_add(events.len() as u64, Ordering::Relaxed);
                shared.progress.notify_one();
            }
            changed = total.changed() => {
                if changed.is_err() {
                    // The bench gave up on this run (another stream failed).
                    break;
                }
            }
            _ = drain => {
                let want = want.unwrap_or(0);
                let behind = next.values().filter(|&&n| n < want).count();
                let least = next.values().min().copied().unwrap_or(0);
                failure = Some(format!(
                    "{behind} of {per} watchers short of {want} puts 30 s after the last put \
                     (furthest behind at {least}); {} created",
                    next.len()
                ));
                break;
            }
        }
    }
    if let Some(f) = failure {
        match ready.take() {
            Some(ready) => {
                let _ = ready.send(Err(f)).await;
            }
            None => r.error(f),
        }
    }
    r
}

async fn watch_fanout(
    server: &Server,
    clients: &[Client],
    s: &Settings,
) -> Result<Measured, String> {
    let watchers = (s.watch_streams * s.watchers_per_stream) as u64;
    let shared = Arc::new(WatchShared {
        delivered: AtomicU64::new(0),
        progress: Notify::new(),
        epoch: Instant::now(),
    });
    let (total_tx, total_rx) = watch::channel(None::<u64>);
    let (ready_tx, mut ready_rx) = mpsc::channel(s.watch_streams);
    // Stream i on member i % members: connection i if there is one (connection k is on member
    // k % members), else the first connection to that member.
    let members = s.members.max(1);
    let streams: Vec<_> = (0..s.watch_streams)
        .map(|i| {
            let c = if i < clients.len() { i } else { i % members % clients.len() };
            let wc = clients[c].watch_client();
            tokio::spawn(watch_stream(
                wc,
                s.watchers_per_stream,
                shared.clone(),
                ready_tx.clone(),
                total_rx.clone(),
            ))
        })
        .collect();
    drop(ready_tx);
    for _ in 0..s.watch_streams {
        match tokio::time::timeout(Duration::from_secs(30), ready_rx.recv()).await {
            Ok(Some(Ok(()))) => {}
            Ok(Some(Err(e))) => return Err(e),
            Ok(None) => {
                return Err("a watch stream task ended before its watches were created".into());
            }
            Err(_) => return Err("watches not all created within 30 s".into()),
        }
    }

    let mut m = Measured::default();
    let mut put_hist = Hist::new();
    let mut kv = clients[0].kv_client();
    let cpu0 = server.cpu_secs();
    let t0 = Instant::now();
    let deadline = t0 + s.duration;
    let mut seq = 0u64;
    'writer: while Instant::now() < deadline {
        // Stay at most WATCH_WINDOW puts ahead of delivery.
        let need = seq.saturating_sub(WATCH_WINDOW) * watchers;
        while shared.delivered.load(Ordering::Relaxed) < need {
            let wait = tokio::time::timeout(Duration::from_secs(30), shared.progress.notified());
            if wait.await.is_err() {
                m.error(format!(
                    "no watch event delivered for 30 s ({} of {need} events delivered)",
                    shared.delivered.load(Ordering::Relaxed)
                ));
                break 'writer;
            }
        }
        let mut value = Vec::with_capacity(WATCH_VALUE);
        value.extend_from_slice(&seq.to_le_bytes());
        value.extend_from_slice(&(shared.epoch.elapsed().as_micros() as u64).to_le_bytes());
        value.resize(WATCH_VALUE, b'w');
        let key = format!("{WATCH_PREFIX}{:03}", seq % 100);
        let p0 = Instant::now();
        match kv.put(key, value, None).await {
            Ok(_) => seq += 1,
            Err(e) => {
                // The watchers would see a gap (or not, if it was applied): stop here.
                m.error(format!("put #{seq}: {e}"));
                break;
            }
        }
        put_hist.record(p0.elapsed());
    }
    let _ = total_tx.send(Some(seq));
    let mut hist = Hist::new();
    for t in streams {
        let r = t.await.map_err(|e| format!("a watch stream task failed: {e}"))?;
        m.ops += r.events;
        m.errors += r.errors;
        if m.first_error.is_none() {
            m.first_error = r.first_error;
        }
        hist.merge(&r.hist);
    }
    m.secs = t0.elapsed().as_secs_f64();
    m.server_cpu_secs = server.cpu_secs() - cpu0;
    if m.ops != seq * watchers {
        m.error(format!("{} events delivered, expected {seq} puts x {watchers} watchers", m.ops));
    }
    m.p50_ms = hist.quantile_ms(0.5);
    m.p99_ms = hist.quantile_ms(0.99);
    m.note = format!(
        "{watchers} watchers x {seq} puts ({:.0} puts/s, put p99 {:.2} ms)",
        seq as f64 / m.secs,
        put_hist.quantile_ms(0.99)
    );
    Ok(m)
}

// ----------------------------------------------------------------------------------------------
// Lease flood (the etcd-lease-flood binary)

/// The number right after `label` in `s`.
fn number_after(s: &str, label: &str) -> Option<f64> {
    let at = s.find(label)? + label.len();
    s[at..].split(|c: char| !(c.is_ascii_digit() || c == '.')).next()?.parse().ok()
}

async fn lease_flood(server: &Server, s: &Settings) -> Result<Measured, String> {
    let bin = env!("CARGO_BIN_EXE_etcd-lease-flood");
    let endpoints = server.members.iter().map(|m| format!("127.0.0.1:{}", m.port));
    let mut cmd = Command::new(bin);
    cmd.args([
        "--endpoints",
        &endpoints.collect::<Vec<_>>().join(","),
        "--clients",
        &CONNS.to_string(),
        "--workers",
        &TASKS.to_string(),
        "--num-keys",
        &LEASE_KEYS.to_string(),
        "--duration",
        &format!("{}ms", s.duration.as_millis()),
    ])
    .stdin(Stdio::null());
    let cpu0 = server.cpu_secs();
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("run {bin}: {e}"))?;
    let cpu = server.cpu_secs() - cpu0;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("etcd-lease-flood failed ({}): {stdout}{stderr}", out.status));
    }
    // "N writes in T s: R writes/s, p50 X ms, p99 Y ms, p99.9 Z ms, errors E"
    let line = stdout
        .lines()
        .find(|l| l.contains(" writes in "))
        .ok_or_else(|| format!("no summary line from etcd-lease-flood: {stdout}{stderr}"))?;
    let parse =
        |label: &str| number_after(line, label).ok_or_else(|| format!("no {label:?} in {line:?}"));
    let mut m = Measured {
        ops: parse("")? as u64,
        secs: parse(" in ")?,
        p50_ms: parse("p50 ")?,
        p99_ms: parse("p99 ")?,
        server_cpu_secs: cpu,
        ..Default::default()
    };
    let errors = parse("errors ")? as u64;
    if errors > 0 {
        m.errors = errors;
        m.first_error = Some(format!("etcd-lease-flood: {line}"));
    }
    m.note = stderr.lines().find(|l| l.contains("conflicts")).unwrap_or("").trim().to_string();
    Ok(m)
}

// ----------------------------------------------------------------------------------------------
// Driver

/// Runs one workload against a fresh server of one kind.
async fn run_one(w: Workload, kind: Kind, bin: &Path, s: &Settings) -> Result<Measured, String> {
    let server = Server::start(kind, bin, s.members).await?;
    let clients = if w == Workload::LeaseFlood {
        Vec::new()
    } else {
        connect(&server.endpoints(), CONNS).await?
    };
    let m = match w {
        Workload::Put => {
            closed_loop(&server, &clients, Work::Put { value: vec![b'v'; KV_VALUE] }, s.duration)
                .await
        }
        Workload::TxnPut => {
            let work = Work::TxnPut { value: vec![b'v'; KV_VALUE] };
            closed_loop(&server, &clients, work, s.duration).await
        }
        Workload::Range => {
            preload_range(&clients, s.range_keys).await?;
            closed_loop(&server, &clients, Work::Range { keys: s.range_keys }, s.duration).await
        }
        Workload::Watch => watch_fanout(&server, &clients, s).await,
        Workload::LeaseFlood => lease_flood(&server, s).await,
    };
    drop(clients);
    drop(server);
    m
}

#[derive(Debug)]
struct Row {
    workload: Workload,
    /// One per side (`None`: not run, no etcd binary).
    results: Vec<Option<Result<Measured, String>>>,
}

impl Row {
    /// Throughput of side `a` over that of side `b`.
    fn ratio(&self, a: usize, b: usize) -> Option<f64> {
        match (&self.results[a], &self.results[b]) {
            (Some(Ok(x)), Some(Ok(y))) if y.rate() > 0.0 => Some(x.rate() / y.rate()),
            _ => None,
        }
    }
}

/// The ratio columns: (header, JSON key, numerator side, denominator side). Sides: the
/// mem_etcd binaries first, etcd last.
fn ratios(sides: &[Side]) -> Vec<(&'static str, &'static str, usize, usize)> {
    let etcd = sides.iter().position(|s| s.kind == Kind::Etcd);
    match (sides.len(), etcd) {
        (3, Some(e)) => vec![
            ("ratio A", "ratio", 0, e),
            ("ratio B", "ratio_b", 1, e),
            ("B/A", "ratio_b_over_a", 1, 0),
        ],
        (3, None) => vec![("B/A", "ratio_b_over_a", 1, 0)],
        (_, Some(e)) => vec![("ratio", "ratio", 0, e)],
        (_, None) => Vec::new(),
    }
}

fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn progress_line(w: Workload, side: &Side, r: &Result<Measured, String>) -> String {
    match r {
        Ok(m) => format!(
            "{:<12} {:<12} {:>12} {:<9} p50 {:>7.2} ms  p99 {:>7.2} ms  server CPU {:>6.1} \
             µs/op  errors {}{}{}",
            w.name(),
            side.short,
            thousands(m.rate()),
            w.unit(),
            m.p50_ms,
            m.p99_ms,
            m.cpu_us_per_op(),
            m.errors,
            m.first_error.as_ref().map(|e| format!(" (first: {e})")).unwrap_or_default(),
            if m.note.is_empty() { String::new() } else { format!("  [{}]", m.note) },
        ),
        Err(e) => format!("{:<12} {:<12} FAILED: {e}", w.name(), side.short),
    }
}

fn cell<T>(r: Option<&Result<Measured, String>>, f: impl Fn(&Measured) -> T) -> String
where
    T: std::fmt::Display,
{
    match r {
        Some(Ok(m)) => f(m).to_string(),
        Some(Err(_)) => "failed".into(),
        None => "-".into(),
    }
}

fn table(rows: &[Row], sides: &[Side]) -> String {
    let ratios = ratios(sides);
    let mut header = vec!["workload".to_string()];
    header.extend(sides.iter().map(|s| s.label.clone()));
    header.extend(ratios.iter().map(|r| r.0.to_string()));
    header.extend(sides.iter().map(|s| format!("p99 {}", s.short)));
    header.extend(sides.iter().map(|s| format!("server CPU/op {}", s.short)));
    let mut t = format!("| {} |\n|---|", header.join(" | "));
    t += &"--:|".repeat(header.len() - 1);
    t.push('\n');
    for r in rows {
        let rate = |m: &Measured| format!("{} {}", thousands(m.rate()), r.workload.unit());
        let p99 = |m: &Measured| format!("{:.1} ms", m.p99_ms);
        let cpu = |m: &Measured| format!("{:.1} µs", m.cpu_us_per_op());
        let mut cells = vec![r.workload.name().to_string()];
        cells.extend(r.results.iter().map(|x| cell(x.as_ref(), rate)));
        cells.extend(
            ratios
                .iter()
                .map(|&(_, _, a, b)| r.ratio(a, b).map_or("-".into(), |x| format!("{x:.2}x"))),
        );
        cells.extend(r.results.iter().map(|x| cell(x.as_ref(), p99)));
        cells.extend(r.results.iter().map(|x| cell(x.as_ref(), cpu)));
        t += &format!("| {} |\n", cells.join(" | "));
    }
    t
}

fn loud(msg: &str) {
    eprintln!("\n{0}\n{msg}\n{0}\n", "!".repeat(78));
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// `ETCD_BIN`, else what tests/peers/install_etcd.sh builds or finds in its cache.
fn find_etcd() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ETCD_BIN").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if p.is_file() {
            // Servers run in their data dirs: make a relative path absolute.
            return Some(std::path::absolute(&p).unwrap_or(p));
        }
        eprintln!("ETCD_BIN={} is not a file", p.display());
        return None;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/install_etcd.sh");
    eprintln!("locating etcd with {} (set ETCD_BIN to skip this)", script.display());
    let out = match Command::new(&script).stdin(Stdio::null()).stderr(Stdio::inherit()).output() {
        Ok(out) => out,
        Err(e) => {
            eprintln!("{}: {e}", script.display());
            return None;
        }
    };
    if !out.status.success() {
        eprintln!("{} failed ({})", script.display(), out.status);
        return None;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = stdout.lines().rfind(|l| !l.trim().is_empty())?.trim().to_string();
    let bin = Path::new(&dir).join("etcd");
    bin.is_file().then_some(bin)
}

fn etcd_version(bin: &Path) -> String {
    Command::new(bin)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("etcd Version:").map(|v| v.trim().to_string()))
        })
        .unwrap_or_else(|| "?".into())
}

/// Where cargo keeps its output: `CARGO_TARGET_DIR`, else the `target` above this executable
/// (target/release/deps/e2e-…).
fn target_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

#[derive(Debug)]
struct Args {
    test: bool,
    list: bool,
    filters: Vec<String>,
}

fn parse_args() -> Args {
    let mut test = false;
    let mut bench = false;
    let mut list = false;
    let mut filters = Vec::new();
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "--test" => test = true,
            "--bench" => bench = true,
            "--list" => list = true,
            // Other criterion/libtest-style flags mean nothing here.
            f if f.starts_with('-') => {}
            f => filters.push(f.to_string()),
        }
    }
    // Without --bench (cargo test --benches, or the binary run by hand) it is a test, as with
    // criterion.
    Args { test: test || !bench, list, filters }
}

fn select(filters: &[String]) -> Vec<Workload> {
    if filters.is_empty() {
        return Workload::ALL.to_vec();
    }
    Workload::ALL
        .into_iter()
        .filter(|w| {
            filters.iter().any(|f| {
                let exact = Workload::ALL.iter().any(|x| x.name() == f);
                if exact { w.name() == f } else { w.name().contains(f.as_str()) }
            })
        })
        .collect()
}

fn main() {
    let args = parse_args();
    if args.list {
        for w in select(&args.filters) {
            println!("{}: benchmark", w.name());
        }
        return;
    }
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    let code = runtime.block_on(run(args));
    drop(runtime);
    std::process::exit(code);
}

/// A mem_etcd binary from the environment variable `var`: None if unset or empty.
fn bin_from_env(var: &str) -> Result<Option<PathBuf>, String> {
    match std::env::var_os(var).filter(|p| !p.is_empty()) {
        None => Ok(None),
        Some(p) => {
            let p = PathBuf::from(p);
            if !p.is_file() {
                return Err(format!("{var}={} is not a file", p.display()));
            }
            // Servers run in their data dirs: a relative path would not find the binary there.
            std::path::absolute(&p).map(Some).map_err(|e| format!("{var}={}: {e}", p.display()))
        }
    }
}

/// `MEM_ETCD_E2E_MEMBERS`: members per server, 1 (single servers) by default.
fn members_from_env() -> Result<usize, String> {
    match std::env::var("MEM_ETCD_E2E_MEMBERS") {
        Err(_) => Ok(1),
        Ok(v) if v.trim().is_empty() => Ok(1),
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if (1..=9).contains(&n) => Ok(n),
            _ => Err(format!("MEM_ETCD_E2E_MEMBERS={v}: expected a number of members, 1 to 9")),
        },
    }
}

async fn run(args: Args) -> i32 {
    tokio::spawn(async {
        if tokio::signal::ctrl_c().await.is_ok() {
            kill_all();
            eprintln!("interrupted");
            std::process::exit(130);
        }
    });
    let (members, mem_bin, mem_bin_b) = match (
        members_from_env(),
        bin_from_env("MEM_ETCD_E2E_BIN"),
        bin_from_env("MEM_ETCD_E2E_BIN2"),
    ) {
        (Ok(n), Ok(a), Ok(b)) => {
            (n, a.unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_mem_etcd"))), b)
        }
        (n, a, b) => {
            for e in [n.err(), a.err(), b.err()].into_iter().flatten() {
                eprintln!("{e}");
            }
            return 1;
        }
    };
    let s = Settings::new(args.test, members);
    let workloads = select(&args.filters);
    if workloads.is_empty() {
        let names: Vec<_> = Workload::ALL.iter().map(|w| w.name()).collect();
        eprintln!("no workload matches {:?}; workloads: {}", args.filters, names.join(", "));
        return 1;
    }
    let etcd = find_etcd();
    let etcd_version = etcd.as_deref().map(etcd_version);
    match (&etcd, &etcd_version) {
        (Some(bin), Some(v)) => eprintln!("etcd {v}: {}", bin.display()),
        _ => {
            loud(
                "NO ETCD BINARY: measuring mem_etcd alone, no ratios.\n\
                 Set ETCD_BIN, or install Go so that tests/peers/install_etcd.sh can build etcd.",
            );
            if ci() {
                eprintln!("CI is set: a missing etcd is a failure here, not a skip.");
                return 1;
            }
        }
    }

    // The server columns: mem_etcd (A), mem_etcd (B) if MEM_ETCD_E2E_BIN2 is set, etcd.
    let mut sides = Vec::new();
    let mem_name = |tag: &str| {
        if mem_bin_b.is_some() { format!("mem_etcd ({tag})") } else { "mem_etcd".into() }
    };
    sides.push(Side {
        kind: Kind::MemEtcd,
        label: mem_name("A"),
        short: mem_name("A"),
        key: "mem_etcd",
        bin: Some(mem_bin.clone()),
    });
    if let Some(b) = &mem_bin_b {
        sides.push(Side {
            kind: Kind::MemEtcd,
            label: mem_name("B"),
            short: mem_name("B"),
            key: "mem_etcd_b",
            bin: Some(b.clone()),
        });
    }
    sides.push(Side {
        kind: Kind::Etcd,
        label: etcd_version.as_ref().map_or("etcd (none)".to_string(), |v| format!("etcd {v}")),
        short: "etcd".into(),
        key: "etcd",
        bin: etcd.clone(),
    });
    for side in sides.iter().filter(|s| s.kind == Kind::MemEtcd) {
        eprintln!("{}: {}", side.short, side.bin.as_deref().unwrap_or(Path::new("?")).display());
    }

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let topology = if members == 1 {
        "single servers".to_string()
    } else {
        format!(
            "{members}-member clusters on 127.0.0.1 (connection k on member k % {members}; \
             server CPU summed over the members)"
        )
    };
    eprintln!(
        "e2e bench ({} mode): {topology}; {:.1} s per workload and server, {CONNS} connections, \
         {TASKS} requests in flight, {cores} cores shared by client and servers",
        if s.test { "test" } else { "full" },
        s.duration.as_secs_f64()
    );
    let started = Instant::now();
    let mut rows = Vec::new();
    for &w in &workloads {
        let mut results = Vec::with_capacity(sides.len());
        for side in &sides {
            let r = match &side.bin {
                Some(bin) => {
                    let r = run_one(w, side.kind, bin, &s).await;
                    eprintln!("{}", progress_line(w, side, &r));
                    Some(r)
                }
                None => None,
            };
            results.push(r);
        }
        rows.push(Row { workload: w, results });
    }

    println!();
    println!("e2e bench, {topology}:");
    println!();
    print!("{}", table(&rows, &sides));
    println!(
        "\n{cores} cores, client and servers on the same machine; {:.1} s per run; \
         total {:.0} s.",
        s.duration.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    if let Some(b) = &mem_bin_b {
        println!("- mem_etcd (A): {}\n- mem_etcd (B): {}", mem_bin.display(), b.display());
    }
    for w in &workloads {
        println!("- {}: {}", w.name(), w.describe(&s));
    }
    if etcd.is_none() {
        loud("NO ETCD BINARY: mem_etcd alone was measured; no ratios.");
    }

    // Machine-readable results.
    let ratio_columns = ratios(&sides);
    let mut report = json!({
        "mode": if s.test { "test" } else { "full" },
        "members": members,
        "secs_per_run": s.duration.as_secs_f64(),
        "cores": cores,
        "connections": CONNS,
        "in_flight": TASKS,
        "mem_etcd": { "path": mem_bin.display().to_string() },
        "mem_etcd_b": mem_bin_b.as_ref().map(|b| json!({ "path": b.display().to_string() })),
        "etcd": etcd.as_ref().map(|b| json!({
            "path": b.display().to_string(),
            "version": etcd_version,
        })),
        "workloads": rows.iter().map(|r| {
            let mut o = json!({
                "name": r.workload.name(),
                "unit": r.workload.unit(),
                "description": r.workload.describe(&s),
                "ratio": Value::Null,
            });
            for (side, x) in sides.iter().zip(&r.results) {
                o[side.key] = match x {
                    Some(Ok(m)) => m.json(),
                    Some(Err(e)) => json!({ "failed": e }),
                    None => Value::Null,
                };
            }
            for &(_, key, a, b) in &ratio_columns {
                o[key] = json!(r.ratio(a, b).map(|x| round(x, 3)));
            }
            o
        }).collect::<Vec<_>>(),
    });
    if mem_bin_b.is_none() {
        // As before the B column existed.
        report.as_object_mut().expect("an object").remove("mem_etcd_b");
    }
    let path = target_dir().join(if s.test { "e2e-bench-test.json" } else { "e2e-bench.json" });
    match serde_json::to_string_pretty(&report)
        .map_err(|e| e.to_string())
        .and_then(|j| std::fs::write(&path, j + "\n").map_err(|e| e.to_string()))
    {
        Ok(()) => println!("results: {}", path.display()),
        Err(e) => eprintln!("could not write {}: {e}", path.display()),
    }

    // Every workload must have run, with throughput and without errors, on every server.
    let mut failures = Vec::new();
    for r in &rows {
        for (side, result) in sides.iter().zip(&r.results) {
            let what = format!("{} on {}", r.workload.name(), side.short);
            match result {
                None => {}
                Some(Err(e)) => failures.push(format!("{what}: failed: {e}")),
                Some(Ok(m)) if m.errors > 0 => failures.push(format!(
                    "{what}: {} errors (first: {})",
                    m.errors,
                    m.first_error.as_deref().unwrap_or("?")
                )),
                Some(Ok(m)) if m.ops == 0 || m.rate() <= 0.0 => {
                    failures.push(format!("{what}: no operation completed"))
                }
                Some(Ok(_)) => {}
            }
        }
    }
    if failures.is_empty() {
        0
    } else {
        for f in &failures {
            eprintln!("FAILED: {f}");
        }
        1
    }
}
