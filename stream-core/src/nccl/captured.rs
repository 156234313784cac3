//! The collectives as methods of [`Capture`]: recorded into the graph (NCCL supports
//! stream capture), run at each replay.
//!
//! They are checked and issued exactly as a scope's (`request.rs`'s `issue`, on the
//! capture's own scope, whose stream captures), so the memory argument is a capture's:
//! the buffers are branded by the capture, so they are the graph's own allocations or
//! memory it holds, valid at every replay. What a graph adds is the communicator: its
//! nodes name it, so the graph keeps it (`graph/collectives.rs`) and each replay checks
//! it and watches it.

use super::collective::collective_methods;
use super::request::{issue, read, write, Operands, Request};
use super::{Communicator, NcclElement, ReduceOp};
use crate::error::{Error, Result};
use crate::graph::{Capture, Graph};
use crate::memory::{DeviceMemory, DeviceMemoryMut};
use crate::scope::{Pending, Scope};

/// Collectives (NCCL) recorded into the graph, through a [`Communicator`] of the
/// capture's device: nothing runs now; each replay
/// ([`Scope::replay_with`](crate::Scope::replay_with)) runs them, on the replaying
/// scope's stream. Checked when recorded, as a scope's are (see
/// [`Scope::all_reduce`](crate::Scope::all_reduce)).
///
/// ```no_run
/// use stream_core::{nccl::{Communicator, Sum}, scope, Device, Error};
/// # fn main() -> stream_core::Result<()> {
/// let dev = Device::new(0)?;
/// let comm = Communicator::for_devices(&[dev.clone()])?.remove(0);
/// let stream = dev.new_stream()?;
/// let mut grads = dev.upload_vec(&vec![1.0f32; 1 << 20])?;
/// let (mut step, ()) = dev.capture(&mut grads, |g, mut grads| {
///     // ... the step's kernels ...
///     g.all_reduce_in_place(&comm, &mut grads, Sum)?;
///     Ok::<_, Error>(())
/// })?;
/// for _ in 0..100 {
///     scope(&stream, |s| s.replay_with(&mut step, &[&comm]).map(drop))?; // one launch
/// }
/// # Ok(()) }
/// ```
///
/// Such a graph is replayed with [`Scope::replay_with`], which borrows its
/// communicators (as a scope's own collectives do) and watches them, so that the
/// replaying scope's end and its waits are bounded by their timeouts. Every rank replays
/// its graph as it would issue the collectives: the same number of times, in the same
/// order relative to its other collectives on the communicator. The graph keeps the
/// communicator alive (a [`Communicator`] dropped first is destroyed with the graph,
/// which can no longer be replayed then). Once the communicator is aborted (by a scope's
/// watch, or [`Communicator::abort`]) the graph's replays are refused; NCCL's abort
/// waits for every graph that captured on the communicator to be destroyed, so it runs
/// on a thread of its own and completes when they are dropped. A graph with collectives
/// is not [updated](crate::Graph::update): capture a new one.
///
/// # Which communicators
///
/// A scope's collective reaches a peer's buffers only while it runs, through NCCL's own
/// staging buffers across processes, and the ledger compares the calls of ranks of one
/// process, which NCCL may reach directly (see [Lengths that disagree across
/// ranks](super#lengths-that-disagree-across-ranks)). A graph changes both: its replays
/// bypass the ledger, and NCCL registers the buffers of captured collectives with the
/// peers (`NCCL_GRAPH_REGISTER`, on by default), so a rank whose lengths disagree could
/// write past this rank's buffers. So a collective is recorded
///
/// * on a communicator of one rank, or
/// * on a communicator whose other ranks are all in other processes (`torchrun`,
///   `srun`, `mpirun`, [`World`](super::World)), with `NCCL_GRAPH_REGISTER=0` in the
///   environment (set it before the process starts: NCCL reads it once, when a
///   collective is first captured; without registration NCCL moves the data through
///   its own buffers, as for a scope's collectives, and ranks whose lengths disagree
///   wait for each other until the timeout).
///
/// Otherwise the call is [`Error::GraphCommunicators`](crate::Error::GraphCommunicators)
/// and nothing is recorded.
impl<'s> Capture<'s> {
    collective_methods!(record_collective, &,);
}

/// A collective recorded by `capture`, which keeps its communicator for the graph.
#[inline(always)]
fn record_collective<'a, 's: 'a, T: NcclElement>(
    capture: &'s Capture<'s>,
    comm: &Communicator,
    request: Request<'a, 's, T>,
) -> Result<()> {
    capturable(comm)?;
    capture.state().keep_communicator(comm.raw().control());
    issue(capture.scope(), comm, request, None)
}

/// Refuses a communicator whose peers could reach this rank's buffers in a replay (see
/// the impl block's docs): one with other members in this process (whose calls the
/// ledger compares, but whose replays it does not see), or one of several processes
/// while NCCL may register captured buffers (`NCCL_GRAPH_REGISTER` not `0`).
#[inline]
fn capturable(comm: &Communicator) -> Result<()> {
    if comm.size() == 1 {
        return Ok(());
    }
    if comm.has_members_in_this_process() {
        return Err(Error::GraphCommunicators {
            reason: "the communicator has other ranks in this process, which NCCL may reach \
                     directly and whose calls are compared one by one (a graph's replays \
                     bypass that): capture collectives on communicators of one rank per \
                     process (torchrun, srun, mpirun, or Communicator::join in processes of \
                     their own)",
        });
    }
    if std::env::var_os(GRAPH_REGISTER).is_none_or(|value| value != "0") {
        return Err(Error::GraphCommunicators {
            reason: "NCCL registers the buffers of captured collectives with the peers \
                     (NCCL_GRAPH_REGISTER, on by default), so that a rank whose lengths \
                     disagree could write past this rank's buffers: set \
                     NCCL_GRAPH_REGISTER=0 in every rank's environment before it starts",
        });
    }
    Ok(())
}

/// NCCL's variable for the registration of captured buffers (`1` by default).
const GRAPH_REGISTER: &str = "NCCL_GRAPH_REGISTER";

impl<'s, 'env> Scope<'s, 'env> {
    /// [`replay`](Self::replay) of a graph with NCCL collectives: `comms` are the
    /// communicators they run on (every one of them; others are ignored), borrowed by
    /// this scope as its own collectives borrow theirs. The scope then watches them: its
    /// end and its waits (the returned `Pending`'s too) are bounded by their timeouts, as
    /// for a collective issued in the scope (see [`nccl`](super#when-a-peer-dies)).
    ///
    /// [`Error::GraphCommunicators`](crate::Error::GraphCommunicators) when one of the
    /// graph's communicators is not in `comms`;
    /// [`Error::CommunicatorAborted`](crate::Error::CommunicatorAborted) once one was
    /// aborted (by a scope's watch, or [`Communicator::abort`]): its captured operations
    /// cannot run again. Nothing is launched then. A graph without collectives replays
    /// here too, as with `replay`.
    pub fn replay_with<H>(
        &'s self,
        graph: &'env mut Graph<H>,
        comms: &[&'s Communicator],
    ) -> Result<Pending<'s, &'env mut Graph<H>>> {
        let kept = graph.communicators();
        kept.check_given(comms.iter().map(|comm| comm.raw().control()))?;
        for comm in comms {
            if kept.contains(comm.raw().control()) {
                self.outstanding.watch(comm.watch());
            }
        }
        self.launch_replay(graph)
    }
}
