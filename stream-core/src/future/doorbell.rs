//! [`Doorbell`]: the second thread of a device's completion, which finishes operations
//! that end while the completion thread sleeps on an older operation of another stream.
//!
//! # Why a second thread
//!
//! The completion thread ([`watcher`](super::watcher)) sleeps in `cuEventSynchronize` on
//! the oldest operation it watches, and the driver has no call that waits for the first
//! of several events. Alone, it would notice an operation that ends early (a short
//! request) only when an older one of another stream (a long kernel) ends: the
//! head-of-line effect. So on a stream with the bypass on
//! ([`Stream::set_head_of_line_bypass`]), an operation handed over while operations of
//! *another* stream are pending also gets a host function (`cuLaunchHostFunc`)
//! ordered after its event: the *ring*. The driver calls it once the event has
//! completed, whatever the completion thread is waiting for; it only puts the operation
//! on this thread's list and wakes it (a host function may not call CUDA, nor run a
//! foreign waker that might), and this thread finishes the operation: sets its outcome,
//! wakes its future, releases a dropped future's values.
//!
//! The ring is not enqueued on the operation's own stream: work enqueued after a host
//! function waits until the driver has called it, which takes tens of microseconds, and
//! a server's next request on that stream would wait with it (measured on an H100: the
//! 64 KiB server loop fell from 1.04-1.09x to 0.90-0.91x of the thread-per-stream
//! design). Each stream has a companion stream of this crate's own (`Stream::ring`,
//! made on first use) where the ring waits for the event (`cuStreamWaitEvent`) and then
//! runs; only rings wait behind rings there.
//!
//! # Why it is opt-in
//!
//! Rings are not free: measured on an H100 with every stream's bypass on, the 64 KiB
//! server loop of `bench --case serve` (16 streams, so every operation rings) fell from
//! 1.00-1.11x of the thread-per-stream design to 0.80-0.92x, with ring streams or
//! without, and with `CUDA_DEVICE_MAX_CONNECTIONS` 8 or 32. In exchange, an empty
//! operation made while a 1 ms kernel's is pending on another stream resolved after
//! 82-109 µs instead of 608-641 µs. A server of requests of about equal length loses to
//! rings; a stream of short, latency-bound work next to streams of long kernels wins.
//!
//! The completion thread still watches every operation's event, and stays the one that
//! sees errors (after a kernel fault the driver calls no host function) and recycles the
//! events. Whichever of the two threads learns first finishes an operation; the other
//! finds it finished ([`Signal::finish`] acts once).
//!
//! # Which operations ring
//!
//! An operation handed over while every pending operation is on its own stream does not
//! ring: the completion thread then waits on that stream's operations in order, and
//! since every operation of another stream handed over later rings, nothing is ever held
//! behind an operation of another stream. A single stream's work (a pipeline on one
//! stream, a single request) therefore costs no host function; a server with requests on
//! many streams pays one `cuLaunchHostFunc` per operation.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};

use super::completion::{finish_caught, lock, Outcome, Signal};
use crate::device::Stream;
use crate::driver::event::RawEvent;
use crate::driver::host_func::{launch_host_callback, HostCallback};
use crate::driver::stream::RawStream;
use crate::error::{Error, Result};

impl Stream {
    /// Whether this stream's async operations ([`run_owned`](Stream::run_owned),
    /// [`upload_owned`](Stream::upload_owned), [`download_owned`](Stream::download_owned))
    /// may be held behind longer operations of other streams of the device (off, the
    /// default) or bypass them (on).
    ///
    /// The device's completion thread sleeps on its oldest pending operation, so an
    /// operation that ends while an older one of another stream still runs is noticed
    /// only when that one ends: a short request behind a long kernel waits for the
    /// kernel. With the bypass on, such an operation also gets a host function after
    /// its work (on a companion stream of this one, so this stream never waits for it),
    /// which hands it to a second thread as soon as the GPU is done: measured on an
    /// H100, an empty operation made while a 1 ms kernel's was pending on another stream
    /// resolved after 82-109 µs, against 608-641 µs without.
    ///
    /// The cost, paid only while another stream has work pending: a
    /// `cuStreamWaitEvent` and a `cuLaunchHostFunc` per operation, and a wake-up of the
    /// second thread. For many streams of requests of about equal length it costs more
    /// than it saves (see the [module docs](crate::future)); turn it on for the streams
    /// whose latency matters next to streams of long work.
    ///
    /// ```no_run
    /// # async fn f(dev: &stream_core::Device) -> stream_core::Result<()> {
    /// let training = dev.new_stream()?;      // long kernels
    /// let requests = dev.new_stream()?;      // short, latency-bound requests
    /// requests.set_head_of_line_bypass(true);
    /// let ((), ()) = requests.run_owned((), |_s, ()| Ok::<_, stream_core::Error>(())).await?;
    /// # let _ = training; Ok(()) }
    /// ```
    pub fn set_head_of_line_bypass(&self, on: bool) {
        self.head_of_line_bypass.store(on, Ordering::Relaxed);
    }
}

/// The streams with pending operations, as the completion thread's state counts them:
/// what decides whether a new operation rings (see the [module docs](self)).
#[derive(Debug, Default)]
pub(super) struct StreamsWithWork {
    /// `(stream key, pending operations)`, counts above zero; a handful of streams.
    counts: Vec<(usize, usize)>,
}

impl StreamsWithWork {
    /// `true` when an operation of a stream other than `stream` is pending: an operation
    /// of `stream` handed over now must ring.
    pub(super) fn others_than(&self, stream: usize) -> bool {
        self.counts.iter().any(|&(key, _)| key != stream)
    }

    /// One more pending operation on `stream`.
    pub(super) fn add(&mut self, stream: usize) {
        match self.counts.iter_mut().find(|(key, _)| *key == stream) {
            Some((_, count)) => *count += 1,
            None => self.counts.push((stream, 1)),
        }
    }

    /// One operation of `stream` finished by the completion thread.
    pub(super) fn remove(&mut self, stream: usize) {
        if let Some(at) = self.counts.iter().position(|(key, _)| *key == stream) {
            self.counts[at].1 -= 1;
            if self.counts[at].1 == 0 {
                self.counts.swap_remove(at);
            }
        }
    }
}

/// The doorbell thread of one device, as the rings see it: the operations whose stream
/// has reached their ring.
pub(super) struct Doorbell {
    rung: Mutex<Vec<Weak<Signal>>>,
    /// Wakes the thread when a ring adds to an empty list.
    ringing: Condvar,
}

impl Doorbell {
    /// A doorbell and its thread, named after device `ordinal`. The caller keeps the
    /// `Arc` for the life of the process (the rings' safety rests on it).
    pub(super) fn start(ordinal: usize) -> Result<Arc<Doorbell>> {
        let doorbell = Arc::new(Doorbell {
            rung: Mutex::new(Vec::new()),
            ringing: Condvar::new(),
        });
        let thread_doorbell = Arc::clone(&doorbell);
        std::thread::Builder::new()
            .name(format!("stream-core-doorbell-{ordinal}"))
            .spawn(move || thread_doorbell.run())
            .map_err(|e| {
                Error::from(crate::error::CompletionThread {
                    reason: e.to_string(),
                })
            })?;
        Ok(doorbell)
    }

    /// Enqueues the ring of `signal`'s operation on `ring_stream`, after `event` (recorded
    /// after the operation's work, and not reused before this returns). The caller has
    /// the streams' context bound. A ring that cannot be enqueued only leaves the
    /// operation to the completion thread, which watches its event anyway.
    pub(super) fn ring_after(
        self: &Arc<Self>,
        ring_stream: &RawStream,
        event: &RawEvent,
        signal: Weak<Signal>,
    ) {
        if ring_stream.wait(event).is_err() {
            return;
        }
        let ring = Box::new(Ring {
            doorbell: Arc::clone(self),
            signal,
        });
        let _ = launch_host_callback(ring_stream, ring);
    }

    /// The thread's loop: sleeps until rung, then finishes the rung operations that are
    /// still alive. It never returns.
    fn run(&self) {
        let mut rung = Vec::new();
        loop {
            {
                let mut list = lock(&self.rung);
                while list.is_empty() {
                    list = self
                        .ringing
                        .wait(list)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                std::mem::swap(&mut *list, &mut rung);
            }
            for signal in rung.drain(..) {
                // Gone: finished by the completion thread, and its future too.
                if let Some(signal) = signal.upgrade() {
                    // The stream reached the ring, so the work before it completed.
                    finish_caught(signal, Outcome::Complete);
                }
            }
        }
    }
}

/// The host function of one operation: hands the operation to the doorbell thread.
struct Ring {
    doorbell: Arc<Doorbell>,
    signal: Weak<Signal>,
}

// SAFETY: `run` makes no CUDA call and waits for no GPU work: it locks a mutex that the
// doorbell thread holds only to swap two lists (no CUDA call, no wait, under it) and
// other rings hold only to push, pushes a `Weak` (dropping nothing of the signal), wakes
// a condition variable, and drops an `Arc<Doorbell>` that is never the last: every
// doorbell is kept by its device's watcher, and the watchers live in a static list for
// the life of the process.
unsafe impl HostCallback for Ring {
    fn run(self: Box<Self>) {
        let Ring { doorbell, signal } = *self;
        lock(&doorbell.rung).push(signal);
        doorbell.ringing.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::StreamsWithWork;

    #[test]
    fn an_operation_rings_only_when_another_stream_has_work_pending() {
        let mut work = StreamsWithWork::default();
        assert!(!work.others_than(1), "nothing pending: no ring");
        work.add(1);
        work.add(1);
        assert!(!work.others_than(1), "only its own stream pending: no ring");
        assert!(work.others_than(2), "another stream pending: ring");
        work.add(2);
        work.remove(1);
        assert!(work.others_than(2), "stream 1 still has one pending");
        work.remove(1);
        assert!(!work.others_than(2), "stream 1 drained");
        work.remove(2);
        work.remove(2); // more removes than adds leave it empty, not negative
        assert!(!work.others_than(3));
        work.add(3);
        assert!(work.others_than(4) && !work.others_than(3));
    }
}
