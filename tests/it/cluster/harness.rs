//! Clusters of 3 or 5 members on loopback, of mem_etcd or of a real etcd 3.6, started with
//! etcd's own cluster flags, for the cluster tests. Every member has its own [`DataDir`] (so it
//! can be killed and restarted on its data) and fixed client and peer ports on 127.0.0.1
//! (a cluster's members must know each other's URLs before they start).

use std::time::{Duration, Instant};

use crate::support::*;

/// One member: its name, ports, data and process (if running).
#[derive(Debug)]
pub struct Member {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    pub dir: DataDir,
    pub server: Option<Server>,
}

/// A cluster of servers of one kind.
#[derive(Debug)]
pub struct Cluster {
    pub kind: Kind,
    pub members: Vec<Member>,
    /// Flags every member gets besides the cluster flags (e.g. `--wal-mode=fsync`).
    extra: Vec<String>,
    token: String,
    /// `http`, `https` (peer TLS), `unix` (unix sockets) or `unixs` (TLS on unix sockets) for
    /// the peer URLs.
    peer_scheme: &'static str,
    /// Proxies in front of members' peer ports, by member, which the others reach them
    /// through ([`Cluster::start_with_peer_proxies`]).
    pub peer_proxies: std::collections::BTreeMap<usize, PeerProxy>,
    /// When the founding members first agreed on a leader (connected to each other by then),
    /// for a cluster that [`Cluster::start`] (or `start_on`, `start_with_peer_proxies`,
    /// `restored`) started.
    formed: Instant,
}

/// etcd changes membership only once every member has been connected for 5 s (its health
/// interval), and mem_etcd does as etcd: that and a second of margin.
pub const HEALTH_INTERVAL: Duration = Duration::from_secs(6);

/// A TCP proxy in front of a member's peer port, as etcd's e2e tests put one (`WithPeerProxy`):
/// what the other members send the member, and its answers, go through it, while the member's
/// own calls go to the others' peer URLs (their proxies, if they have one). Cut, it forwards
/// nothing either way (etcd's `BlackholeTx` and `BlackholeRx`), without closing connections:
/// everything ([`PeerProxy::blackhole`]), or only the connections a given process dialed
/// ([`PeerProxy::drop_from`]), which with every member behind a proxy cuts one member off
/// both ways ([`Cluster::isolate`]).
#[derive(Debug)]
pub struct PeerProxy {
    pub port: u16,
    cut: std::sync::Arc<ProxyCut>,
    accept: tokio::task::JoinHandle<()>,
}

/// What a proxy drops; read by its connections on every chunk they forward.
#[derive(Debug, Default)]
struct ProxyCut {
    /// Everything, both ways.
    all: std::sync::atomic::AtomicBool,
    /// The connections that process dialed (0: none).
    from: std::sync::atomic::AtomicU32,
}

/// The inode of the socket at `local` connected to `remote` (both IPv4): which socket of
/// which process dialed a connection the proxy accepted.
fn socket_inode(local: std::net::SocketAddr, remote: std::net::SocketAddr) -> Option<u64> {
    let hex = |a: std::net::SocketAddr| match a.ip() {
        std::net::IpAddr::V4(ip) => {
            Some(format!("{:08X}:{:04X}", u32::from_ne_bytes(ip.octets()), a.port()))
        }
        std::net::IpAddr::V6(_) => None,
    };
    let (l, r) = (hex(local)?, hex(remote)?);
    socket_inodes(|f| f[1] == l && f[2] == r).first().copied()
}

impl PeerProxy {
    /// Forwards what `l` accepts to 127.0.0.1:`to`.
    fn start(l: tokio::net::TcpListener, to: u16) -> PeerProxy {
        use std::sync::atomic::Ordering;
        let port = l.local_addr().unwrap().port();
        let cut = std::sync::Arc::new(ProxyCut::default());
        let shared = cut.clone();
        let accept = tokio::spawn(async move {
            while let Ok((down, from)) = l.accept().await {
                let Ok(up) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await else {
                    continue;
                };
                // Whose connection it is, so that a cut can drop one process's connections.
                let inode = down.local_addr().ok().and_then(|local| socket_inode(from, local));
                let (dr, dw) = down.into_split();
                let (ur, uw) = up.into_split();
                for (mut r, mut w) in [
                    (
                        Box::new(dr) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
                        Box::new(uw) as Box<dyn tokio::io::AsyncWrite + Unpin + Send>,
                    ),
                    (Box::new(ur), Box::new(dw)),
                ] {
                    let cut = shared.clone();
                    tokio::spawn(async move {
                        use tokio::io::{AsyncReadExt, AsyncWriteExt};
                        let mut buf = vec![0u8; 64 << 10];
                        // (pid, whether it dialed this connection), asked once per pid.
                        let mut owner: Option<(u32, bool)> = None;
                        while let Ok(n) = r.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            let pid = cut.from.load(Ordering::Relaxed);
                            let from_cut = pid != 0 && {
                                if owner.is_none_or(|(p, _)| p != pid) {
                                    owner =
                                        Some((pid, inode.is_some_and(|i| holds_socket(pid, &[i]))));
                                }
                                owner.is_some_and(|(_, dialed)| dialed)
                            };
                            let dropped = cut.all.load(Ordering::Relaxed) || from_cut;
                            if !dropped && w.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        let _ = w.shutdown().await;
                    });
                }
            }
        });
        PeerProxy { port, cut, accept }
    }

    /// Drops everything that goes through the proxy, both ways, from now on.
    pub fn blackhole(&self) {
        self.cut.all.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Drops what goes through the connections process `pid` dialed, both ways, from now on.
    pub fn drop_from(&self, pid: u32) {
        self.cut.from.store(pid, std::sync::atomic::Ordering::Relaxed);
    }

    /// Forwards everything again (connections whose bytes were dropped are broken for good:
    /// their ends find out and reconnect).
    pub fn restore(&self) {
        self.cut.all.store(false, std::sync::atomic::Ordering::Relaxed);
        self.cut.from.store(0, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for PeerProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Cluster {
    /// Starts `n` members at once (etcd's members only report ready once their cluster has
    /// formed) and waits until they agree on a leader. `None`: the etcd peer is missing and
    /// skipping is allowed.
    pub async fn start(kind: Kind, n: usize, extra: &[&str]) -> Option<Cluster> {
        Self::start_on(kind, n, extra, "http").await
    }

    /// [`Cluster::start`] with the members `proxied` each advertising a [`PeerProxy`] in front
    /// of its peer port as its peer URL, so that the others reach it only through the proxy.
    pub async fn start_with_peer_proxies(
        kind: Kind,
        n: usize,
        proxied: &[usize],
    ) -> Option<Cluster> {
        if kind == Kind::Etcd {
            peer_binary("etcd")?;
        }
        // Bound before the members' ports are chosen, so that none of them can be a proxy's.
        let mut listeners = Vec::new();
        for _ in proxied {
            listeners.push(tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind proxy"));
        }
        let mut c = Self::unstarted(kind, n, &[], "http");
        for (&i, l) in proxied.iter().zip(listeners) {
            c.peer_proxies.insert(i, PeerProxy::start(l, c.members[i].peer_port));
        }
        c.restart_all(&(0..n).collect::<Vec<_>>()).await;
        c.founded().await;
        Some(c)
    }

    /// Once the founding members have been connected for etcd's health interval (sleeps out
    /// what is left of [`HEALTH_INTERVAL`] since they formed the cluster), membership changes
    /// are not refused as "unhealthy cluster".
    pub async fn healthy(&self) {
        tokio::time::sleep_until((self.formed + HEALTH_INTERVAL).into()).await;
    }

    /// Member `i`'s proxy.
    pub fn proxy(&self, i: usize) -> &PeerProxy {
        self.peer_proxies.get(&i).unwrap_or_else(|| panic!("member {i} has no peer proxy"))
    }

    /// Cuts member `i` off from the others both ways, as a network partition does, through
    /// the proxies every member must have ([`Cluster::start_with_peer_proxies`]): nothing the
    /// others send it arrives, nor anything it sends them.
    pub fn isolate(&self, i: usize) {
        assert_eq!(self.peer_proxies.len(), self.members.len(), "a member has no proxy");
        let pid = self.members[i].server.as_ref().expect("running").pid();
        for (&j, proxy) in &self.peer_proxies {
            if j == i { proxy.blackhole() } else { proxy.drop_from(pid) }
        }
    }

    /// The port member `i`'s peer URL names: its own, or its proxy's.
    fn advertised_peer_port(&self, i: usize) -> u16 {
        self.peer_proxies.get(&i).map_or(self.members[i].peer_port, |p| p.port)
    }

    /// [`Cluster::start`] with peer URLs of `scheme` (`https`: `extra` has the peer TLS flags).
    pub async fn start_on(
        kind: Kind,
        n: usize,
        extra: &[&str],
        peer_scheme: &'static str,
    ) -> Option<Cluster> {
        if kind == Kind::Etcd {
            peer_binary("etcd")?;
        }
        let mut c = Self::unstarted(kind, n, extra, peer_scheme);
        c.restart_all(&(0..n).collect::<Vec<_>>()).await;
        c.founded().await;
        Some(c)
    }

    /// The members of a cluster, not started.
    fn unstarted(kind: Kind, n: usize, extra: &[&str], peer_scheme: &'static str) -> Cluster {
        let ports = free_ports(2 * n);
        let members = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: ports[2 * i],
                peer_port: ports[2 * i + 1],
                dir: DataDir::new(),
                server: None,
            })
            .collect();
        let token = format!("it-{}", ports[0]);
        let extra = extra.iter().map(|s| s.to_string()).collect();
        let c = Cluster {
            kind,
            members,
            extra,
            token,
            peer_scheme,
            peer_proxies: Default::default(),
            formed: Instant::now(),
        };
        if peer_scheme.starts_with("unix") {
            c.link_unix_sockets();
        }
        c
    }

    /// With `unix` (or `unixs`) peer URLs each member listens on a socket named by its URL
    /// (`unix://localhost:PORT` is the socket `localhost:PORT`) in its working directory, and
    /// dials the others' sockets by the same names in its own, as etcd does (etcd's e2e
    /// members share one directory). Every member has its own directory here, so the others'
    /// names are links to their sockets.
    fn link_unix_sockets(&self) {
        for (i, m) in self.members.iter().enumerate() {
            let socket = format!("localhost:{}", m.peer_port);
            for (j, other) in self.members.iter().enumerate() {
                if i == j {
                    continue;
                }
                match std::os::unix::fs::symlink(m.dir.aside(&socket), other.dir.aside(&socket)) {
                    Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                        panic!("link {socket} for member {j}: {e}")
                    }
                    _ => {}
                }
            }
        }
    }

    /// The host of the peer URLs: for `unix` and `unixs` ones the socket's name starts with it.
    fn peer_host(&self) -> &'static str {
        if self.peer_scheme.starts_with("unix") { "localhost" } else { "127.0.0.1" }
    }

    /// A cluster of `kind` whose member `i` is restored from the snapshot `files[i]` (with the
    /// kind's own tool: `mem_etcd snapshot restore` or `etcdutl snapshot restore`), not started.
    pub fn from_snapshots(kind: Kind, files: &[&std::path::Path], extra: &[&str]) -> Cluster {
        let c = Self::unstarted(kind, files.len(), extra, "http");
        let tool = match kind {
            Kind::MemEtcd => std::path::PathBuf::from(env!("CARGO_BIN_EXE_mem_etcd")),
            _ => peer_binary("etcdutl").expect("etcdutl"),
        };
        for (i, (m, file)) in c.members.iter().zip(files).enumerate() {
            let mut cmd = std::process::Command::new(&tool);
            cmd.args(["snapshot", "restore"])
                .arg(file)
                .arg("--data-dir")
                .arg(m.dir.path())
                .arg(format!("--name={}", m.name))
                .arg(format!("--initial-cluster={}", c.initial_cluster()))
                .arg(format!("--initial-cluster-token={}", c.token));
            if kind != Kind::MemEtcd {
                cmd.arg(format!("--initial-advertise-peer-urls={}", c.peer_url(i)));
            }
            let out = cmd.output().expect("snapshot restore");
            assert!(out.status.success(), "restore: {}", String::from_utf8_lossy(&out.stderr));
        }
        c
    }

    /// A mem_etcd cluster of `n` founded from the snapshot `file` (mem_etcd's or etcd's): every
    /// member's data directory restored with `mem_etcd snapshot restore --initial-cluster`,
    /// then the members started on them.
    pub async fn restored(file: &std::path::Path, n: usize, extra: &[&str]) -> Cluster {
        let mut c = Self::restored_unchecked(file, n, extra).await;
        c.founded().await;
        c
    }

    /// [`Cluster::restored`] without waiting for a leader (which asks Status, refused without
    /// credentials once the snapshot's auth is enabled).
    pub async fn restored_unchecked(file: &std::path::Path, n: usize, extra: &[&str]) -> Cluster {
        let mut c = Self::unstarted(Kind::MemEtcd, n, extra, "http");
        for m in &c.members {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_mem_etcd"))
                .args(["snapshot", "restore"])
                .arg(file)
                .arg("--data-dir")
                .arg(m.dir.path())
                .arg(format!("--name={}", m.name))
                .arg(format!("--initial-cluster={}", c.initial_cluster()))
                .arg(format!("--initial-cluster-token={}", c.token))
                .output()
                .expect("mem_etcd snapshot restore");
            assert!(out.status.success(), "restore: {}", String::from_utf8_lossy(&out.stderr));
        }
        c.restart_all(&(0..n).collect::<Vec<_>>()).await;
        c
    }

    /// The `--initial-cluster` of the founding members.
    pub fn initial_cluster(&self) -> String {
        (0..self.members.len())
            .map(|i| format!("{}={}", self.members[i].name, self.peer_url(i)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The flags member `i` runs with.
    pub fn args(&self, i: usize, state: &str) -> Vec<String> {
        self.args_with(i, state, &self.initial_cluster())
    }

    fn args_with(&self, i: usize, state: &str, initial: &str) -> Vec<String> {
        let m = &self.members[i];
        let client = format!("http://127.0.0.1:{}", m.client_port);
        let listen = format!("{}://{}:{}", self.peer_scheme, self.peer_host(), m.peer_port);
        let mut a = vec![
            format!("--name={}", m.name),
            format!("--initial-cluster={initial}"),
            format!("--initial-advertise-peer-urls={}", self.peer_url(i)),
            format!("--listen-peer-urls={listen}"),
            format!("--listen-client-urls={client}"),
            format!("--advertise-client-urls={client}"),
            format!("--initial-cluster-token={}", self.token),
            format!("--initial-cluster-state={state}"),
        ];
        // mem_etcd's own flags mean nothing to etcd (which the harness runs without fsync).
        let ours = |f: &String| f.starts_with("--wal-");
        a.extend(self.extra.iter().filter(|f| self.kind == Kind::MemEtcd || !ours(f)).cloned());
        if self.kind == Kind::MemEtcd {
            // Empty until a test cuts the network ([`Cluster::partition`]).
            a.push(format!("--peer-failpoint={}", self.failpoint(i).display()));
        }
        a
    }

    fn start_member(
        &self,
        i: usize,
        state: &str,
    ) -> impl std::future::Future<Output = Server> + '_ {
        let args = self.args(i, state);
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            self.members[i].dir.start_kind(self.kind, &args).await
        }
    }

    /// Restarts member `i` on its data (after [`Cluster::kill9`] or [`Cluster::stop`]).
    pub async fn restart(&mut self, i: usize) {
        assert!(self.members[i].server.is_none(), "member {i} is running");
        let s = self.start_member(i, "new").await;
        self.members[i].server = Some(s);
    }

    /// Restarts member `i` on its data with `extra` flags too (e.g. `--force-new-cluster`).
    pub async fn restart_with(&mut self, i: usize, extra: &[&str]) {
        assert!(self.members[i].server.is_none(), "member {i} is running");
        let mut args = self.args(i, "new");
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let s = self.members[i].dir.start_kind(self.kind, &args).await;
        self.members[i].server = Some(s);
    }

    /// Restarts the members `which` together (each needs the others to elect a leader).
    pub async fn restart_all(&mut self, which: &[usize]) {
        let starts: Vec<_> = which.iter().map(|&i| self.start_member(i, "new")).collect();
        let servers = futures::future::join_all(starts).await;
        for (&i, s) in which.iter().zip(servers) {
            self.members[i].server = Some(s);
        }
    }

    /// Kills member `i` with SIGKILL.
    pub fn kill9(&mut self, i: usize) -> Exited {
        self.members[i].server.take().expect("member is running").kill9()
    }

    /// Adds a member to the cluster's list (not started, not in the cluster yet): its index.
    pub fn add_slot(&mut self) -> usize {
        let p = free_ports(2);
        let i = self.members.len();
        self.members.push(Member {
            name: format!("m{i}"),
            client_port: p[0],
            peer_port: p[1],
            dir: DataDir::new(),
            server: None,
        });
        if self.peer_scheme.starts_with("unix") {
            self.link_unix_sockets();
        }
        i
    }

    /// Starts member `i` to join the running cluster (`--initial-cluster-state existing`),
    /// after `member add`: its `--initial-cluster` lists the running members and itself.
    pub async fn join(&mut self, i: usize) {
        let args = self.join_args(i);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let s = self.members[i].dir.start_kind(self.kind, &args).await;
        self.members[i].server = Some(s);
    }

    /// Waits until member `via` lists member slot `i` (by its peer URL): the `member add` of it,
    /// sent on another task, has taken effect, and it may join. `token`: the credentials, while
    /// auth is enabled.
    pub async fn wait_listed(&self, via: usize, i: usize, token: Option<&str>) {
        let peer = self.peer_url(i);
        let raw = self.raw(via).await;
        let what = format!("m{via} to list {peer} (the member add of m{i})");
        wait_until(&what, Duration::from_secs(30), || async {
            let mut cluster = raw.cluster.clone();
            let mut req = tonic::Request::new(pb::MemberListRequest { linearizable: false });
            if let Some(t) = token {
                req.metadata_mut().insert("token", t.parse().unwrap());
            }
            let list = cluster.member_list(req).await.map_err(|e| e.message().to_string())?;
            let members = list.into_inner().members;
            match members.iter().any(|m| m.peer_ur_ls.contains(&peer)) {
                true => Ok(()),
                false => Err(format!("{members:?}")),
            }
        })
        .await
    }

    /// `member add --learner` of member slot `i`'s peer URL through `cl`, asked again while it
    /// is refused as "unhealthy cluster" (until every member has been connected for etcd's
    /// health interval), for at most `within`; any other refusal fails the test.
    pub async fn add_learner(
        &self,
        cl: &etcd_client::Client,
        i: usize,
        within: Duration,
    ) -> etcd_client::MemberAddResponse {
        let peer = self.peer_url(i);
        let what = format!("member add --learner {peer} (refused while the cluster is unhealthy)");
        wait_until(&what, within, || {
            let (mut cl, peer) = (cl.clone(), peer.clone());
            async move {
                let opts = etcd_client::MemberAddOptions::new().with_is_learner();
                let r = cl.member_add([peer.as_str()], Some(opts)).await;
                if let Err(e) = &r {
                    assert_eq!(status_of(e).1, "etcdserver: unhealthy cluster", "member add: {e}");
                }
                r
            }
        })
        .await
    }

    /// The flags [`Cluster::join`] starts member `i` with.
    pub fn join_args(&self, i: usize) -> Vec<String> {
        let initial = self
            .members
            .iter()
            .enumerate()
            .filter(|(j, m)| *j == i || m.server.is_some())
            .map(|(j, m)| format!("{}={}", m.name, self.peer_url(j)))
            .collect::<Vec<_>>()
            .join(",");
        self.args_with(i, "existing", &initial)
    }

    /// Member `i`'s peer failpoint file: the member ids whose peer calls it refuses.
    fn failpoint(&self, i: usize) -> std::path::PathBuf {
        self.members[i].dir.aside("peer-failpoint")
    }

    /// Cuts member `alone` off from every other member, both ways (mem_etcd only): each side
    /// refuses the other's peer calls, as if the network dropped them. Returns once every member
    /// has taken its failpoint file in (it reads it every 20 ms and logs each change).
    pub async fn partition(&self, alone: usize) {
        let ids: Vec<(usize, u64)> = {
            let mut v = Vec::new();
            for i in 0..self.members.len() {
                if self.members[i].server.is_some() {
                    v.push((i, self.member_id(i).await));
                }
            }
            v
        };
        let alone_id = ids.iter().find(|(i, _)| *i == alone).expect("running").1;
        let mut refusing = Vec::new();
        for (i, _) in &ids {
            let refused: Vec<u64> = if *i == alone {
                ids.iter().filter(|(j, _)| j != i).map(|(_, id)| *id).collect()
            } else {
                vec![alone_id]
            };
            let hex: Vec<String> = refused.iter().map(|id| format!("{id:x}")).collect();
            crate::storage::durability::set_failpoint(&self.failpoint(*i), &hex.join(" "));
            refusing.push((*i, refused));
        }
        self.failpoints_taken(&refusing).await;
    }

    /// Ends every partition, once every running member has taken it in.
    pub async fn heal(&self) {
        for i in 0..self.members.len() {
            crate::storage::durability::set_failpoint(&self.failpoint(i), "");
        }
        let refusing: Vec<(usize, Vec<u64>)> =
            self.running().into_iter().map(|i| (i, Vec::new())).collect();
        self.failpoints_taken(&refusing).await;
    }

    /// Waits until each member `i` of `refusing` refuses exactly the member ids listed with it:
    /// the last change of its peer failpoint it logged lists them (none logged: it refuses
    /// none).
    async fn failpoints_taken(&self, refusing: &[(usize, Vec<u64>)]) {
        let taken = |i: usize, refused: &[u64]| {
            let server = self.members[i].server.as_ref().expect("running");
            match server.grep_log("peer failpoint: refusing calls").last() {
                Some(line) => line.contains(&format!("{refused:?}")),
                None => refused.is_empty(),
            }
        };
        let what = "every member to take its peer failpoint in";
        wait_until(what, Duration::from_secs(5), || {
            std::future::ready(refusing.iter().all(|(i, refused)| taken(*i, refused)))
        })
        .await;
    }

    /// Sends member `i` a signal (`STOP` pauses it, `CONT` resumes it).
    pub fn signal(&self, i: usize, sig: &str) {
        let pid = self.members[i].server.as_ref().expect("running").pid();
        let ok = std::process::Command::new("kill")
            .args([format!("-{sig}"), pid.to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -{sig} {pid}");
        // `kill` returns once the signal is sent; every thread of the process stops a moment
        // later. Until then it may still answer its peers: wait for the stop to take effect
        // (state T), so that a test never races it.
        if sig == "STOP" {
            let stat = format!("/proc/{pid}/stat");
            let start = Instant::now();
            while !std::fs::read_to_string(&stat).is_ok_and(|s| {
                s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('T'))
            }) {
                assert!(start.elapsed() < Duration::from_secs(5), "{pid} did not stop");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    pub fn peer_url(&self, i: usize) -> String {
        format!("{}://{}:{}", self.peer_scheme, self.peer_host(), self.advertised_peer_port(i))
    }

    pub fn endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].client_port)
    }

    /// The running members.
    pub fn running(&self) -> Vec<usize> {
        (0..self.members.len()).filter(|i| self.members[*i].server.is_some()).collect()
    }

    /// The running members' client URLs, comma-separated (etcdctl's `--endpoints`).
    pub fn endpoints(&self) -> String {
        self.running().into_iter().map(|i| self.endpoint(i)).collect::<Vec<_>>().join(",")
    }

    /// A client of member `i` only.
    pub async fn client(&self, i: usize) -> etcd_client::Client {
        etcd_client::Client::connect([self.endpoint(i)], None)
            .await
            .unwrap_or_else(|e| panic!("connect to member {i}: {e}"))
    }

    /// Raw clients of member `i`.
    pub async fn raw(&self, i: usize) -> Raw {
        self.members[i].server.as_ref().expect("running").raw_clients().await
    }

    /// Waits until the founding members agree on a leader and every one of them says it is a
    /// voter, and counts the cluster formed from then on. (A founding member that started
    /// after the others had elected a leader, with no log of its own (`--wal-mode=none`),
    /// cannot tell a late start from a restart that lost what it had acknowledged: it asks to
    /// be re-admitted, which must leave it a voter.)
    async fn founded(&mut self) {
        self.leader().await;
        let what = format!("{:?} cluster: every founding member a voter", self.kind);
        wait_until(&what, Duration::from_secs(30), || async {
            let mut learners = Vec::new();
            for i in self.running() {
                let mut raw = self.members[i].server.as_ref().unwrap().raw().await;
                let s = raw.as_mut().map_err(|e| format!("member {i}: {e:?}"))?;
                let s = s.maint.status(pb::StatusRequest {}).await;
                let s = s.map_err(|e| format!("member {i}: {e}"))?.into_inner();
                if s.is_learner {
                    learners.push(i);
                }
            }
            if learners.is_empty() { Ok(()) } else { Err(format!("learners {learners:?}")) }
        })
        .await;
        self.formed = Instant::now();
    }

    /// The running member that leads, once every running member agrees on it (at most 30 s).
    pub async fn leader(&self) -> usize {
        let what = format!("{:?} cluster: an agreed leader among {:?}", self.kind, self.running());
        wait_until(&what, Duration::from_secs(30), || async {
            let mut leaders = Vec::new();
            let mut ids = Vec::new();
            for i in self.running() {
                if let Ok(mut raw) = self.members[i].server.as_ref().unwrap().raw().await
                    && let Ok(s) = raw.maint.status(pb::StatusRequest {}).await
                {
                    let s = s.into_inner();
                    leaders.push(s.leader);
                    ids.push((s.header.unwrap().member_id, i));
                }
            }
            let agreed = leaders.len() == self.running().len()
                && leaders.iter().all(|l| *l != 0 && *l == leaders[0]);
            match ids.iter().find(|(id, _)| agreed && *id == leaders[0]) {
                Some((_, i)) => Ok(*i),
                None => Err(format!("leaders {leaders:x?}")),
            }
        })
        .await
    }

    /// Waits until `n` more revisions have been written (by a load the test runs), as member
    /// `via` sees them: the step before goes on under writes.
    pub async fn writes_go_on(&self, via: usize, n: i64, what: &str) {
        let cl = self.client(via).await;
        let since = current_rev(&mut cl.clone()).await;
        wait_until(what, Duration::from_secs(30), || {
            let mut cl = cl.clone();
            async move { current_rev(&mut cl).await >= since + n }
        })
        .await;
    }

    /// Member ids by index, from each running member's Status.
    pub async fn member_id(&self, i: usize) -> u64 {
        let mut raw = self.raw(i).await;
        raw.maint.status(pb::StatusRequest {}).await.unwrap().into_inner().header.unwrap().member_id
    }

    /// Waits until every running member has the same revision and HashKV at it (at most
    /// 30 s); returns the revision.
    pub async fn converged(&self) -> i64 {
        wait_until("the members to converge", Duration::from_secs(30), || async {
            let mut seen = Vec::new();
            for i in self.running() {
                let mut raw = self.raw(i).await;
                let rev = raw
                    .kv
                    .range(pb::RangeRequest {
                        key: b"x".to_vec().into(),
                        serializable: true,
                        ..Default::default()
                    })
                    .await
                    .map(|r| r.into_inner().header.unwrap().revision)
                    .unwrap_or(-1);
                seen.push(rev);
            }
            if !seen.iter().all(|r| *r > 0 && *r == seen[0]) {
                return Err(format!("revisions {seen:?}"));
            }
            let mut hashes = Vec::new();
            for i in self.running() {
                let mut raw = self.raw(i).await;
                let h = raw.maint.hash_kv(pb::HashKvRequest { revision: seen[0] }).await;
                hashes.push(h.map(|h| h.into_inner().hash).ok());
            }
            if hashes.iter().all(|h| h.is_some() && *h == hashes[0]) {
                Ok(seen[0])
            } else {
                Err(format!("at {}: hashes {hashes:?}", seen[0]))
            }
        })
        .await
    }
}
