//! [`Enqueue`]: where stream-ordered GPU work is issued, a [`Scope`] (which runs it on
//! its stream) or a graph [`Capture`] (which records it). Its launch half,
//! [`LaunchTarget`], and the one launch entry that `#[kernel]` wrappers call for both
//! live beside the launch's arguments, in `scope/launch.rs`.

use cudarc::driver::sys;

use crate::device::{Device, Stream};
use crate::error::Result;
use crate::graph::Capture;
use crate::kernel::LaunchConfig;
use crate::memory::{DeviceBuffer, DeviceMemory, DeviceMemoryMut, DeviceRepr};
use crate::scope::{KernelArgs, LaunchTarget, Scope};
use crate::sealed::{self, Token};

/// Where stream-ordered GPU work is issued: a [`Scope`], which runs it on its stream, or
/// a graph [`Capture`], which records it into a graph to be replayed later. Sealed.
///
/// `#[kernel]` wrappers, the `kernels` crate and code that should work in both take
/// `s: &'s impl Enqueue<'s>`; device memory branded `'s` then belongs to that scope or
/// capture. Only what both can do is here: allocation, fills, device copies and
/// launches. Host memory goes in and out through the scope's or the capture's own
/// methods, since a capture copies only from and to pinned memory its graph holds.
///
/// ```no_run
/// use stream_core::{DeviceMemoryMut, Enqueue, Result};
/// fn clear_twice<'s>(s: &'s impl Enqueue<'s>, y: &mut impl DeviceMemoryMut<'s, f32>) -> Result<()> {
///     let mut tmp = s.alloc_zeroed::<f32>(y.len())?;
///     s.fill(&mut tmp, 2.0)?;
///     s.copy_device(&tmp, y)?;
///     s.zero(y)
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a scope or a graph capture",
    label = "expected the scope (`s` in `scope(&stream, |s| ...)`) or a graph capture (`g` in `s.capture(held, |g, views| ...)`)"
)]
pub trait Enqueue<'s>: LaunchTarget<'s> {
    /// Allocates `len` elements (see [`Scope::alloc`]; in a capture the allocation is
    /// the graph's own, made and freed at every replay).
    fn alloc<T: DeviceRepr>(&'s self, len: usize) -> Result<DeviceBuffer<'s, T>>;

    /// Allocates `len` zeroed elements (see [`Scope::alloc_zeroed`]).
    fn alloc_zeroed<T: DeviceRepr>(&'s self, len: usize) -> Result<DeviceBuffer<'s, T>>;

    /// Sets every byte of `dst` to zero (see [`Scope::zero`]).
    fn zero<T: DeviceRepr>(&'s self, dst: &mut impl DeviceMemoryMut<'s, T>) -> Result<()>;

    /// Sets every element of `dst` to `value` (see [`Scope::fill`]).
    fn fill<T: DeviceRepr>(&'s self, dst: &mut impl DeviceMemoryMut<'s, T>, value: T)
        -> Result<()>;

    /// Copies device memory to device memory of the same length (see
    /// [`Scope::copy_device`]).
    fn copy_device<T: DeviceRepr>(
        &'s self,
        src: &impl DeviceMemory<'s, T>,
        dst: &mut impl DeviceMemoryMut<'s, T>,
    ) -> Result<()>;

    /// `Ok` when `memory` (the device of memory or of a library handle) is the device
    /// this work runs on, else [`Error::DeviceMismatch`](crate::Error::DeviceMismatch)
    /// (see [`Device::ensure_same_device`]).
    fn ensure_same_device(&self, memory: &Device) -> Result<()>;

    /// The streaming multiprocessors of the device this work runs on (see
    /// [`Device::multiprocessor_count`]), for choosing a launch shape.
    fn multiprocessor_count(&self) -> u32;

    /// The stream the work goes on (for [`interop::raw_stream_of`](crate::interop::raw_stream_of)).
    #[doc(hidden)]
    fn raw_stream(&self, _: Token) -> sys::CUstream;

    /// The stream whose scratch memory library calls may borrow (for
    /// [`interop::with_stream_scratch`](crate::interop::with_stream_scratch)): a scope's;
    /// `None` for a capture, whose graph must own the memory its replays use.
    #[doc(hidden)]
    fn scratch_stream(&self, _: Token) -> Option<&Stream>;
}

/// The operations a scope and a capture both have as inherent methods of the same names
/// and signatures, forwarded to them (the two impls differ only in the rest).
macro_rules! forward_operations {
    ($enqueuer:ident, $brand:lifetime) => {
        fn alloc<T: DeviceRepr>(&$brand self, len: usize) -> Result<DeviceBuffer<$brand, T>> {
            $enqueuer::alloc(self, len)
        }

        fn alloc_zeroed<T: DeviceRepr>(
            &$brand self,
            len: usize,
        ) -> Result<DeviceBuffer<$brand, T>> {
            $enqueuer::alloc_zeroed(self, len)
        }

        fn zero<T: DeviceRepr>(
            &$brand self,
            dst: &mut impl DeviceMemoryMut<$brand, T>,
        ) -> Result<()> {
            $enqueuer::zero(self, dst)
        }

        fn fill<T: DeviceRepr>(
            &$brand self,
            dst: &mut impl DeviceMemoryMut<$brand, T>,
            value: T,
        ) -> Result<()> {
            $enqueuer::fill(self, dst, value)
        }

        fn copy_device<T: DeviceRepr>(
            &$brand self,
            src: &impl DeviceMemory<$brand, T>,
            dst: &mut impl DeviceMemoryMut<$brand, T>,
        ) -> Result<()> {
            $enqueuer::copy_device(self, src, dst)
        }
    };
}

impl<'s, 'env> Enqueue<'s> for Scope<'s, 'env> {
    forward_operations!(Scope, 's);

    fn ensure_same_device(&self, memory: &Device) -> Result<()> {
        self.device().ensure_same_device(memory)
    }

    fn multiprocessor_count(&self) -> u32 {
        self.device().multiprocessor_count()
    }

    fn raw_stream(&self, _: Token) -> sys::CUstream {
        // As `interop::raw_stream`: the handle leaves the crate, which the stream notes.
        self.stream.expose_handle()
    }

    #[inline(always)]
    fn scratch_stream(&self, _: Token) -> Option<&Stream> {
        Some(self.stream)
    }
}

impl sealed::Enqueuer for Capture<'_> {}

impl<'g> LaunchTarget<'g> for Capture<'g> {
    fn launch_kernel(
        &self,
        _: Token,
        config: LaunchConfig,
        args: KernelArgs<'_, 'g>,
    ) -> Result<()> {
        self.record_launch(config, args)
    }
}

impl<'g> Enqueue<'g> for Capture<'g> {
    forward_operations!(Capture, 'g);

    fn ensure_same_device(&self, memory: &Device) -> Result<()> {
        self.graph_device().ensure_same_device(memory)
    }

    fn multiprocessor_count(&self) -> u32 {
        self.graph_device().multiprocessor_count()
    }

    fn raw_stream(&self, _: Token) -> sys::CUstream {
        self.capture_stream().raw()
    }

    #[inline(always)]
    fn scratch_stream(&self, _: Token) -> Option<&Stream> {
        None
    }
}
