//! Running a member (etcd's `embed`): its listeners and the services on them, the tasks
//! beside them (`serve`), and v3 discovery of a new cluster's founding members (`discovery`).

pub mod discovery;
pub mod serve;
