//! Dropping a download's destination inside the scope.
//!
//! Freeing host memory the DMA is still writing is a use after free (the Open3D bug);
//! `copy_to_host` borrows `out` for the whole scope (safety rule 3).
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut out = vec![0f32; 16];
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        let _pending = s.copy_to_host(&x, &mut out)?;
        drop(out);
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
