//! Keeping a view of the graph's pinned memory past the capture.
//!
//! A view is branded by its capture; after it the host reaches held memory only through
//! the graph (`Graph::held`), which replays borrow.
use stream_core::{Device, Error, PinnedSliceMut};

fn f(dev: &Device) -> Result<(), Error> {
    let out = dev.alloc_pinned::<f32>(16)?;
    let mut kept: Option<PinnedSliceMut<'_, '_, f32>> = None;
    let (_graph, ()) = dev.capture(out, |_g, out| {
        kept = Some(out);
        Ok::<_, Error>(())
    })?;
    println!("{:?}", kept);
    Ok(())
}

fn main() {
    let _ = f;
}
