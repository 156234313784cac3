//! [`PinnedBuffer`]: owned page-locked host memory, sliceable like a `Vec`.

use std::ptr::NonNull;
use std::sync::Arc;

use crate::device::Device;
use crate::error::{byte_len, Error, Result};
use crate::host::pinned_pool::{Block, HostKind, PinnedPool};
use crate::memory::DeviceRepr;

/// Page-locked (pinned) host memory of `len` elements, zero-initialised.
///
/// The GPU copies pinned memory by DMA without a staging copy, so transfers from and to
/// it run at full bus speed and truly asynchronously. It dereferences to `[T]`, so any
/// sub-slice can be a transfer's source or destination, and the usual borrow rules keep
/// it from being touched or freed while a transfer is pending.
///
/// The memory comes from the device's pinned pool and goes back to it on drop (no
/// `cuMemFreeHost`, which may synchronise the device); see
/// [`Device::pinned_memory_stats`] and [`Device::trim_pinned_memory`].
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
    /// The pool block holding the elements; `None` for zero bytes.
    block: Option<Block>,
    /// Where the block goes back when the buffer is dropped.
    pool: Arc<PinnedPool>,
    device: Device,
}

// SAFETY: a `PinnedBuffer` owns its block exclusively, like a `Box<[T]>`; the block is
// `PORTABLE` page-locked memory, usable and given back to its pool from any thread (the
// pool is `Sync`), and `T: DeviceRepr` is `Send + Sync`.
unsafe impl<T: DeviceRepr> Send for PinnedBuffer<T> {}
// SAFETY: `&PinnedBuffer` gives only `&[T]`, which is `Sync` for `T: Sync`.
unsafe impl<T: DeviceRepr> Sync for PinnedBuffer<T> {}

impl Device {
    /// Allocates `len` zeroed elements of page-locked host memory from this device's
    /// pinned pool (portable, not write-combined, so host reads stay fast).
    ///
    /// The memory comes from a cached block when one of the size class is free (see
    /// [`pinned_memory_stats`](Device::pinned_memory_stats)), else from
    /// `cuMemHostAlloc`; it is zeroed either way. `len == 0` allocates nothing.
    /// Returns [`Error::HostOutOfMemory`] when the memory cannot be page-locked (the
    /// pool frees none of its cached blocks on its own, since `cuMemFreeHost` waits for
    /// the whole device: [`trim_pinned_memory`](Device::trim_pinned_memory) does, when
    /// you call it) and
    /// [`Error::SizeOverflow`] when `len * size_of::<T>()` overflows.
    pub fn alloc_pinned<T: DeviceRepr>(&self, len: usize) -> Result<PinnedBuffer<T>> {
        PinnedBuffer::new(self, len, HostKind::Normal)
    }

    /// Like [`alloc_pinned`](Self::alloc_pinned), but write-combined
    /// (`CU_MEMHOSTALLOC_WRITECOMBINED`): the CPU writes it without caching, which can
    /// make uploads from it faster, but **host reads of it are very slow** (uncached,
    /// often 10x or worse). Use it only for data the host writes once and the GPU reads.
    ///
    /// ```no_run
    /// use stream_core::{scope, Device, Error};
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = Device::new(0)?;
    /// let stream = dev.new_stream()?;
    /// let mut staging = dev.alloc_pinned_write_combined::<f32>(1 << 20)?;
    /// staging.fill(1.0);                                // host writes: fine
    /// scope(&stream, |s| {
    ///     let _x = s.upload(&staging)?;                 // DMA reads: fine
    ///     Ok::<_, Error>(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn alloc_pinned_write_combined<T: DeviceRepr>(
        &self,
        len: usize,
    ) -> Result<PinnedBuffer<T>> {
        PinnedBuffer::new(self, len, HostKind::WriteCombined)
    }
}

impl<T: DeviceRepr> PinnedBuffer<T> {
    fn new(device: &Device, len: usize, kind: HostKind) -> Result<Self> {
        let bytes = byte_len::<T>(len)?;
        let pool = PinnedPool::of(&device.inner);
        if bytes == 0 {
            return Ok(PinnedBuffer {
                ptr: NonNull::dangling(),
                len,
                block: None,
                pool,
                device: device.clone(),
            });
        }
        let mut block = pool.take(bytes, kind)?;
        // Idle (the pool hands out only blocks no copy uses): zero the buffer's bytes,
        // which makes them `len` valid `T`s (`T: DeviceRepr` accepts all-zero bytes).
        if let Some(memory) = block.bytes_mut() {
            let zeroed = bytes.min(memory.len());
            memory[..zeroed].fill(0);
        }
        let ptr = block.ptr().cast::<T>();
        if !ptr.as_ptr().is_aligned() || block.size() < bytes {
            // `cuMemHostAlloc` returns page-aligned memory and the pool never hands
            // out a smaller block; checked anyway so that the proofs below stay local.
            pool.give_back(block);
            return Err(Error::HostOutOfMemory { requested: bytes });
        }
        Ok(PinnedBuffer {
            ptr,
            len,
            block: Some(block),
            pool,
            device: device.clone(),
        })
    }

    /// The device whose pool the memory came from (it is pinned for every device).
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// `true` for memory from
    /// [`alloc_pinned_write_combined`](Device::alloc_pinned_write_combined).
    pub fn is_write_combined(&self) -> bool {
        self.block
            .as_ref()
            .is_some_and(|b| b.kind() == HostKind::WriteCombined)
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
    /// Gives the block back to the pool (no driver call). No transfer can be pending on
    /// it: transfers borrow the buffer until their outermost scope has synchronised.
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            self.pool.give_back(block);
        }
    }
}

impl<T: DeviceRepr + std::fmt::Debug> std::fmt::Debug for PinnedBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("len", &self.len)
            .field("write_combined", &self.is_write_combined())
            .finish()
    }
}
