//! [`CompletionStats`]: what the futures of this crate have in flight, process-wide.

use std::sync::atomic::Ordering;

use super::completion::{COMPLETED, IN_FLIGHT, LEAKED, RELEASED_AFTER_DROP};

/// Counters of the operations whose futures wait for the GPU, for the whole process
/// (see [`completion_stats`]).
///
/// When `in_flight` reads 0, the completion threads have seen the end of every
/// operation's work and released every value of a dropped future: device and pinned
/// memory statistics ([`Device::memory_stats`](crate::Device::memory_stats),
/// [`Device::pinned_memory_stats`](crate::Device::pinned_memory_stats)) then show what
/// the program itself still holds.
///
/// ```no_run
/// # async fn f(stream: &stream_core::Stream) -> stream_core::Result<()> {
/// drop(stream.upload_owned(vec![1.0f32; 1024])); // dropped: released after the GPU
/// while stream_core::future::completion_stats().in_flight > 0 {
///     std::thread::sleep(std::time::Duration::from_millis(1));
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompletionStats {
    /// Operations enqueued whose completion has not been handled yet (the event after
    /// their work has not completed, or the completion thread has not finished with it).
    pub in_flight: usize,
    /// Operations completed since the process started.
    pub completed: u64,
    /// Values of futures dropped before completion, released by the completion thread.
    pub released_after_drop: u64,
    /// Values leaked because the end of their work could not be marked (the driver
    /// refused to record the event, e.g. after a kernel fault) or waiting for it failed
    /// with an error that does not say the context stopped.
    pub leaked: u64,
}

/// The [`CompletionStats`] now (each counter read atomically, not all together).
pub fn completion_stats() -> CompletionStats {
    CompletionStats {
        in_flight: IN_FLIGHT.load(Ordering::Acquire),
        completed: COMPLETED.load(Ordering::Relaxed),
        released_after_drop: RELEASED_AFTER_DROP.load(Ordering::Relaxed),
        leaked: LEAKED.load(Ordering::Relaxed),
    }
}
