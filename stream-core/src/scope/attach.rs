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
        self.device().check_same(vec.device())?;
        // SAFETY: the vec's memory is of this scope's device, allocated and filled before
        // `upload_vec`/`alloc_vec` returned (ordered before any stream's work), and every
        // scope that used it before has synchronised (it borrowed the vec until then). It
        // is borrowed mutably for `'env`, longer than `'s`: nothing else reads, writes or
        // frees it for the view's life, and the outermost scope's synchronisation (within
        // `'env`) covers this scope's work on it.
        Ok(unsafe { DeviceSliceMut::from_raw(vec.raw()) })
    }

    /// Brings a [`DeviceVec`] into this scope as a read-only view, borrowing it until the
    /// scope ends. Returns [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) for
    /// memory of another device.
    pub fn attach_ref<T: DeviceRepr>(
        &'s self,
        vec: &'env DeviceVec<T>,
    ) -> Result<DeviceSlice<'s, 's, T>> {
        self.device().check_same(vec.device())?;
        // SAFETY: as in `attach`, except that the vec is borrowed shared for `'env`:
        // nothing writes or frees it for the view's life (a write needs `&mut`), and
        // reads from several streams at once do not race.
        Ok(unsafe { DeviceSlice::from_raw(vec.raw()) })
    }
}
