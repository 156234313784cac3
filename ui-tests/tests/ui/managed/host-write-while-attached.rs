//! Writing a `ManagedVec` on the host while it is attached to a scope.
//!
//! A copy or kernel enqueued through the view may read it at any moment; the write would
//! race with it. `attach_managed` borrows the vec mutably until the scope ends.
use stream_core::{scope, Error, ManagedVec, Stream};

fn f(stream: &Stream, data: &mut ManagedVec<f32>, out: &mut [f32]) -> Result<(), Error> {
    scope(stream, |s| {
        let view = s.attach_managed(data)?;
        s.copy_to_host(&view, out)?;
        data.host_mut()?[0] = 2.0;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
