//! Writing host memory a child's upload reads, after the fork but before the scope ends.
//!
//! The child's copy may still be reading it: the fork does not block the host.
use stream_core::{scope, Error, Stream};

fn f(a: &Stream, b: &Stream) -> Result<(), Error> {
    let mut input = vec![1f32; 16];
    scope(a, |s| {
        s.fork(b, (), |c, ()| {
            let _y = c.upload(&input)?;
            Ok::<_, Error>(())
        })?;
        input[0] = 2.0;
        Ok(())
    })
}

fn main() {
    let _ = f;
}
