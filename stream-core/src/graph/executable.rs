//! [`Graph`]: an instantiated graph and everything it holds.

use crate::device::Device;
use crate::driver::graph::{RawGraph, RawGraphExec};
use crate::graph::capture_state::Recorded;
use crate::graph::collectives::GraphCommunicators;
use crate::graph::hold::Hold;
use crate::graph::kernel_node::KernelRecord;

/// A captured, instantiated CUDA graph, and the memory it holds (`H`, see [`Hold`]).
///
/// Made by [`Device::capture`](crate::Device::capture) (or
/// [`Scope::capture`](crate::Scope::capture)); replayed by
/// [`Scope::replay`](crate::Scope::replay) on any scope of the same device, each replay
/// ordered on that scope's stream. One replay costs one `cuGraphLaunch` and one event
/// record, however many kernels and copies the graph holds.
///
/// # The rules, and what enforces them
///
/// * **Everything a graph uses lives as long as it does.** Its own allocations are made
///   and freed inside each replay; pinned buffers and `DeviceVec`s are held (owned or
///   borrowed) by the graph, so dropping, moving or writing them while the graph exists
///   does not compile. Replaying after a free (cudarc lets safe code do it) cannot be
///   written. Memory of a scope cannot enter a capture (different brands).
/// * **Inputs are refilled and outputs read between replays.** [`held_mut`](Self::held_mut)
///   and [`held`](Self::held) need the graph, which a replay borrows exclusively until it
///   is known complete: `s.replay(&mut graph)?` returns a [`Pending`](crate::Pending)
///   that hands `&mut Graph` back after `wait`, or, if it is dropped, keeps it borrowed
///   until the scope's final synchronisation. Forgetting it is safe (the borrow stays).
/// * **One replay at a time.** Replaying on two streams at once is refused at compile
///   time: the second `replay` needs `&mut Graph` while the first holds it. Concurrent
///   replays would write the same held outputs (and the driver runs the launches of one
///   executable graph one after the other anyway: "Only one instance of hGraphExec may
///   be executing at a time", `cuGraphLaunch`). For concurrent replays, capture the work
///   twice, with buffers of its own for each graph.
/// * **A graph runs on its own device.** A replay on a scope of another device is an
///   [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) at run time: devices are
///   values, not types.
/// * **The graph's own memory lives inside each replay.** An allocation made in the
///   capture is an allocation node and its free (where the buffer was dropped) a free
///   node: every replay allocates and frees it again, in the replay's own order on the
///   replaying scope's stream, from the driver's graph memory. Nothing outside the graph
///   ever frees it, and its contents do not persist between replays.
/// * **Dropping a graph never waits.** No replay can be running when it drops (see the
///   borrows above), and `cuGraphExecDestroy` of a graph in flight would free it after
///   completion anyway.
///
/// # Captures never involve a user's stream
///
/// A capture records on a stream it creates, in `CU_STREAM_CAPTURE_MODE_RELAXED`: only
/// work issued through the [`Capture`](crate::Capture) (and its forks, on streams it also
/// creates) is recorded, and nothing of it runs. The stricter modes (`GLOBAL`,
/// `THREAD_LOCAL`) make "potentially unsafe" calls of the capturing thread or of every
/// thread fail while the capture is open, such as loading a kernel's module on first
/// use, or a library's lazy setup; they protect captures on streams that other code can
/// reach, which these are not. The capture is not ordered after the calling scope's
/// work: nothing of it runs until it is replayed, and each replay is ordered on its own
/// scope's stream.
pub struct Graph<H = ()> {
    /// Declared first: destroyed before the graph it was made from and the memory it
    /// uses.
    pub(super) exec: RawGraphExec,
    /// The captured graph, kept for its kernel nodes (which name the instance's nodes).
    pub(super) template: RawGraph,
    /// The communicators of its collectives: dropped after the instance and the graph,
    /// whose nodes name them.
    pub(super) communicators: GraphCommunicators,
    /// The kernel launches recorded, in order.
    pub(super) kernels: Vec<KernelRecord>,
    /// How many allocations of its own the graph makes in each replay.
    pub(super) allocations: usize,
    /// Whether its instance runs each kernel node at its own stream's priority (a fork
    /// chose one: [`Capture::fork_with_priority`](super::Capture::fork_with_priority)).
    pub(super) node_priorities: bool,
    pub(super) held: H,
    /// Unique in the process; handles to its kernel arguments carry it.
    pub(super) id: u64,
    /// Keeps the context, and the modules of the graph's kernels, alive.
    pub(super) device: Device,
}

impl<H: Hold> Graph<H> {
    /// A graph of `device` made from `template` and its instance `exec`.
    pub(super) fn instantiated(
        exec: RawGraphExec,
        template: RawGraph,
        recorded: Recorded,
        held: H,
        id: u64,
        device: &Device,
    ) -> Self {
        Graph {
            exec,
            template,
            communicators: recorded.communicators,
            kernels: recorded.kernels,
            allocations: recorded.allocations,
            node_priorities: recorded.node_priorities,
            held,
            id,
            device: device.clone(),
        }
    }

    /// Shared access to what the graph holds, between replays: the pinned buffers as
    /// `&[T]` (read what the last replay wrote), the `DeviceVec`s as `&DeviceVec<T>`.
    /// A tuple when a tuple was held.
    pub fn held(&self) -> H::Held<'_> {
        self.held.held()
    }

    /// Exclusive access to what the graph holds, between replays: the pinned buffers it
    /// owns or borrows mutably as `&mut [T]` (refill inputs), the others as with
    /// [`held`](Self::held). Never `&mut PinnedBuffer` or `&mut DeviceVec`, which could be
    /// swapped out from under the graph.
    pub fn held_mut(&mut self) -> H::HeldMut<'_> {
        self.held.held_mut()
    }

    /// The held memory back, and the graph destroyed (no replay can be running: each
    /// borrows the graph until it is known complete).
    pub fn into_held(self) -> H {
        let Graph {
            exec,
            template,
            held,
            ..
        } = self;
        drop(exec);
        drop(template);
        held
    }
}

impl<H> Graph<H> {
    /// The device the graph runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The communicators of its collectives.
    pub(crate) fn communicators(&self) -> &GraphCommunicators {
        &self.communicators
    }

    /// How many kernel launches the graph recorded.
    pub fn kernel_count(&self) -> usize {
        self.kernels.len()
    }
}

impl<H> std::fmt::Debug for Graph<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("id", &self.id)
            .field("device", &self.device.ordinal())
            .field("kernels", &self.kernels.len())
            .field("allocations", &self.allocations)
            .finish()
    }
}
