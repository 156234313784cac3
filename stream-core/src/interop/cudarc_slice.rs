//! cudarc's `CudaSlice` as a [`DeviceVec`] and back ([`DeviceVec::from_cudarc`],
//! [`DeviceVec::into_cudarc`]): the allocation changes owner, nothing is copied, and
//! cudarc's per-slice event tracking is honoured in both directions (see the
//! [module docs](super#cudarc)).

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use crate::device::Device;
use crate::driver::cudarc_bridge::{handle_kind, BoundCudarcStream, StreamHandle};
use crate::driver::event::RawEvent;
use crate::driver::pool::StreamOrdered;
use crate::error::{byte_len, Error, Result};
use crate::interop::cudarc_handles::PER_THREAD_STREAM;
use crate::memory::{DeviceRepr, DeviceVec};

/// Why a slice of a context that allocates with `cuMemAlloc` is refused.
const NO_MEMORY_POOLS: &str = "its context allocates with cuMemAlloc (the device reports no \
    stream-ordered memory pools), and cudarc frees such memory with cuMemFree, which waits for \
    the whole device; this crate frees device memory stream-ordered only, so keep this memory \
    in cudarc";

/// Why a misaligned slice is refused.
const MISALIGNED: &str = "its device address is not aligned for the element type; allocate it \
    with cudarc's alloc or alloc_zeros (256-byte aligned) rather than upgrade_device_ptr";

/// A refused [`DeviceVec::from_cudarc`]: the error, and the slice given back unchanged when
/// the conversion refused it before taking its memory.
///
/// `?` turns it into an [`Error`] (dropping the slice, which cudarc then frees as usual);
/// [`into_slice`](Self::into_slice) keeps the slice for cudarc code.
///
/// ```no_run
/// use cudarc::driver::CudaContext;
/// use stream_core::DeviceVec;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let ctx = CudaContext::new(0)?;
/// let slice = ctx.per_thread_stream().alloc_zeros::<f32>(16)?;
/// let refused = DeviceVec::from_cudarc(slice).unwrap_err(); // per-thread stream
/// println!("{}", refused.error());
/// let slice = refused.into_slice().expect("refused before its memory was taken");
/// # drop(slice); Ok(()) }
/// ```
pub struct FromCudarcError<T>(Box<Refused<T>>);

/// What a [`FromCudarcError`] holds (boxed: an `Err` stays small).
struct Refused<T> {
    error: Error,
    slice: Option<CudaSlice<T>>,
}

impl<T> FromCudarcError<T> {
    /// What went wrong.
    pub fn error(&self) -> &Error {
        &self.0.error
    }

    /// The slice, unchanged, when the conversion refused it before taking its memory
    /// (a context, stream or element type it cannot convert); `None` when a driver call
    /// failed after cudarc gave the memory up, in which case the memory is leaked rather
    /// than freed while work on it may still run.
    pub fn into_slice(self) -> Option<CudaSlice<T>> {
        self.0.slice
    }

    /// The error and the slice (see [`into_slice`](Self::into_slice)).
    pub fn into_parts(self) -> (Error, Option<CudaSlice<T>>) {
        let Refused { error, slice } = *self.0;
        (error, slice)
    }
}

impl<T> std::fmt::Debug for FromCudarcError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FromCudarcError")
            .field("error", &self.0.error)
            .field("slice_given_back", &self.0.slice.is_some())
            .finish()
    }
}

impl<T> std::fmt::Display for FromCudarcError<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.error.fmt(f)
    }
}

impl<T> std::error::Error for FromCudarcError<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0.error)
    }
}

impl<T> From<FromCudarcError<T>> for Error {
    fn from(refused: FromCudarcError<T>) -> Error {
        refused.0.error
    }
}

/// The slice refused with `error`, given back.
fn refused<T>(error: Error, slice: CudaSlice<T>) -> FromCudarcError<T> {
    FromCudarcError(Box::new(Refused {
        error,
        slice: Some(slice),
    }))
}

/// A failure after cudarc gave the memory up: it stays allocated (leaked).
fn leaked<T>(error: Error) -> FromCudarcError<T> {
    FromCudarcError(Box::new(Refused { error, slice: None }))
}

/// `Error::CudarcConversion` about a `what` with `reason`.
fn cannot(what: &'static str, reason: &'static str) -> Error {
    Error::from(crate::error::CudarcConversion { what, reason })
}

impl<T: DeviceRepr> DeviceVec<T> {
    /// Takes a cudarc slice's device memory as a [`DeviceVec`], without copying, and
    /// without waiting on the host.
    ///
    /// cudarc's work on the slice may still be running, on the slice's own stream or,
    /// when its context tracks events (the default once it has a second stream), on
    /// any other cudarc stream that used it last (its read and write events). None of it
    /// is ignored: the slice's stream first waits, on the GPU, for both events (cudarc's
    /// `CudaSlice::leak`, the same waits cudarc's own drop makes before freeing), then
    /// an event recorded there marks the end of every earlier use. The device's
    /// housekeeping stream waits for it at once (so [`to_host_vec`](Self::to_host_vec)
    /// and the free when the vec drops come after it), and every scope that attaches the
    /// vec makes its stream wait for it, on the GPU, before its first use. So a download
    /// in a scope returns what a long cudarc kernel on another stream wrote, without the
    /// host ever blocking on that kernel.
    ///
    /// Where the context does not track events (cudarc's single-stream mode, or after
    /// the `unsafe` `CudaContext::disable_event_tracking`), only the slice's own stream
    /// is waited for, as cudarc's own drop would: ordering other streams' uses is then
    /// the promise cudarc's `unsafe` call made.
    ///
    /// Refused, with the slice given back ([`FromCudarcError::into_slice`]): a slice of
    /// a non-primary context ([`Error::CudarcConversion`]), of cudarc's per-thread stream,
    /// of a context that allocates with `cuMemAlloc` (freeing that memory would wait for
    /// the whole device), of a stream being captured into a graph, or last used in a
    /// capture still open on another stream (waiting for it joins the capture)
    /// ([`Error::StreamCapturing`]), or whose context recorded an error of an earlier
    /// cudarc call (returned as [`Error::Driver`]).
    ///
    /// ```no_run
    /// use cudarc::driver::CudaContext;
    /// use stream_core::{scope, DeviceVec, Error, Stream};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let ctx = CudaContext::new(0)?;
    /// let cudarc_stream = ctx.new_stream()?;
    /// let slice = cudarc_stream.clone_htod(&[1.0f32, 2.0, 3.0])?;
    /// let weights = DeviceVec::from_cudarc(slice)?;           // no copy, no host wait
    /// let stream = Stream::from_cudarc(&ctx.new_stream()?)?;
    /// let mut out = [0f32; 3];
    /// scope(&stream, |s| {
    ///     let w = s.attach_ref(&weights)?;                     // waits for cudarc's copy
    ///     s.copy_to_host(&w, &mut out)?.wait()?;
    ///     Ok::<_, Error>(())
    /// })?;
    /// assert_eq!(out, [1.0, 2.0, 3.0]);
    /// # Ok(()) }
    /// ```
    pub fn from_cudarc(slice: CudaSlice<T>) -> std::result::Result<Self, FromCudarcError<T>> {
        let device = match Device::from_cudarc(Arc::clone(slice.context())) {
            Ok(device) => device,
            Err(error) => return Err(refused(error, slice)),
        };
        let stream = Arc::clone(slice.stream());
        let on_stream = match BoundCudarcStream::new(&device.inner.context, &stream) {
            Ok(Some(on_stream)) => on_stream,
            // The context is the device's (checked above): the per-thread stream.
            Ok(None) => return Err(refused(cannot("CudaSlice", PER_THREAD_STREAM), slice)),
            Err(error) => return Err(refused(error, slice)),
        };
        let len = slice.len();
        let checks = byte_len::<T>(len)
            .and_then(|_| {
                if on_stream.is_capturing()? {
                    Err(Error::StreamCapturing)
                } else {
                    Ok(())
                }
            })
            .and_then(|()| on_stream.take_recorded_error("an earlier cudarc call"))
            .and_then(|()| RawEvent::new(&device.inner.context));
        let ready = match checks {
            Ok(ready) => ready,
            Err(error) => return Err(refused(error, slice)),
        };
        // cudarc gives the allocation up here, after its stream waited for the slice's
        // read and write events. From now on a failure leaks the memory: it is never
        // freed while work on it may still run.
        let memory = match on_stream.take_allocation(slice) {
            Ok(memory) => memory,
            Err(slice) => return Err(refused(cannot("CudaSlice", NO_MEMORY_POOLS), slice)),
        };
        let ptr = memory.as_ref().map_or(0, StreamOrdered::ptr);
        on_stream
            .take_recorded_error("cuStreamWaitEvent (cudarc's CudaSlice::leak)")
            .map_err(leaked)?;
        // A wait for an event recorded in a graph capture on another stream (a slice last
        // used there while that capture is open) makes the slice's stream join the
        // capture; nothing of this crate's streams may wait behind it then.
        let refusal = match on_stream.is_capturing().map_err(leaked)? {
            true => Some(Error::StreamCapturing),
            false if ptr % std::mem::align_of::<T>() as u64 != 0 => {
                Some(cannot("CudaSlice", MISALIGNED))
            }
            false => None,
        };
        if let Some(error) = refusal {
            // SAFETY: the memory is the slice's (the same address and length, so
            // `upgrade_device_ptr`'s room and validity hold as they did; `T: DeviceRepr`
            // accepts any bytes), allocated by its context, which allocates
            // asynchronously (`take_allocation` checked), owned by nothing else since `leak`;
            // every earlier use is ordered before the stream's end by `leak`'s waits.
            // Alignment is not memory safety for cudarc (its copies are bytewise): the
            // slice is given back as it was, on its own stream.
            let given_back =
                unsafe { on_stream.adopt::<T>(memory.map_or(0, StreamOrdered::into_raw), len) };
            return Err(match given_back {
                Ok(slice) => refused(error, slice),
                Err(error) => leaked(error),
            });
        }
        on_stream.record(&ready).map_err(leaked)?;
        device.inner.housekeeping.wait(&ready).map_err(leaked)?;
        // SAFETY: `memory` is the slice's allocation of `len` elements of `T` (a
        // `CudaSlice<T>`'s invariant; `byte_len` checked the size; `None` only for an
        // empty slice), aligned for `T` (checked above), made by this device's primary
        // context (checked by `BoundCudarcStream::new`), stream-ordered (checked by
        // `take_allocation`, so `cuMemFreeAsync` frees it, as cudarc's own drop would),
        // and owned by nothing else since `leak`. Every earlier use is ordered before `ready` (recorded on the
        // slice's stream after `leak`'s waits on its read and write events) and before
        // the housekeeping stream's end (which waits for `ready`).
        Ok(unsafe { DeviceVec::from_raw_parts(&device, memory, len, Some(ready)) })
    }

    /// Hands the memory to cudarc as a `CudaSlice` of `stream`, without copying and
    /// without waiting on the host.
    ///
    /// `stream` first waits, on the GPU, for every earlier use of the memory (an event
    /// recorded on the device's housekeeping stream, which every blocking call of the
    /// vec and any conversion from cudarc went through; scopes that used it have
    /// synchronised, since they borrowed it). When cudarc tracks events, the slice's
    /// write event is then recorded on `stream`, so cudarc's uses on its other streams
    /// wait for that point too. cudarc frees the memory when the slice drops, on
    /// `stream`.
    ///
    /// Returns [`Error::DeviceMismatch`] for a stream of another device,
    /// [`Error::CudarcConversion`] for a stream of a non-primary context, for the
    /// per-thread stream and for a context that frees with `cuMemFree`,
    /// [`Error::StreamCapturing`] while `stream` is being captured; the vec is then
    /// dropped (freed on the housekeeping stream).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dev = stream_core::Device::new(0)?;
    /// let cudarc_stream = dev.cudarc_context()?.new_stream()?;
    /// let vec = dev.upload_vec(&[1u32, 2, 3])?;
    /// let slice = vec.into_cudarc(&cudarc_stream)?;
    /// assert_eq!(cudarc_stream.clone_dtoh(&slice)?, [1, 2, 3]);
    /// # Ok(()) }
    /// ```
    pub fn into_cudarc(self, stream: &Arc<CudaStream>) -> Result<CudaSlice<T>> {
        let device = self.device().clone();
        let context = &device.inner.context;
        let on_stream = match BoundCudarcStream::new(context, stream)? {
            Some(on_stream) => on_stream,
            None => return Err(unusable_stream(&device, stream)),
        };
        if !stream.context().has_async_alloc() {
            return Err(cannot("DeviceVec", NO_MEMORY_POOLS));
        }
        if on_stream.is_capturing()? {
            return Err(Error::StreamCapturing);
        }
        on_stream.take_recorded_error("an earlier cudarc call")?;
        let done = RawEvent::new(context)?;
        done.record(&device.inner.housekeeping)?;
        on_stream.wait(&done)?;
        let (raw, _ready, _device) = self.into_raw_parts();
        // SAFETY: `raw` was this vec's: one stream-ordered allocation of this device's
        // primary context (the stream's context, checked by `BoundCudarcStream::new`,
        // which allocates asynchronously, so cudarc frees it with `cuMemFreeAsync`) of
        // `raw.len` elements of `T` (aligned for `T`: made by this crate's pool or checked
        // by `from_cudarc`), owned by nothing else from now on (`into_raw_parts`). Every
        // earlier use is ordered before `stream`'s current end: scopes that used the vec
        // borrowed it and synchronised their streams before the borrow ended, and the
        // housekeeping stream's work (blocking calls, a conversion's wait for cudarc's
        // events) is before `done`, which `stream` waits for. `T: DeviceRepr` accepts
        // any bytes.
        let slice = unsafe { on_stream.adopt::<T>(raw.ptr, raw.len) }?;
        on_stream.take_recorded_error("cuEventRecord (the new slice's write event)")?;
        Ok(slice)
    }
}

/// Why `stream` (which `BoundCudarcStream::new` refused) cannot receive memory of
/// `device`.
fn unusable_stream(device: &Device, stream: &CudaStream) -> Error {
    let refuse = |reason| cannot("DeviceVec", reason);
    if handle_kind(stream) == StreamHandle::PerThread {
        return refuse(PER_THREAD_STREAM);
    }
    let theirs = stream.context();
    if theirs.cu_device() != device.inner.device.raw() {
        return Error::DeviceMismatch {
            memory: device.ordinal(),
            stream: theirs.ordinal(),
        };
    }
    refuse(
        "the stream's context is not the device's primary context; make the cudarc context \
         with CudaContext::new(ordinal), or take it from Device::cudarc_context",
    )
}
