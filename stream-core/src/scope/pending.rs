//! [`Pending`]: a download in flight (type state), and the event it waits on.

use std::sync::Arc;

use crate::device::Event;
use crate::driver::context::PrimaryContext;
use crate::driver::stream::RawStream;
use crate::error::Result;
use crate::host::staging::download::DownloadJob;
use crate::memory::brand::{brand, Brand};

use super::Outstanding;

/// A copy in flight on a scope's stream, holding the host memory it writes (type state).
///
/// [`wait`](Self::wait) blocks on one event recorded right after the copy, then hands the
/// host memory back for use during the rest of the scope. Dropping or forgetting a
/// `Pending` is safe: the host memory then stays borrowed until the scope ends, when the
/// scope's own synchronisation has made the copy complete.
///
/// ```no_run
/// # use stream_core::{scope, Error, Stream};
/// # fn f(stream: &Stream) -> Result<(), Error> {
/// let mut out = vec![0u32; 256];
/// scope(stream, |s| {
///     let x = s.alloc_zeroed::<u32>(256)?;
///     let pending = s.copy_to_host(&x, &mut out)?;  // Pending<'s, &'env mut [u32]>
///     let host: &mut [u32] = pending.wait()?;        // one event synchronisation
///     host[0] += 1;
///     Ok(())
/// })
/// # }
/// ```
///
/// Waiting twice does not compile (`wait` consumes the `Pending`; see
/// `ui-tests/tests/ui/host/wait-twice.rs`):
///
/// ```compile_fail,E0382
/// # use stream_core::{scope, Error, Stream};
/// # fn f(stream: &Stream) -> Result<(), Error> {
/// let mut out = vec![0u32; 4];
/// scope(stream, |s| {
///     let x = s.alloc_zeroed::<u32>(4)?;
///     let pending = s.copy_to_host(&x, &mut out)?;
///     pending.wait()?;
///     pending.wait()?;
///     Ok(())
/// })
/// # }
/// ```
#[must_use = "what it holds (host memory, a replayed graph) stays borrowed until the scope ends unless you call `.wait()`"]
pub struct Pending<'s, V> {
    value: V,
    /// What `wait` waits for.
    completion: Completion<'s>,
    _brand: Brand<'s>,
}

/// What a [`Pending`] waits for.
enum Completion<'s> {
    /// Nothing: the copy is complete (or there was nothing to copy).
    Ready,
    /// An event recorded after the copy, of the scope's context (alive for `'s`), and
    /// the scope's watches: a collective ahead of the copy on the stream bounds `wait`
    /// as it bounds the scope's end.
    Event(Event, &'s Arc<PrimaryContext>, &'s Outstanding),
    /// A staged download's copy-out (see `host::staging::download`), and the watches.
    Staged(DownloadJob, &'s Outstanding),
}

impl<'s, 'a, T> Pending<'s, &'a mut [T]> {
    /// The already complete copy into `host` when it has no elements (no work can touch
    /// zero bytes); `host` back otherwise.
    pub(crate) fn of_empty(host: &'a mut [T]) -> std::result::Result<Self, &'a mut [T]> {
        if host.is_empty() {
            Ok(Self::complete(host))
        } else {
            Err(host)
        }
    }

    /// A copy into `host` that has already completed (on the host, like a staged
    /// download's pipeline that returned): nothing to wait for. Safe because `host` is
    /// borrowed exclusively: while that borrow exists no DMA or thread may write it (any
    /// that did would have needed it), so handing it back at `wait` reads only what is
    /// there.
    pub(crate) fn complete(host: &'a mut [T]) -> Self {
        Pending {
            value: host,
            completion: Completion::Ready,
            _brand: brand(),
        }
    }

    /// A staged download into `host` whose copy-out `job` runs (the only work that can
    /// write it: `host` is borrowed exclusively), registered here with `outstanding`, the
    /// scope's copy-outs, which its end waits for. `wait` hands `host` back only once
    /// `job` is done.
    pub(crate) fn staged(
        host: &'a mut [T],
        job: DownloadJob,
        outstanding: &'s Outstanding,
    ) -> Self {
        outstanding.push(job.clone());
        Pending {
            value: host,
            completion: Completion::Staged(job, outstanding),
            _brand: brand(),
        }
    }
}

impl<'s, V> Pending<'s, V> {
    /// A copy into `value` in flight on `stream`, made by `enqueue`, with an event
    /// recorded after it.
    ///
    /// `enqueue` enqueues, on the stream it is given, the work that writes `value`'s
    /// memory (its own `unsafe` code proves that this work is all there is); the event is
    /// recorded after it, on the same stream, so `wait` returns only once that work is
    /// done. If `enqueue` fails, the error is returned and `value` stays borrowed until
    /// the scope ends.
    pub(crate) fn after(
        context: &'s Arc<PrimaryContext>,
        outstanding: &'s Outstanding,
        stream: &RawStream,
        mut value: V,
        enqueue: impl FnOnce(&RawStream, &mut V) -> Result<()>,
    ) -> Result<Self> {
        enqueue(stream, &mut value)?;
        let event = Event::cached(context)?;
        event.record(stream)?;
        Ok(Pending {
            value,
            completion: Completion::Event(event, context, outstanding),
            _brand: brand(),
        })
    }

    /// Blocks until the copy is complete, then returns the host memory.
    ///
    /// An `Err` (the copy or earlier work on the stream failed) leaves the memory
    /// borrowed until the scope ends.
    ///
    /// Behind an NCCL collective of the scope, the wait is bounded as the scope's end
    /// is (see [`nccl`](crate::nccl#when-a-peer-dies)): when a peer fails or the
    /// communicator's timeout passes, the communicator is aborted and its error
    /// returned. When ranks of this process disagreed on one of the scope's collectives,
    /// the copy completes but [`Error::RanksDisagree`](crate::Error::RanksDisagree) is
    /// returned: what it brought is not a result.
    pub fn wait(self) -> Result<V> {
        match &self.completion {
            Completion::Ready => {}
            Completion::Event(event, context, outstanding) => {
                // Under the scope's own context, whatever the thread has current now.
                // Behind a collective the wait polls; a query that found the event
                // complete proves what the synchronisation would (`cuEventQuery`'s
                // `CUDA_SUCCESS`: all work before the record has completed), so it is
                // then skipped.
                if !outstanding.bound_wait_query(|| event.is_complete(context))? {
                    event.synchronize(context)?
                }
            }
            Completion::Staged(job, outstanding) => {
                outstanding.bound_wait(|| job.is_done())?;
                job.wait()?
            }
        }
        // The copy is complete; behind a collective whose ranks disagreed (completed by
        // a stand-in, see `nccl/ledger.rs`) what it brought is not a result.
        if let Completion::Event(_, _, outstanding) | Completion::Staged(_, outstanding) =
            &self.completion
        {
            if outstanding.is_watched() {
                if let Some(verdict) = outstanding.verdict() {
                    return Err(verdict);
                }
            }
        }
        Ok(self.value)
    }

    /// The value, without waiting for the work this `Pending` waits for, which may still
    /// be running (a graph replayed again at once, `graph/replay.rs`).
    ///
    /// # Safety
    ///
    /// Until that work is known complete, the caller must not read or write, on the
    /// host, any memory that work may use, nor free it, and must hand the value to a new
    /// `Pending` (or keep it borrowed until the scope's end) whose completion comes after
    /// that work as well as its own.
    pub(crate) unsafe fn into_unwaited(self) -> V {
        self.value
    }

    /// `Ok(true)` once the copy is complete, without blocking.
    pub fn is_ready(&self) -> Result<bool> {
        match &self.completion {
            Completion::Ready => Ok(true),
            Completion::Event(event, context, _) => event.is_complete(context),
            Completion::Staged(job, _) => Ok(job.is_done()),
        }
    }
}

impl<V> std::fmt::Debug for Pending<'_, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("ready", &matches!(self.completion, Completion::Ready))
            .finish()
    }
}
