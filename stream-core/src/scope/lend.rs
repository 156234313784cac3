//! [`Lend`]: what a scope can lend to a [fork](crate::Scope::fork), and the views the
//! child receives.

use crate::memory::brand::Rebrand;
use crate::memory::{DeviceBuffer, DeviceRepr, DeviceSlice, DeviceSliceMut};
use crate::sealed;

/// Memory a scope branded `'s` can lend to a [fork](crate::Scope::fork), and the views the
/// child receives, branded by the child's `'c`. Sealed.
///
/// | lent                         | the child receives            | the parent, until the fork ends |
/// |------------------------------|-------------------------------|---------------------------------|
/// | `&buffer`, `&view`, a `DeviceSlice` | `DeviceSlice<'_, 'c, T>` | may read, not write or free     |
/// | `&mut buffer`, `&mut view`, a `DeviceSliceMut` | `DeviceSliceMut<'_, 'c, T>` | cannot touch          |
/// | `buffer` (moved)             | `DeviceBuffer<'c, T>`, freed by the child | gave it away         |
/// | `()`, or a tuple of up to six of the above | `()`, or the tuple of their views | as for each item |
/// | `Some(x)` or `None`, `x` any of the above | `Some` of its views, or `None` | as for `x` |
///
/// A graph [capture](crate::Capture::fork) lends through the same trait: the same rows,
/// and the pinned views a graph holds (`&pinned`, a [`PinnedSlice`](crate::PinnedSlice),
/// `&pinned_mut` give a `PinnedSlice<'_, 'c, T>`; `&mut pinned_mut`, a
/// [`PinnedSliceMut`](crate::PinnedSliceMut) a `PinnedSliceMut<'_, 'c, T>`).
///
/// Views of an attached [`ManagedVec`](crate::ManagedVec) are lent the same way, and stay
/// managed in the child (`&view` gives a [`ManagedSlice`](crate::ManagedSlice), `&mut view`
/// or the view itself a [`ManagedSliceMut`](crate::ManagedSliceMut)), so the child can
/// prefetch them.
pub trait Lend<'s>: sealed::Lendable {
    /// What the child receives.
    type Views<'c>;

    /// `false` when nothing is lent (`()`, a `None`, a tuple of those): a fork onto
    /// another device then needs no peer access.
    #[doc(hidden)]
    fn lends_memory(&self) -> bool {
        true
    }

    /// The views, for the child scope branded `'c` that `permit` names.
    #[doc(hidden)]
    fn lend<'c>(self, permit: &LendPermit<'s, 'c>) -> Self::Views<'c>;
}

/// Defined beside the brand, so that views of other folders (managed memory) can be
/// lent too.
pub use crate::memory::brand::LendPermit;

impl sealed::Lendable for () {}
impl<'s> Lend<'s> for () {
    type Views<'c> = ();
    fn lends_memory(&self) -> bool {
        false
    }
    fn lend<'c>(self, _: &LendPermit<'s, 'c>) -> Self::Views<'c> {}
}

impl<L: sealed::Lendable> sealed::Lendable for Option<L> {}
/// Something lent, or nothing: the child receives `Some` of the item's views, or `None`
/// (a buffer only some forks have, as a pipeline's first micro-batch has nothing to
/// send). A `Some` follows the item's own rules.
impl<'s, L: Lend<'s>> Lend<'s> for Option<L> {
    type Views<'c> = Option<L::Views<'c>>;
    fn lends_memory(&self) -> bool {
        self.as_ref().is_some_and(L::lends_memory)
    }
    fn lend<'c>(self, permit: &LendPermit<'s, 'c>) -> Self::Views<'c> {
        self.map(|item| item.lend(permit))
    }
}

/// Shared views: `&buffer`, `&view`, a `DeviceSlice` by value.
macro_rules! lend_shared {
    ($($ty:ty),*) => {$(
        impl<'a, 's, T: DeviceRepr> sealed::Lendable for $ty {}
        impl<'a, 's, T: DeviceRepr> Lend<'s> for $ty {
            type Views<'c> = DeviceSlice<'a, 'c, T>;
            fn lend<'c>(self, permit: &LendPermit<'s, 'c>) -> DeviceSlice<'a, 'c, T> {
                // Borrowed shared for `'a`: nothing writes or frees it meanwhile.
                lent_shared(self, permit)
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
            fn lend<'c>(self, permit: &LendPermit<'s, 'c>) -> DeviceSliceMut<'a, 'c, T> {
                // Borrowed exclusively for `'a`: nothing else touches it meanwhile.
                lent_exclusive(self, permit)
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
    fn lend<'c>(self, permit: &LendPermit<'s, 'c>) -> DeviceBuffer<'c, T> {
        self.rebranded(&permit.0)
    }
}

macro_rules! lend_tuple {
    ($($name:ident),+) => {
        impl<$($name: sealed::Lendable),+> sealed::Lendable for ($($name,)+) {}
        impl<'s, $($name: Lend<'s>),+> Lend<'s> for ($($name,)+) {
            type Views<'c> = ($($name::Views<'c>,)+);
            #[allow(non_snake_case)]
            fn lends_memory(&self) -> bool {
                let ($($name,)+) = self;
                false $(|| $name.lends_memory())+
            }
            #[allow(non_snake_case)]
            fn lend<'c>(self, permit: &LendPermit<'s, 'c>) -> Self::Views<'c> {
                let ($($name,)+) = self;
                ($($name.lend(permit),)+)
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

/// A shared view of `memory` for the child (one function for the `lend_shared!` types:
/// a view lent by value goes through `into_rebranded`, the others by reference).
fn lent_shared<'a, 's, 'c, T: DeviceRepr, M: SharedLend<'a, 's, T>>(
    memory: M,
    permit: &LendPermit<'s, 'c>,
) -> DeviceSlice<'a, 'c, T> {
    memory.view(&permit.0)
}

/// An exclusive view of `memory` for the child.
fn lent_exclusive<'a, 's, 'c, T: DeviceRepr, M: ExclusiveLend<'a, 's, T>>(
    memory: M,
    permit: &LendPermit<'s, 'c>,
) -> DeviceSliceMut<'a, 'c, T> {
    memory.view(&permit.0)
}

/// How each shared lend makes its view.
trait SharedLend<'a, 's, T: DeviceRepr> {
    fn view<'c>(self, permit: &Rebrand<'s, 'c>) -> DeviceSlice<'a, 'c, T>;
}

impl<'a, 's, T: DeviceRepr> SharedLend<'a, 's, T> for &'a DeviceBuffer<'s, T> {
    fn view<'c>(self, permit: &Rebrand<'s, 'c>) -> DeviceSlice<'a, 'c, T> {
        DeviceSlice::rebranded(self, permit)
    }
}
impl<'a, 's, T: DeviceRepr> SharedLend<'a, 's, T> for &'a DeviceSlice<'_, 's, T> {
    fn view<'c>(self, permit: &Rebrand<'s, 'c>) -> DeviceSlice<'a, 'c, T> {
        DeviceSlice::rebranded(self, permit)
    }
}
impl<'a, 's, T: DeviceRepr> SharedLend<'a, 's, T> for DeviceSlice<'a, 's, T> {
    fn view<'c>(self, permit: &Rebrand<'s, 'c>) -> DeviceSlice<'a, 'c, T> {
        self.into_rebranded(permit)
    }
}
impl<'a, 's, T: DeviceRepr> SharedLend<'a, 's, T> for &'a DeviceSliceMut<'_, 's, T> {
    fn view<'c>(self, permit: &Rebrand<'s, 'c>) -> DeviceSlice<'a, 'c, T> {
        DeviceSlice::rebranded(self, permit)
    }
}

/// How each exclusive lend makes its view.
trait ExclusiveLend<'a, 's, T: DeviceRepr> {
    fn view<'c>(self, permit: &Rebrand<'s, 'c>) -> DeviceSliceMut<'a, 'c, T>;
}

impl<'a, 's, T: DeviceRepr> ExclusiveLend<'a, 's, T> for &'a mut DeviceBuffer<'s, T> {
    fn view<'c>(self, permit: &Rebrand<'s, 'c>) -> DeviceSliceMut<'a, 'c, T> {
        DeviceSliceMut::rebranded(self, permit)
    }
}
impl<'a, 's, T: DeviceRepr> ExclusiveLend<'a, 's, T> for &'a mut DeviceSliceMut<'_, 's, T> {
    fn view<'c>(self, permit: &Rebrand<'s, 'c>) -> DeviceSliceMut<'a, 'c, T> {
        DeviceSliceMut::rebranded(self, permit)
    }
}
impl<'a, 's, T: DeviceRepr> ExclusiveLend<'a, 's, T> for DeviceSliceMut<'a, 's, T> {
    fn view<'c>(self, permit: &Rebrand<'s, 'c>) -> DeviceSliceMut<'a, 'c, T> {
        self.into_rebranded(permit)
    }
}

#[cfg(test)]
mod tests {
    use super::Lend;
    use crate::memory::{DeviceBuffer, DeviceSliceMut};

    type Shared = &'static DeviceBuffer<'static, f32>;
    type Exclusive = DeviceSliceMut<'static, 'static, u8>;

    /// What lends no memory needs no peer access on a fork onto another device: `()`, a
    /// `None` of any memory type, and tuples of those. (What lends memory asks for it:
    /// the cross-device forks of `test_peer`.)
    #[test]
    fn nothing_lent_asks_for_no_peer_access() {
        assert!(!().lends_memory());
        assert!(!None::<Shared>.lends_memory());
        assert!(!None::<Exclusive>.lends_memory());
        assert!(!None::<DeviceBuffer<'static, u32>>.lends_memory());
        assert!(!Some(()).lends_memory());
        assert!(!(None::<Shared>, (), None::<Exclusive>).lends_memory());
        assert!(!Some((None::<Shared>, ())).lends_memory());
        assert!(!Some(None::<Exclusive>).lends_memory());
    }
}
