//! Using the graph's own buffer on a scope, inside the capture.
//!
//! Nothing of the capture has run: the buffer has no memory until a replay, and only
//! during it.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut out = vec![0.0f32; 16];
    scope(stream, |s| {
        let (_graph, ()) = s.capture((), |g, ()| {
            let y = g.alloc_zeroed::<f32>(16)?;
            s.copy_to_host(&y, &mut out)?.wait()?;
            Ok::<_, Error>(())
        })?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
