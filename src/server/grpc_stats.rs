//! The gRPC call counters `/metrics` reports (etcd's `grpc_server_*`), counted by the HTTP
//! layer in front of every route for each call and its status code.

use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::HashMap;

/// How a gRPC method streams, as go-grpc-prometheus labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrpcKind {
    Unary,
    ServerStream,
    BidiStream,
}

impl GrpcKind {
    pub(super) fn label(self) -> &'static str {
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
pub(super) const METHODS: &[(&str, &str, GrpcKind)] = &[
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
pub(super) const CODES: [&str; 17] = [
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

/// Calls started and handled, per method and code. Fixed arrays of atomics: a call costs two
/// relaxed adds, and no lock is shared between connections.
#[derive(Debug)]
pub struct GrpcStats {
    /// `/service/Method` to its index in `METHODS`; built once, read-only.
    by_path: HashMap<String, usize>,
    pub(super) started: Vec<AtomicU64>,
    /// `handled[method * 17 + code]`.
    pub(super) handled: Vec<AtomicU64>,
}

impl Default for GrpcStats {
    fn default() -> Self {
        let by_path =
            METHODS.iter().enumerate().map(|(i, (s, m, _))| (format!("/{s}/{m}"), i)).collect();
        Self {
            by_path,
            started: METHODS.iter().map(|_| AtomicU64::new(0)).collect(),
            handled: (0..METHODS.len() * CODES.len()).map(|_| AtomicU64::new(0)).collect(),
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

    pub fn handled(&self, method: usize, code: u8) {
        let code = usize::from(code).min(CODES.len() - 1);
        self.handled[method * CODES.len() + code].fetch_add(1, Ordering::Relaxed);
    }

    /// Calls of `method` handled, whatever their code.
    pub(super) fn handled_total(&self, method: &str) -> u64 {
        let Some(i) = METHODS.iter().position(|(_, m, _)| *m == method) else { return 0 };
        let row = &self.handled[i * CODES.len()..(i + 1) * CODES.len()];
        row.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}
