//! Returning a download's `Pending` from the scope's closure.
//!
//! Waiting on it after the scope would be harmless, but the `Pending` holds the
//! destination `&mut` and an event of the scope's stream: it is branded and cannot
//! leave the scope (safety rules 2 and 5).
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut out = vec![0f32; 16];
    let pending = scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        let pending = s.copy_to_host(&x, &mut out)?;
        Ok::<_, Error>(pending)
    })?;
    pending.wait()?;
    Ok(())
}

fn main() {
    let _ = f;
}
