//! [`Hold`]: what a graph holds for its whole life (the pinned buffers its copies use and
//! the `DeviceVec`s its kernels use), the views a capture gets of them, and the host's
//! access to them between replays.

use crate::error::Result;
use crate::graph::pinned_view::{PinnedSlice, PinnedSliceMut};
use crate::host::PinnedBuffer;
use crate::memory::brand::HoldToken;
use crate::memory::{DeviceRepr, DeviceSlice, DeviceSliceMut, DeviceVec};
use crate::sealed;

/// What a graph holds for as long as it exists: passed to
/// [`Device::capture`](crate::Device::capture)
/// and kept in the [`Graph`](crate::Graph). The capture's closure gets views of it, and
/// between replays the host reaches it through [`Graph::held`](crate::Graph::held) and
/// [`Graph::held_mut`](crate::Graph::held_mut). Sealed.
///
/// | held | the capture's view | `held()` | `held_mut()` |
/// |------|--------------------|----------|--------------|
/// | `PinnedBuffer<T>` (moved in) | `PinnedSliceMut<'g, 'g, T>` | `&[T]` | `&mut [T]` |
/// | `&mut PinnedBuffer<T>` | `PinnedSliceMut<'g, 'g, T>` | `&[T]` | `&mut [T]` |
/// | `&PinnedBuffer<T>` | `PinnedSlice<'g, 'g, T>` | `&[T]` | `&[T]` |
/// | `&mut DeviceVec<T>` | `DeviceSliceMut<'g, 'g, T>` | `&DeviceVec<T>` | `&DeviceVec<T>` |
/// | `&DeviceVec<T>` | `DeviceSlice<'g, 'g, T>` | `&DeviceVec<T>` | `&DeviceVec<T>` |
/// | `()`, or a tuple of up to six of the above | `()`, or the tuple of their views | the tuple | the tuple |
///
/// Why this is enough for replays to be sound:
///
/// * Held memory cannot be dropped, moved or reassigned while the graph exists: the
///   graph owns it or borrows it (for its whole type's life), so the borrow checker
///   rejects it, and a replay after a free cannot be written.
/// * The host reaches held memory only through the graph, and every replay borrows the
///   graph exclusively (`&mut`) until it is known complete: the [`Pending`](crate::Pending)
///   that [`Scope::replay`](crate::Scope::replay) returns hands it back after `wait`,
///   or the borrow lasts until the replaying scope's final synchronisation. So the host
///   can write inputs and read outputs between replays, never during one.
/// * Nothing hands out `&mut PinnedBuffer` or `&mut DeviceVec` (which `mem::swap` could
///   use to move memory out from under the graph): `held_mut` gives slices of the pinned
///   buffers, and only `&DeviceVec`.
/// * A `DeviceVec` held by `&v` is only read by the graph (its view is read-only), so
///   other scopes may read it during a replay; one held by `&mut v` is the graph's alone.
pub trait Hold: sealed::Holdable {
    /// What the capture's closure receives.
    type Views<'g>;
    /// What [`Graph::held`](crate::Graph::held) gives between replays.
    type Held<'b>
    where
        Self: 'b;
    /// What [`Graph::held_mut`](crate::Graph::held_mut) gives between replays.
    type HeldMut<'b>
    where
        Self: 'b;

    /// The views, for the capture branded `'g` that `permit` names, or
    /// [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) for a `DeviceVec` of
    /// another device.
    #[doc(hidden)]
    fn views<'g>(&mut self, permit: &HoldPermit<'g>) -> Result<Self::Views<'g>>;

    /// Shared access between replays.
    #[doc(hidden)]
    fn held(&self) -> Self::Held<'_>;

    /// Exclusive access between replays.
    #[doc(hidden)]
    fn held_mut(&mut self) -> Self::HeldMut<'_>;
}

/// What [`Hold::views`] needs: the proof that the graph being captured holds what it
/// views. Only a capture makes one (its field is private).
#[doc(hidden)]
pub struct HoldPermit<'g>(pub(crate) HoldToken<'g>);

impl sealed::Holdable for () {}
impl Hold for () {
    type Views<'g> = ();
    type Held<'b> = ();
    type HeldMut<'b> = ();
    fn views<'g>(&mut self, _: &HoldPermit<'g>) -> Result<()> {
        Ok(())
    }
    fn held(&self) {}
    fn held_mut(&mut self) {}
}

impl<T: DeviceRepr> sealed::Holdable for PinnedBuffer<T> {}
/// A pinned buffer moved into the graph: the graph's until [`Graph::into_held`](crate::Graph::into_held).
impl<T: DeviceRepr> Hold for PinnedBuffer<T> {
    type Views<'g> = PinnedSliceMut<'g, 'g, T>;
    type Held<'b> = &'b [T];
    type HeldMut<'b> = &'b mut [T];
    fn views<'g>(&mut self, permit: &HoldPermit<'g>) -> Result<Self::Views<'g>> {
        Ok(PinnedSliceMut::held(&permit.0, self))
    }
    fn held(&self) -> &[T] {
        self
    }
    fn held_mut(&mut self) -> &mut [T] {
        self
    }
}

impl<T: DeviceRepr> sealed::Holdable for &mut PinnedBuffer<T> {}
/// A pinned buffer borrowed exclusively by the graph for its whole life.
impl<T: DeviceRepr> Hold for &mut PinnedBuffer<T> {
    type Views<'g> = PinnedSliceMut<'g, 'g, T>;
    type Held<'b>
        = &'b [T]
    where
        Self: 'b;
    type HeldMut<'b>
        = &'b mut [T]
    where
        Self: 'b;
    fn views<'g>(&mut self, permit: &HoldPermit<'g>) -> Result<Self::Views<'g>> {
        Ok(PinnedSliceMut::held(&permit.0, self))
    }
    fn held(&self) -> &[T] {
        self
    }
    fn held_mut(&mut self) -> &mut [T] {
        self
    }
}

impl<T: DeviceRepr> sealed::Holdable for &PinnedBuffer<T> {}
/// A pinned buffer the graph only reads: the host may read it too, at any time.
impl<T: DeviceRepr> Hold for &PinnedBuffer<T> {
    type Views<'g> = PinnedSlice<'g, 'g, T>;
    type Held<'b>
        = &'b [T]
    where
        Self: 'b;
    type HeldMut<'b>
        = &'b [T]
    where
        Self: 'b;
    fn views<'g>(&mut self, permit: &HoldPermit<'g>) -> Result<Self::Views<'g>> {
        Ok(PinnedSlice::held(&permit.0, self))
    }
    fn held(&self) -> &[T] {
        self
    }
    fn held_mut(&mut self) -> &[T] {
        self
    }
}

impl<T: DeviceRepr> sealed::Holdable for &mut DeviceVec<T> {}
/// A `DeviceVec` the graph writes: borrowed exclusively by the graph for its whole life.
impl<T: DeviceRepr> Hold for &mut DeviceVec<T> {
    type Views<'g> = DeviceSliceMut<'g, 'g, T>;
    type Held<'b>
        = &'b DeviceVec<T>
    where
        Self: 'b;
    type HeldMut<'b>
        = &'b DeviceVec<T>
    where
        Self: 'b;
    fn views<'g>(&mut self, permit: &HoldPermit<'g>) -> Result<Self::Views<'g>> {
        DeviceSliceMut::held(&permit.0, self)
    }
    fn held(&self) -> &DeviceVec<T> {
        self
    }
    fn held_mut(&mut self) -> &DeviceVec<T> {
        self
    }
}

impl<T: DeviceRepr> sealed::Holdable for &DeviceVec<T> {}
/// A `DeviceVec` the graph only reads: others may read it too, even during a replay.
impl<T: DeviceRepr> Hold for &DeviceVec<T> {
    type Views<'g> = DeviceSlice<'g, 'g, T>;
    type Held<'b>
        = &'b DeviceVec<T>
    where
        Self: 'b;
    type HeldMut<'b>
        = &'b DeviceVec<T>
    where
        Self: 'b;
    fn views<'g>(&mut self, permit: &HoldPermit<'g>) -> Result<Self::Views<'g>> {
        DeviceSlice::held(&permit.0, self)
    }
    fn held(&self) -> &DeviceVec<T> {
        self
    }
    fn held_mut(&mut self) -> &DeviceVec<T> {
        self
    }
}

macro_rules! hold_tuple {
    ($($name:ident),+) => {
        impl<$($name: Hold),+> sealed::Holdable for ($($name,)+) {}
        impl<$($name: Hold),+> Hold for ($($name,)+) {
            type Views<'g> = ($($name::Views<'g>,)+);
            type Held<'b> = ($($name::Held<'b>,)+) where Self: 'b;
            type HeldMut<'b> = ($($name::HeldMut<'b>,)+) where Self: 'b;
            #[allow(non_snake_case)]
            fn views<'g>(&mut self, permit: &HoldPermit<'g>) -> Result<Self::Views<'g>> {
                let ($($name,)+) = self;
                Ok(($($name.views(permit)?,)+))
            }
            #[allow(non_snake_case)]
            fn held(&self) -> Self::Held<'_> {
                let ($($name,)+) = self;
                ($($name.held(),)+)
            }
            #[allow(non_snake_case)]
            fn held_mut(&mut self) -> Self::HeldMut<'_> {
                let ($($name,)+) = self;
                ($($name.held_mut(),)+)
            }
        }
    };
}
hold_tuple!(A);
hold_tuple!(A, B);
hold_tuple!(A, B, C);
hold_tuple!(A, B, C, D);
hold_tuple!(A, B, C, D, E);
hold_tuple!(A, B, C, D, E, F);
