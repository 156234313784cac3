//! [`Lease`]: a listed stream lent to other threads (the watchdog's, the marker thread's,
//! and those whose call waits for the whole device), for one driver call at a time,
//! while it is listed. Apart from the list, so that a call held up in the driver (a
//! marker's record behind another thread's `cuMemFreeHost`) holds up no one else.

use std::cell::Cell;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError, Weak};

use cudarc::driver::sys;

use crate::device::watch::Watches;
use crate::driver::context::PrimaryContext;
use crate::driver::stream::{BorrowedStream, RawStream};

/// A listed stream, lent for one call at a time.
pub(crate) struct Lease {
    /// The device's primary context, which the stream belongs to, while the stream is
    /// listed; `None` once the scope's `WatchedStream` is dropped, which clears it under
    /// this lock ([`unlist`](Self::unlist)): after any call under way has returned and
    /// before the stream can go.
    listed: Mutex<Option<Arc<PrimaryContext>>>,
    /// The stream's handle, as a number (a handle is not `Send`).
    stream: usize,
}

thread_local! {
    /// A lease this thread unlisted, for its next scope's collective if nobody else
    /// holds it by then (a marker's job can): one allocation fewer per scope that
    /// issues a collective. It holds no context, so it keeps no device's context alive.
    static SPARE: Cell<Option<Arc<Lease>>> = const { Cell::new(None) };
}

/// Another thread's call on a lent stream is under way ([`Lease::try_with_stream`]).
pub(super) struct InUse;

impl Lease {
    /// A lease of `stream`, a stream of `context`, listed: this thread's spare if nobody
    /// else holds it any more (a marker's job can still), a new one otherwise.
    ///
    /// # Safety
    ///
    /// `stream` is a stream of `context` and stays alive until [`unlist`](Self::unlist)
    /// is called on the lease (the drop of the `WatchedStream` it is listed with calls
    /// it).
    pub(crate) unsafe fn list(context: &Arc<PrimaryContext>, stream: &RawStream) -> Arc<Lease> {
        let context = Some(Arc::clone(context));
        let stream = stream.raw() as usize;
        if let Some(mut spare) = SPARE.try_with(Cell::take).ok().flatten() {
            if let Some(only) = Arc::get_mut(&mut spare) {
                *only
                    .listed
                    .get_mut()
                    .unwrap_or_else(PoisonError::into_inner) = context;
                only.stream = stream;
                return spare;
            }
        }
        Arc::new(Lease {
            listed: Mutex::new(context),
            stream,
        })
    }

    /// `f` called with the stream and its context while it is listed, under the lease's
    /// lock (waiting for a call under way); `None` once it is not listed.
    pub(super) fn with_stream<R>(
        &self,
        f: impl FnOnce(&BorrowedStream<'_>, &Arc<PrimaryContext>) -> R,
    ) -> Option<R> {
        let listed = self.listed.lock().unwrap_or_else(PoisonError::into_inner);
        self.lend(&listed, f)
    }

    /// As [`with_stream`](Self::with_stream), but `Err(InUse)` at once while another
    /// thread's call on the stream is under way: a marker's record can be held up in the
    /// driver behind another thread's `cuMemFreeHost` for as long as a hung collective,
    /// and a look that waited for it would hold up the watchdog that aborts it.
    pub(super) fn try_with_stream<R>(
        &self,
        f: impl FnOnce(&BorrowedStream<'_>, &Arc<PrimaryContext>) -> R,
    ) -> Result<Option<R>, InUse> {
        let listed = self.try_listed().ok_or(InUse)?;
        Ok(self.lend(&listed, f))
    }

    /// The lease's lock, unless another thread's call holds it (a poisoned lock is taken:
    /// `listed` is a plain value, valid whatever a panic interrupted).
    fn try_listed(&self) -> Option<MutexGuard<'_, Option<Arc<PrimaryContext>>>> {
        match self.listed.try_lock() {
            Ok(listed) => Some(listed),
            Err(TryLockError::Poisoned(listed)) => Some(listed.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// `f` called with the stream under `listed`, the lease's lock held, if it is listed.
    fn lend<R>(
        &self,
        listed: &MutexGuard<'_, Option<Arc<PrimaryContext>>>,
        f: impl FnOnce(&BorrowedStream<'_>, &Arc<PrimaryContext>) -> R,
    ) -> Option<R> {
        let context = listed.as_ref()?;
        // SAFETY: a listed stream is alive (`list`'s contract) until `unlist` clears
        // `listed` under the lease's lock, held by the caller (`listed` borrows its
        // guard) until `f` has returned (the borrowed stream does not outlive it); it is
        // a stream of `context`, listed with it.
        let stream = unsafe { BorrowedStream::new(context, self.stream as sys::CUstream) };
        Some(f(&stream, context))
    }

    /// Clears `listed`, once any call on the stream under way on another thread has
    /// returned, and keeps the lease as this thread's spare.
    ///
    /// A marker's record can be held up in the driver (behind another thread's
    /// `cuMemFreeHost`, which waits for this stream's hung collective too), and the
    /// stream is no longer listed for the watchdog: so the scope's `watches` are asked
    /// meanwhile, as the scope's own wait would (a watch that gives up aborts the
    /// collective, the stream drains, and the record returns; the scope reports the error
    /// it kept). A record queued before the entry went may begin after one has ended:
    /// each is waited for so. Once a watch has given up, the stream drains and the
    /// records return, so the lock is waited for plainly.
    pub(super) fn unlist(self: Arc<Self>, watches: &Weak<Watches>) {
        let mut listed = loop {
            if let Some(listed) = self.try_listed() {
                break listed;
            }
            let given_up = match watches.upgrade() {
                Some(watches) => watches.poll(|| self.try_listed().is_some()).is_err(),
                None => true,
            };
            if given_up {
                break self.listed.lock().unwrap_or_else(PoisonError::into_inner);
            }
        };
        *listed = None;
        drop(listed);
        let _ = SPARE.try_with(|spare| spare.set(Some(self)));
    }
}
