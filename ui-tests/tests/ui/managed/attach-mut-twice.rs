//! Attaching one `ManagedVec` mutably twice in a scope.
//!
//! Two writable views of the same memory could be passed to one operation as source and
//! destination, or as two outputs of a kernel. `attach_managed` borrows the vec mutably
//! for the whole scope, like a `&mut`.
use stream_core::{scope, Error, ManagedVec, Stream};

fn f(stream: &Stream, data: &mut ManagedVec<f32>) -> Result<(), Error> {
    scope(stream, |s| {
        let a = s.attach_managed(data)?;
        let mut b = s.attach_managed(data)?;
        s.copy_device(&a, &mut b)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
