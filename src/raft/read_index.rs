//! The shared read index (etcd's `linearizableReadLoop`): one quorum confirmation serves every
//! linearizable read waiting when it starts, on the leader and on followers (one forwarded
//! call per round instead of one per read). On the leader, a follower's forwarded call is one
//! more read of the leader's round (`RaftNode::serve_peer_forward`), so the followers' rounds
//! cost no quorum confirmations of their own.
//!
//! A read joins the round that starts next, never one already in flight: a round's read index
//! is confirmed after every read it serves arrived, so it covers every write acknowledged
//! before any of them began. Rounds run one at a time; reads that arrive meanwhile wait for the
//! next one, which starts as soon as the current one ends.

use std::future::Future;

use parking_lot::Mutex;
use tokio::sync::{Notify, watch};

use crate::error::{Error, Result};

/// One round's outcome, once confirmed.
type Outcome = Option<Result<u64>>;

/// The reads waiting for the next round, and the loop that runs rounds.
#[derive(Debug)]
pub struct SharedReadIndex {
    /// The round that reads arriving now join. The loop swaps in a fresh one as it starts a
    /// round (under this lock, so a read joins either the round just started or the next,
    /// never a round that had started before it arrived).
    next: Mutex<watch::Sender<Outcome>>,
    /// Wakes the loop. `Notify` keeps one permit while the loop is busy, so a read that
    /// arrives during a round gets the next round.
    wake: Notify,
}

impl Default for SharedReadIndex {
    fn default() -> Self {
        Self { next: Mutex::new(watch::channel(None).0), wake: Notify::new() }
    }
}

impl SharedReadIndex {
    /// The read index of the next round (`Stopped` if the loop ended).
    pub async fn read_index(&self) -> Result<u64> {
        let mut rx = self.next.lock().subscribe();
        self.wake.notify_one();
        match rx.wait_for(Option::is_some).await {
            Ok(outcome) => outcome.clone().unwrap_or(Err(Error::Internal)),
            Err(_) => Err(Error::Stopped),
        }
    }

    /// Runs rounds: each takes the reads waiting, confirms one read index with `confirm`
    /// (`None`: the node is gone, and the loop ends) and hands it to them all.
    pub async fn run<F, Fut>(&self, confirm: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Option<Result<u64>>>,
    {
        loop {
            self.wake.notified().await;
            let round = std::mem::replace(&mut *self.next.lock(), watch::channel(None).0);
            if round.receiver_count() == 0 {
                // Its readers gave up (their requests were cancelled).
                continue;
            }
            let Some(outcome) = confirm().await else { return };
            // Readers that gave up meanwhile are gone: nothing to tell them.
            let _ = round.send(Some(outcome));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::*;

    /// Reads waiting together share one confirmation; a read that arrives while a round is in
    /// flight gets a later one (a confirmation that started after it arrived).
    #[tokio::test]
    async fn reads_share_a_round_and_never_join_one_in_flight() {
        let shared = Arc::new(SharedReadIndex::default());
        let rounds = Arc::new(AtomicU64::new(0));
        let (s, r) = (shared.clone(), rounds.clone());
        tokio::spawn(async move {
            s.run(|| {
                let r = r.clone();
                async move {
                    // The index a round confirms is its number: started after every read it serves.
                    let n = r.fetch_add(1, Ordering::SeqCst) + 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Some(Ok(n))
                }
            })
            .await
        });
        let reads = || -> Vec<_> {
            (0..10)
                .map(|_| {
                    let s = shared.clone();
                    tokio::spawn(async move { s.read_index().await })
                })
                .collect()
        };
        let first = reads();
        tokio::time::sleep(Duration::from_millis(10)).await;
        // Round 1 is in flight: these join round 2.
        let started = rounds.load(Ordering::SeqCst);
        let later = reads();
        for f in first {
            assert_eq!(f.await.unwrap(), Ok(1));
        }
        for l in later {
            assert!(l.await.unwrap().unwrap() > started);
        }
        assert_eq!(rounds.load(Ordering::SeqCst), 2, "20 reads, 2 confirmations");
    }
}
