//! Reading a `DeviceVec` back after a fork whose child attached it, inside the scope.
//!
//! The child's work on it may still be running (the fork joined by an event, not the
//! host); an attached `DeviceVec` stays borrowed until the outermost scope ends.
use stream_core::{scope, DeviceVec, Error, Stream};

fn f(a: &Stream, b: &Stream, mut v: DeviceVec<f32>) -> Result<(), Error> {
    scope(a, |s| {
        s.fork(b, (), |c, ()| {
            let mut w = c.attach(&mut v)?;
            c.fill(&mut w, 1.0)?;
            Ok::<_, Error>(())
        })?;
        let _host = v.to_host_vec()?;
        Ok(())
    })
}

fn main() {
    let _ = f;
}
