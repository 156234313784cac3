//! For tests of the bounded waits on one GPU: a stream stalled on the GPU (a wait for a
//! flag in host memory, `driver/host_flag.rs`, as an NCCL kernel waits for its peers)
//! until a [`Gate`] opens, and a watch that opens it when it gives up ([`OpensGate`]), as
//! an NCCL abort lets a collective whose peer died end. Without a bound, a wait for such
//! a stream would last until the gate's own limit ([`STALL_AT_MOST`]).

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

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
/// host for other threads' watched streams first (`memory/watched_streams.rs`), 2 to 6
/// of 15 fail, some still after [`STALL_AT_MOST`], and the trims among them can be
/// refused for another test's stall ([`Error::HeldUpByAnotherThread`]), which is what
/// they are for. One at a time, all pass. [`trace`] (`STREAM_CORE_GATE_TRACE=1`) showed
/// why the 20 s ones wait: one test's `trim_pinned_memory` entered `cuMemFreeHost` once
/// its own watch gave up; while it waited there for the whole GPU, another test stalled
/// its stream anew, and that test's next call (a copy into pinned memory) returned only
/// when `cuMemFreeHost` did, after the stall's limit. A thread inside `cuMemFreeHost`
/// holds up other threads' driver calls (not all: their stream queries went on), and
/// waits for work enqueued after it began.
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

/// With `STREAM_CORE_GATE_TRACE` set, prints `what` with the milliseconds since the
/// first trace and the thread's name (a test's name, under libtest): for studying which
/// stalled test holds which up when they run in parallel.
pub(crate) fn trace(what: std::fmt::Arguments<'_>) {
    static START: OnceLock<Instant> = OnceLock::new();
    if std::env::var_os("STREAM_CORE_GATE_TRACE").is_none() {
        return;
    }
    let since = START.get_or_init(Instant::now).elapsed().as_secs_f64() * 1e3;
    let thread = std::thread::current();
    eprintln!(
        "[gate {since:>9.1} ms] {}: {what}",
        thread.name().unwrap_or("?")
    );
}

impl Gate {
    pub(crate) fn open(&self) {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if !state.open {
            trace(format_args!("opens gate {}", self.id()));
        }
        state.open = true;
        state.flags.iter().for_each(HostFlag::raise);
    }

    /// A number that tells gates apart in [`trace`]'s lines.
    fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize % 100_000
    }

    /// Stalls `stream` on the GPU until the gate opens (or [`STALL_AT_MOST`] has passed).
    pub(crate) fn stall(&self, stream: &RawStream) -> Result<()> {
        let flag = HostFlag::new(stream.context())?;
        flag.wait_on(stream)?;
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if state.open {
            flag.raise();
        }
        state.flags.push(flag.clone());
        drop(state);
        trace(format_args!("stalled a stream behind gate {}", self.id()));
        let gate = self.clone();
        std::thread::spawn(move || {
            std::thread::sleep(STALL_AT_MOST);
            let was_open = gate.0.lock().unwrap_or_else(PoisonError::into_inner).open;
            flag.raise();
            if !was_open {
                trace(format_args!(
                    "the stall's limit raised a flag of gate {}",
                    gate.id()
                ));
            }
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
