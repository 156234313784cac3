//! [`Lend`]: what a scope can lend to a [fork](crate::Scope::fork), and the views the
//! child receives.

use crate::device::Stream;
use crate::memory::{DeviceBuffer, DeviceRepr, DeviceSlice, DeviceSliceMut};
use crate::sealed::Sealed as _;
use crate::sealed::{self, Token};

/// Memory a scope branded `'s` can lend to a [fork](crate::Scope::fork), and the views the
/// child receives, branded by the child's `'c`. Sealed.
///
/// | lent                         | the child receives            | the parent, until the fork ends |
/// |------------------------------|-------------------------------|---------------------------------|
/// | `&buffer`, `&view`, a `DeviceSlice` | `DeviceSlice<'_, 'c, T>` | may read, not write or free     |
/// | `&mut buffer`, `&mut view`, a `DeviceSliceMut` | `DeviceSliceMut<'_, 'c, T>` | cannot touch          |
/// | `buffer` (moved)             | `DeviceBuffer<'c, T>`, freed by the child | gave it away         |
/// | `()`, or a tuple of up to six of the above | `()`, or the tuple of their views | as for each item |
pub trait Lend<'s>: sealed::Lendable {
    /// What the child receives.
    type Views<'c>;

    /// The views, for a child scope branded `'c` running on `child`.
    ///
    /// # Safety
    ///
    /// `child` is the stream of the child scope branded `'c`, and it already waits (by
    /// an event) for everything the parent's stream has enqueued so far; the parent's
    /// stream will wait for the child's before `self`'s borrow ends (the fork's join).
    #[doc(hidden)]
    unsafe fn lend<'c>(self, child: &'c Stream, _: Token) -> Self::Views<'c>;
}

impl sealed::Lendable for () {}
impl<'s> Lend<'s> for () {
    type Views<'c> = ();
    unsafe fn lend<'c>(self, _: &'c Stream, _: Token) -> Self::Views<'c> {}
}

/// Shared views: `&buffer`, `&view`, a `DeviceSlice` by value.
macro_rules! lend_shared {
    ($($ty:ty),*) => {$(
        impl<'a, 's, T: DeviceRepr> sealed::Lendable for $ty {}
        impl<'a, 's, T: DeviceRepr> Lend<'s> for $ty {
            type Views<'c> = DeviceSlice<'a, 'c, T>;
            unsafe fn lend<'c>(self, _: &'c Stream, token: Token) -> DeviceSlice<'a, 'c, T> {
                // SAFETY: memory of the parent's brand, borrowed shared for `'a` (so
                // nothing writes or frees it meanwhile); the child's stream is ordered
                // after the parent's earlier work on it, and the parent's later work
                // after the child's (`lend`'s contract).
                unsafe { DeviceSlice::from_raw(self.raw(token)) }
            }
        }
    )*};
}
lend_shared!(
    &'a DeviceBuffer<'s, T>,
    &'a DeviceSlice<'_, 's, T>,
    DeviceSlice<'a, 's, T>,
    &'a DeviceSliceMut<'_, 's, T>
);

/// Exclusive views: `&mut buffer`, `&mut view`, a `DeviceSliceMut` by value.
macro_rules! lend_exclusive {
    ($($ty:ty),*) => {$(
        impl<'a, 's, T: DeviceRepr> sealed::Lendable for $ty {}
        impl<'a, 's, T: DeviceRepr> Lend<'s> for $ty {
            type Views<'c> = DeviceSliceMut<'a, 'c, T>;
            unsafe fn lend<'c>(self, _: &'c Stream, token: Token) -> DeviceSliceMut<'a, 'c, T> {
                // SAFETY: memory of the parent's brand, borrowed exclusively for `'a` (so
                // nothing else touches it meanwhile); the child's stream is ordered after
                // the parent's earlier work on it, and the parent's later work after the
                // child's (`lend`'s contract).
                unsafe { DeviceSliceMut::from_raw(self.raw(token)) }
            }
        }
    )*};
}
lend_exclusive!(
    &'a mut DeviceBuffer<'s, T>,
    &'a mut DeviceSliceMut<'_, 's, T>,
    DeviceSliceMut<'a, 's, T>
);

impl<T: DeviceRepr> sealed::Lendable for DeviceBuffer<'_, T> {}
/// A buffer moved into the fork: handed off to the child, which frees it.
impl<'s, T: DeviceRepr> Lend<'s> for DeviceBuffer<'s, T> {
    type Views<'c> = DeviceBuffer<'c, T>;
    unsafe fn lend<'c>(self, child: &'c Stream, _: Token) -> DeviceBuffer<'c, T> {
        let raw = self.into_raw();
        // SAFETY: the buffer was owned by the parent (moved in), whose every use of it
        // was on the parent's stream, for which `child` already waits (`lend`'s
        // contract); `child` is the stream of the scope branded `'c`.
        unsafe { DeviceBuffer::from_raw(raw, &child.raw) }
    }
}

macro_rules! lend_tuple {
    ($($name:ident),+) => {
        impl<$($name: sealed::Lendable),+> sealed::Lendable for ($($name,)+) {}
        impl<'s, $($name: Lend<'s>),+> Lend<'s> for ($($name,)+) {
            type Views<'c> = ($($name::Views<'c>,)+);
            #[allow(non_snake_case)]
            unsafe fn lend<'c>(self, child: &'c Stream, token: Token) -> Self::Views<'c> {
                let ($($name,)+) = self;
                // SAFETY: each item is lent under the same contract as the tuple.
                ($(unsafe { $name.lend(child, token) },)+)
            }
        }
    };
}
lend_tuple!(A);
lend_tuple!(A, B);
lend_tuple!(A, B, C);
lend_tuple!(A, B, C, D);
lend_tuple!(A, B, C, D, E);
lend_tuple!(A, B, C, D, E, F);
