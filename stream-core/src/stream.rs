//! [`Stream`]: a non-blocking CUDA stream.

use cudarc::driver::{result, sys};

use crate::device::Device;
use crate::error::{DriverResultExt, Error, Result};
use crate::scope::abort_unreleasable;

/// A non-blocking CUDA stream: work on it runs in issue order, concurrently with other
/// streams. `Send` and `Sync`; all work is issued through [`scope`](crate::scope).
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
pub struct Stream {
    pub(crate) raw: sys::CUstream,
    pub(crate) device: Device,
}

// SAFETY: a `CUstream` is an opaque handle the driver accepts from any thread on which
// its context is current; `scope` binds the context before it uses the handle. Work
// issued to one stream from several threads is still executed in a single order, and
// every scope synchronises the whole stream before it returns, so no thread can see its
// host borrows released while its own work is pending.
unsafe impl Send for Stream {}
// SAFETY: `&Stream` only hands out the handle to `scope` (see `Send` above).
unsafe impl Sync for Stream {}

impl Stream {
    pub(crate) fn new(device: &Device) -> Result<Self> {
        let _bound = device.inner.bind()?;
        let raw = result::stream::create(result::stream::StreamKind::NonBlocking)
            .call("cuStreamCreate")?;
        Ok(Stream {
            raw,
            device: device.clone(),
        })
    }

    /// The device this stream belongs to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// `Ok(true)` when all work enqueued on this stream so far has completed, without
    /// blocking (`cuStreamQuery`). Useful to observe overlap: another stream's scope can
    /// finish while this one is still busy.
    pub fn is_idle(&self) -> Result<bool> {
        let _bound = self.device.inner.bind()?;
        // SAFETY: `self.raw` is a live stream (owned by `self`) of the context just made
        // current; a query only reads its state.
        match unsafe { sys::cuStreamQuery(self.raw) }.result() {
            Ok(()) => Ok(true),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            Err(e) => Err(Error::driver("cuStreamQuery", e)),
        }
    }

    /// Blocks until all work enqueued on this stream so far has completed, with the
    /// stream's own context bound for the call (whatever context the thread had).
    pub(crate) fn synchronize(&self) -> Result<()> {
        let _bound = self.device.inner.bind()?;
        // SAFETY: `self.raw` is a live stream (owned by `self`) whose context is bound.
        unsafe { result::stream::synchronize(self.raw) }.call("cuStreamSynchronize")
    }

    /// [`synchronize`](Self::synchronize) before host borrows that work on this stream
    /// may use are released: `Ok` when the work has completed; `Err` only for a sticky
    /// error, which proves the context runs no more work (see
    /// [`STICKY`](crate::error::STICKY)); any other failure (binding the context
    /// included) proves nothing about DMA still running, so the process aborts, naming
    /// `what`.
    pub(crate) fn synchronize_before_release(&self, what: &str) -> Result<()> {
        match self.synchronize() {
            Ok(()) => Ok(()),
            Err(e) if e.is_sticky() => Err(e),
            Err(e) => abort_unreleasable(what, &e),
        }
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("device", &self.device.inner.ordinal)
            .field("raw", &self.raw)
            .finish()
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _bound = self.device.inner.bind();
        // SAFETY: `raw` was created in `Stream::new` and is destroyed once, here. No scope
        // can be open on it (a scope borrows the stream), and the driver completes queued
        // work, stream-ordered frees included, before releasing the stream.
        let _ = unsafe { result::stream::destroy(self.raw) };
    }
}
