//! The pinned host memory pool of a [`Device`]: page-locked blocks by size class,
//! handed to [`PinnedBuffer`](crate::PinnedBuffer)s and to the staging ring of
//! [staged copies](crate::staging), and reused instead of freed.
//!
//! # Why a pool
//!
//! `cuMemHostAlloc` takes milliseconds for large sizes (the pages are locked one by
//! one) and `cuMemFreeHost` may synchronise the whole device. The pool calls each once
//! per block: a dropped [`PinnedBuffer`](crate::PinnedBuffer) returns its block here,
//! and the next allocation of the same size class takes it back, zeroed again.
//! [`Device::trim_pinned_memory`] gives the cached blocks back to the driver.
//!
//! # Size classes
//!
//! Requests are rounded up to a power of two from 4 KiB to 32 MiB, and above 32 MiB to
//! a multiple of 32 MiB (so a large buffer wastes at most 32 MiB, a small one at most
//! half its block). Each class has its own free list behind its own short `Mutex`,
//! separately for ordinary and write-combined blocks; no lock is held across a driver
//! call that can block (only the non-blocking `cuEventQuery` runs under a lock).
//!
//! # When a block may be reused
//!
//! A block given back by a `PinnedBuffer` is idle: the buffer was borrowed by every
//! copy that used it until that copy's scope had synchronised. A staging block is given
//! back right after its last DMA was *enqueued*, with an event recorded after that DMA;
//! the pool hands it out again only once `cuEventQuery` reports the event complete, so
//! a block is never written by the host, nor filled by a new DMA, while an earlier copy
//! may still read or write it. Staging blocks whose copies are still pending are
//! counted as cached; when a cap of them pile up in one class on one stream (for
//! example behind a long kernel), a staged copy on that stream waits for the oldest of
//! them rather than page-locking ever more memory. It never waits for another stream's
//! blocks: that would be a hidden cross-stream synchronisation.
//!
//! All blocks are allocated `CU_MEMHOSTALLOC_PORTABLE`, so a `PinnedBuffer` of one
//! device is pinned memory for every device's copies.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cudarc::driver::sys;

use crate::device::{Device, DeviceInner};
use crate::driver::context::PrimaryContext;
use crate::driver::event::RawEvent;
use crate::driver::pinned::PinnedAllocation;
use crate::driver::stream::RawStream;
use crate::error::{Error, Result};
use crate::memory::bound_wait_before_device_release;

/// The smallest block: one page.
const SMALLEST_LOG2: u32 = 12;
/// The largest power-of-two class; larger blocks are multiples of it.
const LARGEST_LOG2: u32 = 25;
/// Power-of-two classes, 4 KiB ..= 32 MiB.
const SMALL_CLASSES: usize = (LARGEST_LOG2 - SMALLEST_LOG2 + 1) as usize;
/// Free lists per kind: the small classes and one list of large blocks (any multiple
/// of [`LARGE_GRANULE`], matched by exact size).
const LISTS_PER_KIND: usize = SMALL_CLASSES + 1;
/// Blocks above 32 MiB are rounded up to a multiple of this.
pub(crate) const LARGE_GRANULE: usize = 1 << LARGEST_LOG2;

/// Whether a block is ordinary page-locked memory or write-combined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HostKind {
    /// Cached, coherent page-locked memory: fast for host reads and writes.
    Normal,
    /// `CU_MEMHOSTALLOC_WRITECOMBINED`: faster uploads, very slow host reads.
    WriteCombined,
}

impl HostKind {
    fn index(self) -> usize {
        match self {
            HostKind::Normal => 0,
            HostKind::WriteCombined => 1,
        }
    }
}

/// The block size a request of `bytes` is served from, or `None` when rounding up
/// overflows.
pub(crate) fn block_size(bytes: usize) -> Option<usize> {
    if bytes <= 1 << SMALLEST_LOG2 {
        Some(1 << SMALLEST_LOG2)
    } else if bytes <= LARGE_GRANULE {
        Some(bytes.next_power_of_two())
    } else {
        bytes.checked_next_multiple_of(LARGE_GRANULE)
    }
}

/// The free list of blocks of `size` (a value `block_size` returned) and `kind`.
fn list_index(size: usize, kind: HostKind) -> usize {
    let within = if size <= LARGE_GRANULE {
        (size.trailing_zeros().saturating_sub(SMALLEST_LOG2) as usize).min(SMALL_CLASSES - 1)
    } else {
        SMALL_CLASSES
    };
    kind.index() * LISTS_PER_KIND + within
}

/// Pinned memory statistics of one device's pool, in bytes of page-locked memory
/// (block sizes, so a request rounded up to its size class counts as the whole block).
/// The pinned counterpart of [`DeviceMemoryStats`](crate::DeviceMemoryStats).
///
/// ```no_run
/// # fn main() -> stream_core::Result<()> {
/// let dev = stream_core::Device::new(0)?;
/// let before = dev.pinned_memory_stats();
/// let buf = dev.alloc_pinned::<u8>(3 << 20)?;          // served from a 4 MiB block
/// assert_eq!(dev.pinned_memory_stats().in_use_bytes, before.in_use_bytes + (4 << 20));
/// drop(buf);                                            // back to the pool, not freed
/// assert_eq!(dev.pinned_memory_stats().cached_bytes, before.cached_bytes + (4 << 20));
/// let freed = dev.trim_pinned_memory(0)?;               // now freed
/// assert!(freed >= 4 << 20);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PinnedMemoryStats {
    /// Bytes held by live [`PinnedBuffer`](crate::PinnedBuffer)s and by staged copies
    /// that are being issued right now.
    pub in_use_bytes: usize,
    /// Bytes cached for reuse, including staging blocks whose last copy may still be
    /// running; [`Device::trim_pinned_memory`] frees them.
    pub cached_bytes: usize,
    /// The most bytes in use at once since the device was opened or the last
    /// [`Device::reset_peak_pinned_memory_stats`].
    pub peak_in_use_bytes: usize,
}

/// One page-locked allocation of the pool.
pub(crate) struct Block {
    memory: PinnedAllocation,
    kind: HostKind,
    /// Created on the first staged copy through this block; recorded after the
    /// block's latest DMA.
    event: Option<RawEvent>,
    /// `true` while the latest DMA recorded in `event` may not have completed.
    armed: bool,
    /// The stream of that DMA (a handle compared, never used): a staged copy waits
    /// only for pending blocks of its own stream.
    armed_on: sys::CUstream,
}

// SAFETY: `armed_on` is a stream handle that is only compared, never used; the other
// fields are `Send` (the allocation is owned exclusively, like a `Box<[u8]>`).
unsafe impl Send for Block {}

impl Block {
    /// The first byte; valid for reads and writes of [`size`](Self::size) bytes while
    /// the block is not armed.
    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.memory.ptr()
    }

    /// The allocation's size in bytes.
    pub(crate) fn size(&self) -> usize {
        self.memory.size()
    }

    /// The block's bytes, or `None` while a DMA may still use them (the block is armed).
    /// Every byte is initialised (zero-filled at allocation, then only written with
    /// bytes).
    pub(crate) fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        if self.armed {
            return None;
        }
        // No DMA uses the bytes: every DMA through a pool block arms it, and it is
        // disarmed only once that DMA's event has completed. (A `PinnedBuffer` calls this
        // only before any copy of its own uses the block.)
        Some(self.memory.bytes_mut())
    }

    /// Ordinary or write-combined.
    pub(crate) fn kind(&self) -> HostKind {
        self.kind
    }

    /// `Ok(true)` when no DMA may still use the block; never blocks. `context` is the
    /// pool's (the block's event belongs to it).
    fn poll_idle(&mut self, context: &Arc<PrimaryContext>) -> Result<bool> {
        if !self.armed {
            return Ok(true);
        }
        let done = self.armed_event()?.is_complete(context)?;
        self.armed = !done;
        Ok(done)
    }

    /// The event of an armed block (an armed block without one is never idle).
    fn armed_event(&self) -> Result<&RawEvent> {
        self.event.as_ref().ok_or(Error::from(crate::error::Driver {
            call: "cuEventRecord",
            code: sys::CUresult::CUDA_ERROR_INVALID_HANDLE as u32,
            name: "CUDA_ERROR_INVALID_HANDLE".to_owned(),
            description: "a staging block's event was never created".to_owned(),
        }))
    }

    /// Blocks until no DMA may still use the block. `context` is the pool's.
    pub(crate) fn wait_idle(&mut self, context: &Arc<PrimaryContext>) -> Result<()> {
        if self.armed {
            self.armed_event()?.synchronize(context)?;
            self.armed = false;
        }
        Ok(())
    }

    /// Records the block's event on `stream` (a stream of the pool's device) after the
    /// DMA just enqueued there, so the block is reused only once that DMA has
    /// completed. On `Err` the DMA is not covered by any event: the caller must
    /// [abandon](PinnedPool::abandon) the block.
    pub(crate) fn arm(&mut self, stream: &RawStream) -> Result<()> {
        self.armed = true;
        self.armed_on = stream.raw();
        let event = match &self.event {
            Some(event) => event,
            None => self.event.insert(RawEvent::new(stream.context())?),
        };
        // On `Err` the block may be armed with no event or a stale one: the caller
        // abandons it, so it never reaches the pool again.
        event.record(stream)
    }
}

/// The pinned memory pool of one device (see the [module docs](self)): an extension of
/// the device ([`PinnedPool::of`]), dropped with it, when it frees its cached blocks.
pub(crate) struct PinnedPool {
    /// The device's context: blocks are allocated and freed in it, and their events
    /// belong to it.
    context: Arc<PrimaryContext>,
    lists: [Mutex<Vec<Block>>; 2 * LISTS_PER_KIND],
    in_use: AtomicUsize,
    cached: AtomicUsize,
    peak_in_use: AtomicUsize,
}

impl PinnedPool {
    /// The pool of `device`.
    pub(crate) fn of(device: &DeviceInner) -> Arc<Self> {
        device.extension(|| PinnedPool {
            context: Arc::clone(&device.context),
            lists: std::array::from_fn(|_| Mutex::new(Vec::new())),
            in_use: AtomicUsize::new(0),
            cached: AtomicUsize::new(0),
            peak_in_use: AtomicUsize::new(0),
        })
    }

    /// The statistics now (each field read atomically, not all three together).
    pub(crate) fn stats(&self) -> PinnedMemoryStats {
        PinnedMemoryStats {
            in_use_bytes: self.in_use.load(Ordering::Relaxed),
            cached_bytes: self.cached.load(Ordering::Relaxed),
            peak_in_use_bytes: self.peak_in_use.load(Ordering::Relaxed),
        }
    }

    /// Restarts the peak from the bytes in use now.
    pub(crate) fn reset_peak(&self) {
        self.peak_in_use
            .store(self.in_use.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    fn list(&self, size: usize, kind: HostKind) -> MutexGuard<'_, Vec<Block>> {
        self.lists[list_index(size, kind)]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn note_in_use(&self, size: usize) {
        let now = self.in_use.fetch_add(size, Ordering::Relaxed) + size;
        self.peak_in_use.fetch_max(now, Ordering::Relaxed);
    }

    /// An idle block of at least `bytes` (`bytes > 0`): a cached one whose copies have
    /// all completed, else a new allocation. Never waits for the GPU, and never frees
    /// memory (see [`allocate`](Self::allocate)).
    pub(crate) fn take(&self, bytes: usize, kind: HostKind) -> Result<Block> {
        let size = block_size(bytes).ok_or(Error::HostOutOfMemory { requested: bytes })?;
        match self.take_cached(size, kind, None) {
            Some(block) => Ok(block),
            None => self.allocate(size, kind),
        }
    }

    /// An ordinary block of at least `bytes` for a staged copy on `stream`, idle for
    /// host access. Like [`take`](Self::take), except that when `cap` or more blocks of
    /// the class are still in use by pending copies *of the same stream*, it waits for
    /// the oldest of them instead of allocating: that bounds what a stream stalled
    /// behind a long kernel can pin, and it waits only for the stream's own earlier
    /// work, never for another stream's.
    pub(crate) fn take_staging(
        &self,
        bytes: usize,
        stream: sys::CUstream,
        cap: usize,
    ) -> Result<Block> {
        let size = block_size(bytes).ok_or(Error::HostOutOfMemory { requested: bytes })?;
        match self.take_cached(size, HostKind::Normal, Some((stream, cap))) {
            Some(mut block) => match block.wait_idle(&self.context) {
                Ok(()) => Ok(block),
                Err(e) => {
                    self.abandon(block);
                    Err(e)
                }
            },
            None => self.allocate(size, HostKind::Normal),
        }
    }

    /// A cached block of exactly `size` and `kind`: an idle one if any; else, when
    /// `(stream, cap)` is given and at least `cap` blocks are pending on `stream`, the
    /// oldest of those (still armed: the caller waits for it outside the lock). Blocks
    /// whose event reports an error are dropped from the pool (see
    /// [`abandon`](Self::abandon)).
    fn take_cached(
        &self,
        size: usize,
        kind: HostKind,
        cap: Option<(sys::CUstream, usize)>,
    ) -> Option<Block> {
        let stream = cap.map(|(stream, _)| stream);
        let mut list = self.list(size, kind);
        let mut pending = 0;
        let mut oldest_pending = None;
        let mut i = 0;
        while i < list.len() {
            if list[i].size() != size {
                i += 1;
                continue;
            }
            match list[i].poll_idle(&self.context) {
                Ok(true) => {
                    let block = list.remove(i);
                    self.cached.fetch_sub(size, Ordering::Relaxed);
                    self.note_in_use(size);
                    return Some(block);
                }
                Ok(false) => {
                    if Some(list[i].armed_on) == stream {
                        pending += 1;
                        oldest_pending.get_or_insert(i);
                    }
                    i += 1;
                }
                Err(_) => {
                    let block = list.remove(i);
                    self.cached.fetch_sub(size, Ordering::Relaxed);
                    forsake(block);
                }
            }
        }
        match (cap, oldest_pending) {
            (Some((_, cap)), Some(oldest)) if pending >= cap.max(1) => {
                let block = list.remove(oldest);
                self.cached.fetch_sub(size, Ordering::Relaxed);
                self.note_in_use(size);
                Some(block)
            }
            _ => None,
        }
    }

    /// Page-locks a new block of `size` bytes in the device's context.
    ///
    /// Out of page-lockable memory it returns [`Error::HostOutOfMemory`] and frees
    /// nothing: freeing a cached block (`cuMemFreeHost`) waits for the whole device, which
    /// this crate does only where the user asked for it
    /// ([`Device::trim_pinned_memory`], dropping the device).
    fn allocate(&self, size: usize, kind: HostKind) -> Result<Block> {
        let bound = self.context.bind()?;
        let memory = PinnedAllocation::new(size, kind == HostKind::WriteCombined, &bound)?;
        self.note_in_use(size);
        Ok(Block {
            memory,
            kind,
            event: None,
            armed: false,
            armed_on: std::ptr::null_mut(),
        })
    }

    /// Returns a block for reuse. It may be armed (a staged copy's last DMA pending):
    /// it is handed out again only once that DMA completed. No driver call.
    pub(crate) fn give_back(&self, block: Block) {
        let size = block.size();
        self.in_use.fetch_sub(size, Ordering::Relaxed);
        let mut list = self.list(size, block.kind);
        list.push(block);
        self.cached.fetch_add(size, Ordering::Relaxed);
    }

    /// Drops a block whose DMA state is unknown (an event could not be recorded or
    /// waited on): it is never reused nor freed, since a DMA may still touch it. Such
    /// failures leave the context in an error state in practice, so this is a leak of
    /// a few blocks on a path that ends the program's use of the GPU anyway.
    pub(crate) fn abandon(&self, block: Block) {
        self.in_use.fetch_sub(block.size(), Ordering::Relaxed);
        forsake(block);
    }

    /// Frees cached blocks, largest classes first, until at most `keep` bytes stay
    /// cached, and returns how many bytes were freed. With `wait`, pending blocks are
    /// waited for first (blocking); without, they stay cached. Each free waits for the
    /// whole device: called only by [`Device::trim_pinned_memory`] and the pool's drop
    /// (the device's).
    fn release_cached(&self, wait: bool, keep: usize) -> usize {
        let Ok(bound) = self.context.bind() else {
            return 0;
        };
        let mut freed = 0;
        // Per kind, the large list first, then the classes from 32 MiB down.
        let order = (0..2).flat_map(|kind| {
            (0..LISTS_PER_KIND)
                .rev()
                .map(move |i| kind * LISTS_PER_KIND + i)
        });
        for index in order {
            if self.cached.load(Ordering::Relaxed) <= keep {
                break;
            }
            let taken: Vec<Block> = {
                let mut list = self.lists[index]
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let mut excess = self.cached.load(Ordering::Relaxed).saturating_sub(keep);
                // Oldest first (the front), as long as the cache is above `keep`;
                // without `wait`, only idle blocks and blocks whose event reports an
                // error (still armed).
                list.extract_if(.., |b| {
                    let take =
                        excess > 0 && (wait || !matches!(b.poll_idle(&self.context), Ok(false)));
                    if take {
                        excess = excess.saturating_sub(b.size());
                    }
                    take
                })
                .collect()
            };
            for mut block in taken {
                let size = block.size();
                self.cached.fetch_sub(size, Ordering::Relaxed);
                let idle = if wait {
                    block.wait_idle(&self.context).is_ok()
                } else {
                    !block.armed
                };
                if idle {
                    freed += size;
                    // The block is idle (its last DMA completed, or it never had one), it
                    // was taken out of its list, and no `PinnedBuffer` holds it (buffers
                    // hold their blocks, and give them back only when dropped).
                    block.memory.free_waiting_for_device(&bound);
                    drop(block.event);
                } else {
                    forsake(block);
                }
            }
        }
        freed
    }
}

/// Forgets a block's memory (never freed or reused); its event is destroyed, which the
/// driver allows while work that records it is pending.
fn forsake(block: Block) {
    drop(block.event);
}

impl Device {
    /// Statistics of this device's pinned memory pool: bytes in use, cached for reuse,
    /// and the peak in use. See [`PinnedMemoryStats`]. Does not block or call the
    /// driver.
    ///
    /// The pool belongs to the handle [`Device::new`] made (its clones share it):
    /// another `Device::new` of the same GPU has a pool of its own.
    pub fn pinned_memory_stats(&self) -> PinnedMemoryStats {
        PinnedPool::of(&self.inner).stats()
    }

    /// Restarts [`PinnedMemoryStats::peak_in_use_bytes`] from the bytes in use now.
    pub fn reset_peak_pinned_memory_stats(&self) {
        PinnedPool::of(&self.inner).reset_peak();
    }

    /// Frees pinned memory this device's pool has cached, largest blocks first, until
    /// at most `keep_bytes` stay cached, and returns how many bytes were freed. Memory
    /// held by live [`PinnedBuffer`](crate::PinnedBuffer)s is not affected.
    ///
    /// **Blocks**: it waits for staged copies still using the cached staging blocks it
    /// frees, and `cuMemFreeHost` itself waits until the whole device is idle, stalling
    /// other threads' driver calls meanwhile (measured on an H200: a one-second kernel
    /// on another thread's stream). It is the one call of this library that waits for
    /// the device; dropping the last handle of a `Device` frees its pool the same way.
    /// Call it between phases of a program, not while other work runs. Called inside a
    /// scope that has issued an NCCL collective, it waits for that scope's streams within
    /// the communicator's timeout first: behind a collective whose peer died, it returns
    /// [`Error::CollectiveTimedOut`] (the communicator
    /// aborted, the memory freed all the same), which the scope's end returns again.
    /// Scopes of other threads that issued collectives on this GPU are waited for too,
    /// for as long as their thread waits for them (its watch aborts a hung collective);
    /// when one is past its communicator's timeout and its thread is busy elsewhere, the
    /// call frees nothing and returns [`Error::HeldUpByAnotherThread`] rather than wait
    /// for that thread's next wait.
    /// With no more than `keep_bytes` cached it returns `Ok(0)` at once, waiting for
    /// nothing.
    ///
    /// ```no_run
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = stream_core::Device::new(0)?;
    /// drop(dev.alloc_pinned::<f32>(1 << 28)?);   // 1 GiB back to the pool
    /// let freed = dev.trim_pinned_memory(0)?;    // and now to the operating system
    /// assert_eq!(dev.pinned_memory_stats().cached_bytes, 0);
    /// # Ok(()) }
    /// ```
    pub fn trim_pinned_memory(&self, keep_bytes: usize) -> Result<usize> {
        let pool = PinnedPool::of(&self.inner);
        if pool.cached.load(Ordering::Relaxed) <= keep_bytes {
            // Nothing to free, so no call that waits for the device: nothing to wait for
            // (a collective on another thread's stream would otherwise hold it up).
            return Ok(0);
        }
        let _bound = self.inner.bind()?;
        // `cuMemFreeHost` waits for the whole device: for a collective whose peer died,
        // on the stream of a scope open on this thread, within that scope's bounds (its
        // abort drains the stream); on another thread's, only while that thread waits too.
        let bounded = self.inner.bound_device_wide_wait();
        if let Err(held_up @ Error::HeldUpByAnotherThread) = bounded {
            return Err(held_up);
        }
        let freed = pool.release_cached(true, keep_bytes);
        bounded.map(|()| freed)
    }
}

impl Drop for PinnedPool {
    /// The device is being dropped (the pool is its extension): free every cached block,
    /// waiting for pending ones first. Blocks still held by buffers cannot exist (each
    /// buffer holds the device). `cuMemFreeHost` waits for the whole GPU: a collective
    /// whose peer died, on a scope of another handle of the GPU open on this thread, is
    /// waited for first within its bounds (its error is that scope's to report).
    fn drop(&mut self) {
        if self.cached.load(Ordering::Relaxed) > 0 {
            let _ = bound_wait_before_device_release(&self.context);
        }
        self.release_cached(true, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_are_powers_of_two_then_multiples_of_the_granule() {
        assert_eq!(block_size(0), Some(4096));
        assert_eq!(block_size(1), Some(4096));
        assert_eq!(block_size(4096), Some(4096));
        assert_eq!(block_size(4097), Some(8192));
        assert_eq!(block_size(3 << 20), Some(4 << 20));
        assert_eq!(block_size(32 << 20), Some(32 << 20));
        assert_eq!(block_size((32 << 20) + 1), Some(64 << 20));
        assert_eq!(block_size((96 << 20) + 1), Some(128 << 20));
        assert_eq!(block_size(600 << 20), Some(608 << 20));
        assert_eq!(block_size(usize::MAX), None);
    }

    #[test]
    fn every_size_maps_to_its_own_list() {
        let mut seen = std::collections::HashMap::new();
        for log2 in SMALLEST_LOG2..=LARGEST_LOG2 {
            for kind in [HostKind::Normal, HostKind::WriteCombined] {
                let index = list_index(1 << log2, kind);
                assert!(index < 2 * LISTS_PER_KIND);
                assert!(seen.insert(index, (log2, kind)).is_none());
            }
        }
        assert_eq!(
            list_index(64 << 20, HostKind::Normal),
            list_index(608 << 20, HostKind::Normal)
        );
        assert_ne!(
            list_index(64 << 20, HostKind::Normal),
            list_index(64 << 20, HostKind::WriteCombined)
        );
    }
}
