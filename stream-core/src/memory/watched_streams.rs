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
//!
//! Beside this file: `lease.rs`, how a listed stream is lent to other threads for one
//! driver call at a time (and why a look never waits for a call under way), and
//! `progress.rs`, the watchdog's markers, which tell a stream that moves from one that
//! hangs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, PoisonError, Weak};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use self::lease::InUse;
pub(crate) use self::lease::Lease;
use self::progress::ProgressMarker;
use crate::device::watch::Watches;
use crate::driver::context::PrimaryContext;
use crate::driver::device::DeviceId;
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
    thread: ThreadId,
    watches: Weak<Watches>,
    /// The stream, for other threads' driver calls on it.
    lease: Arc<Lease>,
}

/// Every watched stream of the process's open scopes.
static WATCHED: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

fn watched() -> MutexGuard<'static, Vec<Entry>> {
    WATCHED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A scope's stream listed among the process's watched streams, with the scope's
/// watches, until this value is dropped (after any other thread's call on the stream
/// has returned: [`Lease::unlist`]).
pub(crate) struct WatchedStream {
    id: u64,
    /// The lease, which the drop unlists whatever the list holds (`None` only then).
    lease: Option<Arc<Lease>>,
}

impl WatchedStream {
    /// Lists `lease`'s stream, a stream of `context` on which this thread's scope issued
    /// a collective watched by `watches`, until the returned value is dropped, which
    /// unlists the lease.
    pub(crate) fn list(
        lease: Arc<Lease>,
        context: &Arc<PrimaryContext>,
        watches: &Arc<Watches>,
    ) -> WatchedStream {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        static WATCHDOG: Once = Once::new();
        WATCHDOG.call_once(start_watchdog);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        watched().push(Entry {
            id,
            device: context.device(),
            thread: this_thread(),
            watches: Arc::downgrade(watches),
            lease: Arc::clone(&lease),
        });
        WatchedStream {
            id,
            lease: Some(lease),
        }
    }
}

impl Drop for WatchedStream {
    fn drop(&mut self) {
        // Moved out of the list (its count of the watches kept for the wait below, no new
        // one taken); the lease unlisted after the list's lock is released, so that the
        // wait for a call under way holds up no one else.
        let entry = {
            let mut list = watched();
            let at = list.iter().position(|entry| entry.id == self.id);
            at.map(|at| list.swap_remove(at))
        };
        let watches = entry.map(|entry| entry.watches).unwrap_or_default();
        if let Some(lease) = self.lease.take() {
            lease.unlist(&watches);
        }
    }
}

/// This thread's id, kept by the thread: `std::thread::current()` clones the thread's
/// handle (a count taken and given back) at every scope that lists its stream.
fn this_thread() -> ThreadId {
    thread_local! {
        static ID: ThreadId = std::thread::current().id();
    }
    ID.try_with(|id| *id)
        .unwrap_or_else(|_| std::thread::current().id())
}

/// The lease of the stream listed as `id`, if it still is.
fn lease_of(id: u64) -> Option<Arc<Lease>> {
    let list = watched();
    let entry = list.iter().find(|entry| entry.id == id)?;
    Some(Arc::clone(&entry.lease))
}

/// Before a call that waits for the whole device of `context`: waits on the host for the
/// watched streams of scopes open on other threads on that device, each for as long as
/// [`Watches::wait_unattended`] allows. `Ok(())` at once when there are none.
pub(crate) fn wait_for_other_threads(context: &Arc<PrimaryContext>) -> Result<()> {
    let this_thread = this_thread();
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
/// call reports why), or no longer listed (its scope ended). A stream with a call under
/// way on another thread (a marker's record) counts as busy, without waiting for that
/// call, which can be held up for as long as the stream's work.
fn is_idle_or_gone(id: u64) -> bool {
    let Some(lease) = lease_of(id) else {
        return true;
    };
    match lease.try_with_stream(|stream, _| stream.is_idle()) {
        Ok(idle) => idle.unwrap_or(true),
        Err(InUse) => false,
    }
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
/// unattended with no progress, so that a collective past its timeout, or one NCCL
/// reports failed, is aborted (the abort handshake lets any thread abort:
/// `driver/abort_handshake.rs`) and its stream drains; the scope's next wait, or its end,
/// reports the error. What PyTorch's NCCL watchdog does, without the event pair per
/// collective it records: progress is told by a marker recorded on the stream itself
/// (an event, `ProgressMarker`, recorded by a thread of its own), and once all the work
/// enqueued before it has completed the count starts again. So a stream that its thread keeps feeding,
/// without ever waiting, is not taken for a hang; a stream with more work queued ahead
/// of a marker than the timeout, all of it completing, still is (only a marker recorded
/// with each collective, at a cost on every call, would tell). A thread's waits,
/// `Pending::wait` among them, start the count again too. A thread blocked inside an NCCL
/// call on the communicator (an enqueue behind a full queue) keeps the abort waiting as
/// long: the handshake makes it only between calls.
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
        unattended.look(&listed, tick, &TheWatchedStreams);
    }
}

/// What a look asks about the listed streams: [`TheWatchedStreams`], the process's list;
/// in the host tests, a stand-in.
trait StreamsLookedAt {
    /// A point in a stream's work, after all the work queued on it when it was asked for.
    type Marker;

    /// `true` when the stream listed as `id` is idle, or gone.
    fn is_idle(&self, id: u64) -> bool;

    /// A marker asked for on the stream listed as `id`; `None` when none can be.
    fn mark(&self, id: u64) -> Option<Self::Marker>;

    /// `Some(true)` once the work before `marker` has completed, `Some(false)` while it
    /// runs (or while that cannot be told yet), `None` when the marker was lost.
    fn passed(&self, marker: &Self::Marker) -> Option<bool>;
}

/// The process's watched streams, as the watchdog looks at them.
struct TheWatchedStreams;

impl StreamsLookedAt for TheWatchedStreams {
    type Marker = ProgressMarker;

    fn is_idle(&self, id: u64) -> bool {
        is_idle_or_gone(id)
    }

    fn mark(&self, id: u64) -> Option<ProgressMarker> {
        progress::request(lease_of(id)?)
    }

    fn passed(&self, marker: &ProgressMarker) -> Option<bool> {
        marker.passed()
    }
}

/// What the watchdog knows of one busy watched stream between two looks.
struct Busy<M> {
    /// Its time busy unattended, since its thread's wait counted last or its last marker
    /// was seen passed.
    busy: Duration,
    /// Its thread's count of waits when it was last looked at.
    waits: usize,
    /// The marker recorded on it since, not yet passed.
    marker: Option<M>,
}

/// What the watchdog knows between two looks: per busy watched stream, [`Busy`].
struct Unattended<M>(HashMap<u64, Busy<M>>);

impl<M> Default for Unattended<M> {
    fn default() -> Self {
        Unattended(HashMap::new())
    }
}

impl<M> Unattended<M> {
    /// One look, `tick` after the last, at the `listed` streams: a stream whose thread
    /// waits now, or that is idle, starts again from nothing; one whose thread waited
    /// since the last look, or whose marker has passed, too (and is marked again); the
    /// others' watches are asked after their time busy unattended (a watch past its
    /// timeout aborts its work, and the scope keeps its error).
    fn look<S: StreamsLookedAt<Marker = M>>(
        &mut self,
        listed: &[(u64, Arc<Watches>)],
        tick: Duration,
        streams: &S,
    ) {
        self.0
            .retain(|id, _| listed.iter().any(|(listed, _)| listed == id));
        for (id, watches) in listed {
            if watches.is_polled() || streams.is_idle(*id) {
                self.0.remove(id);
                continue;
            }
            let waits = watches.waits();
            let busy = match self.0.get_mut(id) {
                Some(known) if known.waits == waits => {
                    let passed = known.marker.as_ref().map(|marker| streams.passed(marker));
                    match passed {
                        // All the work queued before the marker has completed, since the
                        // last look: the stream moves, and what runs on it now began at
                        // most a tick ago.
                        Some(Some(true)) => {
                            known.busy = Duration::ZERO;
                            known.marker = streams.mark(*id);
                        }
                        Some(Some(false)) => known.busy += tick,
                        // None asked for, or lost: asked for again.
                        Some(None) | None => {
                            known.busy += tick;
                            known.marker = streams.mark(*id);
                        }
                    }
                    known.busy
                }
                // Seen busy for the first time, or its thread waited since the last look:
                // the count starts now, at nothing. The stream may have been busy for up
                // to a tick already, but counting that tick could give up on it before
                // its timeout.
                _ => {
                    let marker = streams.mark(*id);
                    self.0.insert(
                        *id,
                        Busy {
                            busy: Duration::ZERO,
                            waits,
                            marker,
                        },
                    );
                    Duration::ZERO
                }
            };
            // Its error is kept by the scope's watches, which report it.
            let _ = watches.check_unattended(busy);
        }
    }
}

/// For the GPU tests above `memory/` (a watched stream needs a scope): a look at a
/// listed stream while another thread's call on it is under way.
#[cfg(test)]
pub(crate) mod test_hooks {
    use super::{is_idle_or_gone, lease_of, this_thread, watched};

    /// The id of a stream that a scope open on this thread listed, if one did.
    pub(crate) fn listed_on_this_thread() -> Option<u64> {
        let this_thread = this_thread();
        let list = watched();
        list.iter()
            .find(|entry| entry.thread == this_thread)
            .map(|entry| entry.id)
    }

    /// `f`, run under the lease of the stream listed as `id`, as a marker's record under
    /// way holds it; `None` if the stream is not listed.
    pub(crate) fn holding_its_lease<R>(id: u64, f: impl FnOnce() -> R) -> Option<R> {
        lease_of(id)?.with_stream(|_, _| f())
    }

    /// What the watchdog's look, and another thread's wait before a call that waits for
    /// the whole device, find: `true` when the stream is idle or no longer listed.
    pub(crate) fn looks_idle_or_gone(id: u64) -> bool {
        is_idle_or_gone(id)
    }
}

mod lease;
mod progress;
#[cfg(test)]
mod tests;
