//! TLS between members, with etcd's peer flags: `--peer-cert-file` and `--peer-key-file` (this
//! member's certificate, presented to peers and, as a client certificate, when calling them),
//! `--peer-trusted-ca-file` (the CA peers' certificates must chain to) and
//! `--peer-client-cert-auth` (peers calling this member must present such a certificate).
//! Used for `https://` peer URLs; the listening side reuses `server::tls`'s accept loop.

use std::path::Path;
use std::sync::Arc;

use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
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
    /// The client side of peer TLS from the peer flags: trusts `ca`, presents `cert`/`key`.
    pub fn new(cert: &Path, key: &Path, ca: Option<&Path>) -> Result<Self, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        if let Some(ca) = ca {
            for c in read_certs(ca, "--peer-trusted-ca-file")? {
                roots
                    .add(c)
                    .map_err(|e| format!("--peer-trusted-ca-file {}: {e}", ca.display()))?;
            }
        }
        let certs = read_certs(cert, "--peer-cert-file")?;
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
            format!("--peer-key-file {}: no usable private key: {e}", key.display())
        })?;
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_client_auth_cert(certs, key)
            .map_err(|e| format!("--peer-cert-file/--peer-key-file: {e}"))?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Self { config: Arc::new(config) })
    }

    /// A lazily connecting channel to `endpoint` over TLS.
    pub fn connect_lazy(&self, endpoint: Endpoint) -> Channel {
        let connector = TlsConnector::from(self.config.clone());
        let connect = tower::service_fn(move |uri: http::Uri| {
            let connector = connector.clone();
            async move {
                let host = uri.host().unwrap_or("localhost").trim_matches(['[', ']']).to_string();
                let port = uri.port_u16().unwrap_or(443);
                let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
                tcp.set_nodelay(true)?;
                let name = ServerName::try_from(host)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
                let tls = connector.connect(name, tcp).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
            }
        });
        endpoint.connect_with_connector_lazy(connect)
    }
}
