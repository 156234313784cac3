//! The bridge to cudarc's safe layer (`CudaContext`, `CudaStream`, `CudaSlice`): which
//! context a cudarc value belongs to, a cudarc stream as a foreign [`RawStream`], events
//! recorded and waited on cudarc streams, and device memory moved in or out of a
//! `CudaSlice`.
//!
//! cudarc's safe calls bind their context with `cuCtxSetCurrent`, which would displace
//! whatever context the thread had. Every call here that lets cudarc run is made with
//! the device's primary context already bound by a [`Bound`] guard, and only for a
//! cudarc value of that very context (checked by handle), so cudarc finds its context
//! current and changes nothing; the guard then gives the thread its previous context
//! back.

use std::any::Any;
use std::num::NonZeroU64;
use std::sync::Arc;

use cudarc::driver::{result, sys, CudaSlice, CudaStream, DevicePtrMut};

use super::context::{Bound, PrimaryContext};
use super::event::RawEvent;
use super::pool::StreamOrdered;
use super::stream::RawStream;
use crate::error::{DriverResultExt, Error, Result};

/// The handle of `context`, as the driver reports it while the context is bound: what
/// a cudarc `CudaContext::cu_ctx()` is compared with.
fn handle_of(_bound: &Bound<'_>) -> Result<sys::CUcontext> {
    result::ctx::get_current()
        .call("cuCtxGetCurrent")?
        .ok_or_else(|| {
            Error::driver(
                "cuCtxGetCurrent",
                result::DriverError(sys::CUresult::CUDA_ERROR_INVALID_CONTEXT),
            )
        })
}

/// Binds `context` and returns the guard with `Ok(true)` when `cudarc_context` (a
/// cudarc `CudaContext::cu_ctx()`) is that same context.
pub(crate) fn bind_if_same<'c>(
    context: &'c PrimaryContext,
    cudarc_context: sys::CUcontext,
) -> Result<(Bound<'c>, bool)> {
    let bound = context.bind()?;
    let same = handle_of(&bound)? == cudarc_context;
    Ok((bound, same))
}

/// What a cudarc stream handle names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamHandle {
    /// A stream object (`cuStreamCreate`): the same stream on every thread and under
    /// every current context.
    Object,
    /// `CudaContext::default_stream()` (`NULL`, or `CU_STREAM_LEGACY`): the legacy
    /// stream of whichever context is current.
    LegacyDefault,
    /// `CudaContext::per_thread_stream()` (`CU_STREAM_PER_THREAD`): a different stream on
    /// every host thread.
    PerThread,
}

/// What `stream`'s handle names.
pub(crate) fn handle_kind(stream: &CudaStream) -> StreamHandle {
    match stream.cu_stream() as usize {
        0 | 1 => StreamHandle::LegacyDefault,
        2 => StreamHandle::PerThread,
        _ => StreamHandle::Object,
    }
}

impl RawStream {
    /// cudarc's `stream` as a foreign stream of `context`: the same `CUstream`, kept
    /// alive by a clone of the `Arc` and never destroyed by this value, or `Ok(None)` when
    /// `stream` belongs to another context. Only stream objects are accepted (see
    /// [`StreamHandle`]): the caller refuses the default streams first, and gets
    /// `Ok(None)` for them too.
    pub(crate) fn from_cudarc(
        context: &Arc<PrimaryContext>,
        stream: &Arc<CudaStream>,
    ) -> Result<Option<Self>> {
        let (bound, same) = bind_if_same(context, stream.context().cu_ctx())?;
        drop(bound);
        if !same || handle_kind(stream) != StreamHandle::Object {
            return Ok(None);
        }
        let owner: Arc<dyn Any + Send + Sync> = Arc::clone(stream) as _;
        // SAFETY: `stream.cu_stream()` is a stream object (checked above) of `context`
        // (its cudarc context is this primary context, compared by handle). A
        // `CudaStream` destroys its handle only in its own `Drop`, when the last `Arc`
        // goes (or never, for a stream it borrows, whose owner promised cudarc to keep
        // it alive while the wrapper may be used), and `owner` is such an `Arc`.
        Ok(Some(unsafe {
            RawStream::foreign(context, stream.cu_stream(), owner)
        }))
    }
}

/// A cudarc stream checked to belong to the device's primary context, with that
/// context bound on this thread for as long as this value lives: work enqueued through
/// it lands on the stream cudarc's own calls use, also for the legacy default stream
/// (whose handle names the current context's). Not `Send` (the binding is this
/// thread's).
pub(crate) struct BoundCudarcStream<'a> {
    stream: &'a Arc<CudaStream>,
    context: &'a Arc<PrimaryContext>,
    _bound: Bound<'a>,
}

impl<'a> BoundCudarcStream<'a> {
    /// Binds `context` and checks that `stream` is one of its streams: `Ok(None)` for
    /// a stream of another context or the per-thread default stream (which names a
    /// different stream on every thread, so work recorded here may not be what cudarc
    /// issued elsewhere).
    pub(crate) fn new(
        context: &'a Arc<PrimaryContext>,
        stream: &'a Arc<CudaStream>,
    ) -> Result<Option<Self>> {
        let (bound, same) = bind_if_same(context, stream.context().cu_ctx())?;
        if !same || handle_kind(stream) == StreamHandle::PerThread {
            return Ok(None);
        }
        Ok(Some(BoundCudarcStream {
            stream,
            context,
            _bound: bound,
        }))
    }

    /// `Ok` when `event` is an event of this stream's context, else an error naming
    /// `call`.
    fn check(&self, event: &RawEvent, call: &'static str) -> Result<()> {
        if event.belongs_to(self.context) {
            Ok(())
        } else {
            Err(Error::driver(
                call,
                result::DriverError(sys::CUresult::CUDA_ERROR_INVALID_CONTEXT),
            ))
        }
    }

    /// Captures the work enqueued on the stream so far in `event`.
    pub(crate) fn record(&self, event: &RawEvent) -> Result<()> {
        self.check(event, "cuEventRecord")?;
        // SAFETY: the stream is live (`self.stream` holds it, see `RawStream::from_cudarc`
        // for why a `CudaStream` keeps its handle alive) and its context is bound, so a
        // legacy-default handle names this context's stream; the event is alive (its
        // context is `self.context`, checked above, which `self` borrows).
        unsafe { result::event::record(event.raw(), self.stream.cu_stream()) }.call("cuEventRecord")
    }

    /// Makes the stream wait, on the GPU, for the work `event` captured.
    pub(crate) fn wait(&self, event: &RawEvent) -> Result<()> {
        self.check(event, "cuStreamWaitEvent")?;
        // SAFETY: as in `record`: a live stream of the bound context, a live event of it.
        unsafe {
            result::stream::wait_event(
                self.stream.cu_stream(),
                event.raw(),
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .call("cuStreamWaitEvent")
    }

    /// `Ok(true)` while the stream is being captured into a CUDA graph.
    pub(crate) fn is_capturing(&self) -> Result<bool> {
        // SAFETY: a live stream of the bound context; a query only reads its state.
        let status = unsafe { result::stream::is_capturing(self.stream.cu_stream()) }
            .call("cuStreamIsCapturing")?;
        Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// cudarc's error recorded by a call that could not return one (its drops, and its
    /// waits and records on slices' events), taken out of the context's error state.
    pub(crate) fn take_recorded_error(&self, what: &'static str) -> Result<()> {
        self.stream.context().check_err().call(what)
    }

    /// Takes the device allocation out of `slice` (of this stream), after making this
    /// stream wait for every use of it cudarc tracked: cudarc's `CudaSlice::leak`, which
    /// waits on the slice's read and write events on the slice's own stream, exactly as
    /// the slice's `Drop` does before its stream-ordered free. A failed wait is recorded
    /// in the context's error state (see [`take_recorded_error`](Self::take_recorded_error)).
    /// Returns the allocation (`None` for an empty slice, which has none), the caller's
    /// to free; or the slice back, untouched, when its context allocates with
    /// `cuMemAlloc` (no memory pools), whose memory is not stream-ordered.
    pub(crate) fn take_allocation<T>(
        &self,
        slice: CudaSlice<T>,
    ) -> std::result::Result<Option<StreamOrdered>, CudaSlice<T>> {
        if !slice.context().has_async_alloc() {
            return Err(slice);
        }
        // cudarc's context allocates asynchronously, so the slice's memory came from
        // `cuMemAllocAsync` (its address is 0 only when the slice is empty).
        let ptr = NonZeroU64::new(slice.leak());
        // SAFETY: a stream-ordered allocation (above), not freed (the slice owned it until
        // `leak`, which gives it up without freeing), owned by nothing else from now on.
        Ok(ptr.map(|ptr| unsafe { StreamOrdered::adopt(ptr) }))
    }

    /// A `CudaSlice` on this stream owning `len` elements at `ptr`, whose write event (when
    /// cudarc tracks events) is recorded after everything enqueued on this stream so far,
    /// so that cudarc's later uses on other streams wait for it. For `len == 0` (and
    /// `ptr == 0`) cudarc's own empty slice.
    ///
    /// # Safety
    ///
    /// `ptr` is a device allocation of this stream's context of at least
    /// `len * size_of::<T>()` bytes, aligned for `T`, that cudarc may free with
    /// `cuMemFreeAsync` (stream-ordered, or pool, memory; the context allocates
    /// asynchronously), owned by nothing else from now on, every earlier use of which is
    /// ordered before this stream's current end; every bit pattern is a valid `T`.
    pub(crate) unsafe fn adopt<T>(
        &self,
        ptr: sys::CUdeviceptr,
        len: usize,
    ) -> Result<CudaSlice<T>> {
        let mut slice = if ptr == 0 && len == 0 {
            self.stream.null::<T>().call("cuMemAllocAsync")?
        } else {
            // SAFETY: the caller's contract is `upgrade_device_ptr`'s: a valid
            // allocation with room for `len` values of `T` whose bytes are valid `T`s;
            // cudarc owns and frees it from now on.
            unsafe { self.stream.upgrade_device_ptr::<T>(ptr, len) }
        };
        // Records the write event on this stream (cudarc waits on the fresh, unrecorded
        // events first, which are no-ops): a later use on another cudarc stream waits
        // for this point, which is after every earlier use (the caller's contract).
        let (_, record) = slice.device_ptr_mut(self.stream);
        drop(record);
        Ok(slice)
    }
}
