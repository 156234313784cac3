//! Using a parent's buffer on the child's stream without lending or handing it off.
//!
//! Work on the child's stream is not ordered after the parent's work that comes after
//! the fork started, nor before the parent's later free. The child's brand `'c` is
//! fresh, so the parent's buffer is not its memory: lend it with `s.fork(b, &x, ...)`.
use stream_core::{scope, Error, Stream};

fn f(a: &Stream, b: &Stream, out: &mut [f32]) -> Result<(), Error> {
    scope(a, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        s.fork(b, (), |c, ()| {
            c.copy_to_host(&x, out)?;
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
