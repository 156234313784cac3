//! Replacing a download's destination (`out = vec![]`) while the copy may still run.
//!
//! The assignment frees the old allocation the DMA is writing into (use after free);
//! `copy_to_host` borrows `out` for the whole scope (safety rule 3).
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut out = vec![0f32; 16];
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        let _pending = s.copy_to_host(&x, &mut out)?;
        out = vec![];
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
