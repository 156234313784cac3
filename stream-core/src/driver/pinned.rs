//! [`PinnedAllocation`]: one block of page-locked host memory (`cuMemHostAlloc`).

use std::ptr::NonNull;

use cudarc::driver::{result, sys};

use super::context::Bound;
use crate::error::{is_out_of_memory, Error, Result};

/// Page-locked host memory of `size` bytes, `PORTABLE` (pinned for every context),
/// optionally write-combined, zero-filled when allocated (so every byte of it is always
/// initialised). It is never freed implicitly: dropping it leaks it, and
/// [`free_waiting_for_device`](Self::free_waiting_for_device) frees it (and waits for
/// the whole device, which is why only points the user chose call it).
pub(crate) struct PinnedAllocation {
    ptr: NonNull<u8>,
    size: usize,
}

// SAFETY: the allocation is plain host memory, owned exclusively (like a `Box<[u8]>`),
// and `PORTABLE`, so it may be used and freed from any thread.
unsafe impl Send for PinnedAllocation {}

impl PinnedAllocation {
    /// Page-locks `size` bytes in the context `_bound` binds (which the memory belongs
    /// to). Out of page-lockable memory: [`Error::HostOutOfMemory`].
    pub(crate) fn new(size: usize, write_combined: bool, _bound: &Bound<'_>) -> Result<Self> {
        let mut flags = sys::CU_MEMHOSTALLOC_PORTABLE;
        if write_combined {
            flags |= sys::CU_MEMHOSTALLOC_WRITECOMBINED;
        }
        // SAFETY: a plain allocation in the bound context; the memory is only handed out
        // through this value, whose users zero or overwrite it before any typed read.
        let raw = match unsafe { result::malloc_host(size, flags) } {
            Ok(raw) => raw,
            Err(e) if is_out_of_memory(&e) => {
                return Err(Error::HostOutOfMemory { requested: size })
            }
            Err(e) => return Err(Error::driver("cuMemHostAlloc", e)),
        };
        let Some(ptr) = NonNull::new(raw.cast::<u8>()) else {
            return Err(Error::HostOutOfMemory { requested: size });
        };
        // SAFETY: `ptr` is `size` bytes of host memory just allocated, owned by no one
        // else and used by no DMA yet.
        unsafe { ptr.as_ptr().write_bytes(0, size) };
        Ok(PinnedAllocation { ptr, size })
    }

    /// The first byte, page-aligned; valid (and initialised) for `size` bytes until
    /// freed.
    #[inline(always)]
    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// The size in bytes.
    #[inline(always)]
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// The bytes, for the host to read and write (all initialised: zero-filled at
    /// allocation, then only written with bytes). Safe as a `Vec`'s slice is: a DMA that
    /// uses the memory is enqueued by an `unsafe fn` whose caller keeps the host off it,
    /// this method included, until that DMA has completed (the pinned pool's blocks arm
    /// themselves and refuse their bytes while armed).
    #[inline]
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is `size` initialised bytes owned by `self` (borrowed mutably), not
        // freed while `self` lives (freeing consumes it); host access racing a DMA is ruled
        // out by the DMA's enqueuer (see above).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.size) }
    }

    /// Frees the memory, with a context bound (`cuMemFreeHost` refuses, with an error
    /// that leaks the memory, when none is current). `cuMemFreeHost` waits until the
    /// whole device is idle (measured: it stalled behind a kernel on another thread's
    /// stream).
    ///
    /// Safe as a `Box`'s drop is: the owner frees, and a DMA that uses the memory was
    /// enqueued by an `unsafe fn` whose caller proved the memory outlives it (the pinned
    /// pool frees only idle blocks: a block is armed while a DMA may use it); host
    /// slices ([`bytes_mut`](Self::bytes_mut)) borrow `self`, so none remains once it is
    /// consumed here.
    pub(crate) fn free_waiting_for_device(self, _bound: &Bound<'_>) {
        // DEVICE-WIDE SYNC: cuMemFreeHost, reached only from the pinned pool's release
        // (Device::trim_pinned_memory, and the device's drop).
        // SAFETY: the memory came from `cuMemHostAlloc` and `self` is consumed, so it is
        // freed once; its users' proofs are theirs (above).
        let _ = unsafe { result::free_host(self.ptr.as_ptr().cast()) };
    }
}
