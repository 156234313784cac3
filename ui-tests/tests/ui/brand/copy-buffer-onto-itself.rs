//! A device-to-device copy whose source and destination are the same buffer.
//!
//! `cuMemcpyDtoDAsync` on overlapping ranges is undefined. The destination is borrowed
//! `&mut` for the call, so the source cannot alias it.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    scope(stream, |s| {
        let mut x = s.alloc_zeroed::<f32>(16)?;
        s.copy_device(&x, &mut x)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
