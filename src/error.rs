//! The crate's error type, as one table.
//!
//! Variants name etcd's error conditions. Each row of the table below gives everything an error
//! is known by: its stable number between members, its gRPC code and etcd's exact message
//! (clients match errors by message text, and retry by code). `v3rpc::status` turns a row into
//! a gRPC status; this module names the code through [`GrpcCode`], so that the store below it
//! never imports tonic.

use std::fmt;

/// A gRPC status code, by its number on the wire (the numbers are gRPC's, as `tonic::Code`'s):
/// the codes etcd answers its errors with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrpcCode {
    Unknown = 2,
    InvalidArgument = 3,
    NotFound = 5,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    OutOfRange = 11,
    Internal = 13,
    Unavailable = 14,
    DataLoss = 15,
    Unauthenticated = 16,
}

/// Declares [`Error`] from its table. A row is
///
/// ```text
/// /// doc comment
/// Variant = number, GrpcCode, "etcd's message";
/// ```
///
/// The number carries the error between members (see [`Error::code`]), so members of
/// different versions must agree on it: a row keeps its number forever, and a new row takes
/// the next one (append only). The numbers are also the enum's discriminants, so the compiler
/// refuses two rows with one number.
macro_rules! errors {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident = $code:literal, $grpc:ident, $message:literal;
    )*) => {
        /// Everything a request can fail with.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum Error {
            $( $(#[doc = $doc])* $variant = $code, )*
        }

        /// Every variant, in the table's order.
        const ALL: &[Error] = &[$(Error::$variant,)*];

        impl Error {
            /// etcd's message for this error (`api/v3rpc/rpctypes`).
            pub fn message(&self) -> &'static str {
                match self {
                    $(Error::$variant => $message,)*
                }
            }

            /// A stable number for the error, to carry it between members (see the table).
            pub fn code(&self) -> u32 {
                match self {
                    $(Error::$variant => $code,)*
                }
            }

            /// The error of [`Error::code`].
            pub fn from_code(code: u32) -> Option<Error> {
                match code {
                    $($code => Some(Error::$variant),)*
                    _ => None,
                }
            }

            /// etcd's gRPC code for this error (`api/v3rpc/rpctypes/error.go`).
            pub fn grpc_code(&self) -> GrpcCode {
                match self {
                    $(Error::$variant => GrpcCode::$grpc,)*
                }
            }
        }
    };
}

errors! {
    /// A request without a key.
    EmptyKey = 0, InvalidArgument, "etcdserver: key is not provided";
    /// `ignore_value`/`ignore_lease` on a key that does not exist, or an empty txn op.
    KeyNotFound = 1, InvalidArgument, "etcdserver: key not found";
    /// `ignore_value` with a value.
    ValueProvided = 2, InvalidArgument, "etcdserver: value is provided";
    /// `ignore_lease` with a lease.
    LeaseProvided = 3, InvalidArgument, "etcdserver: lease is provided";
    /// More compares or ops in a txn than `--max-txn-ops`.
    TooManyOps = 4, InvalidArgument, "etcdserver: too many operations in txn request";
    /// Two writes to one key in one txn.
    DuplicateKey = 5, InvalidArgument, "etcdserver: duplicate key given in txn request";
    /// A sort order or target outside the enum.
    InvalidSortOption = 6, InvalidArgument, "etcdserver: invalid sort option";
    /// The revision asked for is below the compaction revision.
    Compacted = 7, OutOfRange, "etcdserver: mvcc: required revision has been compacted";
    /// The revision asked for is above the current revision.
    FutureRev = 8, OutOfRange, "etcdserver: mvcc: required revision is a future revision";
    /// The encoded request exceeds `--max-request-bytes`.
    RequestTooLarge = 9, InvalidArgument, "etcdserver: request is too large";
    /// A write names a lease that does not exist.
    LeaseNotFound = 10, NotFound, "etcdserver: requested lease not found";
    /// LeaseGrant with the id of an existing lease.
    LeaseExists = 11, FailedPrecondition, "etcdserver: lease already exists";
    /// LeaseGrant with a TTL above etcd's maximum (9e9 s).
    LeaseTtlTooLarge = 12, OutOfRange, "etcdserver: too large lease TTL";
    /// An auth call that needs auth enabled (Authenticate) while it is disabled.
    AuthNotEnabled = 13, FailedPrecondition, "etcdserver: authentication is not enabled";
    /// Cluster membership cannot change on a single-member server.
    MemberChangeUnsupported = 14, FailedPrecondition, "etcdserver: not capable";
    /// The WAL cannot write (disk full, I/O error): writes are refused until it can.
    // Not an etcd error (etcd stops on a failed WAL write); worded in etcd's style. Unavailable,
    // as for the cluster's errors below: clients retry elsewhere or later, as for a member that
    // lost its disk.
    WalUnavailable = 15, Unavailable,
        "etcdserver: WAL write failed (disk full or I/O error); writes are refused until \
         it succeeds";
    /// A write that adds data past `--quota-backend-bytes`, or while the NOSPACE alarm is up.
    NoSpace = 16, ResourceExhausted, "etcdserver: mvcc: database space exceeded";
    /// A Maintenance.Snapshot stream that could not be completed.
    // Not an etcd error (etcd's snapshot fails only with its disk); etcd's style.
    SnapshotFailed = 17, Internal, "etcdserver: snapshot was not completed (see the server log)";
    // ----- a cluster's errors -----
    /// No leader is known (an election is going on, or a majority is unreachable).
    NoLeader = 18, Unavailable, "etcdserver: no leader";
    /// A proposal or read was not answered in time; it may still commit.
    Timeout = 19, Unavailable, "etcdserver: request timed out";
    /// A proposal was in flight when the leader changed; it may or may not have committed.
    TimeoutLeaderFail = 20, Unavailable,
        "etcdserver: request timed out, possibly due to previous leader failure";
    /// Leadership moved while a linearizable read waited.
    LeaderChanged = 21, Unavailable, "etcdserver: leader changed";
    /// This member is stopping.
    Stopped = 22, Unavailable, "etcdserver: server stopped";
    /// Between members only: the request reached a member that does not lead, and was not
    /// appended to any log (the sender may send it again, to the leader).
    // Not an etcd error: it never reaches a client (the sender retries at the leader).
    NotLeader = 23, Unavailable, "mem_etcd: not the leader; not appended";
    /// A membership change that could lose the quorum.
    UnhealthyCluster = 24, Unavailable, "etcdserver: unhealthy cluster";
    /// A member id that is not in the cluster.
    MemberNotFound = 25, NotFound, "etcdserver: member not found";
    /// MemberAdd or MemberUpdate with a peer URL another member has.
    PeerUrlExists = 26, FailedPrecondition, "etcdserver: Peer URLs already exists";
    /// MemberPromote of a voter.
    MemberNotLearner = 27, FailedPrecondition, "etcdserver: can only promote a learner member";
    /// MemberPromote of a learner that has not caught up with the leader.
    LearnerNotReady = 28, FailedPrecondition,
        "etcdserver: can only promote a learner member which is in sync with leader";
    /// MemberAdd of a learner while the cluster has one.
    TooManyLearners = 29, FailedPrecondition, "etcdserver: too many learner members in cluster";
    /// A learner asked for anything but Status, MemberList or a serializable read.
    // etcd's code for a learner's refusal: its Go client recognises exactly this status (code
    // and text) and, given other endpoints, retries the call on the next one.
    LearnerRpc = 30, FailedPrecondition, "etcdserver: rpc not supported for learner";
    /// MemberAdd or MemberRemove while too few members are started.
    // etcd's table maps it to the client side's error value, not to a gRPC status, so gRPC
    // answers it with code Unknown (and the text): what etcd 3.6's clients see.
    NotEnoughStartedMembers = 31, Unknown,
        "etcdserver: re-configuration failed due to not enough started members";
    /// MoveLeader on a member that does not lead.
    NotLeaderMoveLeader = 32, FailedPrecondition, "etcdserver: not leader";
    /// MoveLeader to a member that is not a voter in the cluster.
    BadLeaderTransferee = 33, FailedPrecondition, "etcdserver: bad leader transferee";
    /// Downgrade to a version that does not parse as `X.Y` or semver `X.Y.Z`.
    WrongDowngradeVersionFormat = 34, InvalidArgument,
        "etcdserver: wrong downgrade target version format";
    /// Downgrade to a version other than the cluster version's previous minor.
    InvalidDowngradeTargetVersion = 35, InvalidArgument,
        "etcdserver: invalid downgrade target version";
    /// A request with an action the server does not know (etcd's `ErrUnknownMethod`).
    UnknownMethod = 36, Unknown, "etcdserver: unknown method";
    /// Something that should not happen (the server log says what).
    Internal = 37, Internal, "etcdserver: internal error (see the server log)";
    // ----- authentication and authorization -----
    /// `auth enable` without a root user.
    RootUserNotExist = 38, FailedPrecondition, "etcdserver: root user does not exist";
    /// `auth enable` while the root user lacks the root role.
    RootRoleNotExist = 39, FailedPrecondition, "etcdserver: root user does not have root role";
    /// UserAdd of a name that exists.
    UserAlreadyExist = 40, FailedPrecondition, "etcdserver: user name already exists";
    /// A user name that is empty: UserAdd without one, or a request without credentials while
    /// auth is enabled.
    UserEmpty = 41, InvalidArgument, "etcdserver: user name is empty";
    /// A user that does not exist.
    UserNotFound = 42, FailedPrecondition, "etcdserver: user name not found";
    /// RoleAdd of a name that exists.
    RoleAlreadyExist = 43, FailedPrecondition, "etcdserver: role name already exists";
    /// A role that does not exist.
    RoleNotFound = 44, FailedPrecondition, "etcdserver: role name not found";
    /// RoleAdd without a name.
    RoleEmpty = 45, InvalidArgument, "etcdserver: role name is empty";
    /// Authenticate with an unknown user or a wrong password.
    AuthFailed = 46, InvalidArgument,
        "etcdserver: authentication failed, invalid user ID or password";
    /// RoleGrantPermission without a permission.
    PermissionNotGiven = 47, InvalidArgument, "etcdserver: permission not given";
    /// The caller's roles do not allow the request.
    PermissionDenied = 48, PermissionDenied, "etcdserver: permission denied";
    /// UserRevokeRole of a role the user does not have.
    RoleNotGranted = 49, FailedPrecondition, "etcdserver: role is not granted to the user";
    /// RoleRevokePermission of a range the role does not have.
    PermissionNotGranted = 50, FailedPrecondition,
        "etcdserver: permission is not granted to the role";
    /// A token that is unknown, expired or badly signed.
    InvalidAuthToken = 51, Unauthenticated, "etcdserver: invalid auth token";
    /// Deleting root or its role while auth is enabled; an invalid permission range.
    InvalidAuthMgmt = 52, InvalidArgument, "etcdserver: invalid auth management";
    /// The auth state changed since the caller's token was issued or checked.
    AuthOldRevision = 53, InvalidArgument, "etcdserver: revision of auth store is old";
    /// Authenticate as a user added with --no-password (not an rpctypes error: etcd answers it
    /// with code Unknown).
    NoPasswordUser = 54, Unknown,
        "auth: authentication failed, password was given for no password user";
    // ----- numbered after the auth errors, though not one -----
    /// A write while the CORRUPT alarm is raised (a member's store differed from the leader's).
    Corrupt = 55, DataLoss, "etcdserver: corrupt cluster";
    // ----- etcd's Lock and Election services (not rpctypes errors: code Unknown) -----
    /// Proclaim or Resign without a leader key (etcd's `v3election.ErrMissingLeaderKey`).
    MissingLeaderKey = 56, Unknown, "\"leader\" field must be provided";
    /// Proclaim by a candidate whose key is gone or was created again
    /// (`concurrency.ErrElectionNotLeader`).
    ElectionNotLeader = 57, Unknown, "election: not leader";
    /// Leader of an election without candidates (`concurrency.ErrElectionNoLeader`).
    ElectionNoLeader = 58, Unknown, "election: no leader";
    /// A Lock whose own key went (its lease expired or was revoked) while it waited
    /// (`concurrency.ErrSessionExpired`).
    SessionExpired = 59, Unknown, "mutex: session is expired";
    // ----- numbered after the Lock and Election errors: an auth error -----
    /// Authenticate on a member whose JWT key is only a public key (etcd answers it with code
    /// Unknown).
    VerifyOnly = 60, Unknown, "auth: token signing attempted with verify-only key";
}

impl Error {
    /// The error whose message `message` is: how a member recognises an error another member
    /// answered with (statuses between members carry these messages, as to clients). Where
    /// rows share a message, the first.
    pub fn from_message(message: &str) -> Option<Error> {
        ALL.iter().find(|e| e.message() == message).cloned()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers go from 0 with no gap (the compiler already refuses a number used twice):
    /// a gap is a row deleted or a number skipped, and members of other versions read it as
    /// another error or none.
    #[test]
    fn numbers_are_dense_from_zero() {
        let mut codes: Vec<u32> = ALL.iter().map(Error::code).collect();
        codes.sort_unstable();
        let dense: Vec<u32> = (0..ALL.len() as u32).collect();
        assert_eq!(codes, dense);
        assert_eq!(Error::from_code(ALL.len() as u32), None);
    }

    #[test]
    fn every_error_comes_back_from_its_number() {
        for e in ALL {
            assert_eq!(Error::from_code(e.code()).as_ref(), Some(e), "{e:?}");
        }
    }

    /// An error answered by another member is recognised by its message: that works for every
    /// error whose message no other row has (all of them today, checked rather than assumed).
    #[test]
    fn every_error_with_its_own_message_comes_back_from_it() {
        for e in ALL {
            let shared = ALL.iter().filter(|o| o.message() == e.message()).count() > 1;
            let back = Error::from_message(e.message());
            if shared {
                assert_eq!(back.map(|b| b.message()), Some(e.message()), "{e:?}");
            } else {
                assert_eq!(back.as_ref(), Some(e), "{e:?}");
            }
        }
        assert_eq!(Error::from_message("etcdserver: no such error"), None);
    }
}
