//! Watches (etcd's `watchable_store` and `v3rpc/watch` stream logic, minus the wire format).
//!
//! - [`hub`]: every watcher, matched against each committed revision on the publish path, and
//!   their catch-up from the event log;
//! - [`interval`]: the interval index that finds the range watches containing a key.
//!
//! A watcher is **synced** when the publisher delivers its events live, or **unsynced** when
//! it must first replay history (it started in the past, or it fell behind because its client
//! stopped reading). The publisher never blocks: a watcher whose queue is full becomes unsynced
//! and its stream task replays what it missed from the event log, then rejoins the live path.
//! Which path a revision takes is decided under the hub lock, so no event is delivered twice
//! or skipped.

pub mod hub;
pub mod interval;

pub use hub::{CatchUp, CreateRequest, Message, Picks, WatchHub, WatchOptions};
