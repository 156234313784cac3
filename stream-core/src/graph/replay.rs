//! [`Scope::replay`]: one run of a captured graph on a scope's stream; and
//! [`Scope::replay_again`]: another run right after one still in flight, without the host
//! waiting in between.

use crate::device::Device;
use crate::error::Result;
use crate::graph::collectives::{not_given, GraphCommunicators};
use crate::graph::Graph;
use crate::scope::{Pending, Scope};
use crate::trace::Category;

/// A graph whose last replay may still be running: what the host may touch meanwhile
/// (its device and communicators, host-side records) and nothing else, until
/// [`Scope::launch_again`] launches it again into a new [`Pending`]. Its held buffers
/// are out of reach: there is no way to them from here.
pub(crate) struct InFlight<'env, H>(&'env mut Graph<H>);

impl<H> InFlight<'_, H> {
    /// The graph's device.
    pub(crate) fn device(&self) -> &Device {
        self.0.device()
    }

    /// The communicators its collectives run on, with their calls.
    pub(crate) fn communicators(&self) -> &GraphCommunicators {
        self.0.communicators()
    }
}

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

    /// Enqueues another run of the graph whose replay `pending` waits for, right after
    /// it, without waiting on the host: a loop of replays that reads nothing between
    /// them (a training loop whose data and weights stay on the device) pays no host
    /// synchronisation per step. CUDA orders every launch of a graph behind its earlier
    /// launches (`cuGraphLaunch`), on any stream; the returned `Pending` waits for both.
    ///
    /// ```no_run
    /// # use stream_core::{scope, Error, Graph, Stream};
    /// # fn f(stream: &Stream, graph: &mut Graph<()>, steps: usize) -> Result<(), Error> {
    /// scope(stream, |s| {
    ///     let mut step = s.replay(graph)?;
    ///     for _ in 1..steps {
    ///         step = s.replay_again(step)?; // no host wait between steps
    ///     }
    ///     let graph = step.wait()?;         // every step has completed
    ///     Ok(())
    /// })
    /// # }
    /// ```
    ///
    /// `pending` must come from this scope (its brand: another scope's does not
    /// compile). Errors as for [`replay`](Self::replay); after one, the graph stays
    /// borrowed until the scope ends, as a `Pending` that was dropped keeps it. A graph
    /// with NCCL collectives is replayed again with
    /// [`replay_again_with`](Self::replay_again_with).
    pub fn replay_again<H>(
        &'s self,
        pending: Pending<'s, &'env mut Graph<H>>,
    ) -> Result<Pending<'s, &'env mut Graph<H>>> {
        let graph = in_flight(pending);
        if !graph.communicators().is_empty() {
            return Err(not_given());
        }
        self.launch_again(graph)
    }

    /// Enqueues another run of a graph whose last replay may still run (see
    /// [`replay_again`](Self::replay_again)); its communicators, if it has collectives,
    /// were checked and are watched by this scope (`replay_again_with`).
    pub(crate) fn launch_again<H>(
        &'s self,
        graph: InFlight<'env, H>,
    ) -> Result<Pending<'s, &'env mut Graph<H>>> {
        self.launch_replay(graph.0)
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
                    // * an earlier run of it may still be running (`replay_again`: the graph
                    //   came out of that run's `Pending` unwaited, as an `InFlight` that reaches
                    //   none of its memory): CUDA orders each launch of a graph behind its
                    //   earlier launches ("each launch is ordered behind ... any previous
                    //   launches of hGraphExec", `cuGraphLaunch`), so the runs never overlap,
                    //   and the event `Pending` records after this launch completes after both;
                    // * every kernel's launch shape and arguments were checked when recorded, as
                    //   for a scope, and its module stays loaded while the graph's device lives.
                    unsafe { graph.exec.launch(stream) }
                },
            )
        })
    }
}

/// The graph of a replay's `pending`, unwaited, as an [`InFlight`]: reachable only to be
/// launched again.
pub(crate) fn in_flight<'s, 'env, H>(
    pending: Pending<'s, &'env mut Graph<H>>,
) -> InFlight<'env, H> {
    // SAFETY: the work `pending` waits for is runs of this graph: a `Pending` holding
    // `&mut Graph` is made only by `launch_replay` (the one `Pending::after` whose value
    // is a graph), on the stream of the scope whose brand it carries. `InFlight` reaches
    // none of the memory those runs use (only the graph's device and communicator
    // records, host data no run touches), and its one way out is `launch_again`, whose
    // new `Pending` completes after those runs too (`cuGraphLaunch` orders a graph's
    // launches behind its earlier ones, whatever the stream); if that launch is refused
    // or fails, the graph stays borrowed for `'env`, past the scope's final
    // synchronisation, as a dropped `Pending` keeps it.
    InFlight(unsafe { pending.into_unwaited() })
}
