//! [`Outstanding`]: what the end of a scope waits for besides its stream: the copy-outs
//! of staged downloads started in it and its forks, and the watches of work that may
//! never finish on its own (a collective whose peer died), which bound the wait.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::device::Stream;
use crate::error::{Error, Result};
use crate::host::staging::download::DownloadJob;

/// How long [`Outstanding::wait_watched`] polls without pause.
const SPIN_FOR: Duration = Duration::from_millis(5);
/// From when it sleeps between polls, and how long.
const SLEEP_AFTER: Duration = Duration::from_millis(100);
const SLEEP: Duration = Duration::from_micros(200);
/// How often it asks the watches (an NCCL error query each).
const CHECK_EVERY: Duration = Duration::from_millis(1);

/// Work on a scope's stream that may never finish by itself (an NCCL collective waits
/// for its peers), and how to make it finish: asked again and again while the scope's
/// end waits for its stream, it says whether to go on waiting.
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
}

/// A [`StreamWatch`] as a scope keeps it, with the address that identifies it computed
/// once (a collective notes its communicator's watch on every call).
pub(crate) struct Watch {
    watch: Arc<dyn StreamWatch>,
    address: usize,
}

impl Watch {
    pub(crate) fn new(watch: Arc<dyn StreamWatch>) -> Self {
        let address = Arc::as_ptr(&watch).cast::<()>() as usize;
        Watch { watch, address }
    }
}

/// The staged downloads and watches of a scope and its forks, which the scope waits for
/// and consults at its end (in its own frame, on return and on unwind). Lives in
/// `scope`'s frame and is only used from the scope's thread (a `Scope` is neither `Send`
/// nor `Sync`); the mutexes only keep this type `Sync`, so that the compiler's error for a
/// scope sent to another thread names the scope's brand alone.
#[derive(Default)]
pub(crate) struct Outstanding {
    jobs: Mutex<Vec<DownloadJob>>,
    /// `true` once a job was pushed: a scope without staged downloads ends without
    /// taking the lock.
    any: AtomicBool,
    watches: Mutex<Vec<Arc<dyn StreamWatch>>>,
    /// `true` once a watch was added: a scope without one synchronises directly.
    watched: AtomicBool,
    /// The address of the watch added last: the next collective on the same
    /// communicator (the common case) skips the lock.
    last_watch: AtomicUsize,
    /// The first error a watch gave up with during a wait inside the scope (a download's
    /// `Pending::wait`, a pageable copy), which the scope's end reports again: the
    /// communicator was aborted then, so the stream has drained by the end, and without
    /// this the end would find it idle and succeed.
    gave_up: Mutex<Option<Error>>,
}

impl Outstanding {
    /// Notes `job`; jobs already done are dropped from the list.
    pub(crate) fn push(&self, job: DownloadJob) {
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        jobs.retain(|j| !j.is_done());
        jobs.push(job);
        self.any.store(true, Ordering::Relaxed);
    }

    /// Notes `watch` (once per watch: the same `Arc` again is not added twice).
    #[inline]
    pub(crate) fn watch(&self, watch: &Watch) {
        if self.last_watch.load(Ordering::Relaxed) == watch.address {
            return;
        }
        self.add_watch(watch);
        self.last_watch.store(watch.address, Ordering::Relaxed);
    }

    #[cold]
    fn add_watch(&self, watch: &Watch) {
        let mut watches = self.watches.lock().unwrap_or_else(PoisonError::into_inner);
        if !watches.iter().any(|w| Arc::ptr_eq(w, &watch.watch)) {
            watches.push(Arc::clone(&watch.watch));
        }
        self.watched.store(true, Ordering::Relaxed);
    }

    /// `true` once a watch was added.
    #[inline(always)]
    pub(crate) fn is_watched(&self) -> bool {
        self.watched.load(Ordering::Relaxed)
    }

    /// Waits, on the host, until `stream` is idle or a watch gives up; in the second
    /// case the watch has made the stream's work stop and its error is returned (after
    /// which the caller synchronises as usual). `Ok(true)`: a query of the stream
    /// succeeded, which the driver documents as "all operations in the stream have
    /// completed" (`cuStreamQuery`'s `CUDA_SUCCESS`), what a synchronisation would
    /// prove; `Ok(false)`: a query failed, and the caller's synchronisation says why.
    #[cold]
    pub(crate) fn wait_watched(&self, stream: &Stream) -> Result<bool> {
        self.poll_query(|| stream.is_idle())
    }

    /// [`bound_wait`](Self::bound_wait) for a driver query (an event's): `Ok(true)` when a
    /// query reported the work complete, which proves what a synchronisation would;
    /// `Ok(false)` when no collective was issued (nothing was polled) or a query failed:
    /// the caller synchronises, which waits or reports why.
    #[inline]
    pub(crate) fn bound_wait_query(&self, query: impl FnMut() -> Result<bool>) -> Result<bool> {
        if self.is_watched() {
            self.poll_query(query)
        } else {
            Ok(false)
        }
    }

    /// Polls `query` until it reports completion or fails, or a watch gives up (its
    /// error); `Ok(true)` only when a query reported completion.
    #[cold]
    fn poll_query(&self, mut query: impl FnMut() -> Result<bool>) -> Result<bool> {
        let mut complete = false;
        self.poll_watched(|| match query() {
            Ok(done) => {
                complete = done;
                done
            }
            // An error of the query (a fault) is the synchronisation's to report.
            Err(_) => true,
        })?;
        Ok(complete)
    }

    /// Before a host wait for work of this scope's stream that a watched collective may
    /// hold up (a download, its copy-out, a replay): nothing when no collective was
    /// issued; else waits until `done()` says that work has completed, or a watch
    /// gives up (its error then, the collective aborted so the stream drains), so the
    /// host wait that follows is bounded as the scope's end is.
    #[inline]
    pub(crate) fn bound_wait(&self, done: impl FnMut() -> bool) -> Result<()> {
        if self.is_watched() {
            self.poll_watched(done)
        } else {
            Ok(())
        }
    }

    /// Polls `done` until it is `true` or a watch gives up.
    ///
    /// Polls as the driver's default (spinning) synchronisation does: without pause for
    /// the first milliseconds, so a collective's end is seen within a query's time (a
    /// backoff to 1 ms sleeps cost 25% of all_reduce bandwidth from 8 B to 64 MiB,
    /// measured on 2 H200s); then yielding the core; past [`SLEEP_AFTER`], sleeping
    /// [`SLEEP`] between queries. The watches are asked every [`CHECK_EVERY`].
    #[cold]
    fn poll_watched(&self, mut done: impl FnMut() -> bool) -> Result<()> {
        let watches = self
            .watches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let start = Instant::now();
        let mut next_check = Duration::ZERO;
        loop {
            if done() {
                return Ok(());
            }
            let waited = start.elapsed();
            if waited >= next_check {
                for watch in &watches {
                    watch.check(waited).inspect_err(|e| self.note_gave_up(e))?;
                }
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

    /// The first watch's [`StreamWatch::verdict`] that is an `Err`, if any: asked at the
    /// scope's end, after its work completed.
    #[cold]
    pub(crate) fn verdict(&self) -> Option<Error> {
        self.watches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .find_map(|w| w.verdict().err())
    }

    /// Keeps `error` as the first a watch gave up with, unless one is kept already.
    #[cold]
    fn note_gave_up(&self, error: &Error) {
        let mut gave_up = self.gave_up.lock().unwrap_or_else(PoisonError::into_inner);
        if gave_up.is_none() {
            *gave_up = Some(error.clone());
        }
    }

    /// The first error a watch gave up with in this scope, if one did.
    #[cold]
    pub(crate) fn gave_up(&self) -> Option<Error> {
        self.gave_up
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits for every job; the first error, if any.
    #[inline]
    pub(crate) fn wait_all(&self) -> Result<()> {
        if !self.any.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.wait_for_jobs()
    }

    /// [`wait_all`](Self::wait_all) once a job was pushed.
    #[cold]
    fn wait_for_jobs(&self) -> Result<()> {
        let jobs = std::mem::take(&mut *self.jobs.lock().unwrap_or_else(PoisonError::into_inner));
        let mut first = Ok(());
        for job in jobs {
            if let Err(e) = job.wait() {
                first = first.and(Err(e));
            }
        }
        first
    }
}
