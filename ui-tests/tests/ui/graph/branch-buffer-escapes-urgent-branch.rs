//! Returning a buffer of a graph branch recorded with `fork_with_priority` out of it.
//!
//! The branch's memory is branded by the branch, as a scope's fork's child is: its uses
//! after the branch would not depend on the branch's work in the graph.
use stream_core::{Device, Error};

fn f(dev: &Device) -> Result<(), Error> {
    let (_graph, ()) = dev.capture((), |g, ()| {
        let _y = g.fork_with_priority(-1, (), |c, ()| {
            let y = c.alloc_zeroed::<f32>(16)?;
            Ok::<_, Error>(y)
        })?;
        Ok::<_, Error>(())
    })?;
    Ok(())
}

fn main() {
    let _ = f;
}
