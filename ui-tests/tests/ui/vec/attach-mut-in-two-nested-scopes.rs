//! Attaching one `DeviceVec` in an outer scope (writable) and an inner scope on
//! another stream (read-only).
//!
//! The two streams are not ordered with each other: the inner scope could read the
//! memory while the outer scope's stream writes it. The outer `attach` borrows the
//! `DeviceVec` mutably until the outer scope ends.
use stream_core::{scope, DeviceVec, Error, Stream};

fn f(a: &Stream, b: &Stream, mut weights: DeviceVec<f32>) -> Result<(), Error> {
    let mut out = vec![0f32; weights.len()];
    scope(a, |s| {
        let mut w = s.attach(&mut weights)?;
        s.fill(&mut w, 1.0)?;
        scope(b, |t| {
            let r = t.attach_ref(&weights)?;
            t.copy_to_host(&r, &mut out)?.wait()?;
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
