//! `etcd gateway start`: etcd's layer-4 gateway. It accepts TCP connections on one address and
//! pipes each, byte for byte, to one of the cluster's client endpoints, so a client configured
//! with a single address reaches whichever member answers. It knows nothing of gRPC or TLS: a
//! TLS client talks TLS to the member itself.
//!
//! As etcd's (`proxy/tcpproxy`): an endpoint that refuses a connection is deactivated and
//! the next one tried; every `--retry-delay` each inactive endpoint is dialed, and one that
//! answers is active again. Endpoints are taken in turn.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use clap::Parser;
use tokio::net::{TcpListener, TcpStream};

use super::flag::{go_bool, go_duration};

/// etcd's `gateway start` flags (cobra takes them before or after `start`).
#[derive(Parser, Debug)]
#[command(name = "etcd gateway", about = "gateway related command")]
pub struct Flags {
    #[command(subcommand)]
    command: Option<Command>,

    /// listen address
    #[arg(long, global = true, default_value = "127.0.0.1:23790")]
    listen_addr: String,

    /// comma separated etcd cluster endpoints
    #[arg(long, global = true, value_delimiter = ',', default_value = "127.0.0.1:2379")]
    endpoints: Vec<String>,

    /// duration of delay before retrying failed endpoints
    #[arg(long, global = true, default_value = "1m", value_parser = go_duration)]
    retry_delay: Duration,

    /// DNS domain used to bootstrap initial cluster (not supported: mem_etcd does no DNS
    /// discovery)
    #[arg(long, global = true)]
    discovery_srv: Option<String>,

    /// service name to query when using DNS discovery
    #[arg(long, global = true)]
    discovery_srv_name: Option<String>,

    /// accept insecure SRV records
    #[arg(long, global = true, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", default_value = "false", value_parser = go_bool)]
    insecure_discovery: bool,

    /// path to the client server TLS CA file for verifying the discovered endpoints when
    /// discovery-srv is provided
    #[arg(long, global = true)]
    trusted_ca_file: Option<String>,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// start the gateway
    Start,
}

/// One endpoint and whether it takes connections.
#[derive(Debug)]
struct Remote {
    addr: String,
    /// Cleared when a dial fails, set again by the monitor once one succeeds: accepting tasks
    /// skip inactive endpoints without waiting for their dial to time out.
    active: AtomicBool,
}

/// Runs the gateway until the process is stopped; the exit status on a start-up error.
pub async fn run(flags: Flags) -> i32 {
    if flags.command.is_none() {
        use clap::CommandFactory;
        let _ = Flags::command().print_help();
        return 0;
    }
    if flags.discovery_srv.is_some() {
        eprintln!("mem_etcd gateway: --discovery-srv (DNS SRV discovery) is not supported");
        return 1;
    }
    tracing::info!(args = ?std::env::args().collect::<Vec<_>>(), "Running: ");
    let mut remotes = Vec::new();
    for ep in &flags.endpoints {
        // A TCP proxy: the scheme says nothing to it.
        let hostport = ep.split_once("://").map_or(ep.as_str(), |(_, rest)| rest);
        let hostport = hostport.trim_end_matches('/');
        if hostport.rsplit_once(':').is_none_or(|(_, p)| p.parse::<u16>().is_err()) {
            print!("error parsing endpoint {ep:?}");
            return 1;
        }
        remotes.push(Remote { addr: hostport.to_string(), active: AtomicBool::new(true) });
    }
    let Some((_, listen_port)) = flags.listen_addr.rsplit_once(':') else {
        println!("failed to validate listen address: {}", flags.listen_addr);
        return 1;
    };
    let Ok(listen_addrs) = flags.listen_addr.to_socket_addrs() else {
        println!("failed to resolve listen host: {}", flags.listen_addr);
        return 1;
    };
    let listen_addrs: Vec<SocketAddr> = listen_addrs.collect();
    // A gateway that forwards to itself would loop every connection back into itself.
    for r in &remotes {
        let Ok(resolved) = r.addr.to_socket_addrs() else {
            println!("failed to resolve endpoint host: {}", r.addr);
            return 1;
        };
        for a in resolved {
            if a.port().to_string() == listen_port && listen_addrs.iter().any(|l| l.ip() == a.ip())
            {
                println!(
                    "SRV or endpoint ({}->{a}) should not resolve to the gateway listen addr ({})",
                    r.addr, flags.listen_addr
                );
                return 1;
            }
        }
    }
    if remotes.is_empty() {
        println!("no endpoints found");
        return 1;
    }
    let listener = match TcpListener::bind(flags.listen_addr.as_str()).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("listen tcp {}: {e}", flags.listen_addr);
            return 1;
        }
    };
    let remotes: Arc<[Remote]> = remotes.into();
    tokio::spawn(monitor(remotes.clone(), flags.retry_delay));
    let eps: Vec<&str> = remotes.iter().map(|r| r.addr.as_str()).collect();
    tracing::info!(endpoints = ?eps, "ready to proxy client requests");
    let next = Arc::new(AtomicUsize::new(0));
    loop {
        let (conn, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: keep serving the others.
                tracing::warn!(error = %e, "failed to accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let remotes = remotes.clone();
        let next = next.clone();
        let interval = flags.retry_delay;
        tokio::spawn(async move { pipe(conn, &remotes, &next, interval).await });
    }
}

/// Connects `conn` to the first active endpoint that answers, from the next in turn, and
/// copies both ways until either side closes.
async fn pipe(mut conn: TcpStream, remotes: &[Remote], next: &AtomicUsize, interval: Duration) {
    let _ = conn.set_nodelay(true);
    let start = next.fetch_add(1, Ordering::Relaxed);
    for i in 0..remotes.len() {
        let r = &remotes[(start + i) % remotes.len()];
        if !r.active.load(Ordering::Relaxed) {
            continue;
        }
        match TcpStream::connect(r.addr.as_str()).await {
            Ok(mut remote) => {
                let _ = remote.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut conn, &mut remote).await;
                return;
            }
            Err(e) => {
                r.active.store(false, Ordering::Relaxed);
                tracing::warn!(
                    address = %r.addr,
                    interval = ?interval,
                    error = %e,
                    "deactivated endpoint"
                );
            }
        }
    }
    // No endpoint answers: the client sees its connection closed.
}

/// Every `interval`, dials each inactive endpoint and activates those that answer.
async fn monitor(remotes: Arc<[Remote]>, interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        for r in remotes.iter().filter(|r| !r.active.load(Ordering::Relaxed)) {
            match TcpStream::connect(r.addr.as_str()).await {
                Ok(_) => {
                    r.active.store(true, Ordering::Relaxed);
                    tracing::info!(address = %r.addr, "activated");
                }
                Err(e) => tracing::warn!(
                    address = %r.addr,
                    interval = ?interval,
                    error = %e,
                    "failed to activate endpoint (stay inactive for another interval)"
                ),
            }
        }
    }
}
