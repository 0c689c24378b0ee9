//! TLS between members, client side: how this member dials `https://` and `unixs://` peer
//! URLs. The client
//! settings are built from etcd's peer flags by `tls::peer_client` (from the same
//! settings as the peer listener's, as etcd's peer transport builds them); the listening side
//! reuses `tls`'s accept loop.

use std::path::Path;
use std::sync::Arc;

use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tonic::transport::{Channel, Endpoint};

/// How this member connects to https peers.
#[derive(Clone, Debug)]
pub struct PeerTls {
    config: Arc<ClientConfig>,
}

/// The certificates of a PEM file given with `flag`, or why there are none.
pub fn read_certs(path: &Path, flag: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{flag} {}: no certificate in it", path.display()));
    }
    Ok(certs)
}

impl PeerTls {
    /// Dials with `config` (which offers ALPN `h2`, as gRPC needs).
    pub fn new(config: ClientConfig) -> Self {
        Self { config: Arc::new(config) }
    }

    /// A TLS connection to `host:port`, checking the peer's certificate for `host`.
    pub async fn connect_tcp(
        &self,
        host: &str,
        port: u16,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        let tcp = tokio::net::TcpStream::connect((host, port)).await?;
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        TlsConnector::from(self.config.clone()).connect(name, tcp).await
    }

    /// A TLS connection on the unix socket at `path` (a `unixs://` peer URL), checking the
    /// peer's certificate for the URL's host, as Go's transport takes the server name from it
    /// (`unixs://localhost:2380`: the socket `localhost:2380`, the name `localhost`).
    pub async fn connect_unix(
        &self,
        path: &str,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::UnixStream>> {
        let host = match path.rsplit_once(':') {
            Some((host, _)) if !host.is_empty() && !path.contains('/') => host.to_string(),
            _ if !path.contains('/') => path.to_string(),
            _ => "localhost".to_string(),
        };
        let unix = tokio::net::UnixStream::connect(path).await?;
        let name = ServerName::try_from(host)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        TlsConnector::from(self.config.clone()).connect(name, unix).await
    }

    /// A lazily connecting channel to `endpoint` over TLS.
    pub fn connect_lazy(&self, endpoint: Endpoint) -> Channel {
        let tls = self.clone();
        let connect = tower::service_fn(move |uri: http::Uri| {
            let tls = tls.clone();
            async move {
                let host = uri.host().unwrap_or("localhost").trim_matches(['[', ']']).to_string();
                let port = uri.port_u16().unwrap_or(443);
                let tls = tls.connect_tcp(&host, port).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
            }
        });
        endpoint.connect_with_connector_lazy(connect)
    }

    /// A lazily connecting channel over TLS on the unix socket at `path` ([`Self::connect_unix`]).
    pub fn connect_unix_lazy(&self, endpoint: Endpoint, path: &str) -> Channel {
        let tls = self.clone();
        let path = path.to_string();
        let connect = tower::service_fn(move |_: http::Uri| {
            let (tls, path) = (tls.clone(), path.clone());
            async move {
                let tls = tls.connect_unix(&path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
            }
        });
        endpoint.connect_with_connector_lazy(connect)
    }
}
