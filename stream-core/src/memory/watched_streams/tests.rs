//! The watchdog's looks on the host alone: watches that give up after a while stand for
//! a collective whose peer died, `is_idle` for the stream's query.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{watchdog_wanted, Unattended};
use crate::device::watch::gives_up_after::GivesUpAfter;
use crate::device::watch::{StreamWatch, Watches};
use crate::error::Error;

const TICK: Duration = Duration::from_millis(10);

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
    let mut unattended = Unattended::default();
    // The first look finds it busy and counts from there: nothing yet.
    for _ in 0..5 {
        unattended.look(&listed, TICK, |_| false);
    }
    assert!(watches.gave_up().is_none(), "gave up after 40 ms of 50");
    unattended.look(&listed, TICK, |_| false);
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
    let mut unattended = Unattended::default();
    for _ in 0..3 {
        unattended.look(&listed, TICK, |_| false);
    }
    unattended.look(&listed, TICK, |_| true); // idle: forgotten
    for _ in 0..3 {
        unattended.look(&listed, TICK, |_| false);
    }
    // The thread waits (a short wait, between two looks).
    assert!(watches.poll(|| true).is_ok());
    for _ in 0..3 {
        unattended.look(&listed, TICK, |_| false);
    }
    assert!(watches.gave_up().is_none(), "{:?}", watches.gave_up());
    // Each run of three looks counted 0, 10 and 20 ms.
    assert_eq!(watch.longest_ms(), 20);
}

#[test]
fn a_stream_whose_thread_waits_now_is_left_to_that_wait() {
    let (watches, watch) = watched(Duration::from_secs(60));
    let listed = [(1, Arc::clone(&watches))];
    let mut unattended = Unattended::default();
    let looked = AtomicBool::new(false);
    std::thread::scope(|threads| {
        let waiting = threads.spawn(|| watches.poll(|| looked.load(Ordering::SeqCst)));
        while !watches.is_polled() {
            std::hint::spin_loop();
        }
        // An hour busy: asked, the watch would give up.
        unattended.look(&listed, Duration::from_secs(3600), |_| false);
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
    let mut unattended = Unattended::default();
    unattended.look(
        &[(1, Arc::clone(&first)), (2, Arc::clone(&second))],
        TICK,
        |_| false,
    );
    assert_eq!(unattended.0.len(), 2);
    unattended.look(&[(2, second)], TICK, |_| false);
    assert_eq!(unattended.0.keys().copied().collect::<Vec<_>>(), [2]);
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
