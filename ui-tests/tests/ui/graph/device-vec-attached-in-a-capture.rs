//! Attaching a `DeviceVec` inside a capture, as in a scope.
//!
//! The graph uses the vec at every replay, after the capture: it must hold it for as
//! long as it exists. Lend it to `Device::capture` instead.
use stream_core::{Device, Error};

fn f(dev: &Device) -> Result<(), Error> {
    let mut v = dev.alloc_vec::<f32>(16)?;
    let (_graph, ()) = dev.capture((), |g, ()| {
        let mut view = g.attach(&mut v)?;
        g.fill(&mut view, 1.0)?;
        Ok::<_, Error>(())
    })?;
    Ok(())
}

fn main() {
    let _ = f;
}
