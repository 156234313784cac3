//! The bounded waits on the host alone: watches that give up after a while stand for a
//! collective whose peer died, a `done` that never turns `true` for its stream.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::gives_up_after::GivesUpAfter;
use super::{wait_for_open_scopes, OpenWatches, StreamWatch, Watches};
use crate::error::Error;

/// A scope's watches, open on this thread, holding `watch`.
fn open_with(watch: &Arc<GivesUpAfter>) -> Arc<Watches> {
    let watches = Watches::open();
    watches.add(&(Arc::clone(watch) as Arc<dyn StreamWatch>));
    watches
}

fn is_timed_out(result: &crate::Result<()>) -> bool {
    matches!(result, Err(Error::CollectiveTimedOut { .. }))
}

#[test]
fn without_a_watched_scope_the_retry_wait_is_left_to_the_synchronisation() {
    // Nothing bounds it, so it does not poll: the caller's synchronisation waits.
    assert!(wait_for_open_scopes(|| false).is_ok());
}

#[test]
fn a_watch_of_an_open_scope_ends_the_retry_wait_and_its_scope_keeps_the_error() {
    let watch = GivesUpAfter::new(Duration::from_millis(20));
    let watches = open_with(&watch);
    let waited = wait_for_open_scopes(|| false);
    assert!(is_timed_out(&waited), "{waited:?}");
    assert!(matches!(
        watches.gave_up(),
        Some(Error::CollectiveTimedOut { .. })
    ));
    assert!(watch.checks() > 1);
}

#[test]
fn a_stream_found_idle_ends_the_wait_without_an_error() {
    let watch = GivesUpAfter::new(Duration::from_secs(60));
    let watches = open_with(&watch);
    let mut polls = 0;
    let waited = wait_for_open_scopes(|| {
        polls += 1;
        polls == 50
    });
    assert!(waited.is_ok(), "{waited:?}");
    assert!(watches.gave_up().is_none());
    assert!(watches.poll(|| true).is_ok());
}

#[test]
fn the_watches_of_an_ended_scope_no_longer_bound_anything() {
    let watch = GivesUpAfter::new(Duration::ZERO);
    drop(open_with(&watch));
    assert!(wait_for_open_scopes(|| false).is_ok());
    assert_eq!(watch.checks(), 0);
}

#[test]
fn another_threads_open_scope_does_not_bound_this_threads_wait() {
    let watch = GivesUpAfter::new(Duration::ZERO);
    let (opened, close) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    std::thread::scope(|threads| {
        threads.spawn(|| {
            let _watches = open_with(&watch);
            opened.wait();
            close.wait();
        });
        opened.wait();
        assert!(wait_for_open_scopes(|| false).is_ok());
        close.wait();
    });
    assert_eq!(watch.checks(), 0);
}

#[test]
fn a_scope_poll_that_gives_up_keeps_the_first_error() {
    let (first, second) = (
        GivesUpAfter::new(Duration::from_millis(5)),
        GivesUpAfter::new(Duration::ZERO),
    );
    let watches = open_with(&first);
    let polled = watches.poll(|| false);
    assert!(is_timed_out(&polled));
    // A later give-up (another wait of the scope) does not replace the first error.
    watches.add(&(Arc::clone(&second) as Arc<dyn StreamWatch>));
    let _ = watches.poll(|| false);
    let kept = watches.gave_up();
    assert!(
        matches!(kept, Some(Error::CollectiveTimedOut { timeout }) if timeout == first.after),
        "{kept:?}"
    );
}

#[test]
fn a_scope_is_watched_while_it_keeps_watches_with_one_watch_in_them() {
    assert!(OpenWatches::now().is_none());
    let watches = Watches::open();
    // Opened at the first collective, but nothing to bound the waits with yet.
    assert!(OpenWatches::now().is_none());
    watches.add(&(GivesUpAfter::new(Duration::from_secs(1)) as Arc<dyn StreamWatch>));
    assert!(OpenWatches::now().is_some());
    // Another thread's scopes do not bound this thread's waits.
    assert!(std::thread::spawn(|| OpenWatches::now().is_none())
        .join()
        .unwrap());
    drop(watches);
    assert!(OpenWatches::now().is_none());
}

/// Another thread's wait for a scope's stream that nothing drains: once the watch is
/// overdue it gives up with `HeldUpByAnotherThread`, without asking the watch to stop the
/// work (only the scope's thread aborts), and the scope keeps no error of it.
#[test]
fn an_unattended_wait_gives_up_when_the_watch_is_overdue_and_stops_nothing() {
    let watch = GivesUpAfter::new(Duration::from_millis(20));
    let watches = open_with(&watch);
    let start = Instant::now();
    let waited = std::thread::scope(|threads| {
        threads
            .spawn(|| watches.wait_unattended(Duration::ZERO, || false))
            .join()
            .unwrap()
    });
    let took = start.elapsed();
    assert!(
        matches!(waited, Err(Error::HeldUpByAnotherThread)),
        "{waited:?}"
    );
    assert!(
        took >= watch.after && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert_eq!(watch.checks(), 0);
    assert!(watches.gave_up().is_none());
}

/// While the scope's own thread polls its watches (a scope's end), another thread's
/// wait does not give up: the owner's watch gives up in time, and its abort drains the
/// stream (here: `drained`, set once the owner's poll has given up). The other thread
/// waits about the watch's whole 100 ms with no grace, all of it while the owner polls,
/// which does not count. (It began 50 ms before the owner's poll once, a head start that
/// a busy machine's scheduling stretched past the watch's time: flaky under load.)
#[test]
fn an_unattended_wait_waits_while_the_scopes_thread_polls() {
    let watch = GivesUpAfter::new(Duration::from_millis(100));
    let watches = open_with(&watch);
    let drained = AtomicBool::new(false);
    let start = Instant::now();
    let (owner, other) = std::thread::scope(|threads| {
        let owner = threads.spawn(|| {
            let polled = watches.poll(|| false);
            drained.store(true, Ordering::Release);
            polled
        });
        // The other wait begins while the owner's polls (begun first, so that a busy
        // machine's scheduling cannot leave it unattended for the watch's time).
        while !watches.is_polled() && !drained.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        let other = watches.wait_unattended(Duration::ZERO, || drained.load(Ordering::Acquire));
        (owner.join().unwrap(), other)
    });
    let took = start.elapsed();
    assert!(is_timed_out(&owner), "{owner:?}");
    assert!(other.is_ok(), "{other:?}");
    assert!(took >= Duration::from_millis(100), "{took:?}");
}

/// The grace: an unattended wait gives up only once the watch is overdue by it (time for
/// the watchdog to abort the work).
#[test]
fn an_unattended_wait_gives_the_watchdog_its_grace() {
    let watch = GivesUpAfter::new(Duration::from_millis(10));
    let watches = open_with(&watch);
    let start = Instant::now();
    let waited = watches.wait_unattended(Duration::from_millis(100), || false);
    let took = start.elapsed();
    assert!(
        matches!(waited, Err(Error::HeldUpByAnotherThread)),
        "{waited:?}"
    );
    assert!(took >= Duration::from_millis(110), "{took:?}");
}

/// The watchdog's check on a thread that is not waiting: the watch gives up (aborting
/// its work), the scope keeps the error, and the scope's next wait reports it even
/// though its stream is then found idle (it drained because it was aborted).
#[test]
fn a_wait_after_the_watchdog_gave_up_reports_its_error() {
    let watch = GivesUpAfter::new(Duration::from_millis(20));
    let watches = open_with(&watch);
    assert!(!watches.is_polled());
    assert!(watches.check_unattended(Duration::from_millis(5)).is_ok());
    assert!(watches.gave_up().is_none());
    let given_up = watches.check_unattended(Duration::from_millis(25));
    assert!(is_timed_out(&given_up), "{given_up:?}");
    let waited = watches.poll(|| true);
    assert!(is_timed_out(&waited), "{waited:?}");
}

/// A poll whose first look finds the work done asks no watch (one that would give up at
/// once stays unasked) and counts as a wait of the scope's thread for the watchdog.
#[test]
fn a_poll_that_finds_the_work_done_at_once_asks_no_watch_and_counts_a_wait() {
    let watch = GivesUpAfter::new(Duration::ZERO);
    let watches = open_with(&watch);
    let waits = watches.waits();
    assert!(watches.poll(|| true).is_ok());
    assert_eq!(watch.checks(), 0);
    assert_eq!(watches.waits(), waits + 1);
    assert!(!watches.is_polled());
    // Not done at the first look: the watch is asked, and gives up.
    assert!(is_timed_out(&watches.poll(|| false)));
    assert!(watch.checks() > 0);
}

/// A watch whose verdict is an error once the work completed.
struct Objects {
    may_object: bool,
}

impl StreamWatch for Objects {
    fn check(&self, _: Duration) -> crate::Result<()> {
        Ok(())
    }

    fn verdict(&self) -> crate::Result<()> {
        Err(Error::CommunicatorAborted {
            reason: "a test's verdict",
        })
    }

    fn may_object(&self) -> bool {
        self.may_object
    }

    fn overdue(&self, _: Duration) -> Option<Error> {
        None
    }
}

/// The scope's end asks for verdicts only of sets holding a watch that may object, and
/// then gets its objection.
#[test]
fn a_verdict_is_asked_of_watches_that_may_object() {
    let watches = Watches::open();
    watches.add(&(Arc::new(Objects { may_object: false }) as Arc<dyn StreamWatch>));
    assert!(watches.verdict().is_none(), "declared never to object");
    watches.add(&(Arc::new(Objects { may_object: true }) as Arc<dyn StreamWatch>));
    assert!(
        matches!(watches.verdict(), Some(Error::CommunicatorAborted { .. })),
        "{:?}",
        watches.verdict()
    );
}

/// A scope's watches released on its thread with nothing else holding them serve the
/// thread's next scope, emptied (no watch, no kept error, no verdict to ask), and are
/// off the thread's open watches in between.
#[test]
fn released_watches_serve_the_next_scope_emptied() {
    let watch = GivesUpAfter::new(Duration::ZERO);
    let first = open_with(&watch);
    assert!(is_timed_out(&first.poll(|| false)), "kept an error");
    first.add(&(Arc::new(Objects { may_object: true }) as Arc<dyn StreamWatch>));
    let address = Arc::as_ptr(&first);
    Watches::release(first);
    assert!(OpenWatches::now().is_none(), "released: off the open list");
    let next = Watches::open();
    assert_eq!(Arc::as_ptr(&next), address, "the same allocation again");
    assert!(next.gave_up().is_none());
    assert!(next.verdict().is_none());
    assert_eq!(next.waits(), 0);
    assert!(next.list().is_empty());
    // Open again: it bounds this thread's waits once a watch is added.
    next.add(&(Arc::clone(&watch) as Arc<dyn StreamWatch>));
    assert!(OpenWatches::now().is_some());
    Watches::release(next);
}

/// Watches another holder still counts (another thread's wait, a list's entry) are not
/// kept for reuse: the next scope gets a set of its own.
#[test]
fn watches_held_elsewhere_are_not_reused() {
    let held = Watches::open();
    let other = Arc::clone(&held);
    let address = Arc::as_ptr(&held);
    Watches::release(held);
    let next = Watches::open();
    assert_ne!(Arc::as_ptr(&next), address, "still held: not reused");
    assert_eq!(Arc::strong_count(&other), 1);
    Watches::release(next);
}
