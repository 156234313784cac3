//! Downloading into a pinned buffer the graph holds only for reading.
//!
//! `&input` lends the buffer shared: the host may read it at any time, even during a
//! replay, so the graph must not write it. Lend it `&mut` (or move it in) to write it.
use stream_core::{Device, Error};

fn f(dev: &Device) -> Result<(), Error> {
    let input = dev.alloc_pinned::<f32>(16)?;
    let (_graph, ()) = dev.capture(&input, |g, mut input| {
        let x = g.alloc_zeroed::<f32>(16)?;
        g.copy_to_host(&x, &mut input)?;
        Ok::<_, Error>(())
    })?;
    Ok(())
}

fn main() {
    let _ = f;
}
