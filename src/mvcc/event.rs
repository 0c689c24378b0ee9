//! A change to a key as watchers see it (etcd's `mvccpb.Event`): what a partition rebuilds
//! from its histories and the event log hands to watchers. Its own module so that both sit
//! above it.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use super::request::KeyValue;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change, as watchers see it (etcd's `mvccpb.Event`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    /// For a put the new version; for a delete only `key` and `mod_revision` are set.
    pub kv: KeyValue,
    /// The version before this change; `None` for a create.
    pub prev_kv: Option<KeyValue>,
    /// The event's encoding for watchers, made by the first stream that sends it and reused by
    /// every other.
    pub wire: WireCache,
}

impl Event {
    pub fn new(kind: EventKind, kv: KeyValue, prev_kv: Option<KeyValue>) -> Self {
        Self { kind, kv, prev_kv, wire: WireCache::default() }
    }
}

/// Encoded forms of an event, without and with its previous version. Opaque bytes to the store:
/// the server fills them in its wire format.
#[derive(Clone, Debug, Default)]
pub struct WireCache {
    pub plain: OnceLock<Bytes>,
    pub with_prev: OnceLock<Bytes>,
}

/// A cache never makes two events differ.
impl PartialEq for WireCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for WireCache {}

/// The events of one revision, shared by the log and every watcher that gets them.
pub type RevisionEvents = Arc<[Event]>;
