//! The device's stream-ordered memory pool: where every device allocation comes from,
//! how much freed memory it keeps cached, its statistics, and the one out-of-memory
//! recovery that every device allocation shares.
//!
//! [`DeviceBuffer`](crate::DeviceBuffer)s and [`DeviceVec`](crate::DeviceVec)s are
//! allocated with `cuMemAllocFromPoolAsync` from the device's *default* pool
//! (`cuDeviceGetDefaultMemPool`), named explicitly so that the pool this module
//! configures and measures is the one allocations come from, even if other code in the
//! process makes another pool the device's current one. Frees (`cuMemFreeAsync`) return
//! memory to that pool; whether the pool keeps it is its *release threshold*.
//!
//! # Why the release threshold is `u64::MAX`
//!
//! The driver's default threshold is 0: at every stream, event or context
//! synchronisation the pool hands all its unused memory back to the driver. Every
//! [`scope`](fn@crate::scope) ends with a stream synchronisation, so with the default every
//! scope's buffers would go back to the driver at its end and the next scope would map
//! fresh physical memory again (a slow driver path), turning a loop of short scopes
//! into a loop of `cudaMalloc`/`cudaFree`. [`Device::new`] therefore sets the threshold
//! to `u64::MAX`: freed memory stays cached in the pool and is reused by later
//! allocations (on the stream that freed it at once, on other streams once the free has
//! completed), and the memory a loop of scopes reserves stays flat. The cost
//! is that cached memory is not available to other processes or to non-pool allocations
//! (`cuMemAlloc`, library workspaces); [`Device::trim_memory`] returns it, and an
//! allocation that runs out of memory returns it before giving up (see
//! [`Scope::alloc`](crate::Scope::alloc)).

use std::cell::RefCell;
use std::sync::Arc;

use cudarc::driver::sys;

use super::watched_streams::{wait_for_other_threads, Lease, WatchedStream};
use crate::device::watch::{OpenWatches, Watches};
use crate::device::{Device, DeviceInner};
use crate::driver::context::PrimaryContext;
use crate::driver::device::DeviceId;
use crate::driver::pool::{MemPool, StreamOrdered, U64Attribute};
use crate::driver::stream::{BorrowedStream, RawStream};
use crate::error::{is_out_of_memory, Error, Result};

/// Device memory statistics of one GPU's memory pool, like `torch.cuda.memory_stats`:
/// what allocations hold, what the pool keeps cached for reuse, and the peaks since the
/// last [`Device::reset_peak_memory_stats`]. All values are bytes.
///
/// The pool is the device's, shared by every [`Device`] handle of that GPU in this
/// process (and by other code in the process that allocates from the default pool with
/// `cuMemAllocAsync`); memory of other processes is not counted. Cached memory is
/// reserved from the driver, so [`Device::memory_info`] reports it as not free.
///
/// ```no_run
/// use stream_core::{scope, Device, Error};
/// # fn main() -> stream_core::Result<()> {
/// let dev = Device::new(0)?;
/// let stream = dev.new_stream()?;
/// dev.reset_peak_memory_stats()?;
/// scope(&stream, |s| {
///     let _x = s.alloc::<f32>(1 << 20)?;  // 4 MiB
///     Ok::<_, Error>(())
/// })?;
/// let stats = dev.memory_stats()?;
/// assert!(stats.peak_in_use_bytes >= 4 << 20);
/// println!(
///     "{} MiB in use, {} MiB cached for reuse, {} MiB reserved",
///     stats.in_use_bytes >> 20,
///     stats.cached_bytes >> 20,
///     stats.reserved_bytes >> 20
/// );
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct DeviceMemoryStats {
    /// Bytes held by live allocations ([`DeviceBuffer`](crate::DeviceBuffer)s,
    /// [`DeviceVec`](crate::DeviceVec)s, and frees not yet processed by the pool)
    /// (`CU_MEMPOOL_ATTR_USED_MEM_CURRENT`).
    pub in_use_bytes: usize,
    /// Bytes the pool holds for reuse but no allocation uses: `reserved_bytes -
    /// in_use_bytes`. [`Device::trim_memory`] hands them back to the driver.
    pub cached_bytes: usize,
    /// Bytes of device memory the pool has taken from the driver, in use or cached
    /// (`CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`).
    pub reserved_bytes: usize,
    /// The most bytes in use at once since the last reset
    /// (`CU_MEMPOOL_ATTR_USED_MEM_HIGH`, and never less than `in_use_bytes`).
    pub peak_in_use_bytes: usize,
    /// The most bytes reserved at once since the last reset
    /// (`CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH`, and never less than `reserved_bytes`).
    pub peak_reserved_bytes: usize,
}

/// The statistics of `pool` now.
fn stats(pool: MemPool) -> Result<DeviceMemoryStats> {
    let get = |attr| {
        pool.get(attr)
            .map(|v| usize::try_from(v).unwrap_or(usize::MAX))
    };
    let in_use_bytes = get(U64Attribute::UsedCurrent)?;
    let reserved_bytes = get(U64Attribute::ReservedCurrent)?;
    // The four reads are not one snapshot (another thread may allocate in between),
    // and a high-water mark just reset may read below the current value: clamp both.
    Ok(DeviceMemoryStats {
        in_use_bytes,
        cached_bytes: reserved_bytes.saturating_sub(in_use_bytes),
        reserved_bytes,
        peak_in_use_bytes: get(U64Attribute::UsedHigh)?.max(in_use_bytes),
        peak_reserved_bytes: get(U64Attribute::ReservedHigh)?.max(reserved_bytes),
    })
}

thread_local! {
    /// The streams of the scopes (forks included) open on this thread that got memory
    /// they free on their stream or issued a collective, innermost last, each with its
    /// device. Every `Device` handle of one GPU shares that GPU's primary
    /// context and default pool, so the device is the driver's `CUdevice`, not the
    /// handle.
    static OPEN_SCOPES: RefCell<Vec<(DeviceId, sys::CUstream)>> = const { RefCell::new(Vec::new()) };
}

/// Registers a scope's stream, for as long as the scope lives, as one on which this
/// thread may have queued frees: buffers dropped in the scope are freed on its stream,
/// and those frees complete only when the stream's earlier work has run. Out of memory,
/// [`DeviceInner::alloc_async`] waits for these streams so that the frees complete and the
/// memory can be reused or released.
///
/// Made only by [`LazyOpenScope::note_frees`], a field of [`Scope`](crate::Scope): a scope
/// lives in the frame of `scope` or `fork`, out of the user's reach, and borrows its
/// stream for longer than it lives, so every registered handle is a live stream.
///
/// Registered on one thread's list, it must be dropped on that thread: the `Scope`
/// holding it is neither `Send` nor `Sync` (its brand).
pub(crate) struct OpenScope {
    device: DeviceId,
    /// The stream's handle, as a number: only compared, to find the entry again.
    stream: usize,
}

impl OpenScope {
    /// The streams an allocation on `allocating` (a stream of `device`) waits for before
    /// it retries: `allocating` itself, the device's housekeeping stream (where dropped
    /// `DeviceVec`s are freed), and the streams of this thread's open scopes on this
    /// device, each once.
    fn pending_free_streams(device: &DeviceInner, allocating: sys::CUstream) -> Vec<sys::CUstream> {
        let mut streams = vec![allocating];
        let housekeeping = device.housekeeping.raw();
        if housekeeping != allocating {
            streams.push(housekeeping);
        }
        Self::add_streams_on(device.device, streams)
    }

    /// `streams`, then the streams of this thread's open scopes on `device` that are not
    /// among them yet.
    fn add_streams_on(device: DeviceId, mut streams: Vec<sys::CUstream>) -> Vec<sys::CUstream> {
        let _ = OPEN_SCOPES.try_with(|open| {
            for &(id, stream) in open.borrow().iter().rev() {
                if id == device && !streams.contains(&stream) {
                    streams.push(stream);
                }
            }
        });
        streams
    }
}

/// A scope's entry in this thread's list of open scopes ([`OpenScope`]), made only when
/// the scope first gets memory it will free on its stream ([`note_frees`]): a scope that
/// allocates nothing has no frees for an out-of-memory retry to wait for, and its entry
/// and exit then cost no list operations (issue 13: a scope costs what its
/// synchronisation costs).
///
/// A field of [`Scope`](crate::Scope), under the same rules as [`OpenScope`]: it lives in
/// the scope, which stays in its creator's frame, on its thread, and borrows its stream
/// for longer than it lives.
///
/// [`note_frees`]: LazyOpenScope::note_frees
///
/// A `OnceLock` rather than a `OnceCell` only so that this type is `Sync` (a scope is
/// neither `Send` nor `Sync` through its brand alone, which is what the compiler's error
/// for a scope sent to another thread should name); on x86 its check is a plain load.
#[derive(Default)]
pub(crate) struct LazyOpenScope {
    entry: std::sync::OnceLock<OpenScope>,
    /// Its stream among the process's watched streams, once the scope issued a
    /// collective (`watched_streams.rs`).
    watched: std::sync::OnceLock<WatchedStream>,
}

impl LazyOpenScope {
    /// Lists `stream` (a stream of `device`) among this thread's open scopes, once, for
    /// as long as this value lives; given the `watches` of a collective the scope issued,
    /// among the process's watched streams too, once.
    ///
    /// # Safety
    ///
    /// `stream` is a stream of `device` and must stay alive until this value is dropped,
    /// on this thread (the out-of-memory recovery synchronises every listed stream), and
    /// every call passes the same stream: the caller keeps this value in a scope that
    /// borrows the stream for longer, out of the user's reach, so that it can be neither
    /// forgotten nor moved to another thread.
    #[inline]
    pub(crate) unsafe fn note_frees(
        &self,
        device: &DeviceInner,
        stream: &RawStream,
        watches: Option<&Arc<Watches>>,
    ) {
        if let Some(watches) = watches {
            self.watched.get_or_init(|| {
                // SAFETY: the stream is one of `device`'s and outlives this value (this
                // function's contract), which holds the `WatchedStream` whose drop
                // unlists the lease.
                let lease = unsafe { Lease::list(&device.context, stream) };
                WatchedStream::list(lease, &device.context, watches)
            });
        }
        self.entry.get_or_init(|| {
            let entry = (device.device, stream.raw());
            // Fails only while the thread is being torn down; the scope then just goes
            // unregistered (out of memory, its frees are not waited for).
            let _ = OPEN_SCOPES.try_with(|open| open.borrow_mut().push(entry));
            OpenScope {
                device: entry.0,
                stream: entry.1 as usize,
            }
        });
    }

    /// `true` once [`note_frees`](Self::note_frees) listed the scope.
    #[inline]
    pub(crate) fn is_noted(&self) -> bool {
        self.entry.get().is_some()
    }

    /// `true` once [`note_frees`](Self::note_frees) listed the scope's stream among the
    /// process's watched streams.
    #[inline(always)]
    pub(crate) fn is_watched(&self) -> bool {
        self.watched.get().is_some()
    }
}

impl Drop for OpenScope {
    fn drop(&mut self) {
        let _ = OPEN_SCOPES.try_with(|open| {
            let mut open = open.borrow_mut();
            // Scopes end innermost first, so this is the last entry; search anyway.
            let found = |&(device, stream): &(DeviceId, sys::CUstream)| {
                device == self.device && stream as usize == self.stream
            };
            if let Some(at) = open.iter().rposition(found) {
                open.remove(at);
            }
        });
    }
}

impl DeviceInner {
    /// Allocates `bytes` (non-zero) stream-ordered on `stream` (a stream of this device)
    /// from the device's pool. The one place device memory is allocated, and the one
    /// out-of-memory recovery. More than the device's total memory is
    /// [`Error::OutOfMemory`] at once, without a driver call; otherwise,
    ///
    /// when the driver reports `CUDA_ERROR_OUT_OF_MEMORY`, waits on the host for the
    /// streams on which this thread's frees may still be pending (see
    /// [`OpenScope::pending_free_streams`]), so that the pool sees those frees complete,
    /// trims the pool to zero, and tries once more; if that fails too, returns
    /// [`Error::OutOfMemory`] with the device's free and total memory measured after the
    /// trim. It never waits for the whole device, nor for a stream no scope of this
    /// thread has open (besides the device's own housekeeping stream). While a scope of
    /// this thread has collectives issued, each wait is bounded as the scope's own end
    /// is (`device/watch.rs`): a collective whose peer died makes the allocation return
    /// the communicator's error (`CollectiveTimedOut`, the communicator aborted), which
    /// the scope's end reports again.
    ///
    /// Allocating is safe (using the memory is what needs care); the allocation names
    /// its pool and stream, so it does not depend on the current context. A stream being
    /// captured into a graph would record the allocation instead of running it: scopes
    /// refuse capturing streams, and the housekeeping stream is never captured.
    pub(crate) fn alloc_async(&self, stream: &RawStream, bytes: usize) -> Result<StreamOrdered> {
        if bytes > self.total_memory {
            // No release or retry can make room, and the driver's attempt would map
            // memory while it tries (142 GiB for twice an H200's, below) and hold up
            // other threads' calls for about 0.35 s (`scope/outstanding/tests/`).
            return Err(self.out_of_memory(bytes));
        }
        match self.pool.alloc(bytes, stream) {
            Ok(allocation) => return Ok(allocation),
            Err(e) if is_out_of_memory(&e) => {}
            Err(e) => return Err(Error::driver("cuMemAllocFromPoolAsync", e)),
        }
        let pending = OpenScope::pending_free_streams(self, stream.raw());
        wait_for_streams(&self.context, pending, OpenWatches::now().as_ref(), true)?;
        self.pool.trim_to(0)?;
        match self.pool.alloc(bytes, stream) {
            Ok(allocation) => Ok(allocation),
            Err(e) if is_out_of_memory(&e) => {
                // A failed allocation can leave the pool holding the memory it mapped
                // while trying (measured on an H200: 142 GiB after a request of twice
                // the card): hand it back, so the error leaves the device as it was.
                self.pool.trim_to(0)?;
                Err(self.out_of_memory(bytes))
            }
            Err(e) => Err(Error::driver("cuMemAllocFromPoolAsync", e)),
        }
    }

    /// [`Error::OutOfMemory`] for a request of `bytes`, with the device's free and total
    /// memory now.
    fn out_of_memory(&self, bytes: usize) -> Error {
        let (free, total) = self
            .bind()
            .and_then(|bound| bound.memory_info())
            .unwrap_or((0, self.total_memory));
        Error::from(crate::error::OutOfMemory {
            requested: bytes,
            free,
            total,
        })
    }

    /// Before a call that waits for the whole device (`cuMemFree` of managed memory,
    /// `cuMemFreeHost`): polls the streams of this thread's open scopes on this device,
    /// and the housekeeping stream, until they are idle, within the bounds of those
    /// scopes' watches (`device/watch.rs`). A collective whose peer died, on one of them,
    /// would otherwise hold the device-wide wait forever: the watch's error is returned
    /// (the communicator aborted, so the wait that follows ends), and the scope's end
    /// reports it again. Then the watched streams of other threads' scopes on the GPU
    /// (`watched_streams.rs`): [`Error::HeldUpByAnotherThread`] for one past its timeout
    /// whose thread is not waiting for it (nothing aborted it: the device-wide call would
    /// wait for that thread's next wait). Without watched scopes, returns at once; the
    /// device-wide call is then the wait, as it always was.
    pub(crate) fn bound_device_wide_wait(&self) -> Result<()> {
        bound_waits_on(&self.context, vec![self.housekeeping.raw()])
    }
}

/// [`DeviceInner::bound_device_wide_wait`] for a device handle being dropped, whose
/// extensions free what waits for the whole device (the pinned pool's `cuMemFreeHost`,
/// the module cache's `cuModuleUnload`): no scope of that handle is open (each holds
/// it), but a scope of another handle of the same GPU, open on this thread, may be
/// behind a collective whose peer died. `context` is the GPU's primary context.
pub(crate) fn bound_wait_before_device_release(context: &Arc<PrimaryContext>) -> Result<()> {
    bound_waits_on(context, Vec::new())
}

/// Polls `first`, then the streams of this thread's open scopes on `context`'s GPU, until
/// each is idle, within the bounds of this thread's watched scopes, then other threads'
/// watched streams on that GPU (`watched_streams.rs`): at once `Ok` with none open
/// (nothing to bound).
fn bound_waits_on(context: &Arc<PrimaryContext>, first: Vec<sys::CUstream>) -> Result<()> {
    if let Some(open) = OpenWatches::now() {
        let pending = OpenScope::add_streams_on(context.device(), first);
        wait_for_streams(context, pending, Some(&open), false)?;
    }
    wait_for_other_threads(context)
}

/// Waits for each of `streams` (the caller's, the housekeeping stream of a device of
/// `context` and the streams of this thread's open scopes on its GPU), bounded by
/// `open`, this thread's watched scopes (with none, nothing bounds the synchronisation),
/// and then synchronises it when `synchronize`.
fn wait_for_streams(
    context: &Arc<PrimaryContext>,
    streams: Vec<sys::CUstream>,
    open: Option<&OpenWatches>,
    synchronize: bool,
) -> Result<()> {
    for pending in streams {
        // SAFETY: every handle is a live stream of `context`'s GPU: the caller's
        // (borrowed for this call), the housekeeping stream of the caller's device
        // (alive as long as that device, which the caller borrows), or the stream of a
        // scope open on this thread, which is registered only while that scope borrows
        // it (`LazyOpenScope::note_frees`'s contract); the handle lives in this loop.
        let pending = unsafe { BorrowedStream::new(context, pending) };
        // A collective on it whose peer died would hold this wait forever: bounded as
        // the scopes' own waits are, and its error is the caller's.
        if let Some(open) = open {
            open.poll(|| pending.is_idle())?;
        }
        if synchronize {
            pending.synchronize()?;
        }
    }
    Ok(())
}

impl Device {
    /// Sets how many bytes of freed device memory the device's pool keeps cached before
    /// it hands memory back to the driver at a synchronisation
    /// (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`).
    ///
    /// [`Device::new`] sets `u64::MAX`: freed memory is always kept for reuse, so short
    /// scopes in a loop do not map and unmap device memory each time. Lower it when
    /// other processes or non-pool allocations need the memory back without a call to
    /// [`trim_memory`](Self::trim_memory); `0` is the driver's default (release
    /// everything unused at every synchronisation).
    ///
    /// The setting belongs to the device's default pool, so it applies to every
    /// [`Device`] handle of this GPU in the process, and [`Device::new`] sets it to
    /// `u64::MAX` again.
    ///
    /// ```no_run
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = stream_core::Device::new(0)?;
    /// dev.set_memory_release_threshold(4 << 30)?; // keep at most 4 GiB cached
    /// assert_eq!(dev.memory_release_threshold()?, 4 << 30);
    /// # Ok(()) }
    /// ```
    pub fn set_memory_release_threshold(&self, bytes: u64) -> Result<()> {
        self.inner.pool.set(U64Attribute::ReleaseThreshold, bytes)
    }

    /// The release threshold of the device's pool, in bytes (see
    /// [`set_memory_release_threshold`](Self::set_memory_release_threshold)).
    pub fn memory_release_threshold(&self) -> Result<u64> {
        self.inner.pool.get(U64Attribute::ReleaseThreshold)
    }

    /// Hands cached device memory back to the driver (`cuMemPoolTrimTo`), until the
    /// pool reserves at most `keep_bytes` or nothing more can be released. If the pool
    /// reserves more than `keep_bytes`, at least `keep_bytes` stay reserved (the driver
    /// releases whole blocks).
    ///
    /// Only memory whose frees have *completed and been seen by the host* is released.
    /// Memory of live buffers stays, and so may memory freed on a stream nothing has
    /// waited for since (a buffer dropped inside a scope that is still open); memory
    /// freed by ended scopes is released. Dropped [`DeviceVec`](crate::DeviceVec)s are
    /// freed on the device's housekeeping stream, so this call **blocks** until that
    /// stream is idle (it holds only those frees and the copies of other threads'
    /// blocking `DeviceVec` calls) before it trims; it never waits for a scope's stream
    /// or the whole device.
    ///
    /// ```no_run
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = stream_core::Device::new(0)?;
    /// let weights = dev.alloc_vec::<f32>(1 << 28)?;
    /// drop(weights);
    /// dev.trim_memory(0)?; // the 1 GiB goes back to the driver, e.g. for another process
    /// println!("{} bytes still cached", dev.memory_stats()?.cached_bytes);
    /// # Ok(()) }
    /// ```
    pub fn trim_memory(&self, keep_bytes: usize) -> Result<()> {
        self.inner.sync_housekeeping()?;
        self.inner.pool.trim_to(keep_bytes)
    }

    /// Device memory statistics of this GPU's pool: in use, cached, reserved, and the
    /// peaks since the last [`reset_peak_memory_stats`](Self::reset_peak_memory_stats).
    /// See [`DeviceMemoryStats`] for an example. Does not block.
    pub fn memory_stats(&self) -> Result<DeviceMemoryStats> {
        stats(self.inner.pool)
    }

    /// Restarts the peaks of [`memory_stats`](Self::memory_stats)
    /// (`peak_in_use_bytes`, `peak_reserved_bytes`): from now on they count from the
    /// memory in use and reserved at this call.
    ///
    /// ```no_run
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = stream_core::Device::new(0)?;
    /// dev.reset_peak_memory_stats()?;
    /// // ... run one step ...
    /// println!("the step needed {} MiB at most", dev.memory_stats()?.peak_in_use_bytes >> 20);
    /// # Ok(()) }
    /// ```
    pub fn reset_peak_memory_stats(&self) -> Result<()> {
        // The driver accepts only zero for the high-water marks: it restarts them.
        self.inner.pool.set(U64Attribute::UsedHigh, 0)?;
        self.inner.pool.set(U64Attribute::ReservedHigh, 0)
    }
}
