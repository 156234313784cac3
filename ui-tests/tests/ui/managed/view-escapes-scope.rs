//! Returning an attached `ManagedVec`'s view from the scope's closure.
//!
//! After the scope the host may touch the vec again, and a view used by a later scope
//! would not be covered by any synchronisation. The view carries the scope's brand `'s`,
//! which cannot name anything outside the scope.
use stream_core::{scope, Error, ManagedVec, Stream};

fn f(stream: &Stream, data: &mut ManagedVec<f32>) -> Result<(), Error> {
    let escaped = scope(stream, |s| {
        let view = s.attach_managed(data)?;
        Ok::<_, Error>(view)
    })?;
    println!("{}", escaped.len());
    Ok(())
}

fn main() {
    let _ = f;
}
