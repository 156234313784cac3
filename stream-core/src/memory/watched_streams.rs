//! The streams of the process's open scopes that issued a collective, on every thread
//! ([`WatchedStream`]), and the wait for other threads' ones before a call that waits for
//! the whole device ([`wait_for_other_threads`]).
//!
//! Such a call (`cuMemFreeHost`, `cuMemFree` of managed memory, `cuModuleUnload`) waits
//! for every stream of the GPU, so for a collective whose peer died on another thread's
//! scope too, and while it waits in the driver it can hold up that thread's own driver
//! calls. So the other threads' watched streams are waited for first, on the host: while
//! their thread polls them, until its watch gives up and the abort drains them; while it
//! does not, the watchdog ([`watchdog`]) asks their watches in its place and aborts a
//! collective past its timeout; if even that does not drain the stream (an abort waits
//! for a call stuck inside NCCL), the wait gives up [`WATCHDOG_GRACE`] later with
//! [`Error::HeldUpByAnotherThread`](crate::Error::HeldUpByAnotherThread).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, PoisonError, Weak};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use cudarc::driver::sys;

use crate::device::watch::Watches;
use crate::driver::context::PrimaryContext;
use crate::driver::device::DeviceId;
use crate::driver::stream::{BorrowedStream, RawStream};
use crate::error::Result;

/// How often the watchdog looks at the watched streams.
const WATCHDOG_EVERY: Duration = Duration::from_millis(10);

/// How much longer than a watch's timeout another thread's call waits for a stream whose
/// thread does not wait for it before it gives up: time for the watchdog to see it and
/// for NCCL's abort (about a second measured, on the rank that made the id).
pub(crate) const WATCHDOG_GRACE: Duration = Duration::from_secs(5);

/// One watched stream of an open scope.
struct Entry {
    id: u64,
    device: DeviceId,
    /// The device's primary context, which the stream belongs to.
    context: Arc<PrimaryContext>,
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
        context: &Arc<PrimaryContext>,
        stream: &RawStream,
        watches: &Arc<Watches>,
    ) -> WatchedStream {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        static WATCHDOG: Once = Once::new();
        WATCHDOG.call_once(start_watchdog);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        watched().push(Entry {
            id,
            device: context.device(),
            context: Arc::clone(context),
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
        watches.wait_unattended(WATCHDOG_GRACE, || is_idle_or_gone(id))?;
    }
    Ok(())
}

/// `true` once the stream listed as `id` is idle (or its query failed: the device-wide
/// call reports why), or no longer listed (its scope ended).
fn is_idle_or_gone(id: u64) -> bool {
    let list = watched();
    let Some(entry) = list.iter().find(|entry| entry.id == id) else {
        return true;
    };
    // SAFETY: a listed stream is alive (`WatchedStream::list`'s contract) until its entry
    // is removed, which takes the lock this function holds until the query has returned;
    // it is a stream of `entry.context`, listed with it.
    let stream = unsafe { BorrowedStream::new(&entry.context, entry.stream as sys::CUstream) };
    stream.is_idle()
}

/// Starts the watchdog thread ([`watchdog`]), unless `STREAM_CORE_NCCL_WATCHDOG` turns it
/// off ([`watchdog_wanted`]); without it (or if the thread cannot be started), the
/// collectives of threads that do not wait stay unchecked until they do.
fn start_watchdog() {
    if !watchdog_wanted(std::env::var("STREAM_CORE_NCCL_WATCHDOG").ok().as_deref()) {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("stream-core-watchdog".into())
        .spawn(watchdog);
}

/// Whether the watchdog runs, given `STREAM_CORE_NCCL_WATCHDOG`: unless it is `0`, `off`
/// or `false` (any case), for measuring what the watchdog costs, or for a program that
/// waits for its collectives often enough itself.
fn watchdog_wanted(setting: Option<&str>) -> bool {
    let setting = setting.map(|s| s.trim().to_ascii_lowercase());
    !matches!(setting.as_deref(), Some("0" | "off" | "false"))
}

/// Every [`WATCHDOG_EVERY`], the watched streams whose thread is not waiting for them
/// (a thread's own waits ask its watches) and which are still busy: their watches are
/// asked as that thread's wait would ask them, after the time they have been busy
/// unattended, so that a collective past its timeout, or one NCCL reports failed, is
/// aborted (the abort handshake lets any thread abort: `driver/abort_handshake.rs`) and
/// its stream drains; the scope's next wait, or its end, reports the error. What
/// PyTorch's NCCL watchdog does, without the event pair per collective it records, and
/// so with what a wait of that length would do: a stream kept busy longer than the
/// timeout by work after a collective that completed, with its thread never waiting
/// meanwhile, is taken for a hang too (a thread's waits, `Pending::wait` among them,
/// start the count again). A thread blocked inside an NCCL call on the communicator (an
/// enqueue behind a full queue) keeps the abort waiting as long: the handshake makes it
/// only between calls.
fn watchdog() {
    let mut unattended = Unattended::default();
    let mut last = Instant::now();
    loop {
        std::thread::sleep(WATCHDOG_EVERY);
        let tick = last.elapsed();
        last = Instant::now();
        let listed: Vec<(u64, Arc<Watches>)> = watched()
            .iter()
            .filter_map(|entry| Some((entry.id, entry.watches.upgrade()?)))
            .collect();
        unattended.look(&listed, tick, is_idle_or_gone);
    }
}

/// What the watchdog knows between two looks: per watched stream, the time it has been
/// busy unattended since its thread's wait counted last.
#[derive(Default)]
struct Unattended(HashMap<u64, (Duration, usize)>);

impl Unattended {
    /// One look, `tick` after the last, at the `listed` streams (`is_idle` tells a stream
    /// idle, or gone): a stream whose thread waits now, or that is idle, starts again
    /// from nothing; one whose thread waited since the last look too; the others' watches
    /// are asked after their time busy unattended (a watch past its timeout aborts its
    /// work, and the scope keeps its error).
    fn look(
        &mut self,
        listed: &[(u64, Arc<Watches>)],
        tick: Duration,
        is_idle: impl Fn(u64) -> bool,
    ) {
        self.0
            .retain(|id, _| listed.iter().any(|(listed, _)| listed == id));
        for (id, watches) in listed {
            if watches.is_polled() || is_idle(*id) {
                self.0.remove(id);
                continue;
            }
            let waits = watches.waits();
            let busy = match self.0.get_mut(id) {
                Some((busy, counted)) if *counted == waits => {
                    *busy += tick;
                    *busy
                }
                // Seen busy for the first time, or its thread waited since the last look:
                // the count starts now, at nothing. The stream may have been busy for up
                // to a tick already, but counting that tick could give up on it before
                // its timeout.
                _ => {
                    self.0.insert(*id, (Duration::ZERO, waits));
                    Duration::ZERO
                }
            };
            // Its error is kept by the scope's watches, which report it.
            let _ = watches.check_unattended(busy);
        }
    }
}

#[cfg(test)]
mod tests;
