//! Using a view of a `DeviceBuffer` after the buffer was dropped.
//!
//! Dropping the buffer enqueues its free; a copy through the view after that would
//! read freed device memory. A view borrows the buffer it was taken from, like `&[T]`
//! borrows a `Vec`.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut out = vec![0f32; 8];
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        let view = x.slice(..8)?;
        drop(x);
        s.copy_to_host(&view, &mut out)?.wait()?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
