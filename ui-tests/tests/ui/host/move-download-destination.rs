//! Moving a download's destination away (`let moved = out;`) inside the scope.
//!
//! Whoever receives the `Vec` may read, write or free memory the DMA is still writing;
//! `copy_to_host` borrows `out` for the whole scope (safety rule 3).
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut out = vec![0f32; 16];
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        let _pending = s.copy_to_host(&x, &mut out)?;
        let moved = out;
        println!("{}", moved.len());
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
