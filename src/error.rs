//! The crate's error type.
//!
//! Variants name etcd's error conditions; the gRPC layer turns each into etcd's exact status code
//! and message in one table (`v3rpc::status`), because clients match errors by message text.

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
    /// An auth call that needs auth enabled (Authenticate) while it is disabled.
    AuthNotEnabled,
    /// Cluster membership cannot change on a single-member server.
    MemberChangeUnsupported,
    /// The WAL cannot write (disk full, I/O error): writes are refused until it can.
    WalUnavailable,
    /// A write that adds data past `--quota-backend-bytes`, or while the NOSPACE alarm is up.
    NoSpace,
    /// A Maintenance.Snapshot stream that could not be completed.
    SnapshotFailed,
    // ----- a cluster's errors -----
    /// No leader is known (an election is going on, or a majority is unreachable).
    NoLeader,
    /// A proposal or read was not answered in time; it may still commit.
    Timeout,
    /// A proposal was in flight when the leader changed; it may or may not have committed.
    TimeoutLeaderFail,
    /// Leadership moved while a linearizable read waited.
    LeaderChanged,
    /// This member is stopping.
    Stopped,
    /// Between members only: the request reached a member that does not lead, and was not
    /// appended to any log (the sender may send it again, to the leader).
    NotLeader,
    /// A membership change that could lose the quorum.
    UnhealthyCluster,
    /// A member id that is not in the cluster.
    MemberNotFound,
    /// MemberAdd or MemberUpdate with a peer URL another member has.
    PeerUrlExists,
    /// MemberPromote of a voter.
    MemberNotLearner,
    /// MemberPromote of a learner that has not caught up with the leader.
    LearnerNotReady,
    /// MemberAdd of a learner while the cluster has one.
    TooManyLearners,
    /// A learner asked for anything but Status, MemberList or a serializable read.
    LearnerRpc,
    /// MemberAdd or MemberRemove while too few members are started.
    NotEnoughStartedMembers,
    /// MoveLeader on a member that does not lead.
    NotLeaderMoveLeader,
    /// MoveLeader to a member that is not a voter in the cluster.
    BadLeaderTransferee,
    /// Downgrade to a version that does not parse as `X.Y` or semver `X.Y.Z`.
    WrongDowngradeVersionFormat,
    /// Downgrade to a version other than the cluster version's previous minor.
    InvalidDowngradeTargetVersion,
    /// A request with an action the server does not know (etcd's `ErrUnknownMethod`).
    UnknownMethod,
    // ----- authentication and authorization -----
    /// `auth enable` without a root user.
    RootUserNotExist,
    /// `auth enable` while the root user lacks the root role.
    RootRoleNotExist,
    /// UserAdd of a name that exists.
    UserAlreadyExist,
    /// A user name that is empty: UserAdd without one, or a request without credentials while auth is enabled.
    UserEmpty,
    /// A user that does not exist.
    UserNotFound,
    /// RoleAdd of a name that exists.
    RoleAlreadyExist,
    /// A role that does not exist.
    RoleNotFound,
    /// RoleAdd without a name.
    RoleEmpty,
    /// Authenticate with an unknown user or a wrong password.
    AuthFailed,
    /// RoleGrantPermission without a permission.
    PermissionNotGiven,
    /// The caller's roles do not allow the request.
    PermissionDenied,
    /// UserRevokeRole of a role the user does not have.
    RoleNotGranted,
    /// RoleRevokePermission of a range the role does not have.
    PermissionNotGranted,
    /// A token that is unknown, expired or badly signed.
    InvalidAuthToken,
    /// Deleting root or its role while auth is enabled; an invalid permission range.
    InvalidAuthMgmt,
    /// The auth state changed since the caller's token was issued or checked.
    AuthOldRevision,
    /// Authenticate as a user added with --no-password (not an rpctypes error: etcd answers it with code Unknown).
    NoPasswordUser,
    /// Authenticate on a member whose JWT key is only a public key (etcd answers it with code Unknown).
    VerifyOnly,
    /// Something that should not happen (the server log says what).
    Internal,
    /// A write while the CORRUPT alarm is raised (a member's store differed from the leader's).
    Corrupt,
    // ----- etcd's Lock and Election services (not rpctypes errors: code Unknown) -----
    /// Proclaim or Resign without a leader key (etcd's `v3election.ErrMissingLeaderKey`).
    MissingLeaderKey,
    /// Proclaim by a candidate whose key is gone or was created again
    /// (`concurrency.ErrElectionNotLeader`).
    ElectionNotLeader,
    /// Leader of an election without candidates (`concurrency.ErrElectionNoLeader`).
    ElectionNoLeader,
    /// A Lock whose own key went (its lease expired or was revoked) while it waited
    /// (`concurrency.ErrSessionExpired`).
    SessionExpired,
}

/// Every variant, in a fixed order: an error's position here is its code between members
/// (see [`Error::code`]). Append only.
const ALL: &[Error] = &[
    Error::EmptyKey,
    Error::KeyNotFound,
    Error::ValueProvided,
    Error::LeaseProvided,
    Error::TooManyOps,
    Error::DuplicateKey,
    Error::InvalidSortOption,
    Error::Compacted,
    Error::FutureRev,
    Error::RequestTooLarge,
    Error::LeaseNotFound,
    Error::LeaseExists,
    Error::LeaseTtlTooLarge,
    Error::AuthNotEnabled,
    Error::MemberChangeUnsupported,
    Error::WalUnavailable,
    Error::NoSpace,
    Error::SnapshotFailed,
    Error::NoLeader,
    Error::Timeout,
    Error::TimeoutLeaderFail,
    Error::LeaderChanged,
    Error::Stopped,
    Error::NotLeader,
    Error::UnhealthyCluster,
    Error::MemberNotFound,
    Error::PeerUrlExists,
    Error::MemberNotLearner,
    Error::LearnerNotReady,
    Error::TooManyLearners,
    Error::LearnerRpc,
    Error::NotEnoughStartedMembers,
    Error::NotLeaderMoveLeader,
    Error::BadLeaderTransferee,
    Error::WrongDowngradeVersionFormat,
    Error::InvalidDowngradeTargetVersion,
    Error::UnknownMethod,
    Error::Internal,
    Error::RootUserNotExist,
    Error::RootRoleNotExist,
    Error::UserAlreadyExist,
    Error::UserEmpty,
    Error::UserNotFound,
    Error::RoleAlreadyExist,
    Error::RoleNotFound,
    Error::RoleEmpty,
    Error::AuthFailed,
    Error::PermissionNotGiven,
    Error::PermissionDenied,
    Error::RoleNotGranted,
    Error::PermissionNotGranted,
    Error::InvalidAuthToken,
    Error::InvalidAuthMgmt,
    Error::AuthOldRevision,
    Error::NoPasswordUser,
    Error::Corrupt,
    Error::MissingLeaderKey,
    Error::ElectionNotLeader,
    Error::ElectionNoLeader,
    Error::SessionExpired,
    Error::VerifyOnly,
];

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
            Error::Corrupt => "etcdserver: corrupt cluster",
            // Not an etcd error (etcd's snapshot fails only with its disk); etcd's style.
            Error::SnapshotFailed => "etcdserver: snapshot was not completed (see the server log)",
            // Not an etcd error (etcd stops on a failed WAL write); worded in etcd's style.
            Error::WalUnavailable => {
                "etcdserver: WAL write failed (disk full or I/O error); writes are refused until \
                 it succeeds"
            }
            Error::NoLeader => "etcdserver: no leader",
            Error::Timeout => "etcdserver: request timed out",
            Error::TimeoutLeaderFail => {
                "etcdserver: request timed out, possibly due to previous leader failure"
            }
            Error::LeaderChanged => "etcdserver: leader changed",
            Error::Stopped => "etcdserver: server stopped",
            // Not an etcd error: it never reaches a client (the sender retries at the leader).
            Error::NotLeader => "mem_etcd: not the leader; not appended",
            Error::UnhealthyCluster => "etcdserver: unhealthy cluster",
            Error::MemberNotFound => "etcdserver: member not found",
            Error::PeerUrlExists => "etcdserver: Peer URLs already exists",
            Error::MemberNotLearner => "etcdserver: can only promote a learner member",
            Error::LearnerNotReady => {
                "etcdserver: can only promote a learner member which is in sync with leader"
            }
            Error::TooManyLearners => "etcdserver: too many learner members in cluster",
            Error::LearnerRpc => "etcdserver: rpc not supported for learner",
            Error::NotEnoughStartedMembers => {
                "etcdserver: re-configuration failed due to not enough started members"
            }
            Error::NotLeaderMoveLeader => "etcdserver: not leader",
            Error::BadLeaderTransferee => "etcdserver: bad leader transferee",
            Error::WrongDowngradeVersionFormat => {
                "etcdserver: wrong downgrade target version format"
            }
            Error::InvalidDowngradeTargetVersion => "etcdserver: invalid downgrade target version",
            Error::UnknownMethod => "etcdserver: unknown method",
            Error::Internal => "etcdserver: internal error (see the server log)",
            Error::RootUserNotExist => "etcdserver: root user does not exist",
            Error::RootRoleNotExist => "etcdserver: root user does not have root role",
            Error::UserAlreadyExist => "etcdserver: user name already exists",
            Error::UserEmpty => "etcdserver: user name is empty",
            Error::UserNotFound => "etcdserver: user name not found",
            Error::RoleAlreadyExist => "etcdserver: role name already exists",
            Error::RoleNotFound => "etcdserver: role name not found",
            Error::RoleEmpty => "etcdserver: role name is empty",
            Error::AuthFailed => "etcdserver: authentication failed, invalid user ID or password",
            Error::PermissionNotGiven => "etcdserver: permission not given",
            Error::PermissionDenied => "etcdserver: permission denied",
            Error::RoleNotGranted => "etcdserver: role is not granted to the user",
            Error::PermissionNotGranted => "etcdserver: permission is not granted to the role",
            Error::InvalidAuthToken => "etcdserver: invalid auth token",
            Error::InvalidAuthMgmt => "etcdserver: invalid auth management",
            Error::AuthOldRevision => "etcdserver: revision of auth store is old",
            Error::NoPasswordUser => {
                "auth: authentication failed, password was given for no password user"
            }
            Error::VerifyOnly => "auth: token signing attempted with verify-only key",
            Error::MissingLeaderKey => "\"leader\" field must be provided",
            Error::ElectionNotLeader => "election: not leader",
            Error::ElectionNoLeader => "election: no leader",
            Error::SessionExpired => "mutex: session is expired",
        }
    }

    /// A stable number for the error, to carry it between members: its place in [`ALL`]. A
    /// match rather than a search of `ALL`, so that a new variant cannot compile without a
    /// number (one missing from `ALL` made applying its error panic on every member);
    /// `codes_are_places_in_all` checks that the two agree.
    pub fn code(&self) -> u32 {
        match self {
            Error::EmptyKey => 0,
            Error::KeyNotFound => 1,
            Error::ValueProvided => 2,
            Error::LeaseProvided => 3,
            Error::TooManyOps => 4,
            Error::DuplicateKey => 5,
            Error::InvalidSortOption => 6,
            Error::Compacted => 7,
            Error::FutureRev => 8,
            Error::RequestTooLarge => 9,
            Error::LeaseNotFound => 10,
            Error::LeaseExists => 11,
            Error::LeaseTtlTooLarge => 12,
            Error::AuthNotEnabled => 13,
            Error::MemberChangeUnsupported => 14,
            Error::WalUnavailable => 15,
            Error::NoSpace => 16,
            Error::SnapshotFailed => 17,
            Error::NoLeader => 18,
            Error::Timeout => 19,
            Error::TimeoutLeaderFail => 20,
            Error::LeaderChanged => 21,
            Error::Stopped => 22,
            Error::NotLeader => 23,
            Error::UnhealthyCluster => 24,
            Error::MemberNotFound => 25,
            Error::PeerUrlExists => 26,
            Error::MemberNotLearner => 27,
            Error::LearnerNotReady => 28,
            Error::TooManyLearners => 29,
            Error::LearnerRpc => 30,
            Error::NotEnoughStartedMembers => 31,
            Error::NotLeaderMoveLeader => 32,
            Error::BadLeaderTransferee => 33,
            Error::WrongDowngradeVersionFormat => 34,
            Error::InvalidDowngradeTargetVersion => 35,
            Error::UnknownMethod => 36,
            Error::Internal => 37,
            Error::RootUserNotExist => 38,
            Error::RootRoleNotExist => 39,
            Error::UserAlreadyExist => 40,
            Error::UserEmpty => 41,
            Error::UserNotFound => 42,
            Error::RoleAlreadyExist => 43,
            Error::RoleNotFound => 44,
            Error::RoleEmpty => 45,
            Error::AuthFailed => 46,
            Error::PermissionNotGiven => 47,
            Error::PermissionDenied => 48,
            Error::RoleNotGranted => 49,
            Error::PermissionNotGranted => 50,
            Error::InvalidAuthToken => 51,
            Error::InvalidAuthMgmt => 52,
            Error::AuthOldRevision => 53,
            Error::NoPasswordUser => 54,
            Error::Corrupt => 55,
            Error::MissingLeaderKey => 56,
            Error::ElectionNotLeader => 57,
            Error::ElectionNoLeader => 58,
            Error::SessionExpired => 59,
            Error::VerifyOnly => 60,
        }
    }

    /// The error of [`Error::code`].
    pub fn from_code(code: u32) -> Option<Error> {
        ALL.get(code as usize).cloned()
    }

    /// The error whose message `message` is: how a member recognises an error another member
    /// answered with (statuses between members carry these messages, as to clients).
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

    #[test]
    fn codes_are_places_in_all() {
        for (i, e) in ALL.iter().enumerate() {
            assert_eq!(e.code() as usize, i, "{e:?}");
            assert_eq!(Error::from_code(i as u32).as_ref(), Some(e));
        }
        assert_eq!(Error::VerifyOnly.code() as usize, ALL.len() - 1);
    }
}
