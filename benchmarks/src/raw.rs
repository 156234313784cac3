//! Owners for the raw baselines' driver objects (streams, events, modules, memory), so
//! that setup and teardown cannot leak or panic. The measured loops themselves call
//! `cudarc::driver::result` directly, never through these wrappers.
#![allow(unsafe_code)]

use std::ffi::{c_void, CString};

use cudarc::driver::{result, sys};

use crate::error::{Context, Error, Result};

/// The context the library's `Device` opened (the device's primary context), for
/// binding on threads the raw baseline starts.
#[derive(Debug, Clone, Copy)]
pub struct RawContext(pub sys::CUcontext);

// SAFETY: a `CUcontext` is an opaque handle the driver accepts from any thread; the
// primary context it names is kept alive by the benchmark's `Device` for the whole run.
unsafe impl Send for RawContext {}
// SAFETY: see `Send`; the handle is only read.
unsafe impl Sync for RawContext {}

impl RawContext {
    /// The context current on this thread (the one `stream_core::Device::new` bound).
    pub fn current() -> Result<Self> {
        match result::ctx::get_current().context("cuCtxGetCurrent")? {
            Some(ctx) => Ok(RawContext(ctx)),
            None => Err(Error::msg("no CUDA context is current on the main thread")),
        }
    }

    /// Makes the context current on the calling thread.
    pub fn bind(&self) -> Result<()> {
        // SAFETY: the primary context is retained by the benchmark's `Device` for the
        // whole run.
        unsafe { result::ctx::set_current(self.0) }.context("cuCtxSetCurrent")
    }
}

/// The driver's version, e.g. `13.0` for 13000.
pub fn driver_version() -> Result<String> {
    let mut v: std::ffi::c_int = 0;
    // SAFETY: `v` is a valid out-pointer; the driver is loaded (a `Device` was opened).
    unsafe { sys::cuDriverGetVersion(&mut v) }
        .result()
        .context("cuDriverGetVersion")?;
    Ok(format!("{}.{} ({v})", v / 1000, (v % 1000) / 10))
}

/// A non-blocking stream, destroyed on drop.
pub struct RawStream(pub sys::CUstream);

impl RawStream {
    /// A new non-blocking stream in the current context.
    pub fn new() -> Result<Self> {
        Ok(RawStream(
            result::stream::create(result::stream::StreamKind::NonBlocking)
                .context("cuStreamCreate")?,
        ))
    }

    /// A new non-blocking stream in the current context with `priority` (CUDA's
    /// numbers: lower is more urgent; the driver clamps it to the device's range).
    pub fn with_priority(priority: i32) -> Result<Self> {
        let mut stream = std::ptr::null_mut();
        let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
        // SAFETY: `stream` is a live out-pointer the driver writes the new stream to; the
        // context is current (the caller bound it).
        unsafe { sys::cuStreamCreateWithPriority(&mut stream, flags, priority) }
            .result()
            .context("cuStreamCreateWithPriority")?;
        Ok(RawStream(stream))
    }

    /// Blocks until the stream is idle.
    pub fn sync(&self) -> Result<()> {
        // SAFETY: the stream is alive (owned by `self`).
        unsafe { result::stream::synchronize(self.0) }.context("cuStreamSynchronize")
    }
}

// SAFETY: a `CUstream` is an opaque handle the driver accepts from any thread on which
// its context is current; threads of the raw baseline bind it first.
unsafe impl Send for RawStream {}
// SAFETY: see `Send`; the handle is only read.
unsafe impl Sync for RawStream {}

impl Drop for RawStream {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once; the driver completes queued work
        // before it releases the stream.
        let _ = unsafe { result::stream::destroy(self.0) };
    }
}

/// An event without timing, for ordering streams; destroyed on drop.
pub struct RawEvent(pub sys::CUevent);

impl RawEvent {
    /// A new event in the current context.
    pub fn new() -> Result<Self> {
        Self::with_flags(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
    }

    /// A new event in the current context with `flags` (`CUevent_flags` bits).
    pub fn with_flags(flags: u32) -> Result<Self> {
        let mut event = std::ptr::null_mut();
        // SAFETY: `event` is a live out-pointer the driver writes the new event to; the
        // context is current (the benchmark's `Device` bound it, or the caller's thread).
        unsafe { sys::cuEventCreate(&mut event, flags) }
            .result()
            .context("cuEventCreate")?;
        Ok(RawEvent(event))
    }
}

impl Drop for RawEvent {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once, here.
        let _ = unsafe { result::event::destroy(self.0) };
    }
}

/// `cuMemAlloc` device memory, freed with `cuMemFree` on drop (after the caller has
/// synchronised every stream that used it).
pub struct RawDeviceMem {
    /// The device address.
    pub ptr: sys::CUdeviceptr,
    /// Size in bytes.
    pub bytes: usize,
}

impl RawDeviceMem {
    /// `bytes` of device memory in the current context.
    pub fn new(bytes: usize) -> Result<Self> {
        // SAFETY: plain allocation in the current context; the result is checked.
        let ptr = unsafe { result::malloc_sync(bytes) }.context("cuMemAlloc")?;
        Ok(RawDeviceMem { ptr, bytes })
    }

    /// A copy of `host` in new device memory of the current context (`cuMemcpyHtoD`).
    pub fn upload<T: Copy>(host: &[T]) -> Result<Self> {
        let m = RawDeviceMem::new(std::mem::size_of_val(host))?;
        // SAFETY: `m` holds as many bytes as `host`, a live slice of plain values.
        unsafe { result::memcpy_htod_sync(m.ptr, host) }.context("cuMemcpyHtoD")?;
        Ok(m)
    }
}

// SAFETY: a device address is plain data; users of it order their streams themselves.
unsafe impl Send for RawDeviceMem {}
// SAFETY: see `Send`.
unsafe impl Sync for RawDeviceMem {}

impl Drop for RawDeviceMem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once; every user synchronised its stream
        // before dropping (the benchmark's raw loops end with a stream synchronisation).
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}

/// `bytes` of device memory from the current device's default stream-ordered pool
/// (`cuMemAllocAsync` on `stream`, as the library's `DeviceBuffer`s and `DeviceVec`s
/// are), freed on drop on the same stream, which is then synchronised.
pub struct RawPoolMem {
    /// The device address.
    pub ptr: sys::CUdeviceptr,
    stream: sys::CUstream,
}

impl RawPoolMem {
    /// Allocates on `stream` (of the current context) and waits for the allocation.
    pub fn new(bytes: usize, stream: &RawStream) -> Result<Self> {
        // SAFETY: a live stream of the current context; the result is checked.
        let ptr = unsafe { result::malloc_async(stream.0, bytes) }.context("cuMemAllocAsync")?;
        stream.sync()?;
        Ok(RawPoolMem {
            ptr,
            stream: stream.0,
        })
    }
}

// SAFETY: see `RawDeviceMem`.
unsafe impl Send for RawPoolMem {}
// SAFETY: see `Send`.
unsafe impl Sync for RawPoolMem {}

impl Drop for RawPoolMem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` on this stream (alive as long as the benchmark's
        // ranks, which free their buffers before their streams), freed once, after every
        // use (the raw loops end with a stream synchronisation).
        let _ = unsafe { result::free_async(self.ptr, self.stream) };
        // SAFETY: as above.
        let _ = unsafe { result::stream::synchronize(self.stream) };
    }
}

/// `cuMemHostAlloc` page-locked host memory of `f32`s (portable, not write-combined:
/// the same flags as `stream_core::Device::alloc_pinned`), zeroed, freed on drop.
pub struct RawPinned {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: the allocation is owned exclusively like a `Box<[f32]>` and is portable
// (usable from any thread).
unsafe impl Send for RawPinned {}
// SAFETY: `&RawPinned` gives only `&[f32]`.
unsafe impl Sync for RawPinned {}

impl RawPinned {
    /// `len` zeroed `f32`s of page-locked memory.
    pub fn new(len: usize) -> Result<Self> {
        let bytes = len
            .checked_mul(4)
            .ok_or_else(|| Error::msg("pinned allocation size overflows"))?;
        if bytes == 0 {
            return Err(Error::msg(
                "a pinned allocation of zero bytes was asked for",
            ));
        }
        // SAFETY: plain allocation in the current context; the result is checked and
        // zeroed below before anyone reads it.
        let raw = unsafe { result::malloc_host(bytes, sys::CU_MEMHOSTALLOC_PORTABLE) }
            .context("cuMemHostAlloc")?;
        let ptr = raw.cast::<f32>();
        if ptr.is_null() {
            return Err(Error::msg("cuMemHostAlloc returned a null pointer"));
        }
        // SAFETY: `ptr` points to `bytes` writable, page-aligned bytes just allocated;
        // zero bytes are a valid `f32`.
        unsafe { ptr.write_bytes(0, len) };
        Ok(RawPinned { ptr, len })
    }

    /// The memory as a slice.
    pub fn as_slice(&self) -> &[f32] {
        // SAFETY: `ptr` is valid for `len` initialised `f32`s while `self` lives; the
        // raw baseline synchronises its streams before it reads what DMA wrote.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The memory as a mutable slice.
    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        // SAFETY: as `as_slice`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for RawPinned {
    fn drop(&mut self) {
        // SAFETY: allocated by `cuMemHostAlloc`, freed once; no copy is pending on it
        // (the raw loops synchronise before they return).
        let _ = unsafe { result::free_host(self.ptr.cast::<c_void>()) };
    }
}

/// A module loaded from a CUBIN image, unloaded on drop.
pub struct RawModule(sys::CUmodule);

impl RawModule {
    /// Loads `cubin` into the current context.
    pub fn load(cubin: &[u8]) -> Result<Self> {
        // SAFETY: `cubin` is an image produced by NVRTC for this device, alive for the
        // call; the context is current.
        let module = unsafe { result::module::load_data(cubin.as_ptr().cast()) }
            .context("cuModuleLoadData")?;
        Ok(RawModule(module))
    }

    /// The kernel `name` in this module. The function is valid while `self` lives.
    pub fn function(&self, name: &str) -> Result<sys::CUfunction> {
        let c_name =
            CString::new(name).map_err(|_| Error::msg("kernel name contains a NUL byte"))?;
        // SAFETY: the module is loaded (owned by `self`).
        unsafe { result::module::get_function(self.0, c_name) }
            .context(&format!("cuModuleGetFunction({name})"))
    }
}

impl Drop for RawModule {
    fn drop(&mut self) {
        // SAFETY: loaded in `load`, unloaded once; no launch of its functions is pending
        // (the raw loops synchronise before they return).
        let _ = unsafe { result::module::unload(self.0) };
    }
}

/// A `CUfunction` that may be used from the raw baseline's worker threads.
#[derive(Debug, Clone, Copy)]
pub struct RawFunction(pub sys::CUfunction);

// SAFETY: a `CUfunction` is an opaque handle valid on any thread where its context is
// current; the worker threads bind the context first.
unsafe impl Send for RawFunction {}
// SAFETY: see `Send`; the handle is only read.
unsafe impl Sync for RawFunction {}

/// Records `event` on `from` and makes `to` wait for it, on the GPU: `to`'s later work
/// runs after `from`'s work so far. The host does not block.
pub fn order(event: sys::CUevent, from: sys::CUstream, to: sys::CUstream) -> Result<()> {
    // SAFETY: callers pass an event and streams of the current context that they keep
    // alive for the call.
    unsafe { result::event::record(event, from) }.context("cuEventRecord")?;
    // SAFETY: as above; the wait captures the event's state now.
    unsafe { result::stream::wait_event(to, event, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }
        .context("cuStreamWaitEvent")
}

/// The pointer a kernel argument array holds for `value`.
#[inline(always)]
pub fn arg<T>(value: &T) -> *mut c_void {
    (value as *const T).cast_mut().cast()
}

/// Begins a capture, in relaxed mode (as the library's), on `stream` (of the current
/// context), on which only the capturer issues work until
/// [`RawCapturedGraph::end_capture`].
pub fn begin_capture(stream: &RawStream) -> Result<()> {
    // SAFETY: a live stream of the current context, captured until `end_capture`.
    unsafe {
        result::stream::begin_capture(
            stream.0,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        )
    }
    .context("cuStreamBeginCapture")
}

/// A CUDA graph a raw capture ended with, not instantiated yet: destroyed on drop.
pub struct RawCapturedGraph(pub sys::CUgraph);

impl RawCapturedGraph {
    /// Ends the capture [`begin_capture`] began on `stream` (its context current).
    pub fn end_capture(stream: &RawStream) -> Result<Self> {
        // SAFETY: ends a capture begun on the same stream (the driver refuses a stream
        // that is not capturing).
        let graph =
            unsafe { result::stream::end_capture(stream.0) }.context("cuStreamEndCapture")?;
        if graph.is_null() {
            return Err(Error::msg("raw: the capture was invalidated"));
        }
        Ok(RawCapturedGraph(graph))
    }

    /// Instantiates the graph (`AUTO_FREE_ON_LAUNCH`, as the library's graphs are) in the
    /// current context, the one it was captured in.
    pub fn instantiate(self) -> Result<RawGraph> {
        let flags = sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH;
        // SAFETY: `self.0` is the live graph a capture ended with.
        let exec = unsafe { result::graph::instantiate(self.0, flags) }
            .context("cuGraphInstantiateWithFlags")?;
        Ok(RawGraph { exec, _graph: self })
    }
}

impl Drop for RawCapturedGraph {
    fn drop(&mut self) {
        // SAFETY: made by `end_capture`, destroyed once, here, after its instance (a
        // `RawGraph` drops its instance before this).
        let _ = unsafe { result::graph::destroy(self.0) };
    }
}

/// A CUDA graph captured with raw calls and instantiated, owned: its instance and graph
/// are destroyed on drop.
pub struct RawGraph {
    /// The instance, for `cuGraphLaunch`.
    pub exec: sys::CUgraphExec,
    /// Kept to be destroyed after the instance (fields drop after `drop`).
    _graph: RawCapturedGraph,
}

impl RawGraph {
    /// Captures, in relaxed mode, what `record` issues on `stream` (of the current
    /// context; nothing else may be issued on it meanwhile), and instantiates it. The
    /// memory the recorded work uses must outlive the graph.
    pub fn capture(
        stream: &RawStream,
        record: impl FnOnce(sys::CUstream) -> Result<()>,
    ) -> Result<Self> {
        begin_capture(stream)?;
        let recorded = record(stream.0);
        let graph = RawCapturedGraph::end_capture(stream)?;
        recorded?;
        graph.instantiate()
    }
}

impl Drop for RawGraph {
    fn drop(&mut self) {
        // SAFETY: made by `instantiate`, destroyed once, here; its users synchronised
        // every launch before dropping it.
        let _ = unsafe { result::graph::exec_destroy(self.exec) };
    }
}
