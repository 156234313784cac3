//! [`Inflight`]: the values a future owns while the GPU may still use them, and the
//! [`Signal`] a host function raises when it no longer does.
//!
//! The life of one operation:
//!
//! 1. The operation enqueues its work on a stream; the work uses memory owned by the
//!    *payload* (host buffers, `DeviceVec`s, staging blocks).
//! 2. [`Inflight::after`] records an event (for the error check, step 4) and enqueues a
//!    host function. From here the payload is owned by the `Inflight`, inside the
//!    future, until step 4 or 5.
//! 3. The driver runs the host function on its own thread once everything enqueued
//!    before it has completed: it sets `done` and sends the signal to the completion
//!    thread ([`queue`](super::queue)), nothing else (no CUDA call).
//! 4. The completion thread wakes the future's waker. The future, polled, sees `done`,
//!    queries the event (a kernel fault before it is reported as that sticky error) and
//!    hands the payload back.
//! 5. A future dropped before step 4 parks its payload in the signal; the completion
//!    thread drops it after step 3, with the device's context bound. If the future
//!    learns that step 3 already happened, it drops the payload itself.
//!
//! A forgotten future keeps its payload forever (a leak); if step 2 fails, the payload
//! is leaked too, since work that uses it may be enqueued and nothing would tell when it
//! ends. Nothing is ever released while the GPU may still use it, and no thread but the
//! completion thread waits for anything.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::device::{Device, Event, Stream};
use crate::driver::host_func::{launch_host_callback, HostCallback};
use crate::error::Result;

/// Operations whose host function has not yet been handled by the completion thread.
pub(super) static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// Operations the completion thread has handled.
pub(super) static COMPLETED: AtomicU64 = AtomicU64::new(0);
/// Payloads of dropped futures released by the completion thread.
pub(super) static RELEASED_AFTER_DROP: AtomicU64 = AtomicU64::new(0);
/// Payloads leaked because no host function could be enqueued after their work.
pub(super) static LEAKED: AtomicU64 = AtomicU64::new(0);

/// What one operation's host function raises, shared by the future, the driver's
/// callback and the completion thread.
pub(super) struct Signal {
    /// Set by the host function: every piece of work enqueued before it has completed
    /// (or the context has stopped).
    done: AtomicBool,
    /// The waker of the last poll.
    waker: Mutex<Option<Waker>>,
    /// The payload of a future dropped before `done`, released by the completion thread.
    parked: Mutex<Option<Box<dyn std::any::Any + Send>>>,
    /// Keeps the context (the event's, the payload's memory's) alive; bound while a
    /// parked payload is dropped.
    device: Device,
}

/// `lock` that ignores poisoning: no code panics while holding these locks, except a
/// waker or a payload's `Drop`, after which the data is still consistent.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

// SAFETY: `run` stores an atomic and sends the signal into the completion queue (an
// unbounded channel: no blocking, no CUDA); if the queue is gone it leaks the signal
// rather than drop it there (its drop could release a payload or a device, which calls
// CUDA). It touches neither the waker nor the payload.
unsafe impl HostCallback for Signal {
    fn run(self: Arc<Self>) {
        self.done.store(true, Ordering::Release);
        super::queue::send_from_host_function(self);
    }
}

impl Signal {
    /// Runs on the completion thread, once per operation, after the host function: wakes
    /// the future, and releases the payload of a dropped one.
    pub(super) fn finish(&self) {
        let waker = lock(&self.waker).take();
        if let Some(waker) = waker {
            waker.wake();
        }
        let parked = lock(&self.parked).take();
        if let Some(payload) = parked {
            // Bound for the drop: freeing a `DeviceVec` or giving a staging block back
            // may need the context current on this thread.
            let bound = self.device.inner.bind();
            drop(payload);
            drop(bound);
            RELEASED_AFTER_DROP.fetch_add(1, Ordering::Relaxed);
        }
        COMPLETED.fetch_add(1, Ordering::Relaxed);
        IN_FLIGHT.fetch_sub(1, Ordering::Release);
    }
}

/// A payload whose work is enqueued, owned until a host function after that work has
/// run (see the [module docs](self)). Dropping it before then parks the payload for the
/// completion thread; forgetting it leaks the payload.
pub(super) struct Inflight<P: Send + 'static> {
    signal: Arc<Signal>,
    /// Recorded right before the host function; queried once `done` is seen, which
    /// reports a kernel fault the host function cannot see.
    event: Event,
    /// `None` once handed back.
    payload: Option<P>,
}

impl<P: Send + 'static> Inflight<P> {
    /// Marks the end of the work enqueued so far on `stream`, which uses memory owned
    /// by `payload`: records an event and enqueues the host function. The caller has
    /// the stream's context bound.
    ///
    /// On `Err` the payload is leaked: work that uses it may have been enqueued, and
    /// nothing would say when it ends.
    pub(super) fn after(stream: &Stream, payload: P) -> Result<Self> {
        match Self::mark(stream) {
            Ok((signal, event)) => Ok(Inflight {
                signal,
                event,
                payload: Some(payload),
            }),
            Err(e) => {
                LEAKED.fetch_add(1, Ordering::Relaxed);
                std::mem::forget(payload);
                Err(e)
            }
        }
    }

    fn mark(stream: &Stream) -> Result<(Arc<Signal>, Event)> {
        super::queue::ensure_started()?;
        let event = Event::cached(&stream.device.inner.context)?;
        event.record(&stream.raw)?;
        let signal = Arc::new(Signal {
            done: AtomicBool::new(false),
            waker: Mutex::new(None),
            parked: Mutex::new(None),
            device: stream.device.clone(),
        });
        IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = launch_host_callback(&stream.raw, Arc::clone(&signal)) {
            // The callback's `Arc` is leaked by the driver layer, so `signal` stays
            // alive; it will never be finished.
            IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
            return Err(e);
        }
        Ok((signal, event))
    }

    /// `Ready` once the host function has run: the payload, and `Err` when the stream
    /// reported an error (a kernel fault) up to that point.
    ///
    /// # Panics
    ///
    /// When polled again after it returned `Ready` (as futures may).
    pub(super) fn poll_complete(&mut self, cx: &mut Context<'_>) -> Poll<(Result<()>, P)> {
        if !self.signal.done.load(Ordering::Acquire) {
            {
                let mut slot = lock(&self.signal.waker);
                match &*slot {
                    Some(old) if old.will_wake(cx.waker()) => {}
                    _ => *slot = Some(cx.waker().clone()),
                }
            }
            // The host function may have run between the first check and storing the
            // waker, and the completion thread may have found no waker: check again.
            if !self.signal.done.load(Ordering::Acquire) {
                return Poll::Pending;
            }
        }
        let Some(payload) = self.payload.take() else {
            panic!("a stream_core future was polled after it completed");
        };
        // The host function ran, so the recorded work is done or the context stopped; a
        // sticky error shows here. `Ok(false)` cannot happen after the host function
        // (its start "has the same effect as synchronizing an event recorded in the
        // same stream immediately prior"), and would not make the payload less idle.
        let status = self
            .event
            .is_complete(&self.signal.device.inner.context)
            .map(|_| ());
        Poll::Ready((status, payload))
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
        if self.signal.done.load(Ordering::Acquire) {
            drop(payload); // the GPU is done with it
            return;
        }
        *lock(&self.signal.parked) = Some(Box::new(payload));
        // Either the completion thread takes the parked payload after this store, or it
        // looked before (and found nothing); in that case it did so after `done` was set,
        // so this load sees `true` and the payload is taken back and dropped here.
        if self.signal.done.load(Ordering::Acquire) {
            let back = lock(&self.signal.parked).take();
            drop(back);
        }
    }
}
