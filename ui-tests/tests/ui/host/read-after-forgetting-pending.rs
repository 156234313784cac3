//! Forgetting the `Pending` of a download, then reading its destination.
//!
//! `mem::forget` is safe, so it must not end the borrow: `out` stays borrowed until the
//! scope's own synchronisation (safety rules 1 and 5), and the read is rejected.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut out = vec![0f32; 16];
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        let pending = s.copy_to_host(&x, &mut out)?;
        std::mem::forget(pending);
        println!("{}", out[0]);
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
