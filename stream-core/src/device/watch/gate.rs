//! For tests of the bounded waits on one GPU: a stream stalled on the GPU (a wait for a
//! flag in host memory, `driver/host_flag.rs`, as an NCCL kernel waits for its peers)
//! until a [`Gate`] opens, and a watch that opens it when it gives up ([`OpensGate`]), as
//! an NCCL abort lets a collective whose peer died end. Without a bound, a wait for such
//! a stream would last until the gate's own limit ([`STALL_AT_MOST`]).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::StreamWatch;
use crate::driver::host_flag::HostFlag;
use crate::driver::stream::RawStream;
use crate::error::{Error, Result};

/// The longest a stalled stream stays stalled: a test whose wait is not bounded takes
/// this long and then fails on its time, instead of hanging.
pub(crate) const STALL_AT_MOST: Duration = Duration::from_secs(20);

/// Taken by every test that stalls the GPU, for its whole run, so they run one at a
/// time. Run in parallel, they hold each other up: these tests make calls that wait for
/// the whole GPU, so for the other tests' stalls too, and some of them then wait for
/// [`STALL_AT_MOST`]. Seen with host-function stalls and with these GPU-side ones alike
/// (one H200, 2026-11-29): 7 and 9 of 12 failed per run. Since such calls wait on the
/// host for other threads' watched streams first (`memory/watched_streams.rs`), 2 to 5
/// of 15 fail, some still after [`STALL_AT_MOST`] (a stall made after the call looked,
/// or a driver call of one test that holds up another's polls: not pinned down), and
/// the trims among them can be refused for another test's stall
/// ([`Error::HeldUpByAnotherThread`]), which is what they are for. One at a time, all
/// pass.
///
/// `STREAM_CORE_GATED_TESTS_IN_PARALLEL=1` lets them run in parallel again, to study
/// which of them interfere.
pub(crate) fn one_at_a_time() -> Option<MutexGuard<'static, ()>> {
    static LOCK: Mutex<()> = Mutex::new(());
    if std::env::var_os("STREAM_CORE_GATED_TESTS_IN_PARALLEL").is_some() {
        return None;
    }
    Some(LOCK.lock().unwrap_or_else(PoisonError::into_inner))
}

/// What stalls streams until it opens: a flag per stalled stream, which the GPU waits for.
#[derive(Clone, Default)]
pub(crate) struct Gate(Arc<Mutex<GateState>>);

#[derive(Default)]
struct GateState {
    open: bool,
    flags: Vec<HostFlag>,
}

impl Gate {
    pub(crate) fn open(&self) {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        state.open = true;
        state.flags.iter().for_each(HostFlag::raise);
    }

    /// Stalls `stream` on the GPU until the gate opens (or [`STALL_AT_MOST`] has passed).
    pub(crate) fn stall(&self, stream: &RawStream) -> Result<()> {
        let flag = HostFlag::new(stream.context())?;
        flag.wait_on(stream)?;
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if state.open {
            flag.raise();
        }
        state.flags.push(flag);
        std::thread::spawn(move || {
            std::thread::sleep(STALL_AT_MOST);
            flag.raise();
        });
        Ok(())
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

    fn overdue(&self, waited: Duration) -> Option<Error> {
        (waited >= self.after).then_some(Error::CollectiveTimedOut {
            timeout: self.after,
        })
    }
}
