//! [`Stream::run_owned`]: a whole scope as a future, over values the future owns.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::completion::Inflight;
use super::watcher::Watcher;
use crate::device::Stream;
use crate::error::Error;
use crate::scope::owned::refuse_capturing;
use crate::scope::Outstanding;
use crate::scope::Scope;

impl Stream {
    /// Runs `f` with a scope on this stream and `&mut` access to `owned`, then returns a
    /// future that completes, with `owned` and the closure's result, once the GPU has
    /// finished everything the closure enqueued. No thread blocks: the scope ends with an
    /// event that the device's completion thread watches, not a synchronisation.
    ///
    /// The closure runs **now**, on the calling thread (an executor thread, typically):
    /// it enqueues work and returns; the future only waits. Work it enqueues may use
    /// memory owned by `owned` (host buffers, [`PinnedBuffer`](crate::PinnedBuffer)s,
    /// [`DeviceVec`](crate::DeviceVec)s to [`attach`](Scope::attach)) and `'static`
    /// memory, nothing borrowed from outside: `'env` is a lifetime of the closure's own,
    /// which no borrow from the caller outlives (see [`crate::future`] for the argument,
    /// and `ui-tests/tests/ui/future/run-owned-borrows-host-memory.rs`).
    ///
    /// * `owned` is boxed, so memory inside it (an array field, say) keeps its address
    ///   while the DMA runs, and moving the future moves nothing the GPU uses.
    /// * The output is `Ok((owned, result))`, or the closure's `Err` (it wins), or the
    ///   stream's error (a kernel fault before the end of the work, [`Error::is_sticky`]).
    ///   On `Err` the owned value is released once the GPU is done with it.
    /// * **Dropping** the future before it completes cancels nothing: the work runs to
    ///   its end, and `owned` is released afterwards by the completion thread.
    ///   **Forgetting** it leaks `owned`. Either way nothing is freed under a running DMA.
    /// * **A panic** in the closure propagates from this call once the work enqueued
    ///   before it is covered: `owned` is then released after the GPU is done.
    /// * If the end of the work cannot be marked (the driver refuses to record the event,
    ///   e.g. after a kernel fault), `owned` is leaked and the future resolves to that
    ///   error at once; likewise if waiting for the event fails with an error that does
    ///   not say the context stopped.
    /// * Copies to and from pageable memory (a `Vec`) inside the closure block: an
    ///   upload until the data has left the source, a download until it has landed
    ///   (this call waits for it before it returns); so does
    ///   [`Pending::wait`](crate::Pending::wait). Use `PinnedBuffer`s in `owned`, or
    ///   [`upload_owned`](Self::upload_owned)/[`download_owned`](Self::download_owned),
    ///   which stage pageable buffers without blocking. An allocation that finds the
    ///   device out of memory also blocks before it retries (see
    ///   [`Scope::alloc`](Scope::alloc)).
    /// * **Collectives** ([`Scope::all_reduce`] and the others, on a communicator in
    ///   `owned`) block too: their work ends only when every rank's does, and the work of
    ///   a dead peer's collective is ended by aborting the communicator, which only this
    ///   thread may do (the completion thread may not). So when the closure issued one,
    ///   this call waits for the stream before it returns, bounded by the communicator's
    ///   timeout as a scope's end is, and the future resolves to that end's error, if
    ///   any ([`Error::CollectiveTimedOut`], ranks that disagreed).
    ///
    /// ```no_run
    /// use stream_core::{Device, Error, PinnedBuffer};
    /// # async fn serve(dev: Device) -> Result<(), Error> {
    /// let stream = dev.new_stream()?;
    /// let mut input = dev.alloc_pinned::<f32>(1024)?;
    /// input.fill(2.0);
    /// let output = dev.alloc_pinned::<f32>(1024)?;
    /// let ((input, output), ()) = stream
    ///     .run_owned((input, output), |s, (input, output)| {
    ///         let x = s.upload(&input[..])?;
    ///         let _download = s.copy_to_host(&x, &mut output[..])?; // no wait: the future waits
    ///         Ok::<_, Error>(())
    ///     })
    ///     .await?;
    /// assert_eq!(output[..], input[..]);
    /// # Ok(()) }
    /// ```
    pub fn run_owned<O, F, R, E>(&self, owned: O, f: F) -> RunOwned<O, R, E>
    where
        O: Send + 'static,
        F: for<'s, 'env> FnOnce(&'s Scope<'s, 'env>, &'env mut O) -> std::result::Result<R, E>,
        E: From<Error>,
    {
        let _nvtx = crate::driver::nvtx::range(c"stream_core::run_owned");
        // The context, bound for the closure and the end marker, and given back on return.
        let bound = match self.device.inner.bind() {
            Ok(bound) => bound,
            Err(e) => return RunOwned::ready(Err(E::from(e))),
        };
        if let Err(e) = refuse_capturing(self) {
            return RunOwned::ready(Err(E::from(e)));
        }
        // Before any work: a completion thread that cannot start fails the call here.
        let watcher = match Watcher::of(&self.device) {
            Ok(watcher) => watcher,
            Err(e) => return RunOwned::ready(Err(E::from(e))),
        };
        let mut owned = Box::new(owned);
        // Staged downloads into pageable memory of `owned` started by the closure: their
        // copy-outs write it from the staging thread after the stream's work, so they are
        // waited for here, before `owned` is handed to the completion thread.
        let outstanding = Outstanding::default();
        let ran = {
            // SAFETY: an owned scope (the second alternative of `Scope::branded`'s
            // contract): `'env` is higher-ranked in `F`, so the closure can borrow for
            // `'env` only `'static` values and `*owned`, lent here. `owned` is boxed (its
            // contents keep their address); once the scope is dropped below, the
            // copy-outs registered in `outstanding` are waited for, and then `owned`
            // goes into `Inflight::after`, which keeps it untouched until the completion
            // thread has seen an event recorded after all of the scope's work complete,
            // or leaks it when none can be recorded or waited for; on a panic the same
            // happens before the panic continues. The scope stays in this frame, on this
            // thread, and is dropped before this function returns, while `self` is
            // borrowed.
            let scope = unsafe { Scope::branded(self, &outstanding) };
            std::panic::catch_unwind(AssertUnwindSafe(|| f(&scope, &mut *owned)))
        };
        // Collectives: their work ends only when every rank's does, and only this thread
        // may abort their communicator (the completion thread may not), so it is waited
        // for here, bounded as a scope's end is, before the copy-outs behind it.
        let collectives = outstanding.end_watched(self);
        // A copy-out always finishes (on an error it stops writing and reports it).
        let copied = outstanding.wait_all();
        let result = match ran {
            Ok(result) => result,
            Err(panic) => {
                // Dropped at once: the completion thread releases `owned` after the GPU.
                drop(Inflight::after(&watcher, self, owned));
                drop(bound);
                std::panic::resume_unwind(panic);
            }
        };
        let result = match (result, collectives.and(copied)) {
            (Ok(_), Err(e)) => Err(E::from(e)),
            (result, _) => result,
        };
        let marked = Inflight::after(&watcher, self, owned);
        drop(bound);
        match marked {
            Ok(inflight) => RunOwned {
                state: State::Waiting {
                    inflight,
                    result: Some(result),
                },
            },
            Err(e) => RunOwned::ready(Err(result.err().unwrap_or_else(|| E::from(e)))),
        }
    }
}

/// The future of [`Stream::run_owned`]: resolves to `Ok((owned, result))` once the GPU
/// has finished the closure's work. Dropping it does not cancel that work (see
/// [`crate::future`]).
#[must_use = "the work runs anyway; await the future to get the owned value and the result back"]
pub struct RunOwned<O: Send + 'static, R, E> {
    state: State<O, R, E>,
}

enum State<O: Send + 'static, R, E> {
    /// Waiting for the completion thread to see the event after the closure's work.
    Waiting {
        inflight: Inflight<Box<O>>,
        /// What the closure returned; `None` once taken.
        result: Option<std::result::Result<R, E>>,
    },
    /// Resolved without GPU work to wait for; `None` once taken.
    Ready(Option<std::result::Result<(O, R), E>>),
}

impl<O: Send + 'static, R, E> RunOwned<O, R, E> {
    fn ready(output: std::result::Result<(O, R), E>) -> Self {
        RunOwned {
            state: State::Ready(Some(output)),
        }
    }
}

// Nothing of the state is pinned: the owned value is boxed, the rest is moved out by
// value, and no `Pin<&mut _>` to a field is ever made.
impl<O: Send + 'static, R, E> Unpin for RunOwned<O, R, E> {}

impl<O: Send + 'static, R, E: From<Error>> Future for RunOwned<O, R, E> {
    type Output = std::result::Result<(O, R), E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match &mut this.state {
            State::Ready(output) => match output.take() {
                Some(output) => Poll::Ready(output),
                None => panic!("a stream_core future was polled after it completed"),
            },
            State::Waiting { inflight, result } => {
                let owned = match inflight.poll_complete(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(done) => done,
                };
                let Some(result) = result.take() else {
                    panic!("a stream_core future was polled after it completed");
                };
                Poll::Ready(match (result, owned) {
                    (Err(e), _) => Err(e),
                    (Ok(_), Err(e)) => Err(E::from(e)),
                    (Ok(r), Ok(owned)) => Ok((*owned, r)),
                })
            }
        }
    }
}

impl<O: Send + 'static, R, E> std::fmt::Debug for RunOwned<O, R, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let waiting = matches!(self.state, State::Waiting { .. });
        f.debug_struct("RunOwned")
            .field("waiting_for_gpu", &waiting)
            .finish()
    }
}

#[cfg(test)]
mod tests;
