//! Moving a pinned buffer the graph holds.
//!
//! The graph borrows it for its whole life; a move would let it be dropped (its block
//! given back to the pool) while the graph still names its address.
use stream_core::{scope, Device, Error, Stream};

fn f(dev: &Device, stream: &Stream) -> Result<(), Error> {
    let mut output = dev.alloc_pinned::<f32>(16)?;
    let (mut graph, ()) = dev.capture(&mut output, |g, mut output| {
        let x = g.alloc_zeroed::<f32>(16)?;
        g.copy_to_host(&x, &mut output)?;
        Ok::<_, Error>(())
    })?;
    let moved = output;
    scope(stream, |s| s.replay(&mut graph).map(drop))?;
    drop(moved);
    Ok(())
}

fn main() {
    let _ = f;
}
