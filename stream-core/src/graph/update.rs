//! [`Graph::update`]: capturing the graph's work again and applying it to the
//! instantiated graph in place (`cuGraphExecUpdate`), when the driver can.

use crate::driver::graph::UpdateRefused;
use crate::error::Error;
use crate::graph::capture::record;
use crate::graph::capture_state::{CaptureState, Recorded};
use crate::graph::hold::Hold;
use crate::graph::{Capture, Graph};

/// Why a graph with collectives is not updated: an update keeps the instance's nodes and
/// their resources, while NCCL ties each captured operation's resources (its persistent
/// plan) to the graph it was captured into, which the update then destroys.
const COLLECTIVES_NOT_UPDATED: &str =
    "a graph with NCCL collectives is not updated in place (NCCL ties each captured \
     operation to the graph it was captured into): capture a new graph instead";

impl<H: Hold> Graph<H> {
    /// Captures `f` again, with views of the same held memory, and makes later replays
    /// run the new capture's work, without instantiating a new graph: the whole-graph
    /// update of CUDA (`cuGraphExecUpdate`), much cheaper than a new
    /// [`capture`](crate::Device::capture) when only arguments change (scalars, launch
    /// shapes, which held memory a node uses).
    ///
    /// The new work must have the old one's shape: the same kernels launched in the same
    /// order, the same copies and fills, the same dependencies. Otherwise this returns
    /// [`Error::GraphUpdate`] saying what differs, and the graph stays exactly as it was
    /// (replays run the previous capture). So does a graph with allocations of its own
    /// (see [`Capture::alloc`]), which is refused before capturing: an allocation's
    /// address is fixed when it is captured, so a new capture would name other memory;
    /// and a graph with NCCL collectives (before capturing, and when the new capture
    /// records one): NCCL ties each captured operation to the graph it was captured into.
    /// A capture with a [`fork_with_priority`](Capture::fork_with_priority) branch and
    /// one without do not update each other either: the instance keeps its nodes'
    /// priorities, or its replay stream's, as it was made. Handles to scalar arguments
    /// ([`KernelNode::scalar`](crate::KernelNode::scalar)) made in `f` name this graph's
    /// launches in the same order, like the old ones.
    ///
    /// ```no_run
    /// # use stream_core::{kernel, scope, Capture, DeviceSliceMut, Error, LaunchConfig, Stream};
    /// # const SRC: &str = "";
    /// #[kernel(cuda = SRC)]
    /// unsafe fn scale_f32(a: f32, y: &mut [f32]);
    /// fn body<'g>(g: &'g Capture<'g>, mut y: DeviceSliceMut<'g, 'g, f32>, a: f32) -> stream_core::Result<()> {
    ///     scale_f32(g, LaunchConfig::for_elements(y.len(), 256), a, &mut y)
    /// }
    /// # fn f(stream: &Stream) -> Result<(), Error> {
    /// let dev = stream.device();
    /// let mut v = dev.alloc_vec::<f32>(4096)?;
    /// let (mut graph, ()) = dev.capture(&mut v, |g, y| body(g, y, 2.0))?;
    /// scope(stream, |s| s.replay(&mut graph).map(drop))?;
    /// graph.update(|g, y| body(g, y, 3.0))?; // same work, another scalar
    /// scope(stream, |s| s.replay(&mut graph).map(drop))?;
    /// # Ok(()) }
    /// ```
    pub fn update<F, T, E>(&mut self, f: F) -> std::result::Result<T, E>
    where
        F: for<'g> FnOnce(&'g Capture<'g>, H::Views<'g>) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        let refuse = |reason: String| E::from(Error::from(crate::error::GraphUpdate { reason }));
        if !self.communicators.is_empty() {
            return Err(refuse(COLLECTIVES_NOT_UPDATED.to_owned()));
        }
        if self.allocations > 0 {
            return Err(refuse(format!(
                "the graph makes {} allocation(s) of its own in each replay, and a new \
                 capture's allocations would be other memory",
                self.allocations
            )));
        }
        let state = CaptureState::new(self.id);
        let (mut graph, out) = record(&self.device, &mut self.held, &state, f)?;
        let Recorded {
            kernels,
            allocations,
            communicators,
            node_priorities,
        } = state.into_parts();
        if !communicators.is_empty() {
            return Err(refuse(COLLECTIVES_NOT_UPDATED.to_owned()));
        }
        if allocations > 0 {
            return Err(refuse(format!(
                "the new capture makes {allocations} allocation(s) of its own, which the \
                 graph does not"
            )));
        }
        if node_priorities != self.node_priorities {
            // The instance keeps the priorities of its nodes, or the launch stream's, as
            // it was made: the new capture would need the other.
            return Err(refuse(
                match node_priorities {
                    true => "the new capture forks onto a stream of a chosen priority, the graph does not",
                    false => "the graph forks onto a stream of a chosen priority, the new capture does not",
                }
                .to_owned(),
            ));
        }
        if kernels.len() != self.kernels.len() {
            return Err(refuse(format!(
                "the new capture launches {} kernel(s), the graph {}",
                kernels.len(),
                self.kernels.len()
            )));
        }
        if let Some((at, (old, new))) = self
            .kernels
            .iter()
            .zip(&kernels)
            .enumerate()
            .find(|(_, (old, new))| !std::ptr::eq(old.kernel(), new.kernel()))
        {
            return Err(refuse(format!(
                "launch {at} is of kernel `{}` in the new capture, of `{}` in the graph",
                new.kernel().name(),
                old.kernel().name()
            )));
        }
        // SAFETY: the new work is recorded by a capture like the graph's own: every
        // launch checked as for a scope, every memory it uses either held by this graph
        // (the views came from `self.held`, which the graph keeps for its whole life and
        // each replay borrows with the graph) or nothing else (it allocates nothing of
        // its own, checked above; its brand kept any other memory out). So what
        // `launch` requires of the graph's work holds of it, for every later replay.
        unsafe { self.exec.update(&mut graph) }.map_err(|refused| {
            refuse(match refused {
                UpdateRefused::Driver(reason) => reason.to_owned(),
                UpdateRefused::Call(e) => e.to_string(),
            })
        })?;
        // The instance's nodes are still named by the original graph's nodes: keep them,
        // with the new launches' arguments (the same kernel at each position).
        for (old, new) in self.kernels.iter_mut().zip(kernels) {
            old.take_launch(new);
        }
        Ok(out)
    }
}
