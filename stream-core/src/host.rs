//! [`PinnedBuffer`]: owned page-locked host memory, sliceable like a `Vec`.

use std::ptr::NonNull;

use cudarc::driver::{result, sys};

use crate::device::Device;
use crate::error::{byte_len, is_out_of_memory, Error, Result};
use crate::repr::DeviceRepr;

/// Page-locked (pinned) host memory of `len` elements, zero-initialised.
///
/// The GPU copies pinned memory by DMA without a staging copy, so transfers from and to
/// it run at full bus speed and truly asynchronously. It dereferences to `[T]`, so any
/// sub-slice can be a transfer's source or destination, and the usual borrow rules keep
/// it from being touched or freed while a transfer is pending.
///
/// ```no_run
/// use stream_core::{scope, Device, Error};
/// # fn main() -> stream_core::Result<()> {
/// let dev = Device::new(0)?;
/// let stream = dev.new_stream()?;
/// let mut pinned = dev.alloc_pinned::<f32>(1 << 20)?;
/// pinned.iter_mut().enumerate().for_each(|(i, v)| *v = i as f32);
/// let (front, back) = pinned.split_at_mut(4096);  // disjoint halves, borrowed separately
/// scope(&stream, |s| {
///     let x = s.upload(&front[..1024])?;
///     s.copy_to_host(&x, &mut back[..1024])?.wait()?;
///     Ok::<_, Error>(())
/// })?;
/// # Ok(()) }
/// ```
pub struct PinnedBuffer<T: DeviceRepr> {
    ptr: NonNull<T>,
    len: usize,
    device: Device,
}

// SAFETY: a `PinnedBuffer` owns its allocation exclusively, like a `Box<[T]>`; the
// driver allocated it `PORTABLE`, so it may be used and freed from any thread, and
// `T: DeviceRepr` is `Send + Sync`.
unsafe impl<T: DeviceRepr> Send for PinnedBuffer<T> {}
// SAFETY: `&PinnedBuffer` gives only `&[T]`, which is `Sync` for `T: Sync`.
unsafe impl<T: DeviceRepr> Sync for PinnedBuffer<T> {}

impl Device {
    /// Allocates `len` zeroed elements of page-locked host memory (`cuMemHostAlloc`,
    /// portable, not write-combined, so host reads stay fast).
    pub fn alloc_pinned<T: DeviceRepr>(&self, len: usize) -> Result<PinnedBuffer<T>> {
        let bytes = byte_len::<T>(len)?;
        if bytes == 0 {
            return Ok(PinnedBuffer {
                ptr: NonNull::dangling(),
                len,
                device: self.clone(),
            });
        }
        self.inner.bind()?;
        // SAFETY: plain allocation call in the current context; the result is checked
        // and zeroed below before anyone reads it.
        let raw = match unsafe { result::malloc_host(bytes, sys::CU_MEMHOSTALLOC_PORTABLE) } {
            Ok(raw) => raw,
            Err(e) if is_out_of_memory(&e) => {
                return Err(Error::HostOutOfMemory { requested: bytes })
            }
            Err(e) => return Err(Error::driver("cuMemHostAlloc", e)),
        };
        let ptr =
            NonNull::new(raw.cast::<T>()).ok_or(Error::HostOutOfMemory { requested: bytes })?;
        // SAFETY: `ptr` points to `bytes` writable bytes just allocated (page-aligned, so
        // aligned for `T`); all-zero bytes are a valid `T` (`T: DeviceRepr`).
        unsafe { ptr.as_ptr().write_bytes(0, len) };
        Ok(PinnedBuffer {
            ptr,
            len,
            device: self.clone(),
        })
    }
}

impl<T: DeviceRepr> PinnedBuffer<T> {
    /// The device whose context allocated the memory.
    pub fn device(&self) -> &Device {
        &self.device
    }
}

impl<T: DeviceRepr> std::ops::Deref for PinnedBuffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` is valid for `len` initialised `T`s (zeroed at allocation, and
        // only ever written through `&mut [T]` or DMA of valid `T` bytes) for as long as
        // `self` lives; `NonNull::dangling` is valid for `len == 0`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: DeviceRepr> std::ops::DerefMut for PinnedBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as `deref`, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: DeviceRepr> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        if byte_len::<T>(self.len).is_ok_and(|b| b > 0) {
            let _ = self.device.inner.bind();
            // SAFETY: allocated by `cuMemHostAlloc`, freed once. No transfer can be pending
            // on it: transfers borrow it for their scope's brand, and a scope synchronises
            // its stream before that borrow ends.
            let _ = unsafe { result::free_host(self.ptr.as_ptr().cast()) };
        }
    }
}

impl<T: DeviceRepr + std::fmt::Debug> std::fmt::Debug for PinnedBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("len", &self.len)
            .finish()
    }
}
