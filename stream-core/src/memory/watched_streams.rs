//! The streams of the process's open scopes that issued a collective, on every thread
//! ([`WatchedStream`]), and the wait for other threads' ones before a call that waits for
//! the whole device ([`wait_for_other_threads`]).
//!
//! Such a call (`cuMemFreeHost`, `cuMemFree` of managed memory, `cuModuleUnload`) waits
//! for every stream of the GPU, so for a collective whose peer died on another thread's
//! scope too; only that thread's watch aborts the collective, at that thread's next
//! wait. Entering the call first would hold this thread until then: for as long as that
//! thread computes on the host, or forever if it waits for this one. So the other
//! threads' watched streams are waited for first, on the host: while their
//! thread polls them, until its watch gives up and the abort drains them; while it does
//! not, at most the watch's timeout, then
//! [`Error::HeldUpByAnotherThread`](crate::Error::HeldUpByAnotherThread).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::ThreadId;

use cudarc::driver::sys;

use crate::device::watch::Watches;
use crate::driver::context::PrimaryContext;
use crate::driver::device::DeviceId;
use crate::driver::stream::{BorrowedStream, RawStream};
use crate::error::Result;

/// One watched stream of an open scope.
struct Entry {
    id: u64,
    device: DeviceId,
    /// The stream's handle, as a number (a handle is not `Send`); a live stream for as
    /// long as the entry is listed (see [`WatchedStream`]).
    stream: usize,
    thread: ThreadId,
    watches: Weak<Watches>,
}

/// Every watched stream of the process's open scopes.
static WATCHED: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

fn watched() -> MutexGuard<'static, Vec<Entry>> {
    WATCHED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A scope's stream listed among the process's watched streams, with the scope's
/// watches, until this value is dropped (under the list's lock, so that no other
/// thread's query of the stream is under way then).
pub(crate) struct WatchedStream {
    id: u64,
}

impl WatchedStream {
    /// Lists `stream`, a stream of `device` on which this thread's scope issued a
    /// collective watched by `watches`.
    ///
    /// # Safety
    ///
    /// `stream` stays alive until the returned value is dropped: the caller keeps it in
    /// a scope that borrows the stream for longer, out of the user's reach.
    pub(crate) unsafe fn list(
        device: DeviceId,
        stream: &RawStream,
        watches: &Arc<Watches>,
    ) -> WatchedStream {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        watched().push(Entry {
            id,
            device,
            stream: stream.raw() as usize,
            thread: std::thread::current().id(),
            watches: Arc::downgrade(watches),
        });
        WatchedStream { id }
    }
}

impl Drop for WatchedStream {
    fn drop(&mut self) {
        watched().retain(|entry| entry.id != self.id);
    }
}

/// Before a call that waits for the whole device of `context`: waits on the host for the
/// watched streams of scopes open on other threads on that device, each for as long as
/// [`Watches::wait_unattended`] allows. `Ok(())` at once when there are none.
pub(crate) fn wait_for_other_threads(context: &Arc<PrimaryContext>) -> Result<()> {
    let this_thread = std::thread::current().id();
    let others: Vec<(u64, Arc<Watches>)> = watched()
        .iter()
        .filter(|entry| entry.device == context.device() && entry.thread != this_thread)
        .filter_map(|entry| Some((entry.id, entry.watches.upgrade()?)))
        .collect();
    for (id, watches) in others {
        watches.wait_unattended(|| is_idle_or_gone(context, id))?;
    }
    Ok(())
}

/// `true` once the stream listed as `id` is idle (or its query failed: the device-wide
/// call reports why), or no longer listed (its scope ended).
fn is_idle_or_gone(context: &Arc<PrimaryContext>, id: u64) -> bool {
    let list = watched();
    let Some(entry) = list.iter().find(|entry| entry.id == id) else {
        return true;
    };
    // SAFETY: a listed stream is alive (`WatchedStream::list`'s contract) until its entry
    // is removed, which takes the lock this function holds until the query has returned;
    // it is a stream of `context`'s GPU (listed with that device, whose primary context
    // every handle of it shares).
    let stream = unsafe { BorrowedStream::new(context, entry.stream as sys::CUstream) };
    stream.is_idle()
}
