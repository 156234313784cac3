//! Writing a `ManagedVec` on the host while a scope has it attached read-only.
//!
//! The scope's work reads it (the host may too), so nothing may write it: a read-only
//! attach borrows the vec shared until the scope ends.
use stream_core::{scope, Error, ManagedVec, Stream};

fn f(stream: &Stream, data: &mut ManagedVec<f32>, out: &mut [f32]) -> Result<(), Error> {
    scope(stream, |s| {
        let view = s.attach_managed_ref(data)?;
        s.copy_to_host(&view, out)?;
        println!("{}", data.host()?[0]);
        data.host_mut()?[0] = 2.0;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
