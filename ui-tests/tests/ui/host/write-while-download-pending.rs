//! Writing a download's destination while the copy may still be running.
//!
//! `copy_to_host` borrows `out` mutably for the whole scope (safety rule 3): the host's
//! write and the DMA's would race, and either could win.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut out = vec![0f32; 16];
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        let _pending = s.copy_to_host(&x, &mut out)?;
        out[0] = 1.0;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
