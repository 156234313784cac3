//! Uploading from host memory a pending download is still writing.
//!
//! The upload would read `out` while the DMA writes it; `copy_to_host` borrows `out`
//! mutably for the whole scope (safety rule 3), so no other transfer may borrow it.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut out = vec![0f32; 16];
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        let _pending = s.copy_to_host(&x, &mut out)?;
        let _y = s.upload(&out)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
