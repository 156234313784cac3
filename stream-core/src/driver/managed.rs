//! Managed (unified) memory: [`ManagedAllocation`] (`cuMemAllocManaged`), its free
//! (`cuMemFree`, which may wait for the whole device), its hints (`cuMemAdvise`), and the
//! stream-ordered operations on it: prefetches (`cuMemPrefetchAsync`) and stream
//! attachment (`cuStreamAttachMemAsync`).
//!
//! CUDA 13 takes locations as a `CUmemLocation` struct (a device, or the host) where
//! earlier versions took a device ordinal with `-1` for the CPU: `cuMemPrefetchAsync` and
//! `cuMemAdvise` are the `_v2` entry points of CUDA 12.2, which CUDA 13's header maps the
//! plain names to, and which every binding from 12.2 on has.

use cudarc::driver::sys;

use super::context::{Bound, PrimaryContext};
use super::device::DeviceId;
use super::stream::RawStream;
use super::versions::mem_location;
use crate::error::{is_out_of_memory, DriverResultExt, Error, Result};

/// Where managed memory can live or be accessed from: one GPU, or the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Location {
    /// The device with this handle.
    Device(DeviceId),
    /// Host memory (the CPU).
    Host,
}

impl Location {
    /// The CUDA 13 location struct (`id` is ignored by the driver for the host).
    fn raw(self) -> sys::CUmemLocation {
        match self {
            Location::Device(device) => mem_location(
                sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                device.raw(),
            ),
            Location::Host => mem_location(sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST, 0),
        }
    }
}

/// Which streams may access a managed allocation (`CUmemAttach_flags`). On a device with
/// `CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS = 0` this decides when the host may
/// touch it: never while a kernel runs, for `Global`; at any time, for `Host`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attach {
    /// `CU_MEM_ATTACH_GLOBAL`: any stream of any device may access it.
    Global,
    /// `CU_MEM_ATTACH_HOST`: no stream of a device without concurrent managed access may
    /// access it; the host may, whatever runs.
    Host,
}

impl Attach {
    fn raw(self) -> std::ffi::c_uint {
        let flag = match self {
            Attach::Global => sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL,
            Attach::Host => sys::CUmemAttach_flags::CU_MEM_ATTACH_HOST,
        };
        flag as std::ffi::c_uint
    }
}

/// A hint of `cuMemAdvise` (`CUmem_advise`) with its location. Hints change where pages
/// live and how they migrate, never what the memory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Advice {
    /// `CU_MEM_ADVISE_SET_READ_MOSTLY` (the location is ignored).
    SetReadMostly,
    /// `CU_MEM_ADVISE_UNSET_READ_MOSTLY` (the location is ignored).
    UnsetReadMostly,
    /// `CU_MEM_ADVISE_SET_PREFERRED_LOCATION`.
    SetPreferredLocation(Location),
    /// `CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION` (the location is ignored).
    UnsetPreferredLocation,
    /// `CU_MEM_ADVISE_SET_ACCESSED_BY`.
    SetAccessedBy(Location),
    /// `CU_MEM_ADVISE_UNSET_ACCESSED_BY`.
    UnsetAccessedBy(Location),
}

impl Advice {
    /// The driver's advice and location; `ignored` stands in where the driver ignores
    /// the location.
    fn raw(self, ignored: Location) -> (sys::CUmem_advise, sys::CUmemLocation) {
        use sys::CUmem_advise::*;
        match self {
            Advice::SetReadMostly => (CU_MEM_ADVISE_SET_READ_MOSTLY, ignored.raw()),
            Advice::UnsetReadMostly => (CU_MEM_ADVISE_UNSET_READ_MOSTLY, ignored.raw()),
            Advice::SetPreferredLocation(at) => (CU_MEM_ADVISE_SET_PREFERRED_LOCATION, at.raw()),
            Advice::UnsetPreferredLocation => {
                (CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, ignored.raw())
            }
            Advice::SetAccessedBy(by) => (CU_MEM_ADVISE_SET_ACCESSED_BY, by.raw()),
            Advice::UnsetAccessedBy(by) => (CU_MEM_ADVISE_UNSET_ACCESSED_BY, by.raw()),
        }
    }
}

/// `bytes` (non-zero) of managed memory from `cuMemAllocManaged`: one address, valid on
/// the host and on every device of the process (unified addressing), at least 256-byte
/// aligned. Its contents are unspecified when allocated.
///
/// It is never freed implicitly: dropping it leaks it, and
/// [`free_managed_waiting_for_device`](Self::free_managed_waiting_for_device) frees it
/// (`cuMemFree`, which "may perform implicit synchronization" of the device for memory
/// that is not from the stream-ordered allocator). The value is plain numbers, so it is
/// `Send` and `Sync`; what may touch the memory when is its owner's business.
#[derive(Debug)]
pub(crate) struct ManagedAllocation {
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

impl ManagedAllocation {
    /// Allocates `bytes` (non-zero) of managed memory in `context`, attached as `attach`
    /// says, and zeroes it from the host. Refused before allocating, with
    /// [`Error::ManagedNeedsConcurrentAccess`], when the host may not touch it: attached
    /// `Global` on a device without concurrent managed access, where the host may not
    /// touch managed memory while any kernel runs. Out of memory: [`Error::OutOfMemory`]
    /// with the device's `free` and `total` as the caller measured them.
    pub(crate) fn zeroed(
        bytes: usize,
        attach: Attach,
        (free, total): (usize, usize),
        context: &PrimaryContext,
    ) -> Result<Self> {
        let concurrent = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS;
        if attach == Attach::Global && context.device().attribute(concurrent)? == 0 {
            return Err(Error::from(crate::error::ManagedNeedsConcurrentAccess {
                what: "zeroing from the host a managed allocation attached to every stream",
                instead: "attach it to the host (CU_MEM_ATTACH_HOST) on this device",
            }));
        }
        let _bound = context.bind()?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: a plain allocation in the bound context; the driver writes one
        // `CUdeviceptr` to `ptr`, a live local.
        let status = unsafe { sys::cuMemAllocManaged(&raw mut ptr, bytes, attach.raw()) };
        let out_of_memory = || {
            Error::from(crate::error::OutOfMemory {
                requested: bytes,
                free,
                total,
            })
        };
        match status.result() {
            Ok(()) if ptr != 0 => {}
            Ok(()) => return Err(out_of_memory()),
            Err(e) if is_out_of_memory(&e) => return Err(out_of_memory()),
            Err(e) => return Err(Error::driver("cuMemAllocManaged", e)),
        }
        // SAFETY: `bytes` bytes of managed memory just allocated, whose address nothing
        // but this function knows yet, so no stream or thread uses them. The host may
        // touch them now: they are attached to the host, or the device has concurrent
        // managed access (checked above), where the host may at any time. Managed memory
        // has the same address on the host as on the devices.
        unsafe { std::ptr::with_exposed_provenance_mut::<u8>(ptr as usize).write_bytes(0, bytes) };
        Ok(ManagedAllocation { ptr, bytes })
    }

    /// The address, the same on the host and on every device.
    #[inline(always)]
    pub(crate) fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// The size in bytes.
    #[inline(always)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Gives the driver a hint about the whole allocation (`cuMemAdvise`, CUDA 13's
    /// location form), with the context `_bound` binds current. `device` stands in for
    /// the location where the hint ignores it. A hint never changes the contents, and the
    /// allocation is live for the call (this value is borrowed and never freed
    /// implicitly), so the call is safe at any time.
    pub(crate) fn advise(
        &self,
        advice: Advice,
        device: DeviceId,
        _bound: &Bound<'_>,
    ) -> Result<()> {
        let (advice, location) = advice.raw(Location::Device(device));
        // SAFETY: `ptr..ptr + bytes` is this live managed allocation, exactly; the call
        // only changes the driver's migration policy for it, never its contents.
        unsafe { sys::cuMemAdvise_v2(self.ptr, self.bytes, advice, location) }
            .result()
            .call("cuMemAdvise")
    }

    /// Frees the memory with `cuMemFree`, in the context `_bound` binds (the one it was
    /// allocated in). The driver may wait for the whole device first.
    ///
    /// Safe as a `Box`'s drop is: the owner frees, and work that uses the memory was
    /// enqueued by an `unsafe fn` (a prefetch, an attachment, a copy, a launch) whose
    /// caller proved the memory outlives it (a `ManagedVec` is borrowed by every scope
    /// that uses it, until that scope's final synchronisation); host slices into it
    /// borrow the owner, so none remains once it is consumed here.
    pub(crate) fn free_managed_waiting_for_device(self, _bound: &Bound<'_>) {
        // DEVICE-WIDE SYNC: cuMemFree of managed memory, reached only from the drop of a
        // `ManagedVec` (managed/managed_vec.rs), a point the user chose.
        // SAFETY: the memory came from `cuMemAllocManaged` and `self` is consumed, so it
        // is freed once; its users' proofs are theirs (above). A failure only leaks it.
        let _ = unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}

/// Enqueues on `stream` a change of which streams may access the whole managed
/// allocation at `ptr` (`cuStreamAttachMemAsync` with length 0: the driver changes the
/// association of whole allocations only). It takes effect once the stream's earlier
/// work has completed.
///
/// # Safety
///
/// * `ptr` is the start of a managed allocation that stays allocated until the change
///   has run.
/// * The new association is legal for all work at all times: after a change to
///   [`Attach::Host`] no device work uses the memory (until a later change to `Global`
///   is ordered before it), and while it is [`Attach::Global`] the host does not touch it
///   (on a device without concurrent managed access that would fault while any kernel
///   runs) until a change to `Host` has completed.
pub(crate) unsafe fn attach_to_streams(
    ptr: sys::CUdeviceptr,
    attach: Attach,
    stream: &RawStream,
) -> Result<()> {
    // SAFETY: the caller's contract above; `stream` is live (borrowed).
    unsafe { sys::cuStreamAttachMemAsync(stream.raw(), ptr, 0, attach.raw()) }
        .result()
        .call("cuStreamAttachMemAsync")
}

/// Enqueues on `stream` a migration of the pages of `ptr..ptr + bytes` to `to`
/// (`cuMemPrefetchAsync`, CUDA 13's location form). A prefetch moves pages, never
/// changes what they hold; the driver rounds the range out to whole pages.
///
/// # Safety
///
/// The range lies in a managed allocation that stays allocated until the prefetch has
/// run. A prefetch to a device needs a device (and a `stream` of a device) with
/// concurrent managed access, which the caller has checked.
pub(crate) unsafe fn prefetch(
    ptr: sys::CUdeviceptr,
    bytes: usize,
    to: Location,
    stream: &RawStream,
) -> Result<()> {
    // SAFETY: the caller's contract above; `stream` is live (borrowed); the flags must be
    // zero.
    unsafe { sys::cuMemPrefetchAsync_v2(ptr, bytes, to.raw(), 0, stream.raw()) }
        .result()
        .call("cuMemPrefetchAsync")
}
