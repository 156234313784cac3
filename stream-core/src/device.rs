//! [`Device`]: one GPU, its primary CUDA context, and memory made outside scopes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cudarc::driver::{result, sys};

use crate::error::{DriverResultExt, Error, Result};
use crate::kernel::ModuleCache;
use crate::launch::DeviceLimits;
use crate::memory_pool::MemoryPool;
use crate::stream::Stream;

/// One CUDA device and its primary context. Cheap to clone (reference counted), `Send`
/// and `Sync`.
///
/// ```no_run
/// # fn main() -> stream_core::Result<()> {
/// let dev = stream_core::Device::new(0)?;
/// println!("{} with {} MiB", dev.name()?, dev.total_memory()? >> 20);
/// let stream = dev.new_stream()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

/// What a [`Device`] owns: the retained primary context, a private stream used by the
/// blocking `DeviceVec` helpers, and the handle of the device's memory pool.
pub(crate) struct DeviceInner {
    /// Unique per `Device::new` call, never reused: kernel caches key on it, so a
    /// function loaded for a device that is gone can never be launched.
    pub(crate) id: u64,
    pub(crate) ordinal: usize,
    pub(crate) cu_device: sys::CUdevice,
    pub(crate) ctx: sys::CUcontext,
    /// A non-blocking stream for `upload_vec`/`alloc_vec`/`to_host_vec`, which block
    /// on it (and only on it) before they return.
    pub(crate) housekeeping: sys::CUstream,
    /// The device's default memory pool, which every device allocation comes from.
    pub(crate) pool: MemoryPool,
    pub(crate) compute_capability: (i32, i32),
    /// Launch limits, read once so that validating a launch costs no driver call.
    pub(crate) limits: DeviceLimits,
    /// Kernel modules loaded on this device.
    pub(crate) modules: ModuleCache,
}

// SAFETY: a `CUcontext`, a `CUstream` and a `CUmemoryPool` are opaque driver handles;
// the driver API is thread-safe and accepts them from any thread on which the context is
// current, and every method that uses them binds the context first
// (`DeviceInner::bind`). The context and stream are only destroyed in `Drop`, when no
// other reference to them exists; the default memory pool is never destroyed.
unsafe impl Send for DeviceInner {}
// SAFETY: shared access only reads the handles (see `Send` above); all mutation happens
// inside the thread-safe driver.
unsafe impl Sync for DeviceInner {}

impl Device {
    /// Opens device `ordinal` (0 for the first GPU) and retains its primary context.
    ///
    /// Device memory comes from the device's default stream-ordered memory pool, whose
    /// release threshold this sets to `u64::MAX` so that freed memory stays cached for
    /// reuse instead of going back to the driver at every scope's end (see
    /// [`set_memory_release_threshold`](Self::set_memory_release_threshold)).
    ///
    /// Returns [`Error::NoDriver`] when the CUDA driver cannot be loaded and
    /// [`Error::NoDevice`] when there is no such device, never a panic.
    pub fn new(ordinal: usize) -> Result<Self> {
        let count = Self::count()?;
        if ordinal >= count {
            return Err(Error::NoDevice { ordinal, count });
        }
        let cu_device = result::device::get(ordinal as i32).call("cuDeviceGet")?;
        // SAFETY: `cu_device` was returned by `cuDeviceGet` just above.
        let ctx =
            unsafe { result::primary_ctx::retain(cu_device) }.call("cuDevicePrimaryCtxRetain")?;
        let retained = RetainedContext { cu_device };
        // SAFETY: `ctx` is the primary context retained just above; it stays alive until
        // `DeviceInner` (which takes over `retained`) releases it.
        unsafe { result::ctx::set_current(ctx) }.call("cuCtxSetCurrent")?;
        let attribute = |attr| {
            // SAFETY: `cu_device` came from `cuDeviceGet`; `attr` is a valid enum value.
            unsafe { result::device::get_attribute(cu_device, attr) }.call("cuDeviceGetAttribute")
        };
        use sys::CUdevice_attribute::*;
        let compute_capability = (
            attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        let limits = DeviceLimits::query(attribute)?;
        let pool = MemoryPool::default_of(cu_device)?;
        let housekeeping = result::stream::create(result::stream::StreamKind::NonBlocking)
            .call("cuStreamCreate")?;
        std::mem::forget(retained);
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Ok(Device {
            inner: Arc::new(DeviceInner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                ordinal,
                cu_device,
                ctx,
                housekeeping,
                pool,
                compute_capability,
                limits,
                modules: ModuleCache::default(),
            }),
        })
    }

    /// How many CUDA devices the driver reports: `Ok(0)` when the driver loads but sees
    /// no GPU, [`Error::NoDriver`] when there is no driver at all.
    pub fn count() -> Result<usize> {
        // SAFETY: `is_culib_present` only tries to `dlopen` the driver library by its
        // well-known names and closes it again; it runs no library code besides the
        // loader's. Checking first is what turns "no driver" into an `Err` instead of
        // the panic cudarc's lazy loader would raise.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::NoDriver);
        }
        match result::init() {
            Ok(()) => {}
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE => return Ok(0),
            Err(e) => return Err(Error::driver("cuInit", e)),
        }
        let count = result::device::get_count().call("cuDeviceGetCount")?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// The ordinal this device was opened with.
    pub fn ordinal(&self) -> usize {
        self.inner.ordinal
    }

    /// The device's marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    pub fn name(&self) -> Result<String> {
        result::device::get_name(self.inner.cu_device).call("cuDeviceGetName")
    }

    /// Total device memory in bytes.
    pub fn total_memory(&self) -> Result<usize> {
        // SAFETY: `cu_device` came from `cuDeviceGet` in `Device::new`.
        unsafe { result::device::total_mem(self.inner.cu_device) }.call("cuDeviceTotalMem")
    }

    /// `(free, total)` device memory in bytes, as the driver reports it now. Memory the
    /// pool keeps cached for reuse counts as not free (see
    /// [`memory_stats`](Self::memory_stats) and [`trim_memory`](Self::trim_memory)).
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        self.inner.bind()?;
        result::mem_get_info().call("cuMemGetInfo")
    }

    /// `(major, minor)` compute capability, e.g. `(9, 0)` for Hopper.
    pub fn compute_capability(&self) -> (i32, i32) {
        self.inner.compute_capability
    }

    /// The most threads a block may have on this device.
    pub fn max_threads_per_block(&self) -> u32 {
        self.inner.limits.max_threads_per_block
    }

    /// The most dynamic shared memory a block may ask for on this device (opt-in limit).
    pub fn max_shared_memory_per_block(&self) -> u32 {
        self.inner.limits.max_shared_per_block_optin
    }

    /// Creates a new non-blocking stream on this device (it never synchronises
    /// implicitly with the legacy default stream).
    pub fn new_stream(&self) -> Result<Stream> {
        Stream::new(self)
    }

    /// `true` when both handles refer to the same device.
    pub(crate) fn same_device(&self, other: &Device) -> bool {
        self.inner.cu_device == other.inner.cu_device
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("ordinal", &self.inner.ordinal)
            .finish()
    }
}

impl DeviceInner {
    /// Makes this device's context current on the calling thread, if it is not already.
    #[inline]
    pub(crate) fn bind(&self) -> Result<()> {
        let current = result::ctx::get_current().call("cuCtxGetCurrent")?;
        if current != Some(self.ctx) {
            // SAFETY: `self.ctx` is the primary context this `DeviceInner` retains, so it
            // is alive for as long as `self` is.
            unsafe { result::ctx::set_current(self.ctx) }.call("cuCtxSetCurrent")?;
        }
        Ok(())
    }

    /// Blocks until the housekeeping stream is idle.
    pub(crate) fn sync_housekeeping(&self) -> Result<()> {
        // SAFETY: `housekeeping` was created in `Device::new` and is destroyed only in
        // `Drop`, which cannot run while `self` is borrowed.
        unsafe { result::stream::synchronize(self.housekeeping) }.call("cuStreamSynchronize")
    }
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        // Errors cannot be reported from `drop`; failing here only leaks driver objects.
        let _ = self.bind();
        self.modules.unload_all();
        // SAFETY: the last reference to the stream is going away; the driver finishes
        // any queued work before it releases the stream's resources.
        let _ = unsafe { result::stream::destroy(self.housekeeping) };
        // Hand this handle's cached memory back; other handles of the device only lose
        // cached (unused) memory, which the pool maps again when they need it.
        let _ = self.pool.trim_to(0);
        drop(RetainedContext {
            cu_device: self.cu_device,
        });
    }
}

/// Releases a retained primary context when dropped (also on the error paths of
/// `Device::new`).
struct RetainedContext {
    cu_device: sys::CUdevice,
}

impl Drop for RetainedContext {
    fn drop(&mut self) {
        // SAFETY: constructed only after a successful `cuDevicePrimaryCtxRetain` on this
        // device, and released exactly once (here).
        let _ = unsafe { result::primary_ctx::release(self.cu_device) };
    }
}
