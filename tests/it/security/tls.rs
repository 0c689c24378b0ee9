//! TLS (issue 8): https:// listeners with etcd's flags, checked with the real etcdctl 3.6
//! (grpc-go, which insists on ALPN h2) and with an HTTP/1.1 client (as Go's health checkers
//! connect), with and without client certificates. kube-apiserver over TLS is in k8s_e2e.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;

use crate::support::*;
use crate::tools::etcdctl::etcdctl;

/// A CA, a server certificate for 127.0.0.1/localhost and a client certificate from it, and a
/// client certificate from another CA, as PEM files in a temporary directory.
#[derive(Debug)]
pub struct Certs {
    pub dir: tempfile::TempDir,
}

impl Certs {
    pub fn new() -> Certs {
        let dir = tempfile::Builder::new().prefix("mem_etcd-tls-").tempdir().expect("temp dir");
        let write = |name: &str, pem: String| std::fs::write(dir.path().join(name), pem).unwrap();
        let ca = |name: &str| {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.distinguished_name.push(DnType::CommonName, name);
            let cert = p.self_signed(&key).unwrap();
            (cert.pem(), Issuer::new(p, key))
        };
        let leaf = |issuer: &Issuer<'_, KeyPair>, cn: &str, sans: &[&str]| {
            let key = KeyPair::generate().unwrap();
            let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
            let mut p = CertificateParams::new(sans).unwrap();
            p.distinguished_name.push(DnType::CommonName, cn);
            p.extended_key_usages = vec![
                rcgen::ExtendedKeyUsagePurpose::ServerAuth,
                rcgen::ExtendedKeyUsagePurpose::ClientAuth,
            ];
            let cert = p.signed_by(&key, issuer).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (ca_pem, issuer) = ca("mem_etcd test CA");
        write("ca.crt", ca_pem);
        let (c, k) = leaf(&issuer, "mem_etcd", &["127.0.0.1", "localhost"]);
        write("server.crt", c);
        write("server.key", k);
        let (c, k) = leaf(&issuer, "client", &[]);
        write("client.crt", c);
        write("client.key", k);
        let (_, other) = ca("some other CA");
        let (c, k) = leaf(&other, "rogue", &[]);
        write("rogue.crt", c);
        write("rogue.key", k);
        Certs { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn arg(&self, flag: &str, name: &str) -> String {
        format!("{flag}={}", self.path(name).display())
    }

    /// The server flags: certificate and key, and with `client_auth` the CA and
    /// --client-cert-auth.
    pub fn server_flags(&self, client_auth: bool) -> Vec<String> {
        let mut f =
            vec![self.arg("--cert-file", "server.crt"), self.arg("--key-file", "server.key")];
        if client_auth {
            f.push(self.arg("--trusted-ca-file", "ca.crt"));
            f.push("--client-cert-auth".into());
        }
        f
    }
}

/// Starts mem_etcd with a plain listener (which the harness waits on) and an https one with
/// `flags`; returns the server and the https address.
pub async fn start_tls(flags: &[String]) -> (Server, SocketAddr) {
    let mut args = vec!["--listen-client-urls=http://127.0.0.1:0,https://127.0.0.1:0".to_string()];
    args.extend(flags.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = Server::start(Kind::MemEtcd, &args).await.expect("mem_etcd");
    let second = crate::tools::flags::second_listener(&s).await;
    (s, second)
}

/// etcdctl over https with `auth` (pairs of flag and file), e.g. `put k v`; returns the exit
/// code, stdout and stderr.
fn ctl(
    certs: &Certs,
    addr: SocketAddr,
    auth: &[(&str, &str)],
    args: &[&str],
) -> (Option<i32>, String, String) {
    let bin = peer_binary("etcdctl").expect("etcdctl peer");
    let mut all: Vec<String> = auth.iter().map(|(f, n)| certs.arg(f, n)).collect();
    all.extend(args.iter().map(|a| a.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    etcdctl(&bin, &format!("https://{addr}"), &all, None)
}

const CLIENT: [(&str, &str); 3] =
    [("--cacert", "ca.crt"), ("--cert", "client.crt"), ("--key", "client.key")];

#[tokio::test]
async fn etcdctl_works_over_mutual_tls() {
    let certs = Certs::new();
    let (s, https) = start_tls(&certs.server_flags(true)).await;
    let (code, out, err) = ctl(&certs, https, &CLIENT, &["put", "k", "v"]);
    assert_eq!((code, out.trim()), (Some(0), "OK"), "{err}");
    let (code, out, err) = ctl(&certs, https, &CLIENT, &["get", "k", "--print-value-only"]);
    assert_eq!((code, out.trim()), (Some(0), "v"), "{err}");
    let (code, out, err) = ctl(&certs, https, &CLIENT, &["endpoint", "health"]);
    assert_eq!(code, Some(0), "{out}{err}");
    // The same store over the plain listener.
    let mut c = s.client().await;
    assert_eq!(c.get("k", None).await.unwrap().kvs()[0].value(), b"v");
}

#[tokio::test]
async fn clients_without_a_trusted_certificate_are_refused() {
    let certs = Certs::new();
    let (s, https) = start_tls(&certs.server_flags(true)).await;
    let timeout = ["--command-timeout=3s", "put", "k", "v"];
    let (code, _, err) = ctl(&certs, https, &[("--cacert", "ca.crt")], &timeout);
    assert_ne!(code, Some(0), "put without a client certificate succeeded: {err}");
    let rogue = [("--cacert", "ca.crt"), ("--cert", "rogue.crt"), ("--key", "rogue.key")];
    let (code, _, err) = ctl(&certs, https, &rogue, &timeout);
    assert_ne!(code, Some(0), "put with a certificate from another CA succeeded: {err}");
    // A client that does not trust the server's CA refuses the server.
    let (code, _, err) = ctl(&certs, https, &[], &timeout);
    assert_ne!(code, Some(0), "put without the server's CA succeeded: {err}");
    // Nothing was written, and the server goes on serving.
    let mut c = s.client().await;
    assert!(c.get("k", None).await.unwrap().kvs().is_empty());
    // Logged as etcd logs it (a JSON line, etcd's message and field names).
    let rejected = s.grep_log("rejected connection on client endpoint");
    let line: serde_json::Value =
        serde_json::from_str(rejected.first().unwrap_or_else(|| panic!("{}", s.log_tail())))
            .expect("a JSON line");
    assert_eq!(line["level"], "warn", "{line}");
    assert!(line["remote-addr"].as_str().is_some_and(|a| a.starts_with("127.0.0.1:")), "{line}");
    assert!(line["error"].is_string(), "{line}");
    let (code, out, err) = ctl(&certs, https, &CLIENT, &["put", "k", "v"]);
    assert_eq!((code, out.trim()), (Some(0), "OK"), "{err}");
}

/// `--trusted-ca-file` without `--client-cert-auth` requires client certificates all the
/// same, as etcd's transport does (`TLSInfo.ServerConfig`: a trusted CA file or client cert
/// auth makes it RequireAndVerifyClientCert); only the common name stays unused for auth.
#[tokio::test]
async fn a_trusted_ca_alone_requires_client_certificates_as_etcds_does() {
    let certs = Certs::new();
    let mut flags = certs.server_flags(false);
    flags.push(certs.arg("--trusted-ca-file", "ca.crt"));
    let (s, https) = start_tls(&flags).await;
    let timeout = ["--command-timeout=3s", "put", "k", "v"];
    let (code, _, err) = ctl(&certs, https, &[("--cacert", "ca.crt")], &timeout);
    assert_ne!(code, Some(0), "put without a client certificate succeeded: {err}");
    assert!(!s.grep_log("rejected connection on client endpoint").is_empty(), "{}", s.log_tail());
    let (code, out, err) = ctl(&certs, https, &CLIENT, &["put", "k", "v"]);
    assert_eq!((code, out.trim()), (Some(0), "OK"), "{err}");
}

#[tokio::test]
async fn server_tls_without_client_auth_serves_any_client() {
    let certs = Certs::new();
    let (_s, https) = start_tls(&certs.server_flags(false)).await;
    let (code, out, err) = ctl(&certs, https, &[("--cacert", "ca.crt")], &["put", "k", "v"]);
    assert_eq!((code, out.trim()), (Some(0), "OK"), "{err}");
}

/// `GET path` over TLS offering only ALPN http/1.1, with the client certificate.
async fn https_get(certs: &Certs, addr: SocketAddr, path: &str) -> String {
    https_get_checking_alpn(certs, addr, path, true).await
}

/// [`https_get`], checking that the server chose http/1.1 by ALPN only with `alpn` (etcd's
/// peer listener negotiates none).
async fn https_get_checking_alpn(
    certs: &Certs,
    addr: SocketAddr,
    path: &str,
    alpn: bool,
) -> String {
    use rustls::pki_types::pem::PemObject;
    let load = |name: &str| {
        rustls::pki_types::CertificateDer::pem_file_iter(certs.path(name))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
    };
    let mut roots = rustls::RootCertStore::empty();
    for c in load("ca.crt") {
        roots.add(c).unwrap();
    }
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(certs.path("client.key")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(load("client.crt"), key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = connector.connect(name, tcp).await.expect("TLS handshake with ALPN http/1.1");
    if alpn {
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    }
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    tls.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out).await;
    String::from_utf8(out).unwrap()
}

/// Go's HTTP/1.1 health checkers (kubeadm) offer only http/1.1: the server must accept it.
#[tokio::test]
async fn health_over_tls_with_http1_alpn() {
    let certs = Certs::new();
    let (_s, https) = start_tls(&certs.server_flags(true)).await;
    let answer = https_get(&certs, https, "/health").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with(r#"{"health":"true","reason":""}"#), "{answer}");
}

#[tokio::test]
async fn https_without_a_certificate_or_with_a_bad_one_is_refused_at_start() {
    let dir = DataDir::new();
    let certs = Certs::new();
    let ex = dir.start_expecting_failure(&["--listen-client-urls=https://127.0.0.1:0"]).await;
    assert!(
        !ex.grep("an https URL needs --cert-file and --key-file").is_empty(),
        "{}",
        ex.output()
    );
    let only_cert = certs.arg("--cert-file", "server.crt");
    let ex = dir.start_expecting_failure(&[&only_cert]).await;
    assert!(!ex.grep("--cert-file and --key-file go together").is_empty(), "{}", ex.output());
    let wrong_key = certs.arg("--key-file", "ca.crt");
    let ex = dir.start_expecting_failure(&[&only_cert, &wrong_key]).await;
    assert!(!ex.grep("no usable private key").is_empty(), "{}", ex.output());
    let key = certs.arg("--key-file", "server.key");
    let ex = dir.start_expecting_failure(&[&only_cert, &key, "--client-cert-auth"]).await;
    assert!(!ex.grep("--client-cert-auth needs --trusted-ca-file").is_empty(), "{}", ex.output());
}

/// `method path` with `body` over HTTP/1.1 to `addr`, in plaintext or (with `certs`) over TLS
/// trusting the test CA and offering ALPN http/1.1; returns the status line and the body.
async fn http1(
    addr: SocketAddr,
    certs: Option<&Certs>,
    method: &str,
    path: &str,
    body: &str,
) -> (String, String) {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut out = Vec::new();
    match certs {
        None => {
            let mut tcp = tcp;
            tcp.write_all(req.as_bytes()).await.unwrap();
            let _ = tcp.read_to_end(&mut out).await;
        }
        Some(certs) => {
            use rustls::pki_types::pem::PemObject;
            let mut roots = rustls::RootCertStore::empty();
            for c in rustls::pki_types::CertificateDer::pem_file_iter(certs.path("ca.crt")).unwrap()
            {
                roots.add(c.unwrap()).unwrap();
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(name, tcp)
                .await
                .expect("TLS handshake");
            tls.write_all(req.as_bytes()).await.unwrap();
            let _ = tls.read_to_end(&mut out).await;
        }
    }
    let out = String::from_utf8_lossy(&out).into_owned();
    let status = out.lines().next().unwrap_or_default().to_string();
    let (head, mut body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    if !head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        return (status, body.to_string());
    }
    // Large answers (Go's /debug/vars) come in chunks: `size\r\ndata\r\n`, until size 0.
    let mut whole = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        whole.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    (status, whole)
}

/// etcd's e2e `TestConnectionMultiplexing/ServerTLSAndNonTLS`: an http and an https client
/// URL on the same port are one socket serving both (etcd's cmux), gRPC and HTTP alike, for
/// etcd and mem_etcd. A client that connects and sends nothing holds up nobody.
#[tokio::test]
async fn http_and_https_on_one_port_as_etcd() {
    let Some(ctl_bin) = peer_binary("etcdctl") else { return };
    let certs = Certs::new();
    for kind in [Kind::Etcd, Kind::MemEtcd] {
        let port = free_port();
        let (http, https) =
            (format!("http://127.0.0.1:{port}"), format!("https://127.0.0.1:{port}"));
        let mut args = vec![
            format!("--listen-client-urls={http},{https}"),
            format!("--advertise-client-urls={http},{https}"),
            "--enable-grpc-gateway=true".to_string(),
        ];
        args.extend(certs.server_flags(false));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let Some(s) = Server::start(kind, &args).await else { return };
        assert_eq!(s.addr().port(), port, "{kind:?}");
        let addr = s.addr();
        // A silent client, kept open through the checks below.
        let _silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let cacert = certs.arg("--cacert", "ca.crt");
        for (i, (endpoint, tls)) in [(&http, None), (&https, Some(&certs))].into_iter().enumerate()
        {
            let key = format!("k{i}");
            let (code, out, err) = etcdctl(&ctl_bin, endpoint, &[&cacert, "put", &key, "v"], None);
            assert_eq!((code, out.trim()), (Some(0), "OK"), "{kind:?} {endpoint}: {err}");
            let (code, out, err) = etcdctl(
                &ctl_bin,
                endpoint,
                &[&cacert, "get", "k", "--prefix", "--keys-only"],
                None,
            );
            assert_eq!(code, Some(0), "{kind:?} {endpoint}: {err}");
            assert!(out.contains(&key), "{kind:?} {endpoint}: {out}");
            let started = std::time::Instant::now();
            let (status, body) =
                http1(addr, tls, "POST", "/v3/kv/range", r#"{"key":"azA="}"#).await;
            assert!(status.starts_with("HTTP/1.1 200"), "{kind:?} {endpoint}: {status} {body}");
            let range: serde_json::Value = serde_json::from_str(&body)
                .unwrap_or_else(|e| panic!("{kind:?} {endpoint}: {e}: {body}"));
            assert_eq!(range["kvs"][0]["value"], "dg==", "{kind:?} {endpoint}: {body}");
            let (status, body) = http1(addr, tls, "GET", "/health", "").await;
            assert!(status.starts_with("HTTP/1.1 200"), "{kind:?} {endpoint}: {status}");
            assert_eq!(body, r#"{"health":"true","reason":""}"#, "{kind:?} {endpoint}");
            let (status, body) = http1(addr, tls, "GET", "/metrics", "").await;
            assert!(status.starts_with("HTTP/1.1 200"), "{kind:?} {endpoint}: {status}");
            assert!(body.contains("etcd_server_has_leader 1"), "{kind:?} {endpoint}");
            let (status, body) = http1(addr, tls, "GET", "/version", "").await;
            assert!(status.starts_with("HTTP/1.1 200"), "{kind:?} {endpoint}: {status}");
            assert!(body.contains("etcdcluster"), "{kind:?} {endpoint}: {body}");
            let (status, body) = http1(addr, tls, "GET", "/debug/vars", "").await;
            assert!(status.starts_with("HTTP/1.1 200"), "{kind:?} {endpoint}: {status}");
            serde_json::from_str::<serde_json::Value>(&body)
                .unwrap_or_else(|e| panic!("{kind:?} {endpoint} /debug/vars: {e}"));
            assert!(
                started.elapsed() < std::time::Duration::from_secs(5),
                "{kind:?} {endpoint}: the HTTP requests took {:?}",
                started.elapsed()
            );
        }
    }
}

/// etcd refuses an address named by both --listen-client-urls and --listen-client-http-urls
/// (whatever the schemes), in these words; so does mem_etcd.
#[tokio::test]
async fn client_and_client_http_urls_on_one_address_are_refused_as_etcd() {
    if peer_binary("etcd").is_none() {
        return;
    }
    let port = free_port();
    let client = format!("--listen-client-urls=http://127.0.0.1:{port}");
    let http = format!("--listen-client-http-urls=http://127.0.0.1:{port}");
    let want = format!(
        "cannot bind both --listen-client-urls and --listen-client-http-urls on the same url \
         http://127.0.0.1:{port}"
    );
    for kind in [Kind::Etcd, Kind::MemEtcd] {
        let dir = DataDir::new();
        let ex = dir
            .start_kind_expecting_failure(
                kind,
                &[&client, &http],
                std::time::Duration::from_secs(20),
            )
            .await;
        assert!(!ex.status.success(), "{kind:?}: {}", ex.output());
        assert!(!ex.grep(&want).is_empty(), "{kind:?}: {}", ex.output());
    }
}

/// `unixs://` client URLs: TLS over a unix socket, with etcd's flags. etcdctl reaches the
/// member through the socket with the CA and its client certificate (etcd's client checks the
/// server's certificate for the host part of the socket's file name, so the socket is named
/// `localhost:PORT`, as etcd's tests name theirs); without a client certificate, or in plain
/// text (`unix://` on the same socket), it does not.
#[tokio::test]
async fn etcdctl_works_over_a_unixs_socket() {
    let Some(bin) = peer_binary("etcdctl") else { return };
    let certs = Certs::new();
    let socket = certs.dir.path().join(format!("localhost:{}", free_port()));
    let url = format!("unixs://{}", socket.display());
    let mut args = vec![format!("--listen-client-urls=http://127.0.0.1:0,{url}")];
    args.extend(certs.server_flags(true));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = Server::start(Kind::MemEtcd, &args).await.expect("mem_etcd");
    wait_until("the unixs listener's ready line", std::time::Duration::from_secs(10), || {
        let ready = s.grep_log("ready to serve client requests");
        std::future::ready(ready.iter().any(|l| l.contains("unixs://")))
    })
    .await;
    let ctl = |endpoint: &str, auth: &[(&str, &str)], args: &[&str]| {
        let mut all: Vec<String> = auth.iter().map(|(f, n)| certs.arg(f, n)).collect();
        all.extend(args.iter().map(|a| a.to_string()));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        etcdctl(&bin, endpoint, &all, None)
    };
    let (code, out, err) = ctl(&url, &CLIENT, &["put", "k", "over unixs"]);
    assert_eq!((code, out.trim()), (Some(0), "OK"), "{err}");
    let (code, out, err) = ctl(&url, &CLIENT, &["get", "k", "--print-value-only"]);
    assert_eq!((code, out.trim()), (Some(0), "over unixs"), "{err}");
    let timeout = ["--command-timeout=2s", "put", "k", "v"];
    let (code, _, err) = ctl(&url, &[("--cacert", "ca.crt")], &timeout);
    assert_ne!(code, Some(0), "put without a client certificate succeeded: {err}");
    let plain = format!("unix://{}", socket.display());
    let (code, _, err) = ctl(&plain, &[], &timeout);
    assert_ne!(code, Some(0), "put in plain text on the unixs socket succeeded: {err}");
    // The plain listener beside it still serves.
    let mut c = s.client().await;
    let got = c.get("k", None).await.unwrap();
    assert_eq!(got.kvs()[0].value(), b"over unixs");
}

/// `GET path` over TLS to `addr` without a client certificate; whatever came back (nothing
/// when the server rejected the handshake).
async fn https_get_without_certificate(certs: &Certs, addr: SocketAddr, path: &str) -> String {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(certs.path("ca.crt")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    // TLS 1.3: the client's side of the handshake ends before the server checks its
    // certificate, so the refusal may come as the first read fails.
    let Ok(mut tls) = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await
    else {
        return String::new();
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let _ = tls.write_all(req.as_bytes()).await;
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// What a member alone with peer TLS does on its peer URL: (a peer without a certificate
/// gets an answer, the rejection's log line with its fields, `/version`'s status line and
/// keys, `/members` as JSON with the client URLs left out).
async fn alone_peer_url(kind: Kind, certs: &Certs, port: u16) -> Option<Vec<String>> {
    let peer = format!("https://127.0.0.1:{port}");
    let args = [
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster=it={peer}"),
        certs.arg("--peer-cert-file", "server.crt"),
        certs.arg("--peer-key-file", "server.key"),
        certs.arg("--peer-trusted-ca-file", "ca.crt"),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = Server::start(kind, &args).await?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut out = Vec::new();
    let refused = https_get_without_certificate(certs, addr, "/members").await;
    out.push(format!("answered without a certificate: {}", !refused.is_empty()));
    let what = "a rejected connection logged";
    let line = wait_until(what, std::time::Duration::from_secs(10), || {
        std::future::ready(s.grep_log("rejected connection on peer endpoint").first().cloned())
    })
    .await;
    let line = serde_json::from_str::<serde_json::Value>(&line).expect("a JSON line");
    out.push(format!(
        "rejection logged: level {}, remote-addr on 127.0.0.1: {}, server-name {}, error: {}",
        line["level"],
        line["remote-addr"].as_str().is_some_and(|a| a.starts_with("127.0.0.1:")),
        line["server-name"],
        line["error"].is_string()
    ));
    let version = https_get_checking_alpn(certs, addr, "/version", false).await;
    let (head, body) = version.split_once("\r\n\r\n").unwrap_or((&version, ""));
    let body: serde_json::Value = serde_json::from_str(body.trim()).unwrap_or_default();
    let keys: Vec<&String> = body.as_object().map(|o| o.keys().collect()).unwrap_or_default();
    out.push(format!("/version: {} {keys:?}", head.lines().next().unwrap_or_default()));
    let members = https_get_checking_alpn(certs, addr, "/members", false).await;
    let (head, body) = members.split_once("\r\n\r\n").unwrap_or((&members, ""));
    let mut list: serde_json::Value = serde_json::from_str(body.trim()).unwrap_or_default();
    for m in list.as_array_mut().into_iter().flatten() {
        let urls = m.as_object_mut().and_then(|o| o.remove("clientURLs"));
        assert!(urls.is_some_and(|u| u.is_array()), "{m}");
    }
    out.push(format!("/members: {} {list}", head.lines().next().unwrap_or_default()));
    let cluster_id =
        head.lines().any(|l| l.to_ascii_lowercase().starts_with("x-etcd-cluster-id: "));
    out.push(format!("/members names the cluster: {cluster_id}"));
    Some(out)
}

/// etcd's e2e `TestConnectionRejectMessage` (`reject_peer_connection`) and more: a member
/// alone listens on its peer URL from the start, as etcd's does. With peer TLS a client
/// without a certificate has its handshake rejected, logged as etcd logs it; one with a
/// certificate reads etcd's peer `/version` and `/members`. Compared with etcd.
#[tokio::test]
async fn a_member_alone_serves_its_peer_url_with_tls_as_etcds_does() {
    let certs = Certs::new();
    let port = free_port();
    let mem = alone_peer_url(Kind::MemEtcd, &certs, port).await.expect("mem_etcd");
    assert!(mem.iter().any(|l| l.contains("HTTP/1.1 200")), "{mem:#?}");
    let Some(etcd) = alone_peer_url(Kind::Etcd, &certs, port).await else { return };
    assert_eq!(mem, etcd, "mem_etcd (left) and etcd (right) differ");
}
