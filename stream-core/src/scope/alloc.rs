//! [`Scope::alloc`] and [`Scope::alloc_zeroed`]: device memory of the scope, allocated
//! stream-ordered on its stream.

use crate::error::Result;
use crate::memory::{DeviceBuffer, DeviceRepr};
use crate::scope::Scope;

impl<'s, 'env> Scope<'s, 'env> {
    /// Allocates `len` elements on the scope's stream. The contents are unspecified
    /// (any bit pattern is a valid `T`, see [`DeviceRepr`]); use
    /// [`alloc_zeroed`](Self::alloc_zeroed) for zeros. `len == 0` allocates nothing.
    ///
    /// The memory comes from the device's memory pool, which keeps freed memory cached,
    /// so allocating in a loop of scopes reuses the same memory (see
    /// [`Device::memory_stats`](crate::Device::memory_stats)).
    ///
    /// # Out of memory: the one case in which `alloc` blocks
    ///
    /// When the driver reports that the device is out of memory, `alloc` releases what
    /// it can and retries once before it returns
    /// [`Error::OutOfMemory`](crate::Error::OutOfMemory): it **waits on the host** for
    /// the streams on which this thread's frees may still be pending, so that the memory
    /// they free can be reused: this scope's stream, the streams of the scopes this
    /// thread has open around it on the same device (enclosing scopes, the parents of a
    /// [fork](Self::fork)) that have memory of their own to free (they allocated, or were
    /// handed a buffer; a scope without any is listed nowhere, so that opening and closing
    /// it costs nothing but its synchronisation), and the device's housekeeping stream (where dropped
    /// [`DeviceVec`](crate::DeviceVec)s are freed). Then it hands the pool's cached
    /// memory back to the driver ([`Device::trim_memory`](crate::Device::trim_memory)`(0)`)
    /// and tries again. It never waits for the whole device, and never for a stream
    /// that no scope of this thread has open (a stream shared with another thread's
    /// open scope is waited for as a whole, that thread's work on it included). An
    /// allocation that succeeds at the first try does not block, and one larger than the
    /// device's total memory is refused at once, without waiting or retrying.
    ///
    /// ```no_run
    /// # use stream_core::{scope, Error, Stream};
    /// # fn f(stream: &Stream) -> Result<(), Error> {
    /// scope(stream, |s| {
    ///     match s.alloc::<f32>(1 << 40) {
    ///         Err(Error::OutOfMemory(oom)) => {
    ///             println!("{} bytes do not fit; {} are free", oom.requested, oom.free);
    ///         }
    ///         other => { other?; }
    ///     }
    ///     let _x = s.alloc::<f32>(1024)?; // the scope keeps working
    ///     Ok(())
    /// })
    /// # }
    /// ```
    pub fn alloc<T: DeviceRepr>(&'s self, len: usize) -> Result<DeviceBuffer<'s, T>> {
        self.note_frees();
        DeviceBuffer::alloc(&self.token, len)
    }

    /// Allocates `len` zeroed elements on the scope's stream (blocking only when out of
    /// memory, like [`alloc`](Self::alloc)).
    pub fn alloc_zeroed<T: DeviceRepr>(&'s self, len: usize) -> Result<DeviceBuffer<'s, T>> {
        let mut buf = self.alloc(len)?;
        self.zero(&mut buf)?;
        Ok(buf)
    }
}
