//! Reading host memory a child's download writes, after the fork but before the scope
//! ends.
//!
//! The fork joins the child's stream with an event, not a host wait, so the copy may
//! still be running; the destination stays borrowed until the outermost scope's final
//! synchronisation (`'env`).
use stream_core::{scope, Error, Stream};

fn f(a: &Stream, b: &Stream) -> Result<(), Error> {
    let mut out = vec![0f32; 16];
    scope(a, |s| {
        s.fork(b, (), |c, ()| {
            let y = c.alloc_zeroed::<f32>(16)?;
            c.copy_to_host(&y, &mut out)?;
            Ok::<_, Error>(())
        })?;
        println!("{}", out[0]);
        Ok(())
    })
}

fn main() {
    let _ = f;
}
