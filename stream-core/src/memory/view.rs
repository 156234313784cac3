//! Sub-ranges of device memory ([`DeviceSlice`], [`DeviceSliceMut`]) and the sealed
//! traits every device-memory operation accepts ([`DeviceMemory`], [`DeviceMemoryMut`]).
//!
//! A view borrows the memory it was taken from (so that memory cannot be freed while
//! the view exists) and carries the scope's brand `'s` (so it cannot be used in another
//! scope). A `DeviceSlice` is read-only and `Copy`, like `&[T]`; a `DeviceSliceMut` is
//! exclusive, like `&mut [T]`, which is what lets the borrow checker rule out a kernel
//! reading and writing the same memory through two arguments.

use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

use cudarc::driver::sys;

use crate::error::{Error, Result};
use crate::memory::brand::{brand, Brand, HoldToken, Rebrand, ScopeToken};
use crate::memory::repr::DeviceRepr;
use crate::memory::DeviceVec;
use crate::sealed;

/// Address and length (in elements) of device memory.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawSlice {
    pub(crate) ptr: sys::CUdeviceptr,
    pub(crate) len: usize,
}

impl RawSlice {
    pub(crate) const EMPTY: RawSlice = RawSlice { ptr: 0, len: 0 };

    /// The sub-range `range` of this memory, for elements of type `T`.
    pub(crate) fn range<T>(self, range: impl RangeBounds<usize>) -> Result<RawSlice> {
        let (start, end) = checked_range(range, self.len)?;
        Ok(RawSlice {
            // `start <= len` elements of an allocation: cannot overflow the address.
            ptr: self.ptr + (start * std::mem::size_of::<T>()) as u64,
            len: end - start,
        })
    }

    /// `[0, mid)` and `[mid, len)`.
    pub(crate) fn split_at<T>(self, mid: usize) -> Result<(RawSlice, RawSlice)> {
        Ok((self.range::<T>(..mid)?, self.range::<T>(mid..)?))
    }
}

/// `start..end` of `range` within `len` elements, or [`Error::OutOfRange`]: the bounds
/// check of every view's `slice` and `split_at` (device, managed and the pinned views
/// of a graph capture).
pub(crate) fn checked_range(range: impl RangeBounds<usize>, len: usize) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(start), Some(end)) if start <= end && end <= len => Ok((start, end)),
        (start, end) => Err(Error::from(crate::error::OutOfRange {
            start: start.unwrap_or(usize::MAX),
            end: end.unwrap_or(usize::MAX),
            len,
        })),
    }
}

/// Device memory of element type `T` usable in the scope branded `'s`, for reading:
/// a [`DeviceBuffer`](crate::DeviceBuffer), a [`DeviceSlice`], a [`DeviceSliceMut`] or an
/// attached [`DeviceVec`] view. Sealed: it cannot be implemented
/// outside this crate.
///
/// ```no_run
/// use stream_core::{DeviceMemory, Pending, Result, Scope};
/// fn download<'s, 'env>(s: &'s Scope<'s, 'env>, src: &impl DeviceMemory<'s, f32>, dst: &'env mut [f32])
///     -> Result<Pending<'s, &'env mut [f32]>> {
///     s.copy_to_host(src, dst)
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not device memory of `{T}` elements",
    label = "expected device memory of `{T}` (a `DeviceBuffer`, a view of one, or an attached `DeviceVec`)",
    note = "host memory goes to the GPU with `Scope::upload` or `Scope::copy_to_device` first; a buffer of another element type does not convert"
)]
pub trait DeviceMemory<'s, T: DeviceRepr>: sealed::Sealed {
    /// Number of elements.
    fn len(&self) -> usize {
        self.raw(sealed::TOKEN).len
    }

    /// `true` when there are no elements.
    fn is_empty(&self) -> bool {
        self.raw(sealed::TOKEN).len == 0
    }
}

/// Device memory of element type `T` usable in the scope branded `'s`, for writing:
/// a [`DeviceBuffer`](crate::DeviceBuffer), a [`DeviceSliceMut`] or an attached mutable
/// [`DeviceVec`] view. Operations take it by `&mut`, so the borrow
/// checker proves no other argument of the same call can alias it. Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not writable device memory",
    label = "this is written, so it must be writable device memory",
    note = "a `DeviceSlice` (from `slice`, `as_slice` or `attach_ref`) is read-only: pass the buffer itself, a `slice_mut`/`split_at_mut` view, or an `attach`ed `DeviceVec`"
)]
pub trait DeviceMemoryMut<'s, T: DeviceRepr>: DeviceMemory<'s, T> {}

/// A read-only view of device memory branded `'s`, borrowed for `'a`. `Copy`, like `&[T]`.
///
/// ```no_run
/// # use stream_core::{scope, Error, Stream};
/// # fn f(stream: &Stream, out: &mut [f32]) -> Result<(), Error> {
/// scope(stream, |s| {
///     let x = s.alloc_zeroed::<f32>(1000)?;
///     let tail = x.slice(900..)?;               // DeviceSlice<'_, 's, f32>
///     s.copy_to_host(&tail, &mut out[..100])?.wait()?;
///     Ok(())
/// })
/// # }
/// ```
pub struct DeviceSlice<'a, 's, T: DeviceRepr> {
    raw: RawSlice,
    _brand: Brand<'s>,
    _borrow: PhantomData<&'a [T]>,
}

/// An exclusive, writable view of device memory branded `'s`, borrowed for `'a`, like
/// `&mut [T]`.
///
/// ```no_run
/// # use stream_core::{scope, Error, Stream};
/// # fn f(stream: &Stream, a: &[f32], b: &[f32]) -> Result<(), Error> {
/// scope(stream, |s| {
///     let mut x = s.alloc::<f32>(a.len() + b.len())?;
///     let (mut lo, mut hi) = x.split_at_mut(a.len())?;
///     s.copy_to_device(a, &mut lo)?;
///     s.copy_to_device(b, &mut hi)?;
///     Ok(())
/// })
/// # }
/// ```
pub struct DeviceSliceMut<'a, 's, T: DeviceRepr> {
    raw: RawSlice,
    _brand: Brand<'s>,
    _borrow: PhantomData<&'a mut [T]>,
}

impl<'a, 's, T: DeviceRepr> DeviceSlice<'a, 's, T> {
    /// A read-only view of all of `memory` for the scope branded `'s`, which the
    /// permit proves is ordered after every write to it so far and before its later
    /// ones (a fork's shared lend).
    pub(crate) fn rebranded<'p>(
        memory: &'a impl DeviceMemory<'p, T>,
        _permit: &Rebrand<'p, 's>,
    ) -> Self {
        DeviceSlice {
            raw: memory.raw(sealed::TOKEN),
            _brand: brand(),
            _borrow: PhantomData,
        }
    }

    /// Like [`rebranded`](Self::rebranded), for a view lent by value.
    pub(crate) fn into_rebranded<'c>(self, _permit: &Rebrand<'s, 'c>) -> DeviceSlice<'a, 'c, T> {
        DeviceSlice {
            raw: self.raw,
            _brand: brand(),
            _borrow: PhantomData,
        }
    }

    /// `vec` attached read-only to the scope `token` belongs to, for the rest of it, or
    /// [`Error::DeviceMismatch`] for memory of another device. The vec is borrowed for
    /// `'env`, so nothing writes or frees it until the outermost scope's final
    /// synchronisation, which covers every use of the view.
    pub(crate) fn attached<'env>(
        token: &'s ScopeToken<'s, 'env>,
        vec: &'env DeviceVec<T>,
    ) -> Result<DeviceSlice<'s, 's, T>> {
        let stream = token.stream();
        stream.device.ensure_same_device(vec.device())?;
        Ok(DeviceSlice {
            raw: vec.raw_on(&stream.raw)?,
            _brand: brand(),
            _borrow: PhantomData,
        })
    }

    /// `vec` read by the graph being captured under brand `'s`, which holds it (shared)
    /// for as long as it exists (the token's proof), or [`Error::DeviceMismatch`] for
    /// memory of another device than the graph's.
    pub(crate) fn held(
        token: &HoldToken<'s>,
        vec: &DeviceVec<T>,
    ) -> Result<DeviceSlice<'s, 's, T>> {
        token.device().ensure_same_device(vec.device())?;
        Ok(DeviceSlice {
            raw: vec.raw_ready_on_host()?,
            _brand: brand(),
            _borrow: PhantomData,
        })
    }

    /// A read-only view of all of `memory`, borrowed for `'a`.
    pub(crate) fn of(memory: &'a impl DeviceMemory<'s, T>) -> Self {
        DeviceSlice {
            raw: memory.raw(sealed::TOKEN),
            _brand: brand(),
            _borrow: PhantomData,
        }
    }

    /// A view of `sub`, a sub-range of this view (module-private: callers pass only
    /// ranges `RawSlice::range` cut from `self.raw`).
    fn narrowed(&self, sub: RawSlice) -> Self {
        DeviceSlice {
            raw: sub,
            _brand: brand(),
            _borrow: PhantomData,
        }
    }

    /// The elements in `range`, or [`Error::OutOfRange`].
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<'a, 's, T>> {
        Ok(self.narrowed(self.raw.range::<T>(range)?))
    }

    /// `[0, mid)` and `[mid, len)`, or [`Error::OutOfRange`] when `mid > len`.
    pub fn split_at(&self, mid: usize) -> Result<(DeviceSlice<'a, 's, T>, DeviceSlice<'a, 's, T>)> {
        let (lo, hi) = self.raw.split_at::<T>(mid)?;
        Ok((self.narrowed(lo), self.narrowed(hi)))
    }
}

/// Writes the inherent `len` and `is_empty` of each type that holds its extent in a
/// `raw: RawSlice` field (the views), or where `|self| ...` says (`DeviceBuffer` and
/// `DeviceVec`, which own their allocation beside a `len`): once, here.
macro_rules! element_count {
    (|$this:ident| $len:expr; $([$($generics:tt)*] $ty:ty),* $(,)?) => {$(
        impl<$($generics)*> $ty {
            /// Number of elements.
            #[inline]
            pub fn len(&$this) -> usize {
                $len
            }

            /// `true` when there are no elements.
            #[inline]
            pub fn is_empty(&$this) -> bool {
                $len == 0
            }
        }
    )*};
    ($([$($generics:tt)*] $ty:ty),* $(,)?) => {
        element_count!(|self| self.raw.len; $([$($generics)*] $ty),*);
    };
}
pub(crate) use element_count;

element_count!(
    ['a, 's, T: DeviceRepr] DeviceSlice<'a, 's, T>,
    ['a, 's, T: DeviceRepr] DeviceSliceMut<'a, 's, T>,
);

impl<T: DeviceRepr> Clone for DeviceSlice<'_, '_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: DeviceRepr> Copy for DeviceSlice<'_, '_, T> {}

impl<'a, 's, T: DeviceRepr> DeviceSliceMut<'a, 's, T> {
    /// A writable view of all of `memory` for the scope branded `'s`, which the permit
    /// proves is ordered after every use of it so far and before its later ones (a
    /// fork's exclusive lend).
    pub(crate) fn rebranded<'p>(
        memory: &'a mut impl DeviceMemoryMut<'p, T>,
        _permit: &Rebrand<'p, 's>,
    ) -> Self {
        DeviceSliceMut {
            raw: memory.raw(sealed::TOKEN),
            _brand: brand(),
            _borrow: PhantomData,
        }
    }

    /// Like [`rebranded`](Self::rebranded), for a view lent by value.
    pub(crate) fn into_rebranded<'c>(self, _permit: &Rebrand<'s, 'c>) -> DeviceSliceMut<'a, 'c, T> {
        DeviceSliceMut {
            raw: self.raw,
            _brand: brand(),
            _borrow: PhantomData,
        }
    }

    /// `vec` attached writable to the scope `token` belongs to, for the rest of it, or
    /// [`Error::DeviceMismatch`] for memory of another device. The vec is borrowed
    /// mutably for `'env`, so nothing else touches or frees it until the outermost
    /// scope's final synchronisation, which covers every use of the view.
    pub(crate) fn attached<'env>(
        token: &'s ScopeToken<'s, 'env>,
        vec: &'env mut DeviceVec<T>,
    ) -> Result<DeviceSliceMut<'s, 's, T>> {
        let stream = token.stream();
        stream.device.ensure_same_device(vec.device())?;
        Ok(DeviceSliceMut {
            raw: vec.raw_on(&stream.raw)?,
            _brand: brand(),
            _borrow: PhantomData,
        })
    }

    /// `vec` written by the graph being captured under brand `'s`, which holds it
    /// exclusively for as long as it exists (the token's proof), or
    /// [`Error::DeviceMismatch`] for memory of another device than the graph's.
    pub(crate) fn held(
        token: &HoldToken<'s>,
        vec: &mut DeviceVec<T>,
    ) -> Result<DeviceSliceMut<'s, 's, T>> {
        token.device().ensure_same_device(vec.device())?;
        Ok(DeviceSliceMut {
            raw: vec.raw_ready_on_host()?,
            _brand: brand(),
            _borrow: PhantomData,
        })
    }

    /// A writable view of all of `memory`, borrowed exclusively for `'a`.
    pub(crate) fn of(memory: &'a mut impl DeviceMemoryMut<'s, T>) -> Self {
        DeviceSliceMut {
            raw: memory.raw(sealed::TOKEN),
            _brand: brand(),
            _borrow: PhantomData,
        }
    }

    /// A view of `sub`, a sub-range of this view, borrowed for `'b` (module-private:
    /// callers pass only ranges `RawSlice::range`/`split_at` cut from `self.raw`, and
    /// borrow `self` for `'b`, or consume it, so the views never overlap a live one).
    fn narrowed<'b>(&self, sub: RawSlice) -> DeviceSliceMut<'b, 's, T> {
        DeviceSliceMut {
            raw: sub,
            _brand: brand(),
            _borrow: PhantomData,
        }
    }

    /// A read-only view of the whole range.
    pub fn as_slice(&self) -> DeviceSlice<'_, 's, T> {
        DeviceSlice::of(self)
    }

    /// A shorter-lived exclusive view of the whole range (a reborrow).
    pub fn as_slice_mut(&mut self) -> DeviceSliceMut<'_, 's, T> {
        DeviceSliceMut::of(self)
    }

    /// The elements in `range`, read-only, or [`Error::OutOfRange`].
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<'_, 's, T>> {
        DeviceSlice::of(self).slice(range)
    }

    /// The elements in `range`, writable, or [`Error::OutOfRange`].
    pub fn slice_mut(
        &mut self,
        range: impl RangeBounds<usize>,
    ) -> Result<DeviceSliceMut<'_, 's, T>> {
        let sub = self.raw.range::<T>(range)?;
        Ok(self.narrowed(sub))
    }

    /// Two disjoint writable halves `[0, mid)` and `[mid, len)`.
    pub fn split_at_mut(
        &mut self,
        mid: usize,
    ) -> Result<(DeviceSliceMut<'_, 's, T>, DeviceSliceMut<'_, 's, T>)> {
        let (lo, hi) = self.raw.split_at::<T>(mid)?;
        Ok((self.narrowed(lo), self.narrowed(hi)))
    }

    /// Like [`slice_mut`](Self::slice_mut), keeping the full borrow `'a`.
    pub fn into_slice_mut(
        self,
        range: impl RangeBounds<usize>,
    ) -> Result<DeviceSliceMut<'a, 's, T>> {
        let sub = self.raw.range::<T>(range)?;
        Ok(self.narrowed(sub))
    }

    /// Like [`split_at_mut`](Self::split_at_mut), keeping the full borrow `'a`.
    pub fn into_split_at_mut(
        self,
        mid: usize,
    ) -> Result<(DeviceSliceMut<'a, 's, T>, DeviceSliceMut<'a, 's, T>)> {
        let (lo, hi) = self.raw.split_at::<T>(mid)?;
        Ok((self.narrowed(lo), self.narrowed(hi)))
    }
}

impl<T: DeviceRepr> sealed::Sealed for DeviceSlice<'_, '_, T> {
    fn raw(&self, _: sealed::Token) -> RawSlice {
        self.raw
    }
}
impl<'s, T: DeviceRepr> DeviceMemory<'s, T> for DeviceSlice<'_, 's, T> {}

impl<T: DeviceRepr> sealed::Sealed for DeviceSliceMut<'_, '_, T> {
    fn raw(&self, _: sealed::Token) -> RawSlice {
        self.raw
    }
}
impl<'s, T: DeviceRepr> DeviceMemory<'s, T> for DeviceSliceMut<'_, 's, T> {}
impl<'s, T: DeviceRepr> DeviceMemoryMut<'s, T> for DeviceSliceMut<'_, 's, T> {}

impl<T: DeviceRepr> std::fmt::Debug for DeviceSlice<'_, '_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceSlice")
            .field("ptr", &self.raw.ptr)
            .field("len", &self.raw.len)
            .finish()
    }
}

impl<T: DeviceRepr> std::fmt::Debug for DeviceSliceMut<'_, '_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceSliceMut")
            .field("ptr", &self.raw.ptr)
            .field("len", &self.raw.len)
            .finish()
    }
}
