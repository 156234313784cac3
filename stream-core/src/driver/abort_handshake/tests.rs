//! The handshake on the host alone: the abort is a closure that counts its runs and
//! checks that no call is under way.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{AbortHandshake, Aborted};

/// Counts the abort's runs, and the calls under way it found (there must be none).
#[derive(Default)]
struct Witness {
    runs: AtomicUsize,
    under_way: AtomicUsize,
    found_calls: AtomicUsize,
}

impl Witness {
    fn abort(self: &Arc<Self>) -> impl FnOnce() + Send + 'static {
        let witness = Arc::clone(self);
        move || {
            witness.runs.fetch_add(1, Ordering::SeqCst);
            let under_way = witness.under_way.load(Ordering::SeqCst);
            witness.found_calls.fetch_add(under_way, Ordering::SeqCst);
        }
    }
}

#[test]
fn calls_without_an_abort_leave_nothing_behind() {
    let handshake = AbortHandshake::default();
    for _ in 0..3 {
        let outer = handshake.enter().expect("not aborted");
        let inner = handshake.enter().expect("not aborted");
        drop((inner, outer));
    }
    assert!(!handshake.is_aborted());
    assert_eq!(handshake.state.load(Ordering::SeqCst), 0);
}

#[test]
fn an_abort_with_no_call_under_way_runs_at_once_and_once() {
    let handshake = AbortHandshake::default();
    let witness = Arc::new(Witness::default());
    assert_eq!(handshake.abort(witness.abort()), Aborted::NoCallUnderWay);
    assert_eq!(witness.runs.load(Ordering::SeqCst), 1);
    assert!(handshake.is_aborted());
    assert!(
        handshake.enter().is_none(),
        "a call entered after the abort"
    );
    let second = Arc::new(Witness::default());
    assert_eq!(handshake.abort(second.abort()), Aborted::Before);
    assert_eq!(second.runs.load(Ordering::SeqCst), 0);
    assert_eq!(witness.runs.load(Ordering::SeqCst), 1);
}

#[test]
fn an_abort_during_calls_runs_when_the_last_one_leaves() {
    let handshake = AbortHandshake::default();
    let witness = Arc::new(Witness::default());
    let first = handshake.enter().expect("not aborted");
    let second = handshake.enter().expect("not aborted");
    assert_eq!(handshake.abort(witness.abort()), Aborted::WhenTheCallsLeave);
    assert!(
        handshake.enter().is_none(),
        "a call entered after the abort"
    );
    drop(first);
    assert_eq!(
        witness.runs.load(Ordering::SeqCst),
        0,
        "ran with a call under way"
    );
    drop(second);
    assert_eq!(witness.runs.load(Ordering::SeqCst), 1);
    assert!(handshake.enter().is_none());
    assert_eq!(witness.runs.load(Ordering::SeqCst), 1);
}

/// Eight threads calling in a loop, an abort from another thread in the middle, and
/// several requests racing: it runs once, with no call under way, and no call enters
/// after it.
#[test]
fn an_abort_among_threads_calling_runs_once_between_calls() {
    for round in 0..20 {
        let handshake = AbortHandshake::default();
        let witness = Arc::new(Witness::default());
        let stop = AtomicBool::new(false);
        let entered_after = AtomicUsize::new(0);
        std::thread::scope(|threads| {
            for _ in 0..8 {
                threads.spawn(|| {
                    while !stop.load(Ordering::SeqCst) {
                        let Some(call) = handshake.enter() else {
                            continue;
                        };
                        witness.under_way.fetch_add(1, Ordering::SeqCst);
                        if witness.runs.load(Ordering::SeqCst) > 0 {
                            entered_after.fetch_add(1, Ordering::SeqCst);
                        }
                        std::hint::spin_loop();
                        witness.under_way.fetch_sub(1, Ordering::SeqCst);
                        drop(call);
                    }
                });
            }
            std::thread::sleep(Duration::from_micros(200 + 50 * round));
            let requests: Vec<Aborted> = std::thread::scope(|askers| {
                let asks: Vec<_> = (0..3)
                    .map(|_| askers.spawn(|| handshake.abort(witness.abort())))
                    .collect();
                asks.into_iter().map(|a| a.join().unwrap()).collect()
            });
            assert_eq!(
                requests.iter().filter(|r| **r != Aborted::Before).count(),
                1,
                "{requests:?}"
            );
            std::thread::sleep(Duration::from_millis(1));
            stop.store(true, Ordering::SeqCst);
        });
        assert_eq!(witness.runs.load(Ordering::SeqCst), 1, "round {round}");
        assert_eq!(
            witness.found_calls.load(Ordering::SeqCst),
            0,
            "round {round}"
        );
        assert_eq!(entered_after.load(Ordering::SeqCst), 0, "round {round}");
        assert_eq!(handshake.state.load(Ordering::SeqCst) & super::CALLS, 0);
    }
}
