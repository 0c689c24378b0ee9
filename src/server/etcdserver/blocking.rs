//! Store walks that take long (a compaction, a hash of the whole history) called from async
//! code: the runtime's other tasks are handed to another thread meanwhile.

/// Runs `f`, which blocks, handing this worker's other tasks to another thread first (the
/// runtime may have only one or two). On a single-threaded runtime (the paused-time tests)
/// there is no other thread to hand them to, and outside a runtime nothing to hand: `f` just
/// runs.
pub fn off_the_runtime<T>(f: impl FnOnce() -> T) -> T {
    let multi = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi { tokio::task::block_in_place(f) } else { f() }
}

/// Runs `f` on a thread of its own, named `name` (so that a profile shows it), and hands back
/// its result: a compaction's walks of the whole store. At the server's own priority, not a
/// lower one: the walks take each partition's lock a chunk at a time, and a holder at nice 19,
/// preempted by a busy member's other threads, kept the lock from the writers. In a 3-member
/// cluster at 1M objects on two cores, renewals waited up to 2.9 s during a compaction at
/// nice 19, and up to 72 ms at the server's priority.
pub fn on_thread_of_its_own<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> tokio::sync::oneshot::Receiver<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .expect("spawn a thread");
    rx
}
