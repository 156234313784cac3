//! Reading a `ManagedVec` on the host after `prefetch_to_host` but before `wait`.
//!
//! The migration, and the kernels before it, may still be running. The elements come
//! back only through the `Pending`'s `wait`; the vec itself stays attached (borrowed)
//! until the scope ends.
use stream_core::{scope, Error, ManagedVec, Stream};

fn f(stream: &Stream, data: &mut ManagedVec<u32>) -> Result<(), Error> {
    scope(stream, |s| {
        let mut view = s.attach_managed(data)?;
        s.fill(&mut view, 7)?;
        let pending = s.prefetch_to_host(view)?;
        let first = data.host()?[0];
        let host = pending.wait()?;
        println!("{first} {}", host[0]);
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
