//! Downloading into a pageable `Vec` inside a capture.
//!
//! The copy would run at every replay into memory the graph does not hold (and a
//! pageable download blocks the host). Download into a `PinnedBuffer` lent to the
//! capture, and read it through `Graph::held` once a replay is complete.
use stream_core::{Device, Error};

fn f(dev: &Device) -> Result<(), Error> {
    let mut out = vec![0.0f32; 16];
    let (_graph, ()) = dev.capture((), |g, ()| {
        let x = g.alloc_zeroed::<f32>(16)?;
        g.copy_to_host(&x, &mut out)?;
        Ok::<_, Error>(())
    })?;
    Ok(())
}

fn main() {
    let _ = f;
}
