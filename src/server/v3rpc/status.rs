//! The one table from internal errors to gRPC statuses. etcd clients map errors back by their
//! message text and retry by code, so both must be etcd's exactly.

use tonic::{Code, Status};

use crate::error::Error;
use crate::server::etcdserver::grow::GrowError;
use crate::server::etcdserver::membership::ChangeError;

/// etcd's gRPC code for each error (`api/v3rpc/rpctypes/error.go`); the text is
/// [`Error::message`].
pub fn code(e: &Error) -> Code {
    match e {
        Error::EmptyKey
        | Error::KeyNotFound
        | Error::ValueProvided
        | Error::LeaseProvided
        | Error::TooManyOps
        | Error::DuplicateKey
        | Error::InvalidSortOption
        | Error::RequestTooLarge
        | Error::WrongDowngradeVersionFormat
        | Error::InvalidDowngradeTargetVersion => Code::InvalidArgument,
        Error::Compacted | Error::FutureRev | Error::LeaseTtlTooLarge => Code::OutOfRange,
        Error::LeaseNotFound => Code::NotFound,
        Error::AuthNotEnabled | Error::MemberChangeUnsupported | Error::LeaseExists => {
            Code::FailedPrecondition
        }
        // Unavailable: clients retry elsewhere or later, as for a member that lost its disk.
        Error::WalUnavailable
        | Error::NoLeader
        | Error::Timeout
        | Error::TimeoutLeaderFail
        | Error::LeaderChanged
        | Error::Stopped
        | Error::NotLeader
        | Error::UnhealthyCluster => Code::Unavailable,
        Error::NoSpace => Code::ResourceExhausted,
        Error::Corrupt => Code::DataLoss,
        Error::SnapshotFailed | Error::Internal => Code::Internal,
        Error::MemberNotFound => Code::NotFound,
        Error::PeerUrlExists
        | Error::MemberNotLearner
        | Error::LearnerNotReady
        | Error::TooManyLearners
        | Error::NotLeaderMoveLeader
        | Error::BadLeaderTransferee => Code::FailedPrecondition,
        // etcd's code for a learner's refusal: its Go client recognises exactly this status
        // (code and text) and, given other endpoints, retries the call on the next one.
        Error::LearnerRpc => Code::FailedPrecondition,
        Error::RootUserNotExist
        | Error::RootRoleNotExist
        | Error::UserAlreadyExist
        | Error::UserNotFound
        | Error::RoleAlreadyExist
        | Error::RoleNotFound
        | Error::RoleNotGranted
        | Error::PermissionNotGranted => Code::FailedPrecondition,
        Error::UserEmpty
        | Error::RoleEmpty
        | Error::AuthFailed
        | Error::PermissionNotGiven
        | Error::InvalidAuthMgmt
        | Error::AuthOldRevision => Code::InvalidArgument,
        Error::PermissionDenied => Code::PermissionDenied,
        Error::InvalidAuthToken => Code::Unauthenticated,
        Error::NoPasswordUser | Error::VerifyOnly | Error::UnknownMethod => Code::Unknown,
        Error::MissingLeaderKey
        | Error::ElectionNotLeader
        | Error::ElectionNoLeader
        | Error::SessionExpired => Code::Unknown,
        // etcd's table maps it to the client side's error value, not to a gRPC status, so
        // gRPC answers it with code Unknown (and the text): what etcd 3.6's clients see.
        Error::NotEnoughStartedMembers => Code::Unknown,
    }
}

/// An error of the Lock and Election services. etcd serves them as clients of its own KV,
/// Lease and Watch, and its client turns every etcd error it gets into a plain error value, so
/// gRPC answers all of them with code Unknown and the same text (a learner is refused before,
/// with its own code, as by etcd's interceptor).
pub fn through_client(e: Error) -> Status {
    match e {
        Error::LearnerRpc => e.into(),
        e => Status::new(Code::Unknown, e.message()),
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Self {
        Status::new(code(&e), e.message())
    }
}

impl From<GrowError> for Status {
    fn from(e: GrowError) -> Self {
        match e {
            GrowError::Unsupported => Error::MemberChangeUnsupported.into(),
            GrowError::Refused(m) => Status::failed_precondition(m),
            GrowError::Unavailable(m) => Status::unavailable(m),
            GrowError::Failed(m) => Status::internal(m),
        }
    }
}

impl From<ChangeError> for Status {
    fn from(e: ChangeError) -> Self {
        match e {
            ChangeError::Etcd(e) => e.into(),
            ChangeError::Grow(e) => e.into(),
        }
    }
}
