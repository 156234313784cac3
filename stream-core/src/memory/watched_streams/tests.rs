//! The watchdog's looks on the host alone: watches that give up after a while stand for
//! a collective whose peer died, `is_idle` for the stream's query.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{watchdog_wanted, StreamsLookedAt, Unattended};
use crate::device::watch::gives_up_after::GivesUpAfter;
use crate::device::watch::{StreamWatch, Watches};
use crate::error::Error;

const TICK: Duration = Duration::from_millis(10);

/// The streams as a test has them: busy or idle, and markers (numbered as recorded) that
/// pass once `passing`, or none recorded at all with `unmarkable`.
#[derive(Default)]
struct StandIn {
    idle: bool,
    passing: bool,
    unmarkable: bool,
    marks: Cell<usize>,
}

impl StandIn {
    fn busy() -> Self {
        StandIn::default()
    }

    fn idle() -> Self {
        StandIn {
            idle: true,
            ..StandIn::default()
        }
    }

    fn passing() -> Self {
        StandIn {
            passing: true,
            ..StandIn::default()
        }
    }
}

impl StreamsLookedAt for StandIn {
    type Marker = usize;

    fn is_idle(&self, _id: u64) -> bool {
        self.idle
    }

    fn mark(&self, _id: u64) -> Option<usize> {
        if self.unmarkable {
            return None;
        }
        self.marks.set(self.marks.get() + 1);
        Some(self.marks.get())
    }

    fn passed(&self, _marker: &usize) -> Option<bool> {
        Some(self.passing)
    }
}

/// A scope's watches with one watch that gives up after `after`.
fn watched(after: Duration) -> (Arc<Watches>, Arc<GivesUpAfter>) {
    let watch = GivesUpAfter::new(after);
    let watches = Arc::new(Watches::default());
    watches.add(&(Arc::clone(&watch) as Arc<dyn StreamWatch>));
    (watches, watch)
}

#[test]
fn a_busy_unattended_stream_is_given_up_on_after_the_watchs_time() {
    let (watches, watch) = watched(Duration::from_millis(50));
    let listed = [(1, Arc::clone(&watches))];
    let mut unattended = Unattended::<usize>::default();
    // The first look finds it busy and counts from there: nothing yet.
    for _ in 0..5 {
        unattended.look(&listed, TICK, &StandIn::busy());
    }
    assert!(watches.gave_up().is_none(), "gave up after 40 ms of 50");
    unattended.look(&listed, TICK, &StandIn::busy());
    assert!(
        matches!(watches.gave_up(), Some(Error::CollectiveTimedOut { .. })),
        "{:?}",
        watches.gave_up()
    );
    assert_eq!(watch.longest_ms(), 50);
}

#[test]
fn an_idle_stream_and_a_wait_between_looks_start_the_count_again() {
    let (watches, watch) = watched(Duration::from_millis(35));
    let listed = [(1, Arc::clone(&watches))];
    let mut unattended = Unattended::<usize>::default();
    for _ in 0..3 {
        unattended.look(&listed, TICK, &StandIn::busy());
    }
    unattended.look(&listed, TICK, &StandIn::idle()); // idle: forgotten
    for _ in 0..3 {
        unattended.look(&listed, TICK, &StandIn::busy());
    }
    // The thread waits (a short wait, between two looks).
    assert!(watches.poll(|| true).is_ok());
    for _ in 0..3 {
        unattended.look(&listed, TICK, &StandIn::busy());
    }
    assert!(watches.gave_up().is_none(), "{:?}", watches.gave_up());
    // Each run of three looks counted 0, 10 and 20 ms.
    assert_eq!(watch.longest_ms(), 20);
}

#[test]
fn a_stream_whose_thread_waits_now_is_left_to_that_wait() {
    let (watches, watch) = watched(Duration::from_secs(60));
    let listed = [(1, Arc::clone(&watches))];
    let mut unattended = Unattended::<usize>::default();
    let looked = AtomicBool::new(false);
    std::thread::scope(|threads| {
        let waiting = threads.spawn(|| watches.poll(|| looked.load(Ordering::SeqCst)));
        while !watches.is_polled() {
            std::hint::spin_loop();
        }
        // An hour busy: asked, the watch would give up.
        unattended.look(&listed, Duration::from_secs(3600), &StandIn::busy());
        looked.store(true, Ordering::SeqCst);
        assert!(waiting.join().unwrap().is_ok());
    });
    // Only the waiting thread's own poll asked the watch, about its own short wait.
    assert!(watch.longest_ms() < 60_000);
    assert!(watches.gave_up().is_none());
    assert!(unattended.0.is_empty());
}

#[test]
fn streams_no_longer_listed_are_forgotten() {
    let (first, _) = watched(Duration::from_secs(60));
    let (second, _) = watched(Duration::from_secs(60));
    let mut unattended = Unattended::<usize>::default();
    unattended.look(
        &[(1, Arc::clone(&first)), (2, Arc::clone(&second))],
        TICK,
        &StandIn::busy(),
    );
    assert_eq!(unattended.0.len(), 2);
    unattended.look(&[(2, second)], TICK, &StandIn::busy());
    assert_eq!(unattended.0.keys().copied().collect::<Vec<_>>(), [2]);
}

#[test]
fn a_stream_whose_markers_pass_is_never_given_up_on() {
    // Fed by its thread without a wait, busy at every look, for 100 times the timeout.
    let (watches, watch) = watched(Duration::from_millis(50));
    let listed = [(1, Arc::clone(&watches))];
    let mut unattended = Unattended::<usize>::default();
    let streams = StandIn::passing();
    for _ in 0..500 {
        unattended.look(&listed, TICK, &streams);
    }
    assert!(watches.gave_up().is_none(), "{:?}", watches.gave_up());
    assert_eq!(watch.longest_ms(), 0);
    // One marker on the first look, then one again after each look that saw it passed.
    assert_eq!(streams.marks.get(), 500);
}

#[test]
fn the_count_starts_again_when_a_marker_passes_and_goes_on_while_none_does() {
    let (watches, watch) = watched(Duration::from_millis(45));
    let listed = [(1, Arc::clone(&watches))];
    let mut unattended = Unattended::<usize>::default();
    for _ in 0..4 {
        unattended.look(&listed, TICK, &StandIn::busy()); // 0, 10, 20, 30 ms
    }
    unattended.look(&listed, TICK, &StandIn::passing()); // moved: 0
    for _ in 0..4 {
        unattended.look(&listed, TICK, &StandIn::busy()); // 10 .. 40 ms
    }
    assert!(watches.gave_up().is_none(), "{:?}", watches.gave_up());
    assert_eq!(watch.longest_ms(), 40);
    unattended.look(&listed, TICK, &StandIn::busy()); // 50 ms: a hang
    assert!(
        matches!(watches.gave_up(), Some(Error::CollectiveTimedOut { .. })),
        "{:?}",
        watches.gave_up()
    );
}

#[test]
fn a_stream_no_marker_can_be_recorded_on_is_counted_as_busy() {
    let (watches, _) = watched(Duration::from_millis(50));
    let listed = [(1, Arc::clone(&watches))];
    let mut unattended = Unattended::<usize>::default();
    let streams = StandIn {
        unmarkable: true,
        passing: true,
        ..StandIn::default()
    };
    for _ in 0..6 {
        unattended.look(&listed, TICK, &streams);
    }
    assert!(
        matches!(watches.gave_up(), Some(Error::CollectiveTimedOut { .. })),
        "{:?}",
        watches.gave_up()
    );
}

#[test]
fn the_watchdog_runs_unless_the_setting_turns_it_off() {
    for on in [None, Some("1"), Some("on"), Some(""), Some("yes")] {
        assert!(watchdog_wanted(on), "{on:?}");
    }
    for off in [Some("0"), Some("off"), Some("OFF"), Some(" false ")] {
        assert!(!watchdog_wanted(off), "{off:?}");
    }
}
