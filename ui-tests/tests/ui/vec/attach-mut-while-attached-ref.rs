//! Attaching a `DeviceVec` mutably while it is attached read-only in the same scope.
//!
//! The read-only view promises the memory does not change while it is used; a writable
//! view of the same memory would break that. `attach_ref` borrows the `DeviceVec`
//! shared for the whole scope.
use stream_core::{scope, DeviceVec, Error, Stream};

fn f(stream: &Stream, mut weights: DeviceVec<f32>) -> Result<(), Error> {
    scope(stream, |s| {
        let ro = s.attach_ref(&weights)?;
        let mut rw = s.attach(&mut weights)?;
        s.copy_device(&ro, &mut rw)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
