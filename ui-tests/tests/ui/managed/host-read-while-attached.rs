//! Reading a `ManagedVec` on the host while it is attached to a scope.
//!
//! The scope's kernels may be writing it right now (and on a device without concurrent
//! managed access, touching it while a kernel runs faults). `attach_managed` borrows the
//! vec mutably until the scope ends; `prefetch_to_host` and `wait` hand it back earlier.
use stream_core::{scope, Error, ManagedVec, Stream};

fn f(stream: &Stream, data: &mut ManagedVec<f32>) -> Result<(), Error> {
    scope(stream, |s| {
        let mut view = s.attach_managed(data)?;
        s.fill(&mut view, 1.0)?;
        let first = data.host()?[0];
        println!("{first}");
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
