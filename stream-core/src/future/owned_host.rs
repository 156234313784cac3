//! [`OwnedHostBuffer`] and [`OwnedDeviceVec`]: what an asynchronous copy may own while
//! the GPU uses it.

use std::sync::Arc;

use crate::host::PinnedBuffer;
use crate::memory::{DeviceRepr, DeviceVec};

/// The seals of this module's traits: traits only this module implements, and a token
/// only this crate can make, which keeps their hidden methods uncallable outside it.
pub(super) mod sealed {
    /// Implemented only by this module's buffer types.
    pub trait Sealed {}

    /// Only this crate can make one.
    #[derive(Clone, Copy)]
    pub struct Token(pub(in crate::future) ());
}

/// The token the crate's own calls pass.
pub(super) const TOKEN: sealed::Token = sealed::Token(());

/// A host buffer that owns its memory, for [`Stream::upload_owned`](crate::Stream::upload_owned)
/// and [`Stream::download_owned`](crate::Stream::download_owned): a `Vec<T>`, a
/// `Box<[T]>` or a [`PinnedBuffer<T>`]. Sealed.
///
/// The future takes the buffer by value and hands it back when the GPU is done with it,
/// so nothing can read, write, move or free the memory while a DMA uses it, even if the
/// future is forgotten (the buffer then leaks) or dropped (the buffer is released once
/// the GPU is done). Moving the buffer into the future moves only its handle: the
/// elements stay where they are.
///
/// A borrowed slice is not an owned buffer (see
/// `ui-tests/tests/ui/future/upload-borrowed-slice.rs`):
///
/// ```compile_fail,E0277
/// # fn f(stream: &stream_core::Stream) {
/// let data = vec![1.0f32; 16];
/// let _upload = stream.upload_owned(&data[..]); // error: `&[f32]` is not an owned host buffer
/// # }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an owned host buffer: an asynchronous copy must own the host memory it uses",
    label = "borrowed host memory cannot be handed to a future",
    note = "pass the buffer itself, by value: a `Vec<T>`, a `Box<[T]>` or a `PinnedBuffer<T>` (e.g. `data.to_vec()`, or move `data` in); the future hands it back when the GPU is done with it",
    note = "to use borrowed host memory, copy inside `stream_core::scope`, which synchronises before the borrow ends"
)]
pub trait OwnedHostBuffer: sealed::Sealed + Send + 'static {
    /// The element type.
    type Item: DeviceRepr;
    /// `true` for page-locked memory the DMA engines read and write directly.
    #[doc(hidden)]
    const PINNED: bool;
    /// The elements.
    #[doc(hidden)]
    fn elements(&self, _: sealed::Token) -> &[Self::Item];
    /// The elements, writable.
    #[doc(hidden)]
    fn elements_mut(&mut self, _: sealed::Token) -> &mut [Self::Item];
}

impl<T: DeviceRepr> sealed::Sealed for Vec<T> {}
impl<T: DeviceRepr> OwnedHostBuffer for Vec<T> {
    type Item = T;
    const PINNED: bool = false;
    fn elements(&self, _: sealed::Token) -> &[T] {
        self
    }
    fn elements_mut(&mut self, _: sealed::Token) -> &mut [T] {
        self
    }
}

impl<T: DeviceRepr> sealed::Sealed for Box<[T]> {}
impl<T: DeviceRepr> OwnedHostBuffer for Box<[T]> {
    type Item = T;
    const PINNED: bool = false;
    fn elements(&self, _: sealed::Token) -> &[T] {
        self
    }
    fn elements_mut(&mut self, _: sealed::Token) -> &mut [T] {
        self
    }
}

impl<T: DeviceRepr> sealed::Sealed for PinnedBuffer<T> {}
impl<T: DeviceRepr> OwnedHostBuffer for PinnedBuffer<T> {
    type Item = T;
    const PINNED: bool = true;
    fn elements(&self, _: sealed::Token) -> &[T] {
        self
    }
    fn elements_mut(&mut self, _: sealed::Token) -> &mut [T] {
        self
    }
}

/// An owned handle of a [`DeviceVec`] that a download may read while the GPU runs: the
/// vector itself, or an `Arc` of it (shared read-only by several downloads; nothing can
/// write or free it while a download holds a clone, since writing needs
/// `&mut DeviceVec`). Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an owned `DeviceVec`: an asynchronous download must own the device memory it reads",
    label = "borrowed device memory cannot be handed to a future",
    note = "pass the `DeviceVec<T>` by value (the future hands it back), or an `Arc<DeviceVec<T>>` to share it between downloads"
)]
pub trait OwnedDeviceVec: sealed::Sealed + Send + Sync + 'static {
    /// The element type.
    type Item: DeviceRepr;
    /// The vector.
    #[doc(hidden)]
    fn vec(&self, _: sealed::Token) -> &DeviceVec<Self::Item>;
}

impl<T: DeviceRepr> sealed::Sealed for DeviceVec<T> {}
impl<T: DeviceRepr> OwnedDeviceVec for DeviceVec<T> {
    type Item = T;
    fn vec(&self, _: sealed::Token) -> &DeviceVec<T> {
        self
    }
}

impl<T: DeviceRepr> sealed::Sealed for Arc<DeviceVec<T>> {}
impl<T: DeviceRepr> OwnedDeviceVec for Arc<DeviceVec<T>> {
    type Item = T;
    fn vec(&self, _: sealed::Token) -> &DeviceVec<T> {
        self
    }
}
