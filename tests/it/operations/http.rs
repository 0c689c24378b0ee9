//! The HTTP endpoints beside gRPC on the client port: the probes and /version as etcd's, and
//! the HTTP/1.1 client the other rooms (and other suites) call them with.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

/// An HTTP/1.1 answer: status, content type, body.
#[derive(Debug, PartialEq, Eq)]
pub struct HttpAnswer {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

/// `GET path` over HTTP/1.1 on a fresh connection.
pub async fn http_get(addr: SocketAddr, path: &str) -> HttpAnswer {
    http_call(addr, "GET", path).await
}

/// `method path` (no body) over HTTP/1.1 on a fresh connection.
pub async fn http_call(addr: SocketAddr, method: &str, path: &str) -> HttpAnswer {
    let mut c = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let length = if method == "GET" { "" } else { "Content-Length: 0\r\n" };
    let req =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{length}Connection: close\r\n\r\n");
    c.write_all(req.as_bytes()).await.expect("send");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut raw))
        .await
        .expect("an answer within 10 s")
        .expect("read");
    let raw = String::from_utf8(raw).expect("utf-8 answer");
    let (head, body) = raw.split_once("\r\n\r\n").expect("headers end");
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok());
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case(name)))
            .map(|(_, v)| v.trim().to_string())
    };
    HttpAnswer {
        status: status.expect("a status line"),
        content_type: header("content-type").unwrap_or_default(),
        body: match header("transfer-encoding") {
            Some(t) if t.eq_ignore_ascii_case("chunked") => dechunk(body),
            _ => body.to_string(),
        },
    }
}

/// The body of a chunked HTTP/1.1 answer.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").expect("a chunk size line");
        let size = usize::from_str_radix(size.trim(), 16).expect("a hex chunk size");
        if size == 0 {
            return out;
        }
        out.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
}

/// The probes and /version answer exactly as etcd 3.6's do, on the client port.
#[tokio::test]
async fn probes_and_version_answer_as_etcd_does() {
    let mem = server_of!(Kind::MemEtcd);
    let etcd = server_of!(Kind::Etcd);
    for path in [
        "/health",
        "/health?serializable=true",
        "/health?exclude=NOSPACE",
        "/livez",
        "/readyz",
        "/livez?verbose",
        "/readyz?verbose",
        "/readyz/linearizable_read",
        "/livez/serializable_read",
        "/readyz/no_such_check",
        "/version",
        "/healthz",
        "/",
    ] {
        let (mut m, mut e) = (http_get(mem.addr(), path).await, http_get(etcd.addr(), path).await);
        if path.ends_with("verbose") {
            // etcd lists its checks in Go's random map order.
            for a in [&mut m, &mut e] {
                let mut lines: Vec<_> = a.body.lines().collect();
                lines.sort_unstable();
                a.body = lines.join("\n");
            }
        }
        assert_eq!(m, e, "GET {path}: mem_etcd (left) and etcd (right) differ");
    }
    let v = http_get(mem.addr(), "/version").await;
    assert_eq!(v.body, r#"{"etcdserver":"3.6.16","etcdcluster":"3.6.0","storage":"3.6.0"}"#);
}
