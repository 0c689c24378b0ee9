//! etcd's "request stats" line (its gRPC log interceptor): a KV request slower than
//! `--warning-unary-request-duration` is logged as a warning, and every one at debug level,
//! with its duration, caller, sizes and what it asked (values left out, as etcd leaves them
//! out). Log pipelines watch for it to find slow requests.
//!
//! On the request path it costs one `Instant` and what [`Asked`] keeps (`Bytes` handles, which
//! share the request's buffer, and integers); the line is put together only when written.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use prost::Message;

use crate::proto::etcdserverpb as pb;

/// What a request asked, kept for its line while it is served.
pub(in crate::server) enum Asked {
    Range(pb::RangeRequest),
    Put {
        key: Bytes,
        value_size: usize,
        lease: i64,
        prev_kv: bool,
        size: usize,
    },
    DeleteRange(pb::DeleteRangeRequest),
    /// A txn's ops are moved into the change it makes; its line gives how many compares and
    /// ops it had and their sizes (etcd prints the whole txn, values left out).
    Txn {
        compares: usize,
        success: (usize, usize),
        failure: (usize, usize),
    },
    /// A call etcd's line counts nothing of (-1) and shows no request for (Compact).
    Other,
}

impl Asked {
    pub fn range(r: &pb::RangeRequest) -> Self {
        Asked::Range(r.clone())
    }

    pub fn put(r: &pb::PutRequest) -> Self {
        Asked::Put {
            key: r.key.clone(),
            value_size: r.value.len(),
            lease: r.lease,
            prev_kv: r.prev_kv,
            size: r.encoded_len(),
        }
    }

    pub fn delete_range(r: &pb::DeleteRangeRequest) -> Self {
        Asked::DeleteRange(r.clone())
    }

    pub fn txn(r: &pb::TxnRequest) -> Self {
        let ops = |ops: &[pb::RequestOp]| (ops.len(), ops.iter().map(|o| o.encoded_len()).sum());
        Asked::Txn { compares: r.compare.len(), success: ops(&r.success), failure: ops(&r.failure) }
    }
}

/// An answer's count for the line: the keys a Range counted, the keys a DeleteRange deleted.
pub(in crate::server) trait Answered: Message {
    fn count(&self) -> i64 {
        0
    }
    /// Whether a txn took its success branch (its request count and size are that branch's).
    fn succeeded(&self) -> bool {
        true
    }
}

impl Answered for pb::RangeResponse {
    fn count(&self) -> i64 {
        self.count
    }
}
impl Answered for pb::PutResponse {}
impl Answered for pb::DeleteRangeResponse {
    fn count(&self) -> i64 {
        self.deleted
    }
}
impl Answered for pb::TxnResponse {
    fn succeeded(&self) -> bool {
        self.succeeded
    }
}
impl Answered for pb::CompactionResponse {}

/// One request being timed.
pub(in crate::server) struct RequestStats {
    start: Instant,
    method: &'static str,
    remote: Option<SocketAddr>,
    asked: Asked,
}

impl RequestStats {
    /// Starts timing a call of `method` (gRPC's full name, `/etcdserverpb.KV/Put`).
    pub fn start(method: &'static str, remote: Option<SocketAddr>, asked: Asked) -> Self {
        RequestStats { start: Instant::now(), method, remote, asked }
    }

    /// Logs the call if it took longer than `warn_after` (a warning), or at debug level.
    pub fn finish<A: Answered, E>(self, warn_after: Duration, answer: &Result<A, E>) {
        let spent = self.start.elapsed();
        let slow = spent > warn_after;
        if !slow && !tracing::enabled!(tracing::Level::DEBUG) {
            return;
        }
        let started = crate::utc::timestamp(SystemTime::now() - spent);
        let remote = self.remote.map_or("No remote client info.".to_string(), |a| a.to_string());
        // A failed call has no answer: etcd then counts nothing (-1) and shows no request.
        let (req_count, req_size, resp_count, resp_size, content) = match answer {
            Err(_) => (-1, -1, -1, -1, String::new()),
            Ok(_) if matches!(self.asked, Asked::Other) => (-1, -1, -1, -1, String::new()),
            Ok(a) => {
                let (n, size, content) = self.asked.describe(a.succeeded());
                (n, size as i64, a.count(), a.encoded_len() as i64, content)
            }
        };
        let spent = crate::duration::go_format(spent);
        macro_rules! line {
            ($level:ident) => {
                tracing::$level!(
                    "start time" = %started,
                    "time spent" = %spent,
                    remote = %remote,
                    "response type" = self.method,
                    "request count" = req_count,
                    "request size" = req_size,
                    "response count" = resp_count,
                    "response size" = resp_size,
                    "request content" = %content,
                    "request stats"
                )
            };
        }
        if slow {
            line!(warn);
        } else {
            line!(debug);
        }
    }
}

impl Asked {
    /// The request's count, size and content as etcd's interceptor gives them: a Put counts
    /// 1, a txn its branch's ops; content in protobuf's text form.
    fn describe(&self, succeeded: bool) -> (i64, usize, String) {
        let mut c = String::new();
        match self {
            Asked::Range(r) => {
                range_text(&mut c, &r.key, &r.range_end);
                num(&mut c, "limit", r.limit);
                num(&mut c, "revision", r.revision);
                flag(&mut c, "serializable", r.serializable);
                flag(&mut c, "keys_only", r.keys_only);
                flag(&mut c, "count_only", r.count_only);
                (0, r.encoded_len(), c)
            }
            Asked::Put { key, value_size, lease, prev_kv, size } => {
                field(&mut c, "key", key);
                num(&mut c, "value_size", *value_size as i64);
                num(&mut c, "lease", *lease);
                flag(&mut c, "prev_kv", *prev_kv);
                (1, *size, c)
            }
            Asked::DeleteRange(r) => {
                range_text(&mut c, &r.key, &r.range_end);
                flag(&mut c, "prev_kv", r.prev_kv);
                (0, r.encoded_len(), c)
            }
            Asked::Txn { compares, success, failure } => {
                let (n, size) = if succeeded { *success } else { *failure };
                num(&mut c, "compare_count", *compares as i64);
                num(&mut c, "success_count", success.0 as i64);
                num(&mut c, "failure_count", failure.0 as i64);
                (n as i64, size, c)
            }
            Asked::Other => (-1, 0, c),
        }
    }
}

fn range_text(c: &mut String, key: &[u8], end: &[u8]) {
    field(c, "key", key);
    if !end.is_empty() {
        field(c, "range_end", end);
    }
}

/// `name:"bytes" ` as protobuf's text form writes a bytes field (octal escapes).
fn field(c: &mut String, name: &str, b: &[u8]) {
    let _ = write!(c, "{name}:\"");
    for &x in b {
        match x {
            b'"' => c.push_str("\\\""),
            b'\\' => c.push_str("\\\\"),
            b'\n' => c.push_str("\\n"),
            b'\r' => c.push_str("\\r"),
            b'\t' => c.push_str("\\t"),
            0x20..=0x7e => c.push(x as char),
            _ => {
                let _ = write!(c, "\\{x:03o}");
            }
        }
    }
    c.push_str("\" ");
}

fn num(c: &mut String, name: &str, v: i64) {
    if v != 0 {
        let _ = write!(c, "{name}:{v} ");
    }
}

fn flag(c: &mut String, name: &str, v: bool) {
    if v {
        let _ = write!(c, "{name}:true ");
    }
}
