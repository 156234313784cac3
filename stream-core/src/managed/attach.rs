//! [`Scope::attach_managed`] and [`Scope::attach_managed_ref`]: a [`ManagedVec`] brought
//! into a scope for the rest of it.
//!
//! Attaching borrows the vec for `'env`, as [`Scope::attach`] does for a `DeviceVec`:
//! mutably, so that the host cannot touch it (nor anything free it) until the outermost
//! scope's final synchronisation has covered every use of the view; or shared, so that
//! the host may read it too but nothing writes it.

use crate::error::Result;
use crate::managed::{ManagedSlice, ManagedSliceMut, ManagedVec};
use crate::memory::DeviceRepr;
use crate::scope::Scope;

impl<'s, 'env> Scope<'s, 'env> {
    /// Brings a [`ManagedVec`] into this scope as a writable view, borrowing it mutably
    /// until the scope ends: from now on the host cannot read or write it (a compile
    /// error), until [`prefetch_to_host`](Self::prefetch_to_host) hands it back or the
    /// scope ends.
    ///
    /// For a [`ManagedAccess::StreamAttached`](crate::ManagedAccess::StreamAttached) vec
    /// the memory is first attached for the device on this scope's stream
    /// (`cuStreamAttachMemAsync`). Returns
    /// [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) for memory of another
    /// device.
    ///
    /// ```no_run
    /// use stream_core::{scope, Device, Error};
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = Device::new(0)?;
    /// let stream = dev.new_stream()?;
    /// let mut data = dev.alloc_managed::<u32>(1 << 20)?;
    /// scope(&stream, |s| {
    ///     let mut view = s.attach_managed(&mut data)?;
    ///     s.fill(&mut view, 7)?;
    ///     Ok::<_, Error>(())
    /// })?;
    /// assert!(data.host()?.iter().all(|&x| x == 7));
    /// # Ok(()) }
    /// ```
    ///
    /// Attaching it mutably twice does not compile (see
    /// `ui-tests/tests/ui/managed/attach-mut-twice.rs`):
    ///
    /// ```compile_fail,E0499
    /// # use stream_core::{scope, Error, ManagedVec, Stream};
    /// # fn f(stream: &Stream, data: &mut ManagedVec<f32>) -> Result<(), Error> {
    /// scope(stream, |s| {
    ///     let mut a = s.attach_managed(data)?;
    ///     let mut b = s.attach_managed(data)?; // error: `*data` is already attached
    ///     s.copy_device(&a, &mut b)?;
    ///     Ok(())
    /// })
    /// # }
    /// ```
    pub fn attach_managed<T: DeviceRepr>(
        &'s self,
        vec: &'env mut ManagedVec<T>,
    ) -> Result<ManagedSliceMut<'env, 's, T>> {
        ManagedSliceMut::attached(&self.token, vec)
    }

    /// Brings a [`ManagedVec`] into this scope as a read-only view, borrowing it shared
    /// until the scope ends: the scope's work reads it, and the host may read it too,
    /// but nothing writes it.
    ///
    /// Returns [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) for memory of
    /// another device, and
    /// [`Error::ManagedNeedsConcurrentAccess`](crate::Error::ManagedNeedsConcurrentAccess)
    /// for a [`ManagedAccess::StreamAttached`](crate::ManagedAccess::StreamAttached) vec:
    /// without concurrent managed access the host may not read it while a kernel runs,
    /// which a shared borrow cannot rule out (attach it with
    /// [`attach_managed`](Self::attach_managed) instead).
    ///
    /// ```no_run
    /// use stream_core::{scope, Device, Error};
    /// # fn main() -> stream_core::Result<()> {
    /// let dev = Device::new(0)?;
    /// let (a, b) = (dev.new_stream()?, dev.new_stream()?);
    /// let table = dev.alloc_managed::<f32>(4096)?;
    /// let (mut x, mut y) = (vec![0f32; 4096], vec![0f32; 4096]);
    /// scope(&a, |s| {
    ///     let t = s.attach_managed_ref(&table)?;
    ///     s.copy_to_host(&t, &mut x)?;
    ///     scope(&b, |u| {                          // another stream reads it at once
    ///         let t = u.attach_managed_ref(&table)?;
    ///         u.copy_to_host(&t, &mut y)?.wait()?;
    ///         Ok::<_, Error>(())
    ///     })
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn attach_managed_ref<T: DeviceRepr>(
        &'s self,
        vec: &'env ManagedVec<T>,
    ) -> Result<ManagedSlice<'env, 's, T>> {
        ManagedSlice::attached(&self.token, vec)
    }
}
