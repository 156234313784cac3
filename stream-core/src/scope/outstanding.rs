//! [`Outstanding`]: what the end of a scope waits for besides its stream: the copy-outs
//! of staged downloads started in it and its forks, and the watches of work that may
//! never finish on its own (a collective whose peer died), which bound the wait.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

pub(crate) use crate::device::watch::StreamWatch;
use crate::device::watch::Watches;
use crate::device::Stream;
use crate::error::{Error, Result};
use crate::host::staging::download::DownloadJob;

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
    /// The watches of the collectives issued in the scope, made at the first one (and
    /// then listed among this thread's open watches: `device/watch.rs`).
    watches: OnceLock<Arc<Watches>>,
    /// The address of the watch added last: the next collective on the same
    /// communicator (the common case) skips the lock.
    last_watch: AtomicUsize,
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
        self.watches.get_or_init(Watches::open).add(&watch.watch);
    }

    /// The watches, once a watch was added.
    #[inline(always)]
    pub(crate) fn watches(&self) -> Option<&Arc<Watches>> {
        self.watches.get()
    }

    /// `true` once a watch was added.
    #[inline(always)]
    pub(crate) fn is_watched(&self) -> bool {
        self.watches.get().is_some()
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

    /// For a scope whose end is not a synchronisation (an owned scope, whose future the
    /// completion thread finishes): when collectives were issued, waits until `stream` is
    /// idle or a watch gives up (the communicator aborted, the stream drains), and
    /// returns what the end of a scope would report: the error a watch gave up with
    /// (now or during a wait inside the scope), else a watch's verdict on the completed
    /// work. `Ok(())` at once when no collective was issued.
    pub(crate) fn end_watched(&self, stream: &Stream) -> Result<()> {
        if !self.is_watched() {
            return Ok(());
        }
        let waited = self.wait_watched(stream);
        match self.first_error(&waited) {
            Some(e) => Err(e),
            None => waited.map(drop),
        }
    }

    /// What a scope's end reports after `waited` ([`wait_watched`](Self::wait_watched)'s
    /// result), before the stream's own state: the first error a watch gave up with in
    /// this scope (during a wait inside it or just now), else, once the work completed, a
    /// watch's verdict on it (ranks that disagreed).
    #[cold]
    pub(crate) fn first_error(&self, waited: &Result<bool>) -> Option<Error> {
        self.gave_up().or_else(|| match waited {
            Ok(_) => self.verdict(),
            Err(_) => None,
        })
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

    /// Polls `done` until it is `true` or a watch gives up (its error, kept for the
    /// scope's end).
    #[cold]
    fn poll_watched(&self, done: impl FnMut() -> bool) -> Result<()> {
        match self.watches.get() {
            Some(watches) => watches.poll(done),
            None => Ok(()),
        }
    }

    /// The first watch's [`StreamWatch::verdict`] that is an `Err`, if any: asked at the
    /// scope's end, after its work completed.
    #[cold]
    pub(crate) fn verdict(&self) -> Option<Error> {
        self.watches.get().and_then(|watches| watches.verdict())
    }

    /// The first error a watch gave up with in this scope (during a wait inside it, its
    /// end, or an out-of-memory retry on its thread), if one did.
    #[cold]
    pub(crate) fn gave_up(&self) -> Option<Error> {
        self.watches.get().and_then(|watches| watches.gave_up())
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

impl Drop for Outstanding {
    /// The scope has ended: its watches go back to its thread (`Watches::release`).
    fn drop(&mut self) {
        if let Some(watches) = self.watches.take() {
            Watches::release(watches);
        }
    }
}

#[cfg(test)]
mod tests;
