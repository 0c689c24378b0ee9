//! The `mem_etcd` daemon: parse flags, set up logging, serve until SIGINT or SIGTERM.

use std::io::IsTerminal;
use std::sync::Arc;

use mem_etcd::config::{self, AutoTls, Config, DefaultHost, Flags, LoadError};
use mem_etcd::server::embed::serve::{self, Listener};
use mem_etcd::server::{self, etcdserver::member::Member};
use tracing_subscriber::EnvFilter;

mod allocator;
mod log_format;
mod log_outputs;

// mimalloc, as `allocator` says why.
#[global_allocator]
static GLOBAL: allocator::MiMalloc = allocator::MiMalloc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `mem_etcd snapshot restore|status ...`: offline tools, no server.
    if std::env::args_os().nth(1).is_some_and(|a| a == "snapshot") {
        std::process::exit(mem_etcd::etcdutl::snapshot::run(std::env::args_os().skip(1)));
    }
    // `mem_etcd check copy ...`: a copy of a store compared with its source, over the API.
    if std::env::args_os().nth(1).is_some_and(|a| a == "check") {
        std::process::exit(mem_etcd::etcdutl::check::run(std::env::args_os().skip(1)));
    }
    // `mem_etcd follow ...`: a copy of a running store kept at its revisions, then the cut-over.
    if std::env::args_os().nth(1).is_some_and(|a| a == "follow") {
        std::process::exit(mem_etcd::etcdutl::follow::run(std::env::args_os().skip(1)));
    }
    // `mem_etcd gateway start ...`, `mem_etcd grpc-proxy start ...`: etcd's proxies.
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if let Some(proxy) = mem_etcd::proxy::parse(&args) {
        let proxy = proxy.unwrap_or_else(|e| e.exit());
        // As etcd's proxies log: zap's JSON at info, on stderr.
        init_logging("json", "info", log_outputs::LogOutputs::open(&["default".into()])?)?;
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        std::process::exit(runtime.block_on(mem_etcd::proxy::run(proxy)));
    }
    allocator::start_purge();
    // `mem_etcd bench-floor <flags>`: the member as the flags say, its KV calls answered by the
    // floor (`v3rpc::floor`); `mem_etcd bench-floor-tonic <flags>`: the floor alone on tonic's
    // defaults at the first client URL. Both for `benches/compare_etcd.sh floor` only.
    let floor = match args.first().and_then(|a| a.to_str()) {
        Some("bench-floor") => Some(Floor::Member),
        Some("bench-floor-tonic") => Some(Floor::Tonic),
        _ => None,
    };
    let args = std::env::args_os().enumerate().filter(|(i, _)| floor.is_none() || *i != 1);
    let loaded = match config::load(args.map(|(_, a)| a)) {
        Ok(l) => l,
        Err(LoadError::Usage(e)) => e.exit(),
        // As Go's flag package: the message, and exit status 2.
        Err(LoadError::Flag(e)) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
        Err(LoadError::Invalid(e)) => {
            eprintln!("mem_etcd: cannot start: {e}");
            std::process::exit(1);
        }
    };
    let flags = loaded.flags;
    if flags.version {
        print!("{}", version_lines(&flags.member.emulated_version));
        return Ok(());
    }
    // Checked with the flags, as etcd checks them (the names are the TLS layer's to know).
    if let Err(e) = mem_etcd::tls::cipher_suites(&flags.tls.cipher_suites) {
        eprintln!("mem_etcd: cannot start: {e}");
        std::process::exit(1);
    }
    let outputs = log_outputs::LogOutputs::open(&flags.log.log_outputs)?;
    init_logging(&flags.log.log_format, &flags.log.log_level, outputs)?;
    if let Some(path) = &flags.config_file {
        tracing::info!(
            path = %path.display(),
            "loaded server configuration, other configuration command line flags and environment variables will be ignored if provided"
        );
    }
    if !loaded.unknown_keys.is_empty() {
        tracing::warn!(keys = ?loaded.unknown_keys, "configuration file keys that are no flag: ignored");
    }
    log_no_effect(&flags, &loaded.no_effect);
    if floor.is_some() {
        // Acknowledged puts are not kept: nobody should mistake it for a datastore.
        tracing::warn!(
            "bench-floor: KV answers every Range empty and every Put without storing it; a \
             benchmark server, not a datastore"
        );
    }
    let default_host = DefaultHost::resolve(&flags, mem_etcd::netutil::default_host);
    if let Some(h) = &default_host {
        tracing::info!(host = %h.host, "detected default host for advertise");
    }
    for warning in &loaded.deprecated {
        tracing::warn!("{warning}");
    }
    let auto_tls = auto_tls(&flags).unwrap_or_else(|e| fail(e));
    // The configuration the server runs with, built once.
    let config = Config::new(flags, default_host, auto_tls);
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if config.worker_threads > 0 {
        builder.worker_threads(config.worker_threads);
    }
    // Tokio runs a task woken by the running task next (its "LIFO slot"). Every finished
    // request wakes its HTTP/2 connection task, which then ran before the connection's other
    // ready requests and flushed one response per write(2). Without the slot the connection
    // runs after them and writes all their responses at once: a quarter of the writes and
    // about a third less CPU per small request. The knob is behind tokio's `tokio_unstable`
    // cfg, which .cargo/config.toml sets; a build without it is correct, only slower.
    #[cfg(tokio_unstable)]
    builder.disable_lifo_slot();
    let runtime = builder.enable_all().build()?;
    match floor {
        None => runtime.block_on(run(config, serve::Kv::Member)),
        Some(Floor::Member) => runtime.block_on(run(config, serve::Kv::Floor)),
        Some(Floor::Tonic) => {
            // tonic's own runtime as a user starts it (tokio's defaults, the LIFO slot on).
            drop(runtime);
            let url = config.listen_client_urls.first().ok_or("no client URL")?;
            let addr = url.trim_start_matches("http://").parse()?;
            let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            Ok(runtime.block_on(serve::serve_tonic_floor(addr))?)
        }
    }
}

/// The benchmark servers `mem_etcd` also runs (see `main`).
#[derive(Clone, Copy)]
enum Floor {
    /// The member's own stack.
    Member,
    /// tonic's defaults.
    Tonic,
}

/// Logs in `format` (etcd's `json`, or `console`: tracing's text, coloured on a terminal) at
/// `level` to `outputs`.
fn init_logging(
    format: &str,
    level: &str,
    outputs: log_outputs::LogOutputs,
) -> Result<(), Box<dyn std::error::Error>> {
    let ansi = outputs.is_stderr_only() && std::io::stderr().is_terminal();
    let filter = EnvFilter::try_new(log_filter(level))?;
    if format != "console" {
        tracing_subscriber::fmt()
            .event_format(log_format::EtcdJson)
            .with_env_filter(filter)
            .with_writer(outputs)
            .init();
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(outputs)
            .with_ansi(ansi)
            .init();
    }
    Ok(())
}

/// etcd's startup line, "starting an etcd server" with its configuration, which log
/// pipelines and etcd's tests read (`"v2-deprecation":"write-only"`,
/// `"snapshot-catchup-entries":1000`), and mem_etcd's version beside it. Flags that have no
/// effect here show the value given, as etcd shows them.
fn log_start(config: &Config) {
    use mem_etcd::duration::go_format;
    let wal = config.wal_options();
    let initialized = wal.mode != mem_etcd::wal::Mode::None
        && (wal.dir.raft().has_member() || wal.dir.wal().exists());
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = if config.worker_threads > 0 { config.worker_threads } else { cpus };
    let peer_urls = if config.initial_advertise_peer_urls.is_empty() {
        config.listen_peer_urls.clone()
    } else {
        config.initial_advertise_peer_urls.clone()
    };
    let initial_cluster = config
        .initial_cluster
        .clone()
        .unwrap_or_else(|| format!("{}={}", config.name, peer_urls.join(",")));
    let retention = match config.auto_compaction() {
        Ok(Some(config::AutoCompaction::Periodic(d))) => d,
        // etcd keeps a revision retention in a duration, as nanoseconds.
        Ok(Some(config::AutoCompaction::Revision { retention, .. })) => {
            std::time::Duration::from_nanos(retention.max(0) as u64)
        }
        _ => std::time::Duration::ZERO,
    };
    let state = match config.initial_cluster_state {
        config::ClusterState::New => "new",
        config::ClusterState::Existing => "existing",
    };
    // etcd enforces its default stage whatever is asked, but for the one that skips its check.
    let v2 = if config.v2_deprecation_skip_check { "write-only-skip-check" } else { "write-only" };
    let data_dir = config.data_dir.as_ref().map_or(String::new(), |d| d.display().to_string());
    tracing::info!(
        "etcd-version" = %config.emulated_version,
        "git-sha" = option_env!("MEM_ETCD_GIT_SHA").unwrap_or("Not provided"),
        "go-version" = "none (mem_etcd is written in Rust)",
        "go-os" = std::env::consts::OS,
        "go-arch" = go_arch(),
        "max-cpu-set" = workers,
        "max-cpu-available" = cpus,
        "member-initialized" = initialized,
        name = %config.name,
        "data-dir" = %data_dir,
        "wal-dir" = "",
        "wal-dir-dedicated" = "",
        "member-dir" = %wal.dir.display(),
        "force-new-cluster" = config.force_new_cluster,
        "heartbeat-interval" = %go_format(std::time::Duration::from_millis(config.heartbeat_interval)),
        "election-timeout" = %go_format(std::time::Duration::from_millis(config.election_timeout)),
        "snapshot-count" = config.snapshot_count,
        "snapshot-catchup-entries" = config.snapshot_catchup_entries,
        "initial-advertise-peer-urls" = ?peer_urls,
        "listen-peer-urls" = ?config.listen_peer_urls,
        "advertise-client-urls" = ?config.advertised_client_urls(),
        "listen-client-urls" = ?config.listen_client_urls,
        "listen-metrics-urls" = ?config.listen_metrics_urls,
        "initial-cluster" = %initial_cluster,
        "initial-cluster-state" = state,
        "initial-cluster-token" = %config.initial_cluster_token,
        "quota-backend-bytes" = config.quota_backend_bytes,
        "max-request-bytes" = config.max_request_bytes,
        "max-concurrent-streams" = config.max_concurrent_streams,
        "feature-gates" = %config.feature_gates.join(","),
        "initial-corrupt-check" = config.gate("InitialCorruptCheck"),
        "corrupt-check-time-interval" = %go_format(config.corrupt_check_time),
        "compact-check-time-interval" = %go_format(config.compact_hash_check_time),
        "auto-compaction-mode" = match config.auto_compaction_mode {
            config::AutoCompactionMode::Periodic => "periodic",
            config::AutoCompactionMode::Revision => "revision",
        },
        "auto-compaction-retention" = %go_format(retention),
        "auto-compaction-interval" = %go_format(retention),
        "v2-deprecation" = v2,
        "mem-etcd-version" = env!("CARGO_PKG_VERSION"),
        "starting an etcd server"
    );
}

/// etcd's bootstrap defrag (`--bootstrap-defrag-threshold-megabytes`): etcd defragments its
/// bbolt file at start when that would free at least the threshold, and otherwise logs that it
/// skips it. mem_etcd keeps no file with free pages (its store's size and size in use are the
/// same), so the threshold is never reached and the start always skips, with etcd's line.
fn log_bootstrap_defrag(shared: &Member) {
    let mb = shared.config.bootstrap_defrag_threshold_megabytes;
    if mb == 0 {
        return;
    }
    let size = shared.store.size_bytes() as u64;
    let threshold = mb.saturating_mul(1024 * 1024);
    tracing::info!(
        "current-db-size-bytes" = size,
        "current-db-size" = %mem_etcd::humanize::bytes(size),
        "current-db-size-in-use-bytes" = size,
        "current-db-size-in-use" = %mem_etcd::humanize::bytes(size),
        "experimental-bootstrap-defrag-threshold-bytes" = threshold,
        "experimental-bootstrap-defrag-threshold" = %mem_etcd::humanize::bytes(threshold),
        "Skipping defragmentation"
    );
}

/// Go's name for this machine's architecture (etcd's `go-arch`, `Go OS/Arch`).
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        a => a,
    }
}

/// `--version`: etcd's four lines, with the emulated version (tools parse the first), then
/// mem_etcd's own.
fn version_lines(emulated: &str) -> String {
    let arch = go_arch();
    format!(
        "etcd Version: {emulated}\nGit SHA: {}\nGo Version: none (mem_etcd is written in Rust)\n\
         Go OS/Arch: {}/{arch}\nmem_etcd Version: {}\n",
        option_env!("MEM_ETCD_GIT_SHA").unwrap_or("Not provided"),
        std::env::consts::OS,
        env!("CARGO_PKG_VERSION"),
    )
}

/// One line for the flags given that change nothing here, and what the feature gates do.
fn log_no_effect(flags: &Flags, no_effect: &[String]) {
    let mut ignored: Vec<String> = no_effect.iter().map(|f| format!("--{f}")).collect();
    let gates = flags.experimental.feature_gates_state().unwrap_or_default();
    for (gate, on) in &gates {
        let default = config::feature_gate_default(gate);
        if *on != default && !["InitialCorruptCheck", "CompactHashCheck"].contains(gate) {
            ignored.push(format!("feature gate {gate}={on}"));
        }
    }
    if !ignored.is_empty() {
        tracing::warn!(
            "accepted for etcd's command lines, no effect in mem_etcd (see the README's flag \
             table): {}",
            ignored.join(" ")
        );
    }
    if gates.get("InitialCorruptCheck") == Some(&true)
        && flags.cluster.initial_cluster.as_deref().is_some_and(|c| c.contains(','))
    {
        tracing::info!(
            "initial corruption check: on a restart this member compares its store's hash with \
             its peers' before it joins them"
        );
    }
    if flags.storage.unsafe_no_fsync {
        tracing::warn!(
            "--unsafe-no-fsync: the log is never fsync'd while running; a machine crash may lose acknowledged writes"
        );
    }
}

/// Logs and prints why the server cannot start, and exits 1.
fn fail(what: String) -> ! {
    tracing::error!("cannot start: {what}");
    eprintln!("mem_etcd: cannot start: {what}");
    std::process::exit(1);
}

async fn run(config: Config, kv: serve::Kv) -> Result<(), Box<dyn std::error::Error>> {
    let tls = mem_etcd::tls::server_config(&config).unwrap_or_else(|e| fail(e));
    let (listeners, http_listeners) = Listener::bind_client(
        &config.listen_client_urls,
        &config.listen_client_http_urls,
        tls.as_ref(),
    )
    .await?;
    log_start(&config);
    let mut metrics_listeners = Vec::new();
    for url in &config.listen_metrics_urls {
        if tls.is_none() && (url.starts_with("https://") || url.starts_with("unixs://")) {
            // etcd's words (`embed.ErrMissingClientTLSInfoForMetricsURL`).
            return Err("client TLS key/cert (--cert-file, --key-file) must be provided for \
                        metrics secure url"
                .into());
        }
        let l =
            Listener::bind(url, tls.as_ref()).await.map_err(|e| format!("listen on {url}: {e}"))?;
        metrics_listeners.push(l);
    }
    // A cluster member first settles its ids (a joining one asks its cluster), then opens
    // its store, then starts Raft, which fills the store from its snapshot and log. Its Raft
    // state is whole first: a --force-new-cluster start replaces it, and may have crashed
    // while doing so.
    let wal = config.wal_options();
    if wal.mode != mem_etcd::wal::Mode::None
        && let Err(e) = mem_etcd::raft::restore::settle(&wal.dir.raft())
    {
        fail(format!("{}: {e}", wal.dir.display()));
    }
    // v3 discovery finds the founders before anything reads them.
    let founders = if server::embed::discovery::wanted(&config) {
        server::embed::discovery::bootstrap(&config).await.unwrap_or_else(|e| fail(e))
    } else {
        config.founders()
    };
    let mut cluster = config.cluster(&founders).unwrap_or_else(|e| fail(e));
    if let Some(node) = &mut cluster {
        node.tls = mem_etcd::tls::peer_client(&config).unwrap_or_else(|e| fail(e));
    }
    let member_state = wal.mode != mem_etcd::wal::Mode::None && wal.dir.raft().has_member();
    if config.force_new_cluster && !member_state {
        tracing::info!(
            "--force-new-cluster: the data directory holds no cluster member's state; nothing to \
             force"
        );
    }
    if let Some(opts) = &mut cluster
        && let Err(e) = mem_etcd::raft::RaftNode::resolve_ids(opts).await
    {
        fail(e);
    }
    let peer_tls = mem_etcd::tls::peer_server_config(&config).unwrap_or_else(|e| fail(e));
    // Every member listens on its peer URLs from the start, as etcd's does: a member alone
    // answers there too (see `etcdhttp::http`), and serves Raft once it grows into a cluster.
    let mut peer_listeners = Vec::new();
    for url in &config.listen_peer_urls {
        let l = Listener::bind(url, peer_tls.as_ref()).await;
        peer_listeners.push(l.map_err(|e| format!("listen on peer URL {url}: {e}"))?);
    }
    let ids = cluster.as_ref().map(|o| (o.cluster_id, o.member_id));
    let shared = match Member::open(config, &founders, ids) {
        Ok(s) => Arc::new(s),
        Err(e) => fail(e.to_string()),
    };
    log_bootstrap_defrag(&shared);
    // Held while a cluster member runs: two processes on one data directory would corrupt it
    // (a member alone locks it when it opens its WAL).
    let mut _lock = None;
    if let Some(opts) = cluster {
        let dir = shared.config.wal_options().dir;
        let lock = mem_etcd::wal::lock_dir(&dir);
        _lock = Some(lock.unwrap_or_else(|e| fail(format!("{}: {e}", dir.display()))));
        if let Err(e) = shared.start_raft(opts).await {
            fail(e);
        }
    }
    let stop = stop(shared.clone());
    let served = serve::serve(
        shared.clone(),
        kv,
        listeners,
        http_listeners,
        metrics_listeners,
        peer_listeners,
        stop,
    )
    .await;
    // Nothing is acknowledged that is not in the log; this writes out the rest and syncs it.
    // A member alone that grew into a cluster has both.
    if let Some(raft) = shared.raft() {
        raft.shutdown().await;
    }
    shared.close();
    served?;
    Ok(())
}

/// `--auto-tls` and `--peer-auto-tls`: without certificate flags, a self-signed certificate in
/// `<data-dir>/fixtures/{client,peer}` (as etcd) stands for them. Given certificates win, as in
/// etcd. Made before the configuration is derived, which takes them in place of the flags.
fn auto_tls(flags: &Flags) -> Result<AutoTls, String> {
    let fixtures = config::data_dir(flags).fixtures();
    let years = flags.tls.self_signed_cert_validity;
    let mut made = AutoTls::default();
    let (client, peer) = (&flags.client_tls, &flags.peer_tls);
    if client.auto_tls {
        if client.cert_file.is_some() || client.key_file.is_some() {
            tracing::warn!("ignoring client auto TLS since certs given");
        } else {
            let mut urls = flags.member.listen_client_urls.clone();
            urls.extend(flags.member.listen_client_http_urls.iter().cloned());
            let (c, k) = mem_etcd::tls::self_signed(&fixtures.join("client"), &urls, years)?;
            tracing::info!(cert = %c.display(), "client TLS: a self-signed certificate (--auto-tls)");
            made.client = Some((c, k));
        }
    }
    if peer.peer_auto_tls {
        if peer.peer_cert_file.is_some() || peer.peer_key_file.is_some() {
            tracing::warn!("ignoring peer auto TLS since certs given");
        } else {
            let dir = fixtures.join("peer");
            let (c, k) = mem_etcd::tls::self_signed(&dir, &flags.member.listen_peer_urls, years)?;
            tracing::info!(cert = %c.display(), "peer TLS: a self-signed certificate (--peer-auto-tls)");
            made.peer = Some((c, k));
        }
    }
    Ok(made)
}

/// `--log-level` as a tracing filter. etcd's levels panic and fatal are error here. openraft
/// reports every election and vote at info; its warnings and errors are what an operator needs
/// (mem_etcd logs leader changes itself), unless the filter names openraft.
fn log_filter(level: &str) -> String {
    let level = match level {
        "panic" | "fatal" | "dpanic" => "error",
        l => l,
    };
    if level.contains("openraft") { level.to_string() } else { format!("{level},openraft=warn") }
}

/// Resolves when the server should stop: on the first SIGINT or SIGTERM, once a leader has
/// handed its leadership over (etcd's `Stop`), or once this member was removed from its cluster
/// (etcd's member then stops too, and exits 0).
async fn stop(shared: Arc<Member>) {
    let signal = shutdown_signal();
    tokio::pin!(signal);
    // A member alone may grow into a cluster while it runs (on its first member add); from
    // then on it hands over and watches for its removal as every cluster member does.
    let raft = loop {
        if let Some(raft) = shared.raft() {
            break raft.clone();
        }
        tokio::select! {
            _ = &mut signal => return,
            _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
        }
    };
    tokio::select! {
        _ = &mut signal => raft.hand_over().await,
        _ = raft.removed() => {
            // etcd's two lines as its server stops on its removal.
            tracing::warn!(error = mem_etcd::raft::rafthttp::network::MEMBER_REMOVED, "server error");
            tracing::warn!("data-dir used by this member must be removed");
        }
    }
}

/// Resolves on the first SIGINT or SIGTERM.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
