//! [`StreamRange`]: device bytes lent to the work of one stream for a while, the
//! argument of the staged copies (`host/staging`) in place of a raw pointer and a
//! promise.

use std::sync::Arc;

use cudarc::driver::sys;

use super::brand::ScopeToken;
use super::view::RawSlice;
use super::{DeviceMemory, DeviceMemoryMut, DeviceRepr};
use crate::device::DeviceInner;
use crate::driver::stream::RawStream;
use crate::sealed::TOKEN;

/// `len` bytes of device memory at `ptr` that work enqueued on `stream`, a stream of
/// `device`, may use during `'a`: they stay allocated until that work has completed,
/// no other work writes them meanwhile (nor reads them, for a range made
/// [`writable`](Self::writable)), and any later use or free of them is ordered after
/// that work on `stream`.
///
/// Made safely from a scope's memory ([`writable`](Self::writable),
/// [`readable`](Self::readable)), whose brand and borrow are the proof, or, for memory a
/// function allocated itself, with [`new`](Self::new).
#[derive(Clone, Copy)]
pub(crate) struct StreamRange<'a> {
    ptr: sys::CUdeviceptr,
    len: usize,
    stream: &'a RawStream,
    device: &'a Arc<DeviceInner>,
    /// `false` for a range made [`readable`](Self::readable): work may only read it.
    writable: bool,
}

impl<'a> StreamRange<'a> {
    /// `memory`'s bytes, which the scope of `token` may read and write on its stream
    /// while they are borrowed here. The proof: `memory` is branded `'s`, so it is the
    /// scope's own (or lent to it, the lender waiting for its stream), allocated until
    /// the scope's stream has finished with it (a buffer's free is ordered after its
    /// work on that stream; the outermost scope synchronises before `'env` ends), and
    /// borrowed mutably for `'a`, so no other work of the scope can be enqueued on it
    /// meanwhile; all of the scope's work runs in order on its one stream.
    pub(crate) fn writable<'s, 'env, T: DeviceRepr>(
        token: &'a ScopeToken<'s, 'env>,
        memory: &'a mut impl DeviceMemoryMut<'s, T>,
    ) -> Self {
        Self::of::<T>(token, memory.raw(TOKEN), true)
    }

    /// [`writable`](Self::writable) for memory the work only reads: borrowed shared,
    /// so the scope can enqueue nothing that writes it while the borrow lasts.
    pub(crate) fn readable<'s, 'env, T: DeviceRepr>(
        token: &'a ScopeToken<'s, 'env>,
        memory: &'a impl DeviceMemory<'s, T>,
    ) -> Self {
        Self::of::<T>(token, memory.raw(TOKEN), false)
    }

    fn of<T: DeviceRepr>(token: &'a ScopeToken<'_, '_>, raw: RawSlice, writable: bool) -> Self {
        let stream = token.stream();
        StreamRange {
            ptr: raw.ptr,
            // A view's bytes fit in its allocation, so in `usize`.
            len: raw.len * std::mem::size_of::<T>(),
            stream: &stream.raw,
            device: &stream.device.inner,
            writable,
        }
    }

    /// # Safety
    ///
    /// `ptr..ptr + len` is device memory as the type's docs say, for the work enqueued
    /// on `stream` during `'a` (it may read and write it), and `stream` is a stream of
    /// `device`.
    pub(crate) unsafe fn new(
        ptr: sys::CUdeviceptr,
        len: usize,
        stream: &'a RawStream,
        device: &'a Arc<DeviceInner>,
    ) -> Self {
        StreamRange {
            ptr,
            len,
            stream,
            device,
            writable: true,
        }
    }

    /// The first byte's address.
    pub(crate) fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The stream whose work may use it.
    pub(crate) fn stream(&self) -> &'a RawStream {
        self.stream
    }

    /// `true` unless it was made [`readable`](Self::readable) (work may only read it).
    pub(crate) fn is_writable(&self) -> bool {
        self.writable
    }

    /// That stream's device.
    pub(crate) fn device(&self) -> &'a Arc<DeviceInner> {
        self.device
    }
}
