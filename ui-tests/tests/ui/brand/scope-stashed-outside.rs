//! Saving the `&Scope` in a variable declared outside the scope.
//!
//! With the scope handle, code after `scope` returned could enqueue copies that borrow
//! host memory the final synchronisation no longer covers. The handle is branded
//! (safety rule 2), like `std::thread::Scope`.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut saved = None;
    scope(stream, |s| {
        saved = Some(s);
        Ok::<_, Error>(())
    })?;
    println!("{}", saved.is_some());
    Ok(())
}

fn main() {
    let _ = f;
}
