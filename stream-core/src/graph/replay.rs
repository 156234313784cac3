//! [`Scope::replay`]: one run of a captured graph on a scope's stream.

use crate::error::Result;
use crate::graph::collectives::not_given;
use crate::graph::Graph;
use crate::scope::{Pending, Scope};
use crate::trace::Category;

impl<'s, 'env> Scope<'s, 'env> {
    /// Enqueues one run of `graph` on this scope's stream, ordered after the scope's
    /// work so far and before its later work. The host does not block.
    ///
    /// Returns a [`Pending`] that holds the graph: [`Pending::wait`] blocks until this run
    /// is complete and hands `&mut Graph` back, for the host to read outputs
    /// ([`Graph::held`]) and refill inputs ([`Graph::held_mut`]) before the next replay.
    /// Dropping or forgetting the `Pending` keeps the graph borrowed until this scope's
    /// final synchronisation (the outermost scope's, in a fork), so the host can never
    /// touch what a running replay reads or writes, nor drop the graph under it.
    ///
    /// ```no_run
    /// # use stream_core::{scope, Error, Graph, PinnedBuffer, Stream};
    /// # fn f(stream: &Stream, graph: &mut Graph<(PinnedBuffer<f32>, PinnedBuffer<f32>)>, batches: &[Vec<f32>]) -> Result<(), Error> {
    /// scope(stream, |s| {
    ///     let mut graph = graph;                       // &'env mut Graph<...>
    ///     for batch in batches {
    ///         graph.held_mut().0.copy_from_slice(batch); // write the input
    ///         graph = s.replay(graph)?.wait()?;         // replay; the output is ready
    ///         println!("{}", graph.held().1[0]);        // read the output
    ///     }
    ///     Ok(())
    /// })
    /// # }
    /// ```
    ///
    /// Returns [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) (the graph's device
    /// as the memory's) when the scope runs on another device, and the driver's error
    /// when the launch fails (the graph then stays borrowed until the scope ends).
    ///
    /// A graph with NCCL collectives (recorded with [`Capture`](crate::Capture)'s
    /// collective methods) is replayed with [`replay_with`](Self::replay_with), which
    /// borrows their communicators; here it is
    /// [`Error::GraphCommunicators`](crate::Error::GraphCommunicators).
    ///
    /// Reading an output before the replay is known complete does not compile (see
    /// `ui-tests/tests/ui/graph/read-graph-output-before-replay-completes.rs`):
    ///
    /// ```compile_fail,E0502
    /// # use stream_core::{scope, Error, Graph, PinnedBuffer, Stream};
    /// # fn f(stream: &Stream, graph: &mut Graph<PinnedBuffer<f32>>) -> Result<(), Error> {
    /// scope(stream, |s| {
    ///     let pending = s.replay(graph)?;
    ///     println!("{}", graph.held()[0]); // error: the replay may still be writing it
    ///     pending.wait()?;
    ///     Ok(())
    /// })
    /// # }
    /// ```
    pub fn replay<H>(
        &'s self,
        graph: &'env mut Graph<H>,
    ) -> Result<Pending<'s, &'env mut Graph<H>>> {
        if !graph.communicators.is_empty() {
            return Err(not_given());
        }
        self.launch_replay(graph)
    }

    /// Enqueues one run of `graph` (see [`replay`](Self::replay)); its communicators, if
    /// it has collectives, were checked and are watched by this scope (`replay_with`).
    pub(crate) fn launch_replay<H>(
        &'s self,
        graph: &'env mut Graph<H>,
    ) -> Result<Pending<'s, &'env mut Graph<H>>> {
        let _nvtx = crate::driver::nvtx::range(c"stream_core::replay");
        self.device().ensure_same_device(&graph.device)?;
        let context = &self.stream.device.inner.context;
        self.traced("graph replay", Category::Graph, None, || {
            Pending::after(
                context,
                self.outstanding,
                &self.stream.raw,
                graph,
                |stream, graph| {
                    // SAFETY: the graph's work runs on this scope's stream, of the graph's device
                    // (checked above, so of its context). Every memory it uses is valid for this
                    // run and touched by nothing outside it meanwhile:
                    // * its own allocations are made and freed inside the run, by its allocation
                    //   and free nodes (every use was recorded between them);
                    // * the pinned buffers and `DeviceVec`s it holds live as long as the graph,
                    //   which this run borrows exclusively (`&'env mut`) until `Pending::wait` has
                    //   seen it complete or the scope's final synchronisation (the outermost
                    //   scope's: it covers forks by their joins) has: the host cannot read, write
                    //   or free them meanwhile, since it reaches them only through the graph; a
                    //   `DeviceVec` the graph holds shared is only read by it, one held
                    //   exclusively is reachable by no one else;
                    // * every kernel's launch shape and arguments were checked when recorded, as
                    //   for a scope, and its module stays loaded while the graph's device lives.
                    unsafe { graph.exec.launch(stream) }
                },
            )
        })
    }
}
