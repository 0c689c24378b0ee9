//! The TLS flags, client and peer together: the two sides `tls` builds from the same code.

use std::path::PathBuf;

/// TLS of the client URLs (and the metrics URLs): etcd's `client-transport-security`.
#[derive(clap::Args, Clone, Debug)]
pub struct ClientTlsFlags {
    /// The server's certificate (PEM, chain first) for https:// listen URLs.
    #[arg(long, env = "ETCD_CERT_FILE", display_order = 17)]
    pub cert_file: Option<PathBuf>,

    /// The private key of --cert-file (PEM).
    #[arg(long, env = "ETCD_KEY_FILE", display_order = 18)]
    pub key_file: Option<PathBuf>,

    /// CA certificates (PEM) that client certificates must chain to (with --client-cert-auth).
    #[arg(long, env = "ETCD_TRUSTED_CA_FILE", display_order = 19)]
    pub trusted_ca_file: Option<PathBuf>,

    /// Refuse https clients without a certificate signed by --trusted-ca-file; with auth
    /// enabled, the certificate's common name is the user when a request has no token.
    #[arg(
        long,
        env = "ETCD_CLIENT_CERT_AUTH",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "false",
        action = clap::ArgAction::Set,
        display_order = 20
    )]
    pub client_cert_auth: bool,

    /// Certificate revocation lists (PEM or DER): a client certificate they revoke is refused
    /// (with --client-cert-auth).
    #[arg(long, env = "ETCD_CLIENT_CRL_FILE", display_order = 73)]
    pub client_crl_file: Option<PathBuf>,

    /// A client certificate must name one of these hostnames (DNS or IP SAN), comma-separated.
    #[arg(
        long,
        env = "ETCD_CLIENT_CERT_ALLOWED_HOSTNAME",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        display_order = 75
    )]
    pub client_cert_allowed_hostname: Vec<String>,

    /// https client URLs with a self-signed certificate made at start (in
    /// <data-dir>/fixtures/client), when no --cert-file is given.
    #[arg(
        long,
        env = "ETCD_AUTO_TLS",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "false",
        action = clap::ArgAction::Set,
        display_order = 80
    )]
    pub auto_tls: bool,
}

/// TLS between members, on the peer URLs both ways: etcd's `peer-transport-security`.
#[derive(clap::Args, Clone, Debug)]
pub struct PeerTlsFlags {
    /// This member's certificate for https:// peer URLs (PEM), presented to and used to call
    /// the other members.
    #[arg(long, env = "ETCD_PEER_CERT_FILE", display_order = 45)]
    pub peer_cert_file: Option<PathBuf>,

    /// The private key of --peer-cert-file (PEM).
    #[arg(long, env = "ETCD_PEER_KEY_FILE", display_order = 46)]
    pub peer_key_file: Option<PathBuf>,

    /// CA certificates (PEM) the other members' certificates must chain to.
    #[arg(long, env = "ETCD_PEER_TRUSTED_CA_FILE", display_order = 47)]
    pub peer_trusted_ca_file: Option<PathBuf>,

    /// Refuse peers without a certificate signed by --peer-trusted-ca-file.
    #[arg(
        long,
        env = "ETCD_PEER_CLIENT_CERT_AUTH",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "false",
        action = clap::ArgAction::Set,
        display_order = 48
    )]
    pub peer_client_cert_auth: bool,

    /// As --client-crl-file, for the other members' certificates on the peer URLs.
    #[arg(long, env = "ETCD_PEER_CRL_FILE", display_order = 74)]
    pub peer_crl_file: Option<PathBuf>,

    /// A member's certificate (on the peer URLs) must have one of these common names.
    #[arg(
        long,
        env = "ETCD_PEER_CERT_ALLOWED_CN",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        display_order = 76
    )]
    pub peer_cert_allowed_cn: Vec<String>,

    /// A member's certificate (on the peer URLs) must name one of these hostnames.
    #[arg(
        long,
        env = "ETCD_PEER_CERT_ALLOWED_HOSTNAME",
        value_delimiter = ',',
        action = clap::ArgAction::Set,
        display_order = 77
    )]
    pub peer_cert_allowed_hostname: Vec<String>,

    /// The certificate this member presents when it calls the others (default:
    /// --peer-cert-file).
    #[arg(long, env = "ETCD_PEER_CLIENT_CERT_FILE", display_order = 78)]
    pub peer_client_cert_file: Option<PathBuf>,

    /// The private key of --peer-client-cert-file.
    #[arg(long, env = "ETCD_PEER_CLIENT_KEY_FILE", display_order = 79)]
    pub peer_client_key_file: Option<PathBuf>,

    /// https peer URLs with a self-signed certificate made at start (in
    /// <data-dir>/fixtures/peer), when no --peer-cert-file is given.
    #[arg(
        long,
        env = "ETCD_PEER_AUTO_TLS",
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "false",
        action = clap::ArgAction::Set,
        display_order = 81
    )]
    pub peer_auto_tls: bool,
}

/// What client and peer TLS share: protocol versions, cipher suites, self-signed validity.
#[derive(clap::Args, Clone, Debug)]
pub struct TlsFlags {
    /// The oldest TLS version https listeners accept: TLS1.2 or TLS1.3.
    #[arg(long, env = "ETCD_TLS_MIN_VERSION", default_value = "TLS1.2", display_order = 70)]
    pub tls_min_version: String,

    /// The newest TLS version https listeners accept: TLS1.2, TLS1.3, or empty (the newest).
    #[arg(long, env = "ETCD_TLS_MAX_VERSION", default_value = "", display_order = 71)]
    pub tls_max_version: String,

    /// The TLS 1.2 cipher suites https listeners accept, in Go's names, comma-separated
    /// (empty: rustls' defaults). TLS 1.3 suites are always all enabled, as in Go. Suites
    /// rustls does not implement (RSA key exchange, CBC, 3DES, RC4) are refused.
    #[arg(long, env = "ETCD_CIPHER_SUITES", value_delimiter = ',', action = clap::ArgAction::Set, display_order = 72)]
    pub cipher_suites: Vec<String>,

    /// Years the --auto-tls and --peer-auto-tls certificates are valid.
    #[arg(long, env = "ETCD_SELF_SIGNED_CERT_VALIDITY", default_value_t = 1, display_order = 83)]
    pub self_signed_cert_validity: u32,
}

/// The TLS protocol versions `--tls-min-version` and `--tls-max-version` allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// etcd's names of TLS versions (empty: the newest).
fn tls_version(v: &str) -> Result<Option<TlsVersion>, String> {
    match v {
        "" => Ok(None),
        "TLS1.2" => Ok(Some(TlsVersion::Tls12)),
        "TLS1.3" => Ok(Some(TlsVersion::Tls13)),
        _ => Err(format!("unexpected TLS version {v:?} (must be one of: TLS1.2, TLS1.3)")),
    }
}

/// The TLS versions `--tls-min-version` (`min`) and `--tls-max-version` (`max`) allow, oldest
/// first, or etcd's words for why they make no sense.
pub fn tls_versions(min: &str, max: &str) -> Result<Vec<TlsVersion>, String> {
    let lo = tls_version(min)?.unwrap_or(TlsVersion::Tls12);
    let hi = tls_version(max)?.unwrap_or(TlsVersion::Tls13);
    if lo > hi {
        return Err(format!("min version ({min}) is greater than max version ({max})"));
    }
    Ok([TlsVersion::Tls12, TlsVersion::Tls13]
        .into_iter()
        .filter(|v| lo <= *v && *v <= hi)
        .collect())
}
