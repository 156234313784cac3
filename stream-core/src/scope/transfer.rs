//! Copies between host and device memory, and device-to-device copies, all enqueued on
//! the scope's stream.
//!
//! The borrow lengths are the safety argument: a host source is borrowed `&'env [T]`
//! (readable, not writable or freeable, until the final synchronisation of the scope
//! that owns `'env`) and a host destination `&'env mut [T]` (no host access at all
//! until [`Pending::wait`] or that synchronisation). `'env` rather than the brand `'s`
//! because a [forked](Scope::fork) scope's work is joined by an event, not by the host:
//! only the outermost scope's synchronisation covers it, and `'env` lasts until then.
//! Device memory needs only call-length borrows, since all of a scope's device work
//! runs in order on its one stream.

use crate::driver::memory::{copy_device_to_device, copy_device_to_host, copy_host_to_device};
use crate::error::{byte_len, Error, Result};
use crate::host::staging::{self, detection::is_pageable, StagedDownload};
use crate::memory::{
    as_bytes, as_bytes_mut, DeviceBuffer, DeviceMemory, DeviceMemoryMut, DeviceRepr, StreamRange,
};
use crate::scope::{Pending, Scope};
use crate::sealed::TOKEN;
use crate::trace::Category;

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
        Error::check_lengths("copy_to_device", src.len(), dst.raw(TOKEN).len)?;
        if src.is_empty() {
            return Ok(());
        }
        let src_bytes = as_bytes(src);
        self.bound_pageable_copy(src_bytes)?;
        let dst = StreamRange::writable(&self.token, dst);
        let bytes = Some(src_bytes.len() as u64);
        self.traced("copy_to_device", Category::Copy, bytes, || {
            if staging::try_upload(dst, src_bytes, self.chunk_trace())? {
                return Ok(());
            }
            let (to, len) = (dst.ptr(), src_bytes.len());
            // SAFETY: `dst` is as many bytes as `src_bytes` (the lengths checked above),
            // lent to its stream, this scope's, for writing while its borrow lasts
            // (`StreamRange::writable`: branded `'s`, borrowed mutably for the call). `src`
            // is borrowed for `'env`, so it is neither written nor freed before the
            // outermost scope synchronises its stream, which (directly, or through the event
            // joins of forks) is ordered after this copy.
            unsafe { copy_host_to_device(to, src_bytes.as_ptr(), len, dst.stream()) }
        })
    }

    /// Copies device memory into host memory of the same length, asynchronously.
    ///
    /// Returns a [`Pending`] holding `dst`; [`Pending::wait`] hands it back once the copy
    /// has landed. Until then (or until the scope ends) the host cannot touch `dst`.
    ///
    /// Into pinned memory ([`PinnedBuffer`](crate::PinnedBuffer)) the copy is one DMA
    /// and the call returns at once. Into pageable memory of 1 MiB or more the copy is
    /// staged and the call returns at once too: it snapshots `src` on the device, and a
    /// background thread copies each chunk out through the device's pinned staging
    /// blocks as its DMA lands (see [pinned and pageable host
    /// memory](crate#pinned-and-pageable-host-memory)); [`Pending::wait`] and the
    /// scope's end wait for that copy-out. Smaller pageable copies take the driver's
    /// path, which returns once the copy has landed. Either way the call waits only for
    /// this stream's work, never for the device.
    pub fn copy_to_host<T: DeviceRepr>(
        &'s self,
        src: &impl DeviceMemory<'s, T>,
        dst: &'env mut [T],
    ) -> Result<Pending<'s, &'env mut [T]>> {
        Error::check_lengths("copy_to_host", src.raw(TOKEN).len, dst.len())?;
        let src = StreamRange::readable(&self.token, src);
        let dst = match Pending::of_empty(dst) {
            Ok(nothing_to_copy) => return Ok(nothing_to_copy),
            Err(dst) => dst,
        };
        let bytes = Some(as_bytes(dst).len() as u64);
        self.traced("copy_to_host", Category::Copy, bytes, || {
            let stream = &self.stream.raw;
            // SAFETY: `dst` is borrowed mutably for `'env` and moved into the `Pending`
            // below, which no one can read before the job is done (`wait`), and which
            // registers the job with this scope's outstanding copy-outs, which the
            // outermost scope waits for before `'env` ends; any bytes are valid `T`s.
            let started = unsafe { staging::start_staged_download(src, as_bytes_mut(dst)) }?;
            match started {
                StagedDownload::Started(job) => {
                    return Ok(Pending::staged(dst, job, self.outstanding));
                }
                StagedDownload::NotStaged => {}
                StagedDownload::NoSnapshot => {
                    self.bound_pageable_copy(as_bytes(dst))?;
                    if staging::try_download(src, as_bytes_mut(dst), self.chunk_trace())? {
                        // The staged pipeline returned: its host copies wrote every byte
                        // of `dst`, its DMAs went into pinned staging blocks.
                        return Ok(Pending::complete(dst));
                    }
                }
            }
            self.bound_pageable_copy(as_bytes(dst))?;
            let context = &self.stream.device.inner.context;
            Pending::after(context, self.outstanding, stream, dst, |stream, dst| {
                let dst = as_bytes_mut(dst);
                // SAFETY: `src` is as many bytes as `dst` (the lengths checked above), lent
                // to this scope's stream, `stream`, for reading (`StreamRange::readable`:
                // branded `'s`, borrowed for the call), and the copy is enqueued on it,
                // after which `Pending::after` records its event. `dst` is borrowed mutably
                // for `'env`: no host code can read, write, move or free it until
                // `Pending::wait` has synchronised on that event, or the outermost scope has
                // synchronised its stream, which is ordered after this copy (directly, or
                // through fork joins). Any bytes the DMA writes are a valid `T`
                // (`T: DeviceRepr`).
                unsafe { copy_device_to_host(dst.as_mut_ptr(), src.ptr(), dst.len(), stream) }
            })
        })
    }

    /// Before a copy between device memory and pageable `host` memory, in a scope that
    /// issued an NCCL collective: such a copy may hold the host until the stream reaches
    /// it (the driver's pageable path and the staging ring both wait for the stream's
    /// earlier work), and a collective whose peer died never lets it. So that earlier
    /// work is waited for first, bounded by the communicator's watch as the scope's end
    /// is. Pinned memory, and scopes without a collective, skip this.
    fn bound_pageable_copy(&'s self, host: &[u8]) -> Result<()> {
        if !self.outstanding.is_watched() {
            return Ok(());
        }
        let pageable = {
            let _bound = self.device().inner.bind()?;
            is_pageable(host)
        };
        if pageable {
            // A failed query (`Ok(false)`) leaves it to the copy, which reports the error.
            self.outstanding.wait_watched(self.stream).map(drop)
        } else {
            Ok(())
        }
    }

    /// Copies device memory to device memory of the same length, asynchronously.
    pub fn copy_device<T: DeviceRepr>(
        &'s self,
        src: &impl DeviceMemory<'s, T>,
        dst: &mut impl DeviceMemoryMut<'s, T>,
    ) -> Result<()> {
        let (src, dst) = (src.raw(TOKEN), dst.raw(TOKEN));
        Error::check_lengths("copy_device", src.len, dst.len)?;
        let bytes = byte_len::<T>(dst.len)?;
        if bytes == 0 {
            return Ok(());
        }
        self.traced("copy_device", Category::Copy, Some(bytes as u64), || {
            // SAFETY: both ranges are device memory of `bytes` bytes valid on this stream
            // (branded `'s`, borrowed for the call). They cannot overlap: `dst` is
            // borrowed mutably and `src` shared in the same call, and views of one
            // allocation are only handed out as disjoint `&mut` or shared `&` ranges.
            unsafe { copy_device_to_device(dst.ptr, src.ptr, bytes, &self.stream.raw) }
        })
    }
}
