//! [`MemPool`]: a device's default stream-ordered memory pool (`cuMemAllocFromPoolAsync`),
//! its attributes and trimming.

use std::cell::Cell;
use std::ffi::c_void;
use std::num::NonZeroU64;

use cudarc::driver::{result, sys};

use super::device::DeviceId;
use super::memory::free_async;
use super::stream::RawStream;
use crate::error::{DriverResultExt, Error, Result};

/// The default memory pool of a device (`cuDeviceGetDefaultMemPool`). The driver owns it
/// for the life of the process; it is never destroyed.
#[derive(Clone, Copy)]
pub(crate) struct MemPool(sys::CUmemoryPool);

// SAFETY: a `CUmemoryPool` is an opaque handle of a pool the driver never destroys;
// the driver API is thread-safe.
unsafe impl Send for MemPool {}
// SAFETY: see `Send`; shared access only passes the handle to driver calls.
unsafe impl Sync for MemPool {}

/// The pool attributes whose value is a `cuuint64_t`, which is what makes passing a
/// `u64` to the driver sound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum U64Attribute {
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

impl MemPool {
    /// The default pool of `device`.
    pub(crate) fn default_of(device: DeviceId) -> Result<Self> {
        // SAFETY: `device` came from `cuDeviceGet` (`DeviceId` is made no other way).
        let raw = unsafe { result::device::get_default_mem_pool(device.raw()) }
            .call("cuDeviceGetDefaultMemPool")?;
        Ok(MemPool(raw))
    }

    /// Sets whether an allocation on one stream may reuse memory freed on another by
    /// making the first wait for the second (`CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES`).
    pub(crate) fn allow_internal_dependencies(self, allow: bool) -> Result<()> {
        let mut value: i32 = allow.into();
        // SAFETY: `self.0` is a pool the driver keeps alive; this attribute takes an
        // `int` (CUDA driver API, `CUmemPool_attribute`), read from a live `i32`.
        unsafe {
            result::mem_pool::set_attribute(
                self.0,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES,
                (&raw mut value).cast::<c_void>(),
            )
        }
        .call("cuMemPoolSetAttribute")
    }

    /// Reads a `cuuint64_t` attribute.
    pub(crate) fn get(self, attr: U64Attribute) -> Result<u64> {
        let mut value: u64 = 0;
        // SAFETY: a live pool, a `cuuint64_t` attribute, written to a live `u64`.
        unsafe {
            result::mem_pool::get_attribute(self.0, attr.raw(), (&raw mut value).cast::<c_void>())
        }
        .call("cuMemPoolGetAttribute")?;
        Ok(value)
    }

    /// Writes a `cuuint64_t` attribute.
    pub(crate) fn set(self, attr: U64Attribute, mut value: u64) -> Result<()> {
        // SAFETY: a live pool, a `cuuint64_t` attribute, read from a live `u64`.
        unsafe {
            result::mem_pool::set_attribute(self.0, attr.raw(), (&raw mut value).cast::<c_void>())
        }
        .call("cuMemPoolSetAttribute")
    }

    /// Hands cached memory whose frees have completed back to the driver, keeping at
    /// least `keep_bytes` reserved when the pool holds more than that.
    pub(crate) fn trim_to(self, keep_bytes: usize) -> Result<()> {
        // SAFETY: a live pool. Trimming only releases memory no allocation holds (the
        // driver keeps every block backing a live allocation or a free it has not seen
        // complete), so no address in use is unmapped.
        unsafe { result::mem_pool::trim_to(self.0, keep_bytes) }.call("cuMemPoolTrimTo")
    }

    /// Lets kernels and copies on `accessor` read and write every allocation of this pool,
    /// past and future (`cuMemPoolSetAccess`, read-write). Pool allocations do not follow
    /// a context's peer access (`cuCtxEnablePeerAccess`): the pool's access list is what
    /// the driver consults (CUDA Programming Guide, stream-ordered allocator, "device
    /// accessibility for multi-GPU support"). Granting again is accepted and changes
    /// nothing; the driver refuses an accessor that cannot reach the pool's device.
    pub(crate) fn grant_access(self, accessor: DeviceId) -> Result<()> {
        let desc = sys::CUmemAccessDesc {
            location: super::versions::mem_location(
                sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                accessor.raw(),
            ),
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: a live pool (never destroyed); `desc` is one initialised descriptor,
        // read during the call; the count says one.
        unsafe { sys::cuMemPoolSetAccess(self.0, &raw const desc, 1) }
            .result()
            .call("cuMemPoolSetAccess")
    }

    /// One stream-ordered allocation of `bytes` (more than zero) on `stream`: usable by
    /// work on `stream` after this point, and by other streams once ordered after it.
    /// The memory is uninitialised. Allocating cannot break memory safety (using it can).
    pub(crate) fn alloc(
        self,
        bytes: usize,
        stream: &RawStream,
    ) -> std::result::Result<StreamOrdered, result::DriverError> {
        // SAFETY: a live pool and a live stream (borrowed); the call only writes the
        // new address.
        let ptr = unsafe { result::mem_pool::alloc_async(self.0, bytes, stream.raw()) }?;
        // A successful allocation of one byte or more has a non-null address; a null one
        // (which the driver does not return) is reported as its invalid-value error rather
        // than owned.
        NonZeroU64::new(ptr)
            .map(StreamOrdered)
            .ok_or(result::DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE))
    }
}

/// One stream-ordered allocation (`cuMemAllocAsync`), owned: the right to free it. It
/// is freed once, by [`free_on`](Self::free_on); dropping it without that leaks it.
///
/// Freeing is safe, as a `Box`'s drop is: what needs care is the use of the memory by
/// GPU work, and every operation that enqueues such work is an `unsafe fn` whose caller
/// proves the memory outlives it (for the crate's owners, `DeviceBuffer` and
/// `DeviceVec`, by freeing only in their own drop, stream-ordered on the stream their
/// work is ordered before).
#[must_use = "dropping a StreamOrdered leaks the allocation: free it with free_on"]
#[derive(Debug)]
pub(crate) struct StreamOrdered(NonZeroU64);

impl StreamOrdered {
    /// Takes ownership of the stream-ordered allocation at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` is the start of a stream-ordered allocation (`cuMemAllocAsync` or
    /// `cuMemAllocFromPoolAsync`), not freed, and owned by nothing else from now on.
    pub(crate) unsafe fn adopt(ptr: NonZeroU64) -> Self {
        StreamOrdered(ptr)
    }

    /// Its first byte's address.
    #[inline(always)]
    pub(crate) fn ptr(&self) -> sys::CUdeviceptr {
        self.0.get()
    }

    /// Gives up ownership without freeing: the address (whoever takes it owns the
    /// allocation; dropping it only leaks).
    pub(crate) fn into_raw(self) -> sys::CUdeviceptr {
        self.0.get()
    }

    /// Enqueues the free on `stream`, a live stream of the allocation's device: the
    /// memory goes back to its pool once `stream` reaches this point. When the driver
    /// refuses (an error, which frees nothing) the allocation is handed back with it.
    pub(crate) fn free_on(self, stream: &RawStream) -> std::result::Result<(), (Self, Error)> {
        // SAFETY: `self` owns the allocation (made by `MemPool::alloc` or `adopt`'s
        // contract) and is consumed here, so it is freed once (on failure the driver freed
        // nothing, and it is handed back). That the memory's users are done with it by
        // the time `stream` reaches the free is their proof, not this call's: see the
        // type's docs.
        match unsafe { free_async(self.ptr(), stream) } {
            Ok(()) => Ok(()),
            Err(e) => Err((self, e)),
        }
    }

    /// [`free_on`](Self::free_on) with `stream`'s context current
    /// ([`PrimaryContext::run_as_current`]: a buffer may be dropped inside a scope of
    /// another device). A free the driver refuses leaks the allocation: a drop cannot
    /// report it.
    ///
    /// [`PrimaryContext::run_as_current`]: super::context::PrimaryContext::run_as_current
    pub(crate) fn free_on_in_its_context(self, stream: &RawStream) {
        let unfreed = Cell::new(Some(self));
        let _ = stream.context().run_as_current(|| match unfreed.take() {
            Some(allocation) => allocation.free_on(stream).map_err(|(allocation, e)| {
                unfreed.set(Some(allocation));
                e
            }),
            None => Ok(()),
        });
    }
}
