//! Dropping the `Pending` of a download, then reading its destination.
//!
//! Dropping a `Pending` does not wait for the copy (only `wait` does), so `out` stays
//! borrowed until the scope ends (safety rule 5).
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut out = vec![0f32; 16];
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        let pending = s.copy_to_host(&x, &mut out)?;
        drop(pending);
        println!("{}", out[0]);
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
