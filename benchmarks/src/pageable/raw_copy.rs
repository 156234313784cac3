//! One raw `cuMemcpyHtoDAsync` or `cuMemcpyDtoHAsync` between host memory and a raw
//! device buffer: the pageable case's raw rows (one copy, then `cuStreamSynchronize`)
//! and the contention diagnosis's DMA batches (several, then queries) enqueue it alike.
#![allow(unsafe_code)]

use std::time::Instant;

use cudarc::driver::{result, sys};

use crate::error::{Context, Error, Result};
use crate::raw::RawDeviceMem;

/// Enqueues one copy from `host` to `device` (when `up`) or back on `stream`. `host`
/// stays borrowed by the caller until it has synchronised `stream`.
pub(super) fn enqueue(
    stream: sys::CUstream,
    up: bool,
    device: &RawDeviceMem,
    host: &mut [f32],
) -> Result<()> {
    if device.bytes != std::mem::size_of_val(host) {
        return Err(Error::msg("raw copy: host and device sizes differ"));
    }
    if up {
        // SAFETY: `device` holds as many bytes as `host` (checked above); `host` is
        // borrowed until the caller has synchronised the stream.
        unsafe { result::memcpy_htod_async(device.ptr, &*host, stream) }
            .context("cuMemcpyHtoDAsync")
    } else {
        // SAFETY: as above; `host` is borrowed exclusively, so nothing reads it before
        // the caller's synchronisation.
        unsafe { result::memcpy_dtoh_async(host, device.ptr, stream) }.context("cuMemcpyDtoHAsync")
    }
}

/// Host seconds of one [`enqueue`]d copy and the synchronisation after it.
pub(super) fn timed(
    stream: sys::CUstream,
    up: bool,
    device: &RawDeviceMem,
    host: &mut [f32],
) -> Result<f64> {
    let t = Instant::now();
    let copied = enqueue(stream, up, device, host);
    // SAFETY: the stream is alive (owned by `Env`).
    unsafe { result::stream::synchronize(stream) }.context("cuStreamSynchronize")?;
    copied?;
    Ok(t.elapsed().as_secs_f64())
}
