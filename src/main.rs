//! The `mem_etcd` daemon: parse flags, set up logging, serve until SIGINT or SIGTERM.

use std::io::IsTerminal;
use std::sync::Arc;

use clap::Parser;
use mem_etcd::config::Config;
use mem_etcd::server::{self, Listener, Shared};
use tracing_subscriber::EnvFilter;

// Every gRPC request allocates and frees a few buffers (tonic's 8 KiB encode buffer, the decode
// buffer, the reply) on one worker thread and often frees them on another. glibc's malloc grows
// and trims its per-thread arenas around that pattern (mprotect, sysmalloc): a quarter of the
// server's CPU per put in a profile. mimalloc's thread-local free lists make it a few ns.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `mem_etcd snapshot restore|status ...`: offline tools, no server.
    if std::env::args_os().nth(1).is_some_and(|a| a == "snapshot") {
        std::process::exit(mem_etcd::snapshot_cmd::run(std::env::args_os().skip(1)));
    }
    let config = Config::parse();
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_new(log_filter(&config.log_level))?)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
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
    runtime.block_on(run(config))
}

async fn run(config: Config) -> Result<(), Box<dyn std::error::Error>> {
    let tls = match server::tls::server_config(&config) {
        Ok(tls) => tls,
        Err(e) => {
            eprintln!("mem_etcd: cannot start: {e}");
            std::process::exit(1);
        }
    };
    let mut listeners = Vec::new();
    for url in &config.listen_client_urls {
        let l = Listener::bind(url, tls.as_ref()).await;
        listeners.push(l.map_err(|e| format!("listen on {url}: {e}"))?);
    }
    tracing::info!(
        name = %config.name,
        version = %config.emulated_version,
        "mem_etcd {} starting",
        env!("CARGO_PKG_VERSION")
    );
    let mut metrics_listeners = Vec::new();
    for url in &config.listen_metrics_urls {
        let l =
            Listener::bind(url, tls.as_ref()).await.map_err(|e| format!("listen on {url}: {e}"))?;
        metrics_listeners.push(l);
    }
    let fail = |what: String| -> ! {
        tracing::error!("cannot start: {what}");
        eprintln!("mem_etcd: cannot start: {what}");
        std::process::exit(1);
    };
    // A cluster member first settles its ids (a joining one asks its cluster), then opens
    // its store, then starts Raft, which fills the store from its snapshot and log.
    let mut cluster = config.cluster().unwrap_or_else(|e| fail(e));
    if let Some(opts) = &mut cluster
        && let Err(e) = mem_etcd::raft::RaftNode::resolve_ids(opts).await
    {
        fail(e);
    }
    let peer_tls = server::tls::peer_server_config(&config).unwrap_or_else(|e| fail(e));
    let mut peer_listeners = Vec::new();
    if cluster.is_some() {
        for url in &config.listen_peer_urls {
            let l = Listener::bind(url, peer_tls.as_ref()).await;
            peer_listeners.push(l.map_err(|e| format!("listen on peer URL {url}: {e}"))?);
        }
    }
    let ids = cluster.as_ref().map(|o| (o.cluster_id, o.member_id));
    let shared = match Shared::open(config, ids) {
        Ok(s) => Arc::new(s),
        Err(e) => fail(e.to_string()),
    };
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
    let served =
        server::serve(shared.clone(), listeners, metrics_listeners, peer_listeners, stop).await;
    // Nothing is acknowledged that is not in the log; this writes out the rest and syncs it.
    match shared.raft() {
        Some(raft) => raft.shutdown().await,
        None => shared.close(),
    }
    served?;
    Ok(())
}

/// `--log-level` as a tracing filter. openraft reports every election and vote at info; its
/// warnings and errors are what an operator needs (mem_etcd logs leader changes itself), unless
/// the filter names openraft.
fn log_filter(level: &str) -> String {
    if level.contains("openraft") { level.to_string() } else { format!("{level},openraft=warn") }
}

/// Resolves when the server should stop: on the first SIGINT or SIGTERM, once a leader has
/// handed its leadership over (etcd's `Stop`), or once this member was removed from its cluster
/// (etcd's member then stops too, and exits 0).
async fn stop(shared: Arc<Shared>) {
    let Some(raft) = shared.raft().cloned() else { return shutdown_signal().await };
    tokio::select! {
        _ = shutdown_signal() => raft.hand_over().await,
        _ = raft.removed() => tracing::warn!(
            "the member has been permanently removed from the cluster; the data-dir used by \
             this member must be removed"
        ),
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
