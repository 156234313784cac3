//! The handles every other layer builds on: a [`Device`] (one GPU: its primary context,
//! its memory pool, a private stream), a [`Stream`], and the per-thread cache of events
//! that orders streams.
//!
//! Owns: `Device`, `DeviceInner`, `Stream`, the launch limits read when a device is
//! opened, peer access between devices (`peer.rs`), per-device extensions (state that
//! `host/`, `kernel/` and other crates keep per device), and the watches that bound a
//! host's waits for a stream whose work may never finish by itself (`watch.rs`). Uses:
//! `driver/` and `error` only.

mod events;
mod limits;
pub(crate) mod peer;
mod pool_setup;
pub(crate) mod stream;
pub(crate) mod watch;

pub(crate) use events::Event;
pub(crate) use limits::DeviceLimits;
pub use stream::Stream;

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::sys::CUdevice_attribute;

use crate::driver::context::{Bound, PrimaryContext};
use crate::driver::device::{self as raw_device, DeviceId};
use crate::driver::pool::MemPool;
use crate::driver::stream::RawStream;
use crate::error::{Error, Result};

/// One CUDA device and its primary context. Cheap to clone (reference counted), `Send`
/// and `Sync`.
///
/// ```no_run
/// # fn main() -> stream_core::Result<()> {
/// let dev = stream_core::Device::new(0)?;
/// println!("{} with {} MiB", dev.name()?, dev.total_memory()? >> 20);
/// let stream = dev.new_stream()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

/// What a [`Device`] owns. Every field is `Send` and `Sync` by itself (the driver-layer
/// handles are), so the device is too, without an `unsafe impl`.
pub(crate) struct DeviceInner {
    /// Unique per `Device::new` call, never reused: kernel caches key on it, so a
    /// function loaded for a device that is gone can never be launched.
    pub(crate) id: u64,
    pub(crate) ordinal: usize,
    pub(crate) device: DeviceId,
    /// A non-blocking stream for `upload_vec`/`alloc_vec`/`to_host_vec`, which block
    /// on it (and only on it) before they return, and on which dropped `DeviceVec`s are
    /// freed.
    pub(crate) housekeeping: RawStream,
    /// The device's default memory pool, which every device allocation comes from.
    pub(crate) pool: MemPool,
    pub(crate) compute_capability: (i32, i32),
    /// Launch limits, read once so that validating a launch costs no driver call.
    pub(crate) limits: DeviceLimits,
    /// The device's memory in bytes: an allocation larger than this fails at once,
    /// without the driver's attempt and the out-of-memory retry (`memory/pool.rs`).
    pub(crate) total_memory: usize,
    /// State kept per device by this crate's upper layers (the pinned pool, the module
    /// cache) and by other crates (see `interop::device_extension`), dropped when the
    /// device is, with its context bound, before the context is released.
    extensions: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    /// The retained primary context, shared by every handle of this GPU; declared last,
    /// so it is released after everything above.
    pub(crate) context: Arc<PrimaryContext>,
}

impl Device {
    /// Opens device `ordinal` (0 for the first GPU) and retains its primary context.
    ///
    /// Device memory comes from the device's default stream-ordered memory pool, whose
    /// release threshold this sets to `u64::MAX` so that freed memory stays cached for
    /// reuse instead of going back to the driver at every scope's end (see
    /// [`set_memory_release_threshold`](Self::set_memory_release_threshold)).
    ///
    /// Each call makes a new handle, with its own loaded kernels, housekeeping stream and
    /// pinned pool (the primary context and the memory pool are the GPU's, shared); to
    /// share one, clone it (an `Arc`). Open a GPU once and hand clones to threads and
    /// tasks: when the last clone of a handle drops, its pinned pool is freed with
    /// `cuMemFreeHost`, which waits until the whole GPU is idle, other threads' work
    /// included (a test that timed a long kernel on another thread failed by it, on an
    /// H200; their stream queries went on meanwhile: `scope/outstanding/tests/
    /// other_threads.rs`). Kernels find their function without a lock on the first
    /// live `Device` of an ordinal that launched them, and on one made after that one
    /// was dropped; a second live `Device` of the ordinal looks it up under its kernel
    /// cache's lock (on an H200, 1.03x-1.05x of a raw launch's host time, against
    /// 1.01x: `benchmarks/results/2026-11-28-h200x2-function-slot.txt`).
    ///
    /// Returns [`Error::NoDriver`] when the CUDA driver cannot be loaded and
    /// [`Error::NoDevice`] when there is no such device, never a panic.
    pub fn new(ordinal: usize) -> Result<Self> {
        let count = Self::count()?;
        if ordinal >= count {
            return Err(Error::NoDevice { ordinal, count });
        }
        let device = DeviceId::get(ordinal)?;
        let context = PrimaryContext::of(device)?;
        use CUdevice_attribute::*;
        let compute_capability = (
            device.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            device.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        let limits = DeviceLimits::query(device)?;
        let total_memory = device.total_memory()?;
        let pool = pool_setup::configure_pool(device)?;
        let housekeeping = RawStream::new(&context)?;
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Ok(Device {
            inner: Arc::new(DeviceInner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                ordinal,
                device,
                housekeeping,
                pool,
                compute_capability,
                limits,
                total_memory,
                extensions: Mutex::new(HashMap::new()),
                context,
            }),
        })
    }

    /// How many CUDA devices the driver reports: `Ok(0)` when the driver loads but sees
    /// no GPU, [`Error::NoDriver`] when there is no driver at all.
    pub fn count() -> Result<usize> {
        raw_device::count()
    }

    /// The ordinal this device was opened with.
    pub fn ordinal(&self) -> usize {
        self.inner.ordinal
    }

    /// The device's marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    pub fn name(&self) -> Result<String> {
        self.inner.device.name()
    }

    /// Total device memory in bytes.
    pub fn total_memory(&self) -> Result<usize> {
        Ok(self.inner.total_memory)
    }

    /// `(free, total)` device memory in bytes, as the driver reports it now. Memory the
    /// pool keeps cached for reuse counts as not free (see
    /// [`memory_stats`](Self::memory_stats) and [`trim_memory`](Self::trim_memory)).
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        let bound = self.inner.bind()?;
        bound.memory_info()
    }

    /// `(major, minor)` compute capability, e.g. `(9, 0)` for Hopper.
    pub fn compute_capability(&self) -> (i32, i32) {
        self.inner.compute_capability
    }

    /// The most threads a block may have on this device.
    pub fn max_threads_per_block(&self) -> u32 {
        self.inner.limits.max_threads_per_block
    }

    /// The most dynamic shared memory a block may ask for on this device (opt-in limit).
    pub fn max_shared_memory_per_block(&self) -> u32 {
        self.inner.limits.max_shared_per_block_optin
    }

    /// The device's streaming multiprocessors (132 on an H100 SXM): a grid of fewer
    /// blocks leaves some of them idle.
    pub fn multiprocessor_count(&self) -> u32 {
        self.inner.limits.multiprocessors
    }

    /// Creates a new non-blocking stream on this device (it never synchronises
    /// implicitly with the legacy default stream).
    pub fn new_stream(&self) -> Result<Stream> {
        Stream::new(self)
    }

    /// The stream priorities this device offers, most urgent first: `greatest..=least`
    /// in CUDA's numbers, where lower is more urgent and the default, a
    /// [`new_stream`](Self::new_stream)'s, is the least urgent (`0`). On an H100, `-5..=0`.
    ///
    /// ```no_run
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = stream_core::Device::new(0)?;
    /// let urgent = *dev.stream_priorities()?.start();
    /// let stream = dev.new_stream_with_priority(urgent)?;
    /// # Ok(()) }
    /// ```
    pub fn stream_priorities(&self) -> Result<std::ops::RangeInclusive<i32>> {
        let (least, greatest) = crate::driver::stream::priority_range(&self.inner.context)?;
        Ok(greatest..=least)
    }

    /// Creates a new non-blocking stream whose work the device schedules with `priority`
    /// (as PyTorch's `torch.cuda.Stream(priority=...)`: lower numbers are more urgent):
    /// when blocks of several streams wait for the GPU, the more urgent stream's go
    /// first. Blocks already running are not preempted. A priority outside
    /// [`stream_priorities`](Self::stream_priorities) is
    /// [`Error::InvalidStreamPriority`] (the driver would silently clamp it). The stream
    /// to fork a collective onto, to overlap it with this device's kernels: see the
    /// [`nccl`](crate::nccl) module's "Overlapping a collective with computation" (and,
    /// in a graph, [`Capture::fork_with_priority`](crate::Capture::fork_with_priority)).
    ///
    /// ```no_run
    /// use stream_core::{scope, Device, Error};
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = Device::new(0)?;
    /// let background = dev.new_stream()?;                  // least urgent (0)
    /// let latency = dev.new_stream_with_priority(-1)?;     // ahead of it, where -1 is offered
    /// assert!(matches!(
    ///     dev.new_stream_with_priority(1),                 // less urgent than the default
    ///     Err(Error::InvalidStreamPriority { priority: 1, .. })
    /// ));
    /// # let _ = (background, latency);
    /// # Ok(()) }
    /// ```
    pub fn new_stream_with_priority(&self, priority: i32) -> Result<Stream> {
        let range = self.stream_priorities()?;
        if !range.contains(&priority) {
            return Err(Error::InvalidStreamPriority {
                priority,
                most_urgent: *range.start(),
                least_urgent: *range.end(),
            });
        }
        Stream::with_priority(self, priority)
    }

    /// `Ok` when `memory` (the device of memory, or of a library handle) is this device
    /// (the device of a stream or scope), else [`Error::DeviceMismatch`] naming both.
    /// The one check every operation that mixes devices makes.
    ///
    /// ```no_run
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = stream_core::Device::new(0)?;
    /// let again = stream_core::Device::new(0)?;
    /// dev.ensure_same_device(&again)?; // the same GPU
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn ensure_same_device(&self, memory: &Device) -> Result<()> {
        if self.inner.device == memory.inner.device {
            Ok(())
        } else {
            Err(self.mismatch(memory))
        }
    }

    #[cold]
    fn mismatch(&self, memory: &Device) -> Error {
        Error::DeviceMismatch {
            memory: memory.ordinal(),
            stream: self.ordinal(),
        }
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("ordinal", &self.inner.ordinal)
            .finish()
    }
}

impl DeviceInner {
    /// Makes this device's context current on the calling thread until the guard drops,
    /// and then gives the thread its previous context back (see
    /// [`driver::context`](crate::driver::context)).
    #[inline]
    pub(crate) fn bind(&self) -> Result<Bound<'_>> {
        self.context.bind()
    }

    /// The extension of type `T`, made by `init` the first time it is asked for.
    pub(crate) fn extension<T: Any + Send + Sync>(&self, init: impl FnOnce() -> T) -> Arc<T> {
        let mut map = self
            .extensions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(existing) = map.get(&TypeId::of::<T>()) {
            // Always `Ok`: the map is keyed by the value's own `TypeId`.
            if let Ok(extension) = Arc::clone(existing).downcast::<T>() {
                return extension;
            }
        }
        let extension = Arc::new(init());
        map.insert(TypeId::of::<T>(), extension.clone());
        extension
    }

    /// Blocks until the housekeeping stream is idle.
    ///
    /// The housekeeping stream can wait for a scope's stream (a `CudaSlice` converted
    /// from a cudarc stream that carries a scope's work, `interop/cudarc_slice.rs`), so
    /// while a scope of this thread has collectives issued, the wait is bounded as the
    /// scope's own waits are ([`watch::wait_for_open_scopes`]); a watch that gives up
    /// has aborted its communicator, the stream drains, and its error is returned after
    /// the synchronisation.
    pub(crate) fn sync_housekeeping(&self) -> Result<()> {
        let bounded = self.housekeeping_bounded();
        self.housekeeping.synchronize().and(bounded)
    }

    /// [`sync_housekeeping`](Self::sync_housekeeping) before host memory that a copy on
    /// the housekeeping stream uses is released: a failure of the synchronisation is
    /// returned only when it is sticky (the context has stopped), any other aborts the
    /// process, as [`Stream::synchronize_before_release`] does for scopes.
    pub(crate) fn sync_housekeeping_before_release(&self, what: &str) -> Result<()> {
        let bounded = self.housekeeping_bounded();
        stream::release_or_abort(self.housekeeping.synchronize(), what).and(bounded)
    }

    /// The bounded part of a housekeeping synchronisation: `Ok` at once without a
    /// watched scope open on this thread.
    fn housekeeping_bounded(&self) -> Result<()> {
        watch::wait_for_open_scopes(|| self.housekeeping.is_idle().unwrap_or(true))
    }
}

impl Drop for DeviceInner {
    /// The one place where a device's driver objects go, and where calls that may wait
    /// for the whole device are allowed: the user chose this point by dropping the last
    /// handle of the device (DESIGN: no hidden device-wide synchronisation).
    fn drop(&mut self) {
        // Errors cannot be reported from `drop`; failing here only leaks driver objects.
        let bound = self.context.bind();
        // The upper layers' and other crates' per-device state first (pinned blocks,
        // modules, library handles): each needs this context bound to be freed. No scope
        // is open and no buffer is alive (each holds the device).
        let extensions = std::mem::take(
            &mut *self
                .extensions
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        drop(extensions);
        // Hand this handle's cached memory back; other handles of the device only lose
        // cached (unused) memory, which the pool maps again when they need it.
        let _ = self.pool.trim_to(0);
        // The housekeeping stream and the context are released after this body, when
        // the fields drop (the stream binds its own context). Give the thread its
        // previous context back first, and leave no thread that had none with a context
        // that may be destroyed now.
        if let Ok(bound) = bound {
            bound.unbind_if_set();
        }
    }
}
