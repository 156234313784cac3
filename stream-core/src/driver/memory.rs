//! Raw memory operations, stream-ordered: copies between host and device memory, device
//! copies, memsets and frees. Each is an `unsafe fn`: only its caller knows that the
//! memory is valid for the operation and stays valid until the operation has run.
//! Also the two address lookups that tell pinned host memory from pageable memory.
//!
//! Every operation names its stream, and the copies name their addresses, which UVA
//! makes unique across devices. Which context is current does not change what they do,
//! but the driver refuses a copy (`CUDA_ERROR_INVALID_VALUE`, measured with driver 580
//! on 2 H200s: host to device, device to host and device to device alike) on a stream
//! of another context than the current one, while memsets, allocations, frees and
//! launches go through. So the copies run through [`PrimaryContext::run_as_current`]:
//! directly under the hint, once more with the stream's context bound if that fails.
//! Inside a fork onto another device, the parent's copies take that second path.
//!
//! [`PrimaryContext::run_as_current`]: super::context::PrimaryContext::run_as_current

use std::ffi::c_void;

use cudarc::driver::{result, sys};

use super::stream::RawStream;
use crate::error::{DriverResultExt, Result};

/// Enqueues a copy of `bytes` bytes from host memory at `src` to device memory at
/// `dst` on `stream`.
///
/// # Safety
///
/// * `dst..dst + bytes` is device memory that stays allocated, and that no other work
///   reads or writes, until the copy has run (later work on it is ordered after the
///   copy, on `stream` or by an event).
/// * `src..src + bytes` is host memory valid for reads that nothing writes or frees
///   until the copy has run. (From pageable memory the driver has copied it out when
///   this returns; from pinned memory the DMA reads it later, so the host must not
///   touch it until a synchronisation of `stream` or an event after the copy.)
pub(crate) unsafe fn copy_host_to_device(
    dst: sys::CUdeviceptr,
    src: *const u8,
    bytes: usize,
    stream: &RawStream,
) -> Result<()> {
    stream.context().run_as_current(|| {
        // SAFETY: the caller's contract above (a refused call enqueued nothing, so the
        // retry copies once); `stream` is live (borrowed).
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast::<c_void>(), bytes, stream.raw()) }
            .result()
            .call("cuMemcpyHtoDAsync")
    })
}

/// Enqueues a copy of `bytes` bytes from device memory at `src` to host memory at `dst`
/// on `stream`.
///
/// # Safety
///
/// * `src..src + bytes` is device memory that stays allocated, and that no other work
///   writes, until the copy has run.
/// * `dst..dst + bytes` is host memory valid for writes, which nothing reads, writes or
///   frees until the copy has run (a synchronisation of `stream`, or an event after the
///   copy), and in which any bytes are valid values of the type it holds.
pub(crate) unsafe fn copy_device_to_host(
    dst: *mut u8,
    src: sys::CUdeviceptr,
    bytes: usize,
    stream: &RawStream,
) -> Result<()> {
    stream.context().run_as_current(|| {
        // SAFETY: the caller's contract above (a refused call enqueued nothing, so the
        // retry copies once); `stream` is live (borrowed).
        unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast::<c_void>(), src, bytes, stream.raw()) }
            .result()
            .call("cuMemcpyDtoHAsync")
    })
}

/// Enqueues a copy of `bytes` bytes of device memory from `src` to `dst` on `stream`.
///
/// # Safety
///
/// Both ranges are device memory that stays allocated until the copy has run; they do
/// not overlap; no other work writes `src` or touches `dst` meanwhile.
pub(crate) unsafe fn copy_device_to_device(
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    bytes: usize,
    stream: &RawStream,
) -> Result<()> {
    stream.context().run_as_current(|| {
        // SAFETY: the caller's contract above (a refused call enqueued nothing, so the
        // retry copies once); `stream` is live (borrowed).
        unsafe { result::memcpy_dtod_async(dst, src, bytes, stream.raw()) }
            .call("cuMemcpyDtoDAsync")
    })
}

/// What a memset writes (see [`memset`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Memset {
    /// `count` bytes, each set to the value.
    Bytes(u8),
    /// `count` 2-byte words.
    Words16(u16),
    /// `count` 4-byte words.
    Words32(u32),
    /// One 4-byte word at the start of each of `count` rows of `pitch` bytes.
    Strided32 {
        /// The word.
        value: u32,
        /// Bytes from one row to the next.
        pitch: usize,
    },
    /// One byte at the start of each of `count` rows of `pitch` bytes.
    Strided8 {
        /// The byte.
        value: u8,
        /// Bytes from one row to the next.
        pitch: usize,
    },
}

/// Enqueues a memset of `count` units (bytes, words or rows, see [`Memset`]) at `dst`
/// on `stream`.
///
/// # Safety
///
/// Every byte the memset writes (`count` bytes, `count` 2- or 4-byte words, or one
/// byte or 4-byte word at the start of each of `count` rows of `pitch` bytes) is device
/// memory that stays allocated until the memset has run and that no other work touches
/// meanwhile; words are aligned to their size; the bytes written leave valid values of
/// the type the memory holds.
pub(crate) unsafe fn memset(
    dst: sys::CUdeviceptr,
    fill: Memset,
    count: usize,
    stream: &RawStream,
) -> Result<()> {
    let stream = stream.raw();
    let status = match fill {
        // SAFETY: the caller's contract above; `stream` is live (borrowed).
        Memset::Bytes(v) => unsafe { sys::cuMemsetD8Async(dst, v, count, stream) },
        // SAFETY: as above.
        Memset::Words16(v) => unsafe { sys::cuMemsetD16Async(dst, v, count, stream) },
        // SAFETY: as above.
        Memset::Words32(v) => unsafe { sys::cuMemsetD32Async(dst, v, count, stream) },
        // SAFETY: as above.
        Memset::Strided32 { value, pitch } => unsafe {
            sys::cuMemsetD2D32Async(dst, pitch, value, 1, count, stream)
        },
        // SAFETY: as above.
        Memset::Strided8 { value, pitch } => unsafe {
            sys::cuMemsetD2D8Async(dst, pitch, value, 1, count, stream)
        },
    };
    status.result().call("cuMemset*Async")
}

/// Enqueues the free of a stream-ordered allocation on `stream`.
///
/// # Safety
///
/// `ptr` was returned by a stream-ordered allocation and is freed once; every use of it
/// is ordered before this point of `stream` (enqueued on it earlier, or joined into it
/// by an event), and nothing uses it afterwards.
pub(crate) unsafe fn free_async(ptr: sys::CUdeviceptr, stream: &RawStream) -> Result<()> {
    // SAFETY: the caller's contract above; `stream` is live (borrowed).
    unsafe { result::free_async(ptr, stream.raw()) }.call("cuMemFreeAsync")
}

/// The `cuMemHostAlloc` flags of the allocation holding `address`, or `None` when it is
/// not such an allocation (of any context or library). Only a table lookup: the memory
/// is not accessed.
pub(crate) fn host_alloc_flags(address: *const u8) -> Option<u32> {
    let mut flags: std::ffi::c_uint = 0;
    // SAFETY: the call only looks the address up in the driver's tables (it does not
    // access the memory) and writes one `unsigned int` to `flags`, a live `c_uint`.
    let status = unsafe { sys::cuMemHostGetFlags(&raw mut flags, address.cast_mut().cast()) };
    (status == sys::CUresult::CUDA_SUCCESS).then_some(flags)
}

/// `cuPointerGetAttribute(MEMORY_TYPE)` of `address`, as the raw `CUmemorytype` value, or
/// `None` when the driver does not know the address. Only a table lookup.
pub(crate) fn memory_type(address: *const u8) -> Option<u32> {
    let mut memory_type: u32 = 0;
    // SAFETY: the call only looks the address up in the driver's tables (it does not
    // dereference it) and writes one `CUmemorytype`, a 32-bit C enum, to `memory_type`, a
    // live `u32` (read as a plain integer, never as the Rust enum).
    let status = unsafe {
        sys::cuPointerGetAttribute(
            (&raw mut memory_type).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            address as sys::CUdeviceptr,
        )
    };
    (status == sys::CUresult::CUDA_SUCCESS).then_some(memory_type)
}

/// The raw value of `CU_MEMORYTYPE_HOST`, to compare [`memory_type`] with.
pub(crate) const MEMORY_TYPE_HOST: u32 = sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32;
