//! Views of an attached [`ManagedVec`]: [`ManagedSliceMut`] (exclusive, from
//! [`Scope::attach_managed`](crate::Scope::attach_managed)) and [`ManagedSlice`]
//! (read-only, from [`Scope::attach_managed_ref`](crate::Scope::attach_managed_ref) or a
//! writable view), and [`ManagedMemory`], the sealed trait of what a prefetch accepts.
//!
//! They are device memory like any other view (branded by the scope, borrowing the vec,
//! accepted by every copy, fill and kernel through the sealed
//! [`DeviceMemory`]/[`DeviceMemoryMut`] traits) that also know they are managed: their
//! vec's [`ManagedAccess`], and whether the view is the whole attached vec.

use std::marker::PhantomData;
use std::ops::RangeBounds;
use std::sync::atomic::Ordering;

use crate::driver::managed::attach_to_streams;
use crate::error::Result;
use crate::managed::access::ManagedAccess;
use crate::managed::ManagedVec;
use crate::memory::brand::{brand, Brand, Rebrand, ScopeToken};
use crate::memory::view::{element_count, RawSlice};
use crate::memory::{DeviceMemory, DeviceMemoryMut, DeviceRepr};
use crate::sealed;

/// Managed memory attached to the scope branded `'s`, that a prefetch accepts: a
/// [`ManagedSlice`] or a [`ManagedSliceMut`]. Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an attached view of managed memory",
    label = "expected a view of a `ManagedVec` (from `attach_managed` or `attach_managed_ref`)",
    note = "only managed memory migrates: a `DeviceBuffer` or `DeviceVec` is always on the device, host memory goes there with `copy_to_device`"
)]
pub trait ManagedMemory<'s, T: DeviceRepr>: DeviceMemory<'s, T> + private::Managed {}

mod private {
    use crate::managed::access::ManagedAccess;

    /// The mode of the vec a view belongs to. Only this module's views implement it.
    pub trait Managed {
        fn access(&self) -> ManagedAccess;
    }
}

/// An exclusive, writable view of managed memory attached to the scope branded `'s`,
/// borrowed for `'a`, like `&mut [T]`: every copy, fill and kernel takes it as writable
/// device memory, [`Scope::prefetch_to_device`](crate::Scope::prefetch_to_device) moves
/// its pages ahead of them, and [`Scope::prefetch_to_host`](crate::Scope::prefetch_to_host)
/// consumes it to hand the host its elements.
///
/// ```no_run
/// # use stream_core::{scope, Error, ManagedVec, Stream};
/// # fn f(stream: &Stream, data: &mut ManagedVec<u32>) -> Result<(), Error> {
/// scope(stream, |s| {
///     let view = s.attach_managed(data)?;             // ManagedSliceMut<'env, 's, u32>
///     let (mut lo, hi) = view.into_split_at_mut(8)?;
///     s.fill(&mut lo, 1)?;
///     let host_hi = s.prefetch_to_host(hi)?.wait()?;  // the upper part is the host's again
///     host_hi[0] = 2;
///     Ok(())
/// })
/// # }
/// ```
pub struct ManagedSliceMut<'a, 's, T: DeviceRepr> {
    raw: RawSlice,
    access: ManagedAccess,
    /// The view `attach_managed` returned, or that view moved (into a fork): all of the
    /// vec, and no other view of it is alive.
    whole: bool,
    _brand: Brand<'s>,
    _borrow: PhantomData<&'a mut [T]>,
}

/// A read-only view of managed memory attached to the scope branded `'s`, borrowed for
/// `'a`, like `&[T]`. `Copy`.
///
/// ```no_run
/// # use stream_core::{scope, Error, ManagedVec, Stream};
/// # fn f(stream: &Stream, table: &ManagedVec<f32>, out: &mut [f32]) -> Result<(), Error> {
/// scope(stream, |s| {
///     let t = s.attach_managed_ref(table)?;  // ManagedSlice<'env, 's, f32>
///     s.prefetch_to_device(&t)?;
///     let first = table.host()?[0];          // the host may still read it
///     let back = s.copy_to_host(&t.slice(..out.len())?, out)?.wait()?;
///     assert_eq!(back[0], first);
///     Ok(())
/// })
/// # }
/// ```
pub struct ManagedSlice<'a, 's, T: DeviceRepr> {
    raw: RawSlice,
    access: ManagedAccess,
    _brand: Brand<'s>,
    _borrow: PhantomData<&'a [T]>,
}

element_count!(
    ['a, 's, T: DeviceRepr] ManagedSlice<'a, 's, T>,
    ['a, 's, T: DeviceRepr] ManagedSliceMut<'a, 's, T>,
);

impl<'a, 's, T: DeviceRepr> ManagedSliceMut<'a, 's, T> {
    /// `vec` attached writable to the scope `token` belongs to, for the rest of it, or
    /// [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) for memory of another
    /// device. For a [`ManagedAccess::StreamAttached`] vec, the memory is first attached
    /// for the device on the scope's stream.
    pub(super) fn attached<'env>(
        token: &'s ScopeToken<'s, 'env>,
        vec: &'env mut ManagedVec<T>,
    ) -> Result<ManagedSliceMut<'env, 's, T>> {
        let stream = token.stream();
        stream.device.ensure_same_device(vec.device())?;
        let attach = vec.access.on_attach(false)?;
        if let (Some(attach), Some(allocation)) = (attach, &vec.allocation) {
            // Set first: from now on, whatever happens to the enqueue, the host attaches
            // it back (and waits) before touching it.
            vec.device_visible.store(true, Ordering::Release);
            // SAFETY: the allocation is live and starts at its `ptr`; `vec` is borrowed
            // mutably for `'env`, so it is neither freed nor touched by the host until the
            // outermost scope's final synchronisation, which follows this change and all
            // work of the view; after it the host attaches it back before any access
            // (`device_visible`). Work of this scope that uses the view is enqueued after
            // this change (on this stream, or on forks ordered after it by their start
            // event).
            unsafe { attach_to_streams(allocation.ptr(), attach, &stream.raw) }?;
        }
        Ok(ManagedSliceMut {
            raw: vec.raw(),
            access: vec.access,
            whole: true,
            _brand: brand(),
            _borrow: PhantomData,
        })
    }

    /// A view of `sub`, a sub-range of this view, borrowed for `'b` (module-private:
    /// callers pass only ranges cut from `self.raw`, and borrow `self` for `'b` or
    /// consume it, so the views never overlap a live one). `whole` only when the caller
    /// consumed a whole view and `sub` is all of it.
    fn narrowed<'b>(&self, sub: RawSlice, whole: bool) -> ManagedSliceMut<'b, 's, T> {
        ManagedSliceMut {
            raw: sub,
            access: self.access,
            whole,
            _brand: brand(),
            _borrow: PhantomData,
        }
    }

    /// A read-only view of the whole range.
    pub fn as_slice(&self) -> ManagedSlice<'_, 's, T> {
        ManagedSlice {
            raw: self.raw,
            access: self.access,
            _brand: brand(),
            _borrow: PhantomData,
        }
    }

    /// A shorter-lived exclusive view of the whole range (a reborrow: `self` is usable
    /// again afterwards, so the reborrow is never the whole attached view).
    pub fn as_slice_mut(&mut self) -> ManagedSliceMut<'_, 's, T> {
        self.narrowed(self.raw, false)
    }

    /// The elements in `range`, read-only, or [`Error::OutOfRange`](crate::Error::OutOfRange).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<ManagedSlice<'_, 's, T>> {
        self.as_slice().into_slice(range)
    }

    /// The elements in `range`, writable, or [`Error::OutOfRange`](crate::Error::OutOfRange).
    pub fn slice_mut(
        &mut self,
        range: impl RangeBounds<usize>,
    ) -> Result<ManagedSliceMut<'_, 's, T>> {
        let sub = self.raw.range::<T>(range)?;
        Ok(self.narrowed(sub, false))
    }

    /// Two disjoint writable halves `[0, mid)` and `[mid, len)`, or
    /// [`Error::OutOfRange`](crate::Error::OutOfRange) when `mid > len`.
    pub fn split_at_mut(
        &mut self,
        mid: usize,
    ) -> Result<(ManagedSliceMut<'_, 's, T>, ManagedSliceMut<'_, 's, T>)> {
        let (lo, hi) = self.raw.split_at::<T>(mid)?;
        Ok((self.narrowed(lo, false), self.narrowed(hi, false)))
    }

    /// Like [`slice_mut`](Self::slice_mut), keeping the full borrow `'a`.
    pub fn into_slice_mut(
        self,
        range: impl RangeBounds<usize>,
    ) -> Result<ManagedSliceMut<'a, 's, T>> {
        let sub = self.raw.range::<T>(range)?;
        Ok(self.narrowed(sub, self.whole && sub == self.raw))
    }

    /// Like [`split_at_mut`](Self::split_at_mut), keeping the full borrow `'a`.
    pub fn into_split_at_mut(
        self,
        mid: usize,
    ) -> Result<(ManagedSliceMut<'a, 's, T>, ManagedSliceMut<'a, 's, T>)> {
        let (lo, hi) = self.raw.split_at::<T>(mid)?;
        Ok((self.narrowed(lo, false), self.narrowed(hi, false)))
    }

    /// The address, length, mode and wholeness, consuming the view (for
    /// `prefetch_to_host`).
    pub(super) fn into_parts(self) -> (RawSlice, ManagedAccess, bool) {
        (self.raw, self.access, self.whole)
    }

    /// The same view for the scope branded `'c`, which the permit proves is ordered
    /// after every use of it so far and before its later ones (a view moved into a
    /// fork: it stays whole if it was).
    pub(super) fn into_rebranded<'c>(
        self,
        _permit: &Rebrand<'s, 'c>,
    ) -> ManagedSliceMut<'a, 'c, T> {
        ManagedSliceMut {
            raw: self.raw,
            access: self.access,
            whole: self.whole,
            _brand: brand(),
            _borrow: PhantomData,
        }
    }

    /// An exclusive view of all of this one for the scope branded `'c`, borrowed for
    /// `'b` (a fork's exclusive lend: `self` is the parent's again afterwards, so the
    /// lent view is not whole).
    pub(super) fn lent_exclusive<'b, 'c>(
        &'b mut self,
        _permit: &Rebrand<'s, 'c>,
    ) -> ManagedSliceMut<'b, 'c, T> {
        ManagedSliceMut {
            raw: self.raw,
            access: self.access,
            whole: false,
            _brand: brand(),
            _borrow: PhantomData,
        }
    }

    /// A read-only view of all of this one for the scope branded `'c`, borrowed for `'b`
    /// (a fork's shared lend).
    pub(super) fn lent_shared<'b, 'c>(
        &'b self,
        _permit: &Rebrand<'s, 'c>,
    ) -> ManagedSlice<'b, 'c, T> {
        ManagedSlice {
            raw: self.raw,
            access: self.access,
            _brand: brand(),
            _borrow: PhantomData,
        }
    }
}

impl<'a, 's, T: DeviceRepr> ManagedSlice<'a, 's, T> {
    /// `vec` attached read-only to the scope `token` belongs to, for the rest of it, or
    /// [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) for memory of another
    /// device, or [`Error::ManagedNeedsConcurrentAccess`](crate::Error::ManagedNeedsConcurrentAccess)
    /// for a [`ManagedAccess::StreamAttached`] vec (the host, which may still read it,
    /// could then touch it while a kernel runs).
    pub(super) fn attached<'env>(
        token: &'s ScopeToken<'s, 'env>,
        vec: &'env ManagedVec<T>,
    ) -> Result<ManagedSlice<'env, 's, T>> {
        token.stream().device.ensure_same_device(vec.device())?;
        // `Ok(None)`: nothing to change (the refusal is the point of the call).
        let _ = vec.access.on_attach(true)?;
        Ok(ManagedSlice {
            raw: vec.raw(),
            access: vec.access,
            _brand: brand(),
            _borrow: PhantomData,
        })
    }

    /// The elements in `range`, or [`Error::OutOfRange`](crate::Error::OutOfRange).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<ManagedSlice<'a, 's, T>> {
        self.into_slice(range)
    }

    /// `[0, mid)` and `[mid, len)`, or [`Error::OutOfRange`](crate::Error::OutOfRange)
    /// when `mid > len`.
    pub fn split_at(
        &self,
        mid: usize,
    ) -> Result<(ManagedSlice<'a, 's, T>, ManagedSlice<'a, 's, T>)> {
        let (lo, hi) = self.raw.split_at::<T>(mid)?;
        Ok((self.narrowed(lo), self.narrowed(hi)))
    }

    /// The elements in `range` (by value: the view is `Copy`).
    fn into_slice(self, range: impl RangeBounds<usize>) -> Result<ManagedSlice<'a, 's, T>> {
        let sub = self.raw.range::<T>(range)?;
        Ok(self.narrowed(sub))
    }

    /// A view of `sub`, a sub-range of this view.
    fn narrowed(&self, sub: RawSlice) -> ManagedSlice<'a, 's, T> {
        ManagedSlice {
            raw: sub,
            access: self.access,
            _brand: brand(),
            _borrow: PhantomData,
        }
    }

    /// The same view for the scope branded `'c` (a fork's shared lend, by value or by
    /// reference).
    pub(super) fn rebranded<'c>(self, _permit: &Rebrand<'s, 'c>) -> ManagedSlice<'a, 'c, T> {
        ManagedSlice {
            raw: self.raw,
            access: self.access,
            _brand: brand(),
            _borrow: PhantomData,
        }
    }
}

impl<T: DeviceRepr> Clone for ManagedSlice<'_, '_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: DeviceRepr> Copy for ManagedSlice<'_, '_, T> {}

impl<T: DeviceRepr> sealed::Sealed for ManagedSlice<'_, '_, T> {
    fn raw(&self, _: sealed::Token) -> RawSlice {
        self.raw
    }
}
impl<'s, T: DeviceRepr> DeviceMemory<'s, T> for ManagedSlice<'_, 's, T> {}
impl<T: DeviceRepr> private::Managed for ManagedSlice<'_, '_, T> {
    fn access(&self) -> ManagedAccess {
        self.access
    }
}
impl<'s, T: DeviceRepr> ManagedMemory<'s, T> for ManagedSlice<'_, 's, T> {}

impl<T: DeviceRepr> sealed::Sealed for ManagedSliceMut<'_, '_, T> {
    fn raw(&self, _: sealed::Token) -> RawSlice {
        self.raw
    }
}
impl<'s, T: DeviceRepr> DeviceMemory<'s, T> for ManagedSliceMut<'_, 's, T> {}
impl<'s, T: DeviceRepr> DeviceMemoryMut<'s, T> for ManagedSliceMut<'_, 's, T> {}
impl<T: DeviceRepr> private::Managed for ManagedSliceMut<'_, '_, T> {
    fn access(&self) -> ManagedAccess {
        self.access
    }
}
impl<'s, T: DeviceRepr> ManagedMemory<'s, T> for ManagedSliceMut<'_, 's, T> {}

/// The mode of any managed view (for the prefetches).
pub(super) fn access_of<'s, T: DeviceRepr>(view: &impl ManagedMemory<'s, T>) -> ManagedAccess {
    private::Managed::access(view)
}

impl<T: DeviceRepr> std::fmt::Debug for ManagedSlice<'_, '_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagedSlice")
            .field("ptr", &self.raw.ptr)
            .field("len", &self.raw.len)
            .finish()
    }
}

impl<T: DeviceRepr> std::fmt::Debug for ManagedSliceMut<'_, '_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagedSliceMut")
            .field("ptr", &self.raw.ptr)
            .field("len", &self.raw.len)
            .field("whole", &self.whole)
            .finish()
    }
}
