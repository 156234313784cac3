//! [`Scope::hand_off`]: moving a device buffer from one scope's stream to another's.
//!
//! The source stream records an event after all the work it has enqueued, the
//! destination stream waits for it (on the GPU), and the buffer comes out branded by
//! the destination scope, which will free it on its own stream. Because the old buffer
//! is moved into the call, the source can no longer use it; because the new one carries
//! the destination's brand, only the destination can. The free happens on the stream
//! that used the buffer last, after everything it did with it, and no earlier: memory
//! is never freed while another stream may still read it, and never held longer.

use crate::device::peer::grant_reach;
use crate::error::Result;
use crate::memory::{DeviceBuffer, DeviceRepr};
use crate::scope::Scope;

impl<'s, 'env> Scope<'s, 'env> {
    /// Hands `buffer` from this scope to `to` (another scope or fork, on this device or
    /// another): `to`'s stream waits for this scope's work so far, then owns the buffer
    /// and frees it when it is dropped. The host does not block.
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
    /// When `to` runs on another device, the buffer stays where it is (its device's
    /// memory), and `to`'s kernels and copies reach it over the peer path: the pool of
    /// every device whose memory this scope may hold grants `to`'s device access first,
    /// once per pair (see [`Scope::fork`]), or the call returns
    /// [`Error::PeerAccessUnavailable`](crate::Error::PeerAccessUnavailable) naming the
    /// pair, and the buffer is freed on this scope's stream. `to` frees it on its own
    /// stream, which the driver accepts for another device's pool memory (a
    /// stream-ordered free names only its stream; measured on 2 H200s).
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
        let _nvtx = crate::driver::nvtx::range(c"stream_core::hand_off");
        let reach = self.reach();
        if to.device().inner.device != self.device().inner.device {
            // On error `buffer` is dropped here, freed on its own stream.
            grant_reach(&to.device().inner, reach, &self.device().inner)?;
        }
        // `to` frees the buffer on its stream from now on, and may hold memory of every
        // device this scope may.
        to.note_frees();
        to.widen_reach(reach);
        buffer.handed_off(&to.token)
    }
}
