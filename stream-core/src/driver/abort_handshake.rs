//! [`AbortHandshake`]: how a thread other than a communicator's owner may abort it while
//! the owner may be calling into it.
//!
//! `ncclCommAbort` frees the communicator, so no call on it may start after the abort
//! nor be under way when it frees (NCCL lets an abort run beside a call blocked on its
//! peers only to unblock it; a call that starts on the freed handle reads freed memory).
//! The owner's thread aborts between its own calls (its scope's watch,
//! `Communicator::abort`); a watchdog, aborting a collective whose owner computes on the
//! host and never waits, cannot know whether the owner is inside a call, so the abort is
//! handed over: every call on the communicator enters the handshake
//! ([`enter`](AbortHandshake::enter)) and leaves it when NCCL has returned (inside a
//! group, the group's first call on it is kept until the group's end and covers the later
//! ones: `nccl_comm.rs`'s `CollectiveCall`); [`abort`](AbortHandshake::abort) marks the
//! communicator aborted (no call enters after it) and runs the abort at once if no call
//! is under way, else the last call to leave runs it. One atomic word holds the mark and
//! the count, so that every enter, leave and abort is ordered against the others (one
//! read-modify-write each, so a call pays two). They cost nothing measurable: an owner's
//! path without them (a load, a store and a compiler fence, the abort paying with the
//! kernel's `membarrier`) left the one-rank enqueue of a 4-byte all_reduce where it was,
//! on two hosts, alternated with this (2026-11-29, `benchmarks/results/`; an earlier A/B
//! had put them at 12 ns).
//!
//! A call blocked in NCCL forever (a connection to a dead peer) keeps the abort waiting
//! as long: the abort cannot free what that call still uses.

use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// Set once [`AbortHandshake::abort`] was asked for: no call enters after it.
const ABORTED: usize = 1 << (usize::BITS - 1);
/// The calls under way, in the low bits.
const CALLS: usize = ABORTED - 1;

/// What makes the abort (`ncclCommAbort` and what goes with it), run once.
type AbortFn = Box<dyn FnOnce() + Send>;

/// See the module docs.
#[derive(Default)]
pub(crate) struct AbortHandshake {
    state: AtomicUsize,
    /// The abort to run, from [`abort`](Self::abort) until it has run.
    pending: Mutex<Option<AbortFn>>,
}

/// What [`AbortHandshake::abort`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Aborted {
    /// No call was under way: the abort has started (on this thread, or on one whose
    /// call it refused and which got to it first).
    NoCallUnderWay,
    /// A call is under way: the last call to leave runs the abort.
    WhenTheCallsLeave,
    /// An earlier request was made: its abort stands, this one is dropped unrun.
    Before,
}

/// What holds a handshake (a communicator's control).
pub(crate) trait HoldsHandshake {
    fn handshake(&self) -> &AbortHandshake;
}

impl HoldsHandshake for AbortHandshake {
    fn handshake(&self) -> &AbortHandshake {
        self
    }
}

/// A call under way on the communicator (see [`AbortHandshake::enter`]), through `H`, a
/// reference to what holds the handshake (an `Arc` where the call outlives the borrow:
/// a group's calls, until its end); leaving it (dropping it) runs a pending abort when
/// it is the last.
pub(crate) struct InCall<H: Deref<Target: HoldsHandshake>>(H);

impl AbortHandshake {
    /// Enters a call on the communicator `holder` reaches: `None` once an abort was asked
    /// for (the communicator must not be called: it is freed, or about to be), else the
    /// guard to keep until NCCL is done with the call.
    #[inline]
    pub(crate) fn enter<H: Deref<Target: HoldsHandshake>>(holder: H) -> Option<InCall<H>> {
        let before = holder.handshake().state.fetch_add(1, Ordering::AcqRel);
        let call = InCall(holder);
        // Leaving at once when aborted runs the abort if this was the last call in.
        (before & ABORTED == 0).then_some(call)
    }

    /// `true` once an abort was asked for.
    #[inline]
    pub(crate) fn is_aborted(&self) -> bool {
        self.state.load(Ordering::Acquire) & ABORTED != 0
    }

    /// Asks for the abort, made by `abort`: now if no call is under way, else by the last
    /// call to leave; at most once over all requests.
    pub(crate) fn abort(&self, abort: impl FnOnce() + Send + 'static) -> Aborted {
        let before = {
            // The mark and the abort go in under the lock, so that a call leaving right
            // after the mark finds the abort there (it waits for the lock).
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            let before = self.state.fetch_or(ABORTED, Ordering::AcqRel);
            if before & ABORTED != 0 {
                return Aborted::Before;
            }
            *pending = Some(Box::new(abort));
            before
        };
        if before & CALLS == 0 {
            self.run_pending();
            Aborted::NoCallUnderWay
        } else {
            Aborted::WhenTheCallsLeave
        }
    }

    /// Runs the pending abort, if it has not run.
    fn run_pending(&self) {
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(abort) = pending {
            abort();
        }
    }
}

impl<H: Deref<Target: HoldsHandshake>> Drop for InCall<H> {
    #[inline]
    fn drop(&mut self) {
        let handshake = self.0.handshake();
        let before = handshake.state.fetch_sub(1, Ordering::AcqRel);
        if before & ABORTED != 0 && before & CALLS == 1 {
            handshake.run_pending();
        }
    }
}

/// The handshake on the host alone: the abort is a closure that counts its runs and
/// checks that no call is under way.
#[cfg(test)]
mod tests {
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
            let outer = AbortHandshake::enter(&handshake).expect("not aborted");
            let inner = AbortHandshake::enter(&handshake).expect("not aborted");
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
            AbortHandshake::enter(&handshake).is_none(),
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
        let first = AbortHandshake::enter(&handshake).expect("not aborted");
        let second = AbortHandshake::enter(&handshake).expect("not aborted");
        assert_eq!(handshake.abort(witness.abort()), Aborted::WhenTheCallsLeave);
        assert!(
            AbortHandshake::enter(&handshake).is_none(),
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
        assert!(AbortHandshake::enter(&handshake).is_none());
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
                            let Some(call) = AbortHandshake::enter(&handshake) else {
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
}
