//! [`Scope::hand_off`]: moving a device buffer from one scope's stream to another's.
//!
//! The source stream records an event after all the work it has enqueued, the
//! destination stream waits for it (on the GPU), and the buffer comes out branded by
//! the destination scope, which will free it on its own stream. Because the old buffer
//! is moved into the call, the source can no longer use it; because the new one carries
//! the destination's brand, only the destination can. The free happens on the stream
//! that used the buffer last, after everything it did with it, and no earlier: memory
//! is never freed while another stream may still read it, and never held longer.

use crate::device::Event;
use crate::error::Result;
use crate::memory::brand::Rebrand;
use crate::memory::{DeviceBuffer, DeviceRepr};
use crate::scope::Scope;

impl<'s, 'env> Scope<'s, 'env> {
    /// Hands `buffer` from this scope to `to` (another scope or fork on the same device):
    /// `to`'s stream waits for this scope's work so far, then owns the buffer and frees
    /// it when it is dropped. The host does not block.
    ///
    /// ```no_run
    /// # use stream_core::{scope, Error, Stream};
    /// # fn f(a: &Stream, b: &Stream, input: &[f32], out: &mut [f32]) -> Result<(), Error> {
    /// scope(a, |s| {
    ///     let x = s.upload(input)?;          // written on `a`
    ///     s.fork(b, (), |c, ()| {
    ///         let x = s.hand_off(x, c)?;    // now `c`'s: ordered after the upload
    ///         c.copy_to_host(&x, out)?;     // read on `b`; freed on `b` at the end
    ///         Ok::<_, Error>(())
    ///     })
    /// })
    /// # }
    /// ```
    ///
    /// Returns [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) when `to` runs on another device; the buffer is
    /// then freed on this scope's stream.
    ///
    /// The old handle is moved, so using it afterwards does not compile (see
    /// `ui-tests/tests/ui/fork/use-after-hand-off.rs`):
    ///
    /// ```compile_fail,E0382
    /// # use stream_core::{scope, Error, Stream};
    /// # fn f(a: &Stream, b: &Stream) -> Result<(), Error> {
    /// scope(a, |s| {
    ///     let mut x = s.alloc_zeroed::<f32>(16)?;
    ///     s.fork(b, (), |c, ()| {
    ///         let _y = s.hand_off(x, c)?;
    ///         s.fill(&mut x, 1.0)?; // error: `x` was moved to the child
    ///         Ok::<_, Error>(())
    ///     })
    /// })
    /// # }
    /// ```
    pub fn hand_off<'t, T: DeviceRepr>(
        &'s self,
        buffer: DeviceBuffer<'s, T>,
        to: &Scope<'t, '_>,
    ) -> Result<DeviceBuffer<'t, T>> {
        to.device().ensure_same_device(self.device())?;
        // `to` frees the buffer on its stream from now on.
        to.note_frees();
        let to_stream = &to.stream.raw;
        if !buffer.is_empty() {
            // On error `buffer` is dropped here, freed on its own stream after its own
            // work.
            Event::order(&self.device().inner.context, &self.stream.raw, to_stream)?;
        }
        // SAFETY: `to_stream` is the stream of the scope branded `'t` (`to`), and it now
        // waits for all the work this scope has enqueued (the event above; an empty buffer
        // has no work to wait for). The buffer is moved in, so this scope never uses it
        // again.
        let permit = unsafe { Rebrand::new(to_stream) };
        Ok(buffer.rebranded(&permit))
    }
}
