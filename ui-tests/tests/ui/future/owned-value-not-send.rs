//! What `run_owned` owns may be released on the completion thread (when the future is
//! dropped early), so it must be `Send`: an `Rc` is not.
use std::rc::Rc;

use stream_core::{Error, Stream};

fn request(stream: &Stream) {
    let shared = Rc::new(vec![1.0f32; 256]);
    let _future = stream.run_owned(shared, |s, shared| {
        let _x = s.upload(&shared[..])?;
        Ok::<_, Error>(())
    });
}

fn main() {
    let _ = request;
}
