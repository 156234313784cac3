//! [`Watcher`]: the completion thread of one device, which watches the events recorded
//! after the futures' work, wakes the futures whose work has ended and releases the
//! payloads of dropped ones.
//!
//! # How the thread waits, without polling
//!
//! Each operation hands the thread an event recorded after its work, made with
//! `CU_EVENT_BLOCKING_SYNC`, and its [`Signal`]. The thread keeps the operations it
//! watches in one queue per stream, in the order they were recorded, and loops:
//!
//! 1. With nothing to watch, it sleeps on its queue (a `Condvar`) until an operation is
//!    handed to it.
//! 2. It asks the driver (`cuEventQuery`) about the oldest operation of each stream,
//!    and finishes every one whose event has completed, then the next of that stream
//!    (work of one stream completes in order, so one query per stream finds them all).
//! 3. If none had completed, it waits for the oldest operation of all in
//!    `cuEventSynchronize`: the event is blocking-sync, so the thread sleeps until the
//!    driver wakes it, and the executor threads are not involved. Then it finishes that
//!    operation, takes the ones handed to it meanwhile, and goes back to step 2.
//!
//! Nothing spins: the thread is asleep in step 1 or 3 whenever no operation it watches
//! has ended. In [`CompletionMode::Poll`] (opt-in, per device), step 3 is skipped: the
//! thread yields its core and goes back to step 2, taking the operations handed over
//! meanwhile, for as long as any is in flight; it still sleeps in step 1. Operations
//! made while it polls record plain events, which cost the GPU less than blocking-sync
//! ones (see [`spare_events`](super::spare_events)) but cannot be slept on: should the
//! mode switch back to sleeping before such an operation ends, the thread keeps polling
//! until the oldest operation is one it can sleep on.
//!
//! **Head of line.** While the thread sleeps on the oldest operation (step 3), an
//! operation of another stream that ends earlier is noticed only when that oldest one
//! ends. On a stream with the head-of-line bypass on
//! ([`Stream::set_head_of_line_bypass`]), an operation handed over while another stream
//! has work pending also rings the device's [`doorbell`](super::doorbell): a host
//! function after its event, which wakes a second thread that finishes it. One handed
//! over while only its own stream had work pending needs no ring: the thread waits on
//! that stream's operations in order. The thread counts the pending operations of each
//! stream for that decision ([`StreamsWithWork`]).
//!
//! # Why a thread of this crate, and why per device
//!
//! Waking a future runs foreign code (the executor's waker), dropping a parked payload
//! may free device memory, and waiting for the GPU must not happen on an executor
//! thread: so one thread of this crate does all three, with the device's context bound.
//! One per device, started with the device's first operation, so that devices do not
//! wait for each other. It is not an executor thread.
//!
//! Events are reused: the thread keeps the spent ones, and operations take a spare
//! before they create one, so creating events (about a microsecond of driver time) stays
//! off the hot path.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use super::completion::{finish_caught, lock, Outcome, Signal};
use super::completion_mode::{CompletionMode, ModeCell};
use super::doorbell::{Doorbell, StreamsWithWork};
use super::spare_events::{EventKind, SpareEvents};
use crate::device::{Device, Stream};
use crate::driver::device::DeviceId;
use crate::driver::event::RawEvent;
use crate::driver::stream::RawStream;
use crate::error::{Error, Result};

/// The completion thread of one device, as the operations see it: where they take a
/// spare event and hand the recorded one over.
pub(super) struct Watcher {
    device: DeviceId,
    /// The device's ordinal, for the threads' names.
    ordinal: usize,
    state: Mutex<State>,
    /// Wakes the thread when it sleeps with nothing to watch.
    handed: Condvar,
    /// The device's doorbell thread, started with the first operation that rings;
    /// `None` if it could not start (operations are then left to this thread).
    doorbell: OnceLock<Option<Arc<Doorbell>>>,
    /// How the thread waits while operations are in flight.
    mode: ModeCell,
}

/// What the operations and the thread share.
struct State {
    /// Operations handed over since the thread last looked, in the order handed.
    handed: Vec<Watched>,
    /// Spent events, for reuse.
    spare: SpareEvents,
    /// The thread sleeps on [`Watcher::handed`] with nothing to watch.
    sleeping: bool,
    /// The operations handed over and not yet finished by the thread, per stream: an
    /// operation handed over while another stream has some rings the doorbell.
    with_work: StreamsWithWork,
}

/// An operation watched by the thread: the event recorded after its work, and its
/// signal (which keeps the device, hence the event's context, alive).
struct Watched {
    event: RawEvent,
    /// The event's kind: whether the thread may sleep on it.
    kind: EventKind,
    signal: Arc<Signal>,
    /// The stream the event was recorded on, as a key (work of one stream completes in
    /// order).
    stream: usize,
    /// Handed-over order, across streams.
    order: u64,
}

/// The watchers started so far, one per device, for the life of the process.
static WATCHERS: Mutex<Vec<Arc<Watcher>>> = Mutex::new(Vec::new());

impl Watcher {
    /// The watcher of `device`, whose thread is started on first use.
    pub(super) fn of(device: &Device) -> Result<Arc<Watcher>> {
        let id = device.inner.device;
        let mut watchers = lock(&WATCHERS);
        if let Some(watcher) = watchers.iter().find(|w| w.device == id) {
            return Ok(Arc::clone(watcher));
        }
        let watcher = Arc::new(Watcher {
            device: id,
            ordinal: device.inner.ordinal,
            state: Mutex::new(State {
                handed: Vec::new(),
                spare: SpareEvents::default(),
                sleeping: false,
                with_work: StreamsWithWork::default(),
            }),
            handed: Condvar::new(),
            doorbell: OnceLock::new(),
            mode: ModeCell::default(),
        });
        let thread_watcher = Arc::clone(&watcher);
        std::thread::Builder::new()
            .name(format!("stream-core-completion-{}", device.inner.ordinal))
            .spawn(move || thread_watcher.run())
            .map_err(|e| {
                Error::from(crate::error::CompletionThread {
                    reason: e.to_string(),
                })
            })?;
        watchers.push(Arc::clone(&watcher));
        Ok(watcher)
    }

    /// The watcher of `device` if its thread has started.
    pub(super) fn existing(device: &Device) -> Option<Arc<Watcher>> {
        let id = device.inner.device;
        lock(&WATCHERS).iter().find(|w| w.device == id).cloned()
    }

    pub(super) fn mode(&self) -> CompletionMode {
        self.mode.get()
    }

    /// Sets the mode; a thread asleep with nothing to watch keeps sleeping (either mode
    /// sleeps then), one in `cuEventSynchronize` switches when that wait ends.
    pub(super) fn set_mode(&self, mode: CompletionMode) {
        self.mode.set(mode);
    }

    /// Records an event after the work enqueued on `stream` so far and hands it, with
    /// `signal`, to the thread, which finishes `signal` once the event has completed;
    /// rings the doorbell after it too when another stream has work pending. The caller
    /// has the stream's context bound. On `Err` nothing was handed over.
    pub(super) fn watch(&self, stream: &Stream, signal: Arc<Signal>) -> Result<()> {
        let context = &stream.device.inner.context;
        let kind = EventKind::for_mode(self.mode.get());
        let (spare, stale) = lock(&self.state).spare.take(kind, context);
        drop(stale); // destroyed outside the lock
        let event = match spare {
            Some(event) => event,
            None => kind.create(context)?,
        };
        if let Err(e) = event.record(&stream.raw) {
            // Not recorded: its last record (if any) completed before it became a spare.
            lock(&self.state).spare.put(kind, event);
            return Err(e);
        }
        let key = stream.raw.raw() as usize;
        let watched = Watched {
            event,
            kind,
            signal,
            stream: key,
            order: 0,
        };
        let mut state = lock(&self.state);
        // Decided and counted under the lock that hands it over (or, when it rings,
        // before it is handed over), so that an operation that does not ring had only its
        // own stream's before it.
        let rings =
            stream.head_of_line_bypass.load(Ordering::Relaxed) && state.with_work.others_than(key);
        state.with_work.add(key);
        if rings {
            // Rung before it is handed over: its event is not reused before then.
            drop(state);
            self.ring(stream, &watched);
            state = lock(&self.state);
        }
        state.handed.push(watched);
        if state.sleeping {
            state.sleeping = false;
            self.handed.notify_one();
        }
        Ok(())
    }

    /// Rings the doorbell after `watched`'s event, on `stream`'s companion stream (both
    /// made on first use; without them, `watched` is left to this thread).
    fn ring(&self, stream: &Stream, watched: &Watched) {
        let Some(doorbell) = self
            .doorbell
            .get_or_init(|| Doorbell::start(self.ordinal).ok())
        else {
            return;
        };
        let ring_stream = stream
            .ring
            .get_or_init(|| RawStream::new(&stream.device.inner.context).ok());
        if let Some(ring_stream) = ring_stream {
            doorbell.ring_after(ring_stream, &watched.event, Arc::downgrade(&watched.signal));
        }
    }

    /// The thread's loop (see the [module docs](self)). It never returns: the thread
    /// lives as long as the process.
    fn run(&self) {
        let mut lanes = Lanes::default();
        let mut spent = Spent::default();
        loop {
            let excess = {
                let mut state = lock(&self.state);
                for stream in spent.streams.drain(..) {
                    state.with_work.remove(stream);
                }
                for (kind, event) in spent.events.drain(..) {
                    state.spare.put(kind, event);
                }
                let excess = state.spare.excess();
                while state.handed.is_empty() && lanes.is_empty() {
                    state.sleeping = true;
                    state = self
                        .handed
                        .wait(state)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                state.sleeping = false;
                for watched in state.handed.drain(..) {
                    lanes.push(watched);
                }
                excess
            };
            drop(excess); // destroyed outside the lock
            if lanes.finish_completed(&mut spent) == 0 {
                let slept =
                    self.mode.get() == CompletionMode::Sleep && lanes.wait_for_oldest(&mut spent);
                if !slept {
                    // Back to the top: take what was handed over meanwhile, query again.
                    std::thread::yield_now();
                }
            }
        }
    }
}

/// The operations the thread watches: a queue per stream, oldest first.
#[derive(Default)]
struct Lanes {
    by_stream: HashMap<usize, VecDeque<Watched>>,
    next_order: u64,
}

impl Lanes {
    fn is_empty(&self) -> bool {
        self.by_stream.is_empty()
    }

    fn push(&mut self, mut watched: Watched) {
        watched.order = self.next_order;
        self.next_order += 1;
        self.by_stream
            .entry(watched.stream)
            .or_default()
            .push_back(watched);
    }

    /// Finishes, stream by stream, every operation at the front whose event has
    /// completed (or failed); returns how many.
    fn finish_completed(&mut self, spent: &mut Spent) -> usize {
        let mut finished = 0;
        for lane in self.by_stream.values_mut() {
            while let Some(front) = lane.front() {
                let outcome = {
                    let device = &front.signal.device.inner;
                    let queried = device
                        .bind()
                        .and_then(|_bound| front.event.is_complete(&device.context));
                    match queried {
                        Ok(false) => break,
                        Ok(true) => Outcome::Complete,
                        Err(e) => Outcome::failed(e),
                    }
                };
                if let Some(watched) = lane.pop_front() {
                    finish(watched, outcome, spent);
                    finished += 1;
                }
            }
        }
        self.by_stream.retain(|_, lane| !lane.is_empty());
        finished
    }

    /// Sleeps until the oldest operation's event has completed (blocking-sync: no
    /// spinning), and finishes it; `false`, without waiting, when there is none or its
    /// event was made for polling (it cannot be slept on).
    fn wait_for_oldest(&mut self, spent: &mut Spent) -> bool {
        let oldest = self
            .by_stream
            .iter()
            .filter_map(|(stream, lane)| lane.front().map(|w| (w.order, *stream)))
            .min();
        let Some((_, stream)) = oldest else {
            return false;
        };
        let Some(lane) = self.by_stream.get_mut(&stream) else {
            return false;
        };
        if lane.front().map(|w| w.kind) != Some(EventKind::Blocking) {
            return false;
        }
        let Some(watched) = lane.pop_front() else {
            return false;
        };
        let device = &watched.signal.device.inner;
        let outcome = match watched.event.synchronize(&device.context) {
            Ok(()) => Outcome::Complete,
            Err(e) => Outcome::failed(e),
        };
        finish(watched, outcome, spent);
        self.by_stream.retain(|_, lane| !lane.is_empty());
        true
    }
}

/// What the thread finished since it last took its state's lock: the events to reuse,
/// and the stream of each operation (for [`State::with_work`]).
#[derive(Default)]
struct Spent {
    events: Vec<(EventKind, RawEvent)>,
    streams: Vec<usize>,
}

/// Finishes one operation (unless the doorbell thread did): its signal (waker and
/// parked payload, see [`finish_caught`]), and keeps its event for reuse when it
/// completed.
fn finish(watched: Watched, outcome: Outcome, spent: &mut Spent) {
    let Watched {
        event,
        kind,
        signal,
        stream,
        ..
    } = watched;
    let reusable = matches!(outcome, Outcome::Complete);
    finish_caught(signal, outcome);
    spent.streams.push(stream);
    match reusable {
        true => spent.events.push((kind, event)),
        false => drop(event), // failed: not reused
    }
}
