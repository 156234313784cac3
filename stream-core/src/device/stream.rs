//! [`Stream`]: a non-blocking CUDA stream of a [`Device`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::device::Device;
use crate::driver::graph::new_capturing_stream;
use crate::driver::stream::RawStream;
use crate::driver::stream_scratch::StreamScratch;
use crate::error::{Error, Result};

/// A non-blocking CUDA stream: work on it runs in issue order, concurrently with other
/// streams. `Send` and `Sync`; all work is issued through [`scope`](fn@crate::scope).
///
/// ```no_run
/// # fn main() -> stream_core::Result<()> {
/// let dev = stream_core::Device::new(0)?;
/// let stream = dev.new_stream()?;
/// std::thread::scope(|t| {
///     t.spawn(|| stream_core::scope(&stream, |s| { s.alloc::<f32>(16)?; Ok::<_, stream_core::Error>(()) }));
/// });
/// # Ok(()) }
/// ```
///
/// Several threads may open scopes on one stream at once: their work is still executed
/// in one order, and every scope synchronises the whole stream before it returns, so no
/// thread sees its host borrows released while its own work is pending.
///
/// A stream on which a library keeps a workspace (`kernels::Cublas`: 32 MiB on Hopper,
/// 4 MiB before) holds that device memory from the first such call until it is dropped
/// (see [`interop::with_stream_scratch`](crate::interop::with_stream_scratch)).
pub struct Stream {
    /// Declared first: destroyed (with its context bound) before `device` may go.
    pub(crate) raw: RawStream,
    /// Device memory kept for library workspaces ([`interop::with_stream_scratch`](crate::interop::with_stream_scratch)),
    /// freed stream-ordered by this stream's `Drop`, before `raw` is destroyed.
    pub(crate) scratch: StreamScratch,
    /// A stream of this crate's own, made by this stream's first async operation that
    /// rings the completion doorbell (`future/doorbell.rs`): the ring waits there for
    /// the operation's event, so that it never stalls this stream (work enqueued after a
    /// host function waits until it returns). `None` if it could not be made. Declared
    /// before `device` too.
    pub(crate) ring: OnceLock<Option<RawStream>>,
    /// Set by [`Stream::set_head_of_line_bypass`]: this stream's async operations ring
    /// the completion doorbell when another stream has work pending.
    pub(crate) head_of_line_bypass: AtomicBool,
    pub(crate) device: Device,
    /// Set once the stream's raw handle has left this crate ([`interop::raw_stream`](crate::interop::raw_stream)),
    /// and from the start for a stream another library owns (cudarc's): code outside this
    /// crate could have begun a graph capture on it, so a scope opening on it asks the
    /// driver (see [`Stream::may_be_capturing`]).
    handle_exposed: AtomicBool,
}

impl Stream {
    pub(crate) fn new(device: &Device) -> Result<Self> {
        Ok(Self::of(device, RawStream::new(&device.inner.context)?))
    }

    /// A new stream of `device` with `priority`, which the caller checked is in the
    /// device's range.
    pub(crate) fn with_priority(device: &Device, priority: i32) -> Result<Self> {
        let raw = RawStream::with_priority(&device.inner.context, priority)?;
        Ok(Self::of(device, raw))
    }

    /// A new stream of `device` that records its work into a graph from the start (a
    /// graph capture's origin stream, `graph/capture.rs`). Marked as a stream whose
    /// handle left the crate, so that a scope opened on it asks the driver, and refuses.
    pub(crate) fn capturing(device: &Device) -> Result<Self> {
        let stream = Self::of(device, new_capturing_stream(&device.inner.context)?);
        stream.handle_exposed.store(true, Ordering::Relaxed);
        Ok(stream)
    }

    /// The stream of `device` around this crate's own new `raw` stream.
    fn of(device: &Device, raw: RawStream) -> Self {
        Stream {
            scratch: StreamScratch::new(&raw),
            raw,
            ring: OnceLock::new(),
            head_of_line_bypass: AtomicBool::new(false),
            device: device.clone(),
            handle_exposed: AtomicBool::new(false),
        }
    }

    /// A stream of `device` whose handle another library owns (`raw` is foreign): its
    /// handle is out of this crate's hands from the start.
    pub(crate) fn foreign(device: Device, raw: RawStream) -> Self {
        Stream {
            handle_exposed: AtomicBool::new(true),
            scratch: StreamScratch::new(&raw),
            raw,
            ring: OnceLock::new(),
            head_of_line_bypass: AtomicBool::new(false),
            device,
        }
    }

    /// The device this stream belongs to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// `Ok(true)` when all work enqueued on this stream so far has completed, without
    /// blocking (`cuStreamQuery`). Useful to observe overlap: another stream's scope can
    /// finish while this one is still busy.
    pub fn is_idle(&self) -> Result<bool> {
        self.raw.is_idle()
    }

    /// The raw handle, for code outside this crate: noted, so that scopes on this
    /// stream ask the driver about graph captures from then on.
    pub(crate) fn expose_handle(&self) -> cudarc::driver::sys::CUstream {
        self.handle_exposed.store(true, Ordering::Relaxed);
        self.raw.raw()
    }

    /// `Ok(true)` when the stream is being captured into a CUDA graph. Only code outside
    /// this crate, holding the raw handle, can begin a capture on a `Stream` (this
    /// crate's own captures use streams of their own), so for a stream whose handle never
    /// left the crate the answer is known without asking the driver.
    #[inline(always)]
    pub(crate) fn may_be_capturing(&self) -> Result<bool> {
        if self.handle_exposed.load(Ordering::Relaxed) {
            self.raw.is_capturing()
        } else {
            Ok(false)
        }
    }

    /// Blocks until all work enqueued on this stream so far has completed, under the
    /// stream's own context (see `RawStream::synchronize`).
    #[inline]
    pub(crate) fn synchronize(&self) -> Result<()> {
        self.raw.synchronize()
    }

    /// [`synchronize`](Self::synchronize) before host borrows that work on this stream
    /// may use are released: `Ok` when the work has completed; `Err` only for a sticky
    /// error, which proves the context runs no more work (see
    /// [`STICKY`](crate::error::driver_codes::STICKY)); any other failure (binding the context
    /// included) proves nothing about DMA still running, so the process aborts, naming
    /// `what`.
    #[inline]
    pub(crate) fn synchronize_before_release(&self, what: &str) -> Result<()> {
        release_or_abort(self.synchronize(), what)
    }
}

/// The rule of [`Stream::synchronize_before_release`], for the outcome of any
/// synchronisation that would release host borrows.
#[inline]
pub(crate) fn release_or_abort(synced: Result<()>, what: &str) -> Result<()> {
    match synced {
        Ok(()) => Ok(()),
        Err(e) if e.is_sticky() => Err(e),
        Err(e) => abort_unreleasable(what, &e),
    }
}

/// Aborts: a synchronisation that would release host borrows failed with an error that
/// does not prove the context has stopped, so DMA into that memory may still be running.
#[cold]
pub(crate) fn abort_unreleasable(what: &str, error: &Error) -> ! {
    eprintln!(
        "stream_core: aborting: {what} failed ({error}), and that error does not prove the GPU \
         stopped; DMA into host memory whose borrow would now end may still be running"
    );
    std::process::abort();
}

impl Drop for Stream {
    fn drop(&mut self) {
        // Stream-ordered, before `raw` (dropped after this) is destroyed.
        let scratch = std::mem::replace(&mut self.scratch, StreamScratch::new(&self.raw));
        scratch.release(&self.raw);
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("device", &self.device.inner.ordinal)
            .field("raw", &self.raw.raw())
            .finish()
    }
}
