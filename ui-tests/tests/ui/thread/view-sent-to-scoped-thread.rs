//! Sending (copying) a read-only `DeviceSlice` into a `std::thread::scope` thread.
//!
//! A view is only meaningful on the scope's stream, from the scope's thread. Branded
//! views are neither `Send` nor `Sync`, although `DeviceSlice` is `Copy`.
use stream_core::{scope, DeviceSlice, Error, Stream};

fn len_of(view: DeviceSlice<'_, '_, f32>) -> usize {
    view.len()
}

fn f(stream: &Stream) -> Result<(), Error> {
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        let view = x.slice(..)?;
        std::thread::scope(|threads| {
            threads.spawn(move || len_of(view));
        });
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
