//! Writing an upload's source while the copy may still be reading it.
//!
//! `upload` borrows `input` shared for the whole scope (safety rule 3): the host may
//! read it, but a write would race the DMA and the device could get either value.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut input = vec![1f32; 16];
    scope(stream, |s| {
        let _x = s.upload(&input)?;
        input[0] = 2.0;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
