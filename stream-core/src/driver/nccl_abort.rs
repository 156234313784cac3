//! [`abort_elsewhere`]: `ncclCommAbort` on a thread of its own, for the aborts that may
//! take long or block: the parent of a member made by `join_within` (up to a second, on
//! the rank that made the id), and a communicator that CUDA graphs captured collectives
//! on, whose abort waits until every such graph has been destroyed (NCCL's
//! `commDestroySync` polls until the graphs' persistent plans are reclaimed), which may
//! be never while the thread that would destroy them is the one aborting; and the aborts
//! asked for while a group was open, made after its end (`nccl_group.rs`). The process's
//! exit, and a `join_within` member's destruction, wait for these threads
//! ([`wait_for_aborts`]).

use std::ffi::c_int;
use std::sync::{Arc, Mutex, Once, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::nccl::{result, sys};

use super::context::PrimaryContext;

/// A made communicator that nothing else uses any more, on its way to the thread that
/// aborts it: a `join_within` parent, or the handle of a `CommControl` whose flag says
/// it is aborted (which never passes it to NCCL again).
struct Unused(sys::ncclComm_t);

// SAFETY: NCCL's communicators are plain handles that any thread may use, one thread at
// a time (its user guide); this one is handed over whole, and no other thread uses it
// again (see the type's docs).
unsafe impl Send for Unused {}

impl Unused {
    fn abort(self, context: &PrimaryContext) {
        let _bound = context.bind();
        // SAFETY: `self.0` is a made communicator, used by nothing else (see `Unused`)
        // and aborted once, here, which frees it.
        let _ = unsafe { result::comm_abort(self.0) };
    }
}

/// The threads aborting communicators ([`abort_elsewhere`]) that have not been seen to
/// finish.
static ABORTING: Mutex<Vec<JoinHandle<()>>> = Mutex::new(Vec::new());

/// How long [`wait_for_aborts`] waits: five times the longest abort measured
/// (about a second, on the rank that made the id). An abort whose peer died can take
/// far longer, or never return (rank 0's, its peer killed, was still running when the
/// test killed the process two minutes later); it is left running then.
const ABORT_PATIENCE: Duration = Duration::from_secs(5);

/// Returns once every abort started so far by [`abort_elsewhere`] has finished, or after
/// [`ABORT_PATIENCE`]. A member made by `join_within` calls it before it is
/// destroyed, and the process calls it as it exits (registered with `atexit` when the
/// first abort starts): NCCL's teardown of the parent running beside the member's, or
/// beside the CUDA driver's own teardown at exit, crashed the process (SIGSEGV, on two
/// H200s, NCCL 2.28.3, in programs that ended within the second rank 0's abort
/// takes). The lock is held while waiting, so that a second caller also returns only
/// after the first's wait; the abort threads never take it.
pub(crate) fn wait_for_aborts() {
    let mut aborting = ABORTING.lock().unwrap_or_else(PoisonError::into_inner);
    let deadline = Instant::now() + ABORT_PATIENCE;
    while aborting.iter().any(|thread| !thread.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    // The finished ones are joined (a panic in one is its own); the others stay listed.
    let (finished, running): (Vec<_>, Vec<_>) =
        aborting.drain(..).partition(|thread| thread.is_finished());
    *aborting = running;
    for thread in finished {
        let _ = thread.join();
    }
}

/// [`wait_for_aborts`] as the process exits.
extern "C" fn wait_for_aborts_at_exit() {
    wait_for_aborts();
}

extern "C" {
    /// The C library's: runs `function` when the process exits (`exit`, or a return
    /// from `main`), before the functions registered earlier, such as the CUDA
    /// driver's, which it loaded before any communicator was made.
    fn atexit(function: extern "C" fn()) -> c_int;
}

/// Aborts `comm` on a thread of its own (here, if no thread can be started), with
/// `context`, its device's, bound there; [`wait_for_aborts`] waits for it.
pub(super) fn abort_elsewhere(comm: sys::ncclComm_t, context: &Arc<PrimaryContext>) {
    static AT_EXIT: Once = Once::new();
    AT_EXIT.call_once(|| {
        // SAFETY: `atexit` only records the pointer of a function that lives as long as
        // the program; the function takes no arguments, as `atexit` calls it, and cannot
        // unwind into C (a panic in an `extern "C"` function aborts). If it could not be
        // registered (`atexit` returned non-zero), the aborts are still waited for by
        // the members' teardown.
        let _ = unsafe { atexit(wait_for_aborts_at_exit) };
    });
    // Shared, so that it can be taken back if the thread cannot be started (the closure
    // is then dropped unrun). The lock is held until the thread is listed, so that no
    // wait can miss it.
    let mut aborting = ABORTING.lock().unwrap_or_else(PoisonError::into_inner);
    let unused = Arc::new(Mutex::new(Some(Unused(comm))));
    let (for_thread, on) = (Arc::clone(&unused), Arc::clone(context));
    let spawned = std::thread::Builder::new()
        .name("nccl-abort".into())
        .spawn(move || {
            if let Some(u) = take(&for_thread) {
                u.abort(&on);
            }
        });
    match spawned {
        Ok(thread) => aborting.push(thread),
        Err(_) => {
            drop(aborting);
            if let Some(u) = take(&unused) {
                u.abort(context);
            }
        }
    }
}

/// The communicator in `slot`, once.
fn take(slot: &Mutex<Option<Unused>>) -> Option<Unused> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).take()
}
