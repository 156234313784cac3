//! Waiting twice on one `Pending`.
//!
//! `wait` consumes the `Pending` and hands the host memory back (type state, safety
//! rule 5); a second `wait` would hand out a second `&mut` to the same memory.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut out = vec![0f32; 16];
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        let pending = s.copy_to_host(&x, &mut out)?;
        pending.wait()?;
        pending.wait()?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
