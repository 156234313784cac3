//! [`ProgressMarker`]: an event the watchdog has recorded on a watched stream, after the
//! work queued on it so far, to tell when that work has completed. The records, and the
//! events' destruction, are made by a thread of their own ([`request`]), so that one
//! held up in the driver (behind another thread's `cuMemFreeHost`, which waits for the
//! whole GPU, a hung collective included) holds up neither the watchdog, which is what
//! aborts that collective, nor the list of watched streams: the watchdog then sees a
//! marker not yet recorded and counts on, as without markers. One thread records for
//! every stream, so the markers asked for meanwhile wait behind a held-up one: their
//! streams count as busy without progress until it returns, as they would without
//! markers.

use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::Lease;
use crate::driver::context::PrimaryContext;
use crate::driver::event::RawEvent;

/// A marker asked for, recorded, or lost.
enum Recorded {
    /// Asked for: the marker thread has not recorded it yet.
    Asked,
    /// Recorded on the stream, after the work queued on it then.
    On(RawEvent, Arc<PrimaryContext>),
    /// Not recorded: the stream was no longer listed, or the driver refused.
    Lost,
}

/// What the marker thread is asked to do.
enum Job {
    Record(Arc<Lease>, Arc<Mutex<Recorded>>),
    /// Drop a marker the watchdog is done with (an event's destruction is a driver call
    /// too).
    Retire(Arc<Mutex<Recorded>>),
}

/// The watchdog's handle on a marker; dropped, it is retired on the marker thread.
pub(super) struct ProgressMarker(Option<Arc<Mutex<Recorded>>>);

impl ProgressMarker {
    /// `Some(true)` once the work queued on the stream before the marker has completed;
    /// `Some(false)` while it runs, and while the marker is not recorded yet; `None` when
    /// it was lost, or its query failed (a new one is to be asked for).
    pub(super) fn passed(&self) -> Option<bool> {
        let recorded = self.0.as_ref()?;
        match &*recorded.lock().unwrap_or_else(PoisonError::into_inner) {
            Recorded::Asked => Some(false),
            Recorded::On(event, context) => event.is_complete(context).ok(),
            Recorded::Lost => None,
        }
    }
}

impl Drop for ProgressMarker {
    fn drop(&mut self) {
        if let (Some(recorded), Some(jobs)) = (self.0.take(), jobs()) {
            // If the thread is gone the job comes back, and the marker is dropped here.
            let _ = jobs.send(Job::Retire(recorded));
        }
    }
}

/// Asks the marker thread to record a marker on `lease`'s stream; `None` when the thread
/// could not be started.
pub(super) fn request(lease: Arc<Lease>) -> Option<ProgressMarker> {
    let recorded = Arc::new(Mutex::new(Recorded::Asked));
    jobs()?
        .send(Job::Record(lease, Arc::clone(&recorded)))
        .ok()?;
    Some(ProgressMarker(Some(recorded)))
}

/// The marker thread's queue, started with the first request; `None` if it cannot be.
fn jobs() -> Option<&'static Sender<Job>> {
    static JOBS: OnceLock<Option<Sender<Job>>> = OnceLock::new();
    JOBS.get_or_init(|| {
        let (jobs, queued) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("stream-core-markers".into())
            .spawn(move || {
                for job in queued {
                    match job {
                        Job::Record(lease, recorded) => {
                            let on = lease.with_stream(|stream, context| {
                                let event = RawEvent::new(context).ok()?;
                                event.record_on_borrowed(stream).ok()?;
                                Some(Recorded::On(event, Arc::clone(context)))
                            });
                            let on = on.flatten().unwrap_or(Recorded::Lost);
                            *recorded.lock().unwrap_or_else(PoisonError::into_inner) = on;
                        }
                        Job::Retire(recorded) => drop(recorded),
                    }
                }
            })
            .ok()?;
        Some(jobs)
    })
    .as_ref()
}
