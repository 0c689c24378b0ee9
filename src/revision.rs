//! Revisions and the revision clock.
//!
//! A *revision* is etcd's logical clock: every write transaction gets the next main revision and
//! each change inside it a sub-revision. The clock hands out main revisions to writers and keeps
//! the **committed watermark**: the highest revision R such that every write at or below R is
//! fully applied. Reads are served at the watermark, so a reader never sees revision R while a
//! write below R is still in flight (no torn reads), although writers to different partitions
//! apply concurrently and may finish out of order.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

use tokio::sync::Notify;

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
const WINDOW: usize = 1 << 16;

/// Allocates main revisions and tracks the committed watermark.
#[derive(Debug)]
pub struct RevisionClock {
    /// The last main revision handed to a writer. Writers allocate while holding the locks of
    /// every partition they touch, so allocation order is consistent with lock order.
    allocated: AtomicI64,
    /// Every write at or below this revision is applied; reads are served here.
    committed: AtomicI64,
    /// `done[r % WINDOW] == r` once write `r` finished applying. A ring instead of a lock: any
    /// completing writer can advance the watermark over the slots its predecessors filled.
    done: Box<[AtomicI64]>,
    /// Wakes tasks waiting for the watermark to pass their revision.
    advanced: Notify,
    /// Number of such waiters; the notify (which takes a lock) is skipped while it is zero.
    waiters: AtomicUsize,
}

impl RevisionClock {
    /// A clock whose current revision is `current` (1 for an empty store, as in etcd).
    pub fn new(current: i64) -> Self {
        let done = (0..WINDOW).map(|_| AtomicI64::new(-1)).collect::<Vec<_>>().into_boxed_slice();
        done[slot(current)].store(current, Ordering::SeqCst);
        Self {
            allocated: AtomicI64::new(current),
            committed: AtomicI64::new(current),
            done,
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

    /// Hands out the next main revision. The caller must call [`complete`](Self::complete) with it.
    pub fn allocate(&self) -> i64 {
        let rev = self.allocated.fetch_add(1, Ordering::SeqCst) + 1;
        // Keep the ring from wrapping onto a slot that is still pending.
        while rev - self.committed() >= WINDOW as i64 {
            std::thread::yield_now();
        }
        rev
    }

    /// Marks `rev` applied and advances the watermark over every contiguous completed revision.
    pub fn complete(&self, rev: i64) {
        self.done[slot(rev)].store(rev, Ordering::SeqCst);
        let mut advanced = false;
        loop {
            let cur = self.committed.load(Ordering::SeqCst);
            let next = cur + 1;
            if self.done[slot(next)].load(Ordering::SeqCst) != next {
                break;
            }
            if self
                .committed
                .compare_exchange(cur, next, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                advanced = true;
            }
        }
        if advanced && self.waiters.load(Ordering::SeqCst) > 0 {
            self.advanced.notify_waiters();
        }
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
    fn watermark_waits_for_gaps() {
        let c = RevisionClock::new(1);
        let a = c.allocate();
        let b = c.allocate();
        assert_eq!((a, b), (2, 3));
        c.complete(b);
        assert_eq!(c.committed(), 1, "3 done but 2 in flight: readers stay at 1");
        c.complete(a);
        assert_eq!(c.committed(), 3);
    }

    #[test]
    fn concurrent_completion_reaches_the_last_revision() {
        let c = Arc::new(RevisionClock::new(1));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        let r = c.allocate();
                        c.complete(r);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(c.committed(), 40_001);
        assert_eq!(c.allocated(), 40_001);
    }
}
