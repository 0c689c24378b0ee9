//! WebSocket on the JSON gateway's paths, as etcd wraps its grpc-gateway in
//! grpc-websocket-proxy: a request under `/v3/` that asks for a WebSocket upgrade (`Connection:
//! upgrade`, `Upgrade: websocket`) is answered `101 Switching Protocols`, and becomes a POST to
//! the same path whose request body is what the client sends, each message followed by a
//! newline, and whose answer goes back a line at a time, each non-empty line one text message
//! (for a stream, the `{"result":{...}}` lines a chunked answer has). The answer's status and
//! headers are not sent. When the answer ends the connection is closed without a close frame;
//! when the client sends a close frame it gets one back (with the same code) and the call ends.
//! Pings get pongs. As the proxy, the call's `Authorization` comes from
//! `Sec-WebSocket-Protocol: Bearer, <token>` (or a `token` cookie), not from the request's own
//! `Authorization` header.
//!
//! tonic serves connections without HTTP/1.1 upgrades, so the handshake is caught before tonic
//! sees the connection: the first request of each HTTP/1 connection is read (its head only), and
//! a WebSocket handshake for a gateway path is served here; anything else goes on to tonic with
//! the bytes read put back in front ([`Prefixed`]). WebSocket clients send the handshake as a
//! connection's first request (they dial a connection for it).
//!
//! The framing is RFC 6455's, without extensions (the proxy offers none): a message of the
//! client's is masked and may come in fragments; the server's are single unmasked frames.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine as _;
use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Method, Request, header};
use http_body::Body as _;
use sha1::Digest as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::body::Body;
use tonic::transport::server::Connected;

use crate::server::etcdhttp::http::Http;

/// The longest request head looked at; a longer one goes on to tonic (hyper refuses it).
const MAX_HEAD: usize = 16 * 1024;

/// How long a connection may take to send its first request's head before it goes on to tonic
/// as it is (whose own timeouts then apply).
const HEAD_WAIT: Duration = Duration::from_secs(10);

/// RFC 6455's GUID, hashed with the client's key into `Sec-WebSocket-Accept`.
const ACCEPT_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

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

/// The connections of `conns` that are not WebSocket handshakes for the gateway, for tonic;
/// those that are get served here, with `http` (the listener's own stack) answering the calls.
/// Each connection waits for its first request in a task of its own, so that a silent client
/// never holds up the others. When tonic stops taking connections, `conns` is dropped (closing
/// the listener).
pub fn incoming<S, C>(
    conns: S,
    http: Http,
    max_message: usize,
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
            let (tx, http) = (tx.clone(), http.clone());
            tokio::spawn(async move {
                if let Some(c) = first_request(conn, http, max_message).await {
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

/// Reads the head of `conn`'s first request: a WebSocket handshake for the gateway is served
/// here (`None`), anything else is given back with what was read in front.
async fn first_request<C>(mut conn: C, http: Http, max_message: usize) -> Option<Prefixed<C>>
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
    let handshake = match parse_head(&buf[..head_len]) {
        Some(h) if h.is_upgrade() && http.serves_gateway(h.uri.path()) => h,
        _ => return Some(Prefixed { prefix: buf.freeze(), conn }),
    };
    buf.advance(head_len);
    serve(conn, buf, handshake, http, max_message).await;
    None
}

/// A request head.
#[derive(Debug)]
struct Head {
    method: Method,
    uri: http::Uri,
    headers: HeaderMap,
}

impl Head {
    /// gorilla/websocket's `IsWebSocketUpgrade`, which the proxy asks before anything else.
    fn is_upgrade(&self) -> bool {
        self.has_token(header::CONNECTION, "upgrade")
            && self.has_token(header::UPGRADE, "websocket")
    }

    /// Whether a comma-separated header (any of its lines) lists `token`, in any case.
    fn has_token(&self, name: header::HeaderName, token: &str) -> bool {
        self.headers.get_all(name).iter().any(|v| {
            v.to_str().unwrap_or("").split(',').any(|t| t.trim().eq_ignore_ascii_case(token))
        })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

fn parse_head(head: &[u8]) -> Option<Head> {
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

/// gorilla/websocket's `Upgrader.Upgrade` checks (the proxy's own are in [`Head::is_upgrade`]):
/// the refusal's status and text, or the `Sec-WebSocket-Accept` value.
fn accept(h: &Head) -> Result<String, (u16, &'static str)> {
    if h.method != Method::GET {
        return Err((405, "Method Not Allowed"));
    }
    if !h.has_token(header::SEC_WEBSOCKET_VERSION, "13") {
        return Err((400, "Bad Request"));
    }
    let key = h.get("sec-websocket-key").unwrap_or("").trim();
    let decoded = base64::engine::general_purpose::STANDARD.decode(key);
    if decoded.map(|k| k.len()) != Ok(16) {
        return Err((400, "Bad Request"));
    }
    let mut sha = sha1::Sha1::new();
    sha.update(key.as_bytes());
    sha.update(ACCEPT_GUID.as_bytes());
    Ok(base64::engine::general_purpose::STANDARD.encode(sha.finalize()))
}

/// The proxy's `Authorization` for the call: from `Sec-WebSocket-Protocol` (`Bearer, <token>`
/// becomes `Bearer <token>`; any other value an empty one), replaced by a `token` cookie's
/// `Bearer <value>`.
fn authorization(h: &Head) -> Option<String> {
    let mut auth = h.get("sec-websocket-protocol").filter(|p| !p.is_empty()).map(|p| {
        match p.split_once("Bearer,") {
            Some((_, token)) => format!("Bearer {}", token.trim_matches(' ')),
            None => String::new(),
        }
    });
    for cookies in h.headers.get_all(header::COOKIE) {
        for c in cookies.to_str().unwrap_or("").split(';') {
            if let Some((name, value)) = c.trim().split_once('=')
                && name == "token"
            {
                auth = Some(format!("Bearer {}", value.trim_matches('"')));
            }
        }
    }
    auth
}

/// Answers the handshake `h` on `conn` (`buf`: what the client sent after it) and proxies the
/// gateway call until either side ends it.
async fn serve<C>(mut conn: C, buf: BytesMut, h: Head, mut http: Http, max_message: usize)
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let accept = match accept(&h) {
        Ok(a) => a,
        Err((status, text)) => {
            let reason = if status == 405 { "Method Not Allowed" } else { "Bad Request" };
            let answer = format!(
                "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n\
                 Sec-Websocket-Version: 13\r\nX-Content-Type-Options: nosniff\r\n\
                 Access-Control-Allow-Headers: accept, content-type, authorization\r\n\
                 Access-Control-Allow-Methods: POST, GET, OPTIONS, PUT, DELETE\r\n\
                 Access-Control-Allow-Origin: *\r\nContent-Length: {}\r\nConnection: close\r\n\
                 \r\n{text}\n",
                text.len() + 1
            );
            let _ = conn.write_all(answer.as_bytes()).await;
            let _ = conn.shutdown().await;
            return;
        }
    };
    let protocol = h.get("sec-websocket-protocol").unwrap_or("");
    let subprotocol =
        if protocol.starts_with("Bearer") { "Sec-WebSocket-Protocol: Bearer\r\n" } else { "" };
    let answer = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {accept}\r\n{subprotocol}\r\n"
    );
    if conn.write_all(answer.as_bytes()).await.is_err() {
        return;
    }
    // The call: a POST (etcd's proxy sets the method of every call it makes), with the
    // headers the proxy passes on.
    let (body_tx, body_rx) = mpsc::channel::<Bytes>(16);
    let mut req = Request::new(Body::new(crate::server::etcdhttp::gateway::ChanBody(body_rx)));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = h.uri.path_and_query().map_or("/", |p| p.as_str()).parse().expect("valid");
    if let Some(auth) = authorization(&h).and_then(|a| HeaderValue::from_str(&a).ok()) {
        req.headers_mut().insert(header::AUTHORIZATION, auth);
    }
    for name in [header::ORIGIN, header::REFERER] {
        if let Some(v) = h.headers.get(&name) {
            req.headers_mut().insert(name, v.clone());
        }
    }
    let mut call = Box::pin(tower_service::Service::call(&mut http, req));
    let mut answer: Option<Body> = None;
    let mut body_tx = Some(body_tx);
    let mut frames = Frames { buf, message: None, max: max_message };
    let mut lines = BytesMut::new();
    loop {
        tokio::select! {
            res = &mut call, if answer.is_none() => {
                let Ok(res) = res;
                answer = Some(res.into_body());
            }
            frame = next_frame(answer.as_mut()), if answer.is_some() => match frame {
                Some(data) => {
                    lines.extend_from_slice(&data);
                    while let Some(i) = lines.iter().position(|b| *b == b'\n') {
                        let line = lines.split_to(i + 1);
                        if send_text(&mut conn, &line[..i]).await.is_err() {
                            return;
                        }
                    }
                }
                None => {
                    // The answer is over: its last line (a unary answer has no newline),
                    // then the connection closes, as the proxy's does, without a close frame.
                    let _ = send_text(&mut conn, &lines).await;
                    let _ = conn.shutdown().await;
                    return;
                }
            },
            read = conn.read_buf(&mut frames.buf) => {
                if !matches!(read, Ok(n) if n > 0) {
                    return;
                }
                loop {
                    match frames.next() {
                        Ok(None) => break,
                        Ok(Some(Frame::Message(m))) => {
                            let Some(tx) = &body_tx else { continue };
                            let mut line = BytesMut::from(&m[..]);
                            line.extend_from_slice(b"\n");
                            if tx.send(line.freeze()).await.is_err() {
                                // The call no longer reads its request.
                                body_tx = None;
                            }
                        }
                        Ok(Some(Frame::Ping(p))) => {
                            if write_frame(&mut conn, OP_PONG, &p).await.is_err() {
                                return;
                            }
                        }
                        Ok(Some(Frame::Close(code))) => {
                            let payload = code.map(u16::to_be_bytes);
                            let payload: &[u8] = payload.as_ref().map_or(&[], |p| &p[..]);
                            let _ = write_frame(&mut conn, OP_CLOSE, payload).await;
                            let _ = conn.shutdown().await;
                            return;
                        }
                        Err(code) => {
                            let _ = write_frame(&mut conn, OP_CLOSE, &code.to_be_bytes()).await;
                            let _ = conn.shutdown().await;
                            return;
                        }
                    }
                }
            }
        }
    }
}

/// The next data of a response body, `None` at its end (trailers are not sent).
async fn next_frame(body: Option<&mut Body>) -> Option<Bytes> {
    let body = body?;
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await;
        match frame {
            Some(Ok(f)) => match f.into_data() {
                Ok(data) => return Some(data),
                Err(_) => continue,
            },
            Some(Err(_)) | None => return None,
        }
    }
}

/// One non-empty line as a text message (the proxy skips empty ones).
async fn send_text<C: AsyncWrite + Unpin>(conn: &mut C, line: &[u8]) -> std::io::Result<()> {
    if line.is_empty() {
        return Ok(());
    }
    write_frame(conn, OP_TEXT, line).await
}

const OP_CONTINUATION: u8 = 0x0;
const OP_TEXT: u8 = 0x1;
const OP_BINARY: u8 = 0x2;
const OP_CLOSE: u8 = 0x8;
const OP_PING: u8 = 0x9;
const OP_PONG: u8 = 0xA;

/// RFC 6455's close codes this side sends.
const CLOSE_PROTOCOL_ERROR: u16 = 1002;
const CLOSE_TOO_BIG: u16 = 1009;

/// A server frame: final, unmasked.
async fn write_frame<C: AsyncWrite + Unpin>(
    conn: &mut C,
    opcode: u8,
    payload: &[u8],
) -> std::io::Result<()> {
    let mut out = Vec::with_capacity(payload.len() + 10);
    out.push(0x80 | opcode);
    match payload.len() {
        n if n < 126 => out.push(n as u8),
        n if n <= u16::MAX as usize => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
    conn.write_all(&out).await?;
    conn.flush().await
}

/// What the client sent, frame by frame.
#[derive(Debug, PartialEq, Eq)]
enum Frame {
    /// A whole data message (text or binary, fragments joined).
    Message(Bytes),
    Ping(Bytes),
    /// A close frame and its code, if it has one.
    Close(Option<u16>),
}

/// Reads the client's frames from the bytes received.
#[derive(Debug)]
struct Frames {
    buf: BytesMut,
    /// The fragments of a message so far.
    message: Option<BytesMut>,
    /// The longest message taken.
    max: usize,
}

impl Frames {
    /// The next complete frame that says something (pongs and fragments are taken in
    /// silently); `Ok(None)` if more bytes are needed; `Err(code)` for a frame breaking the
    /// protocol, to be closed with `code`.
    fn next(&mut self) -> Result<Option<Frame>, u16> {
        loop {
            let b = &self.buf[..];
            if b.len() < 2 {
                return Ok(None);
            }
            let (fin, rsv, opcode) = (b[0] & 0x80 != 0, b[0] & 0x70, b[0] & 0x0F);
            let (masked, len7) = (b[1] & 0x80 != 0, (b[1] & 0x7F) as usize);
            // No extension was agreed; clients must mask (RFC 6455 5.1).
            if rsv != 0 || !masked {
                return Err(CLOSE_PROTOCOL_ERROR);
            }
            let (len, mut at) = match len7 {
                126 if b.len() >= 4 => (u16::from_be_bytes([b[2], b[3]]) as usize, 4),
                127 if b.len() >= 10 => {
                    let n = u64::from_be_bytes(b[2..10].try_into().expect("8 bytes"));
                    (usize::try_from(n).unwrap_or(usize::MAX), 10)
                }
                126 | 127 => return Ok(None),
                n => (n, 2),
            };
            let control = opcode & 0x8 != 0;
            if control && (!fin || len > 125) {
                return Err(CLOSE_PROTOCOL_ERROR);
            }
            let so_far = self.message.as_ref().map_or(0, |m| m.len());
            if len > self.max.saturating_sub(so_far) {
                return Err(CLOSE_TOO_BIG);
            }
            if b.len() < at + 4 + len {
                return Ok(None);
            }
            let mask: [u8; 4] = b[at..at + 4].try_into().expect("4 bytes");
            at += 4;
            self.buf.advance(at);
            let mut payload = self.buf.split_to(len);
            for (i, byte) in payload.iter_mut().enumerate() {
                *byte ^= mask[i % 4];
            }
            match opcode {
                OP_PING => return Ok(Some(Frame::Ping(payload.freeze()))),
                OP_PONG => continue,
                OP_CLOSE => {
                    let code =
                        (payload.len() >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]]));
                    return Ok(Some(Frame::Close(code)));
                }
                OP_TEXT | OP_BINARY if self.message.is_none() => {
                    if fin {
                        return Ok(Some(Frame::Message(payload.freeze())));
                    }
                    self.message = Some(payload);
                }
                OP_CONTINUATION if self.message.is_some() => {
                    let m = self.message.as_mut().expect("checked");
                    m.extend_from_slice(&payload);
                    if fin {
                        let m = self.message.take().expect("checked");
                        return Ok(Some(Frame::Message(m.freeze())));
                    }
                }
                _ => return Err(CLOSE_PROTOCOL_ERROR),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masked(first: u8, payload: &[u8]) -> Vec<u8> {
        let mask = [1u8, 2, 3, 4];
        let mut out = vec![first, 0x80 | payload.len() as u8];
        out.extend_from_slice(&mask);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        out
    }

    #[test]
    fn fragments_join_and_controls_pass_between() {
        let mut f = Frames { buf: BytesMut::new(), message: None, max: 1 << 20 };
        f.buf.extend_from_slice(&masked(OP_TEXT, b"{\"a\""));
        f.buf.extend_from_slice(&masked(0x80 | OP_PING, b"hi"));
        assert_eq!(f.next(), Ok(Some(Frame::Ping(Bytes::from_static(b"hi")))));
        let last = masked(0x80 | OP_CONTINUATION, b":1}");
        f.buf.extend_from_slice(&last[..3]);
        assert_eq!(f.next(), Ok(None));
        f.buf.extend_from_slice(&last[3..]);
        assert_eq!(f.next(), Ok(Some(Frame::Message(Bytes::from_static(b"{\"a\":1}")))));
        f.buf.extend_from_slice(&masked(0x80 | OP_CLOSE, &1000u16.to_be_bytes()));
        assert_eq!(f.next(), Ok(Some(Frame::Close(Some(1000)))));
    }

    #[test]
    fn unmasked_or_oversized_frames_break_the_protocol() {
        let mut f = Frames { buf: BytesMut::from(&[0x81, 0x01, b'x'][..]), message: None, max: 8 };
        assert_eq!(f.next(), Err(CLOSE_PROTOCOL_ERROR));
        let mut f = Frames { buf: BytesMut::new(), message: None, max: 8 };
        f.buf.extend_from_slice(&masked(0x80 | OP_TEXT, b"123456789"));
        assert_eq!(f.next(), Err(CLOSE_TOO_BIG));
    }

    #[test]
    fn handshake_heads() {
        assert_eq!(classify(b"PR"), Start::More);
        assert_eq!(classify(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), Start::Other);
        assert_eq!(classify(&[0x16, 3, 1]), Start::Other);
        assert_eq!(classify(b"GET / HTTP/1.1\r\nHost: x\r\n"), Start::More);
        let head = b"GET /v3/watch?x=1 HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\n\
                     Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
                     Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
                     Sec-WebSocket-Protocol: Bearer, tok\r\n\r\n";
        assert_eq!(classify(head), Start::Head(head.len()));
        let h = parse_head(head).unwrap();
        assert!(h.is_upgrade());
        // RFC 6455's example key and answer.
        assert_eq!(accept(&h), Ok("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".to_string()));
        assert_eq!(authorization(&h).as_deref(), Some("Bearer tok"));
        let post = String::from_utf8(head.to_vec()).unwrap().replacen("GET", "POST", 1);
        let post = parse_head(post.as_bytes()).unwrap();
        assert_eq!(accept(&post), Err((405, "Method Not Allowed")));
    }
}
