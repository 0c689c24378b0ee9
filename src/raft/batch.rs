//! Proposals in batches: every proposal waiting on a member when a call to the leader starts
//! goes in that one call, and the leader proposes them to Raft as one batch (etcd's proposals
//! ride its Raft message stream the same way, as many as are ready at each step).
//!
//! One forwarded call per proposal cost a follower a gRPC round trip, an HTTP/2 stream and a
//! Raft core message each; the leader's own proposals paid the core message each too. Now a
//! member keeps at most [`IN_FLIGHT`] batches on their way at once: under light load each
//! proposal leaves at once, alone; under load, proposals gather while the batches in flight
//! are answered, and the next call takes them all.
//!
//! Proposals from one member may reach the log in another order than they were made when two
//! batches are in flight: they are different clients' requests, none of which was answered
//! yet, so any order is one etcd could give.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{Notify, Semaphore, oneshot};

use crate::error::{Error, Result};

/// Batches on their way to the leader at once, per member.
pub const IN_FLIGHT: usize = 4;

/// A proposal's answer: the log index it was applied at and its encoded answer.
pub type Answer = Result<(u64, Bytes)>;

/// The proposals waiting for the next batch.
#[derive(Debug, Default)]
pub struct ProposalBatcher {
    /// The proposals not yet sent, with who waits for each answer. Pushed by the handlers and
    /// taken whole by the loop; a short lock, never held across an await.
    waiting: Mutex<Vec<(Bytes, oneshot::Sender<Answer>)>>,
    /// Wakes the loop. `Notify` keeps one permit while the loop waits for a free slot, so a
    /// proposal that arrives meanwhile is in the next batch.
    wake: Notify,
}

impl ProposalBatcher {
    /// Proposes `request` in the next batch and returns its answer (`Stopped` if the loop
    /// ended).
    pub async fn propose(&self, request: Bytes) -> Answer {
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().push((request, tx));
        self.wake.notify_one();
        rx.await.unwrap_or(Err(Error::Stopped))
    }

    /// Sends batches: takes every proposal waiting once a slot is free and hands them to
    /// `send` (`None`: the node is gone, and the loop ends), whose answers, one per request in
    /// order, go to their waiters.
    pub async fn run<F, Fut>(&self, send: F)
    where
        F: Fn(Vec<Bytes>) -> Option<Fut>,
        Fut: Future<Output = Result<Vec<Answer>>> + Send + 'static,
    {
        let slots = Arc::new(Semaphore::new(IN_FLIGHT));
        loop {
            self.wake.notified().await;
            let Ok(slot) = slots.clone().acquire_owned().await else { return };
            let batch = std::mem::take(&mut *self.waiting.lock());
            if batch.is_empty() {
                // Taken by the batch before, which this wake-up was for too.
                continue;
            }
            let (requests, waiters): (Vec<Bytes>, Vec<_>) = batch.into_iter().unzip();
            let Some(call) = send(requests) else {
                for w in waiters {
                    let _ = w.send(Err(Error::Stopped));
                }
                return;
            };
            tokio::spawn(async move {
                let answers = call.await;
                drop(slot);
                match answers {
                    Ok(answers) if answers.len() == waiters.len() => {
                        for (w, a) in waiters.into_iter().zip(answers) {
                            let _ = w.send(a);
                        }
                    }
                    Ok(_) => {
                        tracing::error!("raft: a batch of proposals answered by count");
                        for w in waiters {
                            let _ = w.send(Err(Error::Internal));
                        }
                    }
                    Err(e) => {
                        for w in waiters {
                            let _ = w.send(Err(e.clone()));
                        }
                    }
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Proposals made while every slot is busy go together in the next batch, and each gets
    /// its own answer back.
    #[tokio::test]
    async fn proposals_waiting_for_a_slot_go_in_one_batch_and_get_their_own_answers() {
        let b = Arc::new(ProposalBatcher::default());
        let gate = Arc::new(Semaphore::new(0));
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let calls = Arc::new(AtomicUsize::new(0));
        let run = {
            let (b, gate, sizes, calls) = (b.clone(), gate.clone(), sizes.clone(), calls.clone());
            tokio::spawn(async move {
                b.run(|requests: Vec<Bytes>| {
                    let (gate, sizes, calls) = (gate.clone(), sizes.clone(), calls.clone());
                    sizes.lock().push(requests.len());
                    Some(async move {
                        // The first IN_FLIGHT calls hold their slots until the gate opens.
                        if calls.fetch_add(1, Ordering::SeqCst) < IN_FLIGHT {
                            gate.acquire().await.expect("open").forget();
                        }
                        Ok(requests
                            .into_iter()
                            .map(|r| Ok((r[0] as u64, r)))
                            .collect::<Vec<Answer>>())
                    })
                })
                .await
            })
        };
        let propose = |n: u8| {
            let b = b.clone();
            tokio::spawn(async move { b.propose(Bytes::from(vec![n])).await })
        };
        let mut first = Vec::new();
        for n in 0..IN_FLIGHT as u8 {
            first.push(propose(n));
            // Each alone: sent before the next arrives.
            while sizes.lock().len() <= n as usize {
                tokio::task::yield_now().await;
            }
        }
        let later: Vec<_> = (100..110u8).map(propose).collect();
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert_eq!(*sizes.lock(), vec![1; IN_FLIGHT], "no slot free: the later ones wait");
        gate.add_permits(IN_FLIGHT);
        for (n, h) in first.into_iter().enumerate() {
            assert_eq!(h.await.unwrap().unwrap(), (n as u64, Bytes::from(vec![n as u8])));
        }
        for (n, h) in (100..110u8).zip(later) {
            assert_eq!(h.await.unwrap().unwrap(), (n as u64, Bytes::from(vec![n])));
        }
        assert_eq!(sizes.lock()[IN_FLIGHT..], [10], "the ten waiting went in one batch");
        run.abort();
    }

    /// A failed call fails each of its proposals with its error; a gone node stops the loop.
    #[tokio::test]
    async fn a_failed_batch_fails_each_proposal_and_a_gone_node_stops() {
        let b = Arc::new(ProposalBatcher::default());
        let alive = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let run = {
            let (b, alive) = (b.clone(), alive.clone());
            tokio::spawn(async move {
                b.run(|_requests: Vec<Bytes>| {
                    alive
                        .load(Ordering::SeqCst)
                        .then_some(async { Err::<Vec<Answer>, _>(Error::TimeoutLeaderFail) })
                })
                .await
            })
        };
        assert_eq!(b.propose(Bytes::from_static(b"x")).await, Err(Error::TimeoutLeaderFail));
        alive.store(false, Ordering::SeqCst);
        assert_eq!(b.propose(Bytes::from_static(b"y")).await, Err(Error::Stopped));
        run.await.unwrap();
    }
}
