//! etcd's JSON gateway (grpc-gateway) on the client port: `POST /v3/kv/range` and the rest,
//! with protobuf's JSON mapping as etcd 3.6 configures it (proto field names, 64-bit integers
//! as strings, bytes as base64, enums by name, defaults left out, unknown fields ignored).
//!
//! Like etcd's gateway, which is a gRPC client of its own server, each request becomes a gRPC
//! call: the JSON body is turned into the method's protobuf request (through the descriptors
//! `build.rs` writes), framed, and sent in-process through the same service stack a gRPC
//! client reaches (`etcdhttp::http`, then tonic's routes), so answers, errors, counting in
//! `/metrics` and leader checks are the gRPC ones. The protobuf answer is written back as JSON;
//! a failed call as `{"code":..,"message":..}` with grpc-gateway's HTTP status for the code.
//!
//! Streams (`/v3/watch`, `/v3/lease/keepalive`, `/v3/maintenance/snapshot`,
//! `/v3/election/observe`) answer one JSON
//! line per message, `{"result":{...}}`, and `{"error":{...}}` when the call fails. The
//! request body of a bidirectional stream is read as a sequence of JSON objects while it
//! arrives; when it ends (or holds something that does not parse) the request side of the call
//! is closed and the answers go on, as etcd's gateway does.
//!
//! `Authorization` is passed on as the `token` (and `authorization`) metadata that etcd's
//! clients and gateway send; `Grpc-Metadata-<name>` headers as `<name>`.

use std::future::Future;
use std::pin::Pin;
use std::sync::LazyLock;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body::Body as _;
use prost::Message as _;
use prost_reflect::{
    DescriptorPool, DeserializeOptions, DynamicMessage, MessageDescriptor, MethodDescriptor,
    SerializeOptions,
};
use tokio::sync::mpsc;
use tonic::body::Body;

/// The etcd API's descriptors (see `build.rs`).
static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(
        include_bytes!(concat!(env!("OUT_DIR"), "/etcd_descriptors.bin")).as_ref(),
    )
    .expect("build.rs writes a valid descriptor set")
});

/// Every path of etcd 3.6's gateway (`api/etcdserverpb/gw/rpc.pb.gw.go`, and the v3lock and
/// v3election services' `gw` packages), with its gRPC service (package included) and method.
const ROUTES: &[(&str, &str, &str)] = &[
    ("/v3/kv/range", "etcdserverpb.KV", "Range"),
    ("/v3/kv/put", "etcdserverpb.KV", "Put"),
    ("/v3/kv/deleterange", "etcdserverpb.KV", "DeleteRange"),
    ("/v3/kv/txn", "etcdserverpb.KV", "Txn"),
    ("/v3/kv/compaction", "etcdserverpb.KV", "Compact"),
    ("/v3/watch", "etcdserverpb.Watch", "Watch"),
    ("/v3/lease/grant", "etcdserverpb.Lease", "LeaseGrant"),
    ("/v3/lease/revoke", "etcdserverpb.Lease", "LeaseRevoke"),
    ("/v3/kv/lease/revoke", "etcdserverpb.Lease", "LeaseRevoke"),
    ("/v3/lease/keepalive", "etcdserverpb.Lease", "LeaseKeepAlive"),
    ("/v3/lease/timetolive", "etcdserverpb.Lease", "LeaseTimeToLive"),
    ("/v3/kv/lease/timetolive", "etcdserverpb.Lease", "LeaseTimeToLive"),
    ("/v3/lease/leases", "etcdserverpb.Lease", "LeaseLeases"),
    ("/v3/kv/lease/leases", "etcdserverpb.Lease", "LeaseLeases"),
    ("/v3/cluster/member/add", "etcdserverpb.Cluster", "MemberAdd"),
    ("/v3/cluster/member/remove", "etcdserverpb.Cluster", "MemberRemove"),
    ("/v3/cluster/member/update", "etcdserverpb.Cluster", "MemberUpdate"),
    ("/v3/cluster/member/list", "etcdserverpb.Cluster", "MemberList"),
    ("/v3/cluster/member/promote", "etcdserverpb.Cluster", "MemberPromote"),
    ("/v3/maintenance/alarm", "etcdserverpb.Maintenance", "Alarm"),
    ("/v3/maintenance/status", "etcdserverpb.Maintenance", "Status"),
    ("/v3/maintenance/defragment", "etcdserverpb.Maintenance", "Defragment"),
    ("/v3/maintenance/hash", "etcdserverpb.Maintenance", "Hash"),
    ("/v3/maintenance/hashkv", "etcdserverpb.Maintenance", "HashKV"),
    ("/v3/maintenance/snapshot", "etcdserverpb.Maintenance", "Snapshot"),
    ("/v3/maintenance/transfer-leadership", "etcdserverpb.Maintenance", "MoveLeader"),
    ("/v3/maintenance/downgrade", "etcdserverpb.Maintenance", "Downgrade"),
    ("/v3/auth/enable", "etcdserverpb.Auth", "AuthEnable"),
    ("/v3/auth/disable", "etcdserverpb.Auth", "AuthDisable"),
    ("/v3/auth/status", "etcdserverpb.Auth", "AuthStatus"),
    ("/v3/auth/authenticate", "etcdserverpb.Auth", "Authenticate"),
    ("/v3/auth/user/add", "etcdserverpb.Auth", "UserAdd"),
    ("/v3/auth/user/get", "etcdserverpb.Auth", "UserGet"),
    ("/v3/auth/user/list", "etcdserverpb.Auth", "UserList"),
    ("/v3/auth/user/delete", "etcdserverpb.Auth", "UserDelete"),
    ("/v3/auth/user/changepw", "etcdserverpb.Auth", "UserChangePassword"),
    ("/v3/auth/user/grant", "etcdserverpb.Auth", "UserGrantRole"),
    ("/v3/auth/user/revoke", "etcdserverpb.Auth", "UserRevokeRole"),
    ("/v3/auth/role/add", "etcdserverpb.Auth", "RoleAdd"),
    ("/v3/auth/role/get", "etcdserverpb.Auth", "RoleGet"),
    ("/v3/auth/role/list", "etcdserverpb.Auth", "RoleList"),
    ("/v3/auth/role/delete", "etcdserverpb.Auth", "RoleDelete"),
    ("/v3/auth/role/grant", "etcdserverpb.Auth", "RoleGrantPermission"),
    ("/v3/auth/role/revoke", "etcdserverpb.Auth", "RoleRevokePermission"),
    ("/v3/lock/lock", "v3lockpb.Lock", "Lock"),
    ("/v3/lock/unlock", "v3lockpb.Lock", "Unlock"),
    ("/v3/election/campaign", "v3electionpb.Election", "Campaign"),
    ("/v3/election/proclaim", "v3electionpb.Election", "Proclaim"),
    ("/v3/election/leader", "v3electionpb.Election", "Leader"),
    ("/v3/election/observe", "v3electionpb.Election", "Observe"),
    ("/v3/election/resign", "v3electionpb.Election", "Resign"),
];

/// Whether the gateway answers this path: everything under `/v3/` (unknown paths get the
/// gateway's JSON 404), and `/v3beta/`, which etcd still redirects to `/v3/`.
pub fn handles(path: &str) -> bool {
    path.starts_with("/v3/") || path.starts_with("/v3beta/")
}

/// A gateway path's gRPC method.
fn route(path: &str) -> Option<(String, MethodDescriptor)> {
    let path = match path.strip_prefix("/v3beta/") {
        Some(rest) => format!("/v3/{rest}"),
        None => path.to_string(),
    };
    let &(_, service, method) = ROUTES.iter().find(|r| r.0 == path)?;
    let s = POOL.get_service_by_name(service)?;
    let m = s.methods().find(|m| m.name() == method)?;
    Some((format!("/{service}/{method}"), m))
}

/// The in-process gRPC service the gateway calls (the client listener's stack).
pub trait Grpc:
    tower_service::Service<
        Request<Body>,
        Response = Response<Body>,
        Error = std::convert::Infallible,
        Future: Send + 'static,
    > + Send
    + 'static
{
}

impl<S> Grpc for S where
    S: tower_service::Service<
            Request<Body>,
            Response = Response<Body>,
            Error = std::convert::Infallible,
            Future: Send + 'static,
        > + Send
        + 'static
{
}

/// Answers one gateway request through `grpc`. `max_body` bounds the JSON body read for a
/// unary call (the gRPC receive limit then applies to the request it becomes).
pub async fn serve(mut grpc: impl Grpc, req: Request<Body>, max_body: usize) -> Response<Body> {
    let (parts, body) = req.into_parts();
    // The body of a request answered without it is still read: a connection closed with
    // unread data is reset, and the client may lose the answer.
    // etcd answers preflight requests for any path before routing.
    if parts.method == Method::OPTIONS {
        let _ = read_body(body, max_body).await;
        return with_cors(Response::new(Body::empty()));
    }
    let Some((grpc_path, method)) = route(parts.uri.path()) else {
        let _ = read_body(body, max_body).await;
        return error(tonic::Code::NotFound, "Not Found");
    };
    if parts.method != Method::POST {
        let _ = read_body(body, max_body).await;
        return error(tonic::Code::Unimplemented, "Method Not Allowed");
    }
    let metadata = forwarded_metadata(&parts.headers);
    let (tx, rx) = mpsc::channel::<Bytes>(8);
    let inner = grpc_request(&grpc_path, metadata, rx);
    let (gone_tx, gone_rx) = tokio::sync::oneshot::channel();
    let mut gone: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(client_gone(gone_rx));
    if method.is_client_streaming() {
        tokio::spawn(stream_requests(body, method.input(), tx, gone_tx));
    } else {
        let json = match read_body(body, max_body).await {
            Ok(b) => b,
            Err(e) => return e,
        };
        let msg = match first_message(&json, &method.input()) {
            Ok(Some((m, _))) => m,
            Ok(None) => DynamicMessage::new(method.input()),
            Err(e) => return error(tonic::Code::InvalidArgument, &e.to_string()),
        };
        let _ = tx.try_send(frame(&msg));
        drop(tx);
    }
    // The routes are always ready (see `etcdhttp::http`).
    let res = tower_service::Service::call(&mut grpc, inner).await;
    let Ok(res) = res;
    let (head, body) = res.into_parts();
    if let Some(status) = tonic::Status::from_header_map(&head.headers)
        && status.code() != tonic::Code::Ok
    {
        return error(status.code(), status.message());
    }
    let mut reader = GrpcReader { body, buf: BytesMut::new() };
    let output = method.output();
    if !method.is_server_streaming() {
        return match reader.next().await {
            Next::Message(m) => match DynamicMessage::decode(output, m) {
                Ok(m) => json_response(StatusCode::OK, to_string(to_json(&m))),
                Err(e) => error(tonic::Code::Internal, &e.to_string()),
            },
            Next::End(Some(s)) => error(s.code(), s.message()),
            Next::End(None) => error(tonic::Code::Internal, "empty response"),
        };
    }
    // grpc-gateway writes the response head with the first message, so an error that comes
    // first gets its own HTTP status.
    let next = tokio::select! {
        n = reader.next() => n,
        _ = &mut gone => return error(tonic::Code::Cancelled, "context canceled"),
    };
    let first = match next {
        Next::Message(m) => result_line(&output, m),
        Next::End(Some(s)) => {
            let (tx, rx) = mpsc::channel(1);
            let _ = tx.try_send(Bytes::from(error_line(&s)));
            let mut r = Response::new(Body::new(ChanBody(rx)));
            *r.status_mut() = http_status(s.code());
            set_json_headers(r.headers_mut(), false);
            return with_cors(r);
        }
        Next::End(None) => Bytes::new(),
    };
    let (out_tx, out_rx) = mpsc::channel::<Bytes>(16);
    let _ = out_tx.try_send(first);
    tokio::spawn(async move {
        loop {
            let next = tokio::select! {
                n = reader.next() => n,
                // The client went away while nothing was to be sent (an idle watch).
                _ = out_tx.closed() => return,
                _ = &mut gone => return,
            };
            let line = match next {
                Next::Message(m) => result_line(&output, m),
                Next::End(Some(s)) => {
                    let _ = out_tx.send(error_line(&s).into()).await;
                    return;
                }
                Next::End(None) => return,
            };
            // The client went away: dropping the call ends the gRPC stream too.
            if out_tx.send(line).await.is_err() {
                return;
            }
        }
    });
    let mut r = Response::new(Body::new(ChanBody(out_rx)));
    set_json_headers(r.headers_mut(), true);
    with_cors(r)
}

/// The metadata etcd's gateway passes on from the HTTP request.
fn forwarded_metadata(h: &HeaderMap) -> Vec<(http::HeaderName, HeaderValue)> {
    let mut md = Vec::new();
    if let Some(auth) = h.get(header::AUTHORIZATION) {
        // etcd's auth reads the token from `token`, then from `authorization` (what its
        // gateway forwards); both are set so either reading finds it.
        md.push((http::HeaderName::from_static("token"), auth.clone()));
        md.push((header::AUTHORIZATION, auth.clone()));
    }
    for (k, v) in h {
        if let Some(name) = k.as_str().strip_prefix("grpc-metadata-")
            && let Ok(name) = http::HeaderName::from_bytes(name.as_bytes())
        {
            md.push((name, v.clone()));
        }
    }
    md
}

fn grpc_request(
    path: &str,
    metadata: Vec<(http::HeaderName, HeaderValue)>,
    frames: mpsc::Receiver<Bytes>,
) -> Request<Body> {
    let mut r = Request::new(Body::new(ChanBody(frames)));
    *r.method_mut() = Method::POST;
    *r.uri_mut() = path.parse().expect("gRPC paths are valid URIs");
    *r.version_mut() = http::Version::HTTP_2;
    let h = r.headers_mut();
    for (k, v) in metadata {
        h.append(k, v);
    }
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    h.insert(header::TE, HeaderValue::from_static("trailers"));
    r
}

/// One gRPC message frame (uncompressed).
fn frame(msg: &DynamicMessage) -> Bytes {
    let len = msg.encoded_len();
    let mut b = BytesMut::with_capacity(5 + len);
    b.put_u8(0);
    b.put_u32(len as u32);
    msg.encode(&mut b).expect("the buffer has room");
    b.freeze()
}

/// Reads a unary call's whole body.
async fn read_body(mut body: Body, max: usize) -> Result<Vec<u8>, Response<Body>> {
    let mut buf = Vec::new();
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let Ok(frame) = frame else {
            return Err(error(tonic::Code::InvalidArgument, "unexpected EOF"));
        };
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > max {
                return Err(error(
                    tonic::Code::ResourceExhausted,
                    "grpc: received message larger than max",
                ));
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf)
}

/// Reads a bidirectional stream's request body as it arrives, one JSON object after another,
/// and sends each as a gRPC frame; stops (closing the call's request side) at the end of the
/// body, at something that does not parse, or when the call is over.
///
/// A body cut short means the client went away (a body ends cleanly with its last chunk): that
/// is said on `gone`, since hyper notices a closed HTTP/1.1 connection only when it next writes
/// to it, which an idle watch may not do for a long time.
async fn stream_requests(
    mut body: Body,
    input: MessageDescriptor,
    tx: mpsc::Sender<Bytes>,
    gone: tokio::sync::oneshot::Sender<()>,
) {
    let mut buf = Vec::new();
    loop {
        // Everything complete in the buffer first.
        loop {
            match first_message(&buf, &input) {
                Ok(Some((m, used))) => {
                    buf.drain(..used);
                    if tx.send(frame(&m)).await.is_err() {
                        return;
                    }
                }
                Ok(None) => {
                    buf.clear();
                    break;
                }
                Err(BodyError::Incomplete) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "gateway: a stream request does not parse");
                    return;
                }
            }
        }
        let next = tokio::select! {
            f = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)) => f,
            _ = tx.closed() => return,
        };
        match next {
            Some(Ok(f)) => {
                if let Ok(data) = f.into_data() {
                    buf.extend_from_slice(&data);
                }
            }
            Some(Err(_)) => {
                let _ = gone.send(());
                return;
            }
            None => return,
        }
    }
}

/// Resolves when the client is known to have gone away; never otherwise.
async fn client_gone(rx: tokio::sync::oneshot::Receiver<()>) {
    if rx.await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Why a request body does not hold a request: a streamed body's reader waits for more of it
/// on one, and gives up on the other.
#[derive(Debug)]
enum BodyError {
    /// A JSON value cut short (more of the body may complete it).
    Incomplete,
    /// Anything else, in the words etcd's gateway answers with.
    Invalid(String),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // Go's `encoding/json` for a value cut short.
            BodyError::Incomplete => f.write_str("unexpected EOF"),
            BodyError::Invalid(m) => f.write_str(m),
        }
    }
}

/// The first JSON value of `buf` as a message of type `desc`, and the bytes it took; `None`
/// if there is nothing but white space (an empty body is the empty request, as in etcd). As
/// Go's JSON decoder, anything after the first value is not looked at.
fn first_message(
    buf: &[u8],
    desc: &MessageDescriptor,
) -> Result<Option<(DynamicMessage, usize)>, BodyError> {
    let mut it = serde_json::Deserializer::from_slice(buf).into_iter::<serde_json::Value>();
    let value = match it.next() {
        None => return Ok(None),
        Some(Ok(v)) => v,
        Some(Err(e)) if e.is_eof() => return Err(BodyError::Incomplete),
        Some(Err(e)) => return Err(BodyError::Invalid(go_json_error(buf, &e))),
    };
    let used = it.byte_offset();
    let token = match &value {
        serde_json::Value::Object(_) => None,
        serde_json::Value::Null => Some("null".to_string()),
        serde_json::Value::Array(_) => Some("[".to_string()),
        other => Some(other.to_string()),
    };
    if let Some(t) = token {
        return Err(BodyError::Invalid(format!(
            "proto: syntax error (line 1:1): unexpected token {t}"
        )));
    }
    let options = DeserializeOptions::new().deny_unknown_fields(false);
    let msg = DynamicMessage::deserialize_with_options(desc.clone(), value, &options)
        .map_err(|e| BodyError::Invalid(format!("proto: {e}")))?;
    Ok(Some((msg, used)))
}

/// A JSON syntax error as Go's `encoding/json` words it (etcd's gateway reads the body with it
/// before the protobuf mapping): "invalid character 'x' looking for ..." (a value cut short is
/// [`BodyError::Incomplete`]).
fn go_json_error(buf: &[u8], e: &serde_json::Error) -> String {
    let text = e.to_string();
    let context = [
        ("key must be a string", "looking for beginning of object key string"),
        ("expected value", "looking for beginning of value"),
        ("expected ident", "looking for beginning of value"),
        ("expected `:`", "after object key"),
        ("expected `,` or `}`", "after object key:value pair"),
        ("expected `,` or `]`", "after array element"),
        ("trailing comma", "looking for beginning of value"),
    ]
    .iter()
    .find(|(serde, _)| text.starts_with(serde))
    .map(|(_, go)| *go);
    // serde_json counts lines and columns from 1, the column being the offending character.
    let offset = buf
        .split(|b| *b == b'\n')
        .take(e.line().saturating_sub(1))
        .map(|l| l.len() + 1)
        .sum::<usize>()
        + e.column().saturating_sub(1);
    let at = std::str::from_utf8(&buf[offset.min(buf.len())..]).ok().and_then(|s| s.chars().next());
    // A trailing comma: Go reads on to the next key of an object, or value of an array.
    let context = match (context, at) {
        (Some(_), Some('}')) if text.starts_with("trailing comma") => {
            Some("looking for beginning of object key string")
        }
        (c, _) => c,
    };
    match (context, at) {
        (Some(context), Some(c)) => {
            let quoted = match c {
                '\'' => "'\\''".to_string(),
                '"' => "'\"'".to_string(),
                c if c.is_control() => format!("'\\x{:02x}'", c as u32),
                c => format!("'{c}'"),
            };
            format!("invalid character {quoted} {context}")
        }
        _ => text,
    }
}

/// What a gRPC response body holds next.
enum Next {
    Message(Bytes),
    /// The end of the call: its status if not OK.
    End(Option<tonic::Status>),
}

/// Reads gRPC frames and the closing status from a response body.
struct GrpcReader {
    body: Body,
    buf: BytesMut,
}

impl GrpcReader {
    async fn next(&mut self) -> Next {
        loop {
            if self.buf.len() >= 5 {
                let len = u32::from_be_bytes(self.buf[1..5].try_into().expect("4 bytes")) as usize;
                if self.buf.len() >= 5 + len {
                    self.buf.advance(5);
                    return Next::Message(self.buf.split_to(len).freeze());
                }
            }
            let frame = std::future::poll_fn(|cx| Pin::new(&mut self.body).poll_frame(cx)).await;
            match frame {
                Some(Ok(f)) => match f.into_data() {
                    Ok(data) => self.buf.extend_from_slice(&data),
                    Err(f) => {
                        let status = f.trailers_ref().and_then(tonic::Status::from_header_map);
                        return Next::End(status.filter(|s| s.code() != tonic::Code::Ok));
                    }
                },
                Some(Err(e)) => return Next::End(Some(tonic::Status::internal(e.to_string()))),
                None => return Next::End(None),
            }
        }
    }
}

fn serialize_options() -> SerializeOptions {
    // etcd's gateway: protojson with UseProtoNames, EmitUnpopulated false; the other
    // defaults (64-bit integers as strings, enums by name) are protojson's too.
    SerializeOptions::new().use_proto_field_name(true).skip_default_fields(true)
}

fn to_string(json: Vec<u8>) -> String {
    String::from_utf8(json).expect("serde_json writes UTF-8")
}

fn to_json(m: &DynamicMessage) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    let mut ser = serde_json::Serializer::new(&mut out);
    m.serialize_with_options(&mut ser, &serialize_options()).expect("a decoded message serializes");
    out
}

/// One message of a stream: `{"result":{...}}` and a newline, as grpc-gateway writes it.
fn result_line(desc: &MessageDescriptor, m: Bytes) -> Bytes {
    let body = match DynamicMessage::decode(desc.clone(), m) {
        Ok(m) => to_json(&m),
        Err(e) => return error_line(&tonic::Status::internal(e.to_string())).into(),
    };
    let mut out = Vec::with_capacity(body.len() + 12);
    out.extend_from_slice(b"{\"result\":");
    out.extend_from_slice(&body);
    out.extend_from_slice(b"}\n");
    out.into()
}

/// A stream's failure: `{"error":{"code":..,"message":..}}` and a newline.
fn error_line(s: &tonic::Status) -> String {
    format!("{{\"error\":{}}}\n", error_json(s.code(), s.message()))
}

fn error_json(code: tonic::Code, message: &str) -> String {
    let message = serde_json::to_string(message).expect("a string serializes");
    if code == tonic::Code::Ok {
        // (protojson leaves the zero code out; never an error the gateway writes.)
        return format!("{{\"message\":{message}}}");
    }
    format!("{{\"code\":{},\"message\":{message}}}", code as i32)
}

/// A failed call: grpc-gateway's HTTP status for the code, and the status as JSON.
fn error(code: tonic::Code, message: &str) -> Response<Body> {
    let mut r = json_response(http_status(code), error_json(code, message));
    r.headers_mut().remove("grpc-metadata-content-type");
    if code == tonic::Code::Unauthenticated
        && let Ok(v) = HeaderValue::from_str(message)
    {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    r
}

/// A whole answer (a `String` body: hyper then writes its Content-Length, as etcd's has one).
fn json_response(status: StatusCode, body: String) -> Response<Body> {
    let mut r = Response::new(Body::new(body));
    *r.status_mut() = status;
    set_json_headers(r.headers_mut(), true);
    with_cors(r)
}

fn set_json_headers(h: &mut HeaderMap, grpc: bool) {
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if grpc {
        // The gRPC response's own header, which grpc-gateway passes on with this prefix.
        h.insert("grpc-metadata-content-type", HeaderValue::from_static("application/grpc"));
    }
}

/// etcd's CORS headers (its default `--cors` is `*`).
fn with_cors(mut r: Response<Body>) -> Response<Body> {
    let h = r.headers_mut();
    h.insert(
        "access-control-allow-headers",
        HeaderValue::from_static("accept, content-type, authorization"),
    );
    h.insert(
        "access-control-allow-methods",
        HeaderValue::from_static("POST, GET, OPTIONS, PUT, DELETE"),
    );
    h.insert("access-control-allow-origin", HeaderValue::from_static("*"));
    r
}

/// grpc-gateway's `HTTPStatusFromCode`.
fn http_status(code: tonic::Code) -> StatusCode {
    use tonic::Code::*;
    match code {
        Ok => StatusCode::OK,
        Cancelled => StatusCode::from_u16(499).expect("valid"),
        InvalidArgument | FailedPrecondition | OutOfRange => StatusCode::BAD_REQUEST,
        DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        NotFound => StatusCode::NOT_FOUND,
        AlreadyExists | Aborted => StatusCode::CONFLICT,
        PermissionDenied => StatusCode::FORBIDDEN,
        Unauthenticated => StatusCode::UNAUTHORIZED,
        ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Unknown | Internal | DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A body of chunks from a channel; it ends when the sender is dropped.
pub(in crate::server) struct ChanBody(pub(in crate::server) mpsc::Receiver<Bytes>);

impl http_body::Body for ChanBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        loop {
            match std::task::ready!(self.0.poll_recv(cx)) {
                Some(b) if b.is_empty() => continue,
                Some(b) => return Poll::Ready(Some(Ok(http_body::Frame::data(b)))),
                None => return Poll::Ready(None),
            }
        }
    }
}

/// The gateway's future, boxed: it is not on the gRPC path.
pub type GatewayFuture = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorization_goes_on_as_the_token() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("tok.123"));
        h.insert("grpc-metadata-hasleader", HeaderValue::from_static("true"));
        h.insert("x-other", HeaderValue::from_static("no"));
        let md = forwarded_metadata(&h);
        let get = |k: &str| md.iter().find(|(n, _)| n == k).map(|(_, v)| v.to_str().unwrap());
        assert_eq!(get("token"), Some("tok.123"));
        assert_eq!(get("authorization"), Some("tok.123"));
        assert_eq!(get("hasleader"), Some("true"));
        assert_eq!(md.len(), 3);
    }

    #[test]
    fn every_route_has_its_method() {
        for (path, service, method) in ROUTES {
            let (grpc, m) = route(path).unwrap_or_else(|| panic!("{path}"));
            assert_eq!(grpc, format!("/{service}/{method}"));
            assert_eq!(m.name(), *method);
        }
        assert!(route("/v3beta/kv/range").is_some());
        assert!(route("/v3/kv/range/").is_none());
    }
}
