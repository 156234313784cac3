//! Views of the pinned host memory a graph holds ([`PinnedSlice`], [`PinnedSliceMut`]),
//! the sealed traits a capture's copies accept ([`PinnedMemory`], [`PinnedMemoryMut`]),
//! and lending them to a capture's [fork](crate::Capture::fork).
//!
//! A capture records copies whose host side is used at every replay, long after the
//! capture: only memory the graph holds can be that host side. The views are branded by
//! the capture (they cannot leave it or enter another capture), and, like device views,
//! a `PinnedSlice` is read-only and `Copy` while a `PinnedSliceMut` is exclusive, so that
//! two copies of one capture never write the same host memory through two arguments.

use std::marker::PhantomData;
use std::ops::RangeBounds;

use crate::error::Result;
use crate::host::PinnedBuffer;
use crate::memory::brand::LendPermit;
use crate::memory::brand::{brand, Brand, HoldToken};
use crate::memory::view::checked_range;
use crate::memory::DeviceRepr;
use crate::scope::Lend;
use crate::sealed;

/// Pinned host memory of element type [`Elem`](Self::Elem) that the graph captured under
/// the brand `'g` holds, for reading: a [`PinnedSlice`] or a [`PinnedSliceMut`]. A
/// capture's uploads take it. Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not pinned host memory held by this graph capture",
    label = "a capture copies only from and to the pinned buffers its graph holds",
    note = "a graph replays its copies long after the capture, so it must hold their host \
            memory: lend a `PinnedBuffer` (or `&mut PinnedBuffer`, `&PinnedBuffer`) to \
            `Device::capture` and copy from the view the closure receives; pageable memory \
            (a `Vec`, a slice) would be staged or copied by the host, which a capture cannot \
            record"
)]
pub trait PinnedMemory<'g>: sealed::PinnedView {
    /// The element type.
    type Elem: DeviceRepr;

    /// Number of elements.
    fn len(&self) -> usize {
        self.host_raw(sealed::TOKEN).1 / std::mem::size_of::<Self::Elem>().max(1)
    }

    /// `true` when there are no elements.
    fn is_empty(&self) -> bool {
        self.host_raw(sealed::TOKEN).1 == 0
    }
}

/// Pinned host memory held by the graph captured under `'g`, for writing: a
/// [`PinnedSliceMut`]. A capture's downloads take it by `&mut`. Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not writable pinned host memory held by this graph capture",
    label = "a capture downloads only into the pinned buffers its graph holds, through a writable view",
    note = "lend a `PinnedBuffer` (or `&mut PinnedBuffer`) to `Device::capture` and download \
            into the `PinnedSliceMut` the closure receives; read the data through \
            `Graph::held` once a replay is complete. A `PinnedSlice` (from `&PinnedBuffer` or \
            `as_slice`) is read-only"
)]
pub trait PinnedMemoryMut<'g>: PinnedMemory<'g> {}

/// A read-only view of pinned host memory that the graph captured under `'g` holds,
/// borrowed for `'a`. `Copy`, like `&[T]`.
///
/// ```no_run
/// # use stream_core::{scope, Error, Stream};
/// # fn f(stream: &Stream) -> Result<(), Error> {
/// let mut input = stream.device().alloc_pinned::<f32>(1024)?;
/// scope(stream, |s| {
///     let (graph, ()) = s.capture(&mut input, |g, input| {
///         let head = input.slice(..256)?;           // PinnedSlice<'_, 'g, f32>
///         let _x = g.upload(&head)?;
///         Ok::<_, Error>(())
///     })?;
///     # drop(graph);
///     Ok(())
/// })
/// # }
/// ```
pub struct PinnedSlice<'a, 'g, T: DeviceRepr> {
    ptr: *const T,
    len: usize,
    _brand: Brand<'g>,
    _borrow: PhantomData<&'a [T]>,
}

/// An exclusive, writable view of pinned host memory that the graph captured under `'g`
/// holds, borrowed for `'a`, like `&mut [T]`.
pub struct PinnedSliceMut<'a, 'g, T: DeviceRepr> {
    ptr: *mut T,
    len: usize,
    _brand: Brand<'g>,
    _borrow: PhantomData<&'a mut [T]>,
}

impl<'a, 'g, T: DeviceRepr> PinnedSlice<'a, 'g, T> {
    /// `buffer`, read by the graph being captured under `'g`, which holds it (shared)
    /// for as long as it exists: the token's proof.
    pub(crate) fn held(_token: &HoldToken<'g>, buffer: &PinnedBuffer<T>) -> PinnedSlice<'g, 'g, T> {
        PinnedSlice {
            ptr: buffer.as_ptr(),
            len: buffer.len(),
            _brand: brand(),
            _borrow: PhantomData,
        }
    }

    /// The elements `start..end` of this view (module-private: callers pass bounds
    /// checked against `self.len`).
    fn narrowed(&self, start: usize, end: usize) -> PinnedSlice<'a, 'g, T> {
        PinnedSlice {
            ptr: self.ptr.wrapping_add(start),
            len: end - start,
            _brand: brand(),
            _borrow: PhantomData,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements in `range`, or [`Error::OutOfRange`](crate::Error::OutOfRange).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<PinnedSlice<'a, 'g, T>> {
        let (start, end) = checked_range(range, self.len)?;
        Ok(self.narrowed(start, end))
    }

    /// `[0, mid)` and `[mid, len)`, or [`Error::OutOfRange`](crate::Error::OutOfRange) when `mid > len`.
    pub fn split_at(&self, mid: usize) -> Result<(PinnedSlice<'a, 'g, T>, PinnedSlice<'a, 'g, T>)> {
        let (_, mid) = checked_range(..mid, self.len)?;
        Ok((self.narrowed(0, mid), self.narrowed(mid, self.len)))
    }

    /// The same memory, for the fork branded `'c` (see [`Lend`]).
    fn lent<'c>(self) -> PinnedSlice<'a, 'c, T> {
        PinnedSlice {
            ptr: self.ptr,
            len: self.len,
            _brand: brand(),
            _borrow: PhantomData,
        }
    }
}

impl<T: DeviceRepr> Clone for PinnedSlice<'_, '_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: DeviceRepr> Copy for PinnedSlice<'_, '_, T> {}

impl<'a, 'g, T: DeviceRepr> PinnedSliceMut<'a, 'g, T> {
    /// `buffer`, written by the graph being captured under `'g`, which holds it
    /// exclusively for as long as it exists: the token's proof.
    pub(crate) fn held(
        _token: &HoldToken<'g>,
        buffer: &mut PinnedBuffer<T>,
    ) -> PinnedSliceMut<'g, 'g, T> {
        PinnedSliceMut {
            ptr: buffer.as_mut_ptr(),
            len: buffer.len(),
            _brand: brand(),
            _borrow: PhantomData,
        }
    }

    /// The elements `start..end` of this view, borrowed for `'b` (module-private: callers
    /// pass bounds checked against `self.len`, and borrow `self` for `'b` or consume it,
    /// so that exclusive views never overlap).
    fn narrowed<'b>(&self, start: usize, end: usize) -> PinnedSliceMut<'b, 'g, T> {
        PinnedSliceMut {
            ptr: self.ptr.wrapping_add(start),
            len: end - start,
            _brand: brand(),
            _borrow: PhantomData,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A read-only view of the whole range.
    pub fn as_slice(&self) -> PinnedSlice<'_, 'g, T> {
        PinnedSlice {
            ptr: self.ptr,
            len: self.len,
            _brand: brand(),
            _borrow: PhantomData,
        }
    }

    /// A shorter-lived exclusive view of the whole range (a reborrow).
    pub fn as_slice_mut(&mut self) -> PinnedSliceMut<'_, 'g, T> {
        self.narrowed(0, self.len)
    }

    /// The elements in `range`, read-only, or [`Error::OutOfRange`](crate::Error::OutOfRange).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<PinnedSlice<'_, 'g, T>> {
        self.as_slice().slice(range)
    }

    /// The elements in `range`, writable, or [`Error::OutOfRange`](crate::Error::OutOfRange).
    pub fn slice_mut(
        &mut self,
        range: impl RangeBounds<usize>,
    ) -> Result<PinnedSliceMut<'_, 'g, T>> {
        let (start, end) = checked_range(range, self.len)?;
        Ok(self.narrowed(start, end))
    }

    /// Two disjoint writable halves `[0, mid)` and `[mid, len)`, or
    /// [`Error::OutOfRange`](crate::Error::OutOfRange) when `mid > len`.
    pub fn split_at_mut(
        &mut self,
        mid: usize,
    ) -> Result<(PinnedSliceMut<'_, 'g, T>, PinnedSliceMut<'_, 'g, T>)> {
        let (_, mid) = checked_range(..mid, self.len)?;
        Ok((self.narrowed(0, mid), self.narrowed(mid, self.len)))
    }

    /// The same memory, for the fork branded `'c` (see [`Lend`]).
    fn lent<'c>(self) -> PinnedSliceMut<'a, 'c, T> {
        PinnedSliceMut {
            ptr: self.ptr,
            len: self.len,
            _brand: brand(),
            _borrow: PhantomData,
        }
    }
}

impl<T: DeviceRepr> sealed::PinnedView for PinnedSlice<'_, '_, T> {
    fn host_raw(&self, _: sealed::Token) -> (*mut u8, usize) {
        (
            self.ptr.cast_mut().cast(),
            std::mem::size_of::<T>() * self.len,
        )
    }
}
impl<'g, T: DeviceRepr> PinnedMemory<'g> for PinnedSlice<'_, 'g, T> {
    type Elem = T;
}

impl<T: DeviceRepr> sealed::PinnedView for PinnedSliceMut<'_, '_, T> {
    fn host_raw(&self, _: sealed::Token) -> (*mut u8, usize) {
        (self.ptr.cast(), std::mem::size_of::<T>() * self.len)
    }
}
impl<'g, T: DeviceRepr> PinnedMemory<'g> for PinnedSliceMut<'_, 'g, T> {
    type Elem = T;
}
impl<'g, T: DeviceRepr> PinnedMemoryMut<'g> for PinnedSliceMut<'_, 'g, T> {}

impl<T: DeviceRepr> std::fmt::Debug for PinnedSlice<'_, '_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedSlice")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

impl<T: DeviceRepr> std::fmt::Debug for PinnedSliceMut<'_, '_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedSliceMut")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

// Lending to a capture's fork: as for device views, `&view` lends a read-only view,
// `&mut view` (or a view by value) an exclusive one, for the whole fork. The permit
// proves the child's work is ordered after the parent's so far and before its later
// work; the brand changes, the memory (held by the graph) does not.

impl<T: DeviceRepr> sealed::Lendable for PinnedSlice<'_, '_, T> {}
impl<'a, 'g, T: DeviceRepr> Lend<'g> for PinnedSlice<'a, 'g, T> {
    type Views<'c> = PinnedSlice<'a, 'c, T>;
    fn lend<'c>(self, _permit: &LendPermit<'g, 'c>) -> PinnedSlice<'a, 'c, T> {
        self.lent()
    }
}

impl<T: DeviceRepr> sealed::Lendable for &PinnedSlice<'_, '_, T> {}
impl<'a, 'g, T: DeviceRepr> Lend<'g> for &'a PinnedSlice<'_, 'g, T> {
    type Views<'c> = PinnedSlice<'a, 'c, T>;
    fn lend<'c>(self, _permit: &LendPermit<'g, 'c>) -> PinnedSlice<'a, 'c, T> {
        PinnedSlice {
            ptr: self.ptr,
            len: self.len,
            _brand: brand(),
            _borrow: PhantomData,
        }
    }
}

impl<T: DeviceRepr> sealed::Lendable for &PinnedSliceMut<'_, '_, T> {}
impl<'a, 'g, T: DeviceRepr> Lend<'g> for &'a PinnedSliceMut<'_, 'g, T> {
    type Views<'c> = PinnedSlice<'a, 'c, T>;
    fn lend<'c>(self, _permit: &LendPermit<'g, 'c>) -> PinnedSlice<'a, 'c, T> {
        PinnedSlice {
            ptr: self.ptr,
            len: self.len,
            _brand: brand(),
            _borrow: PhantomData,
        }
    }
}

impl<T: DeviceRepr> sealed::Lendable for &mut PinnedSliceMut<'_, '_, T> {}
impl<'a, 'g, T: DeviceRepr> Lend<'g> for &'a mut PinnedSliceMut<'_, 'g, T> {
    type Views<'c> = PinnedSliceMut<'a, 'c, T>;
    fn lend<'c>(self, _permit: &LendPermit<'g, 'c>) -> PinnedSliceMut<'a, 'c, T> {
        PinnedSliceMut {
            ptr: self.ptr,
            len: self.len,
            _brand: brand(),
            _borrow: PhantomData,
        }
    }
}

impl<T: DeviceRepr> sealed::Lendable for PinnedSliceMut<'_, '_, T> {}
impl<'a, 'g, T: DeviceRepr> Lend<'g> for PinnedSliceMut<'a, 'g, T> {
    type Views<'c> = PinnedSliceMut<'a, 'c, T>;
    fn lend<'c>(self, _permit: &LendPermit<'g, 'c>) -> PinnedSliceMut<'a, 'c, T> {
        self.lent()
    }
}
