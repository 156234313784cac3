//! [`Scope::attach`] and [`Scope::attach_ref`]: a [`DeviceVec`] brought into a scope
//! for the rest of it.
//!
//! Attaching borrows the `DeviceVec` for `'env`, which is what makes the outermost
//! scope's final synchronisation cover every use of it: it cannot be dropped, or
//! attached mutably elsewhere, while a scope's work on it may be pending.

use crate::error::Result;
use crate::memory::{DeviceRepr, DeviceSlice, DeviceSliceMut, DeviceVec};
use crate::scope::Scope;

impl<'s, 'env> Scope<'s, 'env> {
    /// Brings a [`DeviceVec`] into this scope as a writable view, borrowing it mutably
    /// until the scope ends. Returns [`Error::DeviceMismatch`](crate::Error::DeviceMismatch)
    /// for memory of another device.
    pub fn attach<T: DeviceRepr>(
        &'s self,
        vec: &'env mut DeviceVec<T>,
    ) -> Result<DeviceSliceMut<'s, 's, T>> {
        DeviceSliceMut::attached(&self.token, vec)
    }

    /// Brings a [`DeviceVec`] into this scope as a read-only view, borrowing it until the
    /// scope ends. Returns [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) for
    /// memory of another device.
    pub fn attach_ref<T: DeviceRepr>(
        &'s self,
        vec: &'env DeviceVec<T>,
    ) -> Result<DeviceSlice<'s, 's, T>> {
        DeviceSlice::attached(&self.token, vec)
    }
}
