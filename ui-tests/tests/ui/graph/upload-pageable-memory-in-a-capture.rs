//! Uploading a pageable `Vec` inside a capture.
//!
//! A graph replays its copies long after the capture, so their host memory must be
//! pinned memory the graph holds; a pageable copy needs the host (staged or blocking),
//! which a capture cannot record. Lend a `PinnedBuffer` to the capture instead.
use stream_core::{Device, Error};

fn f(dev: &Device) -> Result<(), Error> {
    let input = vec![1.0f32; 16];
    let (_graph, ()) = dev.capture((), |g, ()| {
        let _x = g.upload(&input)?;
        Ok::<_, Error>(())
    })?;
    Ok(())
}

fn main() {
    let _ = f;
}
