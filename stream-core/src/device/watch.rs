//! [`StreamWatch`]: work on a stream that may never finish by itself (an NCCL collective
//! waits for its peers) and how to make it stop; [`Watches`], the watches of one scope
//! and its forks, which bound every host wait for the scope's streams; and this thread's
//! list of them, which bounds the waits that are no scope's own
//! ([`wait_for_open_scopes`], [`OpenWatches`]): the out-of-memory retry's
//! (`memory/pool.rs`), the housekeeping stream's (`DeviceInner::sync_housekeeping`), and
//! those before a call that waits for the whole device
//! (`DeviceInner::bound_device_wide_wait`: a `ManagedVec`'s drop,
//! `Device::trim_pinned_memory`). Another thread's call that waits for the whole device
//! waits for a scope's watched streams too, asking its watches without letting them
//! stop the work ([`Watches::wait_unattended`], `memory/watched_streams.rs`).
//!
//! Here, in `device/`, because those waits are below `scope/`: the retry waits for the
//! streams of the scopes open on the thread that ran out of memory, and the
//! housekeeping stream may wait for one of them; a collective whose peer died, on one
//! of them, would otherwise hold the thread forever.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How long [`Watches::poll`] polls without pause.
const SPIN_FOR: Duration = Duration::from_millis(5);
/// From when it sleeps between polls, and how long.
const SLEEP_AFTER: Duration = Duration::from_millis(100);
const SLEEP: Duration = Duration::from_micros(200);
/// How often it asks the watches (an NCCL error query each).
const CHECK_EVERY: Duration = Duration::from_millis(1);

/// Work on a scope's stream that may never finish by itself (an NCCL collective waits
/// for its peers), and how to make it finish: asked again and again while a host wait
/// for the stream lasts, it says whether to go on waiting.
pub(crate) trait StreamWatch: Send + Sync {
    /// `Ok(())` to go on waiting after `waited`; `Err` once the watch has made its work
    /// stop (it aborted it: the stream's work can now complete) and the scope must
    /// report this error.
    fn check(&self, waited: Duration) -> Result<()>;

    /// Asked at the scope's end once its work has completed: `Err` when that work
    /// completed but must not be taken as a success (a collective whose ranks
    /// disagreed, completed by a stand-in; see `nccl/ledger.rs`).
    fn verdict(&self) -> Result<()> {
        Ok(())
    }

    /// `false` when [`verdict`](Self::verdict) is `Ok` whatever happens (the scope's end
    /// then does not ask it).
    fn may_object(&self) -> bool {
        false
    }

    /// What [`check`](Self::check) would give up with after `waited`, without making the
    /// work stop: asked by another thread's call that waits for the whole device while
    /// the scope's own thread is not waiting ([`Watches::wait_unattended`]). Only the
    /// scope's thread stops the work (an NCCL abort frees the communicator, which that
    /// thread may be about to call: `driver/nccl_comm.rs`).
    fn overdue(&self, waited: Duration) -> Option<Error>;
}

type WatchList = Vec<Arc<dyn StreamWatch>>;

/// The watches of one scope and its forks, and the first error one of them gave up
/// with, which the scope's end reports again (the watch aborted its work then, so the
/// stream has drained by the end, and without this the end would find it idle and
/// succeed).
#[derive(Default)]
pub(crate) struct Watches {
    list: Mutex<WatchList>,
    gave_up: Mutex<Option<Error>>,
    /// `true` once [`gave_up`](Self::gave_up) holds an error: every scope's end asks,
    /// almost always of a set that never gave up, and this answers without the lock.
    any_gave_up: AtomicBool,
    /// `true` once a watch that [may object](StreamWatch::may_object) was added: the
    /// scope's end asks for a [`verdict`](Self::verdict) only then.
    any_may_object: AtomicBool,
    /// How many waits of the scope's thread poll these watches now (one at most; a
    /// count so that nesting cannot clear it early): while one does, the watches will
    /// give up in time, and another thread's wait leaves that to it.
    polling: AtomicUsize,
    /// How many waits of the scope's thread have polled these watches: the watchdog
    /// counts a stream's unattended time from the last one.
    waits: AtomicUsize,
}

/// Counts a wait of the scope's thread in [`Watches::polling`] for as long as it lives.
struct Polling<'a>(&'a Watches);

impl<'a> Polling<'a> {
    fn start(watches: &'a Watches) -> Self {
        watches.polling.fetch_add(1, Ordering::AcqRel);
        watches.waits.fetch_add(1, Ordering::Relaxed);
        Polling(watches)
    }
}

impl Drop for Polling<'_> {
    fn drop(&mut self) {
        self.0.polling.fetch_sub(1, Ordering::AcqRel);
    }
}

thread_local! {
    /// The watches of the scopes open on this thread (see [`Watches::open`]). Weak: a
    /// scope's end takes its entry off ([`Watches::release`]); one whose scope ended on
    /// another thread (an owned scope's, at its completion) is skipped, then removed by
    /// the next [`Watches::open`].
    static OPEN: RefCell<Vec<Weak<Watches>>> = const { RefCell::new(Vec::new()) };

    /// The watches of this thread's last scope that ended holding the only count of
    /// them ([`Watches::release`]), emptied, for its next scope's [`Watches::open`]: a
    /// scope with a collective then allocates neither the set nor its list.
    static SPARE: Cell<Option<Arc<Watches>>> = const { Cell::new(None) };
}

impl Watches {
    /// The watches of a scope that runs on this thread, listed among this thread's
    /// open watches for as long as the scope keeps them (the scope's frame): an
    /// out-of-memory retry on this thread then waits for any stream within their bounds.
    pub(crate) fn open() -> Arc<Watches> {
        let watches = SPARE
            .try_with(Cell::take)
            .ok()
            .flatten()
            .unwrap_or_default();
        // Fails only while the thread is being torn down; the retry then waits unbounded.
        let _ = OPEN.try_with(|open| {
            let mut open = open.borrow_mut();
            open.retain(|w| w.strong_count() > 0);
            open.push(Arc::downgrade(&watches));
        });
        watches
    }

    /// At the end of the scope that opened `watches` (its last use of them): takes them
    /// off this thread's open watches, and keeps them, emptied, for the thread's next
    /// [`open`](Self::open) when nothing else holds them (no other thread's wait, no
    /// list's entry); else they are dropped with their last count, as before.
    pub(crate) fn release(mut watches: Arc<Watches>) {
        let _ = OPEN.try_with(|open| {
            let mut open = open.borrow_mut();
            let this = Arc::as_ptr(&watches);
            if let Some(at) = open.iter().rposition(|w| std::ptr::eq(w.as_ptr(), this)) {
                open.swap_remove(at);
            }
        });
        let Some(only) = Arc::get_mut(&mut watches) else {
            return;
        };
        // Emptied outside the thread-locals' borrows: a watch dropped here may hold the
        // last count of its communicator, whose drop destroys it.
        let mut list = std::mem::take(only.list.get_mut().unwrap_or_else(PoisonError::into_inner));
        list.clear();
        *only = Watches {
            list: Mutex::new(list),
            ..Watches::default()
        };
        let _ = SPARE.try_with(|spare| spare.set(Some(watches)));
    }

    /// Adds `watch` (the same `Arc` again is not added twice).
    pub(crate) fn add(&self, watch: &Arc<dyn StreamWatch>) {
        let mut list = self.list.lock().unwrap_or_else(PoisonError::into_inner);
        if !list.iter().any(|w| Arc::ptr_eq(w, watch)) {
            if watch.may_object() {
                self.any_may_object.store(true, Ordering::Release);
            }
            list.push(Arc::clone(watch));
        }
    }

    /// `true` while a wait of the scope's thread polls these watches.
    pub(crate) fn is_polled(&self) -> bool {
        self.polling.load(Ordering::Acquire) > 0
    }

    /// How many waits of the scope's thread have polled these watches so far.
    pub(crate) fn waits(&self) -> usize {
        self.waits.load(Ordering::Relaxed)
    }

    /// For the watchdog: asks each watch as a wait of the scope's thread would after
    /// `unattended` (a watch past its timeout aborts its work); the first that gives up
    /// is kept, and the scope's next wait or its end reports it.
    pub(crate) fn check_unattended(&self, unattended: Duration) -> Result<()> {
        let list = self.list();
        self.check(&list, unattended)
    }

    /// Polls `done` until it is `true` or a watch gives up (its error, which is also
    /// kept: see [`gave_up`](Self::gave_up)); once `done`, the error a watch gave up with
    /// before, if one did (the watchdog's, while the thread was not waiting: the work
    /// drained because it was aborted).
    pub(crate) fn poll(&self, mut done: impl FnMut() -> bool) -> Result<()> {
        if done() {
            // Complete at the first look, as at most scopes' ends: the loop below asks no
            // watch either when its first look finds the work done, so skip its setup
            // (the list's copy, the clock); still a wait of this thread, which the
            // watchdog counts.
            self.waits.fetch_add(1, Ordering::Relaxed);
            return self.gave_up().map_or(Ok(()), Err);
        }
        let list = self.list();
        let _polling = Polling::start(self);
        #[cfg(test)]
        gate::trace(format_args!("polls its scope's watches"));
        let polled = poll(done, |waited| self.check(&list, waited))
            .and_then(|()| self.gave_up().map_or(Ok(()), Err));
        #[cfg(test)]
        gate::trace(format_args!("polled its scope's watches: {polled:?}"));
        polled
    }

    /// For another thread than the scope's, before a call that waits for the whole
    /// device: polls `done` (the scope's stream, found idle, or the scope gone) until it
    /// is `true`, for as long as the scope's thread polls these watches too (they give up
    /// in time, and the abort lets the stream drain), and for as long as none of them is
    /// [overdue](StreamWatch::overdue) counting only the time no such wait ran.
    /// [`Error::HeldUpByAnotherThread`] then: the scope's thread is busy elsewhere, and
    /// this thread must not enter a call that would wait for the stream until it is back.
    pub(crate) fn wait_unattended(
        &self,
        grace: Duration,
        done: impl FnMut() -> bool,
    ) -> Result<()> {
        let list = self.list();
        let mut unattended = Duration::ZERO;
        let mut last = Duration::ZERO;
        #[cfg(test)]
        gate::trace(format_args!("waits for another thread's watched stream"));
        let waited = poll(done, |waited| {
            if self.polling.load(Ordering::Acquire) == 0 {
                unattended += waited - last;
            }
            last = waited;
            let past_grace = unattended.saturating_sub(grace);
            match list.iter().find_map(|watch| watch.overdue(past_grace)) {
                Some(_) => Err(Error::HeldUpByAnotherThread),
                None => Ok(()),
            }
        });
        #[cfg(test)]
        gate::trace(format_args!(
            "waited for another thread's watched stream: {waited:?}"
        ));
        waited
    }

    /// The watches now, outside the lock for the wait.
    fn list(&self) -> WatchList {
        self.list
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Asks each of `list` (this set's) after `waited`; the first that gives up is kept.
    fn check(&self, list: &[Arc<dyn StreamWatch>], waited: Duration) -> Result<()> {
        for watch in list {
            watch.check(waited).inspect_err(|e| self.note_gave_up(e))?;
        }
        Ok(())
    }

    /// The first watch's [`StreamWatch::verdict`] that is an `Err`, if any: asked at the
    /// scope's end, after its work completed.
    pub(crate) fn verdict(&self) -> Option<Error> {
        if !self.any_may_object.load(Ordering::Acquire) {
            return None;
        }
        self.list
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find_map(|w| w.verdict().err())
    }

    /// Keeps `error` as the first a watch gave up with, unless one is kept already.
    fn note_gave_up(&self, error: &Error) {
        let mut gave_up = self.gave_up.lock().unwrap_or_else(PoisonError::into_inner);
        if gave_up.is_none() {
            *gave_up = Some(error.clone());
            self.any_gave_up.store(true, Ordering::Release);
        }
    }

    /// The first error a watch of this set gave up with, if one did.
    pub(crate) fn gave_up(&self) -> Option<Error> {
        if !self.any_gave_up.load(Ordering::Acquire) {
            return None;
        }
        self.gave_up
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Polls `done` (a stream of this thread's, found idle) until it is `true` or a watch of
/// a scope open on this thread gives up: its error then, kept by its scope, whose end
/// reports it again. With no watched scope open, returns at once: the caller's
/// synchronisation is then the wait, as it always was.
///
/// For the out-of-memory retry, which waits for the streams of this thread's open
/// scopes before it tries again, and the housekeeping stream's synchronisations: without
/// this, a collective whose peer died, on one of those streams, would hold them forever.
pub(crate) fn wait_for_open_scopes(done: impl FnMut() -> bool) -> Result<()> {
    OpenWatches::now().map_or(Ok(()), |open| open.poll(done))
}

/// The watches of the scopes open on this thread that have issued a collective, taken
/// once (outside their locks) for the waits of one call: what bounds
/// [`wait_for_open_scopes`], and each of the waits for several streams before a call
/// that waits for the whole device (`memory/pool.rs`). Only this thread changes the
/// list, and it is busy waiting, so it holds for the whole call.
pub(crate) struct OpenWatches(Vec<(Arc<Watches>, WatchList)>);

impl OpenWatches {
    /// This thread's, or `None` while no scope open on it has issued a collective.
    pub(crate) fn now() -> Option<OpenWatches> {
        let open: Vec<(Arc<Watches>, WatchList)> = OPEN
            .try_with(|open| {
                open.borrow()
                    .iter()
                    .filter_map(Weak::upgrade)
                    .map(|set| {
                        let list = set.list();
                        (set, list)
                    })
                    .filter(|(_, list)| !list.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        (!open.is_empty()).then_some(OpenWatches(open))
    }

    /// Polls `done` until it is `true` or one of the watches gives up: its error then,
    /// kept by its scope, whose end reports it again.
    pub(crate) fn poll(&self, done: impl FnMut() -> bool) -> Result<()> {
        let _polling: Vec<Polling<'_>> =
            self.0.iter().map(|(set, _)| Polling::start(set)).collect();
        #[cfg(test)]
        gate::trace(format_args!("polls this thread's open watches"));
        let polled = poll(done, |waited| {
            self.0
                .iter()
                .try_for_each(|(set, list)| set.check(list, waited))
        });
        #[cfg(test)]
        gate::trace(format_args!(
            "polled this thread's open watches: {polled:?}"
        ));
        polled
    }
}

/// Polls `done` until it is `true`, asking `check` every [`CHECK_EVERY`] whether to go
/// on (its error ends the wait).
///
/// Polls as the driver's default (spinning) synchronisation does: without pause for
/// the first milliseconds, so a collective's end is seen within a query's time (a
/// backoff to 1 ms sleeps cost 25% of all_reduce bandwidth from 8 B to 64 MiB,
/// measured on 2 H200s); then yielding the core; past [`SLEEP_AFTER`], sleeping
/// [`SLEEP`] between queries.
fn poll(
    mut done: impl FnMut() -> bool,
    mut check: impl FnMut(Duration) -> Result<()>,
) -> Result<()> {
    let start = Instant::now();
    let mut next_check = Duration::ZERO;
    loop {
        if done() {
            return Ok(());
        }
        let waited = start.elapsed();
        if waited >= next_check {
            check(waited)?;
            next_check = waited + CHECK_EVERY;
        }
        if waited < SPIN_FOR {
            std::hint::spin_loop();
        } else if waited < SLEEP_AFTER {
            std::thread::yield_now();
        } else {
            std::thread::sleep(SLEEP);
        }
    }
}

#[cfg(test)]
pub(crate) mod gate;
#[cfg(test)]
pub(crate) mod gives_up_after;
#[cfg(test)]
mod tests;
