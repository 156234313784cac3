//! [`Device`]: one GPU, its primary CUDA context, and memory made outside scopes.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::{result, sys};

use crate::driver::context::{Bound, PrimaryContext};
use crate::error::{DriverResultExt, Error, Result};
use crate::kernel::ModuleCache;
use crate::launch::DeviceLimits;
use crate::memory_pool::MemoryPool;
use crate::pinned_pool::PinnedPool;
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
    /// The retained primary context (released last, when this value drops).
    pub(crate) context: PrimaryContext,
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
    /// Page-locked host blocks for `PinnedBuffer`s and staged copies.
    pub(crate) pinned: PinnedPool,
    /// State other crates keep per device (see `interop::device_extension`), dropped
    /// when the device is, with its context bound, before the context is released.
    pub(crate) extensions: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

// SAFETY: a `CUstream` and a `CUmemoryPool` are opaque driver handles; the driver API is
// thread-safe and accepts them from any thread, and every method that needs the
// device's context current binds it first (`DeviceInner::bind`). The stream is only
// destroyed in `Drop`, when no other reference to it exists; the default memory pool is
// never destroyed. The other fields are `Send` themselves.
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
        let context = PrimaryContext::retain(cu_device)?;
        let bound = context.bind()?;
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
        drop(bound);
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Ok(Device {
            inner: Arc::new(DeviceInner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                ordinal,
                cu_device,
                context,
                housekeeping,
                pool,
                compute_capability,
                limits,
                modules: ModuleCache::default(),
                pinned: PinnedPool::new(),
                extensions: Mutex::new(HashMap::new()),
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
        let _bound = self.inner.bind()?;
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
    /// Makes this device's context current on the calling thread until the guard drops,
    /// and then gives the thread its previous context back (see
    /// [`driver::context`](crate::driver::context)).
    #[inline]
    pub(crate) fn bind(&self) -> Result<Bound<'_>> {
        self.context.bind()
    }

    /// The device's context handle.
    #[inline(always)]
    pub(crate) fn ctx(&self) -> sys::CUcontext {
        self.context.raw()
    }

    /// Blocks until the housekeeping stream is idle.
    pub(crate) fn sync_housekeeping(&self) -> Result<()> {
        let _bound = self.bind()?;
        // SAFETY: `housekeeping` was created in `Device::new` and is destroyed only in
        // `Drop`, which cannot run while `self` is borrowed; its context is bound.
        unsafe { result::stream::synchronize(self.housekeeping) }.call("cuStreamSynchronize")
    }

    /// [`sync_housekeeping`](Self::sync_housekeeping) before host memory that a copy on
    /// the housekeeping stream uses is released: a failure is returned only when it is
    /// sticky (the context has stopped), any other aborts the process, as
    /// [`Stream::synchronize_before_release`](crate::Stream) does for scopes.
    pub(crate) fn sync_housekeeping_before_release(&self, what: &str) -> Result<()> {
        match self.sync_housekeeping() {
            Ok(()) => Ok(()),
            Err(e) if e.is_sticky() => Err(e),
            Err(e) => crate::scope::abort_unreleasable(what, &e),
        }
    }

    /// The extension of type `T`, made by `init` the first time it is asked for.
    pub(crate) fn extension<T: Any + Send + Sync>(&self, init: impl FnOnce() -> T) -> Arc<T> {
        let mut map = self
            .extensions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(existing) = map.get(&TypeId::of::<T>()) {
            // Always `Ok`: the map is keyed by the value's own `TypeId`.
            if let Ok(extension) = Arc::clone(existing).downcast::<T>() {
                return extension;
            }
        }
        let extension = Arc::new(init());
        map.insert(TypeId::of::<T>(), extension.clone());
        extension
    }
}

impl Drop for DeviceInner {
    /// The one place where a device's driver objects go, and where calls that may wait
    /// for the whole device are allowed: the user chose this point by dropping the last
    /// handle of the device (DESIGN: no hidden device-wide synchronisation).
    fn drop(&mut self) {
        // Errors cannot be reported from `drop`; failing here only leaks driver objects.
        let bound = self.bind();
        // Other crates' per-device state first: it may hold library handles of this
        // context (cuBLAS), whose destruction needs the context bound.
        let extensions = std::mem::take(
            &mut *self
                .extensions
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        drop(extensions);
        self.modules.unload_all();
        // No buffer holds a block (each holds the device) and no scope is open (each
        // borrows a stream, which holds the device): free the cached blocks while the
        // context is still alive.
        self.pinned.release_cached(true, 0);
        // SAFETY: the last reference to the stream is going away; the driver finishes
        // any queued work before it releases the stream's resources.
        let _ = unsafe { result::stream::destroy(self.housekeeping) };
        // Hand this handle's cached memory back; other handles of the device only lose
        // cached (unused) memory, which the pool maps again when they need it.
        let _ = self.pool.trim_to(0);
        // The context is released after this body, when the `context` field drops; give
        // the thread its previous context back first, and leave no thread that had none
        // with a context that may be destroyed now.
        if let Ok(bound) = bound {
            bound.unbind_if_set();
        }
    }
}
