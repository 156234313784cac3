//! A capture's copies between pinned host memory its graph holds and device memory:
//! [`Capture::upload`], [`Capture::copy_to_device`], [`Capture::copy_to_host`], and
//! [`Recorded`], what a recorded download returns.
//!
//! Each is one copy node of the graph, run at every replay. The host side is a view of
//! pinned memory the graph holds (see [`Hold`](crate::Hold)): pageable memory does not
//! satisfy the [`PinnedMemory`] bound, with a message that says why, since copying it
//! needs the host (a staged or blocking copy), which a graph cannot replay.

use crate::driver::memory::{copy_device_to_host, copy_host_to_device};
use crate::error::{byte_len, Error, Result};
use crate::graph::pinned_view::{PinnedMemory, PinnedMemoryMut};
use crate::graph::Capture;
use crate::memory::brand::{brand, Brand};
use crate::memory::{DeviceBuffer, DeviceMemory, DeviceMemoryMut, DeviceRepr};
use crate::sealed::{unavailable, TOKEN};

/// A download recorded into a graph: it runs at every replay, so there is nothing to
/// wait for while capturing. What it writes is read through
/// [`Graph::held`](crate::Graph::held) once a replay is complete.
///
/// Waiting on it is a compile error with a message that says so (see
/// `ui-tests/tests/ui/graph/wait-on-a-download-in-a-capture.rs`):
///
/// ```compile_fail,E0277
/// # use stream_core::{scope, Error, Stream};
/// # fn f(stream: &Stream) -> Result<(), Error> {
/// let mut out = stream.device().alloc_pinned::<f32>(16)?;
/// scope(stream, |s| {
///     s.capture(&mut out, |g, mut out| {
///         let x = g.alloc_zeroed::<f32>(16)?;
///         g.copy_to_host(&x, &mut out)?.wait()?; // error: nothing has run yet
///         Ok::<_, Error>(())
///     })?;
///     Ok(())
/// })
/// # }
/// ```
#[derive(Debug)]
pub struct Recorded<'g> {
    _brand: Brand<'g>,
}

impl Recorded<'_> {
    /// Not available (a compile error): the copy has not run, it runs at every replay.
    /// Wait on the [`Pending`](crate::Pending) that [`Scope::replay`](crate::Scope::replay)
    /// returns instead.
    pub fn wait(self) -> Result<()>
    where
        Self: unavailable::WaitOnReplay,
    {
        Ok(())
    }

    /// Not available (a compile error), like [`wait`](Self::wait).
    pub fn is_ready(&self) -> Result<bool>
    where
        Self: unavailable::WaitOnReplay,
    {
        Ok(false)
    }
}

impl<'g> Capture<'g> {
    /// Records an allocation of the graph's own memory and a copy of `src` into it (see
    /// [`alloc`](Self::alloc)).
    pub fn upload<S>(&'g self, src: &S) -> Result<DeviceBuffer<'g, S::Elem>>
    where
        S: PinnedMemory<'g> + ?Sized,
    {
        let mut buffer = self.alloc(src.len())?;
        self.copy_to_device(src, &mut buffer)?;
        Ok(buffer)
    }

    /// Records a copy of pinned host memory the graph holds into device memory of the
    /// same length: at every replay, the DMA reads what the host last wrote through
    /// [`Graph::held_mut`](crate::Graph::held_mut).
    pub fn copy_to_device<T: DeviceRepr>(
        &'g self,
        src: &(impl PinnedMemory<'g, Elem = T> + ?Sized),
        dst: &mut impl DeviceMemoryMut<'g, T>,
    ) -> Result<()> {
        let (src, src_bytes) = src.host_raw(TOKEN);
        let dst = dst.raw(TOKEN);
        let bytes = byte_len::<T>(dst.len)?;
        Error::check_lengths("copy_to_device", src_bytes / size_of::<T>(), dst.len)?;
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: the copy is recorded (the capture's stream is capturing), and runs at
        // each replay of the graph. `dst` is device memory of `bytes` bytes branded by
        // this capture: the graph's own allocation, valid in every replay between its
        // allocation and free nodes (recorded in stream order around this node), or a
        // `DeviceVec` the graph holds, valid for the graph's life; borrowed mutably for
        // the call, so no other node recorded meanwhile touches it. `src` is `bytes`
        // bytes of pinned host memory the graph holds: alive for the graph's life, and
        // written by the host only through `Graph::held_mut`, which needs the graph,
        // which every replay borrows exclusively until it is known complete.
        unsafe { copy_host_to_device(dst.ptr, src.cast_const(), bytes, self.capture_stream()) }
    }

    /// Records a copy of device memory into pinned host memory the graph holds, of the
    /// same length. It runs at every replay; read the result through
    /// [`Graph::held`](crate::Graph::held) once a replay is complete (the [`Recorded`]
    /// it returns has nothing to wait for).
    pub fn copy_to_host<T: DeviceRepr>(
        &'g self,
        src: &impl DeviceMemory<'g, T>,
        dst: &mut (impl PinnedMemoryMut<'g, Elem = T> + ?Sized),
    ) -> Result<Recorded<'g>> {
        let src = src.raw(TOKEN);
        let (dst, dst_bytes) = dst.host_raw(TOKEN);
        let bytes = byte_len::<T>(src.len)?;
        Error::check_lengths("copy_to_host", src.len, dst_bytes / size_of::<T>())?;
        if bytes > 0 {
            // SAFETY: recorded, run at each replay (see `copy_to_device`). `src` is
            // device memory of `bytes` bytes branded by this capture, valid in every
            // replay (as `dst` in `copy_to_device`), written by no node recorded
            // meanwhile (a write needs `&mut`). `dst` is `bytes` bytes of pinned host
            // memory the graph holds, borrowed mutably for the call (no other node of the
            // capture writes it meanwhile): alive for the graph's life and neither read
            // nor written by the host while a replay may run (the host reaches it only
            // through the graph, which each replay borrows exclusively until complete).
            // Any bytes are a valid `T`.
            unsafe { copy_device_to_host(dst, src.ptr, bytes, self.capture_stream()) }?;
        }
        Ok(Recorded { _brand: brand() })
    }
}
