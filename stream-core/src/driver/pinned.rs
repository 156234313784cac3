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

    /// Frees the memory. `cuMemFreeHost` waits until the whole device is idle (measured:
    /// it stalled behind a kernel on another thread's stream).
    ///
    /// # Safety
    ///
    /// No DMA may still read or write the memory (its last copy completed), and no
    /// reference into it remains. The context it was allocated in must be bound.
    pub(crate) unsafe fn free_waiting_for_device(self) {
        // DEVICE-WIDE SYNC: cuMemFreeHost, reached only from the pinned pool's release
        // (Device::trim_pinned_memory, and the device's drop).
        // SAFETY: the caller's contract above; the memory came from `cuMemHostAlloc` and
        // `self` is consumed, so it is freed once.
        let _ = unsafe { result::free_host(self.ptr.as_ptr().cast()) };
    }
}
