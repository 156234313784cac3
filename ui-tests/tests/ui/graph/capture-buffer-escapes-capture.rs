//! Returning the graph's own buffer from the capture.
//!
//! It is allocated and freed inside each replay (its free node is where it is dropped):
//! branded by the capture, it cannot leave it.
use stream_core::{Device, Error};

fn f(dev: &Device) -> Result<(), Error> {
    let (_graph, escaped) = dev.capture((), |g, ()| {
        let x = g.alloc_zeroed::<f32>(16)?;
        Ok::<_, Error>(x)
    })?;
    println!("{}", escaped.len());
    Ok(())
}

fn main() {
    let _ = f;
}
