//! [`Outstanding`]: what the end of a scope waits for besides its stream: the copy-outs
//! of staged downloads started in it and its forks, and the watches of work that may
//! never finish on its own (a collective whose peer died), which bound the wait.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::device::Stream;
use crate::error::Result;
use crate::host::staging::download::DownloadJob;

/// Work on a scope's stream that may never finish by itself (an NCCL collective waits
/// for its peers), and how to make it finish: asked again and again while the scope's
/// end waits for its stream, it says whether to go on waiting.
pub(crate) trait StreamWatch: Send + Sync {
    /// `Ok(())` to go on waiting after `waited`; `Err` once the watch has made its work
    /// stop (it aborted it: the stream's work can now complete) and the scope must
    /// report this error.
    fn check(&self, waited: Duration) -> Result<()>;
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
    pub(crate) fn watch(&self, watch: &Arc<dyn StreamWatch>) {
        let mut watches = self.watches.lock().unwrap_or_else(PoisonError::into_inner);
        if !watches.iter().any(|w| Arc::ptr_eq(w, watch)) {
            watches.push(Arc::clone(watch));
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
    /// which the caller synchronises as usual). Polls: every 20 µs at first, backing off
    /// to every millisecond.
    #[cold]
    pub(crate) fn wait_watched(&self, stream: &Stream) -> Result<()> {
        let watches = self
            .watches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let start = Instant::now();
        let mut pause = Duration::from_micros(20);
        loop {
            // An error of the query (a fault) is the synchronisation's to report.
            if stream.is_idle().unwrap_or(true) {
                return Ok(());
            }
            for watch in &watches {
                watch.check(start.elapsed())?;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
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
