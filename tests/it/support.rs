//! The test harness: starting servers, connecting clients, and small assertion helpers.
//!
//! Every test starts its own server process (a fresh, empty store, with a temporary data dir of
//! its own unless the test passes `--data-dir`) and the process is killed when the [`Server`]
//! value is dropped. Crash and restart tests start mem_etcd on a [`DataDir`] that outlives its
//! servers, kill them with SIGKILL ([`Server::kill9`]) or SIGTERM ([`Server::stop`]), read what
//! they logged, and start servers that must refuse to start
//! ([`DataDir::start_expecting_failure`]). Which server the ordinary tests run against is chosen by
//! `MEM_ETCD_TEST_TARGET`:
//!
//! * unset, `mem_etcd` or `mem`: our binary (`CARGO_BIN_EXE_mem_etcd`);
//! * `etcd`: a real etcd 3.6, so the expectations themselves can be proven right.
//!
//! Real etcd and etcdctl ("peers") come from `ETCD_BIN` / `ETCDCTL_BIN`, or else from the cache
//! that `tests/peers/install_etcd.sh` fills; kube-apiserver and kubectl (the end-to-end test's
//! peers) from `KUBE_APISERVER_BIN` / `KUBECTL_BIN`, or else from `tests/peers/install_k8s.sh`'s.
//! A test that needs a peer that is missing FAILS, unless `MEM_ETCD_SKIP_PEERS=1` is set and `CI`
//! is not `true`; then it prints a loud SKIPPED line (on the real stderr, past the test harness's
//! output capture) and returns.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use mem_etcd::proto::etcdserverpb as pb;
pub use mem_etcd::proto::mvccpb;
use tonic::transport::Channel;

/// etcd's default `--max-request-bytes`.
pub const MAX_REQUEST_BYTES: usize = 1_572_864;
/// etcd's default `--max-txn-ops`.
pub const MAX_TXN_OPS: usize = 128;
/// The version of the reference etcd the suite is written against.
pub const PEER_VERSION: &str = "3.6.16";
/// The version of kube-apiserver and kubectl the end-to-end test runs (tests/peers/install_k8s.sh).
pub const K8S_PEER_VERSION: &str = "1.36.3";

/// Which implementation a [`Server`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    MemEtcd,
    Etcd,
}

/// The implementation the non-differential tests run against (`MEM_ETCD_TEST_TARGET`).
pub fn target() -> Kind {
    match std::env::var("MEM_ETCD_TEST_TARGET").as_deref() {
        Err(_) | Ok("") | Ok("mem_etcd") | Ok("mem") => Kind::MemEtcd,
        Ok("etcd") => Kind::Etcd,
        Ok(other) => panic!("MEM_ETCD_TEST_TARGET={other:?}: expected `mem_etcd` or `etcd`"),
    }
}

/// Starts a fresh server of the [`target`] kind with extra flags, or returns from the calling test
/// when the target is a peer that is missing and skipping is allowed.
///
/// `server!()` or `server!(["--max-txn-ops", "4"])`.
macro_rules! server {
    () => {
        server!([])
    };
    ($args:expr) => {
        match $crate::support::Server::start($crate::support::target(), &$args).await {
            ::core::option::Option::Some(server) => server,
            ::core::option::Option::None => return,
        }
    };
}

/// Starts a server of the given kind, or returns from the calling test if it is a missing peer
/// and skipping is allowed.
macro_rules! server_of {
    ($kind:expr) => {
        server_of!($kind, [])
    };
    ($kind:expr, $args:expr) => {
        match $crate::support::Server::start($kind, &$args).await {
            ::core::option::Option::Some(server) => server,
            ::core::option::Option::None => return,
        }
    };
}

/// Writes to the process's real stderr, bypassing libtest's capture of `eprintln!`.
/// Collects a child's stdout and stderr lines as they come, on two threads that keep draining
/// the pipes (a child never blocks on a full pipe).
pub fn drain_lines(child: &mut Child) -> Arc<Mutex<Vec<String>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let pipes: [Box<dyn Read + Send>; 2] = [
        Box::new(child.stdout.take().expect("stdout")),
        Box::new(child.stderr.take().expect("stderr")),
    ];
    for pipe in pipes {
        let log = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                log.lock().unwrap().push(line);
            }
        });
    }
    log
}

/// Writes to the real stderr, past libtest's capture: timings and figures show in every run.
pub fn say(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{msg}");
}

pub fn loud(msg: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "\n{0}\n{msg}\n{0}\n", "!".repeat(78));
}

fn test_name() -> String {
    std::thread::current().name().unwrap_or("<unnamed test>").to_string()
}

fn peers_cache() -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| "/root".into());
    home.join(".cache/mem_etcd/peers")
}

fn peer_dir() -> PathBuf {
    peers_cache().join(format!("etcd-v{PEER_VERSION}"))
}

/// A Kubernetes peer (`kube-apiserver`, `kubectl`): `$env` if set, else the install_k8s.sh cache.
fn k8s_peer_path(env: &str, name: &str) -> PathBuf {
    match std::env::var_os(env) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => peers_cache().join(format!("k8s-v{K8S_PEER_VERSION}")).join(name),
    }
}

fn etcd_path() -> PathBuf {
    match std::env::var_os("ETCD_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => peer_dir().join("etcd"),
    }
}

fn etcdctl_path() -> PathBuf {
    match std::env::var_os("ETCDCTL_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => match std::env::var_os("ETCD_BIN") {
            Some(p) if !p.is_empty() => {
                Path::new(&p).parent().unwrap_or(Path::new(".")).join("etcdctl")
            }
            _ => peer_dir().join("etcdctl"),
        },
    }
}

/// etcdutl: `$ETCDUTL_BIN`, else beside etcd.
fn etcdutl_path() -> PathBuf {
    match std::env::var_os("ETCDUTL_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => etcd_path().parent().unwrap_or(Path::new(".")).join("etcdutl"),
    }
}

/// The path of a peer binary (`etcd`, `etcdctl`, `etcdutl`, `kube-apiserver` or `kubectl`), applying the
/// peer policy described in the module docs: `None` means "skip this test" (already announced
/// loudly); a missing binary without permission to skip panics.
pub fn peer_binary(name: &str) -> Option<PathBuf> {
    let (path, how) = match name {
        "etcd" => (etcd_path(), "tests/peers/install_etcd.sh (or set ETCD_BIN / ETCDCTL_BIN)"),
        "etcdctl" => {
            (etcdctl_path(), "tests/peers/install_etcd.sh (or set ETCD_BIN / ETCDCTL_BIN)")
        }
        "etcdutl" => (etcdutl_path(), "tests/peers/install_etcd.sh (or set ETCDUTL_BIN)"),
        "kube-apiserver" => (
            k8s_peer_path("KUBE_APISERVER_BIN", name),
            "tests/peers/install_k8s.sh (or set KUBE_APISERVER_BIN / KUBECTL_BIN)",
        ),
        "kubectl" => (
            k8s_peer_path("KUBECTL_BIN", name),
            "tests/peers/install_k8s.sh (or set KUBE_APISERVER_BIN / KUBECTL_BIN)",
        ),
        other => panic!("unknown peer {other}"),
    };
    if path.is_file() {
        return Some(path);
    }
    let skip = std::env::var("MEM_ETCD_SKIP_PEERS").as_deref() == Ok("1");
    let ci = std::env::var("CI").as_deref() == Ok("true");
    if skip && !ci {
        loud(&format!(
            "SKIPPED {}: peer `{name}` not found at {} (MEM_ETCD_SKIP_PEERS=1). \
             This test did NOT run.",
            test_name(),
            path.display()
        ));
        return None;
    }
    panic!(
        "peer `{name}` not found at {}. Build it with {how}. To skip peer tests locally set \
         MEM_ETCD_SKIP_PEERS=1 (refused when CI=true).",
        path.display()
    );
}

/// What a server wrote: the last lines (to explain failures) and, for assertions on what it
/// logged, every line of each stream.
#[derive(Debug, Default)]
struct LogTail {
    lines: VecDeque<String>,
    stdout: Vec<String>,
    stderr: Vec<String>,
}

impl LogTail {
    const KEEP: usize = 80;
    fn push(&mut self, line: String, from_stderr: bool) {
        if self.lines.len() == Self::KEEP {
            self.lines.pop_front();
        }
        self.lines.push_back(line.clone());
        if from_stderr { self.stderr.push(line) } else { self.stdout.push(line) }
    }
}

/// Finds `address=IP:PORT` (text logs, value optionally quoted) or `"address":"IP:PORT"`
/// (JSON logs, etcd's and mem_etcd's) in a log line.
pub fn parse_address(line: &str) -> Option<SocketAddr> {
    parse_field_address(line, "address")
}

/// [`parse_address`] for the field `name`.
pub fn parse_field_address(line: &str, name: &str) -> Option<SocketAddr> {
    for marker in [format!("{name}="), format!("\"{name}\":\"")] {
        if let Some(at) = line.find(&marker) {
            let rest = line[at + marker.len()..].trim_start_matches('"');
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']')))
                .unwrap_or(rest.len());
            if let Ok(addr) = rest[..end].parse() {
                return Some(addr);
            }
        }
    }
    None
}

/// `n` distinct ports free on every one of `ips`, for a process started later to listen on.
///
/// They come from below the kernel's ephemeral range (32768 and up on Linux): a port picked by
/// binding `:0` is an ephemeral one, and between our check and the child's bind the kernel may
/// hand it to any outgoing connection as its source port (CI once lost a member that way). A
/// process-wide cursor, starting at an offset of this process's id, never hands out a port twice.
pub fn free_ports_on(ips: &[&str], n: usize) -> Vec<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 10_000;
    const SPAN: u32 = 22_000; // up to 31_999
    static CURSOR: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = CURSOR.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7919) % SPAN,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    let mut ports = Vec::with_capacity(n);
    for _ in 0..SPAN {
        if ports.len() == n {
            break;
        }
        let port = (FIRST + CURSOR.fetch_add(1, Ordering::Relaxed) % SPAN) as u16;
        if ips.iter().all(|ip| std::net::TcpListener::bind((*ip, port)).is_ok()) {
            ports.push(port);
        }
    }
    assert_eq!(ports.len(), n, "no {n} free ports below the ephemeral range on {ips:?}");
    ports
}

/// `n` distinct free ports on 127.0.0.1 (see [`free_ports_on`]).
pub fn free_ports(n: usize) -> Vec<u16> {
    free_ports_on(&["127.0.0.1"], n)
}

/// One free port on 127.0.0.1 (see [`free_ports_on`]).
pub fn free_port() -> u16 {
    free_ports(1)[0]
}

fn is_ready_line(line: &str) -> bool {
    // mem_etcd: "ready to serve client requests ... address=127.0.0.1:PORT".
    // etcd logs "ready to serve client requests" without the address, then
    // "serving client traffic insecurely ..." with it.
    line.contains("ready to serve client requests") || line.contains("serving client traffic")
}

pub fn mem_etcd_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mem_etcd"))
}

/// A new temporary directory, on tmpfs when there is one.
fn temp_dir(prefix: &str) -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::Builder::new().prefix(prefix).tempdir_in(shm)
    } else {
        tempfile::Builder::new().prefix(prefix).tempdir()
    }
    .expect("create a temporary directory")
}

/// A spawned server process whose output is being drained into a [`LogTail`].
struct Spawned {
    child: Child,
    log: Arc<Mutex<LogTail>>,
    /// The address of each ready line, as it is logged.
    ready: tokio::sync::mpsc::UnboundedReceiver<SocketAddr>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

/// Starts `bin` with exactly `args` in `cwd`, its output drained by two threads.
fn spawn(bin: &Path, args: &[String], cwd: &Path) -> Spawned {
    let mut cmd = Command::new(bin);
    // Anything a server writes relative to its working directory lands in a temp dir.
    cmd.current_dir(cwd);
    cmd.args(args);
    // etcd reads ETCD_* variables as flags; never let the test environment leak in.
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(|k| k.starts_with("ETCD")) {
            cmd.env_remove(k);
        }
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {} {args:?}: {e}", bin.display()));

    let log = Arc::new(Mutex::new(LogTail::default()));
    let (tx, ready) = tokio::sync::mpsc::unbounded_channel::<SocketAddr>();
    let pipes: [(Box<dyn Read + Send>, bool); 2] = [
        (Box::new(child.stdout.take().expect("stdout")), false),
        (Box::new(child.stderr.take().expect("stderr")), true),
    ];
    let mut readers = Vec::new();
    for (pipe, from_stderr) in pipes {
        let log = log.clone();
        let tx = tx.clone();
        // Keeps draining after startup so the server never blocks on a full pipe.
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                // Logged before the address is announced, so that a test that has the address
                // also sees every line logged before the ready line.
                let ready = is_ready_line(&line).then(|| parse_address(&line)).flatten();
                log.lock().unwrap().push(line, from_stderr);
                if let Some(addr) = ready {
                    let _ = tx.send(addr);
                }
            }
        }));
    }
    Spawned { child, log, ready, readers }
}

/// A running server process, killed on drop.
#[derive(Debug)]
pub struct Server {
    kind: Kind,
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<LogTail>>,
    readers: Vec<std::thread::JoinHandle<()>>,
    /// The per-server temporary directory (its working directory and, unless the test gave
    /// `--data-dir`, its data dir); `None` for servers on a [`DataDir`].
    _temp: Option<tempfile::TempDir>,
    /// Set once the test stopped or killed the process on purpose.
    ended_on_purpose: bool,
}

/// How a server process ended, with everything it wrote.
#[derive(Debug)]
pub struct Exited {
    pub status: std::process::ExitStatus,
    pub stdout: Vec<String>,
    pub stderr: Vec<String>,
}

impl Exited {
    /// stdout and stderr lines, stdout first.
    pub fn lines(&self) -> impl Iterator<Item = &String> {
        self.stdout.iter().chain(&self.stderr)
    }

    /// The lines that contain `needle` (ASCII case-insensitive).
    pub fn grep(&self, needle: &str) -> Vec<String> {
        grep(self.lines(), needle)
    }

    /// Everything it wrote, for failure messages.
    pub fn output(&self) -> String {
        self.lines().cloned().collect::<Vec<_>>().join("\n")
    }
}

fn grep<'a>(lines: impl Iterator<Item = &'a String>, needle: &str) -> Vec<String> {
    let needle = needle.to_ascii_lowercase();
    lines.filter(|l| l.to_ascii_lowercase().contains(&needle)).cloned().collect()
}

impl Server {
    /// The server's process id (for signals: SIGSTOP and SIGCONT pause and resume it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts a fresh server with `extra` flags appended to the defaults (a default flag is
    /// dropped when `extra` sets it). `None` means a missing peer with permission to skip.
    ///
    /// Each server gets its own temporary data dir (removed with the [`Server`]) unless `extra`
    /// names one with `--data-dir`.
    pub async fn start(kind: Kind, extra: &[&str]) -> Option<Server> {
        let bin = match kind {
            Kind::MemEtcd => mem_etcd_bin(),
            Kind::Etcd => peer_binary("etcd")?,
        };
        Some(Self::start_bin(kind, &bin, extra, true, None).await)
    }

    /// Starts mem_etcd (or a present peer) with exactly `args`, none of the harness's defaults.
    pub async fn start_without_defaults(kind: Kind, args: &[&str]) -> Server {
        let bin = match kind {
            Kind::MemEtcd => mem_etcd_bin(),
            Kind::Etcd => peer_binary("etcd").expect("etcd peer"),
        };
        Self::start_bin(kind, &bin, args, false, None).await
    }

    /// The command line: the defaults (each dropped when `extra` sets it) then `extra`.
    fn command_line(kind: Kind, extra: &[&str], with_defaults: bool, data: &str) -> Vec<String> {
        // The member name: the caller's `--name`, else "it".
        let name = extra
            .iter()
            .position(|a| *a == "--name")
            .and_then(|i| extra.get(i + 1).map(|n| n.to_string()))
            .or_else(|| extra.iter().find_map(|a| a.strip_prefix("--name=").map(str::to_string)))
            .unwrap_or_else(|| "it".to_string());
        let mut defaults: Vec<(&str, String)> = vec![
            ("--name", name.clone()),
            ("--data-dir", data.to_string()),
            ("--listen-client-urls", "http://127.0.0.1:0".into()),
            // Both listen on their peer URLs from the start (etcd's default, localhost:2380,
            // would be shared by the servers of tests running side by side).
            ("--listen-peer-urls", "http://127.0.0.1:0".into()),
            ("--log-level", "info".into()),
        ];
        if kind == Kind::Etcd {
            // etcd insists on an advertised client URL when the listen URL is given. Nothing
            // dials the advertised peer URL of a one-member cluster, so a fixed one is fine
            // while the peer listener takes any free port.
            defaults.extend([
                ("--advertise-client-urls", "http://127.0.0.1:0".into()),
                ("--initial-advertise-peer-urls", "http://127.0.0.1:2380".into()),
                ("--initial-cluster", format!("{name}=http://127.0.0.1:2380")),
                ("--unsafe-no-fsync", "true".into()),
                // The JSON gateway would dial the configured listen address (port 0) and log
                // connection errors; nothing here uses it.
                ("--enable-grpc-gateway", "false".into()),
            ]);
        }
        if !with_defaults {
            defaults.clear();
        }
        let mut args = Vec::new();
        for (flag, value) in &defaults {
            let overridden = extra.iter().any(|a| a == flag || a.starts_with(&format!("{flag}=")));
            if !overridden {
                args.push(format!("{flag}={value}"));
            }
        }
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    }

    /// Starts a server and waits until it answers. `on` is the [`DataDir`] to run on; without
    /// one the server gets a temporary directory of its own.
    async fn start_bin(
        kind: Kind,
        bin: &Path,
        extra: &[&str],
        with_defaults: bool,
        on: Option<&DataDir>,
    ) -> Server {
        let (temp, cwd, data) = match on {
            Some(dir) => (None, dir.root.path().to_path_buf(), dir.data.clone()),
            None => {
                let temp = temp_dir("mem_etcd-it-");
                let (cwd, data) = (temp.path().to_path_buf(), temp.path().join("data"));
                (Some(temp), cwd, data)
            }
        };
        let data = data.to_str().expect("utf-8 temp path").to_string();
        let args = Self::command_line(kind, extra, with_defaults, &data);
        let Spawned { mut child, log, mut ready, readers } = spawn(bin, &args, &cwd);

        // A cluster member is ready once its cluster has a leader and has taken it in (a member
        // that lost its state catches up first): more time than a member alone needs.
        let member = args.iter().any(|a| a.starts_with("--initial-cluster=") && a.contains(','));
        let deadline = Duration::from_secs(match kind {
            Kind::MemEtcd if !member => 20,
            _ => 60,
        });
        let addr = match tokio::time::timeout(deadline, ready.recv()).await {
            Ok(Some(addr)) => addr,
            outcome => {
                let _ = child.kill();
                let status = child.wait();
                for r in readers {
                    let _ = r.join();
                }
                let tail = log.lock().unwrap().lines.iter().cloned().collect::<Vec<_>>();
                panic!(
                    "{kind:?} ({} {args:?}) did not log a ready line with its address ({}); \
                     exit: {status:?}; output:\n{}",
                    bin.display(),
                    if outcome.is_err() { "timed out" } else { "output ended" },
                    tail.join("\n")
                );
            }
        };
        let server =
            Server { kind, child, addr, log, readers, _temp: temp, ended_on_purpose: false };
        server.wait_until_answering(deadline).await;
        server
    }

    /// Waits until the server answers Status (its log tail shows, from [`Server`]'s drop, if
    /// it never does).
    async fn wait_until_answering(&self, deadline: Duration) {
        let what = format!("{:?} at {} to answer Status", self.kind, self.addr);
        wait_until(&what, deadline, || async {
            match self.raw().await {
                Ok(mut raw) => match raw.maint.status(pb::StatusRequest {}).await {
                    Ok(_) => Ok(()),
                    // Auth is enabled (recovered from the data dir): it answers, to users only.
                    Err(e) if e.message() == "etcdserver: user name is empty" => Ok(()),
                    Err(e) => Err(format!("{e:?}")),
                },
                Err(e) => Err(format!("{e:?}")),
            }
        })
        .await
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The last lines the server logged.
    pub fn log_tail(&self) -> String {
        self.log.lock().unwrap().lines.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// The lines logged so far (stdout and stderr) that contain `needle` (ASCII
    /// case-insensitive).
    pub fn grep_log(&self, needle: &str) -> Vec<String> {
        let log = self.log.lock().unwrap();
        grep(log.stdout.iter().chain(&log.stderr), needle)
    }

    /// An etcd-client connected to this server.
    pub async fn client(&self) -> etcd_client::Client {
        etcd_client::Client::connect([self.endpoint()], None)
            .await
            .unwrap_or_else(|e| panic!("connect etcd-client to {}: {e}", self.endpoint()))
    }

    /// A tonic channel to this server (one HTTP/2 connection).
    pub async fn channel(&self) -> Result<Channel, tonic::transport::Error> {
        Channel::from_shared(self.endpoint()).expect("valid uri").connect().await
    }

    /// Raw generated gRPC clients sharing one connection.
    pub async fn raw(&self) -> Result<Raw, tonic::transport::Error> {
        Ok(Raw::new(self.channel().await?))
    }

    /// Raw clients; panics if the connection fails.
    pub async fn raw_clients(&self) -> Raw {
        self.raw().await.unwrap_or_else(|e| panic!("connect to {}: {e:?}", self.endpoint()))
    }

    /// Has the process exited on its own?
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Kills the process with SIGKILL (a crash: nothing runs in the server afterwards) and
    /// returns everything it wrote. Panics if it had already exited by itself.
    pub fn kill9(mut self) -> Exited {
        if let Some(status) = self.exited() {
            panic!(
                "{:?} at {} had exited by itself ({status}) before the test killed it\n{}",
                self.kind,
                self.addr,
                self.log_tail()
            );
        }
        self.child.kill().expect("SIGKILL the server");
        self.collect()
    }

    /// Stops the process with SIGTERM (a clean shutdown) and waits up to `within` for it to
    /// exit; returns how it exited and everything it wrote. Panics if it does not exit in time.
    pub async fn stop(self, within: Duration) -> Exited {
        let who = format!("{:?} at {}", self.kind, self.addr);
        let (exited, by_itself) = self.stop_or_kill(within).await;
        assert!(by_itself, "{who} did not exit within {within:?} of SIGTERM\n{}", exited.output());
        exited
    }

    /// Like [`Server::stop`], but a server still running `within` after SIGTERM is killed with
    /// SIGKILL instead of failing the test right away. Returns everything it wrote and whether it
    /// exited by itself.
    pub async fn stop_or_kill(mut self, within: Duration) -> (Exited, bool) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill -TERM");
        assert!(status.success(), "kill -TERM {} failed: {status}", self.child.id());
        let start = Instant::now();
        while self.exited().is_none() {
            if start.elapsed() > within {
                self.child.kill().expect("SIGKILL the server");
                return (self.collect(), false);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (self.collect(), true)
    }

    /// A server that exited by itself as it should (a member removed from its cluster): how
    /// it exited and everything it wrote; `Err(self)` while it still runs.
    pub fn ended(mut self) -> Result<Exited, Server> {
        match self.exited() {
            Some(_) => Ok(self.collect()),
            None => Err(self),
        }
    }

    /// Reaps the process (already killed or exiting) and returns everything it wrote.
    fn collect(&mut self) -> Exited {
        let status = self.child.wait().expect("wait for the server");
        self.ended_on_purpose = true;
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let log = self.log.lock().unwrap();
        Exited { status, stdout: log.stdout.clone(), stderr: log.stderr.clone() }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.ended_on_purpose {
            return;
        }
        let crashed = self.exited();
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() || crashed.is_some() {
            if let Some(status) = crashed {
                eprintln!(
                    "*** {:?} at {} EXITED BY ITSELF during the test: {status}",
                    self.kind, self.addr
                );
            }
            eprintln!(
                "--- last log lines of {:?} at {} ---\n{}\n---",
                self.kind,
                self.addr,
                self.log_tail()
            );
        }
        if crashed.is_some() && !std::thread::panicking() {
            panic!("{:?} exited by itself during the test", self.kind);
        }
    }
}

/// A data directory that outlives the mem_etcd processes started on it: for crash, restart and
/// recovery tests. Removed when dropped.
#[derive(Debug)]
pub struct DataDir {
    /// The temporary directory: the servers' working directory, holding `data/` and anything
    /// else a test puts next to it (a failpoint file).
    root: tempfile::TempDir,
    data: PathBuf,
}

impl Default for DataDir {
    fn default() -> Self {
        Self::new()
    }
}

/// The binary of `kind`; the etcd peer must be present (callers check first).
fn checked_bin(kind: Kind) -> PathBuf {
    match kind {
        Kind::MemEtcd => mem_etcd_bin(),
        Kind::Etcd => peer_binary("etcd").expect("the caller checked the etcd peer"),
    }
}

impl DataDir {
    pub fn new() -> DataDir {
        let root = temp_dir("mem_etcd-durability-");
        let data = root.path().join("data");
        DataDir { root, data }
    }

    /// The `--data-dir` the servers get (created by the server).
    pub fn path(&self) -> &Path {
        &self.data
    }

    /// A path next to the data dir, for files the test owns (e.g. a failpoint file).
    pub fn aside(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    /// Starts mem_etcd on this data dir with the harness's defaults plus `extra` and waits
    /// until it answers. Panics if it does not start.
    pub async fn start(&self, extra: &[&str]) -> Server {
        Server::start_bin(Kind::MemEtcd, &mem_etcd_bin(), extra, true, Some(self)).await
    }

    /// [`DataDir::start`] of either kind (a peer must be present: callers check first).
    pub async fn start_kind(&self, kind: Kind, extra: &[&str]) -> Server {
        let bin = checked_bin(kind);
        Server::start_bin(kind, &bin, extra, true, Some(self)).await
    }

    /// [`DataDir::start_kind`] with exactly `args` (none of the harness's defaults, not even
    /// `--data-dir`: pass [`DataDir::path`]).
    pub async fn start_kind_without_defaults(&self, kind: Kind, args: &[&str]) -> Server {
        let bin = checked_bin(kind);
        Server::start_bin(kind, &bin, args, false, Some(self)).await
    }

    /// Starts mem_etcd on this data dir expecting it to refuse: waits for the process to exit
    /// and returns how it exited and what it wrote. Panics if it logs that it is ready to serve
    /// or is still running after 20 s.
    pub async fn start_expecting_failure(&self, extra: &[&str]) -> Exited {
        self.start_kind_expecting_failure(Kind::MemEtcd, extra, Duration::from_secs(20)).await
    }

    /// [`DataDir::start_expecting_failure`] of either kind (a peer must be present: callers
    /// check first), allowing it `within` to give up.
    pub async fn start_kind_expecting_failure(
        &self,
        kind: Kind,
        extra: &[&str],
        within: Duration,
    ) -> Exited {
        let data = self.data.to_str().expect("utf-8 temp path");
        let args = Server::command_line(kind, extra, true, data);
        self.expect_refusal(kind, args, within).await
    }

    /// [`DataDir::start_kind_expecting_failure`] with exactly `args` (none of the harness's
    /// defaults, not even `--data-dir`).
    pub async fn start_kind_expecting_failure_without_defaults(
        &self,
        kind: Kind,
        args: &[&str],
        within: Duration,
    ) -> Exited {
        let args = args.iter().map(|a| a.to_string()).collect();
        self.expect_refusal(kind, args, within).await
    }

    async fn expect_refusal(&self, kind: Kind, args: Vec<String>, within: Duration) -> Exited {
        let bin = checked_bin(kind);
        let Spawned { mut child, log, mut ready, readers } = spawn(&bin, &args, self.root.path());
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            let served = ready.try_recv().ok();
            if served.is_some() || start.elapsed() > within {
                let _ = child.kill();
                let _ = child.wait();
                for r in readers {
                    let _ = r.join();
                }
                let tail = log.lock().unwrap().lines.iter().cloned().collect::<Vec<_>>();
                panic!(
                    "{kind:?} {args:?} was expected to refuse to start, but {}; output:\n{}",
                    match served {
                        Some(addr) => format!("it is serving on {addr}"),
                        None => format!("it was still running after {within:?}"),
                    },
                    tail.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        for r in readers {
            let _ = r.join();
        }
        let log = log.lock().unwrap();
        Exited { status, stdout: log.stdout.clone(), stderr: log.stderr.clone() }
    }
}

/// Generated clients for the services the suite touches, sharing one connection.
#[derive(Debug, Clone)]
pub struct Raw {
    pub channel: Channel,
    pub kv: pb::kv_client::KvClient<Channel>,
    pub maint: pb::maintenance_client::MaintenanceClient<Channel>,
    pub cluster: pb::cluster_client::ClusterClient<Channel>,
    pub auth: pb::auth_client::AuthClient<Channel>,
}

impl Raw {
    pub fn new(channel: Channel) -> Raw {
        const BIG: usize = 256 << 20;
        Raw {
            kv: pb::kv_client::KvClient::new(channel.clone())
                .max_decoding_message_size(BIG)
                .max_encoding_message_size(BIG),
            maint: pb::maintenance_client::MaintenanceClient::new(channel.clone())
                .max_decoding_message_size(BIG),
            cluster: pb::cluster_client::ClusterClient::new(channel.clone())
                .max_decoding_message_size(BIG),
            auth: pb::auth_client::AuthClient::new(channel.clone()).max_decoding_message_size(BIG),
            channel,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Waiting for a condition

/// How often [`wait_until`] asks its probe.
pub const POLL: Duration = Duration::from_millis(20);

/// What a probe of [`wait_until`] answers: ready (with a value), or not yet (with what it saw,
/// for the message if the wait runs out).
pub trait Probe {
    type Value;
    fn ready(self) -> Result<Self::Value, Option<String>>;
}

impl Probe for bool {
    type Value = ();
    fn ready(self) -> Result<(), Option<String>> {
        if self { Ok(()) } else { Err(None) }
    }
}

impl<T> Probe for Option<T> {
    type Value = T;
    fn ready(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: std::fmt::Display> Probe for Result<T, E> {
    type Value = T;
    fn ready(self) -> Result<T, Option<String>> {
        self.map_err(|e| Some(e.to_string()))
    }
}

/// Waits until the condition the next step of a test needs holds, instead of sleeping for a
/// time it is assumed to take: asks `probe` every [`POLL`] until it is ready (`true`, `Some`
/// or `Ok`) and returns its value. Panics naming `what`, how long it waited and the probe's
/// last answer when `within` runs out (a probe that hangs is cut off there too).
///
/// `probe` makes a new future for each try (`|| async { .. }`, cloning the clients it calls):
/// the helper is called from spawned tasks, whose futures must be `Send`, which an async
/// closure's future cannot be shown to be.
pub async fn wait_until<P: Probe, F: std::future::Future<Output = P>>(
    what: &str,
    within: Duration,
    mut probe: impl FnMut() -> F,
) -> P::Value {
    let start = Instant::now();
    let mut last = None;
    loop {
        let left = within.saturating_sub(start.elapsed());
        match tokio::time::timeout(left, probe()).await.map(Probe::ready) {
            Ok(Ok(v)) => return v,
            Ok(Err(seen)) => last = seen.or(last),
            Err(_) => last = Some("the probe itself did not answer in time".into()),
        }
        if start.elapsed() >= within {
            let last = last.map(|l| format!("; last: {l}")).unwrap_or_default();
            panic!(
                "timed out waiting for {what}: not within {within:?} (waited {:?}){last}",
                start.elapsed()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Assertion helpers

/// A key-value as plain data, for exact comparisons.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Kv {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    pub lease: i64,
}

/// `kv(key, value, create_revision, mod_revision, version)` with lease 0.
pub fn kv(
    key: impl AsRef<[u8]>,
    value: impl AsRef<[u8]>,
    create: i64,
    modr: i64,
    version: i64,
) -> Kv {
    Kv {
        key: key.as_ref().to_vec(),
        value: value.as_ref().to_vec(),
        create_revision: create,
        mod_revision: modr,
        version,
        lease: 0,
    }
}

impl From<&etcd_client::KeyValue> for Kv {
    fn from(k: &etcd_client::KeyValue) -> Kv {
        Kv {
            key: k.key().to_vec(),
            value: k.value().to_vec(),
            create_revision: k.create_revision(),
            mod_revision: k.mod_revision(),
            version: k.version(),
            lease: k.lease(),
        }
    }
}

impl From<&mvccpb::KeyValue> for Kv {
    fn from(k: &mvccpb::KeyValue) -> Kv {
        Kv {
            key: k.key.to_vec(),
            value: k.value.to_vec(),
            create_revision: k.create_revision,
            mod_revision: k.mod_revision,
            version: k.version,
            lease: k.lease,
        }
    }
}

pub fn kvs(list: &[etcd_client::KeyValue]) -> Vec<Kv> {
    list.iter().map(Kv::from).collect()
}

/// The keys of a list of key-values, as strings (lossy).
pub fn keys(list: &[etcd_client::KeyValue]) -> Vec<String> {
    list.iter().map(|k| String::from_utf8_lossy(k.key()).into_owned()).collect()
}

/// The revision in a response header (panics when the header is missing: etcd always sends one).
pub fn rev(h: Option<&etcd_client::ResponseHeader>) -> i64 {
    h.expect("response has a header").revision()
}

/// The gRPC status inside an etcd-client error.
pub fn status_of(e: &etcd_client::Error) -> (tonic::Code, String) {
    match e {
        etcd_client::Error::GRpcStatus(s) => (s.code(), s.message().to_string()),
        other => panic!("expected a gRPC status error, got {other:?}"),
    }
}

/// Asserts that `r` failed with exactly this gRPC code and message.
#[track_caller]
pub fn assert_err<T: std::fmt::Debug>(
    r: Result<T, etcd_client::Error>,
    code: tonic::Code,
    msg: &str,
) {
    match r {
        Ok(v) => panic!("expected error {code:?} {msg:?}, got Ok({v:?})"),
        Err(e) => assert_eq!(status_of(&e), (code, msg.to_string()), "full error: {e:?}"),
    }
}

/// Asserts that a raw tonic call failed with exactly this gRPC code and message.
#[track_caller]
pub fn assert_status<T: std::fmt::Debug>(
    r: Result<T, tonic::Status>,
    code: tonic::Code,
    msg: &str,
) {
    match r {
        Ok(v) => panic!("expected error {code:?} {msg:?}, got Ok({v:?})"),
        Err(s) => assert_eq!((s.code(), s.message()), (code, msg), "full status: {s:?}"),
    }
}

/// The current store revision, read with a Range on a key nobody writes (reads do not change it).
pub async fn current_rev(c: &mut etcd_client::Client) -> i64 {
    rev(c.get("\u{1}current-rev-probe", None).await.expect("probe range").header())
}

// The exact error texts etcd sends (server/etcdserver/api/v3rpc/rpctypes).
pub const E_COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";
pub const E_FUTURE: &str = "etcdserver: mvcc: required revision is a future revision";
pub const E_TOO_LARGE: &str = "etcdserver: request is too large";
pub const E_TOO_MANY_OPS: &str = "etcdserver: too many operations in txn request";
pub const E_DUPLICATE: &str = "etcdserver: duplicate key given in txn request";
pub const E_EMPTY_KEY: &str = "etcdserver: key is not provided";
pub const E_KEY_NOT_FOUND: &str = "etcdserver: key not found";
pub const E_VALUE_PROVIDED: &str = "etcdserver: value is provided";
pub const E_LEASE_PROVIDED: &str = "etcdserver: lease is provided";
pub const E_LEASE_NOT_FOUND: &str = "etcdserver: requested lease not found";
pub const E_AUTH_NOT_ENABLED: &str = "etcdserver: authentication is not enabled";
pub const E_INVALID_SORT: &str = "etcdserver: invalid sort option";

/// The longest stretch of `[from, to]` that none of `acked` (instants, in any order) falls in:
/// how long nothing was acknowledged, the fault tests' outage.
pub fn longest_unacknowledged<T>(acked: impl IntoIterator<Item = T>, from: T, to: T) -> Duration
where
    T: Copy + Ord + std::ops::Sub<Output = Duration>,
{
    let mut inside: Vec<T> = acked.into_iter().filter(|t| *t > from && *t < to).collect();
    inside.sort_unstable();
    let (mut last, mut gap) = (from, Duration::ZERO);
    for t in inside.into_iter().chain([to]) {
        gap = gap.max(t - last);
        last = t;
    }
    gap
}

/// The inodes of the TCP sockets of /proc/net/tcp and tcp6 whose line `pick` chooses, given
/// its fields (1: local address, 2: remote address, as HEX_IP:HEX_PORT; 3: state, 0A LISTEN).
pub fn socket_inodes(pick: impl Fn(&[&str]) -> bool) -> Vec<u64> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9
                && pick(&f)
                && let Ok(inode) = f[9].parse()
            {
                inodes.push(inode);
            }
        }
    }
    inodes
}

/// Whether process `pid` holds one of the sockets `inodes` (its fds in /proc).
pub fn holds_socket(pid: u32, inodes: &[u64]) -> bool {
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
        fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|l| l.to_str().is_some_and(|l| wanted.iter().any(|w| w == l)))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_addresses_from_both_log_formats() {
        let mem = "2026-01-01T00:00:00Z  INFO mem_etcd: ready to serve client requests address=127.0.0.1:40123";
        assert_eq!(parse_address(mem), Some("127.0.0.1:40123".parse().unwrap()));
        let quoted = "INFO ready to serve client requests address=\"127.0.0.1:7\" name=x";
        assert_eq!(parse_address(quoted), Some("127.0.0.1:7".parse().unwrap()));
        let etcd = r#"{"level":"info","msg":"serving client traffic insecurely; this is strongly discouraged!","traffic":"grpc+http","address":"127.0.0.1:39263"}"#;
        assert_eq!(parse_address(etcd), Some("127.0.0.1:39263".parse().unwrap()));
        assert!(is_ready_line(mem) && is_ready_line(etcd));
        assert_eq!(parse_address("ready to serve client requests"), None);
    }
}
