//! TLS for `https://` listeners, with etcd's flags: `--cert-file`, `--key-file`,
//! `--trusted-ca-file`, `--client-cert-auth`.
//!
//! The handshake is done here with rustls rather than by tonic so that ALPN offers both `h2`
//! and `http/1.1`: grpc-go (1.67+, Kubernetes 1.33+) refuses a server without `h2`, and Go's
//! HTTP/1.1 health checkers (kubeadm, kubelet probes with a custom TLS config) offer only
//! `http/1.1`, which a server offering `h2` alone would turn away. Each handshake runs in its
//! own task so that a slow or silent client never holds up the accept loop.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::PrivateKeyDer;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::config::Config;
use crate::raft::tls::read_certs;

/// How long a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS settings the flags ask for, or `None` without `--cert-file`/`--key-file`; an error
/// says which flag is wrong and why (a missing or unreadable file, no key, a bad CA).
pub fn server_config(config: &Config) -> Result<Option<Arc<ServerConfig>>, String> {
    let files = (&config.cert_file, &config.key_file, &config.trusted_ca_file);
    build(files, config.client_cert_auth, "")
}

/// The TLS settings of `https://` peer URLs, from the `--peer-*` flags.
pub fn peer_server_config(config: &Config) -> Result<Option<Arc<ServerConfig>>, String> {
    let files = (&config.peer_cert_file, &config.peer_key_file, &config.peer_trusted_ca_file);
    build(files, config.peer_client_cert_auth, "peer-")
}

type Files<'a> = (
    &'a Option<std::path::PathBuf>,
    &'a Option<std::path::PathBuf>,
    &'a Option<std::path::PathBuf>,
);

/// A server config from a certificate, key and CA; `kind` is the flags' infix (`peer-`).
fn build(
    (cert, key, ca): Files<'_>,
    client_cert_auth: bool,
    kind: &str,
) -> Result<Option<Arc<ServerConfig>>, String> {
    let (cert, key) = match (cert, key) {
        (None, None) => {
            if client_cert_auth {
                return Err(format!(
                    "--{kind}client-cert-auth needs --{kind}cert-file and --{kind}key-file"
                ));
            }
            return Ok(None);
        }
        (Some(c), Some(k)) => (c, k),
        _ => return Err(format!("--{kind}cert-file and --{kind}key-file go together")),
    };
    let certs = read_certs(cert, &format!("--{kind}cert-file"))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("--{kind}key-file {}: no usable private key: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = if client_cert_auth {
        let Some(ca) = ca else {
            return Err(format!("--{kind}client-cert-auth needs --{kind}trusted-ca-file"));
        };
        let mut roots = RootCertStore::empty();
        for c in read_certs(ca, &format!("--{kind}trusted-ca-file"))? {
            roots.add(c).map_err(|e| format!("--{kind}trusted-ca-file {}: {e}", ca.display()))?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
            .build()
            .map_err(|e| format!("--{kind}trusted-ca-file {}: {e}", ca.display()))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let mut tls = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("--{kind}cert-file/--{kind}key-file: {e}"))?;
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Some(Arc::new(tls)))
}

/// A client connection after its handshake.
#[derive(Debug)]
pub struct TlsConn(pub tokio_rustls::server::TlsStream<TcpStream>);

/// What a request on a TLS connection knows of it: the TCP peer, and the common name of the
/// client's certificate (verified at the handshake when --client-cert-auth is on), which is the
/// user with auth enabled (etcd's CN identity).
#[derive(Clone, Debug)]
pub struct TlsConnectInfo {
    pub tcp: TcpConnectInfo,
    pub common_name: Option<String>,
}

impl Connected for TlsConn {
    type ConnectInfo = TlsConnectInfo;

    fn connect_info(&self) -> TlsConnectInfo {
        let (tcp, tls) = self.0.get_ref();
        let common_name = tls
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(|c| crate::auth::cert::common_name(c));
        TlsConnectInfo { tcp: tcp.connect_info(), common_name }
    }
}

impl tokio::io::AsyncRead for TlsConn {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TlsConn {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// Accepts on `listener` and yields connections whose handshake succeeded. A failed handshake
/// (no client certificate when one is required, an untrusted one, no common protocol) is
/// logged and the connection dropped; the listener goes on.
pub fn incoming(
    listener: TcpListener,
    config: Arc<ServerConfig>,
) -> ReceiverStream<std::io::Result<TlsConn>> {
    let (tx, rx) = mpsc::channel(64);
    let acceptor = TlsAcceptor::from(config);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                r = listener.accept() => r,
                // The server stopped taking connections from this listener.
                _ = tx.closed() => return,
            };
            let (tcp, peer) = match accepted {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "tls: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(Ok(TlsConn(tls))).await;
                    }
                    // A client that hung up mid-handshake (a TCP probe, a dial raced and
                    // abandoned) is not worth an operator's attention; a refused certificate is.
                    Ok(Err(e)) if client_left(&e) => {
                        tracing::debug!(%peer, "tls: client left during the handshake")
                    }
                    Ok(Err(e)) => tracing::info!(%peer, error = %e, "tls: handshake refused"),
                    Err(_) => tracing::info!(%peer, "tls: handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// Whether a handshake failed because the client went away (hung up, reset) rather than
/// because it was refused.
fn client_left(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe)
}
