//! [`Inflight`]: the values a future owns while the GPU may still use them, and the
//! [`Signal`] the device's completion thread raises when it no longer does.
//!
//! The life of one operation:
//!
//! 1. The operation enqueues its work on a stream; the work uses memory owned by the
//!    *payload* (host buffers, `DeviceVec`s, staging blocks).
//! 2. [`Inflight::after`] records an event on the stream, after that work, and hands it
//!    with a new signal to the device's completion thread ([`watcher`](super::watcher)).
//!    From here the payload is owned by the `Inflight`, inside the future, until step 4
//!    or 5.
//! 3. The completion thread sees the event complete (or the context stop with a sticky
//!    error), sets the signal's [`Outcome`] and wakes the future's waker.
//! 4. The future, polled, sees the outcome and hands the payload back (or, on an error,
//!    releases or leaks it, see [`Outcome`]).
//! 5. A future dropped before step 4 parks its payload in the signal; the completion
//!    thread drops it after step 3, with the device's context bound. If the future
//!    learns that step 3 already happened, it drops the payload itself.
//!
//! A forgotten future keeps its payload forever (a leak); if step 2 fails, the payload
//! is leaked too, since work that uses it may be enqueued and nothing would tell when it
//! ends. Nothing is ever released while the GPU may still use it, and no thread but the
//! completion thread waits for anything.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};

use super::watcher::Watcher;
use crate::device::{Device, Stream};
use crate::error::{Error, Result};

/// Operations whose completion the completion thread has not handled yet.
pub(super) static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// Operations the completion thread has handled.
pub(super) static COMPLETED: AtomicU64 = AtomicU64::new(0);
/// Payloads of dropped futures released by the completion thread.
pub(super) static RELEASED_AFTER_DROP: AtomicU64 = AtomicU64::new(0);
/// Payloads leaked because the end of their work could not be marked or observed.
pub(super) static LEAKED: AtomicU64 = AtomicU64::new(0);

/// How an operation's work ended, as its completion thread observed it.
#[derive(Debug, Clone)]
pub(super) enum Outcome {
    /// The event after the work completed: the payload is idle.
    Complete,
    /// The context stopped with a sticky error (a kernel fault) before the event
    /// completed: no work of it runs any more, so the payload is idle too, and the error
    /// is the operation's.
    Stopped(Error),
    /// Waiting for the event failed with an error that does not say the context
    /// stopped: whether the work still runs is unknown, so the payload is leaked.
    Unknown(Error),
}

impl Outcome {
    /// The outcome of a failed event query or synchronisation.
    pub(super) fn failed(error: Error) -> Self {
        match error.is_sticky() {
            true => Outcome::Stopped(error),
            false => Outcome::Unknown(error),
        }
    }
}

/// One operation's completion, shared by the future and the completion thread.
pub(super) struct Signal {
    /// Set once, by the completion thread, when the work has ended.
    outcome: OnceLock<Outcome>,
    /// The waker of the last poll.
    waker: Mutex<Option<Waker>>,
    /// The payload of a future dropped before the outcome was set, released (or leaked)
    /// by the completion thread.
    parked: Mutex<Option<Box<dyn std::any::Any + Send>>>,
    /// Keeps the context (the event's, the payload's memory's) alive; bound while the
    /// completion thread waits for the event and drops a parked payload.
    pub(super) device: Device,
}

/// `lock` that ignores poisoning: no code panics while holding these locks, except a
/// waker or a payload's `Drop`, after which the data is still consistent.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Finishes `signal` with `outcome` (see [`Signal::finish`]) under `catch_unwind`: a
/// panicking waker or `Drop` must not stop the completions of every other future. The
/// last handle of the signal may be the last of its device, so it is dropped inside the
/// catch too. Runs on this crate's own threads only, never on the driver's.
pub(super) fn finish_caught(signal: Arc<Signal>, outcome: Outcome) {
    let finished = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        signal.finish(outcome);
        drop(signal);
    }));
    if finished.is_err() {
        eprintln!(
            "stream_core: a waker or a dropped future's value panicked on a completion \
             thread; the panic was ignored"
        );
    }
}

impl Signal {
    /// Runs on the completion thread (or the doorbell thread, whichever learns first)
    /// when the operation's work has ended: sets the outcome, wakes the future, and
    /// releases (or, for [`Outcome::Unknown`], leaks) the payload of a dropped one. Only
    /// the first call does anything: the outcome is set once.
    pub(super) fn finish(&self, outcome: Outcome) {
        let leak = matches!(outcome, Outcome::Unknown(_));
        if self.outcome.set(outcome).is_err() {
            return; // finished already, by the other thread
        }
        let waker = lock(&self.waker).take();
        if let Some(waker) = waker {
            waker.wake();
        }
        let parked = lock(&self.parked).take();
        if let Some(payload) = parked {
            if leak {
                std::mem::forget(payload);
                LEAKED.fetch_add(1, Ordering::Relaxed);
            } else {
                // Bound for the drop: freeing a `DeviceVec` or giving a staging block
                // back may need the context current on this thread.
                let bound = self.device.inner.bind();
                drop(payload);
                drop(bound);
                RELEASED_AFTER_DROP.fetch_add(1, Ordering::Relaxed);
            }
        }
        COMPLETED.fetch_add(1, Ordering::Relaxed);
        IN_FLIGHT.fetch_sub(1, Ordering::Release);
    }

    /// `true` once the completion thread has set the outcome.
    fn is_done(&self) -> bool {
        self.outcome.get().is_some()
    }
}

/// A payload whose work is enqueued, owned until the completion thread has seen an
/// event recorded after that work complete (see the [module docs](self)). Dropping it
/// before then parks the payload for the completion thread; forgetting it leaks the
/// payload.
pub(super) struct Inflight<P: Send + 'static> {
    signal: Arc<Signal>,
    /// `None` once handed back.
    payload: Option<P>,
}

impl<P: Send + 'static> Inflight<P> {
    /// Marks the end of the work enqueued so far on `stream`, which uses memory owned
    /// by `payload`: records an event and hands it to `watcher`, the completion thread of
    /// the stream's device (which the caller got before enqueuing anything, so that a
    /// thread that cannot start fails the operation before any work). The caller has the
    /// stream's context bound.
    ///
    /// On `Err` the payload is leaked: work that uses it may have been enqueued, and
    /// nothing would say when it ends.
    pub(super) fn after(watcher: &Watcher, stream: &Stream, payload: P) -> Result<Self> {
        match Self::mark(watcher, stream) {
            Ok(signal) => Ok(Inflight {
                signal,
                payload: Some(payload),
            }),
            Err(e) => {
                LEAKED.fetch_add(1, Ordering::Relaxed);
                std::mem::forget(payload);
                Err(e)
            }
        }
    }

    fn mark(watcher: &Watcher, stream: &Stream) -> Result<Arc<Signal>> {
        let signal = Arc::new(Signal {
            outcome: OnceLock::new(),
            waker: Mutex::new(None),
            parked: Mutex::new(None),
            device: stream.device.clone(),
        });
        IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = watcher.watch(stream, Arc::clone(&signal)) {
            // Nothing was handed to the completion thread: it will never finish `signal`.
            IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
            return Err(e);
        }
        Ok(signal)
    }

    /// `Ready` once the completion thread has seen the work end: `Ok(payload)`, or `Err`
    /// when the stream reported an error (a kernel fault) up to that point, in which case
    /// the payload has been released ([`Outcome::Stopped`]) or leaked
    /// ([`Outcome::Unknown`]).
    ///
    /// # Panics
    ///
    /// When polled again after it returned `Ready` (as futures may).
    pub(super) fn poll_complete(&mut self, cx: &mut Context<'_>) -> Poll<Result<P>> {
        let signal = &self.signal;
        let outcome = match signal.outcome.get() {
            Some(outcome) => outcome,
            None => {
                {
                    let mut slot = lock(&signal.waker);
                    match &*slot {
                        Some(old) if old.will_wake(cx.waker()) => {}
                        _ => *slot = Some(cx.waker().clone()),
                    }
                }
                // The completion thread may have set the outcome between the first check
                // and storing the waker, and found no waker: check again.
                match signal.outcome.get() {
                    Some(outcome) => outcome,
                    None => return Poll::Pending,
                }
            }
        };
        let Some(payload) = self.payload.take() else {
            panic!("a stream_core future was polled after it completed");
        };
        Poll::Ready(match outcome {
            Outcome::Complete => Ok(payload),
            Outcome::Stopped(e) => {
                drop(payload); // the context stopped: nothing uses it any more
                Err(e.clone())
            }
            Outcome::Unknown(e) => {
                std::mem::forget(payload);
                LEAKED.fetch_add(1, Ordering::Relaxed);
                Err(e.clone())
            }
        })
    }
}

impl<P: Send + 'static> Drop for Inflight<P> {
    /// Hands a payload still in use to the completion thread (see the [module
    /// docs](self), step 5). Never blocks.
    fn drop(&mut self) {
        let Some(payload) = self.payload.take() else {
            return;
        };
        lock(&self.signal.waker).take();
        if self.signal.is_done() {
            self.release_done(payload);
            return;
        }
        *lock(&self.signal.parked) = Some(Box::new(payload));
        // Either the completion thread takes the parked payload after this store, or it
        // looked before (and found nothing); in that case it did so after the outcome was
        // set, so this check sees it, and the payload is taken back and handled here.
        if self.signal.is_done() {
            let back = lock(&self.signal.parked).take();
            if let Some(back) = back {
                self.release_done(back);
            }
        }
    }
}

impl<P: Send + 'static> Inflight<P> {
    /// Drops a payload whose work has ended, or leaks it when its outcome is
    /// [`Outcome::Unknown`].
    fn release_done<Q>(&self, payload: Q) {
        match self.signal.outcome.get() {
            Some(Outcome::Complete | Outcome::Stopped(_)) => drop(payload),
            Some(Outcome::Unknown(_)) | None => {
                std::mem::forget(payload);
                LEAKED.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
