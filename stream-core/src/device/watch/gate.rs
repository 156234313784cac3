//! For tests of the bounded waits on one GPU: a stream stalled by a host function until
//! a [`Gate`] opens, and a watch that opens it when it gives up ([`OpensGate`]), as an
//! NCCL abort lets a collective whose peer died end. Without a bound, a wait for such a
//! stream would last until the host function's own limit ([`STALL_AT_MOST`]).

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::StreamWatch;
use crate::driver::host_func::{launch_host_callback, HostCallback};
use crate::driver::stream::RawStream;
use crate::error::{Error, Result};

/// The longest a stalled stream stays stalled: a test whose wait is not bounded takes
/// this long and then fails on its time, instead of hanging.
pub(crate) const STALL_AT_MOST: Duration = Duration::from_secs(20);

/// Taken by every test that stalls the GPU, for its whole run, so they run one at a
/// time: a call that waits for the whole device in one (`cuMemFree` of managed memory,
/// `cuMemFreeHost`) waits for another's stall too, and blocks that test's driver calls
/// meanwhile, so the watch that would open its gate cannot poll: both then wait for the
/// stall's own limit ([`STALL_AT_MOST`]), as three tests did in a suite run.
pub(crate) fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A flag the stalled stream's host function waits for.
#[derive(Clone, Default)]
pub(crate) struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    pub(crate) fn open(&self) {
        let (open, changed) = &*self.0;
        *open.lock().unwrap_or_else(PoisonError::into_inner) = true;
        changed.notify_all();
    }

    /// Stalls `stream` until the gate opens (or [`STALL_AT_MOST`] has passed).
    pub(crate) fn stall(&self, stream: &RawStream) -> Result<()> {
        launch_host_callback(stream, Box::new(WaitForGate(self.clone())))
    }
}

/// The host function of [`Gate::stall`].
struct WaitForGate(Gate);

// SAFETY: `run` makes no CUDA call and waits for no GPU work: only for the gate, which
// a watch opens from a host wait that polls the stream (never synchronises it), and at
// most `STALL_AT_MOST`; the stream stalling until then is what it is for.
unsafe impl HostCallback for WaitForGate {
    fn run(self: Box<Self>) {
        let (open, changed) = &*(self.0).0;
        let guard = open.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = changed
            .wait_timeout_while(guard, STALL_AT_MOST, |open| !*open)
            .unwrap_or_else(PoisonError::into_inner);
    }
}

/// A watch that, once `after` has been waited, opens `gate` (the stalled stream can then
/// go on, as after an abort) and gives up with `CollectiveTimedOut`.
pub(crate) struct OpensGate {
    pub(crate) gate: Gate,
    pub(crate) after: Duration,
}

impl StreamWatch for OpensGate {
    fn check(&self, waited: Duration) -> Result<()> {
        if waited < self.after {
            return Ok(());
        }
        self.gate.open();
        Err(Error::CollectiveTimedOut {
            timeout: self.after,
        })
    }
}
