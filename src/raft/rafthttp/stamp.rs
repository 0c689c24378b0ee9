//! The stamp on every call and stream between members: the caller's cluster id and member id,
//! which the receiving member checks, so that two clusters sharing addresses never merge.

use tonic::metadata::MetadataValue;

/// Metadata keys of the stamp on every peer call.
pub const CLUSTER_ID_KEY: &str = "memetcd-cluster-id";
pub const MEMBER_ID_KEY: &str = "memetcd-member-id";

/// Adds the stamp to a call.
#[derive(Clone, Debug)]
pub struct Stamp {
    pub cluster: MetadataValue<tonic::metadata::Ascii>,
    pub member: MetadataValue<tonic::metadata::Ascii>,
}

impl tonic::service::Interceptor for Stamp {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        req.metadata_mut().insert(CLUSTER_ID_KEY, self.cluster.clone());
        req.metadata_mut().insert(MEMBER_ID_KEY, self.member.clone());
        Ok(req)
    }
}

/// Refuses a call from another cluster (etcd answers such peers "cluster ID mismatch"), so two
/// clusters sharing addresses never merge. Returns the caller's member id.
pub fn check_stamp<T>(req: &tonic::Request<T>, cluster_id: u64) -> Result<u64, tonic::Status> {
    let get = |k: &str| {
        req.metadata()
            .get(k)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| u64::from_str_radix(v, 16).ok())
    };
    check_ids(get(CLUSTER_ID_KEY), get(MEMBER_ID_KEY), cluster_id)
}

/// [`check_stamp`] of a stamp's values, wherever they came in (an `Append` stream's upgrade
/// carries them as headers).
pub fn check_ids(
    cluster: Option<u64>,
    member: Option<u64>,
    cluster_id: u64,
) -> Result<u64, tonic::Status> {
    match (cluster, member) {
        (Some(c), Some(m)) if c == cluster_id => Ok(m),
        (Some(c), _) => Err(tonic::Status::failed_precondition(format!(
            "cluster ID mismatch: this member is in cluster {cluster_id:x}, the caller in {c:x}"
        ))),
        _ => Err(tonic::Status::invalid_argument("a peer call without cluster and member ids")),
    }
}
