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

/// Runs `f` on a thread of its own at the lowest CPU priority (nice 19, which Linux keeps per
/// thread) and hands back its result: a compaction's walks of the whole store, so that they
/// never take a core from the writes served meanwhile. (At 10M objects on two cores the
/// renewals' worst wait during a compaction did not change with it, 150 against 167 ms: that
/// stall is not the walks' CPU.) A thread whose priority cannot be lowered runs `f` all the
/// same.
pub fn at_lowest_priority<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> tokio::sync::oneshot::Receiver<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19);
            let _ = tx.send(f());
        })
        .expect("spawn a thread");
    rx
}
