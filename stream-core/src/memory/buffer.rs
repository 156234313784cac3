//! [`DeviceBuffer`]: device memory made inside a scope, allocated and freed
//! stream-ordered on the scope's stream.
//!
//! `cuMemAllocAsync` and `cuMemFreeAsync` on the scope's stream mean every use of the
//! buffer (all on that same stream) is ordered after its allocation and before its
//! free, so a buffer needs only call-length borrows: dropping it right after enqueuing
//! a copy is correct, because the free runs on the GPU after the copy.

use std::marker::PhantomData;
use std::ops::RangeBounds;

use crate::device::Event;
use crate::driver::pool::StreamOrdered;
use crate::driver::stream::RawStream;
use crate::error::{byte_len, Result};
use crate::memory::brand::{brand, Brand, Rebrand, ScopeToken};
use crate::memory::repr::DeviceRepr;
use crate::memory::view::{
    element_count, DeviceMemory, DeviceMemoryMut, DeviceSlice, DeviceSliceMut, RawSlice,
};
use crate::sealed;

/// Device memory of `len` elements of `T`, owned by the scope branded `'s`.
///
/// It cannot leave its scope or be used in another scope (the brand is invariant), and
/// it is freed, stream-ordered, when dropped. Made by [`Scope::alloc`](crate::Scope::alloc)
/// and [`Scope::upload`](crate::Scope::upload).
///
/// ```no_run
/// # use stream_core::{scope, Error, Stream};
/// # fn f(stream: &Stream) -> Result<(), Error> {
/// let host = vec![1.5f32; 4096];
/// scope(stream, |s| {
///     let x = s.upload(&host)?;            // DeviceBuffer<'s, f32>
///     let mut y = s.alloc::<f32>(4096)?;
///     s.copy_device(&x, &mut y)?;
///     Ok(())
/// })
/// # }
/// ```
///
/// A buffer cannot escape its scope (see `ui-tests/tests/ui/brand/buffer-escapes-scope.rs`):
///
/// ```compile_fail
/// # use stream_core::{scope, Error, Stream};
/// # fn f(stream: &Stream) -> Result<(), Error> {
/// let escaped = scope(stream, |s| Ok::<_, Error>(s.alloc::<f32>(16)?))?;
/// # Ok(()) }
/// ```
pub struct DeviceBuffer<'s, T: DeviceRepr> {
    /// The allocation; `None` for zero elements.
    memory: Option<StreamOrdered>,
    len: usize,
    /// The stream it was allocated on (or handed to), on which it will be freed; the
    /// scope branded `'s` borrows it for longer than `'s`.
    stream: &'s RawStream,
    _brand: Brand<'s>,
    _elem: PhantomData<T>,
}

impl<'s, T: DeviceRepr> DeviceBuffer<'s, T> {
    /// Allocates `len` elements stream-ordered on the scope's stream (see
    /// [`Scope::alloc`](crate::Scope::alloc)). The contents are unspecified, which
    /// `T: DeviceRepr` makes valid values.
    pub(crate) fn alloc<'env>(token: &'s ScopeToken<'s, 'env>, len: usize) -> Result<Self> {
        let stream = token.stream();
        let bytes = byte_len::<T>(len)?;
        let memory = match bytes {
            0 => None,
            _ => Some(stream.device.inner.alloc_async(&stream.raw, bytes)?),
        };
        // A new stream-ordered allocation on the scope's stream, owned by no one else.
        Ok(DeviceBuffer {
            memory,
            len,
            stream: &stream.raw,
            _brand: brand(),
            _elem: PhantomData,
        })
    }

    /// The same memory, owned by the scope branded `'t` and freed on its stream: the
    /// permit proves that stream is ordered after every use of it so far (a hand-off, or
    /// a buffer moved into a fork).
    pub(crate) fn rebranded<'t>(mut self, permit: &Rebrand<'s, 't>) -> DeviceBuffer<'t, T> {
        // `self` keeps no memory, so its drop frees nothing.
        let memory = self.memory.take();
        DeviceBuffer {
            memory,
            len: self.len,
            stream: permit.to(),
            _brand: brand(),
            _elem: PhantomData,
        }
    }

    /// The same memory, handed to the scope `to` belongs to (a hand-off): `to`'s stream
    /// first waits, on the GPU, for everything this buffer's stream has enqueued so far,
    /// which is every use of the buffer (its brand kept them on that stream, or a fork's
    /// join ordered them into it); the buffer is moved in, so its scope never uses it
    /// again; and `to`'s scope frees it on its own stream. If the wait cannot be
    /// enqueued the buffer is dropped: freed on its own stream, after its own work.
    pub(crate) fn handed_off<'t, 'e: 't>(
        mut self,
        to: &ScopeToken<'t, 'e>,
    ) -> Result<DeviceBuffer<'t, T>> {
        let to_stream = &to.stream().raw;
        if self.memory.is_some() {
            Event::order(self.stream.context(), self.stream, to_stream)?;
        }
        // `self` keeps no memory, so its drop frees nothing.
        let memory = self.memory.take();
        Ok(DeviceBuffer {
            memory,
            len: self.len,
            stream: to_stream,
            _brand: brand(),
            _elem: PhantomData,
        })
    }

    /// A read-only view of the whole buffer.
    pub fn as_slice(&self) -> DeviceSlice<'_, 's, T> {
        DeviceSlice::of(self)
    }

    /// A writable view of the whole buffer.
    pub fn as_slice_mut(&mut self) -> DeviceSliceMut<'_, 's, T> {
        DeviceSliceMut::of(self)
    }

    /// The elements in `range`, read-only, or [`Error::OutOfRange`](crate::Error::OutOfRange).
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<'_, 's, T>> {
        DeviceSlice::of(self).slice(range)
    }

    /// The elements in `range`, writable, or [`Error::OutOfRange`](crate::Error::OutOfRange).
    pub fn slice_mut(
        &mut self,
        range: impl RangeBounds<usize>,
    ) -> Result<DeviceSliceMut<'_, 's, T>> {
        DeviceSliceMut::of(self).into_slice_mut(range)
    }

    /// Two disjoint writable halves `[0, mid)` and `[mid, len)`, or
    /// [`Error::OutOfRange`](crate::Error::OutOfRange) when `mid > len`.
    pub fn split_at_mut(
        &mut self,
        mid: usize,
    ) -> Result<(DeviceSliceMut<'_, 's, T>, DeviceSliceMut<'_, 's, T>)> {
        DeviceSliceMut::of(self).into_split_at_mut(mid)
    }
}

element_count!(|self| self.len; ['s, T: DeviceRepr] DeviceBuffer<'s, T>);

impl<T: DeviceRepr> sealed::Sealed for DeviceBuffer<'_, T> {
    #[inline(always)]
    fn raw(&self, _: sealed::Token) -> RawSlice {
        RawSlice {
            ptr: self.memory.as_ref().map_or(0, StreamOrdered::ptr),
            len: self.len,
        }
    }
}
impl<'s, T: DeviceRepr> DeviceMemory<'s, T> for DeviceBuffer<'s, T> {}
impl<'s, T: DeviceRepr> DeviceMemoryMut<'s, T> for DeviceBuffer<'s, T> {}

impl<T: DeviceRepr> Drop for DeviceBuffer<'_, T> {
    fn drop(&mut self) {
        // Freed once, stream-ordered on `stream`, after every use of the memory: all of
        // them were enqueued on `stream` (the brand keeps the buffer in its scope, and
        // views borrow it) or ordered before it by an event (a hand-off, a fork's lend);
        // the stream outlives the buffer (the scope borrows it). With the stream's
        // context current: a buffer can be dropped inside a nested scope of another
        // device (a refused `hand_off` drops it there).
        if let Some(memory) = self.memory.take() {
            memory.free_on_in_its_context(self.stream);
        }
    }
}

impl<T: DeviceRepr> std::fmt::Debug for DeviceBuffer<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &self.memory.as_ref().map_or(0, StreamOrdered::ptr))
            .field("len", &self.len)
            .finish()
    }
}
