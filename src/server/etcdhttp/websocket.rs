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
//! sees the connection (`upgrade`, of which [`Gateway`] takes the handshakes for a gateway
//! path).
//!
//! After the `101`, the connection is tungstenite's: RFC 6455's framing without extensions (the
//! proxy offers none), with messages and frames no longer than the gateway's request body. The
//! proxy's gorilla/websocket differs from tungstenite's defaults in two ways, so both are done
//! here: a close frame goes back with the code alone (tungstenite would echo the reason too),
//! and a frame that breaks the protocol or the size limit gets a close frame with RFC 6455's
//! code (tungstenite only reports it).

use std::pin::Pin;
use std::sync::Arc;

use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use futures_util::SinkExt as _;
use futures_util::future::BoxFuture;
use http::{HeaderValue, Method, Request, header};
use http_body::Body as _;
use sha1::Digest as _;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::error::{Error as WsError, ProtocolError};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::frame::{Frame, Utf8Bytes};
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tonic::body::Body;

use crate::server::etcdhttp::http::Http;
use crate::server::etcdhttp::upgrade::{Conn, Divert, Head};

/// RFC 6455's GUID, hashed with the client's key into `Sec-WebSocket-Accept`.
const ACCEPT_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// The WebSocket handshakes a client listener takes from tonic (`upgrade::incoming`), answered
/// with `http` (the listener's own stack), whose request bodies are at most `max_message` long.
pub struct Gateway {
    pub http: Http,
    pub max_message: usize,
}

impl Divert for Gateway {
    fn takes(&self, h: &Head) -> bool {
        h.upgrades_to("websocket") && self.http.serves_gateway(h.uri.path())
    }

    fn serve(
        self: Arc<Self>,
        conn: Box<dyn Conn>,
        rest: BytesMut,
        h: Head,
    ) -> BoxFuture<'static, ()> {
        Box::pin(serve(conn, rest, h, self.http.clone(), self.max_message))
    }
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
    // `buf`: frames the client sent right behind its handshake.
    let config = Some(config(max_message));
    let mut ws =
        WebSocketStream::from_partially_read(conn, buf.to_vec(), Role::Server, config).await;
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
                        let line = lines.split_to(i + 1).freeze();
                        if send_text(&mut ws, line.slice(..i)).await.is_err() {
                            return;
                        }
                    }
                }
                None => {
                    // The answer is over: its last line (a unary answer has no newline),
                    // then the connection closes, as the proxy's does, without a close frame
                    // (dropping tungstenite's stream sends none).
                    let _ = send_text(&mut ws, lines.split().freeze()).await;
                    let _ = ws.get_mut().shutdown().await;
                    return;
                }
            },
            // Pings and pongs come out here too; tungstenite has queued a ping's pong, and
            // writes it before it reads on (or before the next message sent).
            message = ws.next() => match message {
                Some(Ok(Message::Text(m))) => forward(&mut body_tx, m.into()).await,
                Some(Ok(Message::Binary(m))) => forward(&mut body_tx, m).await,
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Close(frame))) => {
                    close(&mut ws, frame.map(|f| f.code)).await;
                    return;
                }
                Some(Err(e)) => {
                    if let Some(code) = refusal(&e) {
                        close(&mut ws, Some(code)).await;
                    }
                    return;
                }
                None => return,
            },
        }
    }
}

/// A request body is at most `max_message` long, so no message (nor frame) of the client's may
/// be longer.
fn config(max_message: usize) -> WebSocketConfig {
    WebSocketConfig::default().max_message_size(Some(max_message)).max_frame_size(Some(max_message))
}

/// Hands a client's message to the call as a line of its request body (while the call still
/// reads it).
async fn forward(body_tx: &mut Option<mpsc::Sender<Bytes>>, message: Bytes) {
    let Some(tx) = body_tx else { return };
    let mut line = BytesMut::with_capacity(message.len() + 1);
    line.extend_from_slice(&message);
    line.extend_from_slice(b"\n");
    if tx.send(line.freeze()).await.is_err() {
        // The call no longer reads its request.
        *body_tx = None;
    }
}

/// The close code for a client's frame that broke the protocol, or `None` where the
/// connection just ended (or failed) under it.
fn refusal(e: &WsError) -> Option<CloseCode> {
    match e {
        WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => None,
        WsError::Protocol(_) => Some(CloseCode::Protocol),
        WsError::Capacity(_) => Some(CloseCode::Size),
        // A text message (or close reason) that is not UTF-8.
        WsError::Utf8(_) => Some(CloseCode::Invalid),
        _ => None,
    }
}

/// Sends a close frame with `code` alone, as gorilla/websocket does (tungstenite's own reply to
/// a client's close, queued and not yet sent, would echo its reason too: it is written past
/// tungstenite, and never sent, since the stream is dropped next), and ends the connection.
async fn close<C: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<C>,
    code: Option<CloseCode>,
) {
    let frame = Frame::close(code.map(|code| CloseFrame { code, reason: Utf8Bytes::default() }));
    let mut out = Vec::with_capacity(4);
    if frame.format(&mut out).is_ok() {
        let _ = ws.get_mut().write_all(&out).await;
    }
    let _ = ws.get_mut().shutdown().await;
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

/// One non-empty line as a text message (the proxy skips empty ones). The gateway writes JSON,
/// so a line is UTF-8; one that were not would go as a binary message (the proxy would send its
/// bytes as text, which tungstenite's text messages, UTF-8 only, cannot carry).
async fn send_text<C: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<C>,
    line: Bytes,
) -> Result<(), WsError> {
    if line.is_empty() {
        return Ok(());
    }
    let text =
        Utf8Bytes::try_from(line.clone()).map(Message::Text).unwrap_or(Message::Binary(line));
    ws.send(text).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::etcdhttp::upgrade::parse_head;
    use tokio::io::AsyncReadExt;

    /// A client's frame starting with `first` (FIN, opcode), masked as a client's must be.
    fn masked(first: u8, payload: &[u8]) -> Vec<u8> {
        let mask = [1u8, 2, 3, 4];
        let mut out = vec![first, 0x80 | payload.len() as u8];
        out.extend_from_slice(&mask);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        out
    }

    /// The server's side of a WebSocket whose client has sent `frames`.
    async fn server(
        frames: Vec<u8>,
    ) -> (tokio::io::DuplexStream, WebSocketStream<tokio::io::DuplexStream>) {
        let (client, server) = tokio::io::duplex(1024);
        let ws =
            WebSocketStream::from_partially_read(server, frames, Role::Server, Some(config(8)));
        (client, ws.await)
    }

    #[tokio::test]
    async fn frames_breaking_the_protocol_get_rfc_6455_codes() {
        for (frames, code) in [
            (vec![0x81, 0x01, b'x'], CloseCode::Protocol),
            (masked(0x83, b"x"), CloseCode::Protocol),
            (masked(0x81, b"123456789"), CloseCode::Size),
            ([masked(0x01, b"1234"), masked(0x80, b"56789")].concat(), CloseCode::Size),
            (masked(0x81, &[0xff]), CloseCode::Invalid),
        ] {
            let (_client, mut ws) = server(frames.clone()).await;
            let e = ws.next().await.expect("an answer").expect_err("refused");
            assert_eq!(refusal(&e), Some(code), "{frames:x?}: {e}");
        }
        // A client gone without a close frame is no one to answer.
        let (client, mut ws) = server(masked(0x01, b"12")).await;
        drop(client);
        let e = ws.next().await.expect("an answer").expect_err("ended");
        assert_eq!(refusal(&e), None, "{e}");
    }

    #[tokio::test]
    async fn fragments_join_and_a_close_goes_back_with_its_code_alone() {
        let mut close_frame = 1001u16.to_be_bytes().to_vec();
        close_frame.extend_from_slice(b"bye");
        let frames = [
            masked(0x01, b"{\"a\""),
            masked(0x89, b"hi"),
            masked(0x80, b":1}"),
            masked(0x88, &close_frame),
        ];
        let (mut client, mut ws) = server(frames.concat()).await;
        assert_eq!(ws.next().await.unwrap().unwrap(), Message::Ping(Bytes::from_static(b"hi")));
        assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("{\"a\":1}"));
        let Some(Ok(Message::Close(frame))) = ws.next().await else { panic!("a close") };
        close(&mut ws, frame.map(|f| f.code)).await;
        drop(ws);
        let mut back = Vec::new();
        client.read_to_end(&mut back).await.unwrap();
        // The pong, then the close with 1001 and no reason.
        assert_eq!(back, [&[0x8a, 0x02, b'h', b'i'][..], &[0x88, 0x02, 0x03, 0xe9]].concat());
    }

    #[test]
    fn handshake_heads() {
        let head = b"GET /v3/watch?x=1 HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\n\
                     Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
                     Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
                     Sec-WebSocket-Protocol: Bearer, tok\r\n\r\n";
        let h = parse_head(head).unwrap();
        assert!(h.upgrades_to("websocket"));
        // RFC 6455's example key and answer.
        assert_eq!(accept(&h), Ok("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".to_string()));
        assert_eq!(authorization(&h).as_deref(), Some("Bearer tok"));
        let post = String::from_utf8(head.to_vec()).unwrap().replacen("GET", "POST", 1);
        let post = parse_head(post.as_bytes()).unwrap();
        assert_eq!(accept(&post), Err((405, "Method Not Allowed")));
    }
}
