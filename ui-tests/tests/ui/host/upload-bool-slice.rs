//! Uploading a `&[bool]` to the device.
//!
//! Device memory can come to hold any bytes (uninitialised allocations, kernels), and a
//! later download would put them into host `bool`s, where only 0 and 1 are valid:
//! undefined behaviour. Transfers accept only `T: DeviceRepr`, the types for which
//! every bit pattern is a valid value; upload `u8`s instead.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let flags = vec![false; 16];
    scope(stream, |s| {
        let _x = s.upload(&flags)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
