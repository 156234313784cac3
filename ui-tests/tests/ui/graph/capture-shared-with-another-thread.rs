//! Issuing capture work from another thread.
//!
//! A capture, like a scope, is driven from the thread that opened it (its brand is not
//! `Send` or `Sync`).
use stream_core::{Device, Error};

fn f(dev: &Device) -> Result<(), Error> {
    let (_graph, ()) = dev.capture((), |g, ()| {
        std::thread::scope(|t| {
            t.spawn(|| g.alloc::<f32>(16).map(drop));
        });
        Ok::<_, Error>(())
    })?;
    Ok(())
}

fn main() {
    let _ = f;
}
