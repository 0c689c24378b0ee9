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
    /// `self_signed`: `cert` was made by `--peer-auto-tls`; as etcd's members with self-signed
    /// certificates do, this member then accepts any certificate from the peers it calls (each
    /// made its own, so there is no CA to check them against), still checking that the peer
    /// holds the key of the certificate it shows.
    pub fn new(
        cert: &Path,
        key: &Path,
        ca: Option<&Path>,
        self_signed: bool,
    ) -> Result<Self, String> {
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
        if self_signed {
            let verifier =
                AnyServerCert(config.crypto_provider().signature_verification_algorithms);
            config.dangerous().set_certificate_verifier(Arc::new(verifier));
        }
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

/// etcd's `InsecureSkipVerify` for self-signed peer certificates (`--peer-auto-tls`): any
/// certificate is taken, but the handshake signature is still checked against it, so the peer
/// holds its key.
#[derive(Debug)]
struct AnyServerCert(rustls::crypto::WebPkiSupportedAlgorithms);

impl rustls::client::danger::ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_schemes()
    }
}
