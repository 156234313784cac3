//! Recording a scope's operations into a [`Trace`]: [`Scope::trace_into`], and the one
//! wrapper every traced operation goes through.

use crate::error::{Error, Result};
use crate::scope::Scope;
use crate::trace::{Category, ChunkTrace, Trace};

impl<'s, 'env> Scope<'s, 'env> {
    /// Records this scope's operations from now on into `trace` (copies, fills, kernels,
    /// collectives, each with its GPU start and end), and those of the forks it makes
    /// after this call, with arrows for the order each fork and join imposes. See
    /// [`trace`](crate::trace).
    ///
    /// Giving the same trace again does nothing; another trace is an
    /// [`Error::Trace`](crate::Error::Trace) (a scope records into one).
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
        match self.tracer() {
            None => op(),
            Some(trace) => traced_slow(trace, self, name, category, bytes, op),
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

/// The traced side of [`Scope::traced`], kept out of line so the untraced path stays
/// one load and a branch.
#[cold]
#[inline(never)]
fn traced_slow<R>(
    trace: &Trace,
    scope: &Scope<'_, '_>,
    name: &'static str,
    category: Category,
    bytes: Option<u64>,
    op: impl FnOnce() -> Result<R>,
) -> Result<R> {
    let start = trace.begin(scope.stream);
    let out = op();
    if out.is_ok() {
        trace.end(start, scope.stream, name, category, bytes);
    }
    out
}
