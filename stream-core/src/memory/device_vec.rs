//! [`DeviceVec`]: long-lived device memory made outside scopes and brought into a scope
//! by [`Scope::attach`](crate::Scope::attach) (writable) or
//! [`Scope::attach_ref`](crate::Scope::attach_ref) (read-only).
//!
//! Creation blocks until the memory is allocated and filled, so it is ordered before
//! any use on any stream. The one exception is a vec converted from cudarc
//! (`DeviceVec::from_cudarc`), whose earlier work may still run on cudarc's streams: it
//! carries a *ready* event, which the housekeeping stream waited for at the conversion
//! and every attaching scope's stream waits for (on the GPU) when it attaches. Attaching borrows the `DeviceVec` for the whole scope, which
//! is what makes the scope's final synchronisation cover every use of it: it cannot be
//! dropped, or attached mutably elsewhere, while a scope's work on it may be pending.

use std::marker::PhantomData;

use crate::device::Device;
use crate::driver::event::RawEvent;
use crate::driver::memory::{copy_device_to_host, copy_host_to_device, memset, Memset};
use crate::driver::pool::StreamOrdered;
use crate::driver::stream::RawStream;
use crate::error::{byte_len, Result};
use crate::memory::repr::DeviceRepr;
use crate::memory::view::{element_count, RawSlice};

/// Device memory that outlives scopes, like a `Vec<T>` on the GPU. `Send` and `Sync`.
///
/// ```no_run
/// use stream_core::{scope, Device, Error};
/// # fn main() -> stream_core::Result<()> {
/// let dev = Device::new(0)?;
/// let stream = dev.new_stream()?;
/// let mut weights = dev.upload_vec(&[1.0f32, 2.0, 3.0])?;
/// let mut out = [0f32; 3];
/// scope(&stream, |s| {
///     let w = s.attach(&mut weights)?;            // DeviceSliceMut<'s, 's, f32>
///     s.copy_to_host(&w, &mut out)?.wait()?;
///     Ok::<_, Error>(())
/// })?;
/// assert_eq!(weights.to_host_vec()?, vec![1.0, 2.0, 3.0]);
/// # Ok(()) }
/// ```
pub struct DeviceVec<T: DeviceRepr> {
    /// The allocation; `None` for zero elements.
    memory: Option<StreamOrdered>,
    len: usize,
    device: Device,
    /// For a vec converted from another library's memory: an event after every earlier
    /// use of it, which a stream waits for before its first use there (see the module
    /// docs). `None` for memory this crate made, which is ready when made.
    ready: Option<RawEvent>,
    _elem: PhantomData<T>,
}

// `Send` and `Sync` come from the fields: a `DeviceVec` owns its device allocation like
// a `Vec<T>` owns its heap allocation (the address is a plain number), `&DeviceVec` only
// allows reads of the memory (`attach_ref`, `to_host_vec`), and reads from several
// streams or threads at once do not race.

impl Device {
    /// Allocates `len` zeroed elements; blocks until the memory is ready for any stream.
    ///
    /// Out of memory, it waits for the device's housekeeping stream (where dropped
    /// `DeviceVec`s are freed) and the streams of the scopes this thread has open on
    /// the device, hands the pool's cached memory back to the driver and retries once
    /// before it returns [`Error::OutOfMemory`](crate::Error::OutOfMemory), like
    /// [`Scope::alloc`](crate::Scope::alloc).
    pub fn alloc_vec<T: DeviceRepr>(&self, len: usize) -> Result<DeviceVec<T>> {
        let vec = DeviceVec::alloc(self, len)?;
        if vec.len > 0 {
            let bytes = byte_len::<T>(vec.len)?;
            let housekeeping = &self.inner.housekeeping;
            // SAFETY: `vec.raw` is `bytes` bytes just allocated on the housekeeping stream
            // and used by nothing else; zero bytes are a valid `T`. On error `vec` is
            // dropped, and its free is stream-ordered after the memset on the same stream.
            unsafe { memset(vec.raw().ptr, Memset::Bytes(0), bytes, housekeeping) }?;
        }
        self.inner.sync_housekeeping()?;
        Ok(vec)
    }

    /// Copies `src` into new device memory; blocks until the copy is complete.
    ///
    /// Out of memory, it releases cached memory and retries once, like
    /// [`alloc_vec`](Self::alloc_vec).
    pub fn upload_vec<T: DeviceRepr>(&self, src: &[T]) -> Result<DeviceVec<T>> {
        let vec = DeviceVec::alloc(self, src.len())?;
        if vec.len > 0 {
            let bytes = std::mem::size_of_val(src);
            // SAFETY: `vec.raw` holds `src.len()` elements (`bytes` bytes), allocated on
            // the housekeeping stream and used by nothing else. `src` is borrowed until
            // this function returns, and it returns only after the synchronisation below,
            // which runs whether or not the enqueue reported an error (a failed call may
            // still have started the DMA) and aborts rather than return while the DMA may
            // read `src`.
            let enqueued = unsafe {
                copy_host_to_device(
                    vec.raw().ptr,
                    src.as_ptr().cast(),
                    bytes,
                    &self.inner.housekeeping,
                )
            };
            let synced = self.inner.sync_housekeeping_before_release("upload_vec");
            enqueued?;
            synced?;
        }
        Ok(vec)
    }
}

impl<T: DeviceRepr> DeviceVec<T> {
    /// Stream-ordered allocation on the housekeeping stream (not yet synchronised).
    ///
    /// Out of memory, it waits for the streams on which this thread's frees may be
    /// pending, trims the pool and retries once (see `DeviceInner::alloc_async`).
    fn alloc(device: &Device, len: usize) -> Result<Self> {
        let bytes = byte_len::<T>(len)?;
        // The memory is only used through this `DeviceVec`, after the caller
        // synchronises the housekeeping stream.
        let memory = match bytes {
            0 => None,
            _ => Some(
                device
                    .inner
                    .alloc_async(&device.inner.housekeeping, bytes)?,
            ),
        };
        Ok(DeviceVec {
            memory,
            len,
            device: device.clone(),
            ready: None,
            _elem: PhantomData,
        })
    }

    /// A `DeviceVec` of `len` elements in `memory`, a stream-ordered allocation made on a
    /// stream of `device` that is not yet known to be complete (for
    /// [`Stream::upload_owned`](crate::Stream::upload_owned), whose future hands it out
    /// only once an event recorded after its last use is seen complete).
    ///
    /// # Safety
    ///
    /// `memory` came from `DeviceInner::alloc_async` of `device` for exactly `len`
    /// elements of `T` (or is `None` with `len == 0`); and the returned
    /// value is neither used on any stream nor dropped (its free runs on the
    /// housekeeping stream) before the host has seen every piece of work of the
    /// allocating stream up to its last use complete (through an event recorded after
    /// it): until then it stays in a completion record, and it is leaked if no such event
    /// can be recorded or waited for.
    pub(crate) unsafe fn from_stream_ordered(
        device: &Device,
        memory: Option<StreamOrdered>,
        len: usize,
    ) -> Self {
        DeviceVec {
            memory,
            len,
            device: device.clone(),
            ready: None,
            _elem: PhantomData,
        }
    }

    /// Takes ownership of `memory`, a stream-ordered allocation of `device`, as a vec of
    /// `len` elements; `ready` (if any) is an event of `device`'s context after every
    /// earlier use of the memory.
    ///
    /// # Safety
    ///
    /// `memory` (freed when the vec drops, on the housekeeping stream) holds at least
    /// `len` elements of `T`, aligned for `T` (it is `None` only with `len == 0`); every
    /// earlier use of it is ordered before the housekeeping stream's current end and
    /// before `ready` (a stream that waits for `ready` may use it).
    pub(crate) unsafe fn from_raw_parts(
        device: &Device,
        memory: Option<StreamOrdered>,
        len: usize,
        ready: Option<RawEvent>,
    ) -> Self {
        DeviceVec {
            memory,
            len,
            device: device.clone(),
            ready,
            _elem: PhantomData,
        }
    }

    /// Gives up the memory without freeing it: its address and length, its ready event
    /// and its device. The caller owns the allocation from now on (forgetting it only
    /// leaks it).
    pub(crate) fn into_raw_parts(mut self) -> (RawSlice, Option<RawEvent>, Device) {
        let raw = RawSlice {
            ptr: self.memory.take().map_or(0, StreamOrdered::into_raw),
            len: std::mem::take(&mut self.len),
        };
        let ready = self.ready.take();
        // `self` now holds no memory: its drop frees nothing.
        (raw, ready, self.device.clone())
    }

    /// The memory's address and length, for a view on `stream` (a stream of the
    /// vec's device, whose context is bound): first makes `stream` wait, on the GPU, for
    /// the vec's ready event when it has one.
    pub(crate) fn raw_on(&self, stream: &RawStream) -> Result<RawSlice> {
        if let Some(ready) = &self.ready {
            stream.wait(ready)?;
        }
        Ok(self.raw())
    }

    /// The memory's address and length, for work that cannot wait on the GPU for the
    /// vec's ready event (a graph capture, where a wait on an event recorded outside it
    /// would invalidate the capture): first blocks the host until that event, when the
    /// vec has one, has completed. Only vecs converted from another library have one.
    pub(crate) fn raw_ready_on_host(&self) -> Result<RawSlice> {
        if let Some(ready) = &self.ready {
            ready.synchronize(&self.device.inner.context)?;
        }
        Ok(self.raw())
    }

    /// The device that holds the memory.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Copies the contents to a new host `Vec`; blocks until the copy is complete.
    pub fn to_host_vec(&self) -> Result<Vec<T>> {
        let mut host = Vec::with_capacity(self.len);
        if self.len > 0 {
            let bytes = byte_len::<T>(self.len)?;
            let spare = &mut host.spare_capacity_mut()[..self.len];
            // SAFETY: `spare` is `len` writable (uninitialised) `T`s, `bytes` bytes; the
            // DMA writes all of them, and `T: DeviceRepr` accepts any bytes. No scope can
            // be writing `self` (that needs `&mut self`) and every scope that wrote it has
            // synchronised. `host` is neither read nor freed before the synchronisation
            // below, which runs even when the enqueue reports an error and aborts rather
            // than let `host` go while the DMA may write it.
            let enqueued = unsafe {
                copy_device_to_host(
                    spare.as_mut_ptr().cast(),
                    self.raw().ptr,
                    bytes,
                    &self.device.inner.housekeeping,
                )
            };
            let synced = self
                .device
                .inner
                .sync_housekeeping_before_release("to_host_vec");
            enqueued?;
            synced?;
            // SAFETY: the copy above initialised the first `len` elements and has
            // completed (the housekeeping stream was synchronised without error).
            unsafe { host.set_len(self.len) };
        }
        Ok(host)
    }
}

element_count!(|self| self.len; [T: DeviceRepr] DeviceVec<T>);

impl<T: DeviceRepr> DeviceVec<T> {
    /// The memory's address and length, ready or not (the callers above know).
    #[inline]
    fn raw(&self) -> RawSlice {
        RawSlice {
            ptr: self.memory.as_ref().map_or(0, StreamOrdered::ptr),
            len: self.len,
        }
    }
}

impl<T: DeviceRepr> Drop for DeviceVec<T> {
    fn drop(&mut self) {
        // Freed on the housekeeping stream (alive as long as the device `self` holds),
        // after every use: a converted vec's earlier uses are ordered before that stream
        // (`from_raw_parts`); every scope that used it borrowed it for its whole duration
        // and synchronised its stream before the borrow ended (or stopped with a sticky
        // error: no more work runs); the blocking helpers synchronised the housekeeping
        // stream before returning. A refused free leaks the memory.
        if let Some(memory) = self.memory.take() {
            let _ = memory.free_on(&self.device.inner.housekeeping);
        }
    }
}

impl<T: DeviceRepr> std::fmt::Debug for DeviceVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceVec")
            .field("ptr", &self.raw().ptr)
            .field("len", &self.len)
            .finish()
    }
}
