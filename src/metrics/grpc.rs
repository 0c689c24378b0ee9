//! The gRPC call counters `/metrics` reports (etcd's `grpc_server_*`), kept by the member and
//! counted by the HTTP layer in front of every route for each call and its status code.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hashbrown::HashMap;

use super::Histogram;

/// How a gRPC method streams, as go-grpc-prometheus labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrpcKind {
    Unary,
    ServerStream,
    BidiStream,
}

impl GrpcKind {
    pub(crate) fn label(self) -> &'static str {
        match self {
            GrpcKind::Unary => "unary",
            GrpcKind::ServerStream => "server_stream",
            GrpcKind::BidiStream => "bidi_stream",
        }
    }
}

use GrpcKind::*;

/// Every method of etcd's v3 API (with its v3lock and v3election services): service, method,
/// kind.
pub(crate) const METHODS: &[(&str, &str, GrpcKind)] = &[
    ("etcdserverpb.KV", "Range", Unary),
    ("etcdserverpb.KV", "Put", Unary),
    ("etcdserverpb.KV", "DeleteRange", Unary),
    ("etcdserverpb.KV", "Txn", Unary),
    ("etcdserverpb.KV", "Compact", Unary),
    ("etcdserverpb.Watch", "Watch", BidiStream),
    ("etcdserverpb.Lease", "LeaseGrant", Unary),
    ("etcdserverpb.Lease", "LeaseRevoke", Unary),
    ("etcdserverpb.Lease", "LeaseKeepAlive", BidiStream),
    ("etcdserverpb.Lease", "LeaseTimeToLive", Unary),
    ("etcdserverpb.Lease", "LeaseLeases", Unary),
    ("etcdserverpb.Cluster", "MemberAdd", Unary),
    ("etcdserverpb.Cluster", "MemberRemove", Unary),
    ("etcdserverpb.Cluster", "MemberUpdate", Unary),
    ("etcdserverpb.Cluster", "MemberList", Unary),
    ("etcdserverpb.Cluster", "MemberPromote", Unary),
    ("etcdserverpb.Maintenance", "Alarm", Unary),
    ("etcdserverpb.Maintenance", "Status", Unary),
    ("etcdserverpb.Maintenance", "Defragment", Unary),
    ("etcdserverpb.Maintenance", "Hash", Unary),
    ("etcdserverpb.Maintenance", "HashKV", Unary),
    ("etcdserverpb.Maintenance", "Snapshot", ServerStream),
    ("etcdserverpb.Maintenance", "MoveLeader", Unary),
    ("etcdserverpb.Maintenance", "Downgrade", Unary),
    ("etcdserverpb.Auth", "AuthEnable", Unary),
    ("etcdserverpb.Auth", "AuthDisable", Unary),
    ("etcdserverpb.Auth", "AuthStatus", Unary),
    ("etcdserverpb.Auth", "Authenticate", Unary),
    ("etcdserverpb.Auth", "UserAdd", Unary),
    ("etcdserverpb.Auth", "UserGet", Unary),
    ("etcdserverpb.Auth", "UserList", Unary),
    ("etcdserverpb.Auth", "UserDelete", Unary),
    ("etcdserverpb.Auth", "UserChangePassword", Unary),
    ("etcdserverpb.Auth", "UserGrantRole", Unary),
    ("etcdserverpb.Auth", "UserRevokeRole", Unary),
    ("etcdserverpb.Auth", "RoleAdd", Unary),
    ("etcdserverpb.Auth", "RoleGet", Unary),
    ("etcdserverpb.Auth", "RoleList", Unary),
    ("etcdserverpb.Auth", "RoleDelete", Unary),
    ("etcdserverpb.Auth", "RoleGrantPermission", Unary),
    ("etcdserverpb.Auth", "RoleRevokePermission", Unary),
    ("v3lockpb.Lock", "Lock", Unary),
    ("v3lockpb.Lock", "Unlock", Unary),
    ("v3electionpb.Election", "Campaign", Unary),
    ("v3electionpb.Election", "Proclaim", Unary),
    ("v3electionpb.Election", "Leader", Unary),
    ("v3electionpb.Election", "Observe", ServerStream),
    ("v3electionpb.Election", "Resign", Unary),
];

/// gRPC status codes by number, as grpc-go spells them in labels.
pub(crate) const CODES: [&str; 17] = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];

/// The API versions etcd's clients announce (`client-api-version` metadata) that
/// `etcd_server_client_requests_total` labels by name; the others count as "unknown", as
/// calls without one do in etcd.
pub(crate) const CLIENT_VERSIONS: [&str; 9] =
    ["3.0", "3.1", "3.2", "3.3", "3.4", "3.5", "3.6", "3.7", "unknown"];

/// Calls started and handled, per method and code; messages received and sent, per method;
/// handling time per method (`--metrics=extensive`); calls per kind and client API version.
/// Fixed arrays of atomics: a call costs a few relaxed adds, and no lock is shared between
/// connections.
#[derive(Debug)]
pub struct GrpcStats {
    /// `/service/Method` to its index in `METHODS`; built once, read-only.
    by_path: HashMap<String, usize>,
    pub(crate) started: Vec<AtomicU64>,
    /// `handled[method * 17 + code]`.
    pub(crate) handled: Vec<AtomicU64>,
    pub(crate) msg_received: Vec<AtomicU64>,
    pub(crate) msg_sent: Vec<AtomicU64>,
    /// Per method, from the call's start to its status (kept with `--metrics=extensive`).
    pub(crate) handling: Vec<Histogram>,
    /// `client_requests[unary 0 / stream 1][CLIENT_VERSIONS index]`.
    pub(crate) client_requests: [[AtomicU64; CLIENT_VERSIONS.len()]; 2],
}

impl Default for GrpcStats {
    fn default() -> Self {
        let by_path =
            METHODS.iter().enumerate().map(|(i, (s, m, _))| (format!("/{s}/{m}"), i)).collect();
        Self {
            by_path,
            started: METHODS.iter().map(|_| AtomicU64::new(0)).collect(),
            handled: (0..METHODS.len() * CODES.len()).map(|_| AtomicU64::new(0)).collect(),
            msg_received: METHODS.iter().map(|_| AtomicU64::new(0)).collect(),
            msg_sent: METHODS.iter().map(|_| AtomicU64::new(0)).collect(),
            handling: METHODS.iter().map(|_| super::seconds()).collect(),
            client_requests: Default::default(),
        }
    }
}

impl GrpcStats {
    /// The method a request path calls, if it is one of etcd's.
    pub fn method(&self, path: &str) -> Option<usize> {
        self.by_path.get(path).copied()
    }

    pub fn kind(&self, method: usize) -> GrpcKind {
        METHODS[method].2
    }

    pub fn started(&self, method: usize) {
        self.started[method].fetch_add(1, Ordering::Relaxed);
    }

    /// A call of `method` from a client announcing API version `version` (etcd counts the
    /// calls of its own services only, as here).
    pub fn client_request(&self, method: usize, version: Option<&[u8]>) {
        let stream = usize::from(METHODS[method].2 != GrpcKind::Unary);
        let unknown = CLIENT_VERSIONS.len() - 1;
        let v = version
            .and_then(|v| CLIENT_VERSIONS[..unknown].iter().position(|k| k.as_bytes() == v))
            .unwrap_or(unknown);
        self.client_requests[stream][v].fetch_add(1, Ordering::Relaxed);
    }

    /// `n` messages received from the client of a call of `method`.
    pub fn received(&self, method: usize, n: u64) {
        self.msg_received[method].fetch_add(n, Ordering::Relaxed);
    }

    /// `n` messages sent to the client of a call of `method`.
    pub fn sent(&self, method: usize, n: u64) {
        self.msg_sent[method].fetch_add(n, Ordering::Relaxed);
    }

    /// A call of `method` that took `took` from its start to its status.
    pub fn handling(&self, method: usize, took: Duration) {
        self.handling[method].observe(took.as_secs_f64());
    }

    pub fn handled(&self, method: usize, code: u8) {
        let code = usize::from(code).min(CODES.len() - 1);
        self.handled[method * CODES.len() + code].fetch_add(1, Ordering::Relaxed);
    }

    /// Calls of `method` handled, whatever their code.
    pub(crate) fn handled_total(&self, method: &str) -> u64 {
        let Some(i) = METHODS.iter().position(|(_, m, _)| *m == method) else { return 0 };
        let row = &self.handled[i * CODES.len()..(i + 1) * CODES.len()];
        row.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

/// Counts the gRPC messages in a stream of bytes (a 1-byte flag and a 4-byte big-endian length
/// before each), whatever the HTTP/2 frames cut them into.
#[derive(Debug, Default)]
pub struct MessageCounter {
    /// Header bytes of the current message seen so far (0 between messages).
    got: u8,
    len: [u8; 4],
    /// Bytes of the current message's body still to come.
    left: u64,
}

impl MessageCounter {
    /// Feeds the next bytes; returns how many messages started in them.
    pub fn feed(&mut self, mut data: &[u8]) -> u64 {
        let mut started = 0;
        while !data.is_empty() {
            if self.left > 0 {
                let k = (self.left as usize).min(data.len());
                self.left -= k as u64;
                data = &data[k..];
                continue;
            }
            if self.got == 0 {
                started += 1;
            } else {
                self.len[usize::from(self.got) - 1] = data[0];
            }
            self.got += 1;
            data = &data[1..];
            if self.got == 5 {
                self.left = u64::from(u32::from_be_bytes(self.len));
                self.got = 0;
            }
        }
        started
    }
}

#[cfg(test)]
mod tests {
    use super::MessageCounter;

    #[test]
    fn messages_are_counted_across_frames() {
        let mut c = MessageCounter::default();
        // Two messages (3 and 0 bytes) in one frame, then one split inside its header.
        assert_eq!(c.feed(&[0, 0, 0, 0, 3, 1, 2, 3, 0, 0, 0, 0, 0]), 2);
        assert_eq!(c.feed(&[0, 0, 0]), 1);
        assert_eq!(c.feed(&[0, 2, 9]), 0);
        assert_eq!(c.feed(&[9, 0]), 1);
        assert_eq!(c.feed(&[0, 0, 0, 1, 7]), 0);
    }
}
