//! A graph branch recorded with `fork_with_priority` using the capture's buffer without
//! it being lent.
//!
//! The branch's brand is fresh, so the capture's memory is not its own: nothing would
//! order the branch's use after the capture's writes recorded beside it. Lend it:
//! `g.fork_with_priority(p, &mut x, |c, mut x| ...)`.
use stream_core::{Device, Error};

fn f(dev: &Device) -> Result<(), Error> {
    let (_graph, ()) = dev.capture((), |g, ()| {
        let mut x = g.alloc_zeroed::<f32>(16)?;
        g.fork_with_priority(-1, (), |c, ()| c.fill(&mut x, 1.0))?;
        Ok::<_, Error>(())
    })?;
    Ok(())
}

fn main() {
    let _ = f;
}
