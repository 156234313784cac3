//! [`DeviceBuffer`]: device memory made inside a scope, allocated and freed
//! stream-ordered on the scope's stream.
//!
//! `cuMemAllocAsync` and `cuMemFreeAsync` on the scope's stream mean every use of the
//! buffer (all on that same stream) is ordered after its allocation and before its
//! free, so a buffer needs only call-length borrows: dropping it right after enqueuing
//! a copy is correct, because the free runs on the GPU after the copy.

use std::marker::PhantomData;
use std::ops::RangeBounds;

use cudarc::driver::{result, sys};

use crate::brand::{brand, Brand};
use crate::error::{byte_len, DriverResultExt, Result};
use crate::repr::DeviceRepr;
use crate::scope::Scope;
use crate::view::{sealed, DeviceMemory, DeviceMemoryMut, DeviceSlice, DeviceSliceMut, RawSlice};

/// Device memory of `len` elements of `T`, owned by the scope branded `'s`.
///
/// It cannot leave its scope or be used in another scope (the brand is invariant), and
/// it is freed, stream-ordered, when dropped.
///
/// ```no_run
/// # use stream_core::{scope, Error, Stream};
/// # fn f(stream: &Stream) -> Result<(), Error> {
/// let host = vec![1.5f32; 4096];
/// scope(stream, |s| {
///     let x = s.upload(&host)?;            // DeviceBuffer<'s, f32>
///     let mut y = s.alloc::<f32>(4096)?;
///     s.copy_device(&x, &mut y)?;
///     Ok(())
/// })
/// # }
/// ```
///
/// A buffer cannot escape its scope (see `ui-tests/tests/ui/brand/buffer-escapes-scope.rs`):
///
/// ```compile_fail
/// # use stream_core::{scope, Error, Stream};
/// # fn f(stream: &Stream) -> Result<(), Error> {
/// let escaped = scope(stream, |s| Ok::<_, Error>(s.alloc::<f32>(16)?))?;
/// # Ok(()) }
/// ```
pub struct DeviceBuffer<'s, T: DeviceRepr> {
    raw: RawSlice,
    /// The scope's stream, on which the buffer was allocated and will be freed.
    stream: sys::CUstream,
    _brand: Brand<'s>,
    _elem: PhantomData<T>,
}

impl<'s, 'env> Scope<'s, 'env> {
    /// Allocates `len` elements on the scope's stream. The contents are unspecified
    /// (any bit pattern is a valid `T`, see [`DeviceRepr`]); use
    /// [`alloc_zeroed`](Self::alloc_zeroed) for zeros. `len == 0` allocates nothing.
    ///
    /// The memory comes from the device's memory pool, which keeps freed memory cached,
    /// so allocating in a loop of scopes reuses the same memory (see
    /// [`Device::memory_stats`](crate::Device::memory_stats)).
    ///
    /// # Out of memory: the one case in which `alloc` blocks
    ///
    /// When the driver reports that the device is out of memory, `alloc` releases what
    /// it can and retries once before it returns
    /// [`Error::OutOfMemory`](crate::Error::OutOfMemory): it **waits on the host** for
    /// the streams on which this thread's frees may still be pending, so that the memory
    /// they free can be reused: this scope's stream, the streams of the scopes this
    /// thread has open around it on the same device (enclosing scopes, the parents of a
    /// [fork](Self::fork)), and the device's housekeeping stream (where dropped
    /// [`DeviceVec`](crate::DeviceVec)s are freed). Then it hands the pool's cached
    /// memory back to the driver ([`Device::trim_memory`](crate::Device::trim_memory)`(0)`)
    /// and tries again. It never waits for the whole device, and never for a stream
    /// that no scope of this thread has open (a stream shared with another thread's
    /// open scope is waited for as a whole, that thread's work on it included). An
    /// allocation that succeeds at the first try does not block.
    ///
    /// ```no_run
    /// # use stream_core::{scope, Error, Stream};
    /// # fn f(stream: &Stream) -> Result<(), Error> {
    /// scope(stream, |s| {
    ///     match s.alloc::<f32>(1 << 40) {
    ///         Err(Error::OutOfMemory { requested, free, .. }) => {
    ///             println!("{requested} bytes do not fit; {free} are free");
    ///         }
    ///         other => { other?; }
    ///     }
    ///     let _x = s.alloc::<f32>(1024)?; // the scope keeps working
    ///     Ok(())
    /// })
    /// # }
    /// ```
    pub fn alloc<T: DeviceRepr>(&'s self, len: usize) -> Result<DeviceBuffer<'s, T>> {
        let bytes = byte_len::<T>(len)?;
        if bytes == 0 {
            return Ok(DeviceBuffer::from_raw(RawSlice::EMPTY, self.raw));
        }
        // `self.raw` is the scope's live stream (borrowed for `'env`), of this device,
        // and not capturing (refused by `scope`). The new memory is only used through
        // the buffer, on this stream, and `T: DeviceRepr` makes its unspecified contents
        // valid.
        let ptr = self.device().alloc_async(self.raw, bytes)?;
        Ok(DeviceBuffer::from_raw(RawSlice { ptr, len }, self.raw))
    }

    /// Allocates `len` zeroed elements on the scope's stream (blocking only when out of
    /// memory, like [`alloc`](Self::alloc)).
    pub fn alloc_zeroed<T: DeviceRepr>(&'s self, len: usize) -> Result<DeviceBuffer<'s, T>> {
        let mut buf = self.alloc(len)?;
        self.zero(&mut buf)?;
        Ok(buf)
    }
}

impl<'s, T: DeviceRepr> DeviceBuffer<'s, T> {
    /// # Invariant
    /// `raw` is memory of `T`s allocated stream-ordered, whose every earlier use is
    /// ordered before work on `stream`; the buffer frees it on `stream`.
    pub(crate) fn from_raw(raw: RawSlice, stream: sys::CUstream) -> Self {
        DeviceBuffer {
            raw,
            stream,
            _brand: brand(),
            _elem: PhantomData,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.raw.len
    }

    /// `true` when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.raw.len == 0
    }

    /// Gives up ownership without freeing: the memory and the stream it would have been
    /// freed on. The caller takes over the duty to free it.
    pub(crate) fn into_raw(self) -> (RawSlice, sys::CUstream) {
        let parts = (self.raw, self.stream);
        std::mem::forget(self);
        parts
    }

    /// A read-only view of the whole buffer.
    pub fn as_slice(&self) -> DeviceSlice<'_, 's, T> {
        DeviceSlice::from_raw(self.raw)
    }

    /// A writable view of the whole buffer.
    pub fn as_slice_mut(&mut self) -> DeviceSliceMut<'_, 's, T> {
        DeviceSliceMut::from_raw(self.raw)
    }

    /// The elements in `range`, read-only, or [`Error::OutOfRange`](crate::Error::OutOfRange).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<'_, 's, T>> {
        Ok(DeviceSlice::from_raw(self.raw.range::<T>(range)?))
    }

    /// The elements in `range`, writable, or [`Error::OutOfRange`](crate::Error::OutOfRange).
    pub fn slice_mut(
        &mut self,
        range: impl RangeBounds<usize>,
    ) -> Result<DeviceSliceMut<'_, 's, T>> {
        Ok(DeviceSliceMut::from_raw(self.raw.range::<T>(range)?))
    }

    /// Two disjoint writable halves `[0, mid)` and `[mid, len)`, or
    /// [`Error::OutOfRange`](crate::Error::OutOfRange) when `mid > len`.
    pub fn split_at_mut(
        &mut self,
        mid: usize,
    ) -> Result<(DeviceSliceMut<'_, 's, T>, DeviceSliceMut<'_, 's, T>)> {
        let (lo, hi) = self.raw.split_at::<T>(mid)?;
        Ok((DeviceSliceMut::from_raw(lo), DeviceSliceMut::from_raw(hi)))
    }
}

impl<T: DeviceRepr> sealed::Sealed for DeviceBuffer<'_, T> {
    fn raw(&self, _: sealed::Token) -> RawSlice {
        self.raw
    }
}
impl<'s, T: DeviceRepr> DeviceMemory<'s, T> for DeviceBuffer<'s, T> {}
impl<'s, T: DeviceRepr> DeviceMemoryMut<'s, T> for DeviceBuffer<'s, T> {}

impl<T: DeviceRepr> Drop for DeviceBuffer<'_, T> {
    fn drop(&mut self) {
        if self.raw.ptr != 0 {
            // SAFETY: `ptr` came from `cuMemAllocAsync` on `stream` and is freed once,
            // here. Every use of it was enqueued on the same stream (the brand keeps it
            // in its scope, and views borrow the buffer), so the free is ordered after
            // all of them; the stream outlives the buffer (the scope borrows it). The
            // free names its stream, so it does not depend on the current context.
            let freed = unsafe { result::free_async(self.raw.ptr, self.stream) };
            // A failed free cannot be reported from `drop`; it leaks the allocation.
            let _ = freed.call("cuMemFreeAsync");
        }
    }
}

impl<T: DeviceRepr> std::fmt::Debug for DeviceBuffer<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &self.raw.ptr)
            .field("len", &self.raw.len)
            .finish()
    }
}
