//! The device's stream-ordered memory pool: where every device allocation comes from,
//! how much freed memory it keeps cached, its statistics, and the one out-of-memory
//! recovery that every device allocation shares.
//!
//! [`DeviceBuffer`](crate::DeviceBuffer)s and [`DeviceVec`](crate::DeviceVec)s are
//! allocated with `cuMemAllocFromPoolAsync` from the device's *default* pool
//! (`cuDeviceGetDefaultMemPool`), named explicitly so that the pool this module
//! configures and measures is the one allocations come from, even if other code in the
//! process makes another pool the device's current one. Frees (`cuMemFreeAsync`) return
//! memory to that pool; whether the pool keeps it is its *release threshold*.
//!
//! # Why the release threshold is `u64::MAX`
//!
//! The driver's default threshold is 0: at every stream, event or context
//! synchronisation the pool hands all its unused memory back to the driver. Every
//! [`scope`](crate::scope) ends with a stream synchronisation, so with the default every
//! scope's buffers would go back to the driver at its end and the next scope would map
//! fresh physical memory again (a slow driver path), turning a loop of short scopes
//! into a loop of `cudaMalloc`/`cudaFree`. [`Device::new`] therefore sets the threshold
//! to `u64::MAX`: freed memory stays cached in the pool and is reused by later
//! allocations (on the stream that freed it at once, on other streams once the free has
//! completed), and the memory a loop of scopes reserves stays flat. The cost
//! is that cached memory is not available to other processes or to non-pool allocations
//! (`cuMemAlloc`, library workspaces); [`Device::trim_memory`] returns it, and an
//! allocation that runs out of memory returns it before giving up (see
//! [`Scope::alloc`](crate::Scope::alloc)).

use std::cell::RefCell;
use std::ffi::c_void;

use cudarc::driver::{result, sys};

use crate::device::{Device, DeviceInner};
use crate::error::{is_out_of_memory, DriverResultExt, Error, Result};

/// The release threshold [`Device::new`] sets: never hand cached memory back on a
/// synchronisation (see the [module docs](self)).
pub(crate) const KEEP_ALL_CACHED: u64 = u64::MAX;

/// A device's default memory pool (`cuDeviceGetDefaultMemPool`). The driver owns it for
/// the life of the process; it is never destroyed here.
#[derive(Clone, Copy)]
pub(crate) struct MemoryPool(sys::CUmemoryPool);

/// Device memory statistics of one GPU's memory pool, like `torch.cuda.memory_stats`:
/// what allocations hold, what the pool keeps cached for reuse, and the peaks since the
/// last [`Device::reset_peak_memory_stats`]. All values are bytes.
///
/// The pool is the device's, shared by every [`Device`] handle of that GPU in this
/// process (and by other code in the process that allocates from the default pool with
/// `cuMemAllocAsync`); memory of other processes is not counted. Cached memory is
/// reserved from the driver, so [`Device::memory_info`] reports it as not free.
///
/// ```no_run
/// use stream_core::{scope, Device, Error};
/// # fn main() -> stream_core::Result<()> {
/// let dev = Device::new(0)?;
/// let stream = dev.new_stream()?;
/// dev.reset_peak_memory_stats()?;
/// scope(&stream, |s| {
///     let _x = s.alloc::<f32>(1 << 20)?;  // 4 MiB
///     Ok::<_, Error>(())
/// })?;
/// let stats = dev.memory_stats()?;
/// assert!(stats.peak_in_use_bytes >= 4 << 20);
/// println!(
///     "{} MiB in use, {} MiB cached for reuse, {} MiB reserved",
///     stats.in_use_bytes >> 20,
///     stats.cached_bytes >> 20,
///     stats.reserved_bytes >> 20
/// );
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct DeviceMemoryStats {
    /// Bytes held by live allocations ([`DeviceBuffer`](crate::DeviceBuffer)s,
    /// [`DeviceVec`](crate::DeviceVec)s, and frees not yet processed by the pool)
    /// (`CU_MEMPOOL_ATTR_USED_MEM_CURRENT`).
    pub in_use_bytes: usize,
    /// Bytes the pool holds for reuse but no allocation uses: `reserved_bytes -
    /// in_use_bytes`. [`Device::trim_memory`] hands them back to the driver.
    pub cached_bytes: usize,
    /// Bytes of device memory the pool has taken from the driver, in use or cached
    /// (`CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`).
    pub reserved_bytes: usize,
    /// The most bytes in use at once since the last reset
    /// (`CU_MEMPOOL_ATTR_USED_MEM_HIGH`, and never less than `in_use_bytes`).
    pub peak_in_use_bytes: usize,
    /// The most bytes reserved at once since the last reset
    /// (`CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH`, and never less than `reserved_bytes`).
    pub peak_reserved_bytes: usize,
}

impl MemoryPool {
    /// The default pool of `cu_device`, configured to keep freed memory cached
    /// ([`KEEP_ALL_CACHED`]) and never to make one stream wait for another
    /// ([`forbid_hidden_stream_dependencies`](Self::forbid_hidden_stream_dependencies)).
    /// `cu_device` must come from `cuDeviceGet`, with a context of it current.
    pub(crate) fn default_of(cu_device: sys::CUdevice) -> Result<Self> {
        // SAFETY: the caller passes a device handle returned by `cuDeviceGet`.
        let raw = unsafe { result::device::get_default_mem_pool(cu_device) }
            .call("cuDeviceGetDefaultMemPool")?;
        let pool = MemoryPool(raw);
        pool.forbid_hidden_stream_dependencies()?;
        pool.set_release_threshold(KEEP_ALL_CACHED)?;
        Ok(pool)
    }

    /// Stops `cuMemAllocAsync` from making one stream wait for another.
    ///
    /// By default the driver may hand an allocation on stream B memory whose free was
    /// queued on stream A, after inserting a wait of B on A: a hidden cross-stream
    /// synchronisation (measured: a scope on B waited a whole second for a kernel on A).
    /// Every free in this library is stream-ordered on the stream that used the memory
    /// last, so the pool may still reuse memory on that stream, or once its free has
    /// completed, but never by making an unrelated stream wait. (Out of memory, the one
    /// recovery in [`Device::alloc_async`] waits for this thread's streams on the host
    /// instead, so that such frees complete.)
    fn forbid_hidden_stream_dependencies(self) -> Result<()> {
        let mut disabled: i32 = 0;
        // SAFETY: `self.0` is the device's default pool, alive as long as the device;
        // this attribute takes an `int` (CUDA driver API, `CUmemPool_attribute`), read
        // from a live `i32`.
        let written = unsafe {
            result::mem_pool::set_attribute(
                self.0,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
                (&raw mut disabled).cast::<c_void>(),
            )
        };
        written.call("cuMemPoolSetAttribute")
    }

    fn get(self, attr: U64Attribute) -> Result<u64> {
        let mut value: u64 = 0;
        // SAFETY: `self.0` is a device's default pool, which the driver keeps alive. Every
        // `U64Attribute` is a `cuuint64_t` attribute, and `value` is a `u64` that lives
        // across the call.
        let read = unsafe {
            result::mem_pool::get_attribute(self.0, attr.raw(), (&raw mut value).cast::<c_void>())
        };
        read.call("cuMemPoolGetAttribute")?;
        Ok(value)
    }

    fn set(self, attr: U64Attribute, mut value: u64) -> Result<()> {
        // SAFETY: as in `get`: a live pool and a `cuuint64_t` attribute, read from a `u64`
        // that lives across the call.
        let written = unsafe {
            result::mem_pool::set_attribute(self.0, attr.raw(), (&raw mut value).cast::<c_void>())
        };
        written.call("cuMemPoolSetAttribute")
    }

    pub(crate) fn set_release_threshold(self, bytes: u64) -> Result<()> {
        self.set(U64Attribute::ReleaseThreshold, bytes)
    }

    fn release_threshold(self) -> Result<u64> {
        self.get(U64Attribute::ReleaseThreshold)
    }

    /// Hands cached memory whose frees have completed back to the driver, keeping at
    /// least `keep_bytes` reserved when the pool holds more than that.
    pub(crate) fn trim_to(self, keep_bytes: usize) -> Result<()> {
        // SAFETY: `self.0` is a device's default pool, kept alive by the driver. Trimming
        // only releases memory no allocation holds (the driver keeps every block backing
        // a live allocation or a free it has not seen complete), so no address in use is
        // unmapped.
        unsafe { result::mem_pool::trim_to(self.0, keep_bytes) }.call("cuMemPoolTrimTo")
    }

    fn stats(self) -> Result<DeviceMemoryStats> {
        let get = |attr| {
            self.get(attr)
                .map(|v| usize::try_from(v).unwrap_or(usize::MAX))
        };
        let in_use_bytes = get(U64Attribute::UsedCurrent)?;
        let reserved_bytes = get(U64Attribute::ReservedCurrent)?;
        // The four reads are not one snapshot (another thread may allocate in between),
        // and a high-water mark just reset may read below the current value: clamp both.
        Ok(DeviceMemoryStats {
            in_use_bytes,
            cached_bytes: reserved_bytes.saturating_sub(in_use_bytes),
            reserved_bytes,
            peak_in_use_bytes: get(U64Attribute::UsedHigh)?.max(in_use_bytes),
            peak_reserved_bytes: get(U64Attribute::ReservedHigh)?.max(reserved_bytes),
        })
    }

    fn reset_peaks(self) -> Result<()> {
        // The driver accepts only zero for the high-water marks: it restarts them.
        self.set(U64Attribute::UsedHigh, 0)?;
        self.set(U64Attribute::ReservedHigh, 0)
    }

    /// One `cuMemAllocFromPoolAsync` of `bytes` on `stream`.
    fn try_alloc(
        self,
        stream: sys::CUstream,
        bytes: usize,
    ) -> std::result::Result<sys::CUdeviceptr, result::DriverError> {
        // SAFETY: `self.0` is the default pool of the stream's device, and the caller of
        // `Device::alloc_async` passes a live stream of that device (the allocation names
        // both, so it does not depend on the current context). The memory is
        // uninitialised; its owner only hands it out for `T: DeviceRepr`, for which any
        // bytes are valid.
        unsafe { result::mem_pool::alloc_async(self.0, bytes, stream) }
    }
}

thread_local! {
    /// The streams of the scopes (forks included) open on this thread, innermost last,
    /// each with its device. Every `Device` handle of one GPU shares that GPU's primary
    /// context and default pool, so the device is the driver's `CUdevice`, not the
    /// handle.
    static OPEN_SCOPES: RefCell<Vec<(sys::CUdevice, sys::CUstream)>> = const { RefCell::new(Vec::new()) };
}

/// Registers a scope's stream, for as long as the scope lives, as one on which this
/// thread may have queued frees: buffers dropped in the scope are freed on its stream,
/// and those frees complete only when the stream's earlier work has run. Out of memory,
/// [`Device::alloc_async`] waits for these streams so that the frees complete and the
/// memory can be reused or released.
///
/// A field of [`Scope`](crate::Scope): a scope lives in the frame of `scope` or `fork`,
/// out of the user's reach, and borrows its stream for longer than it lives, so every
/// registered handle is a live stream.
///
/// Registered on one thread's list, it must be dropped on that thread: the raw stream
/// handle keeps it (and `Scope`) neither `Send` nor `Sync`.
pub(crate) struct OpenScope {
    device: sys::CUdevice,
    stream: sys::CUstream,
}

impl OpenScope {
    pub(crate) fn register(device: &DeviceInner, stream: sys::CUstream) -> Self {
        // Fails only while the thread is being torn down; the scope then just goes
        // unregistered (out of memory, its frees are not waited for).
        let _ = OPEN_SCOPES.try_with(|open| open.borrow_mut().push((device.cu_device, stream)));
        OpenScope {
            device: device.cu_device,
            stream,
        }
    }

    /// The streams an allocation on `allocating` (a stream of `device`) waits for before
    /// it retries: `allocating` itself, the device's housekeeping stream (where dropped
    /// `DeviceVec`s are freed), and the streams of this thread's open scopes on this
    /// device, each once.
    fn pending_free_streams(device: &DeviceInner, allocating: sys::CUstream) -> Vec<sys::CUstream> {
        let mut streams = vec![allocating];
        if device.housekeeping != allocating {
            streams.push(device.housekeeping);
        }
        let _ = OPEN_SCOPES.try_with(|open| {
            for &(cu_device, stream) in open.borrow().iter().rev() {
                if cu_device == device.cu_device && !streams.contains(&stream) {
                    streams.push(stream);
                }
            }
        });
        streams
    }
}

impl Drop for OpenScope {
    fn drop(&mut self) {
        let _ = OPEN_SCOPES.try_with(|open| {
            let mut open = open.borrow_mut();
            // Scopes end innermost first, so this is the last entry; search anyway.
            let entry = (self.device, self.stream);
            if let Some(at) = open.iter().rposition(|&e| e == entry) {
                open.remove(at);
            }
        });
    }
}

/// The pool attributes this module reads or writes: exactly those whose value is a
/// `cuuint64_t`, which is what makes passing a `u64` to the driver sound.
#[derive(Clone, Copy)]
enum U64Attribute {
    /// `CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`.
    ReleaseThreshold,
    /// `CU_MEMPOOL_ATTR_USED_MEM_CURRENT`.
    UsedCurrent,
    /// `CU_MEMPOOL_ATTR_USED_MEM_HIGH` (writable: only zero, which restarts it).
    UsedHigh,
    /// `CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`.
    ReservedCurrent,
    /// `CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH` (writable: only zero, which restarts it).
    ReservedHigh,
}

impl U64Attribute {
    fn raw(self) -> sys::CUmemPool_attribute {
        use sys::CUmemPool_attribute::*;
        match self {
            U64Attribute::ReleaseThreshold => CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            U64Attribute::UsedCurrent => CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
            U64Attribute::UsedHigh => CU_MEMPOOL_ATTR_USED_MEM_HIGH,
            U64Attribute::ReservedCurrent => CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
            U64Attribute::ReservedHigh => CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH,
        }
    }
}

impl Device {
    /// Allocates `bytes` (non-zero) stream-ordered on `stream` from the device's pool.
    /// The one place device memory is allocated, and the one out-of-memory recovery:
    ///
    /// when the driver reports `CUDA_ERROR_OUT_OF_MEMORY`, waits on the host for the
    /// streams on which this thread's frees may still be pending (see
    /// [`OpenScope::pending_free_streams`]), so that the pool sees those frees complete,
    /// trims the pool to zero, and tries once more; if that fails too, returns
    /// [`Error::OutOfMemory`] with the device's free and total memory measured after the
    /// trim. It never waits for the whole device, nor for a stream no scope of this
    /// thread has open (besides the device's own housekeeping stream).
    ///
    /// The caller guarantees that `stream` is a live stream of this device that no graph
    /// capture is recording (a scope refuses capturing streams when it opens; the
    /// housekeeping stream is never captured). Which context is current does not matter
    /// for the allocation itself: it names its pool and stream.
    pub(crate) fn alloc_async(
        &self,
        stream: sys::CUstream,
        bytes: usize,
    ) -> Result<sys::CUdeviceptr> {
        let pool = self.inner.pool;
        match pool.try_alloc(stream, bytes) {
            Ok(ptr) => return Ok(ptr),
            Err(e) if is_out_of_memory(&e) => {}
            Err(e) => return Err(Error::driver("cuMemAllocFromPoolAsync", e)),
        }
        {
            let _bound = self.inner.bind()?;
            for pending in OpenScope::pending_free_streams(&self.inner, stream) {
                // SAFETY: every handle is a live stream of this device: `stream` (the
                // caller's), the housekeeping stream (alive as long as `self`), or the
                // stream of a scope open on this thread, which borrows it for longer
                // than it is registered. The device's context is bound.
                unsafe { result::stream::synchronize(pending) }.call("cuStreamSynchronize")?;
            }
        }
        pool.trim_to(0)?;
        match pool.try_alloc(stream, bytes) {
            Ok(ptr) => Ok(ptr),
            Err(e) if is_out_of_memory(&e) => {
                // A failed allocation can leave the pool holding the memory it mapped
                // while trying (measured on an H200: 142 GiB after a request of twice
                // the card): hand it back, so the error leaves the device as it was.
                pool.trim_to(0)?;
                let (free, total) = self.memory_info().unwrap_or((0, 0));
                Err(Error::OutOfMemory {
                    requested: bytes,
                    free,
                    total,
                })
            }
            Err(e) => Err(Error::driver("cuMemAllocFromPoolAsync", e)),
        }
    }

    /// Sets how many bytes of freed device memory the device's pool keeps cached before
    /// it hands memory back to the driver at a synchronisation
    /// (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`).
    ///
    /// [`Device::new`] sets `u64::MAX`: freed memory is always kept for reuse, so short
    /// scopes in a loop do not map and unmap device memory each time. Lower it when
    /// other processes or non-pool allocations need the memory back without a call to
    /// [`trim_memory`](Self::trim_memory); `0` is the driver's default (release
    /// everything unused at every synchronisation).
    ///
    /// The setting belongs to the device's default pool, so it applies to every
    /// [`Device`] handle of this GPU in the process, and [`Device::new`] sets it to
    /// `u64::MAX` again.
    ///
    /// ```no_run
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = stream_core::Device::new(0)?;
    /// dev.set_memory_release_threshold(4 << 30)?; // keep at most 4 GiB cached
    /// assert_eq!(dev.memory_release_threshold()?, 4 << 30);
    /// # Ok(()) }
    /// ```
    pub fn set_memory_release_threshold(&self, bytes: u64) -> Result<()> {
        let _bound = self.inner.bind()?;
        self.inner.pool.set_release_threshold(bytes)
    }

    /// The release threshold of the device's pool, in bytes (see
    /// [`set_memory_release_threshold`](Self::set_memory_release_threshold)).
    pub fn memory_release_threshold(&self) -> Result<u64> {
        let _bound = self.inner.bind()?;
        self.inner.pool.release_threshold()
    }

    /// Hands cached device memory back to the driver (`cuMemPoolTrimTo`), until the
    /// pool reserves at most `keep_bytes` or nothing more can be released. If the pool
    /// reserves more than `keep_bytes`, at least `keep_bytes` stay reserved (the driver
    /// releases whole blocks).
    ///
    /// Only memory whose frees have *completed and been seen by the host* is released.
    /// Memory of live buffers stays, and so may memory freed on a stream nothing has
    /// waited for since (a buffer dropped inside a scope that is still open); memory
    /// freed by ended scopes is released. Dropped [`DeviceVec`](crate::DeviceVec)s are
    /// freed on the device's housekeeping stream, so this call **blocks** until that
    /// stream is idle (it holds only those frees and the copies of other threads'
    /// blocking `DeviceVec` calls) before it trims; it never waits for a scope's stream
    /// or the whole device.
    ///
    /// ```no_run
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = stream_core::Device::new(0)?;
    /// let weights = dev.alloc_vec::<f32>(1 << 28)?;
    /// drop(weights);
    /// dev.trim_memory(0)?; // the 1 GiB goes back to the driver, e.g. for another process
    /// println!("{} bytes still cached", dev.memory_stats()?.cached_bytes);
    /// # Ok(()) }
    /// ```
    pub fn trim_memory(&self, keep_bytes: usize) -> Result<()> {
        let _bound = self.inner.bind()?;
        self.inner.sync_housekeeping()?;
        self.inner.pool.trim_to(keep_bytes)
    }

    /// Device memory statistics of this GPU's pool: in use, cached, reserved, and the
    /// peaks since the last [`reset_peak_memory_stats`](Self::reset_peak_memory_stats).
    /// See [`DeviceMemoryStats`] for an example. Does not block.
    pub fn memory_stats(&self) -> Result<DeviceMemoryStats> {
        let _bound = self.inner.bind()?;
        self.inner.pool.stats()
    }

    /// Restarts the peaks of [`memory_stats`](Self::memory_stats)
    /// (`peak_in_use_bytes`, `peak_reserved_bytes`): from now on they count from the
    /// memory in use and reserved at this call.
    ///
    /// ```no_run
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = stream_core::Device::new(0)?;
    /// dev.reset_peak_memory_stats()?;
    /// // ... run one step ...
    /// println!("the step needed {} MiB at most", dev.memory_stats()?.peak_in_use_bytes >> 20);
    /// # Ok(()) }
    /// ```
    pub fn reset_peak_memory_stats(&self) -> Result<()> {
        let _bound = self.inner.bind()?;
        self.inner.pool.reset_peaks()
    }
}
