//! Revisions and the revision clock.
//!
//! A *revision* is etcd's logical clock: every write transaction gets the next main revision and
//! each change inside it a sub-revision. The clock hands out main revisions to writers and keeps
//! the **committed watermark**: the highest revision R such that every write at or below R is
//! fully applied and published. Reads are served at the watermark, so a reader never sees
//! revision R while a write below R is still in flight (no torn reads), although writers to
//! different partitions apply concurrently and may finish out of order.
//!
//! Completed revisions are **published in order**: each completion parks its payload (the
//! revision's events) in a ring slot, and whichever completing thread holds the publisher lock
//! hands every contiguous completed revision to the publish callback before moving the watermark
//! past it. Threads that find the lock taken just leave their slot filled: the holder picks it
//! up (a combining lock, so no writer waits for another's publish). The callback may instead
//! say the revisions are not visible yet (they went to the WAL, which calls
//! [`RevisionClock::advance`] once they are written).

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::metrics::Serial;

/// A point in the store's history.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Revision {
    /// The store revision of the write transaction.
    pub main: i64,
    /// The position of the change within that transaction.
    pub sub: i64,
}

impl Revision {
    pub const fn new(main: i64, sub: i64) -> Self {
        Self { main, sub }
    }
}

/// How far completed writes may run ahead of the watermark. A writer that would exceed it waits,
/// which only happens when one write stalls while thousands behind it finish.
const WINDOW: usize = 1 << 14;

/// Allocates main revisions, publishes completed ones in order, and tracks the watermark.
#[derive(Debug)]
pub struct RevisionClock<T> {
    /// The last main revision handed to a writer. Writers allocate while holding the locks of
    /// every partition they touch, so allocation order is consistent with lock order.
    allocated: AtomicI64,
    /// Every write at or below this revision is applied and published; reads are served here.
    committed: AtomicI64,
    /// Every revision at or below this one was handed to the publish callback (its ring slot
    /// is free). Equal to `committed` unless revisions wait for the WAL.
    sequenced: AtomicI64,
    /// `done[r % WINDOW] == r` once write `r` completed (its payload is in `payload`).
    done: Box<[AtomicI64]>,
    /// Each revision's payload until it is published. One small lock per slot: a slot is only
    /// touched by its writer and by the publisher.
    payload: Box<[Mutex<Option<T>>]>,
    /// Held by the one thread publishing; others never wait for it (`try_lock`).
    publisher: Mutex<()>,
    /// Time under `publisher`, and revisions published: every revision passes it once, on one
    /// thread at a time.
    pub publishing: Serial,
    /// Wakes tasks waiting for the watermark to pass their revision.
    advanced: Notify,
    /// Number of such waiters; the notify (which takes a lock) is skipped while it is zero.
    waiters: AtomicUsize,
}

impl<T> RevisionClock<T> {
    /// A clock whose current revision is `current` (1 for an empty store, as in etcd).
    pub fn new(current: i64) -> Self {
        let done = (0..WINDOW).map(|_| AtomicI64::new(-1)).collect::<Vec<_>>().into_boxed_slice();
        done[slot(current)].store(current, Ordering::SeqCst);
        Self {
            allocated: AtomicI64::new(current),
            committed: AtomicI64::new(current),
            sequenced: AtomicI64::new(current),
            done,
            payload: (0..WINDOW).map(|_| Mutex::new(None)).collect(),
            publisher: Mutex::new(()),
            publishing: Serial::default(),
            advanced: Notify::new(),
            waiters: AtomicUsize::new(0),
        }
    }

    /// The committed revision: the newest state every reader may see.
    pub fn committed(&self) -> i64 {
        self.committed.load(Ordering::SeqCst)
    }

    /// The newest allocated revision (applied or not).
    pub fn allocated(&self) -> i64 {
        self.allocated.load(Ordering::SeqCst)
    }

    /// Hands out the next main revision. The caller must [`complete`](Self::complete) it.
    pub fn allocate(&self) -> i64 {
        let rev = self.allocated.fetch_add(1, Ordering::SeqCst) + 1;
        // Keep the ring from wrapping onto a slot that is still pending.
        while rev - self.sequenced.load(Ordering::SeqCst) >= WINDOW as i64 {
            std::thread::yield_now();
        }
        rev
    }

    /// Marks `rev` complete with its payload; publishes every contiguous completed revision
    /// through `publish` (in revision order, in batches) if no other thread is doing so.
    /// `publish` returns whether the batch is visible now; if not, the caller moves the
    /// watermark later with [`advance`](Self::advance).
    pub fn complete(&self, rev: i64, payload: T, publish: impl FnMut(&mut [(i64, T)]) -> bool) {
        *self.payload[slot(rev)].lock() = Some(payload);
        self.done[slot(rev)].store(rev, Ordering::SeqCst);
        self.publish_ready(publish);
    }

    fn publish_ready(&self, mut publish: impl FnMut(&mut [(i64, T)]) -> bool) {
        let mut batch = Vec::new();
        loop {
            let Some(_guard) = self.publisher.try_lock() else {
                // The holder re-checks after releasing, so our slot is not left behind.
                return;
            };
            let started = std::time::Instant::now();
            let mut cur = self.sequenced.load(Ordering::SeqCst);
            while self.done[slot(cur + 1)].load(Ordering::SeqCst) == cur + 1 {
                cur += 1;
                let p = self.payload[slot(cur)]
                    .lock()
                    .take()
                    .expect("completed revision has a payload");
                batch.push((cur, p));
                if batch.len() >= 1024 {
                    break;
                }
            }
            if batch.is_empty() {
                drop(_guard);
            } else {
                let visible = publish(&mut batch);
                let published = batch.len() as u64;
                batch.clear();
                self.sequenced.store(cur, Ordering::SeqCst);
                drop(_guard);
                self.publishing.record(started, published);
                if visible {
                    self.advance(cur);
                }
            }
            // A revision completed while we held the lock may have found it taken.
            let next = self.sequenced.load(Ordering::SeqCst) + 1;
            if self.done[slot(next)].load(Ordering::SeqCst) != next {
                return;
            }
        }
    }

    /// Moves the watermark to `rev` (every revision up to it was published) and wakes waiters.
    /// Called by the publisher, by the WAL writer once revisions it was handed are written, or
    /// by a release of held revisions. Never back: a publisher moves the watermark after it let
    /// go of the publisher lock, so a later publisher may have moved it further meanwhile.
    pub fn advance(&self, rev: i64) {
        self.committed.fetch_max(rev, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.advanced.notify_waiters();
        }
    }

    /// Moves the clock to `rev` at once: a snapshot replaced the store's state. Only while no
    /// write is in flight (a cluster installs snapshots between two applies), and never back.
    pub fn reset(&self, rev: i64) {
        let old = self.sequenced.load(Ordering::SeqCst);
        for r in old..=rev.min(old + WINDOW as i64) {
            self.done[slot(r)].store(-1, Ordering::SeqCst);
        }
        self.done[slot(rev)].store(rev, Ordering::SeqCst);
        self.allocated.store(rev, Ordering::SeqCst);
        self.sequenced.store(rev, Ordering::SeqCst);
        self.advance(rev);
    }

    /// Waits until the watermark reaches `rev`.
    pub async fn wait_committed(&self, rev: i64) {
        if self.committed() >= rev {
            return;
        }
        self.waiters.fetch_add(1, Ordering::SeqCst);
        loop {
            let notified = self.advanced.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.committed() >= rev {
                break;
            }
            notified.await;
        }
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Blocking variant for callers outside the async runtime (benches, tests, recovery).
    pub fn wait_committed_blocking(&self, rev: i64) {
        while self.committed() < rev {
            std::thread::yield_now();
        }
    }
}

fn slot(rev: i64) -> usize {
    rev.rem_euclid(WINDOW as i64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn watermark_waits_for_gaps_and_publishes_in_order() {
        let c = RevisionClock::new(1);
        let mut seen = Vec::new();
        let a = c.allocate();
        let b = c.allocate();
        assert_eq!((a, b), (2, 3));
        c.complete(b, "b", |batch| {
            seen.extend(batch.iter().map(|x| x.0));
            true
        });
        assert_eq!(c.committed(), 1, "3 done but 2 in flight: readers stay at 1");
        assert!(seen.is_empty());
        c.complete(a, "a", |batch| {
            seen.extend(batch.iter().map(|x| x.0));
            true
        });
        assert_eq!(c.committed(), 3);
        assert_eq!(seen, [2, 3]);
    }

    #[test]
    fn concurrent_completion_publishes_every_revision_once_in_order() {
        let c = Arc::new(RevisionClock::new(1));
        let log = Arc::new(Mutex::new(Vec::new()));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (c, log) = (c.clone(), log.clone());
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        let r = c.allocate();
                        c.complete(r, r, |batch| {
                            log.lock().extend(batch.iter().map(|&(rev, p)| {
                                assert_eq!(rev, p);
                                rev
                            }));
                            true
                        });
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(c.committed(), 40_001);
        assert_eq!(*log.lock(), (2..=40_001).collect::<Vec<_>>());
    }

    /// Two publishers in a row: the first may be preempted after it let go of the publisher
    /// lock and before it moved the watermark, while the second publishes later revisions and
    /// moves it further. The first's late move must not take the watermark back (readers would
    /// go back in time, and a writer waiting for its revision would wait for the next write).
    #[test]
    fn the_watermark_never_goes_back_when_publishers_race() {
        const THREADS: i64 = 8;
        const EACH: i64 = 20_000;
        let c = Arc::new(RevisionClock::new(1));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    let mut seen = 0;
                    for _ in 0..EACH {
                        let r = c.allocate();
                        c.complete(r, (), |_| true);
                        let now = c.committed();
                        assert!(now >= seen, "the watermark went back from {seen} to {now}");
                        seen = now;
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(c.committed(), 1 + THREADS * EACH, "every completed revision is visible");
    }
}
