//! Recording a scope's operations into a [`Trace`]: [`Scope::trace_into`], and the one
//! wrapper every traced operation goes through.

use crate::error::{Error, Result};
use crate::scope::Scope;
use crate::trace::{Category, ChunkTrace, Mark, Trace};

impl<'s, 'env> Scope<'s, 'env> {
    /// Records this scope's operations from now on into `trace` (copies, fills, kernels,
    /// collectives, each with its GPU start and end), and those of the forks it makes
    /// after this call, with arrows for the order each fork and join imposes. See
    /// [`trace`](crate::trace).
    ///
    /// Giving the same trace again does nothing; another trace is an
    /// [`Error::Trace`] (a scope records into one).
    ///
    /// ```no_run
    /// use stream_core::{scope, trace::Trace, Device, Error};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dev = Device::new(0)?;
    /// let stream = dev.new_stream()?;
    /// let trace = Trace::new();
    /// scope(&stream, |s| {
    ///     s.trace_into(&trace)?;
    ///     let mut x = s.alloc::<f32>(1 << 20)?;
    ///     s.fill(&mut x, 1.0)
    /// })?;
    /// trace.write_chrome_json("fill.trace.json")?;
    /// # Ok(()) }
    /// ```
    pub fn trace_into(&self, trace: &'env Trace) -> Result<()> {
        let kept = *self.trace.get_or_init(|| trace);
        if std::ptr::eq(kept, trace) {
            Ok(())
        } else {
            Err(Error::Trace {
                reason: "this scope already records into another trace",
            })
        }
    }

    /// The trace this scope records into, if any.
    #[inline(always)]
    pub(crate) fn tracer(&self) -> Option<&'env Trace> {
        self.trace.get().copied()
    }

    /// Where a staged copy of this scope records its chunks, in a traced scope.
    #[inline(always)]
    pub(crate) fn chunk_trace(&self) -> Option<ChunkTrace<'env>> {
        let trace = self.tracer()?;
        Some(ChunkTrace {
            trace,
            stream: self.stream,
        })
    }

    /// Gives a fork's `child` this scope's trace.
    #[inline(always)]
    pub(crate) fn pass_trace_to(&self, child: &Scope<'_, 'env>) {
        if let Some(trace) = self.tracer() {
            let _ = child.trace.set(trace);
        }
    }

    /// Runs `op`, which enqueues one operation on this scope's stream; in a traced scope,
    /// between a start and an end recorded on the stream, as a slice `name` of
    /// `category` (moving `bytes`, if it is a copy or a collective). Untraced, this is
    /// `op()` after one atomic load.
    #[inline(always)]
    pub(crate) fn traced<R>(
        &self,
        name: &'static str,
        category: Category,
        bytes: Option<u64>,
        op: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        let started = self.trace_begin();
        let out = op();
        self.trace_end(started, name, category, bytes, out.is_ok());
        out
    }

    /// [`traced`](Self::traced) in two halves, for a caller that enqueues its operation
    /// between them itself, so that the operation is inlined there (a closure called
    /// through `traced` may not be: a collective's enqueue then no longer folds to its
    /// one NCCL call). `None` in an untraced scope, after one atomic load.
    #[inline(always)]
    pub(crate) fn trace_begin(&self) -> Option<TraceStarted<'env>> {
        self.tracer().map(|trace| begin(trace, self))
    }

    /// Ends what [`trace_begin`](Self::trace_begin) began: the operation's slice, if
    /// `enqueued`.
    #[inline(always)]
    pub(crate) fn trace_end(
        &self,
        started: Option<TraceStarted<'env>>,
        name: &'static str,
        category: Category,
        bytes: Option<u64>,
        enqueued: bool,
    ) {
        if let Some(started) = started {
            end(started, self, name, category, bytes, enqueued);
        }
    }

    /// In a traced scope, a point of its stream now (a fork or a join), as a slice
    /// without duration; its index for an arrow.
    #[inline(always)]
    pub(crate) fn trace_point(&self, name: &'static str, category: Category) -> Option<usize> {
        self.tracer()?.instant(self.stream, name, category)
    }

    /// In a traced scope, an arrow between two points [`trace_point`](Self::trace_point)
    /// recorded.
    #[inline(always)]
    pub(crate) fn trace_flow(&self, name: &'static str, from: Option<usize>, to: Option<usize>) {
        if let Some(trace) = self.tracer() {
            trace.flow(name, from, to);
        }
    }
}

/// What [`Scope::trace_begin`] began in a traced scope: the trace and the operation's
/// start.
pub(crate) struct TraceStarted<'env> {
    trace: &'env Trace,
    start: Option<Mark>,
}

/// The traced side of [`Scope::trace_begin`], kept out of line so that the untraced
/// path stays one load and a branch.
#[cold]
#[inline(never)]
fn begin<'env>(trace: &'env Trace, scope: &Scope<'_, 'env>) -> TraceStarted<'env> {
    TraceStarted {
        trace,
        start: trace.begin(scope.stream),
    }
}

/// The traced side of [`Scope::trace_end`]: the operation's slice, if it was enqueued.
#[cold]
#[inline(never)]
fn end(
    started: TraceStarted<'_>,
    scope: &Scope<'_, '_>,
    name: &'static str,
    category: Category,
    bytes: Option<u64>,
    enqueued: bool,
) {
    if enqueued {
        started
            .trace
            .end(started.start, scope.stream, name, category, bytes);
    }
}
