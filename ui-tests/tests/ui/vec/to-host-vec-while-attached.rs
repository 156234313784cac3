//! Reading a `DeviceVec` back with `to_host_vec()` while it is attached mutably.
//!
//! `to_host_vec` copies on another (housekeeping) stream, not ordered with the scope's
//! stream: it could read the memory while the scope's work is writing it. `attach`
//! borrows the `DeviceVec` mutably until the scope's final synchronisation.
use stream_core::{scope, DeviceVec, Error, Stream};

fn f(stream: &Stream, mut weights: DeviceVec<f32>) -> Result<(), Error> {
    scope(stream, |s| {
        let mut w = s.attach(&mut weights)?;
        s.fill(&mut w, 1.0)?;
        let host = weights.to_host_vec()?;
        println!("{}", host.len());
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
