//! Managed views lent to a [fork](crate::Scope::fork), like device views (see
//! [`Lend`]): a child on another stream can prefetch the next part of a `ManagedVec`
//! while the parent computes on this one.
//!
//! | lent                                      | the child receives             |
//! |-------------------------------------------|--------------------------------|
//! | `&view`, a `ManagedSlice`, `&managed_mut` | `ManagedSlice<'_, 'c, T>`      |
//! | `&mut managed_mut`                        | `ManagedSliceMut<'_, 'c, T>`   |
//! | a `ManagedSliceMut` (moved)               | `ManagedSliceMut<'_, 'c, T>`   |

use crate::managed::{ManagedSlice, ManagedSliceMut};
use crate::memory::brand::LendPermit;
use crate::memory::DeviceRepr;
use crate::scope::Lend;
use crate::sealed;

impl<T: DeviceRepr> sealed::Lendable for ManagedSlice<'_, '_, T> {}
/// A read-only view by value: the same view, for the child.
impl<'a, 's, T: DeviceRepr> Lend<'s> for ManagedSlice<'a, 's, T> {
    type Views<'c> = ManagedSlice<'a, 'c, T>;
    fn lend<'c>(self, permit: &LendPermit<'s, 'c>) -> ManagedSlice<'a, 'c, T> {
        // Borrowed shared for `'a`: nothing writes or frees it meanwhile.
        self.rebranded(&permit.0)
    }
}

impl<T: DeviceRepr> sealed::Lendable for &ManagedSlice<'_, '_, T> {}
/// `&view` of a read-only view.
impl<'a, 's, T: DeviceRepr> Lend<'s> for &'a ManagedSlice<'_, 's, T> {
    type Views<'c> = ManagedSlice<'a, 'c, T>;
    fn lend<'c>(self, permit: &LendPermit<'s, 'c>) -> ManagedSlice<'a, 'c, T> {
        // A copy of the view, whose own borrow outlives `'a`.
        let shortened: ManagedSlice<'a, 's, T> = *self;
        shortened.rebranded(&permit.0)
    }
}

impl<T: DeviceRepr> sealed::Lendable for &ManagedSliceMut<'_, '_, T> {}
/// `&view` of a writable view: the child reads, the parent may read, nobody writes.
impl<'a, 's, T: DeviceRepr> Lend<'s> for &'a ManagedSliceMut<'_, 's, T> {
    type Views<'c> = ManagedSlice<'a, 'c, T>;
    fn lend<'c>(self, permit: &LendPermit<'s, 'c>) -> ManagedSlice<'a, 'c, T> {
        self.lent_shared(&permit.0)
    }
}

impl<T: DeviceRepr> sealed::Lendable for &mut ManagedSliceMut<'_, '_, T> {}
/// `&mut view`: the child writes, the parent cannot touch it until the fork ends.
impl<'a, 's, T: DeviceRepr> Lend<'s> for &'a mut ManagedSliceMut<'_, 's, T> {
    type Views<'c> = ManagedSliceMut<'a, 'c, T>;
    fn lend<'c>(self, permit: &LendPermit<'s, 'c>) -> ManagedSliceMut<'a, 'c, T> {
        self.lent_exclusive(&permit.0)
    }
}

impl<T: DeviceRepr> sealed::Lendable for ManagedSliceMut<'_, '_, T> {}
/// A writable view moved into the fork: the child's from now on.
impl<'a, 's, T: DeviceRepr> Lend<'s> for ManagedSliceMut<'a, 's, T> {
    type Views<'c> = ManagedSliceMut<'a, 'c, T>;
    fn lend<'c>(self, permit: &LendPermit<'s, 'c>) -> ManagedSliceMut<'a, 'c, T> {
        self.into_rebranded(&permit.0)
    }
}
