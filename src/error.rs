//! The crate's error type.
//!
//! Variants name etcd's error conditions; the gRPC layer turns each into etcd's exact status code
//! and message in one table (`server::status`), because clients match errors by message text.

use std::fmt;

/// Everything a request can fail with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// A request without a key.
    EmptyKey,
    /// `ignore_value`/`ignore_lease` on a key that does not exist, or an empty txn op.
    KeyNotFound,
    /// `ignore_value` with a value.
    ValueProvided,
    /// `ignore_lease` with a lease.
    LeaseProvided,
    /// More compares or ops in a txn than `--max-txn-ops`.
    TooManyOps,
    /// Two writes to one key in one txn.
    DuplicateKey,
    /// A sort order or target outside the enum.
    InvalidSortOption,
    /// The revision asked for is below the compaction revision.
    Compacted,
    /// The revision asked for is above the current revision.
    FutureRev,
    /// The encoded request exceeds `--max-request-bytes`.
    RequestTooLarge,
    /// A write names a lease that does not exist.
    LeaseNotFound,
    /// LeaseGrant with the id of an existing lease.
    LeaseExists,
    /// LeaseGrant with a TTL above etcd's maximum (9e9 s).
    LeaseTtlTooLarge,
    /// An auth call while auth is disabled (always, for now).
    AuthNotEnabled,
    /// Cluster membership cannot change on a single-member server.
    MemberChangeUnsupported,
    /// The WAL cannot write (disk full, I/O error): writes are refused until it can.
    WalUnavailable,
    /// A write that adds data past `--quota-backend-bytes`, or while the NOSPACE alarm is up.
    NoSpace,
    /// A Maintenance.Snapshot stream that could not be completed.
    SnapshotFailed,
}

impl Error {
    /// etcd's message for this error (`api/v3rpc/rpctypes`).
    pub fn message(&self) -> &'static str {
        match self {
            Error::EmptyKey => "etcdserver: key is not provided",
            Error::KeyNotFound => "etcdserver: key not found",
            Error::ValueProvided => "etcdserver: value is provided",
            Error::LeaseProvided => "etcdserver: lease is provided",
            Error::TooManyOps => "etcdserver: too many operations in txn request",
            Error::DuplicateKey => "etcdserver: duplicate key given in txn request",
            Error::InvalidSortOption => "etcdserver: invalid sort option",
            Error::Compacted => "etcdserver: mvcc: required revision has been compacted",
            Error::FutureRev => "etcdserver: mvcc: required revision is a future revision",
            Error::RequestTooLarge => "etcdserver: request is too large",
            Error::LeaseNotFound => "etcdserver: requested lease not found",
            Error::LeaseExists => "etcdserver: lease already exists",
            Error::LeaseTtlTooLarge => "etcdserver: too large lease TTL",
            Error::AuthNotEnabled => "etcdserver: authentication is not enabled",
            Error::MemberChangeUnsupported => "etcdserver: not capable",
            Error::NoSpace => "etcdserver: mvcc: database space exceeded",
            // Not an etcd error (etcd's snapshot fails only with its disk); etcd's style.
            Error::SnapshotFailed => "etcdserver: snapshot was not completed (see the server log)",
            // Not an etcd error (etcd stops on a failed WAL write); worded in etcd's style.
            Error::WalUnavailable => {
                "etcdserver: WAL write failed (disk full or I/O error); writes are refused until \
                 it succeeds"
            }
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;
