//! Internal errors as gRPC statuses. The table of each error's code and text is
//! [`crate::error`]'s; etcd clients map errors back by their message text and retry by code, so
//! both must be etcd's exactly.

use tonic::{Code, Status};

use crate::error::Error;
use crate::server::etcdserver::grow::GrowError;
use crate::server::etcdserver::membership::ChangeError;

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
        Status::new(Code::from_i32(e.grpc_code() as i32), e.message())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// [`crate::error::GrpcCode`]'s numbers are gRPC's: each turns into the `Code` of its name.
    #[test]
    fn grpc_codes_are_tonic_codes() {
        let mut n = 0;
        while let Some(e) = Error::from_code(n) {
            let c = e.grpc_code();
            assert_eq!(format!("{:?}", Code::from_i32(c as i32)), format!("{c:?}"), "{e:?}");
            n += 1;
        }
        assert!(n > 0);
    }
}
