//! Whether this thread has an NCCL group open (between `nccl.rs`'s `group_start` and
//! `group_end`), the communicators whose calls it holds, and the aborts of those asked
//! for meanwhile, which wait for its end.
//!
//! `ncclCommAbort` opens a group of its own, sets the communicator's abort flags and
//! queues its reclaim as a job of the group (NCCL's `init.cc`). Called inside an open
//! group, that job runs only at the outer group's end, in the same `ncclGroupEnd` as
//! the calls the group holds for the communicator: the reclaim runs first (`groupLaunch`
//! in its `group.cc`) and frees the communicator once every member of this process is
//! reclaimed (at once for one alone), and then the group prepares and launches those
//! calls on it, with nothing in between that looks at the abort. (A raw probe, CuPy's
//! NCCL 2.28.9 on an H200, one rank: the group's end returned success and the stream
//! drained; use of freed memory need not crash to be undefined.) So the abort of a communicator whose calls the open group holds (asked
//! for by the member's own `Communicator::abort`, or by a scope's watch while a wait
//! inside the group polls it) is made right after the group's end instead: the
//! communicator counts as aborted from the moment it is asked for (every later call is
//! refused), NCCL enqueues what the group held, and the abort then stops it. A
//! communicator the group holds nothing for is aborted at once, as outside a group.

use std::cell::{Cell, RefCell};

use cudarc::nccl::sys;

thread_local! {
    /// `true` while this thread's group is open.
    static OPEN: Cell<bool> = const { Cell::new(false) };
    /// The communicators whose calls the open group holds.
    static HELD: RefCell<Vec<sys::ncclComm_t>> = const { RefCell::new(Vec::new()) };
    /// The aborts of [`HELD`] communicators asked for while [`OPEN`], made after the
    /// group's end.
    static DEFERRED: RefCell<Vec<DeferredAbort>> = const { RefCell::new(Vec::new()) };
}

/// An abort kept for the group's end.
type DeferredAbort = Box<dyn FnOnce()>;

/// After `ncclGroupStart` succeeded on this thread.
pub(super) fn opened() {
    OPEN.with(|open| open.set(true));
}

/// After `ncclGroupEnd` on this thread (whatever it returned): the aborts asked for
/// while the group was open, to be made now.
pub(super) fn closed() -> Vec<DeferredAbort> {
    OPEN.with(|open| open.set(false));
    HELD.with(|held| held.borrow_mut().clear());
    DEFERRED.with(|deferred| std::mem::take(&mut *deferred.borrow_mut()))
}

/// Before a collective or a send or receive on `comm` is passed to NCCL: inside an open
/// group, NCCL holds it until the group's end.
#[inline(always)]
pub(super) fn before_call(comm: sys::ncclComm_t) {
    if OPEN.with(Cell::get) {
        hold(comm);
    }
}

/// Notes that the open group holds calls of `comm`.
#[cold]
fn hold(comm: sys::ncclComm_t) {
    HELD.with(|held| {
        let mut held = held.borrow_mut();
        if !held.contains(&comm) {
            held.push(comm);
        }
    });
}

/// Called by an abort of `comm` that is to be made now, after the communicator was
/// marked aborted: when the group open on this thread holds calls of `comm`, keeps
/// `abort` for the group's end (see the module's docs) and returns `None`, and the
/// caller makes no NCCL call; otherwise gives `abort` back, to be made now.
pub(super) fn defer_abort_if_held<A: FnOnce() + 'static>(
    comm: sys::ncclComm_t,
    abort: A,
) -> Option<A> {
    if !OPEN.with(Cell::get) || !HELD.with(|held| held.borrow().contains(&comm)) {
        return Some(abort);
    }
    DEFERRED.with(|deferred| deferred.borrow_mut().push(Box::new(abort)));
    None
}

#[cfg(test)]
mod tests {
    use super::{before_call, closed, defer_abort_if_held, opened};
    use cudarc::nccl::sys;
    use std::cell::Cell;
    use std::rc::Rc;

    /// A made-up communicator handle (never passed to NCCL).
    fn handle(n: usize) -> sys::ncclComm_t {
        std::ptr::without_provenance_mut(n)
    }

    /// Only the abort of a communicator the open group holds calls of waits for the
    /// group's end (and is made then, once); outside a group, and after its end, aborts
    /// are made at once.
    #[test]
    fn an_abort_waits_for_the_group_that_holds_calls_of_its_communicator() {
        let made = Rc::new(Cell::new(0));
        let abort = || {
            let made = Rc::clone(&made);
            move || made.set(made.get() + 1)
        };
        before_call(handle(1));
        assert!(
            defer_abort_if_held(handle(1), abort()).is_some(),
            "no group open"
        );
        opened();
        before_call(handle(1));
        before_call(handle(1));
        assert!(
            defer_abort_if_held(handle(2), abort()).is_some(),
            "holds nothing of 2"
        );
        assert!(
            defer_abort_if_held(handle(1), abort()).is_none(),
            "holds calls of 1"
        );
        assert_eq!(made.get(), 0);
        let deferred = closed();
        assert_eq!(deferred.len(), 1);
        deferred.into_iter().for_each(|abort| abort());
        assert_eq!(made.get(), 1);
        assert!(
            defer_abort_if_held(handle(1), abort()).is_some(),
            "the group ended"
        );
        opened();
        assert!(
            defer_abort_if_held(handle(1), abort()).is_some(),
            "a new group holds nothing"
        );
        assert!(closed().is_empty());
    }
}
