//! [`Capture::fork`]: a second branch of the graph, recorded on a stream of the capture's
//! own, with the capture's memory lent to it through [`Lend`], as a scope lends its
//! memory to its forks (pinned views held by the graph can be lent too).
//!
//! A graph has no streams, only dependencies. The fork records them the way a scope's
//! fork orders streams: an event recorded on the capture's stream and waited for on the
//! child's makes the child's first work depend on everything recorded so far (and makes
//! the child's stream join the capture); the same the other way round when the closure
//! returns makes the parent's later work depend on the child's. The events are the
//! capture's own, kept until it ends: the thread's cached spares are recorded and waited
//! on by other code of the thread meanwhile, which must not meet an event recorded in a
//! capture. The child's stream is a
//! new one that belongs to the capture, never a user's [`Stream`], so no
//! user stream is ever capturing, and it stays alive until the whole capture has ended.

use std::sync::Arc;

use crate::error::Error;
use crate::graph::Capture;
use crate::memory::brand::{LendPermit, Rebrand};
use crate::scope::Lend;
use crate::Stream;

impl<'g> Capture<'g> {
    /// Records `f`'s work as a branch of the graph: it depends on everything this
    /// capture recorded before the fork, and what this capture records after `fork`
    /// returns depends on it. What this capture records *during* the fork (through `g`,
    /// inside the closure) runs concurrently with the branch, as for a scope's
    /// [fork](crate::Scope::fork). Memory in `lent` is lent to the child for the whole
    /// fork (see [`Lend`]: device memory as for a scope's fork, and pinned views held
    /// by the graph, `&view` read-only and `&mut view` or a view by value exclusive).
    ///
    /// The child is a capture of its own, on a stream that belongs to the capture (no
    /// stream argument: a graph records dependencies, not streams).
    ///
    /// ```no_run
    /// # use stream_core::{Device, Error};
    /// # fn f(dev: &Device) -> Result<(), Error> {
    /// let out = dev.alloc_pinned::<f32>(2048)?;
    /// let (_graph, ()) = dev.capture(out, |g, mut out| {
    ///     let mut x = g.alloc::<f32>(2048)?;
    ///     let (mut lo, mut hi) = x.split_at_mut(1024)?;
    ///     g.fork(&mut hi, |c, mut hi| {
    ///         c.fill(&mut hi, 2.0)?;                  // one branch
    ///         g.fill(&mut lo, 1.0)                    // the other, concurrently
    ///     })?;
    ///     g.copy_to_host(&x, &mut out)?;              // after both
    ///     Ok::<_, Error>(())
    /// })?;
    /// # Ok(()) }
    /// ```
    ///
    /// Returns the closure's error, or an error when the branch cannot be recorded; a
    /// branch whose join could not be recorded makes the whole capture fail when it
    /// ends, so no graph missing a dependency is ever made.
    pub fn fork<L, F, T, E>(&'g self, lent: L, f: F) -> std::result::Result<T, E>
    where
        L: Lend<'g>,
        F: for<'c> FnOnce(&'c Capture<'c>, L::Views<'c>) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        let _nvtx = crate::driver::nvtx::range(c"stream_core::capture_fork");
        let stream = self.graph_device().new_stream().map_err(E::from)?;
        self.fork_on(stream, lent, f)
    }

    /// [`fork`](Self::fork) onto a stream of `priority` (as
    /// [`Device::new_stream_with_priority`](crate::Device::new_stream_with_priority):
    /// lower is more urgent), which the graph keeps: its instance runs each kernel node
    /// at the priority of the stream it was recorded on (CUDA's `USE_NODE_PRIORITY`),
    /// this branch's at `priority`, the rest at the default, whichever stream replays
    /// it. So a collective recorded on an urgent branch still overlaps the kernels
    /// beside it at every replay, as on a scope's urgent fork (see the `nccl` module's
    /// "Overlapping a collective with computation"); without a chosen priority, a
    /// graph's nodes run at its replay stream's, and a kernel that fills the GPU keeps
    /// NCCL's blocks waiting.
    ///
    /// ```no_run
    /// # use stream_core::{nccl::{Communicator, Sum}, Device, Error};
    /// # fn f(dev: &Device, comm: &Communicator) -> Result<(), Error> {
    /// let urgent = *dev.stream_priorities()?.start();
    /// let (_graph, ()) = dev.capture((), |g, ()| {
    ///     let mut grad = g.alloc::<f32>(1 << 20)?;
    ///     g.fill(&mut grad, 1.0)?;
    ///     let mut rest = g.alloc::<f32>(1 << 20)?;
    ///     g.fork_with_priority(urgent, &mut grad, |c, mut grad| {
    ///         c.all_reduce_in_place(comm, &mut grad, Sum)?; // the urgent branch
    ///         g.fill(&mut rest, 2.0)                         // beside it
    ///     })?;
    ///     Ok::<_, Error>(())
    /// })?;
    /// # Ok(()) }
    /// ```
    ///
    /// [`Error::InvalidStreamPriority`] for a
    /// priority outside the device's range, before anything is recorded. An
    /// [update](crate::Graph::update) keeps the instance's choice, so it is refused
    /// between a capture with such a fork and one without.
    pub fn fork_with_priority<L, F, T, E>(
        &'g self,
        priority: i32,
        lent: L,
        f: F,
    ) -> std::result::Result<T, E>
    where
        L: Lend<'g>,
        F: for<'c> FnOnce(&'c Capture<'c>, L::Views<'c>) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        let _nvtx = crate::driver::nvtx::range(c"stream_core::capture_fork");
        let device = self.graph_device();
        let stream = device.new_stream_with_priority(priority).map_err(E::from)?;
        self.state().use_node_priorities();
        self.fork_on(stream, lent, f)
    }

    /// The fork onto `stream`, a new stream of the capture's device.
    fn fork_on<L, F, T, E>(&'g self, stream: Stream, lent: L, f: F) -> std::result::Result<T, E>
    where
        L: Lend<'g>,
        F: for<'c> FnOnce(&'c Capture<'c>, L::Views<'c>) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        let device = self.graph_device();
        // Kept by the capture until it ends, also when `f` unwinds: a stream that joined
        // a capture belongs to it until its origin stream ends the capture.
        let stream = Arc::new(stream);
        self.state().keep_stream(Arc::clone(&stream));
        let context = &device.inner.context;
        self.state()
            .order(context, self.capture_stream(), &stream.raw)
            .map_err(E::from)?;
        let out = {
            // SAFETY: `stream` was created above and only this fork issues work on it; it
            // joined the capture by the wait above (`Capture::open` checks that it is
            // capturing), stays part of it until the capture's origin stream ends it,
            // after this function, and is kept alive until then (`keep_stream`); nothing
            // is issued on it after the capture ends, so no work ever runs on it. The
            // child capture lives in this block of this frame, on this thread.
            let child = unsafe { Capture::open(&stream, self.state()) }.map_err(E::from)?;
            // SAFETY: the child's stream waits for everything recorded on this capture's
            // stream so far (the event above), and the join below records this capture's
            // later work after the child's before `lent`'s borrows end (they last for
            // this call); a buffer moved in is the child's from now on.
            let permit = LendPermit(unsafe { Rebrand::new(&stream.raw) });
            let views = lent.lend(&permit);
            f(&child, views)
        };
        // The join. If it cannot be recorded, the child's stream stays an unjoined part
        // of the capture and ending the capture fails: no graph without the dependency.
        let joined = self
            .state()
            .order(context, &stream.raw, self.capture_stream());
        match (out, joined) {
            (Err(e), _) => Err(e),
            (Ok(_), Err(e)) => Err(E::from(e)),
            (Ok(v), Ok(())) => Ok(v),
        }
    }
}
