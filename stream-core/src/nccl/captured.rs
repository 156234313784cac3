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
use crate::error::Result;
use crate::graph::{Capture, Graph};
use crate::memory::{DeviceMemory, DeviceMemoryMut};
use crate::scope::{Pending, Scope};

/// Collectives (NCCL) recorded into the graph, through a [`Communicator`] of the
/// capture's device: nothing runs now; each [replay](crate::Scope::replay) runs them, on
/// the replaying scope's stream. Checked when recorded, as a scope's are (see
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
    capture.state().keep_communicator(comm.raw().control());
    issue(capture.scope(), comm, request, None)
}

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
