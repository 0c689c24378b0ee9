//! The store's request and response types: etcd's KV API without the wire encoding, so the
//! storage layer never depends on gRPC or generated code.

use bytes::Bytes;

/// A key and its metadata as returned to clients (etcd's `mvccpb.KeyValue`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyValue {
    pub key: Bytes,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    pub value: Bytes,
    pub lease: i64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortOrder {
    #[default]
    None,
    Ascend,
    Descend,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortTarget {
    #[default]
    Key,
    Version,
    Create,
    Mod,
    Value,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeRequest {
    pub key: Bytes,
    pub range_end: Bytes,
    pub limit: i64,
    pub revision: i64,
    pub sort_order: SortOrder,
    pub sort_target: SortTarget,
    pub serializable: bool,
    pub keys_only: bool,
    pub count_only: bool,
    pub min_mod_revision: i64,
    pub max_mod_revision: i64,
    pub min_create_revision: i64,
    pub max_create_revision: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeResponse {
    /// The header revision: the store's current revision, also for reads in the past.
    pub revision: i64,
    pub kvs: Vec<KeyValue>,
    pub more: bool,
    pub count: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PutRequest {
    pub key: Bytes,
    pub value: Bytes,
    pub lease: i64,
    pub prev_kv: bool,
    pub ignore_value: bool,
    pub ignore_lease: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PutResponse {
    pub revision: i64,
    pub prev_kv: Option<KeyValue>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteRangeRequest {
    pub key: Bytes,
    pub range_end: Bytes,
    pub prev_kv: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeleteRangeResponse {
    pub revision: i64,
    pub deleted: i64,
    pub prev_kvs: Vec<KeyValue>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareResult {
    Equal,
    Greater,
    Less,
    NotEqual,
    /// A result outside the enum: etcd treats the compare as true.
    Unknown,
}

/// What a compare looks at, with the operand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompareTarget {
    Version(i64),
    Create(i64),
    Mod(i64),
    Value(Bytes),
    Lease(i64),
    /// A target outside the enum: etcd compares it as equal.
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compare {
    pub key: Bytes,
    pub range_end: Bytes,
    pub target: CompareTarget,
    pub result: CompareResult,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestOp {
    Range(RangeRequest),
    Put(PutRequest),
    DeleteRange(DeleteRangeRequest),
    Txn(TxnRequest),
    /// An op with no request set; etcd refuses it with "key not found".
    Empty,
    /// Internal (lease revocation, never from the wire): delete `key` if it is still attached
    /// to `lease`. Answered like a DeleteRange.
    DeleteLeased {
        key: Bytes,
        lease: i64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResponseOp {
    Range(RangeResponse),
    Put(PutResponse),
    DeleteRange(DeleteRangeResponse),
    Txn(TxnResponse),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxnRequest {
    pub compare: Vec<Compare>,
    pub success: Vec<RequestOp>,
    pub failure: Vec<RequestOp>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxnResponse {
    /// Header revision. etcd leaves nested txn headers at 0; only the outermost is filled.
    pub revision: i64,
    pub succeeded: bool,
    pub responses: Vec<ResponseOp>,
}

impl TxnRequest {
    /// A txn that only reads, whatever its compares decide (etcd's `IsTxnReadonly`).
    pub fn is_read_only(&self) -> bool {
        self.success.iter().chain(&self.failure).all(|op| matches!(op, RequestOp::Range(_)))
    }

    /// Whether every range in it asks for a serializable read (etcd's `isTxnSerializable`): a
    /// cluster member then serves it without a read barrier.
    pub fn is_serializable(&self) -> bool {
        self.success.iter().chain(&self.failure).all(|op| match op {
            RequestOp::Range(r) => r.serializable,
            RequestOp::Txn(t) => t.is_serializable(),
            _ => true,
        })
    }
}
