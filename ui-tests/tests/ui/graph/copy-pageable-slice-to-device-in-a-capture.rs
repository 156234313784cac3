//! Copying a pageable slice into device memory inside a capture.
//!
//! Only views of pinned memory the graph holds are accepted, whatever the slice's
//! origin: the capture cannot know a plain slice outlives the graph.
use stream_core::{Device, Error};

fn f(dev: &Device) -> Result<(), Error> {
    let input = vec![1.0f32; 16];
    let (_graph, ()) = dev.capture((), |g, ()| {
        let mut x = g.alloc::<f32>(16)?;
        g.copy_to_device(&input[..], &mut x)?;
        Ok::<_, Error>(())
    })?;
    Ok(())
}

fn main() {
    let _ = f;
}
