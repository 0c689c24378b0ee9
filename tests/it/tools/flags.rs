//! Every etcd 3.6 flag accepted (issue 25): a manifest written for etcd starts mem_etcd. Go's
//! flag syntax and repeat rule, `ETCD_*` variables, `--config-file`, `--version`, the gRPC health
//! service, and the flags implemented here: TLS versions and cipher suites, `--auto-tls`,
//! `--client-crl-file`, `--listen-client-http-urls`, and a self-signed CA as a client certificate
//! (compared with etcd 3.6.16).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::security::tls::{Certs, start_tls};
use crate::support::*;
use crate::tools::etcdctl::etcdctl;

fn mem_etcd_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mem_etcd"))
}

/// The names of the members a server lists.
async fn member_names(s: &Server) -> Vec<String> {
    let mut c = s.client().await;
    let list = c.member_list().await.expect("member list");
    list.members().iter().map(|m| m.name().to_string()).collect()
}

/// The address a log line with `marker` names (waits for it up to 10 s).
async fn logged_address(s: &Server, marker: &str) -> SocketAddr {
    wait_until(&format!("a {marker:?} line"), Duration::from_secs(10), || {
        std::future::ready(s.grep_log(marker).iter().find_map(|l| parse_address(l)))
    })
    .await
}

/// A plain HTTP/1.1 `GET path`; the whole answer.
async fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether a gRPC Status call to `addr` (plain http) succeeds within 3 s.
async fn grpc_answers(addr: SocketAddr) -> bool {
    let call = async {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .ok()?;
        let mut m = pb::maintenance_client::MaintenanceClient::new(ch);
        m.status(pb::StatusRequest {}).await.ok()
    };
    tokio::time::timeout(Duration::from_secs(3), call).await.ok().flatten().is_some()
}

/// The flags issue 25 lists (kubeadm's static pod passes the first), each repeated one twice
/// (the last must win), all at once: the member serves, with the last --name.
#[tokio::test]
async fn every_listed_flag_is_accepted_and_the_last_of_a_repeat_wins() {
    let certs = Certs::new();
    let crl = certs.path("empty.crl");
    std::fs::write(&crl, b"").unwrap();
    let flags: Vec<String> = [
        "--name=first",
        "--name=second",
        "--feature-gates=InitialCorruptCheck=true",
        "--auto-tls",
        "--peer-auto-tls",
        "--listen-client-http-urls=http://127.0.0.1:0",
        "--max-concurrent-streams=1000",
        "--cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        "--compaction-batch-limit=1000",
        "--corrupt-check-time=5m",
        "--tls-min-version=TLS1.2",
        "--tls-max-version=TLS1.3",
        "--peer-cert-allowed-cn=member",
        "--logger=zap",
        "--log-outputs=stderr",
        "--enable-pprof",
        "--max-snapshots=5",
        "--max-wals=5",
        "--unsafe-no-fsync",
        "--backend-batch-interval=10ms",
        "--snapshot-catchup-entries=5000",
        "--experimental-compaction-batch-limit=1000",
        "--initial-cluster-token=one",
        "--initial-cluster-token=two",
        "--snapshot-count=100",
        "--snapshot-count=10000",
        "--quota-backend-bytes=1000",
        "--quota-backend-bytes=0",
        "--client-cert-auth=true",
        "--client-cert-auth=false",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        certs.arg("--client-crl-file", "empty.crl"),
        certs.arg("--peer-client-cert-file", "client.crt"),
        certs.arg("--peer-client-key-file", "client.key"),
    ])
    .collect();
    let (s, https) = start_tls(&flags).await;
    assert_eq!(member_names(&s).await, ["second"]);
    // --quota-backend-bytes=1000 would refuse this put; the later 0 (2 GiB) does not.
    let mut c = s.client().await;
    c.put("k", vec![b'v'; 4096], None).await.expect("put under the last quota");
    // --client-cert-auth=false won: a client without a certificate is served over https
    // (HTTP answers are on the --listen-client-http-urls URL, so the client URL says 404).
    let answer = https_get_any(https, "/health").await;
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    let http = logged_address(&s, "client HTTP requests").await;
    assert!(http_get(http, "/health").await.starts_with("HTTP/1.1 200"));
    let no_effect = s.grep_log("no effect in mem_etcd");
    assert_eq!(no_effect.len(), 1, "{}", s.log_tail());
    for f in ["--max-wals", "--max-snapshots", "--backend-batch-interval", "--enable-pprof"] {
        assert!(no_effect[0].contains(f), "{f} not in {}", no_effect[0]);
    }
    // It bounds the Raft log held in memory (a cluster member's).
    assert!(!no_effect[0].contains("--snapshot-count"), "{}", no_effect[0]);
}

/// A rustls client that takes any server certificate (auto TLS is self-signed), offering ALPN
/// http/1.1; returns the answer to `GET path` and checks nothing else.
async fn https_get_any(addr: SocketAddr, path: &str) -> String {
    let (config, _) = any_server_client(None, None);
    let (mut tls, _) = connect(config, addr).await.expect("TLS handshake");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    tls.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Accepts any server certificate, remembering it.
#[derive(Debug)]
struct AnyServer {
    seen: std::sync::Mutex<Option<Vec<u8>>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        *self.seen.lock().unwrap() = Some(end_entity.to_vec());
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            m,
            c,
            d,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            m,
            c,
            d,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// A client config offering `versions` (all by default) and `suites` (rustls' by default),
/// taking any server certificate.
fn any_server_client(
    versions: Option<&[&'static rustls::SupportedProtocolVersion]>,
    suites: Option<Vec<rustls::SupportedCipherSuite>>,
) -> (Arc<rustls::ClientConfig>, Arc<AnyServer>) {
    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(s) = suites {
        provider.cipher_suites = s;
    }
    let provider = Arc::new(provider);
    let verifier = Arc::new(AnyServer { seen: Default::default(), provider: provider.clone() });
    let versions = versions.unwrap_or(rustls::ALL_VERSIONS);
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    (Arc::new(config), verifier)
}

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

async fn connect(
    config: Arc<rustls::ClientConfig>,
    addr: SocketAddr,
) -> std::io::Result<(Tls, ())> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = tokio_rustls::TlsConnector::from(config).connect(name, tcp).await?;
    Ok((tls, ()))
}

/// A mem_etcd process started with environment variables (the harness passes none).
struct EnvServer {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for EnvServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts mem_etcd with `env` and `args` (and a data dir of its own) and waits until gRPC
/// answers.
async fn start_with_env(env: &[(&str, &str)], args: &[&str]) -> EnvServer {
    let dir = tempfile::tempdir().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut cmd = Command::new(mem_etcd_bin());
    cmd.current_dir(dir.path())
        .arg(format!("--data-dir={}", dir.path().display()))
        .arg(format!("--listen-client-urls=http://{addr}"))
        // Not etcd's default peer URL (localhost:2380), which tests side by side would share.
        .arg("--listen-peer-urls=http://127.0.0.1:0")
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = cmd.spawn().expect("spawn mem_etcd");
    let mut s = EnvServer { child, addr, _dir: dir };
    wait_until("mem_etcd to answer", Duration::from_secs(20), || {
        if let Some(status) = s.child.try_wait().unwrap() {
            panic!("mem_etcd {args:?} with {env:?} exited: {status}");
        }
        grpc_answers(addr)
    })
    .await;
    s
}

async fn names_at(addr: SocketAddr) -> Vec<String> {
    let mut c = etcd_client::Client::connect([format!("http://{addr}")], None).await.unwrap();
    let list = c.member_list().await.unwrap();
    list.members().iter().map(|m| m.name().to_string()).collect()
}

/// `ETCD_<FLAG>` variables set flags the command line does not; the command line wins; Go's
/// `-flag` syntax; the deprecated flag of a feature gate through its variable.
#[tokio::test]
async fn environment_variables_and_go_flag_syntax() {
    let env = [
        ("ETCD_NAME", "from-env"),
        ("ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK", "true"),
        ("ETCD_PEER_CERT_ALLOWED_HOSTNAME", "localhost"),
        ("ETCD_MAX_WALS", "3"),
    ];
    let s = start_with_env(&env, &[]).await;
    assert_eq!(names_at(s.addr).await, ["from-env"]);
    drop(s);
    let s = start_with_env(&env, &["-name", "from-flag"]).await;
    assert_eq!(names_at(s.addr).await, ["from-flag"]);
    drop(s);
    // A bad value in a variable is refused like one on the command line.
    let out = Command::new(mem_etcd_bin()).env("ETCD_FEATURE_GATES", "Nope=true").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unrecognized feature gate: Nope"), "{err}");
}

/// Unknown gate names, malformed values and a `--v2-deprecation` stage etcd does not have are
/// refused with etcd's words and exit status; so are both spellings of the unary request
/// warning flag together (etcd words it in a log line).
#[test]
fn bad_flag_values_are_refused_as_etcd_refuses_them() {
    let etcd = peer_binary("etcd").expect("etcd peer");
    let both =
        ["--warning-unary-request-duration=1s", "--experimental-warning-unary-request-duration=1s"];
    let dir = tempfile::tempdir().unwrap();
    let run = |bin: &Path| {
        Command::new(bin).args(both).arg("--data-dir").arg(dir.path().join("d")).output().unwrap()
    };
    let (ours, theirs) = (run(&mem_etcd_bin()), run(&etcd));
    assert_eq!(ours.status.code(), theirs.status.code());
    let want = "both --experimental-warning-unary-request-duration and \
                --warning-unary-request-duration flags are set. Use only \
                --warning-unary-request-duration";
    for o in [&ours, &theirs] {
        assert!(String::from_utf8_lossy(&o.stderr).contains(want), "{o:?}");
    }
    for arg in [
        "--feature-gates=Foo=true",
        "--feature-gates=InitialCorruptCheck",
        "--v2-deprecation=not-yet",
    ] {
        let ours = Command::new(mem_etcd_bin()).arg(arg).output().unwrap();
        let theirs = Command::new(&etcd).arg(arg).output().unwrap();
        let first = |o: &std::process::Output| {
            String::from_utf8_lossy(&o.stderr).lines().next().unwrap_or_default().to_string()
        };
        assert_eq!(first(&ours), first(&theirs), "{arg}");
        assert_eq!(ours.status.code(), theirs.status.code(), "{arg}");
    }
}

/// `--version`: etcd's lines, the same labels in the same order, the emulated version on the
/// first, then mem_etcd's own.
#[test]
fn version_prints_etcds_lines() {
    let etcd = peer_binary("etcd").expect("etcd peer");
    let run = |bin: &Path, args: &[&str]| {
        let out = Command::new(bin).args(args).output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let theirs = run(&etcd, &["--version"]);
    let ours = run(&mem_etcd_bin(), &["--version"]);
    let label = |l: &str| l.split_once(": ").map(|(k, _)| k.to_string()).expect("label: value");
    let (t, o): (Vec<&str>, Vec<&str>) = (theirs.lines().collect(), ours.lines().collect());
    assert_eq!(o.len(), t.len() + 1, "{ours}");
    for (a, b) in o.iter().zip(&t) {
        assert_eq!(label(a), label(b));
    }
    assert_eq!(o[0], t[0], "the default emulated version is the peer's");
    assert_eq!(o[3], t[3], "OS/arch");
    assert!(o[4].starts_with("mem_etcd Version: "), "{ours}");
    let emulated = run(&mem_etcd_bin(), &["-version", "--emulated-version=3.6.10"]);
    assert_eq!(emulated.lines().next(), Some("etcd Version: 3.6.10"));
}

async fn health(addr: SocketAddr, service: &str) -> (Result<i32, (tonic::Code, String)>, i32) {
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = HealthClient::new(ch);
    let req = || HealthCheckRequest { service: service.to_string() };
    let check = h
        .check(req())
        .await
        .map(|r| r.into_inner().status)
        .map_err(|e| (e.code(), e.message().to_string()));
    let mut stream = h.watch(req()).await.expect("watch").into_inner();
    let first = tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .expect("a first watch message")
        .expect("watch message")
        .expect("watch not ended");
    (check, first.status)
}

/// grpc.health.v1.Health answers as etcd's: SERVING for the server, NOT_FOUND "unknown service"
/// for any other name (and SERVICE_UNKNOWN on Watch).
#[tokio::test]
async fn grpc_health_service_answers_as_etcd() {
    let ours = Server::start(Kind::MemEtcd, &[]).await.expect("mem_etcd");
    let theirs = Server::start(Kind::Etcd, &[]).await.expect("etcd peer");
    for service in ["", "etcdserverpb.KV", "nope"] {
        let a = health(ours.addr(), service).await;
        let b = health(theirs.addr(), service).await;
        assert_eq!(a, b, "service {service:?}");
    }
    let (check, watch) = health(ours.addr(), "").await;
    assert_eq!((check, watch), (Ok(ServingStatus::Serving as i32), ServingStatus::Serving as i32));
}

/// --tls-min-version, --tls-max-version and --cipher-suites, seen from a client.
#[tokio::test]
async fn tls_versions_and_cipher_suites_restrict_clients() {
    use rustls::crypto::ring::cipher_suite as cs;
    let certs = Certs::new();
    let mut flags = certs.server_flags(false);
    flags.push("--tls-min-version=TLS1.3".into());
    let (_s, https) = start_tls(&flags).await;
    let (tls12, _) = any_server_client(Some(&[&rustls::version::TLS12]), None);
    assert!(connect(tls12, https).await.is_err(), "a TLS 1.2 client got through");
    let (tls13, _) = any_server_client(Some(&[&rustls::version::TLS13]), None);
    let (c, _) = connect(tls13, https).await.expect("TLS 1.3");
    assert_eq!(c.get_ref().1.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_3));

    // rcgen's keys are ECDSA P-256: ECDSA suites.
    let mut flags = certs.server_flags(false);
    flags.push("--tls-max-version=TLS1.2".into());
    flags.push("--cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384".into());
    let (_s, https) = start_tls(&flags).await;
    let (tls13, _) = any_server_client(Some(&[&rustls::version::TLS13]), None);
    assert!(connect(tls13, https).await.is_err(), "a TLS 1.3 client got through");
    let other = vec![cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256];
    let (c, _) = any_server_client(Some(&[&rustls::version::TLS12]), Some(other));
    assert!(connect(c, https).await.is_err(), "a suite outside --cipher-suites got through");
    let listed = vec![cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384];
    let (c, _) = any_server_client(Some(&[&rustls::version::TLS12]), Some(listed));
    let (c, _) = connect(c, https).await.expect("the listed suite");
    assert_eq!(
        c.get_ref().1.negotiated_cipher_suite().map(|s| s.suite()),
        Some(rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384)
    );

    // What etcd refuses, in its words; a suite rustls lacks is refused too.
    let dir = DataDir::new();
    let refusals: [(&[&str], &str); 4] = [
        (
            &["--tls-min-version=TLS1.1"],
            "unexpected TLS version \"TLS1.1\" (must be one of: TLS1.2, TLS1.3)",
        ),
        (
            &["--tls-min-version=TLS1.3", "--tls-max-version=TLS1.2"],
            "min version (TLS1.3) is greater than max version (TLS1.2)",
        ),
        (
            &["--tls-min-version=TLS1.3", "--cipher-suites=TLS_AES_128_GCM_SHA256"],
            "cipher suites cannot be configured when only TLS1.3 is enabled",
        ),
        (&["--cipher-suites=TLS_FOO"], "unexpected TLS cipher suite \"TLS_FOO\""),
    ];
    for (args, message) in refusals {
        let ex = dir.start_expecting_failure(args).await;
        assert!(!ex.grep(message).is_empty(), "{args:?}: {}", ex.output());
    }
    let ex = dir.start_expecting_failure(&["--cipher-suites=TLS_RSA_WITH_AES_128_CBC_SHA"]).await;
    assert!(!ex.grep("is not supported by mem_etcd").is_empty(), "{}", ex.output());
}

/// --auto-tls: https with a self-signed certificate made at start in <data-dir>/fixtures/client,
/// and the same one after a restart.
#[tokio::test]
async fn auto_tls_serves_https_with_a_self_signed_certificate() {
    let dir = DataDir::new();
    let args = ["--listen-client-urls=http://127.0.0.1:0,https://127.0.0.1:0", "--auto-tls"];
    let s = dir.start(&args).await;
    let https = second_listener(&s).await;
    let (config, seen) = any_server_client(None, None);
    connect(config, https).await.expect("handshake");
    let served = seen.seen.lock().unwrap().clone().expect("a certificate");
    let file = dir.path().join("fixtures/client/cert.pem");
    use rustls::pki_types::pem::PemObject;
    let on_disk =
        rustls::pki_types::CertificateDer::from_pem_file(&file).expect("fixtures/client/cert.pem");
    assert_eq!(served, on_disk.to_vec());
    // Self-signed: it verifies against itself as the only root.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(on_disk.clone()).unwrap();
    let answer = https_get_any(https, "/health").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    s.stop(Duration::from_secs(10)).await;
    let s = dir.start(&args).await;
    let https = second_listener(&s).await;
    let (config, seen) = any_server_client(None, None);
    connect(config, https).await.expect("handshake after restart");
    assert_eq!(seen.seen.lock().unwrap().clone(), Some(on_disk.to_vec()), "reused");
}

/// The address of a client listener the server logged besides its first (waits up to 10 s:
/// the harness returns once the first answers; the second's line may still be on its way
/// through the log reader).
pub async fn second_listener(s: &Server) -> SocketAddr {
    wait_until("a second listener's ready line", Duration::from_secs(10), || {
        let lines = s.grep_log("ready to serve client requests");
        std::future::ready(lines.iter().filter_map(|l| parse_address(l)).find(|a| *a != s.addr()))
    })
    .await
}

/// --config-file: etcd's YAML, whose settings start the member; the command line is ignored.
#[tokio::test]
async fn config_file_starts_a_member_with_its_settings() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "# as etcd's etcd.conf.yml.sample writes it\n\
         name: 'from-file'\n\
         data-dir: {}\n\
         listen-client-urls: http://127.0.0.1:0\n\
         max-txn-ops: 3\n\
         log-level: info\n\
         log-outputs: [stderr]\n\
         feature-gates: InitialCorruptCheck=true\n\
         snapshot-count: 10000\n\
         client-transport-security:\n  client-cert-auth: false\n  auto-tls: false\n\
         peer-transport-security:\n  client-cert-auth: false\n  allowed-cn: member\n\
         unknown-key: 1\n",
        dir.path().join("data").display()
    );
    let file = dir.path().join("etcd.yaml");
    std::fs::write(&file, yaml).unwrap();
    let arg = format!("--config-file={}", file.display());
    let s = Server::start_without_defaults(
        Kind::MemEtcd,
        &[&arg, "--name=ignored", "--max-txn-ops=128"],
    )
    .await;
    assert_eq!(member_names(&s).await, ["from-file"]);
    let mut c = s.client().await;
    let ops: Vec<etcd_client::TxnOp> =
        (0..4).map(|i| etcd_client::TxnOp::put(format!("k{i}"), "v", None)).collect();
    let err =
        c.txn(etcd_client::Txn::new().and_then(ops)).await.expect_err("4 ops > max-txn-ops 3");
    assert_eq!(status_of(&err).1, "etcdserver: too many operations in txn request");
    assert!(!s.grep_log("other configuration command line flags").is_empty());
}

/// --listen-client-http-urls: /health and the HTTP endpoints there, no gRPC; the client URLs
/// serve gRPC only.
#[tokio::test]
async fn listen_client_http_urls_serve_http_and_not_grpc() {
    let s = Server::start(Kind::MemEtcd, &["--listen-client-http-urls=http://127.0.0.1:0"])
        .await
        .expect("mem_etcd");
    let http = logged_address(&s, "client HTTP requests").await;
    let health = http_get(http, "/health").await;
    assert!(
        health.starts_with("HTTP/1.1 200") && health.ends_with(r#"{"health":"true","reason":""}"#),
        "{health}"
    );
    assert!(http_get(http, "/version").await.contains("\"etcdserver\""));
    assert!(!grpc_answers(http).await, "gRPC answered on an HTTP-only URL");
    assert!(grpc_answers(s.addr()).await);
    let on_client = http_get(s.addr(), "/health").await;
    assert!(!on_client.starts_with("HTTP/1.1 200"), "{on_client}");
}

/// Certificates for the CA-as-client and CRL tests: a server CA with a server certificate, a
/// self-signed CA used as a client certificate, two client certificates of the server CA (the
/// second revoked by `revoked.crl`), and `trusted.crt` holding both CAs.
fn ca_client_certs() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, pem: String| std::fs::write(dir.path().join(name), pem).unwrap();
    let ca = |cn: &str| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, cn);
        let cert = p.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem(), Issuer::new(p, key))
    };
    let (server_ca, _, issuer) = ca("server CA");
    let (self_ca, self_key, _) = ca("selfca");
    write("self.crt", self_ca.clone());
    write("self.key", self_key);
    write("trusted.crt", format!("{server_ca}{self_ca}"));
    let leaf = |cn: &str, sans: &[&str], serial: u64| {
        let key = KeyPair::generate().unwrap();
        let mut p =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.serial_number = Some(serial.into());
        let cert = p.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (c, k) = leaf("mem_etcd", &["127.0.0.1", "localhost"], 1);
    write("server.crt", c);
    write("server.key", k);
    let (c, k) = leaf("good", &[], 2);
    write("good.crt", c);
    write("good.key", k);
    let (c, k) = leaf("revoked", &[], 3);
    write("revoked.crt", c);
    write("revoked.key", k);
    let crl = rcgen::CertificateRevocationListParams {
        this_update: rcgen::date_time_ymd(2024, 1, 1),
        next_update: rcgen::date_time_ymd(2099, 1, 1),
        crl_number: 1u64.into(),
        issuing_distribution_point: None,
        revoked_certs: vec![rcgen::RevokedCertParams {
            serial_number: 3u64.into(),
            revocation_time: rcgen::date_time_ymd(2024, 1, 1),
            reason_code: Some(rcgen::RevocationReason::KeyCompromise),
            invalidity_date: None,
        }],
        key_identifier_method: rcgen::KeyIdMethod::Sha256,
    };
    // DER: etcd (Go's x509.ParseRevocationList) reads no PEM.
    let crl = crl.signed_by(&issuer).unwrap();
    std::fs::write(dir.path().join("revoked.crl"), crl.der()).unwrap();
    dir
}

/// etcdctl over https with the CA of `dir` and a client certificate; the exit code and output.
fn ctl_with(dir: &Path, addr: SocketAddr, cert: &str, args: &[&str]) -> (Option<i32>, String) {
    let bin = peer_binary("etcdctl").expect("etcdctl peer");
    let p = |n: &str| dir.join(n).display().to_string();
    let mut all = vec![
        format!("--cacert={}", p("trusted.crt")),
        format!("--cert={}", p(&format!("{cert}.crt"))),
        format!("--key={}", p(&format!("{cert}.key"))),
        "--command-timeout=5s".to_string(),
    ];
    all.extend(args.iter().map(|a| a.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let (code, out, err) = etcdctl(&bin, &format!("https://{addr}"), &all, None);
    (code, format!("{out}{err}"))
}

/// The https address of a server started with a plain and an https client URL.
async fn https_of(s: &Server, kind: Kind) -> SocketAddr {
    match kind {
        Kind::MemEtcd => second_listener(s).await,
        Kind::Etcd => logged_address(s, "serving client traffic securely").await,
    }
}

/// A self-signed CA certificate listed in --trusted-ca-file, used as the client certificate:
/// etcd (Go's verifier) accepts it; so does mem_etcd. A certificate --client-crl-file revokes
/// is refused by both.
#[tokio::test]
async fn a_trusted_self_signed_ca_as_client_certificate_and_the_crl() {
    let certs = ca_client_certs();
    let p = |n: &str| certs.path().join(n).display().to_string();
    for kind in [Kind::MemEtcd, Kind::Etcd] {
        let flags = [
            "--listen-client-urls=http://127.0.0.1:0,https://127.0.0.1:0".to_string(),
            "--advertise-client-urls=http://127.0.0.1:0".to_string(),
            format!("--cert-file={}", p("server.crt")),
            format!("--key-file={}", p("server.key")),
            format!("--trusted-ca-file={}", p("trusted.crt")),
            "--client-cert-auth".to_string(),
            format!("--client-crl-file={}", p("revoked.crl")),
        ];
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let s = Server::start(kind, &flags).await.expect("server");
        let https = https_of(&s, kind).await;
        let (code, out) = ctl_with(certs.path(), https, "self", &["put", "k", "v"]);
        assert_eq!(code, Some(0), "{kind:?}: the self-signed CA as client certificate: {out}");
        let (code, out) =
            ctl_with(certs.path(), https, "good", &["get", "k", "--print-value-only"]);
        assert_eq!((code, out.trim()), (Some(0), "v"), "{kind:?}");
        let (code, out) = ctl_with(certs.path(), https, "revoked", &["get", "k"]);
        assert_ne!(code, Some(0), "{kind:?}: a revoked certificate got through: {out}");
    }
}

/// A deprecated flag gets etcd's warning, word for word, at start.
#[tokio::test]
async fn deprecated_flags_get_etcds_warning() {
    let s = Server::start(Kind::MemEtcd, &["--max-snapshots=10", "--v2-deprecation=gone"])
        .await
        .unwrap();
    for warning in [
        "--max-snapshots is deprecated in 3.6 and will be decommissioned in 3.8.",
        "--v2-deprecation is deprecated and scheduled for removal in v3.8. The default value is \
         enforced, ignoring user input.",
    ] {
        assert!(!s.grep_log(warning).is_empty(), "{warning}\n{}", s.log_tail());
    }
}

/// A network namespace of the test's own, deleted when dropped: a veth pair inside it (both
/// ends), `10.200.0.2/24` on one, and a default route via `10.200.0.1` (no such host: nothing
/// is sent anywhere). It gives a server a default host without touching the machine's network.
struct Netns(String);

impl Netns {
    fn new() -> Netns {
        let name = format!("mem-etcd-it-{}", std::process::id());
        let ns = Netns(name.clone());
        for args in [
            vec!["netns", "add", &name],
            vec!["-n", &name, "link", "add", "v0", "type", "veth", "peer", "name", "v1"],
            vec!["-n", &name, "addr", "add", "10.200.0.2/24", "dev", "v0"],
            vec!["-n", &name, "link", "set", "v0", "up"],
            vec!["-n", &name, "link", "set", "v1", "up"],
            vec!["-n", &name, "link", "set", "lo", "up"],
            vec!["-n", &name, "route", "add", "default", "via", "10.200.0.1", "dev", "v0"],
        ] {
            let out = Command::new("ip").args(&args).output().expect("run ip (iproute2)");
            assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        ns
    }

    fn command(&self, bin: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0]).arg(bin);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// (member id, cluster id, peer URLs) of a member alone started in `ns` with a peer listener
/// on 0.0.0.0 and the default advertised peer URL.
async fn alone_on_any_address(ns: &Netns, bin: &Path, etcdctl: &Path) -> (u64, u64, Vec<String>) {
    let dir = DataDir::new();
    let mut server = ns
        .command(bin)
        .args(["--name=dh", "--listen-peer-urls=http://0.0.0.0:2380"])
        .args(["--listen-client-urls=http://127.0.0.1:2379"])
        .args(["--advertise-client-urls=http://127.0.0.1:2379"])
        .arg(format!("--data-dir={}", dir.path().display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the server in the namespace");
    let listed = wait_until("the member list in the namespace", Duration::from_secs(20), || {
        let out = ns
            .command(etcdctl)
            .args(["--endpoints=127.0.0.1:2379", "member", "list", "-w", "json"])
            .output()
            .expect("etcdctl");
        let listed = match out.status.success() {
            true => Ok(out.stdout),
            false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        };
        std::future::ready(listed)
    })
    .await;
    let _ = server.kill();
    let _ = server.wait();
    let v: serde_json::Value = serde_json::from_slice(&listed).expect("json");
    let urls = v["members"][0]["peerURLs"].as_array().expect("peerURLs");
    (
        v["header"]["member_id"].as_u64().expect("member_id"),
        v["header"]["cluster_id"].as_u64().expect("cluster_id"),
        urls.iter().map(|u| u.as_str().unwrap().to_string()).collect(),
    )
}

/// etcd's default-host rewrite: a member alone listening for peers on 0.0.0.0 with the default
/// advertised peer URL advertises the machine's default host instead of `localhost`, and its
/// ids follow, as etcd's. Run in a network namespace of the test's own (with a default route
/// to nowhere), so that the listeners on 0.0.0.0 face nothing but that namespace.
#[tokio::test]
async fn a_default_advertised_url_on_any_address_takes_the_default_host_as_etcds_does() {
    let Some(etcd) = peer_binary("etcd") else { return };
    let etcdctl = peer_binary("etcdctl").expect("etcdctl peer");
    let ns = Netns::new();
    let theirs = alone_on_any_address(&ns, &etcd, &etcdctl).await;
    let ours = alone_on_any_address(&ns, &mem_etcd_bin(), &etcdctl).await;
    assert_eq!(theirs.2, ["http://10.200.0.2:2380"], "etcd's");
    assert_eq!(ours, theirs, "mem_etcd's ids and peer URLs against etcd's");
}
