//! Copies between host and device memory, device-to-device copies, and fills, all
//! enqueued on the scope's stream.
//!
//! The borrow lengths are the safety argument: a host source is borrowed `&'env [T]`
//! (readable, not writable or freeable, until the final synchronisation of the scope
//! that owns `'env`) and a host destination `&'env mut [T]` (no host access at all
//! until [`Pending::wait`] or that synchronisation). `'env` rather than the brand `'s`
//! because a [forked](Scope::fork) scope's work is joined by an event, not by the host:
//! only the outermost scope's synchronisation covers it, and `'env` lasts until then.
//! Device memory needs only call-length borrows, since all of a scope's device work
//! runs in order on its one stream.

use cudarc::driver::{result, sys};

use crate::buffer::DeviceBuffer;
use crate::error::{byte_len, DriverResultExt, Error, Result};
use crate::pending::Pending;
use crate::repr::DeviceRepr;
use crate::scope::Scope;
use crate::staging;
use crate::view::{DeviceMemory, DeviceMemoryMut};

impl<'s, 'env> Scope<'s, 'env> {
    /// Allocates device memory and copies `src` into it.
    ///
    /// `src` stays borrowed (readable, not writable) until the scope ends.
    pub fn upload<T: DeviceRepr>(&'s self, src: &'env [T]) -> Result<DeviceBuffer<'s, T>> {
        let mut buf = self.alloc(src.len())?;
        self.copy_to_device(src, &mut buf)?;
        Ok(buf)
    }

    /// Copies host memory into device memory of the same length, asynchronously.
    ///
    /// Any host memory works (pageable, pinned, on the stack). `src` stays borrowed
    /// (readable, not writable or freeable) until the scope ends.
    ///
    /// From pinned memory ([`PinnedBuffer`](crate::PinnedBuffer)) the copy is one DMA
    /// and the call returns at once. From pageable memory the call returns once the
    /// data has been copied out of `src` (as the driver's own pageable path does): from
    /// 1 MiB up through the device's pinned staging blocks on several threads,
    /// overlapped with the DMA, below that through the driver (see [pinned and pageable
    /// host memory](crate#pinned-and-pageable-host-memory)). The DMA itself may still be
    /// running when it returns.
    pub fn copy_to_device<T: DeviceRepr>(
        &'s self,
        src: &'env [T],
        dst: &mut impl DeviceMemoryMut<'s, T>,
    ) -> Result<()> {
        let dst = dst.raw(crate::view::sealed::TOKEN);
        same_len("copy_to_device", src.len(), dst.len)?;
        if dst.len == 0 {
            return Ok(());
        }
        if staging::try_upload(
            self.raw,
            &self.device().inner,
            staging::as_bytes(src),
            dst.ptr,
        )? {
            return Ok(());
        }
        // SAFETY: `dst` is device memory of `src.len()` elements of `T` valid on this
        // stream (branded `'s`, borrowed for the call, and any free of it is ordered after
        // this copy on the same stream). `src` is borrowed for `'env`, so it is neither
        // written nor freed before the outermost scope synchronises its stream, which
        // (directly, or through the event joins of forks) is ordered after this copy.
        unsafe { result::memcpy_htod_async(dst.ptr, src, self.raw) }.call("cuMemcpyHtoDAsync")
    }

    /// Copies device memory into host memory of the same length, asynchronously.
    ///
    /// Returns a [`Pending`] holding `dst`; [`Pending::wait`] hands it back once the copy
    /// has landed. Until then (or until the scope ends) the host cannot touch `dst`.
    ///
    /// Into pinned memory ([`PinnedBuffer`](crate::PinnedBuffer)) the copy is one DMA
    /// and the call returns at once. Into pageable memory the call returns only once the
    /// copy has completed, as the driver's own pageable path does (so the `Pending` is
    /// ready at once): from 1 MiB up through the device's pinned staging blocks on
    /// several threads, overlapped with the DMA, below that through the driver (see
    /// [pinned and pageable host memory](crate#pinned-and-pageable-host-memory)).
    /// Either way it waits only for this stream's work, never for the device.
    pub fn copy_to_host<T: DeviceRepr>(
        &'s self,
        src: &impl DeviceMemory<'s, T>,
        dst: &'env mut [T],
    ) -> Result<Pending<'s, &'env mut [T]>> {
        let src = src.raw(crate::view::sealed::TOKEN);
        same_len("copy_to_host", src.len, dst.len())?;
        if src.len == 0 {
            return Ok(Pending::ready(dst));
        }
        let device = &self.device().inner;
        if staging::try_download(self.raw, device, src.ptr, staging::as_bytes_mut(dst))? {
            // Every byte of `dst` is written: the copy is complete.
            return Ok(Pending::ready(dst));
        }
        // SAFETY: `src` is device memory of `dst.len()` elements valid on this stream
        // (see `copy_to_device`). `dst` is borrowed mutably for `'env`: no host code can
        // read, write, move or free it until `Pending::wait` has synchronised on an event
        // recorded after this copy, or the outermost scope has synchronised its stream,
        // which is ordered after this copy (directly, or through fork joins). Any bytes the
        // DMA writes are a valid `T` (`T: DeviceRepr`).
        unsafe { result::memcpy_dtoh_async(dst, src.ptr, self.raw) }.call("cuMemcpyDtoHAsync")?;
        Pending::record(&self.stream.device.inner, self.raw, dst)
    }

    /// Copies device memory to device memory of the same length, asynchronously.
    pub fn copy_device<T: DeviceRepr>(
        &'s self,
        src: &impl DeviceMemory<'s, T>,
        dst: &mut impl DeviceMemoryMut<'s, T>,
    ) -> Result<()> {
        let (src, dst) = (
            src.raw(crate::view::sealed::TOKEN),
            dst.raw(crate::view::sealed::TOKEN),
        );
        same_len("copy_device", src.len, dst.len)?;
        let bytes = byte_len::<T>(dst.len)?;
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: both ranges are device memory of `bytes` bytes valid on this stream
        // (branded `'s`, borrowed for the call). They cannot overlap: `dst` is borrowed
        // mutably and `src` shared in the same call, and views of one allocation are only
        // handed out as disjoint `&mut` or shared `&` ranges.
        unsafe { result::memcpy_dtod_async(dst.ptr, src.ptr, bytes, self.raw) }
            .call("cuMemcpyDtoDAsync")
    }

    /// Sets every byte of `dst` to zero, asynchronously.
    pub fn zero<T: DeviceRepr>(&'s self, dst: &mut impl DeviceMemoryMut<'s, T>) -> Result<()> {
        let dst = dst.raw(crate::view::sealed::TOKEN);
        let bytes = byte_len::<T>(dst.len)?;
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: `dst` is `bytes` bytes of device memory valid on this stream; all-zero
        // bytes are a valid `T` (`T: DeviceRepr`).
        unsafe { result::memset_d8_async(dst.ptr, 0, bytes, self.raw) }.call("cuMemsetD8Async")
    }

    /// Sets every element of `dst` to `value`, asynchronously, with the driver's memset
    /// (one call for 1-, 2- and 4-byte types and for values whose 4-byte words are all
    /// equal; one strided call per 4-byte word, or per byte, otherwise).
    pub fn fill<T: DeviceRepr>(
        &'s self,
        dst: &mut impl DeviceMemoryMut<'s, T>,
        value: T,
    ) -> Result<()> {
        let dst = dst.raw(crate::view::sealed::TOKEN);
        if dst.len == 0 {
            return Ok(());
        }
        let bytes = value_bytes(&value);
        let size = bytes.len();
        let words: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        match (bytes, words.as_slice()) {
            ([b], _) => self.memset_d8(dst.ptr, *b, dst.len),
            ([b0, b1], _) => self.memset_d16(dst.ptr, u16::from_ne_bytes([*b0, *b1]), dst.len),
            (_, [first, rest @ ..])
                if size.is_multiple_of(4) && rest.iter().all(|w| w == first) =>
            {
                self.memset_d32(dst.ptr, *first, dst.len * words.len())
            }
            _ if size.is_multiple_of(4) => words.iter().enumerate().try_for_each(|(i, &w)| {
                self.memset_strided_d32(dst.ptr + 4 * i as u64, size, w, dst.len)
            }),
            _ => bytes.iter().enumerate().try_for_each(|(i, &b)| {
                self.memset_strided_d8(dst.ptr + i as u64, size, b, dst.len)
            }),
        }
    }

    fn memset_d8(&self, ptr: sys::CUdeviceptr, value: u8, count: usize) -> Result<()> {
        // SAFETY: callers pass `count` bytes of device memory valid on this stream.
        unsafe { result::memset_d8_async(ptr, value, count, self.raw) }.call("cuMemsetD8Async")
    }

    fn memset_d16(&self, ptr: sys::CUdeviceptr, value: u16, count: usize) -> Result<()> {
        // SAFETY: callers pass `count` 2-byte-aligned 16-bit words of device memory
        // valid on this stream (a slice of a 2-byte `T` at an element boundary of an
        // allocation, which the driver aligns to at least 256 bytes).
        unsafe { sys::cuMemsetD16Async(ptr, value, count, self.raw) }
            .result()
            .call("cuMemsetD16Async")
    }

    fn memset_d32(&self, ptr: sys::CUdeviceptr, value: u32, count: usize) -> Result<()> {
        // SAFETY: callers pass `count` 4-byte-aligned 32-bit words of device memory valid
        // on this stream (see `memset_d16` for the alignment).
        unsafe { sys::cuMemsetD32Async(ptr, value, count, self.raw) }
            .result()
            .call("cuMemsetD32Async")
    }

    /// Sets one 32-bit word in each of `rows` elements of `pitch` bytes.
    fn memset_strided_d32(
        &self,
        ptr: sys::CUdeviceptr,
        pitch: usize,
        value: u32,
        rows: usize,
    ) -> Result<()> {
        // SAFETY: `rows` elements of `pitch` bytes starting at `ptr` rounded down to the
        // element are device memory valid on this stream; each row writes 4 bytes inside
        // its own element, 4-byte aligned.
        unsafe { sys::cuMemsetD2D32Async(ptr, pitch, value, 1, rows, self.raw) }
            .result()
            .call("cuMemsetD2D32Async")
    }

    /// Sets one byte in each of `rows` elements of `pitch` bytes.
    fn memset_strided_d8(
        &self,
        ptr: sys::CUdeviceptr,
        pitch: usize,
        value: u8,
        rows: usize,
    ) -> Result<()> {
        // SAFETY: as `memset_strided_d32`, one byte per element.
        unsafe { sys::cuMemsetD2D8Async(ptr, pitch, value, 1, rows, self.raw) }
            .result()
            .call("cuMemsetD2D8Async")
    }
}

/// The bytes of a `DeviceRepr` value.
fn value_bytes<T: DeviceRepr>(value: &T) -> &[u8] {
    // SAFETY: `value` is a valid reference to `size_of::<T>()` bytes, and `T: DeviceRepr`
    // has no padding, so every byte is initialised; `u8` has alignment 1.
    unsafe {
        std::slice::from_raw_parts((value as *const T).cast::<u8>(), std::mem::size_of::<T>())
    }
}

/// `Ok` when both lengths agree, else [`Error::LengthMismatch`].
#[inline]
fn same_len(what: &'static str, source_len: usize, destination_len: usize) -> Result<()> {
    if source_len == destination_len {
        Ok(())
    } else {
        Err(Error::LengthMismatch {
            what,
            source_len,
            destination_len,
        })
    }
}
