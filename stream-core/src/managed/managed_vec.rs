//! [`ManagedVec`]: managed (unified) memory that the host reads and writes as a slice
//! while no scope has it, and that a scope attaches for its kernels, copies and fills
//! (see [`Scope::attach_managed`](crate::Scope::attach_managed)).

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::sys::CUdevice_attribute;

use crate::device::Device;
use crate::driver::managed::{attach_to_streams, Attach, ManagedAllocation};
use crate::error::{byte_len, Error, Result};
use crate::managed::access::{HostAccess, ManagedAccess};
use crate::managed::{budget, stats};
use crate::memory::view::RawSlice;
use crate::memory::DeviceRepr;

/// Managed (unified) memory of `len` elements of `T`: one address valid on the host and
/// on the GPU, whose pages the driver migrates to where they are used. Zeroed when
/// allocated. `Send` and `Sync`, like a `Vec<T>`.
///
/// Where it may be touched is its type state:
///
/// * **unattached** (no scope holds it): the host reads and writes it through
///   [`host`](Self::host) and [`host_mut`](Self::host_mut);
/// * **attached** to a scope by [`Scope::attach_managed`](crate::Scope::attach_managed)
///   (`&mut`): kernels, copies and fills of that scope use it through the view, and the
///   host cannot touch it (the scope borrows it mutably until its end);
///   [`Scope::attach_managed_ref`](crate::Scope::attach_managed_ref) (`&`): the scope's
///   work reads it and the host may read it too, not write it;
/// * **on its way back**: [`Scope::prefetch_to_host`](crate::Scope::prefetch_to_host)
///   consumes the attached view and returns a [`Pending`](crate::Pending) whose
///   [`wait`](crate::Pending::wait) hands the host the slice before the scope ends.
///
/// ```no_run
/// use stream_core::{scope, Device, Error};
/// # fn main() -> stream_core::Result<()> {
/// let dev = Device::new(0)?;
/// let stream = dev.new_stream()?;
/// let mut data = dev.alloc_managed::<f32>(1 << 20)?;
/// data.host_mut()?.iter_mut().enumerate().for_each(|(i, x)| *x = i as f32);
/// scope(&stream, |s| {
///     let mut view = s.attach_managed(&mut data)?;   // the host can no longer touch `data`
///     s.prefetch_to_device(&view)?;                    // pages move ahead of the kernel
///     s.fill(&mut view.slice_mut(..16)?, 7.0)?;
///     let host = s.prefetch_to_host(view)?.wait()?;   // back on the host, inside the scope
///     assert_eq!(host[0], 7.0);
///     Ok::<_, Error>(())
/// })?;
/// assert_eq!(data.host()?[16], 16.0);
/// # Ok(()) }
/// ```
///
/// While it is attached, the host cannot read it (see
/// `ui-tests/tests/ui/managed/host-read-while-attached.rs`):
///
/// ```compile_fail,E0502
/// # use stream_core::{scope, Error, ManagedVec, Stream};
/// # fn f(stream: &Stream, data: &mut ManagedVec<f32>) -> Result<(), Error> {
/// scope(stream, |s| {
///     let mut view = s.attach_managed(data)?;
///     s.fill(&mut view, 1.0)?;
///     println!("{}", data.host()?[0]); // error: `data` is attached to the scope
///     Ok(())
/// })
/// # }
/// ```
///
/// # Freeing waits for the device
///
/// Dropping a `ManagedVec` frees it with `cuMemFree`, which "may perform implicit
/// synchronization" for memory that is not from the stream-ordered allocator: it may
/// wait until the **whole device** is idle. Nothing else in this crate does; drop
/// managed vectors outside the loops whose overlap matters. (No scope can be using it
/// then: attaching borrows it until the scope has synchronised.) Dropped inside a scope
/// that has issued an NCCL collective, it waits for that scope's streams within the
/// communicator's timeout first: behind a collective whose peer died, the communicator
/// is aborted after the timeout (ending the collective, so the free can go on), and the
/// scope's end returns [`Error::CollectiveTimedOut`].
pub struct ManagedVec<T: DeviceRepr> {
    /// `None` for zero bytes.
    pub(super) allocation: Option<ManagedAllocation>,
    len: usize,
    pub(super) access: ManagedAccess,
    /// [`ManagedAccess::StreamAttached`] only: a scope attached the memory for the device
    /// (`CU_MEM_ATTACH_GLOBAL`) and the host has not attached it back since, so the host
    /// must do that, and wait, before it touches it.
    pub(super) device_visible: AtomicBool,
    device: Device,
    _elem: PhantomData<T>,
}

/// Whether an allocation is held to the device's free memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Budget {
    /// Refuse what does not fit (see `budget::check`).
    FreeMemory,
    /// Ask the driver whatever the size.
    Oversubscribe,
}

impl Device {
    /// How this device shares managed memory with the host, or `None` when it cannot
    /// allocate managed memory at all (`CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY = 0`). See
    /// [`ManagedAccess`] for an example.
    pub fn managed_access(&self) -> Result<Option<ManagedAccess>> {
        let device = self.inner.device;
        if device.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)? == 0 {
            return Ok(None);
        }
        let concurrent =
            device.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)?;
        Ok(Some(ManagedAccess::of_attribute(concurrent)))
    }

    /// [`managed_access`](Self::managed_access), or
    /// [`Error::ManagedMemoryUnsupported`].
    fn managed_access_or_refuse(&self) -> Result<ManagedAccess> {
        self.managed_access()?
            .ok_or(Error::ManagedMemoryUnsupported {
                ordinal: self.ordinal(),
            })
    }

    /// Allocates `len` zeroed elements of managed memory (`cuMemAllocManaged`), in the
    /// mode of the device (see [`ManagedAccess`]). `len == 0` allocates nothing.
    ///
    /// **Never more than the device has free.** Before the driver is asked, the request
    /// is checked against the device's free memory (`cuMemGetInfo`) less the managed
    /// memory this process already holds on the device (any of it may migrate there)
    /// and a margin of a sixteenth of the device's memory (at least 256 MiB). If it does
    /// not fit, the device's pool first hands its cached memory back to the driver
    /// ([`trim_memory`](Self::trim_memory)`(0)`, which waits for the housekeeping
    /// stream) and the check is made again; then it returns
    /// [`Error::ManagedExceedsFreeMemory`], having allocated nothing. A request beyond
    /// that is oversubscription, which can stall or hang the GPU:
    /// [`alloc_managed_oversubscribed`](Self::alloc_managed_oversubscribed) opts in.
    ///
    /// The memory is zeroed by the host, so it starts resident in host memory (the
    /// first kernel or [`Scope::prefetch_to_device`](crate::Scope::prefetch_to_device)
    /// moves it), and the call blocks for as long as writing `len` elements takes.
    /// Other errors: [`Error::ManagedMemoryUnsupported`], [`Error::SizeOverflow`],
    /// [`Error::OutOfMemory`] when the driver refuses.
    ///
    /// ```no_run
    /// use stream_core::{Device, Error};
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = Device::new(0)?;
    /// let total = dev.total_memory()?;
    /// assert!(matches!(
    ///     dev.alloc_managed::<u8>(total),
    ///     Err(Error::ManagedExceedsFreeMemory { .. })
    /// ));
    /// let small = dev.alloc_managed::<u8>(1 << 20)?;
    /// assert_eq!(small.host()?[0], 0);
    /// # Ok(()) }
    /// ```
    pub fn alloc_managed<T: DeviceRepr>(&self, len: usize) -> Result<ManagedVec<T>> {
        let access = self.managed_access_or_refuse()?;
        ManagedVec::alloc(self, len, access, Budget::FreeMemory)
    }

    /// Like [`alloc_managed`](Self::alloc_managed), in the mode `access` instead of the
    /// device's: [`ManagedAccess::StreamAttached`] works on every device (it is what a
    /// device without concurrent managed access does, so code for such devices can be
    /// tested on any GPU); [`ManagedAccess::Concurrent`] on a device without concurrent
    /// access is [`Error::ManagedNeedsConcurrentAccess`].
    ///
    /// ```no_run
    /// use stream_core::{Device, ManagedAccess};
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = Device::new(0)?;
    /// let v = dev.alloc_managed_with_access::<f32>(1024, ManagedAccess::StreamAttached)?;
    /// assert_eq!(v.access(), ManagedAccess::StreamAttached);
    /// # Ok(()) }
    /// ```
    pub fn alloc_managed_with_access<T: DeviceRepr>(
        &self,
        len: usize,
        access: ManagedAccess,
    ) -> Result<ManagedVec<T>> {
        let device = self.managed_access_or_refuse()?;
        ManagedVec::alloc(self, len, access.on(device)?, Budget::FreeMemory)
    }

    /// Like [`alloc_managed`](Self::alloc_managed), without the free-memory check:
    /// **oversubscription**, opted in to.
    ///
    /// What it risks: managed memory larger than the GPU's free memory is evicted to host
    /// memory and brought back page by page while kernels run. A kernel that touches
    /// more than fits thrashes: it may run orders of magnitude slower, stall the whole
    /// GPU (other processes' work included) for seconds, or trip the driver's watchdog,
    /// and on devices without concurrent managed access the allocation or the first
    /// launch fails instead. The memory is zeroed by the host, so the host must have the
    /// memory too (or the process is killed for lack of it). Use it for data that is
    /// touched in parts that each fit, and prefetch those parts.
    ///
    /// ```no_run
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = stream_core::Device::new(0)?;
    /// let (free, _) = dev.memory_info()?;
    /// // More than fits: only ever process it in slices that do.
    /// let big = dev.alloc_managed_oversubscribed::<u8>(free + (1 << 30))?;
    /// # drop(big);
    /// # Ok(()) }
    /// ```
    pub fn alloc_managed_oversubscribed<T: DeviceRepr>(&self, len: usize) -> Result<ManagedVec<T>> {
        let access = self.managed_access_or_refuse()?;
        ManagedVec::alloc(self, len, access, Budget::Oversubscribe)
    }
}

impl<T: DeviceRepr> ManagedVec<T> {
    /// Allocates and zeroes `len` elements in mode `access` (legal on `device`).
    fn alloc(device: &Device, len: usize, access: ManagedAccess, budget: Budget) -> Result<Self> {
        let bytes = byte_len::<T>(len)?;
        let mut vec = ManagedVec {
            allocation: None,
            len,
            access,
            device_visible: AtomicBool::new(false),
            device: device.clone(),
            _elem: PhantomData,
        };
        if bytes == 0 {
            return Ok(vec);
        }
        let inner = &device.inner;
        let bound = inner.bind()?;
        let mut info = bound.memory_info()?;
        if budget == Budget::FreeMemory {
            let managed = stats::of(inner.device).allocated_bytes;
            if budget::check(bytes, info.0, info.1, managed).is_err() {
                // The pool's cached memory counts as used: hand it back and look again.
                device.trim_memory(0)?;
                info = bound.memory_info()?;
                budget::check(bytes, info.0, info.1, managed)?;
            }
        }
        let attach = access.allocation_attach();
        let allocation = ManagedAllocation::zeroed(bytes, attach, info, &inner.context)?;
        stats::allocated(inner.device, bytes);
        vec.allocation = Some(allocation);
        Ok(vec)
    }

    /// The device that holds the memory.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// How the host and the GPU share it (see [`ManagedAccess`]).
    pub fn access(&self) -> ManagedAccess {
        self.access
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements, for the host to read. No scope holds the vec mutably (that would
    /// borrow it), so no GPU work writes it now.
    ///
    /// Blocks only for a [`ManagedAccess::StreamAttached`] vec that a scope attached
    /// since the host last touched it: the memory is attached back to the host on the
    /// device's housekeeping stream, which this waits for (never for the device or a
    /// scope's stream). Fails only then, when the driver does.
    pub fn host(&self) -> Result<&[T]> {
        self.make_host_accessible()?;
        let ptr = self.host_ptr();
        // SAFETY: `ptr` is the start of `len` elements of this live allocation (or
        // dangling and aligned for zero bytes), host-accessible now (see
        // `make_host_accessible`), initialised (zeroed when allocated; every write since
        // left valid `T`s, `T: DeviceRepr` accepts any bytes). The shared borrow of
        // `self` keeps every scope from attaching it mutably, and every scope that did has
        // synchronised, so nothing writes it while the slice lives (read-only attaches
        // only read it).
        Ok(unsafe { std::slice::from_raw_parts(ptr, self.len) })
    }

    /// The elements, for the host to read and write. No scope holds the vec (that would
    /// borrow it), so no GPU work touches it now. Blocks and fails only as
    /// [`host`](Self::host) does.
    pub fn host_mut(&mut self) -> Result<&mut [T]> {
        self.make_host_accessible()?;
        let ptr = self.host_ptr();
        // SAFETY: as in `host`, and the exclusive borrow of `self` rules out any other
        // access, host or GPU, while the slice lives.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr, self.len) })
    }

    /// The address as a host pointer (dangling and aligned when nothing is allocated).
    fn host_ptr(&self) -> *mut T {
        match &self.allocation {
            Some(a) => std::ptr::with_exposed_provenance_mut(a.ptr() as usize),
            None => std::ptr::NonNull::dangling().as_ptr(),
        }
    }

    /// Attaches the memory back to the host and waits, when the mode and the state say
    /// so (see `ManagedAccess::on_host_access`).
    fn make_host_accessible(&self) -> Result<()> {
        let visible = self.device_visible.load(Ordering::Acquire);
        let (HostAccess::AttachToHostAndWait, Some(allocation)) =
            (self.access.on_host_access(visible), &self.allocation)
        else {
            return Ok(());
        };
        let inner = &self.device.inner;
        let _bound = inner.bind()?;
        // SAFETY: the allocation is live (owned by `self`) and starts at its `ptr`. No
        // device work uses it: every scope that attached it did so for its whole
        // duration and has synchronised (this borrow of `self` proves those borrows
        // ended), and the attachment to the host is what makes the host's later access
        // legal; nothing attaches it for the device again before a scope borrows it.
        unsafe { attach_to_streams(allocation.ptr(), Attach::Host, &inner.housekeeping) }?;
        inner.sync_housekeeping()?;
        self.device_visible.store(false, Ordering::Release);
        Ok(())
    }

    /// The memory's address and length, for the views of an attaching scope.
    pub(super) fn raw(&self) -> RawSlice {
        match &self.allocation {
            Some(a) => RawSlice {
                ptr: a.ptr(),
                len: self.len,
            },
            None => RawSlice::EMPTY,
        }
    }
}

impl<T: DeviceRepr> Drop for ManagedVec<T> {
    /// Frees the memory with `cuMemFree`, which may wait for the whole device (see the
    /// type's docs).
    fn drop(&mut self) {
        let Some(allocation) = self.allocation.take() else {
            return;
        };
        let (inner, bytes) = (&self.device.inner, allocation.bytes());
        // Errors cannot be reported from `drop`; failing to bind only leaks the memory.
        if let Ok(bound) = inner.bind() {
            if self.device_visible.load(Ordering::Acquire) {
                // An attachment to the host that failed part-way may still be queued.
                let _ = inner.sync_housekeeping();
            }
            // `cuMemFree` waits for the whole device: for a collective whose peer died,
            // on the stream of a scope open on this thread, within that scope's bounds
            // (the scope's end reports the error); on another thread's, on the host
            // while that thread waits too (refused otherwise: then in the driver).
            let _ = inner.bound_device_wide_wait();
            // No scope holds the vec (attaching borrows it until the scope's final
            // synchronisation, or its fork's join into a synchronised stream), so every
            // prefetch, attachment, copy or kernel that used it has completed, or
            // stopped with a sticky error (no more work runs); the blocking attachments
            // of `host` were waited for; no slice into it remains (they borrow `self`).
            allocation.free_managed_waiting_for_device(&bound);
        }
        stats::freed(inner.device, bytes);
    }
}

impl<T: DeviceRepr> std::fmt::Debug for ManagedVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagedVec")
            .field("ptr", &self.raw().ptr)
            .field("len", &self.len)
            .field("access", &self.access)
            .finish()
    }
}
