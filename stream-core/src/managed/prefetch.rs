//! [`Scope::prefetch_to_device`] and [`Scope::prefetch_to_host`]: residency changes of
//! attached managed memory, ordered on the scope's stream like its other work.
//!
//! Moving pages never changes what they hold, so a prefetch to the device is only a
//! promise about speed. A prefetch to the host is also the typed way back: it consumes
//! the writable view, so no more GPU work of the scope can reach those elements, and
//! returns a [`Pending`] whose [`wait`](Pending::wait) (one event recorded after the
//! prefetch) hands the host the elements before the scope ends.

use crate::driver::managed::{attach_to_streams, prefetch, Attach, Location};
use crate::error::{byte_len, Result};
use crate::managed::access::{ToDevice, ToHost};
use crate::managed::view::access_of;
use crate::managed::{ManagedMemory, ManagedSliceMut};
use crate::memory::DeviceRepr;
use crate::scope::{Pending, Scope};
use crate::sealed::TOKEN;

impl<'s, 'env> Scope<'s, 'env> {
    /// Enqueues on this scope's stream a migration of `view`'s pages to the scope's
    /// device (`cuMemPrefetchAsync`), so that the kernels after it find them there
    /// instead of faulting them in one by one. Never blocks. Work on other streams that
    /// needs the pages is ordered after the prefetch as any work is: by a
    /// [fork](Self::fork)'s join, say.
    ///
    /// On a [`ManagedAccess::StreamAttached`](crate::ManagedAccess::StreamAttached) vec
    /// this does nothing: the driver does not prefetch to a device without concurrent
    /// managed access (it moves the memory at each launch itself).
    ///
    /// ```no_run
    /// # use stream_core::{scope, Error, ManagedVec, Stream};
    /// # fn f(stream: &Stream, data: &mut ManagedVec<f32>) -> Result<(), Error> {
    /// scope(stream, |s| {
    ///     let mut view = s.attach_managed(data)?;
    ///     s.prefetch_to_device(&view)?;            // one bulk migration...
    ///     s.fill(&mut view, 1.0)?;                 // ...instead of page faults here
    ///     Ok(())
    /// })
    /// # }
    /// ```
    pub fn prefetch_to_device<T: DeviceRepr>(
        &'s self,
        view: &impl ManagedMemory<'s, T>,
    ) -> Result<()> {
        let raw = view.raw(TOKEN);
        if access_of(view).on_prefetch_to_device() == ToDevice::Skip || raw.len == 0 {
            return Ok(());
        }
        let bytes = byte_len::<T>(raw.len)?;
        let to = Location::Device(self.device().inner.device);
        // SAFETY: `raw` is `bytes` bytes of a live managed allocation: the view is branded
        // by this scope and borrows its `ManagedVec` (for `'env` through the attach), which
        // therefore is not freed before the outermost scope's final synchronisation,
        // which follows this prefetch on this stream (or through fork joins). The vec is
        // `Concurrent` (checked above), so its device has concurrent managed access and
        // this stream is one of that device's (the attach checked the device).
        unsafe { prefetch(raw.ptr, bytes, to, &self.stream.raw) }
    }

    /// Hands `view`'s elements back to the host before the scope ends: enqueues a
    /// migration of its pages to host memory on this scope's stream, after all the work
    /// enqueued so far, and returns a [`Pending`] holding the host slice;
    /// [`Pending::wait`] blocks on one event recorded after the migration, then returns
    /// the slice (only this stream's work is waited for, never the device).
    ///
    /// The view is consumed, so no later GPU work of the scope can use those elements;
    /// forgetting the `Pending` keeps them from the host until the scope ends (safe).
    /// Other parts of the same vec stay on the device, usable by the scope.
    ///
    /// On a [`ManagedAccess::StreamAttached`](crate::ManagedAccess::StreamAttached) vec
    /// the memory is attached back to the host instead (`cuStreamAttachMemAsync`, which
    /// changes whole allocations only), so `view` must be the one
    /// [`attach_managed`](Self::attach_managed) returned, whole and moved (it may have
    /// been moved through a fork); a sub-range or a reborrow is
    /// [`Error::ManagedNeedsConcurrentAccess`](crate::Error::ManagedNeedsConcurrentAccess).
    ///
    /// ```no_run
    /// use stream_core::{scope, Device, Error};
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = Device::new(0)?;
    /// let stream = dev.new_stream()?;
    /// let mut data = dev.alloc_managed::<u32>(1 << 20)?;
    /// scope(&stream, |s| {
    ///     let mut view = s.attach_managed(&mut data)?;
    ///     s.fill(&mut view, 3)?;
    ///     let host: &mut [u32] = s.prefetch_to_host(view)?.wait()?;
    ///     assert!(host.iter().all(|&x| x == 3)); // inside the scope
    ///     host[0] = 4;
    ///     Ok::<_, Error>(())
    /// })?;
    /// # Ok(()) }
    /// ```
    ///
    /// Reading before `wait` does not compile (see
    /// `ui-tests/tests/ui/managed/host-read-before-prefetch-wait.rs`):
    ///
    /// ```compile_fail,E0502
    /// # use stream_core::{scope, Error, ManagedVec, Stream};
    /// # fn f(stream: &Stream, data: &mut ManagedVec<u32>) -> Result<(), Error> {
    /// scope(stream, |s| {
    ///     let view = s.attach_managed(data)?;
    ///     let pending = s.prefetch_to_host(view)?;
    ///     println!("{}", data.host()?[0]); // error: `data` is still attached
    ///     pending.wait()?;
    ///     Ok(())
    /// })
    /// # }
    /// ```
    pub fn prefetch_to_host<'a, T: DeviceRepr>(
        &'s self,
        view: ManagedSliceMut<'a, 's, T>,
    ) -> Result<Pending<'s, &'a mut [T]>> {
        let (raw, access, whole) = view.into_parts();
        let step = access.on_prefetch_to_host(whole)?;
        let bytes = byte_len::<T>(raw.len)?;
        // Nothing is allocated for zero bytes: a dangling, aligned pointer then.
        let ptr = match raw.ptr {
            0 => std::ptr::NonNull::<T>::dangling().as_ptr(),
            address => std::ptr::with_exposed_provenance_mut::<T>(address as usize),
        };
        // SAFETY: `ptr` is the start of `raw.len` elements of a live managed allocation
        // (the view borrows its vec, which the attach borrowed for `'env`, for `'a`), at
        // the same address on the host (unified addressing), initialised (`T:
        // DeviceRepr` accepts any bytes); or dangling and aligned for zero bytes. The view
        // was consumed, and it borrowed these elements exclusively for `'a`: no other
        // view, host slice or GPU work of this scope can reach them for `'a`, except the
        // work enqueued before this call, which the `Pending` orders before its event.
        // The slice is only handed out by `Pending::wait` after that event, which follows
        // the migration to the host (or, for a `StreamAttached` vec, its attachment to
        // the host); a forgotten `Pending` keeps it unreachable.
        let host: &'a mut [T] = unsafe { std::slice::from_raw_parts_mut(ptr, raw.len) };
        let context = &self.stream.device.inner.context;
        Pending::after(
            context,
            self.outstanding,
            &self.stream.raw,
            host,
            |stream, _| match step {
                _ if bytes == 0 => Ok(()),
                // SAFETY: `raw` is `bytes` bytes of a live managed allocation, allocated until
                // the scope's final synchronisation (as above), which follows this prefetch.
                ToHost::Prefetch => unsafe { prefetch(raw.ptr, bytes, Location::Host, stream) },
                // SAFETY: `whole` (checked by `on_prefetch_to_host`): `raw.ptr` is the start of
                // the allocation and this view, now consumed, was the only one: no GPU work
                // after this point can use the memory, and the work before it is ordered
                // before the change on this stream (forks that borrowed parts of the view were
                // joined before the view could be moved here). The host touches it only after
                // the `Pending`'s event, which follows the change.
                ToHost::AttachToHost => unsafe { attach_to_streams(raw.ptr, Attach::Host, stream) },
            },
        )
    }
}
