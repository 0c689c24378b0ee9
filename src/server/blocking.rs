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
