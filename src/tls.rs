//! TLS for `https://` listeners, with etcd's flags: `--cert-file`, `--key-file`,
//! `--trusted-ca-file`, `--client-cert-auth`, `--client-crl-file`,
//! `--client-cert-allowed-hostname`, `--tls-min-version`, `--tls-max-version`,
//! `--cipher-suites`, `--auto-tls`, and their `--peer-*` counterparts for the peer URLs.
//!
//! The handshake is done here with rustls rather than by tonic so that ALPN offers both `h2`
//! and `http/1.1`: grpc-go (1.67+, Kubernetes 1.33+) refuses a server without `h2`, and Go's
//! HTTP/1.1 health checkers (kubeadm, kubelet probes with a custom TLS config) offer only
//! `http/1.1`, which a server offering `h2` alone would turn away. Each handshake runs in its
//! own task so that a slow or silent client never holds up the accept loop. An address that
//! both an `http://` and an `https://` client URL name serves both ([`incoming_either`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{CryptoProvider, ring as rp};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{
    CertificateDer, CertificateRevocationListDer, PrivateKeyDer, ServerName, UnixTime,
};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use tokio_rustls::rustls::{
    self, ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme, SupportedCipherSuite,
};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::config::{Config, TlsVersion};
use crate::raft::rafthttp::tls::read_certs;

/// How long a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS settings the flags ask for, or `None` without `--cert-file`/`--key-file`; an error
/// says which flag is wrong and why (a missing or unreadable file, no key, a bad CA).
pub fn server_config(config: &Config) -> Result<Option<Arc<ServerConfig>>, String> {
    build(
        Side {
            cert: &config.cert_file,
            key: &config.key_file,
            ca: &config.trusted_ca_file,
            crl: &config.client_crl_file,
            client_cert_auth: config.client_cert_auth,
            allowed_cns: &[],
            allowed_hostnames: &config.client_cert_allowed_hostname,
            kind: "",
        },
        config,
    )
}

/// The TLS settings of `https://` peer URLs, from the `--peer-*` flags.
pub fn peer_server_config(config: &Config) -> Result<Option<Arc<ServerConfig>>, String> {
    build(
        Side {
            cert: &config.peer_cert_file,
            key: &config.peer_key_file,
            ca: &config.peer_trusted_ca_file,
            crl: &config.peer_crl_file,
            client_cert_auth: config.peer_client_cert_auth,
            allowed_cns: &config.peer_cert_allowed_cn,
            allowed_hostnames: &config.peer_cert_allowed_hostname,
            kind: "peer-",
        },
        config,
    )
}

/// A client's TLS toward members from etcdctl-style files (`--cacert`, `--cert`, `--key`), as a
/// member dials its peers ([`peer_client`]); `None` without `--cert` and `--key`. For the tools
/// that call members as clients: etcd's grpc-proxy, `mem_etcd check copy`.
pub fn client_from_files(
    cacert: Option<&str>,
    cert: Option<&str>,
    key: Option<&str>,
) -> Result<Option<crate::raft::rafthttp::tls::PeerTls>, String> {
    let mut args = Vec::new();
    for (flag, v) in
        [("peer-cert-file", cert), ("peer-key-file", key), ("peer-trusted-ca-file", cacert)]
    {
        if let Some(v) = v {
            args.push(format!("--{flag}={v}"));
        }
    }
    peer_client(&crate::config::from_flags(&args)?)
}

/// How this member calls the others over `https://` peer URLs (Raft, forwarded requests, the
/// probe of a member joining), or `None` without `--peer-cert-file`/`--peer-key-file`. As
/// etcd's peer transport, it is made from the same settings as the peer listener:
/// `--tls-min-version`, `--tls-max-version` and `--cipher-suites` hold for these calls too, and
/// `--peer-cert-allowed-cn`/`--peer-cert-allowed-hostname` are asked of the called member's
/// certificate as of a calling member's. `--peer-crl-file` is checked by etcd's listener only,
/// so here too. This member presents `--peer-client-cert-file` if given, else its peer
/// certificate. With `--peer-auto-tls` (a certificate of its own making) it takes any
/// certificate from the members it calls (each made its own, so there is no CA to check them
/// against), still checking that the peer holds its key.
pub fn peer_client(config: &Config) -> Result<Option<crate::raft::rafthttp::tls::PeerTls>, String> {
    let (cert, key) = match (&config.peer_cert_file, &config.peer_key_file) {
        (Some(c), Some(k)) => match (&config.peer_client_cert_file, &config.peer_client_key_file) {
            (Some(cc), Some(ck)) => (cc, ck),
            (None, None) => (c, k),
            _ => {
                return Err("--peer-client-cert-file and --peer-client-key-file go together".into());
            }
        },
        (None, None) => return Ok(None),
        _ => return Err("--peer-cert-file and --peer-key-file go together".into()),
    };
    let (provider, versions) = provider(config)?;
    let roots = ca_roots(config.peer_trusted_ca_file.as_deref(), "--peer-trusted-ca-file")?;
    let certs = read_certs(cert, "--peer-cert-file")?;
    let key = private_key(key, "--peer-key-file")?;
    let allowed = AllowList {
        cns: config.peer_cert_allowed_cn.clone(),
        hostnames: config.peer_cert_allowed_hostname.clone(),
    };
    let algorithms = provider.signature_verification_algorithms;
    let verifier: Option<Arc<dyn ServerCertVerifier>> = if config.peer_self_signed {
        Some(Arc::new(PeerServerVerifier { inner: None, allowed, algorithms }))
    } else if allowed.is_empty() || roots.is_empty() {
        // rustls' own verifier (with no CA every certificate is refused before the allow-list
        // would matter).
        None
    } else {
        let inner =
            WebPkiServerVerifier::builder_with_provider(roots.clone().into(), provider.clone())
                .build()
                .map_err(|e| format!("--peer-trusted-ca-file: {e}"))?;
        Some(Arc::new(PeerServerVerifier { inner: Some(inner), allowed, algorithms }))
    };
    let mut tls = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .map_err(|e| format!("--peer-cert-file/--peer-key-file: {e}"))?;
    if let Some(v) = verifier {
        tls.dangerous().set_certificate_verifier(v);
    }
    tls.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Some(crate::raft::rafthttp::tls::PeerTls::new(tls)))
}

/// The certificate of a called member, as etcd's peer client checks it: the chain and host
/// name (none of that with self-signed certificates: Go's `InsecureSkipVerify`), then the
/// allow-list. Go checks the allow-list against the verified chains only, and there are none
/// when verification is skipped, so with self-signed certificates and an allow-list every
/// called member is refused, as in etcd.
#[derive(Debug)]
struct PeerServerVerifier {
    /// webpki's checks against `--peer-trusted-ca-file`; `None` with `--peer-auto-tls`.
    inner: Option<Arc<WebPkiServerVerifier>>,
    allowed: AllowList,
    /// For the handshake signatures when `inner` is `None`.
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PeerServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = match &self.inner {
            Some(v) => v.verify_server_cert(end_entity, intermediates, server_name, ocsp, now)?,
            None => ServerCertVerified::assertion(),
        };
        if !self.allowed.is_empty()
            && (self.inner.is_none() || self.allowed.check(end_entity).is_err())
        {
            // etcd's words (its check is shared with the listening side).
            return Err(rustls::Error::General("client certificate authentication failed".into()));
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// One side's (client or peer) TLS flags.
struct Side<'a> {
    cert: &'a Option<PathBuf>,
    key: &'a Option<PathBuf>,
    ca: &'a Option<PathBuf>,
    crl: &'a Option<PathBuf>,
    client_cert_auth: bool,
    allowed_cns: &'a [String],
    allowed_hostnames: &'a [String],
    /// The flags' infix (`peer-`).
    kind: &'a str,
}

impl Side<'_> {
    fn allowed(&self) -> AllowList {
        AllowList { cns: self.allowed_cns.to_vec(), hostnames: self.allowed_hostnames.to_vec() }
    }
}

/// Go's names of the TLS 1.2 suites rustls implements, and the TLS 1.3 ones (which Go, hence
/// etcd, always enables whatever `--cipher-suites` says).
fn suite_by_go_name(name: &str) -> Option<Option<SupportedCipherSuite>> {
    use rp::cipher_suite as cs;
    Some(Some(match name {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
        | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305" => {
            cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" => {
            cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_AES_128_GCM_SHA256" | "TLS_AES_256_GCM_SHA384" | "TLS_CHACHA20_POLY1305_SHA256" => {
            return Some(None);
        }
        _ => return None,
    }))
}

/// Suites Go knows (so etcd accepts them) that rustls does not implement.
const GO_ONLY_SUITES: &[&str] = &[
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
];

/// The cipher suites of `--cipher-suites` (`None`: rustls' defaults). A name Go does not know
/// is refused as etcd refuses it; one Go knows but rustls lacks is refused saying so.
pub fn cipher_suites(names: &[String]) -> Result<Option<Vec<SupportedCipherSuite>>, String> {
    let names: Vec<&String> = names.iter().filter(|n| !n.is_empty()).collect();
    if names.is_empty() {
        return Ok(None);
    }
    let mut suites = Vec::new();
    for name in names {
        match suite_by_go_name(name) {
            Some(Some(s)) => suites.push(s),
            Some(None) => {}
            None if GO_ONLY_SUITES.contains(&name.as_str()) => {
                return Err(format!(
                    "TLS cipher suite {name:?} is not supported by mem_etcd (rustls implements no \
                     RSA key exchange, CBC, 3DES or RC4 suites)"
                ));
            }
            None => return Err(format!("unexpected TLS cipher suite {name:?}")),
        }
    }
    // TLS 1.3's suites are not configurable in Go: all of them stay.
    suites.extend(rp::DEFAULT_CIPHER_SUITES.iter().filter(|s| s.tls13().is_some()).copied());
    Ok(Some(suites))
}

/// The crypto provider and protocol versions the flags allow.
fn provider(
    config: &Config,
) -> Result<(Arc<CryptoProvider>, Vec<&'static rustls::SupportedProtocolVersion>), String> {
    let mut provider = rp::default_provider();
    if let Some(suites) = cipher_suites(&config.cipher_suites)? {
        provider.cipher_suites = suites;
    }
    let versions = config
        .tls_versions()?
        .into_iter()
        .map(|v| match v {
            TlsVersion::Tls12 => &rustls::version::TLS12,
            TlsVersion::Tls13 => &rustls::version::TLS13,
        })
        .collect();
    Ok((Arc::new(provider), versions))
}

/// How v3 discovery (`embed::discovery`) dials its service, from the `--discovery-*` flags as
/// etcd's client reads them: TLS when a certificate, key or CA is given, when
/// `--discovery-insecure-transport=false`, or when verification is skipped; `None` otherwise.
/// The service's certificate is checked against `--discovery-cacert`, or not at all with
/// `--discovery-insecure-skip-tls-verify` (the handshake's signatures still are).
pub fn discovery_client(
    config: &Config,
) -> Result<Option<crate::raft::rafthttp::tls::PeerTls>, String> {
    let wanted = config.discovery_cert.is_some()
        || config.discovery_key.is_some()
        || config.discovery_cacert.is_some()
        || !config.discovery_insecure_transport
        || config.discovery_insecure_skip_tls_verify;
    if !wanted {
        return Ok(None);
    }
    let (provider, versions) = provider(config)?;
    let roots = ca_roots(config.discovery_cacert.as_deref(), "--discovery-cacert")?;
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut tls = match (&config.discovery_cert, &config.discovery_key) {
        (Some(cert), Some(key)) => {
            let certs = read_certs(cert, "--discovery-cert")?;
            let key = private_key(key, "--discovery-key")?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| format!("--discovery-cert/--discovery-key: {e}"))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => return Err("--discovery-cert and --discovery-key go together".into()),
    };
    if config.discovery_insecure_skip_tls_verify {
        let algorithms = provider.signature_verification_algorithms;
        let any = PeerServerVerifier { inner: None, allowed: AllowList::default(), algorithms };
        tls.dangerous().set_certificate_verifier(Arc::new(any));
    }
    tls.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Some(crate::raft::rafthttp::tls::PeerTls::new(tls)))
}

/// The certificates of the CA file `ca` (given with `flag`) as a root store; empty without one.
fn ca_roots(ca: Option<&Path>, flag: &str) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    if let Some(ca) = ca {
        for c in read_certs(ca, flag)? {
            roots.add(c).map_err(|e| format!("{flag} {}: {e}", ca.display()))?;
        }
    }
    Ok(roots)
}

/// The private key in the PEM file `path` (given with `flag`).
fn private_key(path: &Path, flag: &str) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| format!("{flag} {}: no usable private key: {e}", path.display()))
}

/// A server config from one side's flags.
fn build(side: Side<'_>, config: &Config) -> Result<Option<Arc<ServerConfig>>, String> {
    let kind = side.kind;
    let (cert, key) = match (side.cert, side.key) {
        (None, None) => {
            if side.client_cert_auth {
                return Err(format!(
                    "--{kind}client-cert-auth needs --{kind}cert-file and --{kind}key-file"
                ));
            }
            return Ok(None);
        }
        (Some(c), Some(k)) => (c, k),
        _ => return Err(format!("--{kind}cert-file and --{kind}key-file go together")),
    };
    if !side.allowed_cns.is_empty() && !side.allowed_hostnames.is_empty() {
        return Err(format!(
            "AllowedCNs and AllowedHostnames are mutually exclusive (cns={:?}, hostnames={:?})",
            side.allowed_cns, side.allowed_hostnames
        ));
    }
    let certs = read_certs(cert, &format!("--{kind}cert-file"))?;
    let key = private_key(key, &format!("--{kind}key-file"))?;
    let (provider, versions) = provider(config)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| e.to_string())?;
    // As etcd's transport: a trusted CA alone requires client certificates too (only
    // `--client-cert-auth` makes their common name the user, see `v3rpc::auth`).
    let builder = if side.client_cert_auth || side.ca.is_some() {
        let Some(ca) = side.ca else {
            return Err(format!("--{kind}client-cert-auth needs --{kind}trusted-ca-file"));
        };
        let trusted = read_certs(ca, &format!("--{kind}trusted-ca-file"))?;
        let mut roots = RootCertStore::empty();
        for c in &trusted {
            roots
                .add(c.clone())
                .map_err(|e| format!("--{kind}trusted-ca-file {}: {e}", ca.display()))?;
        }
        let mut webpki = WebPkiClientVerifier::builder_with_provider(roots.into(), provider);
        if let Some(crl) = side.crl {
            // As etcd's check: a certificate the list revokes is refused; one it does not
            // cover is not.
            webpki = webpki
                .with_crls(read_crls(crl, &format!("--{kind}crl-file"))?)
                .only_check_end_entity_revocation()
                .allow_unknown_revocation_status();
        }
        let inner =
            webpki.build().map_err(|e| format!("--{kind}trusted-ca-file {}: {e}", ca.display()))?;
        builder.with_client_cert_verifier(Arc::new(ClientVerifier {
            inner,
            trusted,
            allowed: side.allowed(),
        }))
    } else {
        builder.with_no_client_auth()
    };
    let mut tls = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("--{kind}cert-file/--{kind}key-file: {e}"))?;
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Some(Arc::new(tls)))
}

/// The revocation lists of a CRL file, PEM or DER (Go's parser reads both).
fn read_crls(
    path: &Path,
    flag: &str,
) -> Result<Vec<CertificateRevocationListDer<'static>>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    let pem: Vec<_> = CertificateRevocationListDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{flag} {}: {e}", path.display()))?;
    Ok(if pem.is_empty() { vec![CertificateRevocationListDer::from(bytes)] } else { pem })
}

/// Client certificates as Go's verifier (hence etcd) takes them: webpki's checks, and also a
/// certificate that is itself one of the trusted certificates (a self-signed CA used as a
/// client certificate, which webpki refuses as "CA used as end entity"); then the common name
/// or hostname allow-lists (`--peer-cert-allowed-cn`, `--*-cert-allowed-hostname`).
#[derive(Debug)]
struct ClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    /// The `--trusted-ca-file` certificates, for the exact-match rule.
    trusted: Vec<CertificateDer<'static>>,
    allowed: AllowList,
}

/// etcd's `--peer-cert-allowed-cn` / `--*-cert-allowed-hostname`: the certificate the other
/// side shows must have one of these common names, or be valid for one of these host names
/// (the two are exclusive). Empty: any verified certificate will do.
#[derive(Clone, Debug, Default)]
struct AllowList {
    cns: Vec<String>,
    hostnames: Vec<String>,
}

impl AllowList {
    fn is_empty(&self) -> bool {
        self.cns.is_empty() && self.hostnames.is_empty()
    }

    fn check(&self, cert: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        if !self.cns.is_empty() {
            let cn = crate::auth::cert::common_name(cert);
            if !cn.as_ref().is_some_and(|cn| self.cns.contains(cn)) {
                return Err(rustls::Error::General(format!(
                    "tls: CommonName authentication failed (CommonName={}, AllowedCNs={:?})",
                    cn.unwrap_or_default(),
                    self.cns
                )));
            }
        }
        if !self.hostnames.is_empty() {
            let ee = webpki::EndEntityCert::try_from(cert)
                .map_err(|e| rustls::Error::General(e.to_string()))?;
            let ok = self.hostnames.iter().any(|h| {
                ServerName::try_from(h.as_str())
                    .is_ok_and(|n| ee.verify_is_valid_for_subject_name(&n).is_ok())
            });
            if !ok {
                return Err(rustls::Error::General(format!(
                    "tls: hostname authentication failed (AllowedHostnames={:?})",
                    self.hostnames
                )));
            }
        }
        Ok(())
    }
}

impl ClientCertVerifier for ClientVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = match self.inner.verify_client_cert(end_entity, intermediates, now) {
            Ok(v) => v,
            // Go builds the chain [leaf] when the leaf is itself a root.
            Err(_) if self.trusted.iter().any(|t| t.as_ref() == end_entity.as_ref()) => {
                ClientCertVerified::assertion()
            }
            Err(e) => return Err(e),
        };
        self.allowed.check(end_entity)?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// `--auto-tls` / `--peer-auto-tls`: as etcd, a self-signed certificate and key in
/// `<data-dir>/fixtures/{client,peer}` for the hosts of `urls`, made at the first start and
/// reused after. Returns the certificate and key files.
pub fn self_signed(dir: &Path, urls: &[String], years: u32) -> Result<(PathBuf, PathBuf), String> {
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    if cert_path.exists() && key_path.exists() {
        return Ok((cert_path, key_path));
    }
    let fail = |e: String| format!("auto TLS in {}: {e}", dir.display());
    let mut hosts: Vec<String> = urls
        .iter()
        .filter_map(|u| u.split_once("://").map(|(_, rest)| rest))
        .filter_map(|hp| {
            let hp = hp.trim_end_matches('/');
            let host = match hp.rsplit_once(':') {
                Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
                _ => hp,
            };
            let host = host.trim_start_matches('[').trim_end_matches(']');
            (!host.is_empty()).then(|| host.to_string())
        })
        .collect();
    hosts.sort();
    hosts.dedup();
    let mut params = rcgen::CertificateParams::new(hosts).map_err(|e| fail(e.to_string()))?;
    let (y, m, d) = crate::utc::today();
    params.not_before = rcgen::date_time_ymd(y, m, d);
    params.not_after = rcgen::date_time_ymd(y + years.max(1) as i32, m, d.min(28));
    params.distinguished_name.push(rcgen::DnType::OrganizationName, "etcd");
    params.key_usages =
        vec![rcgen::KeyUsagePurpose::DigitalSignature, rcgen::KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let key = rcgen::KeyPair::generate().map_err(|e| fail(e.to_string()))?;
    let cert = params.self_signed(&key).map_err(|e| fail(e.to_string()))?;
    std::fs::create_dir_all(dir).map_err(|e| fail(e.to_string()))?;
    std::fs::write(&cert_path, cert.pem()).map_err(|e| fail(e.to_string()))?;
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&key_path)
            .map_err(|e| fail(e.to_string()))?;
        f.write_all(key.serialize_pem().as_bytes()).map_err(|e| fail(e.to_string()))?;
    }
    Ok((cert_path, key_path))
}

/// A client connection after its handshake: over TCP, or over a unix socket (`unixs://`).
#[derive(Debug)]
pub struct TlsConn<IO = TcpStream>(pub tokio_rustls::server::TlsStream<IO>);

/// What a request on a TLS connection knows of it: the TCP peer, and the common name of the
/// client's certificate (verified at the handshake when --client-cert-auth is on), which is the
/// user with auth enabled (etcd's CN identity).
#[derive(Clone, Debug)]
pub struct TlsConnectInfo {
    /// `None` on a unix socket.
    pub tcp: Option<TcpConnectInfo>,
    pub common_name: Option<String>,
}

impl<IO> TlsConn<IO> {
    fn common_name(&self) -> Option<String> {
        let (_, tls) = self.0.get_ref();
        tls.peer_certificates()
            .and_then(|c| c.first())
            .and_then(|c| crate::auth::cert::common_name(c))
    }
}

impl Connected for TlsConn {
    type ConnectInfo = TlsConnectInfo;

    fn connect_info(&self) -> TlsConnectInfo {
        let tcp = self.0.get_ref().0.connect_info();
        TlsConnectInfo { tcp: Some(tcp), common_name: self.common_name() }
    }
}

impl Connected for TlsConn<UnixStream> {
    type ConnectInfo = TlsConnectInfo;

    fn connect_info(&self) -> TlsConnectInfo {
        TlsConnectInfo { tcp: None, common_name: self.common_name() }
    }
}

impl<IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> tokio::io::AsyncRead
    for TlsConn<IO>
{
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl<IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite
    for TlsConn<IO>
{
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
/// logged as etcd logs it, "rejected connection on client endpoint" (or `peer`, as
/// `endpoint` says), and the connection dropped; the listener goes on.
pub fn incoming(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    endpoint: &'static str,
) -> ReceiverStream<std::io::Result<TlsConn>> {
    let acceptor = TlsAcceptor::from(config);
    accept_each(listener, move |tcp, peer| handshake(acceptor.clone(), tcp, peer, endpoint))
}

/// The first byte of a TLS connection: a handshake record (the ClientHello), which no HTTP/1
/// request or HTTP/2 preface starts with.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// [`incoming`] for an address both an `http://` and an `https://` URL name, as etcd serves
/// one (its cmux): a connection whose first byte starts a TLS handshake gets one, any other is
/// served as plaintext. The byte is peeked, not read; a client that sends nothing within the
/// handshake timeout is dropped. Each connection waits in its own task.
pub fn incoming_either(
    listener: TcpListener,
    config: Arc<ServerConfig>,
    endpoint: &'static str,
) -> ReceiverStream<std::io::Result<EitherConn>> {
    let acceptor = TlsAcceptor::from(config);
    accept_each(listener, move |tcp, peer| {
        let acceptor = acceptor.clone();
        async move {
            let mut first = [0u8; 1];
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, tcp.peek(&mut first)).await {
                Ok(Ok(1)) if first[0] == TLS_HANDSHAKE_RECORD => {
                    let tls = handshake(acceptor, tcp, peer, endpoint).await?;
                    Some(EitherConn::Tls(Box::new(tls)))
                }
                Ok(Ok(1)) => Some(EitherConn::Plain(tcp)),
                // Hung up (or failed) before sending anything.
                Ok(_) => None,
                Err(_) => {
                    tracing::debug!(%peer, "client sent nothing; connection dropped");
                    None
                }
            }
        }
    })
}

/// Accepts on `listener`, sets TCP_NODELAY, and turns each connection into what `handle`
/// makes of it (`None`: dropped) in a task of its own, so that a slow or silent client never
/// holds up the accept loop.
fn accept_each<C, F, Fut>(listener: TcpListener, handle: F) -> ReceiverStream<std::io::Result<C>>
where
    C: Send + 'static,
    F: Fn(TcpStream, std::net::SocketAddr) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Option<C>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(64);
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
            let (conn, tx) = (handle(tcp, peer), tx.clone());
            tokio::spawn(async move {
                if let Some(c) = conn.await {
                    let _ = tx.send(Ok(c)).await;
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// [`incoming`] for a `unixs://` URL's socket.
pub fn incoming_unix(
    listener: UnixListener,
    config: Arc<ServerConfig>,
    endpoint: &'static str,
) -> ReceiverStream<std::io::Result<TlsConn<UnixStream>>> {
    let acceptor = TlsAcceptor::from(config);
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                r = listener.accept() => r,
                _ = tx.closed() => return,
            };
            let conn = match accepted {
                Ok((conn, _)) => conn,
                Err(e) => {
                    tracing::warn!(error = %e, "tls: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                // (Go names a unix socket's remote end "@".)
                if let Some(c) = handshake(acceptor, conn, "@", endpoint).await {
                    let _ = tx.send(Ok(c)).await;
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// The TLS handshake of one connection, within [`HANDSHAKE_TIMEOUT`]; a failure is logged.
async fn handshake<IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    acceptor: TlsAcceptor,
    tcp: IO,
    peer: impl std::fmt::Display,
    endpoint: &'static str,
) -> Option<TlsConn<IO>> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => Some(TlsConn(tls)),
        // A client that hung up mid-handshake (a TCP probe, a dial raced and abandoned) is not
        // worth an operator's attention; a refused certificate is.
        Ok(Err(e)) if client_left(&e) => {
            tracing::debug!(%peer, "tls: client left during the handshake");
            None
        }
        Ok(Err(e)) => {
            rejected(endpoint, peer, &e);
            None
        }
        Err(_) => {
            rejected(endpoint, peer, &"tls: handshake timed out");
            None
        }
    }
}

/// A connection to an address served both ways ([`incoming_either`]).
#[derive(Debug)]
pub enum EitherConn {
    Plain(TcpStream),
    /// Boxed: a TLS session's state is kilobytes, a socket a few bytes.
    Tls(Box<TlsConn>),
}

impl Connected for EitherConn {
    /// The TLS kind for both, so that a request finds the common name (none in plaintext)
    /// where it looks for it.
    type ConnectInfo = TlsConnectInfo;

    fn connect_info(&self) -> TlsConnectInfo {
        match self {
            EitherConn::Plain(tcp) => {
                TlsConnectInfo { tcp: Some(tcp.connect_info()), common_name: None }
            }
            EitherConn::Tls(tls) => tls.connect_info(),
        }
    }
}

impl tokio::io::AsyncRead for EitherConn {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            EitherConn::Plain(c) => std::pin::Pin::new(c).poll_read(cx, buf),
            EitherConn::Tls(c) => std::pin::Pin::new(&mut **c).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for EitherConn {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            EitherConn::Plain(c) => std::pin::Pin::new(c).poll_write(cx, buf),
            EitherConn::Tls(c) => std::pin::Pin::new(&mut **c).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            EitherConn::Plain(c) => std::pin::Pin::new(c).poll_write_vectored(cx, bufs),
            EitherConn::Tls(c) => std::pin::Pin::new(&mut **c).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            EitherConn::Plain(c) => c.is_write_vectored(),
            EitherConn::Tls(c) => c.is_write_vectored(),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            EitherConn::Plain(c) => std::pin::Pin::new(c).poll_flush(cx),
            EitherConn::Tls(c) => std::pin::Pin::new(&mut **c).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            EitherConn::Plain(c) => std::pin::Pin::new(c).poll_shutdown(cx),
            EitherConn::Tls(c) => std::pin::Pin::new(&mut **c).poll_shutdown(cx),
        }
    }
}

/// etcd's warning for a refused handshake (its `HandshakeFailure` hook), field names included.
fn rejected(endpoint: &str, peer: impl std::fmt::Display, error: &dyn std::fmt::Display) {
    let msg = if endpoint == "peer" {
        "rejected connection on peer endpoint"
    } else {
        "rejected connection on client endpoint"
    };
    tracing::warn!("remote-addr" = %peer, "server-name" = "", error = %error, "{msg}");
}

/// Whether a handshake failed because the client went away (hung up, reset) rather than
/// because it was refused.
fn client_left(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe)
}
