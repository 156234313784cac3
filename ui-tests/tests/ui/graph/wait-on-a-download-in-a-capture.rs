//! Waiting inside a capture for a download to land.
//!
//! A capture runs nothing: `copy_to_host` records a copy node that runs at every replay,
//! so there is nothing to wait for yet. Wait on the `Pending` that `Scope::replay`
//! returns, then read the output through `Graph::held`.
use stream_core::{Device, Error};

fn f(dev: &Device) -> Result<(), Error> {
    let out = dev.alloc_pinned::<f32>(16)?;
    let (_graph, ()) = dev.capture(out, |g, mut out| {
        let x = g.alloc_zeroed::<f32>(16)?;
        g.copy_to_host(&x, &mut out)?.wait()?;
        Ok::<_, Error>(())
    })?;
    Ok(())
}

fn main() {
    let _ = f;
}
