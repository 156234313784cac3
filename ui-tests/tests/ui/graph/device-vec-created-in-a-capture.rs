//! Creating a `DeviceVec` inside a capture.
//!
//! `upload_vec` blocks the host until the copy is done, which a capture cannot record;
//! the capture hands out no `Device`. Create it before and lend it to the capture.
use stream_core::{Device, Error};

fn f(dev: &Device) -> Result<(), Error> {
    let (_graph, ()) = dev.capture((), |g, ()| {
        let _v = g.device().upload_vec(&[1.0f32; 16])?;
        Ok::<_, Error>(())
    })?;
    Ok(())
}

fn main() {
    let _ = f;
}
