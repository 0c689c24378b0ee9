//! etcd's two proxies, which the `etcd` binary also runs: `etcd gateway start` (`tcp`, a
//! layer-4 pipe to the cluster's client endpoints) and `etcd grpc-proxy start` (`grpc`, a
//! gRPC server in front of the cluster). Each is a client of the cluster and holds no data;
//! they sit beside `server`, not on its write path. `flag` reads flag values as Go's flag
//! package does.

mod flag;
pub mod grpc;
pub mod tcp;

/// A proxy subcommand with its flags.
#[derive(Debug)]
pub enum Proxy {
    Gateway(tcp::Flags),
    Grpc(Box<grpc::Flags>),
}

/// The proxy `args` (the binary's arguments without the program name) ask for, `None` if the
/// first is no proxy's name, or clap's error (usage, help) for the caller to print.
pub fn parse(args: &[std::ffi::OsString]) -> Option<Result<Proxy, clap::Error>> {
    use clap::Parser;
    let first = args.first()?.to_str()?;
    let rest = args.iter().skip(1).map(|a| super::config::go_style(a.clone()));
    let argv = std::iter::once(std::ffi::OsString::from(first)).chain(rest);
    match first {
        "gateway" => Some(tcp::Flags::try_parse_from(argv).map(Proxy::Gateway)),
        "grpc-proxy" => Some(grpc::Flags::try_parse_from(argv).map(|f| Proxy::Grpc(Box::new(f)))),
        _ => None,
    }
}

/// Runs the proxy; the process's exit status.
pub async fn run(proxy: Proxy) -> i32 {
    match proxy {
        Proxy::Gateway(f) => tcp::run(f).await,
        Proxy::Grpc(f) => grpc::run(*f).await,
    }
}
