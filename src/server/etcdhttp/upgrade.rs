//! A connection's first request, read before tonic sees the connection: tonic serves
//! connections without HTTP/1.1 upgrades, so an upgrade that this server answers itself is
//! caught here. The head of each HTTP/1 connection's first request is read; a request that a
//! [`Divert`] takes (the JSON gateway's WebSocket handshakes on a client listener,
//! `websocket`; the streams between members on a peer listener, `raft_streams`) is served by
//! it, and anything else goes on to tonic with the bytes read put back in front
//! ([`Prefixed`]). Clients of both send the upgrade as a connection's first request (they dial
//! a connection for it).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use futures_util::future::BoxFuture;
use http::{HeaderMap, HeaderValue, Method, header};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::server::Connected;

/// The longest request head looked at; a longer one goes on to tonic (hyper refuses it).
const MAX_HEAD: usize = 16 * 1024;

/// How long a connection may take to send its first request's head before it goes on to tonic
/// as it is (whose own timeouts then apply).
const HEAD_WAIT: Duration = Duration::from_secs(10);

/// A connection with bytes already read from it in front.
#[derive(Debug)]
pub struct Prefixed<C> {
    prefix: Bytes,
    conn: C,
}

impl<C: Connected> Connected for Prefixed<C> {
    type ConnectInfo = C::ConnectInfo;

    fn connect_info(&self) -> C::ConnectInfo {
        self.conn.connect_info()
    }
}

impl<C: AsyncRead + Unpin> AsyncRead for Prefixed<C> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.conn).poll_read(cx, buf)
    }
}

impl<C: AsyncWrite + Unpin> AsyncWrite for Prefixed<C> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().conn).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().conn).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.conn.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().conn).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().conn).poll_shutdown(cx)
    }
}

/// A connection taken from tonic, as a [`Divert`] serves it.
pub trait Conn: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Conn for T {}

/// What takes some connections from a listener's tonic by their first request.
pub trait Divert: Send + Sync + 'static {
    /// Whether this serves the connection whose first request has the head `h`.
    fn takes(&self, h: &Head) -> bool;

    /// Serves `conn` from after its first request's head `h` (`rest`: what the client sent
    /// behind it).
    fn serve(
        self: Arc<Self>,
        conn: Box<dyn Conn>,
        rest: BytesMut,
        h: Head,
    ) -> BoxFuture<'static, ()>;
}

/// The connections of `conns` that `divert` does not take, for tonic; those it takes get
/// served by it. Each connection waits for its first request in a task of its own, so that a
/// silent client never holds up the others. When tonic stops taking connections, `conns` is
/// dropped (closing the listener).
pub fn incoming<S, C>(
    conns: S,
    divert: Arc<dyn Divert>,
) -> ReceiverStream<std::io::Result<Prefixed<C>>>
where
    S: Stream<Item = std::io::Result<C>> + Send + 'static,
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let mut conns = std::pin::pin!(conns);
        loop {
            let next = tokio::select! {
                c = conns.next() => c,
                _ = tx.closed() => return,
            };
            let conn = match next {
                None => return,
                Some(Err(e)) => {
                    if tx.send(Err(e)).await.is_err() {
                        return;
                    }
                    continue;
                }
                Some(Ok(c)) => c,
            };
            let (tx, divert) = (tx.clone(), divert.clone());
            tokio::spawn(async move {
                if let Some(c) = first_request(conn, divert).await {
                    let _ = tx.send(Ok(c)).await;
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// What the bytes a connection started with say.
#[derive(Debug, PartialEq, Eq)]
enum Start {
    /// Not an HTTP/1 request head (the HTTP/2 preface, TLS, anything else), or one too long.
    Other,
    /// An HTTP/1 request head, this many bytes long.
    Head(usize),
    /// Too little to tell yet.
    More,
}

fn classify(buf: &[u8]) -> Start {
    const PREFACE: &[u8] = b"PRI ";
    if buf.is_empty() || (buf.len() < PREFACE.len() && PREFACE.starts_with(buf)) {
        return Start::More;
    }
    // An HTTP/1 request starts with its method, a token of capitals.
    if buf.starts_with(PREFACE) || !buf[0].is_ascii_uppercase() {
        return Start::Other;
    }
    match buf.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(i) => Start::Head(i + 4),
        None if buf.len() > MAX_HEAD => Start::Other,
        None => Start::More,
    }
}

/// Reads the head of `conn`'s first request: one `divert` takes is served by it (`None`),
/// anything else is given back with what was read in front.
async fn first_request<C>(mut conn: C, divert: Arc<dyn Divert>) -> Option<Prefixed<C>>
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut buf = BytesMut::with_capacity(1024);
    let deadline = tokio::time::sleep(HEAD_WAIT);
    tokio::pin!(deadline);
    let head_len = loop {
        match classify(&buf) {
            Start::Other => return Some(Prefixed { prefix: buf.freeze(), conn }),
            Start::Head(n) => break n,
            Start::More => {}
        }
        let read = tokio::select! {
            r = conn.read_buf(&mut buf) => r,
            _ = &mut deadline => return Some(Prefixed { prefix: buf.freeze(), conn }),
        };
        match read {
            // Gone before saying anything: nothing for tonic either.
            Ok(0) | Err(_) if buf.is_empty() => return None,
            Ok(0) | Err(_) => return Some(Prefixed { prefix: buf.freeze(), conn }),
            Ok(_) => {}
        }
    };
    let head = match parse_head(&buf[..head_len]) {
        Some(h) if divert.takes(&h) => h,
        _ => return Some(Prefixed { prefix: buf.freeze(), conn }),
    };
    buf.advance(head_len);
    divert.serve(Box::new(conn), buf, head).await;
    None
}

/// A request head.
#[derive(Debug)]
pub struct Head {
    pub method: Method,
    pub uri: http::Uri,
    pub headers: HeaderMap,
}

impl Head {
    /// Whether the request asks to upgrade the connection to `protocol` (`Connection:
    /// upgrade` and `Upgrade: <protocol>`, as gorilla/websocket's `IsWebSocketUpgrade` asks).
    pub fn upgrades_to(&self, protocol: &str) -> bool {
        self.has_token(header::CONNECTION, "upgrade") && self.has_token(header::UPGRADE, protocol)
    }

    /// Whether a comma-separated header (any of its lines) lists `token`, in any case.
    pub fn has_token(&self, name: header::HeaderName, token: &str) -> bool {
        self.headers.get_all(name).iter().any(|v| {
            v.to_str().unwrap_or("").split(',').any(|t| t.trim().eq_ignore_ascii_case(token))
        })
    }

    /// A header's value, if it is text.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// The head of an HTTP/1 request (`head`: up to and with its blank line).
pub fn parse_head(head: &[u8]) -> Option<Head> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = Method::from_bytes(request_line.next()?.as_bytes()).ok()?;
    let uri: http::Uri = request_line.next()?.parse().ok()?;
    if !request_line.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let mut headers = HeaderMap::new();
    for line in lines.take_while(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':')?;
        let name = header::HeaderName::from_bytes(name.trim().as_bytes()).ok()?;
        headers.append(name, HeaderValue::from_str(value.trim()).ok()?);
    }
    Some(Head { method, uri, headers })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_request_heads() {
        assert_eq!(classify(b"PR"), Start::More);
        assert_eq!(classify(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), Start::Other);
        assert_eq!(classify(&[0x16, 3, 1]), Start::Other);
        assert_eq!(classify(b"GET / HTTP/1.1\r\nHost: x\r\n"), Start::More);
        let head = b"GET /v3/watch?x=1 HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\n\
                     Upgrade: websocket\r\n\r\n";
        assert_eq!(classify(head), Start::Head(head.len()));
        let h = parse_head(head).unwrap();
        assert!(h.upgrades_to("websocket"));
        assert!(!h.upgrades_to("memetcd-append"));
        assert_eq!(h.uri.path(), "/v3/watch");
    }
}
