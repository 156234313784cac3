//! Dropping a `ManagedVec` inside the scope it is attached to.
//!
//! Work enqueued through the view (or a prefetch) may still run; freeing the memory
//! under it is a use after free. `attach_managed` borrows the vec until the scope's
//! final synchronisation.
use stream_core::{scope, Error, ManagedVec, Stream};

fn f(stream: &Stream, mut data: ManagedVec<f32>) -> Result<(), Error> {
    scope(stream, |s| {
        let mut view = s.attach_managed(&mut data)?;
        s.fill(&mut view, 1.0)?;
        drop(data);
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
