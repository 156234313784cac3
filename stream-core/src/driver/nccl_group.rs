//! Whether this thread has an NCCL group open (between `nccl.rs`'s `group_start` and
//! `group_end`), and the aborts asked for meanwhile, which wait for its end.
//!
//! `ncclCommAbort` opens a group of its own, sets the communicator's abort flags and
//! queues its reclaim as a job of the group (NCCL's `init.cc`). Called inside an open
//! group, that job runs only at the outer group's end, in the same `ncclGroupEnd` as
//! the calls the group holds for the communicator: the reclaim runs first (`groupLaunch`
//! in its `group.cc`) and frees the communicator once every member of this process is
//! reclaimed (at once for one alone), and then the group prepares and launches those
//! calls on it, with nothing in between that looks at the abort. (A raw probe, CuPy's
//! NCCL 2.28.9 on an H200, one rank: the group's end returned success and the stream
//! drained; use of freed memory need not crash to be undefined.)
//!
//! So an abort asked for while this thread has a group open (the member's own
//! `Communicator::abort`, or a scope's watch while a wait inside the group polls it) is
//! made right after the group's end instead: the communicator counts as aborted from the
//! moment it is asked for (every later call is refused), NCCL enqueues what the group
//! held, and the abort then stops it. Every such abort waits, not only those of the
//! communicators the group holds calls of: that keeps the collectives' enqueue free of
//! bookkeeping, and nothing inside a group waits for an abort to drain a stream (a wait
//! whose watch gives up returns its error at once; the scope's end, which synchronises,
//! comes after the group's).

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use super::abort_handshake::{HoldsHandshake, InCall};

thread_local! {
    /// `true` while this thread's group is open.
    static OPEN: Cell<bool> = const { Cell::new(false) };
    /// The aborts asked for while [`OPEN`], made after the group's end.
    static DEFERRED: RefCell<Vec<DeferredAbort>> = const { RefCell::new(Vec::new()) };
    /// The group's calls inside their communicators' abort handshakes until NCCL makes
    /// them at the group's end (an abort from another thread waits for that): one per
    /// communicator, the first call on it, which covers the later ones, with its key
    /// ([`keeps`]). Emptied one call at a time ([`leave_calls`]), so that it keeps its
    /// capacity from one group to the next.
    static CALLS: RefCell<Vec<(usize, GroupedCall)>> = const { RefCell::new(Vec::new()) };
}

/// An abort kept for the group's end.
type DeferredAbort = Box<dyn FnOnce()>;

/// A grouped call's place in its communicator's handshake (`nccl_comm.rs`), through
/// the communicator's control as a `dyn` holder (unsized in place: no allocation).
pub(super) type GroupedCall = InCall<Arc<dyn HoldsHandshake>>;

/// Keeps `call`, a call on the communicator `key` names, until the end of the group open
/// on this thread.
pub(super) fn keep_until_end(key: usize, call: GroupedCall) {
    CALLS.with(|calls| calls.borrow_mut().push((key, call)));
}

/// `true` when the group open on this thread keeps a call on the communicator `key`
/// names: the address of what holds its handshake, which the kept call holds, so that no
/// other communicator's can take that address before the group's end.
#[inline]
pub(super) fn keeps(key: usize) -> bool {
    CALLS.with(|calls| calls.borrow().iter().any(|(kept, _)| *kept == key))
}

/// `true` while this thread has a group open (between `group_start` and `group_end`).
#[inline]
pub(crate) fn is_open() -> bool {
    OPEN.with(Cell::get)
}

/// After `ncclGroupStart` succeeded on this thread.
pub(super) fn opened() {
    OPEN.with(|open| open.set(true));
}

/// After `ncclGroupEnd` on this thread (whatever it returned): the aborts asked for
/// while the group was open, to be made now. The group's calls are still kept: they
/// leave with [`leave_calls`], after this (so that an abort their leaving runs is made
/// at once, the group being marked closed).
pub(super) fn closed() -> Vec<DeferredAbort> {
    OPEN.with(|open| open.set(false));
    DEFERRED.with(|deferred| std::mem::take(&mut *deferred.borrow_mut()))
}

/// The group's calls, made by NCCL, leave their communicators' handshakes: each is
/// dropped outside the list's borrow (the last call to leave a communicator whose
/// abort was asked for makes that abort, which may look at this thread's group).
pub(super) fn leave_calls() {
    while let Some(call) = CALLS.with(|calls| calls.borrow_mut().pop()) {
        drop(call);
    }
}

/// Called by an abort that is to be made now, after the communicator was marked
/// aborted: while a group is open on this thread, keeps `abort` for the group's end
/// (see the module's docs) and returns `None`, and the caller makes no NCCL call;
/// otherwise gives `abort` back, to be made now.
pub(super) fn defer_abort_if_in_group<A: FnOnce() + 'static>(abort: A) -> Option<A> {
    if !is_open() {
        return Some(abort);
    }
    DEFERRED.with(|deferred| deferred.borrow_mut().push(Box::new(abort)));
    None
}

#[cfg(test)]
mod tests {
    use super::{closed, defer_abort_if_in_group, keep_until_end, keeps, leave_calls, opened};
    use crate::driver::abort_handshake::{AbortHandshake, Aborted, HoldsHandshake};
    use std::cell::Cell;
    use std::rc::Rc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// An abort asked for while a group is open waits for the group's end (and is made
    /// then, once); outside a group, and after its end, aborts are made at once.
    #[test]
    fn an_abort_inside_a_group_waits_for_its_end() {
        let made = Rc::new(Cell::new(0));
        let abort = || {
            let made = Rc::clone(&made);
            move || made.set(made.get() + 1)
        };
        assert!(defer_abort_if_in_group(abort()).is_some(), "no group open");
        opened();
        assert!(defer_abort_if_in_group(abort()).is_none(), "a group open");
        assert!(defer_abort_if_in_group(abort()).is_none(), "a second one");
        assert_eq!(made.get(), 0);
        let deferred = closed();
        leave_calls();
        assert_eq!(deferred.len(), 2);
        deferred.into_iter().for_each(|abort| abort());
        assert_eq!(made.get(), 2);
        assert!(
            defer_abort_if_in_group(abort()).is_some(),
            "the group ended"
        );
        opened();
        assert!(closed().is_empty(), "a new group deferred nothing");
    }

    /// A kept call is found by its communicator's key until the group's end, holds its
    /// communicator's handshake until it leaves after that end (an abort asked for
    /// meanwhile runs then, once), and nothing of it is kept for the next group.
    #[test]
    fn a_kept_call_covers_its_communicator_until_the_groups_end() {
        let control: Arc<dyn HoldsHandshake> = Arc::new(AbortHandshake::default());
        let aborts = Arc::new(AtomicUsize::new(0));
        let abort = {
            let aborts = Arc::clone(&aborts);
            move || {
                aborts.fetch_add(1, Ordering::SeqCst);
            }
        };
        opened();
        assert!(!keeps(1), "nothing kept yet");
        let call = AbortHandshake::enter(Arc::clone(&control)).expect("not aborted");
        keep_until_end(1, call);
        assert!(keeps(1));
        assert!(!keeps(2), "another communicator is not covered");
        let asked = control.handshake().abort(abort);
        assert_eq!(
            asked,
            Aborted::WhenTheCallsLeave,
            "the kept call is under way"
        );
        assert!(closed().is_empty());
        assert!(
            keeps(1),
            "kept until the calls leave, after the group's end"
        );
        assert_eq!(aborts.load(Ordering::SeqCst), 0);
        leave_calls();
        assert_eq!(
            aborts.load(Ordering::SeqCst),
            1,
            "the last call out made the abort"
        );
        opened();
        assert!(!keeps(1), "the next group keeps nothing of the last");
        assert!(closed().is_empty());
        leave_calls();
    }
}
